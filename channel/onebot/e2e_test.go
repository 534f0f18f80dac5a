package onebot_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
)

// TestEndToEnd: per transport, the fake posts a group @-message of the
// bot; the adapter delivers it to the sink with the mention, ToMe, the
// sender's card, role and level and the group seq; a reply with ReplyTo
// and a mention reaches the fake as [reply, at, text], and a second chunk
// without ReplyTo carries no reply segment.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			r := tr.build(t, onebottest.Config{AccessToken: "e2e"}, onebot.Config{AccessToken: "e2e"})
			s := r.run(t)
			ctx := tctx(t)
			bot := r.fake.BotID()

			rec, err := r.fake.EmitMessage(ctx, onebottest.Incoming{
				GroupID: 100200300, UserID: 4242, Nickname: "alice", Card: "阿丽", Role: "admin", Level: "42",
				Message: onebot.Message{seg("at", "qq", bot), text(" 在吗？")},
			})
			require.NoError(t, err)
			id := itoa(int64(rec.ID))
			ev := s.waitMessage(t, id)
			require.NoError(t, ev.Validate())
			require.Equal(t, channel.KindMessage, ev.Kind)
			require.Equal(t, channel.Chat{Kind: channel.Group, ID: "100200300"}, ev.Chat)
			require.Equal(t, bot, ev.BotID)
			require.True(t, ev.ToMe, "ToMe")
			require.True(t, ev.Mentions(bot), "mention of the bot")
			require.Equal(t, " 在吗？", ev.Text())
			require.Equal(t, channel.Sender{ID: "4242", Name: "阿丽", Role: channel.RoleAdmin, Level: 42, LevelKnown: true}, ev.Sender)
			require.Equal(t, rec.Seq, ev.Seq)
			require.Equal(t, rec.Time.Unix(), ev.Time.Unix())
			require.Equal(t, channel.SourceLive, ev.Source)
			require.NotEmpty(t, ev.Raw)

			rc, err := r.ch.Send(ctx, channel.Outgoing{Chat: ev.Chat, Text: "在的", ReplyTo: ev.MessageID, Mentions: []string{"4242"}})
			require.NoError(t, err)
			rc2, err := r.ch.Send(ctx, channel.Outgoing{Chat: ev.Chat, Text: "第二段"})
			require.NoError(t, err)
			sent, err := r.fake.WaitSent(ctx, 2)
			require.NoError(t, err)
			require.Equal(t, "send_group_msg", sent[0].Action)
			require.Equal(t, int64(100200300), sent[0].GroupID)
			require.Equal(t, onebot.Message{seg("reply", "id", ev.MessageID), seg("at", "qq", "4242"), text(" 在的")}, sent[0].Message)
			require.Equal(t, []string{itoa(int64(sent[0].MessageID))}, rc.MessageIDs)
			require.Equal(t, onebot.Message{text("第二段")}, sent[1].Message)
			require.Equal(t, []string{itoa(int64(sent[1].MessageID))}, rc2.MessageIDs)

			// A quote of the bot's reply resolves from the adapter's cache.
			rec2, err := r.fake.EmitMessage(ctx, onebottest.Incoming{
				GroupID: 100200300, UserID: 4242, Nickname: "alice",
				Message: onebot.Message{seg("reply", "id", rc.MessageIDs[0]), text("谢谢")},
			})
			require.NoError(t, err)
			ev2 := s.waitMessage(t, itoa(int64(rec2.ID)))
			require.Equal(t, rc.MessageIDs[0], ev2.QuoteID())
			require.NotNil(t, ev2.Quoted)
			require.True(t, ev2.Quoted.FromBot)
			require.Equal(t, "在的", ev2.Quoted.Text)
			require.False(t, ev2.ToMe, "a quote is not ToMe")
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
