package feishu_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
	"github.com/personakit/persona/clock"
)

// sendBody decodes the JSON body of a recorded call.
func sendBody(t *testing.T, c feishutest.Call) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(c.Body, &m))
	return m
}

func callsOf(srv *feishutest.Server, ops ...string) []feishutest.Call {
	var out []feishutest.Call
	for _, c := range srv.Calls() {
		for _, op := range ops {
			if c.Op == op {
				out = append(out, c)
			}
		}
	}
	return out
}

func TestSendRendering(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	srv.AddUser(alice)
	srv.AddUser(bob)
	ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	in, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "question", MentionBot: true, Mentions: []feishutest.User{bob}})
	require.NoError(t, err)
	grp := channel.Chat{Kind: channel.Group, ID: group}

	// A reply with mentions: a text message with <at> elements, via the
	// reply API.
	rc, err := ch.Send(ctx, channel.Outgoing{Chat: grp, Text: "answer\nsecond line", ReplyTo: in.MessageID,
		Mentions: []string{alice.OpenID, bob.OpenID}, IdempotencyKey: "turn-1-slot-0"})
	require.NoError(t, err)
	// Markup-like text goes out as a post, literally.
	rc2, err := ch.Send(ctx, channel.Outgoing{Chat: grp, Text: `if a <b and <at user_id="all"></at>`, IdempotencyKey: strings.Repeat("f", 64)})
	require.NoError(t, err)
	// A private chat by open_id.
	rc3, err := ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Private, ID: alice.OpenID}, Text: "hi Alice"})
	require.NoError(t, err)

	sent := srv.Sent()
	require.Len(t, sent, 3)
	require.Equal(t, "reply", sent[0].Op)
	require.Equal(t, in.MessageID, sent[0].ParentID)
	require.Equal(t, "text", sent[0].MsgType)
	require.Equal(t, "@Alice @Bob answer\nsecond line", sent[0].Text)
	require.Equal(t, []string{alice.OpenID, bob.OpenID}, sent[0].Mentions)
	require.Equal(t, "turn-1-slot-0", sent[0].UUID)
	require.Equal(t, []string{sent[0].MessageID}, rc.MessageIDs)
	require.False(t, rc.Time.IsZero())

	require.Equal(t, "send", sent[1].Op)
	require.Equal(t, "post", sent[1].MsgType)
	require.Equal(t, `if a <b and <at user_id="all"></at>`, sent[1].Text, "no mention of everyone: the markup stays text")
	require.Empty(t, sent[1].Mentions)
	require.Equal(t, feishu.SendUUID(strings.Repeat("f", 64)), sent[1].UUID)
	require.Len(t, sent[1].UUID, feishu.MaxUUIDLength)
	require.Equal(t, []string{sent[1].MessageID}, rc2.MessageIDs)

	require.Equal(t, channel.Chat{Kind: channel.Private, ID: alice.OpenID}, sent[2].Chat)
	require.Empty(t, sent[2].UUID, "no idempotency key, no uuid")
	require.Equal(t, []string{sent[2].MessageID}, rc3.MessageIDs)

	calls := callsOf(srv, "send", "reply")
	require.Equal(t, "chat_id", calls[1].Query.Get("receive_id_type"))
	require.Equal(t, "open_id", calls[2].Query.Get("receive_id_type"))
	require.Equal(t, alice.OpenID, sendBody(t, calls[2])["receive_id"])

	// A quote of the bot's reply resolves from the adapter's memory.
	q, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: bob, Text: "thanks", ParentID: rc.MessageIDs[0]})
	require.NoError(t, err)
	var ev channel.Event
	for _, e := range sink.waitEvents(t, 2) {
		if e.MessageID == q.MessageID {
			ev = e
		}
	}
	require.NotNil(t, ev.Quoted)
	require.True(t, ev.Quoted.FromBot)
	require.Equal(t, srv.BotID(), ev.Quoted.Sender.ID)
	require.Equal(t, "answer\nsecond line", ev.Quoted.Text)
	require.Equal(t, "Bob", ev.Sender.Name, "the name learnt from the earlier mention")
}

// TestSendUUIDDeduplicates: a chunk sent again with the same idempotency
// key (a retry after a lost answer) produces no second message.
func TestSendUUIDDeduplicates(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	out := channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: group}, Text: "only once", IdempotencyKey: "fp-123"}

	srv.FailNextSend(feishutest.Failure{Drop: true, StoreFirst: true})
	_, err := ch.Send(ctx, out)
	require.Error(t, err, "the answer was lost")
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
	rc, err := ch.Send(ctx, out)
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 1, "the platform kept one message")
	require.Equal(t, []string{sent[0].MessageID}, rc.MessageIDs, "the retry's receipt names the first message")
	require.Len(t, callsOf(srv, "send"), 2)
}

