package feishu_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
)

// TestMessageKinds runs each kind of message through the fake and the
// long connection and checks the normalised event.
func TestMessageKinds(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	srv.AddUser(bob)
	ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	bot := srv.BotID()
	tests := []struct {
		name  string
		in    feishutest.Incoming
		segs  []channel.Segment
		toMe  bool
		chat  channel.Chat
		check func(t *testing.T, ev channel.Event)
	}{
		{
			name: "group mention of the bot and of Bob",
			in:   feishutest.Incoming{ChatID: group, From: alice, Text: "look at this", MentionBot: true, Mentions: []feishutest.User{bob}},
			segs: []channel.Segment{mention(bot, "@"+feishutest.DefaultBotName), channel.Text(" "), mention(bob.OpenID, "@Bob"), channel.Text(" look at this")},
			toMe: true,
			chat: channel.Chat{Kind: channel.Group, ID: group},
		},
		{
			name: "private",
			in:   feishutest.Incoming{From: alice, Text: "你好 👋🏽"},
			segs: []channel.Segment{channel.Text("你好 👋🏽")},
			chat: channel.Chat{Kind: channel.Private, ID: alice.OpenID},
		},
		{
			name: "topic group",
			in:   feishutest.Incoming{ChatID: "oc_topics", ChatType: "topic_group", From: alice, Text: "in a topic"},
			segs: []channel.Segment{channel.Text("in a topic")},
			chat: channel.Chat{Kind: channel.Group, ID: "oc_topics"},
		},
		{
			name: "post with a title, a mention, a link and a picture",
			in: feishutest.Incoming{ChatID: group, From: alice, MentionBot: true, Post: &feishutest.Post{Title: "Plan", Paragraphs: [][]feishutest.PostElement{
				{{Tag: "text", Text: "see "}, {Tag: "a", Text: "the doc", Href: "https://example.com/doc"}, {Tag: "text", Text: " with "}, {Tag: "at", UserID: bob.OpenID}},
				{{Tag: "img", ImageKey: "img_v3_post"}},
			}}},
			toMe: true,
			chat: channel.Chat{Kind: channel.Group, ID: group},
			check: func(t *testing.T, ev channel.Event) {
				require.Equal(t, "Plan\n see the doc with \n", ev.Text())
				require.True(t, ev.Mentions(bot))
				require.True(t, ev.Mentions(bob.OpenID))
				require.True(t, ev.Has(channel.SegLink))
				require.True(t, ev.Has(channel.SegImage))
				for _, s := range ev.Segments {
					if s.Type == channel.SegImage {
						require.Equal(t, ev.MessageID+"/img_v3_post", s.Media.FileID)
					}
				}
			},
		},
		{
			name: "voice",
			in:   feishutest.Incoming{From: alice, MessageType: "audio", Content: `{"file_key":"file_v3_voice","duration":2300}`},
			chat: channel.Chat{Kind: channel.Private, ID: alice.OpenID},
			check: func(t *testing.T, ev channel.Event) {
				require.Equal(t, channel.SegVoice, ev.Segments[0].Type)
				require.Equal(t, 3, ev.Segments[0].Media.Duration)
			},
		},
		{
			name: "sticker",
			in:   feishutest.Incoming{ChatID: group, From: alice, MessageType: "sticker", Content: `{"file_key":"file_v3_sticker"}`},
			chat: channel.Chat{Kind: channel.Group, ID: group},
			check: func(t *testing.T, ev channel.Event) {
				require.Equal(t, channel.SegSticker, ev.Segments[0].Type)
			},
		},
		{
			name: "card",
			in:   feishutest.Incoming{ChatID: group, From: alice, MessageType: "interactive", Content: `{"elements":[]}`},
			segs: []channel.Segment{channel.Text("[interactive]")},
			chat: channel.Chat{Kind: channel.Group, ID: group},
		},
		{
			name: "mention keys that prefix each other",
			in: feishutest.Incoming{ChatID: group, From: alice, Mentions: []feishutest.User{
				{OpenID: "ou_1", Name: "One"}, {OpenID: "ou_2"}, {OpenID: "ou_3"}, {OpenID: "ou_4"}, {OpenID: "ou_5"},
				{OpenID: "ou_6"}, {OpenID: "ou_7"}, {OpenID: "ou_8"}, {OpenID: "ou_9"}, {OpenID: "ou_10", Name: "Ten"},
			}, Text: "@_all hi"},
			chat: channel.Chat{Kind: channel.Group, ID: group},
			check: func(t *testing.T, ev channel.Event) {
				require.True(t, ev.Mentions("ou_1"))
				require.True(t, ev.Mentions("ou_10"))
				require.False(t, ev.ToMe)
				require.Contains(t, ev.Text(), "@all hi")
			},
		},
	}
	for i, tc := range tests {
		p, err := srv.Push(ctx, tc.in)
		require.NoError(t, err, tc.name)
		ev := sink.waitEvents(t, i+1)[i]
		require.NoError(t, ev.Validate(), tc.name)
		require.Equal(t, p.MessageID, ev.MessageID, tc.name)
		require.Equal(t, tc.chat, ev.Chat, tc.name)
		require.Equal(t, tc.in.From.OpenID, ev.Sender.ID, tc.name)
		require.Equal(t, tc.toMe, ev.ToMe, tc.name)
		require.Equal(t, bot, ev.BotID, tc.name)
		if tc.segs != nil {
			require.Equal(t, tc.segs, ev.Segments, tc.name)
		}
		if tc.check != nil {
			tc.check(t, ev)
		}
	}
}

func mention(id, text string) channel.Segment {
	s := channel.Mention(id)
	s.Text = text
	return s
}

// TestSelfEcho: a message whose sender is the bot itself (Feishu does
// not push those, but the history API lists them) is KindSelf.
func TestSelfEcho(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	_, err := srv.Push(tctx(t), feishutest.Incoming{ChatID: group, From: feishutest.User{OpenID: srv.BotID()}, Text: "echo"})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)[0]
	require.Equal(t, channel.KindSelf, ev.Kind)
}
