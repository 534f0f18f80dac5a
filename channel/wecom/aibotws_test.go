package wecom_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/wecom"
	"github.com/personakit/persona/channel/wecom/wecomtest"
	"github.com/personakit/persona/clock"
)

// wsEnv is an AI bot on the long connection, running.
func wsEnv(t *testing.T, fake func(*wecomtest.Config), adapter func(*wecom.Config)) (*env, *recSink) {
	t.Helper()
	e := newEnv(t, wecomtest.ModeAIBotWS, fake, adapter)
	sink := newRecSink()
	run(t, e.ch, sink)
	sink.waitOnline(t, true)
	return e, sink
}

// TestWSEndToEnd: a private message is answered by its stream (finished
// at once), the next chunk is a message of its own; a group @-message
// quoting the bot's answer is a quote of the bot; a picture is decrypted
// with the message's aeskey.
func TestWSEndToEnd(t *testing.T) {
	t.Parallel()
	e, sink := wsEnv(t, nil, nil)
	ctx := tctx(t)
	m, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "你好"})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)[0]
	require.NoError(t, ev.Validate())
	require.Equal(t, m.ID, ev.MessageID)
	require.Equal(t, e.srv.BotID(), ev.BotID)

	rc1, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "你好呀"})
	require.NoError(t, err)
	rc2, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "今天怎么样？"})
	require.NoError(t, err)
	sent := e.srv.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, "aibot_respond_msg", sent[0].Op)
	require.Equal(t, m.ID, sent[0].ReplyTo)
	require.True(t, sent[0].Finished)
	require.Equal(t, "你好呀", sent[0].Text)
	require.Equal(t, []string{wecom.StreamID(m.ID)}, rc1.MessageIDs)
	require.Equal(t, "aibot_send_msg", sent[1].Op, "a continuation is a message of its own")
	require.Equal(t, []string{sent[1].MessageID}, rc2.MessageIDs)
	require.Empty(t, sent[1].ReplyTo)

	// In a group: the bot answers bob, who quotes the answer with a
	// picture.
	g, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: room, From: "bob", Text: "问个问题"})
	require.NoError(t, err)
	sink.waitEvents(t, 2)
	rcg, err := e.ch.Send(ctx, channel.Outgoing{Chat: room, Text: "请讲", ReplyTo: g.ID})
	require.NoError(t, err)
	pic := []byte("\xff\xd8\xff jpeg bytes")
	link, key := e.srv.AddAIBotMedia(pic)
	require.NotEmpty(t, key)
	q, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: room, From: "bob", Text: "说得对", QuoteID: rcg.MessageIDs[0], Image: &wecomtest.Media{URL: link, AESKey: key}})
	require.NoError(t, err)
	ev = sink.waitEvents(t, 3)[2]
	require.Equal(t, q.ID, ev.MessageID)
	require.True(t, ev.Mentions(e.srv.BotID()))
	require.Equal(t, "说得对", ev.Text())
	require.NotNil(t, ev.Quoted)
	require.True(t, ev.Quoted.FromBot, "a quote of the bot's answer")
	require.Equal(t, rcg.MessageIDs[0], ev.QuoteID())
	var img channel.Media
	for _, s := range ev.Segments {
		if s.Type == channel.SegImage {
			img = *s.Media
		}
	}
	mc, err := e.ch.FetchMedia(ctx, room, img, channel.MediaRequest{MaxBytes: 1 << 20})
	require.NoError(t, err)
	got, err := io.ReadAll(mc.Body)
	require.NoError(t, err)
	require.Equal(t, pic, got)

	// Another process has no key for the link.
	cfg := adapterConfig(e.srv)
	other, err := wecom.New(cfg)
	require.NoError(t, err)
	_, err = other.FetchMedia(ctx, room, img, channel.MediaRequest{})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable)

	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: room, Text: "谢谢", ReplyTo: q.ID})
	require.NoError(t, err)
	sent, err = e.srv.WaitSent(ctx, 4)
	require.NoError(t, err)
	require.Equal(t, q.ID, sent[3].ReplyTo)
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: room, Text: "x", Media: []channel.Media{{URL: "https://a/b.png"}}})
	require.ErrorIs(t, err, channel.ErrMediaInvalid)
}