func TestSendErrorClassification(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	grp := channel.Chat{Kind: channel.Group, ID: group}
	tests := []struct {
		name  string
		f     feishutest.Failure
		class channel.ErrorClass
		retry time.Duration
	}{
		{"HTTP 429 with reset", feishutest.Failure{Status: 429, Code: 99991400, RetryAfter: 7}, channel.ClassRateLimited, 7 * time.Second},
		{"99991400 on a 400", feishutest.Failure{Status: 400, Code: 99991400}, channel.ClassRateLimited, time.Second},
		{"chat rate limit", feishutest.Failure{Status: 400, Code: 230020}, channel.ClassRateLimited, time.Second},
		{"429 without a body", feishutest.Failure{Status: 429}, channel.ClassRateLimited, time.Second},
		{"bot not in group", feishutest.Failure{Code: 230002}, channel.ClassKicked, 0},
		{"group dissolved", feishutest.Failure{Code: 232009}, channel.ClassKicked, 0},
		{"no permission to send", feishutest.Failure{Code: 230035}, channel.ClassMuted, 0},
		{"invalid parameter", feishutest.Failure{Code: 230001}, channel.ClassRejected, 0},
		{"sensitive content", feishutest.Failure{Code: 230022}, channel.ClassRejected, 0},
		{"field validation", feishutest.Failure{Code: 99992402}, channel.ClassRejected, 0},
		{"server error", feishutest.Failure{Status: 500, Code: 1}, channel.ClassTransient, 0},
		{"bad gateway page", feishutest.Failure{Status: 502}, channel.ClassTransient, 0},
		{"connection dropped", feishutest.Failure{Drop: true}, channel.ClassTransient, 0},
	}
	for _, tc := range tests {
		srv.FailNextSend(tc.f)
		_, err := ch.Send(ctx, channel.Outgoing{Chat: grp, Text: tc.name})
		require.Error(t, err, tc.name)
		require.Equal(t, tc.class, channel.Classify(err), "%s: %v", tc.name, err)
		if tc.retry > 0 {
			var rl *channel.RateLimitedError
			require.ErrorAs(t, err, &rl, tc.name)
			require.Equal(t, tc.retry, rl.RetryAfter, tc.name)
		}
	}
	srv.KickBot("oc_kicked")
	_, err := ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: "oc_kicked"}, Text: "x"})
	require.ErrorIs(t, err, channel.ErrKicked)
	var ae *feishu.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 230002, ae.Code)
	require.Equal(t, http.StatusBadRequest, ae.Status)

	srv.AddImage("img_v3_uploaded")
	srv.FailNextSend(feishutest.Failure{Code: 230001})
	_, err = ch.Send(ctx, channel.Outgoing{Chat: grp, Media: []channel.Media{{FileID: "img_v3_uploaded"}}})
	require.ErrorIs(t, err, channel.ErrMediaInvalid, "a rejected image")

	// Refused before any call.
	before := len(srv.Calls())
	for name, out := range map[string]channel.Outgoing{
		"empty":          {Chat: grp},
		"bad chat":       {Chat: channel.Chat{Kind: channel.Group, ID: "a/b"}, Text: "x"},
		"bad kind":       {Chat: channel.Chat{Kind: "channel", ID: "oc_1"}, Text: "x"},
		"bad reply":      {Chat: grp, Text: "x", ReplyTo: "om 1"},
		"bad mention":    {Chat: grp, Text: "x", Mentions: []string{`ou_1"><at user_id="all`}},
		"too long":       {Chat: grp, Text: strings.Repeat("长", feishu.MaxTextRunes+1)},
		"received media": {Chat: grp, Media: []channel.Media{{FileID: "om_1/img_2"}}},
		"a URL":          {Chat: grp, Media: []channel.Media{{URL: "https://example.com/a.png"}}},
	} {
		_, err := ch.Send(ctx, out)
		require.Error(t, err, name)
		require.True(t, channel.Classify(err).Definitive() || errors.Is(err, channel.ErrMediaInvalid), "%s: %v", name, err)
	}
	require.Equal(t, before, len(srv.Calls()), "no call for a send refused locally")
	rc, err := ch.Send(ctx, channel.Outgoing{Chat: grp, Text: strings.Repeat("长", feishu.MaxTextRunes)})
	require.NoError(t, err, "exactly the limit")
	require.Len(t, rc.MessageIDs, 1)

	// Text and an image: two messages, the image second.
	rc, err = ch.Send(ctx, channel.Outgoing{Chat: grp, Text: "look", Media: []channel.Media{{FileID: "img_v3_uploaded"}}, IdempotencyKey: "k"})
	require.NoError(t, err)
	require.Len(t, rc.MessageIDs, 2)
	sent := srv.Sent()
	require.Equal(t, "image", sent[len(sent)-1].MsgType)
	require.Equal(t, feishu.SendUUID("k#1"), sent[len(sent)-1].UUID)
}

