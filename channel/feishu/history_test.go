package feishu_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
)

// TestFetchHistory pages a group's messages newest first; the bot's own
// messages are KindSelf with the bot's id, mentions and quotes intact.
func TestFetchHistory(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	srv.AddUser(alice)
	ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	grp := channel.Chat{Kind: channel.Group, ID: group}
	var last string
	for i := range 60 {
		p, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: fmt.Sprint("msg ", i)})
		require.NoError(t, err)
		last = p.MessageID
	}
	rc, err := ch.Send(ctx, channel.Outgoing{Chat: grp, Text: "bot says hi", ReplyTo: last, Mentions: []string{alice.OpenID}})
	require.NoError(t, err)

	page, err := ch.FetchHistory(ctx, channel.HistoryQuery{Chat: grp, Limit: 100})
	require.NoError(t, err)
	require.Len(t, page.Events, 50, "pages hold at most 50")
	require.NotEmpty(t, page.Next)
	self := page.Events[0]
	require.Equal(t, channel.KindSelf, self.Kind)
	require.Equal(t, rc.MessageIDs[0], self.MessageID)
	require.Equal(t, srv.BotID(), self.Sender.ID)
	require.Equal(t, last, self.QuoteID())
	require.True(t, self.Mentions(alice.OpenID))
	require.Equal(t, " bot says hi", self.Text())
	require.Equal(t, channel.SourceBackfill, self.Source)
	require.Equal(t, "msg 59", page.Events[1].Text())
	require.Equal(t, channel.KindMessage, page.Events[1].Kind)

	next, err := ch.FetchHistory(ctx, channel.HistoryQuery{Chat: grp, Cursor: page.Next, Limit: 100})
	require.NoError(t, err)
	require.Len(t, next.Events, 11)
	require.Empty(t, next.Next)
	require.Equal(t, "msg 0", next.Events[10].Text())

	// A private chat is read once its chat_id is known.
	dm := channel.Chat{Kind: channel.Private, ID: bob.OpenID}
	_, err = ch.FetchHistory(ctx, channel.HistoryQuery{Chat: dm})
	require.Error(t, err, "never seen")
	_, err = srv.Push(ctx, feishutest.Incoming{From: bob, Text: "psst"})
	require.NoError(t, err)
	sink.waitEvents(t, 61)
	page, err = ch.FetchHistory(ctx, channel.HistoryQuery{Chat: dm})
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	require.Equal(t, dm, page.Events[0].Chat)
	require.Equal(t, "psst", page.Events[0].Text())

	srv.FailNext("list", feishutest.Failure{Status: 400, Code: 230027, Msg: "Lack of necessary permissions."})
	_, err = ch.FetchHistory(ctx, channel.HistoryQuery{Chat: grp})
	require.Error(t, err)
}