// TestWSReconnectBackoff: a dropped connection is redialed after the
// backoff on the clock (1 s doubling, ±20 %), never before; sends fail
// fast with ErrOffline meanwhile; the connection comes back online.
func TestWSReconnectBackoff(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e, sink := wsEnv(t, nil, func(c *wecom.Config) {
		c.Clock, c.RetryMin, c.RetryMax, c.OfflineAfter = clk, time.Second, 8*time.Second, 1
	})
	ctx := tctx(t)
	require.Equal(t, 1, e.srv.Dials())
	require.NoError(t, e.srv.SetOffline(ctx, true))
	sink.waitOnline(t, false)
	_, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "while down"})
	require.Equal(t, channel.ClassOffline, channel.Classify(err))

	// Every attempt fails (502 on the upgrade) and waits longer.
	for i, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		require.Eventually(t, func() bool { return clk.Pending() >= 1 }, waitTimeout, time.Millisecond, "backoff %d", i)
		clk.Advance(d*8/10 - time.Millisecond)
		require.GreaterOrEqual(t, clk.Pending(), 1, "redialed before the backoff %d", i)
		clk.Advance(d*4/10 + time.Millisecond)
	}
	require.Equal(t, 1, e.srv.Dials(), "refused upgrades do not reach the WebSocket handler")
	require.NoError(t, e.srv.SetOffline(ctx, false))
	require.Eventually(t, func() bool { clk.Advance(time.Second); return e.srv.Subscribed() }, waitTimeout, 5*time.Millisecond)
	sink.waitOnline(t, true)
	require.Equal(t, 2, e.srv.Dials())
}

// TestWSHeartbeat: pings go out every PingInterval on the clock; two
// unanswered ones close the connection, which is redialed.
func TestWSHeartbeat(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	log, buf := newLogger()
	e, _ := wsEnv(t, nil, func(c *wecom.Config) { c.Clock, c.Logger = clk, log })
	pings := func() int {
		n := 0
		for _, f := range e.srv.Frames() {
			if f.Cmd == "ping" {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return clk.Pending() >= 1 }, waitTimeout, time.Millisecond)
	clk.Advance(wecom.DefaultPingInterval)
	require.Eventually(t, func() bool { return pings() == 1 }, waitTimeout, time.Millisecond)

	// Unanswered pings: within a few intervals (an answer to the first
	// may still be on its way) the connection is given up.
	e.srv.SilencePings(true)
	for i := 2; !strings.Contains(buf.String(), "heartbeat lost"); i++ {
		require.Less(t, i, 8, "pings went unanswered and the connection stayed")
		require.Eventually(t, func() bool { return clk.Pending() >= 1 }, waitTimeout, time.Millisecond)
		clk.Advance(wecom.DefaultPingInterval)
		require.Eventually(t, func() bool {
			return pings() == i || strings.Contains(buf.String(), "heartbeat lost")
		}, waitTimeout, time.Millisecond)
	}
	e.srv.SilencePings(false)
	require.Eventually(t, func() bool { clk.Advance(time.Second); return e.srv.Dials() == 2 && e.srv.Subscribed() }, waitTimeout, 5*time.Millisecond)
}

// TestWSRunEnds: a newer connection for the bot ends Run with
// ErrSuperseded (no reconnect loop); refused credentials with
// ErrUnauthorized, without the secret in the error or the log.
func TestWSRunEnds(t *testing.T) {
	t.Parallel()
	t.Run("superseded", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, wecomtest.ModeAIBotWS, nil, nil)
		sink := newRecSink()
		done := make(chan error, 1)
		go func() { done <- e.ch.Run(tctx(t), sink) }()
		sink.waitOnline(t, true)
		e.srv.Supersede()
		select {
		case err := <-done:
			require.ErrorIs(t, err, wecom.ErrSuperseded)
		case <-time.After(waitTimeout):
			t.Fatal("Run did not end")
		}
		require.Equal(t, 1, e.srv.Dials())
	})
	t.Run("unauthorized", func(t *testing.T) {
		t.Parallel()
		log, buf := newLogger()
		e := newEnv(t, wecomtest.ModeAIBotWS, nil, func(c *wecom.Config) { c.Secret, c.Logger = "wrong-secret-value", log })
		err := e.ch.Run(tctx(t), newRecSink())
		require.ErrorIs(t, err, wecom.ErrUnauthorized)
		require.NotContains(t, err.Error(), "wrong-secret-value")
		require.NotContains(t, buf.String(), "wrong-secret-value")
	})
}