// TestTokenCachedAndRefreshed: one tenant token serves many calls; it is
// replaced before it expires (on the injected clock) and at once when
// the platform refuses it; neither the token nor the secret is ever
// logged or put in an error.
func TestTokenCachedAndRefreshed(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	srv := newFake(t, feishutest.Config{Clock: clk})
	log, buf := newLogger()
	ch := newChannel(t, srv, feishu.ModeWebhook, func(c *feishu.Config) { c.Clock, c.Logger = clk, log })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	grp := channel.Chat{Kind: channel.Group, ID: group}
	for range 5 {
		_, err := ch.Send(ctx, channel.Outgoing{Chat: grp, Text: "x"})
		require.NoError(t, err)
	}
	require.Equal(t, 1, srv.CallCount("token"), "one token for every call")
	tokens := map[string]bool{}
	for _, c := range callsOf(srv, "send", "bot_info") {
		tokens[c.Auth] = true
	}
	require.Len(t, tokens, 1)

	clk.Advance(2*time.Hour - 9*time.Minute) // still valid, but inside the refresh margin
	_, err := ch.Send(ctx, channel.Outgoing{Chat: grp, Text: "y"})
	require.NoError(t, err)
	require.Equal(t, 2, srv.CallCount("token"), "replaced before it expires")

	srv.ExpireTokens()
	_, err = ch.Send(ctx, channel.Outgoing{Chat: grp, Text: "z"})
	require.NoError(t, err, "a refused token is replaced and the call repeated")
	require.Equal(t, 3, srv.CallCount("token"))
	waitLog(t, buf, "feishu_token_refused")

	// Errors and logs never carry a credential.
	srv.FailNext("token", feishutest.Failure{Status: 500, Code: 1})
	srv.ExpireTokens()
	_, err = ch.Send(ctx, channel.Outgoing{Chat: grp, Text: "w"})
	require.Error(t, err)
	var secrets []string
	for _, c := range srv.Calls() {
		if c.Auth != "" {
			secrets = append(secrets, c.Auth)
		}
	}
	secrets = append(secrets, srv.AppSecret())
	for _, s := range secrets {
		require.NotContains(t, err.Error(), s)
		require.NotContains(t, buf.String(), s)
	}
}

// TestUnauthorizedEndsRun: wrong credentials end Run with
// ErrUnauthorized, in both modes, without retrying forever.
func TestUnauthorizedEndsRun(t *testing.T) {
	t.Parallel()
	for _, mode := range []feishu.Mode{feishu.ModeWebhook, feishu.ModeWebSocket} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			srv := newFake(t, feishutest.Config{})
			log, buf := newLogger()
			ch := newChannel(t, srv, mode, func(c *feishu.Config) { c.AppSecret, c.Logger = "wrong-secret-value", log })
			err := ch.Run(tctx(t), newRecSink())
			require.ErrorIs(t, err, feishu.ErrUnauthorized)
			require.NotContains(t, err.Error(), "wrong-secret-value")
			require.NotContains(t, buf.String(), "wrong-secret-value")
			require.NotContains(t, buf.String(), srv.AppSecret())
		})
	}
}

func TestSendUUID(t *testing.T) {
	t.Parallel()
	require.Empty(t, feishu.SendUUID(""))
	require.Equal(t, "abc-DEF_123", feishu.SendUUID("abc-DEF_123"))
	long := strings.Repeat("a", 51)
	require.Len(t, feishu.SendUUID(long), 50)
	require.Equal(t, feishu.SendUUID(long), feishu.SendUUID(long), "stable")
	require.NotEqual(t, feishu.SendUUID(long), feishu.SendUUID(long+"b"))
	require.NotEqual(t, "a b", feishu.SendUUID("a b"), "characters outside the safe set are hashed")
	require.Len(t, feishu.SendUUID("a b"), 50)
}
