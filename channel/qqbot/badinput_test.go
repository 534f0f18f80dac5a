package qqbot_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
)

// Bad frames and payloads are logged and dropped; the connection keeps
// working, and a good message after them arrives once.
func TestGatewayBadInput(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *qqbot.Config) { c.Logger = log; c.MaxFrameBytes = 4096 })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)

	for _, f := range []string{
		``, `not json`, `{"op":`, `[]`, `null`, `{"op":"0"}`, `{"op":0,"s":-3}`, `{"op":99,"d":{}}`,
		"{\"op\":0,\"s\":\xff}", "\xff\xfe", `{"op":10,"d":{"heartbeat_interval":1}}`,
	} {
		require.True(t, srv.PushFrame([]byte(f)))
	}
	for _, d := range []struct{ t, d string }{
		{"FRIEND_ADD", `{"openid":"x"}`},
		{"GROUP_AT_MESSAGE_CREATE", `{"id":"m1","content":"no author"}`},
		{"C2C_MESSAGE_CREATE", `[1,2,3]`},
		{"C2C_MESSAGE_CREATE", `{"id":"bad id","author":{"user_openid":"U"}}`},
		{"AT_MESSAGE_CREATE", "{\"id\":\"m\",\"channel_id\":\"1\",\"author\":{\"id\":\"2\"},\"content\":\"\xff\xfe<@!\"}"},
		{"READY", `{"session_id":""}`},
	} {
		if d.t == "READY" {
			continue // a broken READY ends the connection; tested below
		}
		_, err := srv.PushDispatch(ctx, d.t, json.RawMessage(d.d))
		require.NoError(t, err)
	}
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "still here"})
	require.NoError(t, err)
	evs := sink.waitEvents(t, 2) // the channel message with invalid UTF-8, then this one
	require.Equal(t, "m", evs[0].MessageID)
	require.Equal(t, "\uFFFD\uFFFD<@!", evs[0].Text())
	require.Equal(t, p.ID, evs[1].MessageID)
	require.Len(t, srv.Identifies(), 1, "the bad frames did not cost the connection")
	logs := buf.String()
	require.Contains(t, logs, "qq_frame_dropped")
	require.Contains(t, logs, "qq_event_invalid")
	require.Contains(t, logs, "qq_event_skipped")

	// An oversize frame is acknowledged and dropped; one over the hard
	// limit (16 × MaxFrameBytes) ends the connection, and when it comes
	// again at the same sequence the session is dropped.
	_, err = srv.PushDispatch(ctx, "C2C_MESSAGE_CREATE", json.RawMessage(`{"id":"big","author":{"user_openid":"U"},"content":"`+strings.Repeat("x", 5000)+`"}`))
	require.NoError(t, err)
	_, err = srv.PushDispatch(ctx, "C2C_MESSAGE_CREATE", json.RawMessage(`{"id":"huge","author":{"user_openid":"U"},"content":"`+strings.Repeat("x", 70000)+`"}`))
	require.NoError(t, err)
	require.NoError(t, srv.Wait(ctx, func() bool { return len(srv.Identifies()) == 2 }))
	require.Len(t, srv.Resumes(), 1, "one resume replayed the huge frame; then a new session")
	sink.waitOnline(t, true)
	p2, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "after the big ones"})
	require.NoError(t, err)
	sink.wait(t, "the message after the oversize frames", func(evs, _ []channel.Event, _ []channel.State) bool {
		for _, e := range evs {
			if e.MessageID == p2.ID {
				return true
			}
		}
		return false
	})
	for _, e := range sink.Events() {
		require.NotContains(t, []string{"big", "huge"}, e.MessageID, "never stored half")
	}
	require.Contains(t, buf.String(), "frame over MaxFrameBytes")
}