// TestWSSubscribeRefusedTransiently: a subscription refused with an
// errcode that is not about the credentials (rate limit, busy, unknown)
// is tried again after a backoff; Run does not end.
func TestWSSubscribeRefusedTransiently(t *testing.T) {
	t.Parallel()
	for _, code := range []int{wecomtest.CodeFreqLimit, wecomtest.CodeBusy, 600001} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, wecomtest.ModeAIBotWS, nil, nil)
			e.srv.FailNext("aibot_subscribe", wecomtest.Failure{ErrCode: code})
			sink := newRecSink()
			stop := run(t, e.ch, sink)
			sink.waitOnline(t, true)
			require.True(t, e.srv.Subscribed())
			require.Equal(t, 2, e.srv.Dials(), "subscribed on the second connection")
			require.NoError(t, stop())
		})
	}
}

// TestWSLostAcknowledgement: a chunk WeCom applied but whose
// acknowledgement was lost with the connection is not shown twice: an
// answer is sent again on the same req_id (WeCom applies a stream once:
// the repeat is refused as finished, which settles it), a message of its
// own counts as delivered.
func TestWSLostAcknowledgement(t *testing.T) {
	t.Parallel()
	log, buf := newLogger()
	e, sink := wsEnv(t, nil, func(c *wecom.Config) { c.Logger = log })
	ctx := tctx(t)
	m, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "hi"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)

	answer := channel.Outgoing{Chat: alice, Text: "first chunk", IdempotencyKey: "turn1-0"}
	e.srv.FailNext("aibot_respond_msg", wecomtest.Failure{Drop: true})
	_, err = e.ch.Send(ctx, answer)
	require.Error(t, err)
	require.ErrorIs(t, err, channel.ErrOffline)
	waitSubscribed(t, buf, 2)
	rc, err := e.ch.Send(ctx, answer)
	require.NoError(t, err)
	require.Equal(t, []string{wecom.StreamID(m.ID)}, rc.MessageIDs)

	own := channel.Outgoing{Chat: alice, Text: "second chunk", IdempotencyKey: "turn1-1"}
	e.srv.FailNext("aibot_send_msg", wecomtest.Failure{Drop: true})
	_, err = e.ch.Send(ctx, own)
	require.ErrorIs(t, err, channel.ErrOffline)
	waitSubscribed(t, buf, 3)
	rc2, err := e.ch.Send(ctx, own)
	require.NoError(t, err)
	require.NotEmpty(t, rc2.MessageIDs)

	sent := e.srv.Sent()
	require.Len(t, sent, 2, "each chunk shown once")
	require.Equal(t, "first chunk", sent[0].Text)
	require.Equal(t, "second chunk", sent[1].Text)
	require.Equal(t, rc2.MessageIDs, []string{sent[1].MessageID})
	require.Contains(t, buf.String(), "wecom_delivery_assumed")
}

// TestWSErrorsClassified: acknowledgement errcodes are classified; an
// answer WeCom no longer takes (846605) goes out as a message of its own.
func TestWSErrorsClassified(t *testing.T) {
	t.Parallel()
	e, sink := wsEnv(t, nil, nil)
	ctx := tctx(t)
	e.srv.KnowChat(alice)
	for code, class := range map[int]channel.ErrorClass{
		wecomtest.CodeFreqLimit:      channel.ClassRateLimited,
		wecomtest.CodeInvalidParam:   channel.ClassRejected,
		wecomtest.CodeBusy:           channel.ClassTransient,
		wecomtest.CodeContentTooLong: channel.ClassRejected,
	} {
		e.srv.FailNext("aibot_send_msg", wecomtest.Failure{ErrCode: code})
		_, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "x"})
		require.Equal(t, class, channel.Classify(err), "errcode %d: %v", code, err)
		var ae *wecom.APIError
		require.True(t, errors.As(err, &ae))
	}
	// Unknown chats are refused by WeCom, definitively.
	_, err := e.ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: "never"}, Text: "x"})
	require.Equal(t, channel.ClassRejected, channel.Classify(err))

	m, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "q"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	e.srv.FailNext("aibot_respond_msg", wecomtest.Failure{ErrCode: wecomtest.CodeInvalidReqID})
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "late answer", ReplyTo: m.ID})
	require.NoError(t, err)
	sent := e.srv.Sent()
	require.Equal(t, "aibot_send_msg", sent[len(sent)-1].Op)
	require.Equal(t, "late answer", sent[len(sent)-1].Text)
}

// TestWSBadFrames: malformed, binary, unknown and invalid frames are
// logged and dropped; the connection stays and later messages arrive.
func TestWSBadFrames(t *testing.T) {
	t.Parallel()
	log, buf := newLogger()
	e, sink := wsEnv(t, nil, func(c *wecom.Config) { c.Logger = log })
	ctx := tctx(t)
	for _, f := range []string{
		`{not json`,
		`[]`,
		`{"cmd":"aibot_unknown","headers":{"req_id":"x"}}`,
		`{"cmd":"aibot_msg_callback","headers":{"req_id":"r1"},"body":{"msgid":1}}`,
		`{"cmd":"aibot_msg_callback","headers":{"req_id":""},"body":{}}`,
		`{"cmd":"aibot_msg_callback","headers":{"req_id":"r2"},"body":{"msgid":"m","chattype":"single","from":{"userid":"alice"},"msgtype":"video"}}`,
		`{"cmd":"aibot_event_callback","headers":{"req_id":"r3"},"body":{"msgtype":"event","event":{"eventtype":"enter_chat"}}}`,
		`{"headers":{"req_id":"nobody-waits"},"errcode":0}`,
		"{\"cmd\":\"aibot_msg_callback\",\"headers\":{\"req_id\":\"r4\"},\"body\":{\"msgid\":\"m\xff\"}}",
	} {
		require.NoError(t, e.srv.WriteFrame(ctx, []byte(f)))
	}
	_, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "still here"})
	require.NoError(t, err)
	evs := sink.waitEvents(t, 1)
	require.Equal(t, "still here", evs[0].Text())
	require.Len(t, sink.Received(), 1)
	require.Equal(t, 1, e.srv.Dials())
	require.Contains(t, buf.String(), "wecom_frame_dropped")
	require.Contains(t, buf.String(), "wecom_message_invalid")
}

// TestWSNackRetried: a message the sink refuses is handed over again
// after the backoff on the clock, and the ones after it wait.
func TestWSNackRetried(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e, sink := wsEnv(t, nil, func(c *wecom.Config) { c.Clock, c.RetryMin, c.RetryMax = clk, time.Second, 4*time.Second })
	ctx := tctx(t)
	sink.FailNext(2)
	a, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "a"})
	require.NoError(t, err)
	b, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "b"})
	require.NoError(t, err)
	for attempt := 1; attempt <= 2; attempt++ {
		sink.wait(t, "a refusal", func(_, refused []channel.Event, _ []channel.State) bool { return len(refused) == attempt })
		require.Eventually(t, func() bool { return clk.Pending() >= 2 }, waitTimeout, time.Millisecond, "backoff and ping timers")
		require.Empty(t, sink.Events(), "b waits behind a")
		clk.Advance(time.Duration(attempt) * 700 * time.Millisecond)
		require.Len(t, sink.Refused(), attempt, "retried before the backoff")
		clk.Advance(4 * time.Second)
	}
	evs := sink.waitEvents(t, 2)
	require.Equal(t, []string{a.ID, b.ID}, []string{evs[0].MessageID, evs[1].MessageID})
}

// waitSubscribed waits until the adapter logged its n-th subscription.
func waitSubscribed(t *testing.T, buf interface{ String() string }, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return strings.Count(buf.String(), "wecom_long_connection_subscribed") >= n
	}, waitTimeout, time.Millisecond, "subscription %d", n)
}

// TestWSOversizeFrame: a frame over MaxBodyBytes ends the connection (the
// WebSocket library refuses it), which is redialed; nothing of it reaches
// the sink and later messages do.
func TestWSOversizeFrame(t *testing.T) {
	t.Parallel()
	log, buf := newLogger()
	e, sink := wsEnv(t, nil, func(c *wecom.Config) { c.Logger, c.MaxBodyBytes = log, 4<<10 })
	ctx := tctx(t)
	big := `{"cmd":"aibot_msg_callback","headers":{"req_id":"r"},"body":{"msgid":"m","chattype":"single","from":{"userid":"alice"},` +
		`"msgtype":"text","text":{"content":"` + strings.Repeat("x", 8<<10) + `"}}}`
	require.NoError(t, e.srv.WriteFrame(ctx, []byte(big)))
	waitSubscribed(t, buf, 2)
	_, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "after the big one"})
	require.NoError(t, err)
	evs := sink.waitEvents(t, 1)
	require.Equal(t, "after the big one", evs[0].Text())
	require.Len(t, sink.Received(), 1)
	require.Contains(t, buf.String(), "wecom_long_connection_failed")
}
