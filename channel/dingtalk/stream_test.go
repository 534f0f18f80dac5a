package dingtalk_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
	"github.com/personakit/persona/clock"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// within requires d to be base ±20 %.
func within(t *testing.T, base, d time.Duration, msg string) {
	t.Helper()
	require.GreaterOrEqual(t, d, base*8/10, msg)
	require.LessOrEqual(t, d, base*12/10, msg)
}

func ackData(t *testing.T, a dingtalktest.Ack) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(a.Data), &m), "ack data %q", a.Data)
	return m
}

// TestOpenAndEndToEnd: the adapter registers the robot topic with its
// credentials, a group @-message reaches the sink normalised, its ack
// follows, and the answer goes through the session webhook.
func TestOpenAndEndToEnd(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.LocalIP = "10.0.0.7" })
	ctx := tctx(t)
	opens := r.srv.Opens()
	require.Len(t, opens, 1)
	require.Equal(t, r.srv.ClientID(), opens[0].ClientID)
	require.Equal(t, []dingtalktest.Subscription{{Type: "CALLBACK", Topic: dingtalk.BotMessageTopic}}, opens[0].Subscriptions)
	require.Equal(t, dingtalk.DefaultUserAgent, opens[0].UA)
	require.Equal(t, "10.0.0.7", opens[0].LocalIP)
	require.Equal(t, r.srv.ClientID(), r.ch.BotID())
	require.Equal(t, channel.TextLimit{Unit: channel.Runes, Max: 4000}, channel.LimitOf(r.ch))

	p, err := r.srv.Push(ctx, dingtalktest.Incoming{Group: true, ConversationID: groupID, Title: "测试群", From: alice,
		Text: "在吗？", MentionBot: true, AtUsers: []dingtalktest.User{bob}})
	require.NoError(t, err)
	ev := r.sink.waitMessage(t, p.MsgID)
	require.NoError(t, ev.Validate())
	require.Equal(t, channel.Chat{Kind: channel.Group, ID: groupID}, ev.Chat)
	require.Equal(t, r.srv.BotID(), ev.BotID)
	require.Equal(t, channel.Sender{ID: alice.StaffID, Name: "Alice"}, ev.Sender)
	require.True(t, ev.ToMe)
	require.Equal(t, []channel.Segment{channel.Mention(r.srv.BotID()), channel.Mention(bob.StaffID), channel.Text(" 在吗？")}, ev.Segments)

	a, err := r.srv.WaitAck(ctx, p.FrameID)
	require.NoError(t, err)
	require.Equal(t, 200, a.Code)
	require.Nil(t, ackData(t, a)["response"])

	rc, err := r.ch.Send(ctx, channel.Outgoing{Chat: ev.Chat, Text: "在的", Mentions: []string{alice.StaffID}, IdempotencyKey: "fp-1"})
	require.NoError(t, err)
	sent, err := r.srv.WaitSent(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, dingtalktest.ViaWebhook, sent[0].Via)
	require.Equal(t, "text", sent[0].MsgType)
	require.Equal(t, "@"+alice.StaffID+" 在的", sent[0].Text)
	require.Equal(t, []string{alice.StaffID}, sent[0].AtUserIDs)
	require.Len(t, rc.MessageIDs, 1)
	require.Regexp(t, `^dt-[0-9a-f]{32}$`, rc.MessageIDs[0])
	require.Zero(t, r.srv.TokenCalls(), "a session webhook needs no access token")
}

// TestAckOnlyAfterHandleEvent: the frame is acknowledged only once the
// sink returned; while HandleEvent runs there is no ack.
func TestAckOnlyAfterHandleEvent(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.sink.SetHandler(func(ctx context.Context, ev channel.Event) error {
		once.Do(func() { close(entered) })
		<-release
		return nil
	})
	p, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "hello"})
	require.NoError(t, err)
	<-entered
	// The adapter answers pings meanwhile, on the reader goroutine.
	_, err = r.srv.Ping(ctx)
	require.NoError(t, err)
	require.Empty(t, r.srv.AcksOf(p.FrameID), "acknowledged before HandleEvent returned")
	close(release)
	a, err := r.srv.WaitAck(ctx, p.FrameID)
	require.NoError(t, err)
	require.Equal(t, 200, a.Code)
	require.Len(t, r.sink.Events(), 1)
}

// TestRefusedMessageIsNackedAndOfferedAgain: a refused message is answered
// 500 with LATER; DingTalk does not deliver robot messages again, so the
// adapter offers it to the sink again after the backoff (fake clock);
// messages after it wait their turn.
func TestRefusedMessageIsNackedAndOfferedAgain(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) {
		c.Clock = clk
		c.RetryMin, c.RetryMax = time.Second, time.Minute
	})
	ctx := tctx(t)
	r.sink.FailNext(2)
	p1, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "first"})
	require.NoError(t, err)
	p2, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "second"})
	require.NoError(t, err)

	a, err := r.srv.WaitAck(ctx, p1.FrameID)
	require.NoError(t, err)
	require.Equal(t, 500, a.Code)
	require.Equal(t, "LATER", ackData(t, a)["status"])

	recs := waitLog(t, r.logs, "dingtalk_event_nacked", 1)
	within(t, time.Second, logDelay(t, recs[0]), "first redelivery delay")
	require.Empty(t, r.sink.Events(), "nothing accepted before the delay")
	clk.Advance(logDelay(t, recs[0]))
	recs = waitLog(t, r.logs, "dingtalk_event_nacked", 2)
	within(t, 2*time.Second, logDelay(t, recs[1]), "second redelivery delay")
	clk.Advance(logDelay(t, recs[1]))

	r.sink.wait(t, "both messages", func(evs, _ []channel.Event, _ []channel.State) bool { return len(evs) == 2 })
	evs := r.sink.Events()
	require.Equal(t, p1.MsgID, evs[0].MessageID, "order kept")
	require.Equal(t, p2.MsgID, evs[1].MessageID)
	require.Len(t, r.sink.Refused(), 2)
	waitLog(t, r.logs, "dingtalk_event_redelivered", 1)
	a2, err := r.srv.WaitAck(ctx, p2.FrameID)
	require.NoError(t, err)
	require.Equal(t, 200, a2.Code)
	require.Len(t, r.srv.AcksOf(p1.FrameID), 1, "one answer per frame")
}

// TestBacklogFull: messages beyond the backlog are refused with LATER and
// logged; the others are delivered.
func TestBacklogFull(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.Backlog = 1 })
	ctx := tctx(t)
	entered, release := make(chan struct{}, 4), make(chan struct{})
	r.sink.SetHandler(func(ctx context.Context, ev channel.Event) error {
		entered <- struct{}{}
		<-release
		return nil
	})
	p1, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "1"})
	require.NoError(t, err)
	<-entered // the first is with the sink
	p2, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "2"})
	require.NoError(t, err)
	p3, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "3"})
	require.NoError(t, err)
	a3, err := r.srv.WaitAck(ctx, p3.FrameID)
	require.NoError(t, err)
	require.Equal(t, 500, a3.Code)
	waitLog(t, r.logs, "dingtalk_backlog_full", 1)
	close(release)
	for _, p := range []dingtalktest.Pushed{p1, p2} {
		a, err := r.srv.WaitAck(ctx, p.FrameID)
		require.NoError(t, err)
		require.Equal(t, 200, a.Code)
	}
	require.Len(t, r.sink.Events(), 2)
}

// TestPingAndUnknownTopics: pings are answered with their opaque; an
// EVENT, another callback topic and an unknown SYSTEM topic get 404.
func TestPingAndUnknownTopics(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	for range 3 {
		a, err := r.srv.Ping(ctx)
		require.NoError(t, err)
		require.Equal(t, "OK", a.Message)
	}
	for _, f := range []dingtalktest.Frame{
		{Type: "EVENT", Headers: map[string]string{"topic": "*", "eventType": "user_add_org"}, Data: `{"userId":["1"]}`},
		{Type: "CALLBACK", Headers: map[string]string{"topic": "/v1.0/card/instances/callback"}, Data: `{}`},
		{Type: "SYSTEM", Headers: map[string]string{"topic": "reboot"}, Data: `{}`},
		{Type: "STRANGE", Headers: map[string]string{"topic": "x"}, Data: `{}`},
	} {
		id, err := r.srv.PushFrame(ctx, f)
		require.NoError(t, err)
		a, err := r.srv.WaitAck(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 404, a.Code, "%s %s", f.Type, f.Headers["topic"])
	}
	// A ping without a messageId cannot be answered; the connection
	// stays.
	require.NoError(t, r.srv.PushRaw(ctx, []byte(`{"type":"SYSTEM","headers":{"topic":"ping"},"data":"{}"}`)))
	waitLog(t, r.logs, "dingtalk_frame_unidentified", 1)
	_, err := r.srv.Ping(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, r.srv.Accepted())
	require.Empty(t, r.sink.Events())
}

// TestDisconnectFrame: a disconnect frame makes the adapter connect again
// at once (a new connections/open and ticket) without reporting offline;
// new messages come over the new connection; the old one is closed after
// DrainTimeout on the adapter's clock.
func TestDisconnectFrame(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	r := start(t, dingtalktest.Config{DisconnectGrace: time.Hour}, func(c *dingtalk.Config) {
		c.Clock = clk
		c.RetryMin, c.RetryMax = time.Second, time.Minute
	})
	ctx := tctx(t)
	clk.Advance(time.Hour) // an old connection
	require.NoError(t, r.srv.Disconnect(ctx, ""))
	require.NoError(t, r.srv.WaitAccepted(ctx, 2))
	require.Len(t, r.srv.Opens(), 2)
	waitLog(t, r.logs, "dingtalk_disconnect_announced", 1)
	require.Equal(t, 2, r.srv.Connections(), "the old connection drains")

	p, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "after the rotation"})
	require.NoError(t, err)
	r.sink.waitMessage(t, p.MsgID)
	a, err := r.srv.WaitAck(ctx, p.FrameID)
	require.NoError(t, err)
	require.Equal(t, 2, a.Conn, "acknowledged on the connection it came on")

	require.Eventually(t, func() bool {
		clk.Advance(dingtalk.DefaultDrainTimeout)
		return r.srv.Connections() == 1
	}, waitTimeout, 5*time.Millisecond, "the old connection is closed after the drain timeout")
	waitLog(t, r.logs, "dingtalk_connection_drained", 1)
	for _, st := range r.sink.States() {
		require.True(t, st.Connected, "no offline report during the rotation: %+v", r.sink.States())
	}

	// A disconnect right after connecting: the next connection waits a
	// backoff instead of hammering connections/open.
	require.NoError(t, r.srv.Disconnect(ctx, "rebalance")) // connection 2 is old: at once
	require.NoError(t, r.srv.WaitAccepted(ctx, 3))
	require.NoError(t, r.srv.Disconnect(ctx, "rebalance")) // connection 3 is new
	recs := waitLog(t, r.logs, "dingtalk_reconnect_scheduled", 1)
	require.Equal(t, "disconnect announced right after connecting", recs[0]["reason"])
	within(t, time.Second, logDelay(t, recs[0]), "backoff after a quick disconnect")
	require.Len(t, r.srv.Opens(), 3)
	clk.Advance(logDelay(t, recs[0]))
	require.NoError(t, r.srv.WaitAccepted(ctx, 4))
}

// TestReconnectBackoff drives reconnection with a fake clock: nothing
// sleeps; the test advances the clock by exactly the delay the adapter
// scheduled (logged once its timer is armed). Delays are 1 s doubling to
// 60 s with ±20 % jitter, reset after a successful connection; sends fail
// fast while disconnected.
func TestReconnectBackoff(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) {
		c.Clock = clk
		c.RetryMin, c.RetryMax = time.Second, time.Minute
	})
	ctx := tctx(t)
	delay := func(i int) time.Duration {
		recs := waitLog(t, r.logs, "dingtalk_reconnect_scheduled", i)
		return logDelay(t, recs[i-1])
	}

	// The client may see its handshake done just before the fake records
	// the connection: wait for the record, or Drop drops nothing.
	require.NoError(t, r.srv.WaitAccepted(ctx, 1))
	n := len(r.sink.States())
	r.srv.Drop()
	n = r.sink.waitState(t, "the drop", n, isDown)
	d := delay(1)
	within(t, time.Second, d, "first delay")
	_, err := r.ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: groupID}, Text: "x"})
	require.ErrorIs(t, err, channel.ErrOffline, "sends fail fast while disconnected")
	require.Equal(t, channel.ClassOffline, channel.Classify(err))
	clk.Advance(d)
	n = r.sink.waitState(t, "the reconnect", n, isUp)
	require.Len(t, r.srv.Opens(), 2, "a new ticket for every connection")

	// While DingTalk is down every attempt fails; the delays double up
	// to 60 s.
	require.NoError(t, r.srv.SetOffline(ctx, true))
	r.sink.waitState(t, "offline", n, isDown)
	bases := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i, b := range bases {
		d := delay(2 + i)
		within(t, b*time.Second, d, "delay of attempt "+strconv.Itoa(i+1))
		if i < len(bases)-1 {
			clk.Advance(d)
			waitLog(t, r.logs, "dingtalk_connect_failed", i+1)
		}
	}
	require.Equal(t, 2, r.srv.Accepted(), "no connection while down")

	require.NoError(t, r.srv.SetOffline(ctx, false))
	n = len(r.sink.States())
	clk.Advance(72 * time.Second)
	n = r.sink.waitState(t, "back up", n, isUp)
	require.NoError(t, r.srv.WaitAccepted(ctx, 3))
	r.srv.Drop()
	r.sink.waitState(t, "another drop", n, isDown)
	within(t, time.Second, delay(2+len(bases)), "the delay after a successful connection starts over")
}

// TestKeepAlive: the adapter pings every KeepAlive; when the pong does
// not come within PongTimeout (the fake stalls) it gives the connection
// up and reconnects.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) {
		c.Clock = clk
		c.RetryMin, c.RetryMax = time.Second, time.Minute
		c.KeepAlive = dingtalk.DefaultKeepAlive
	})
	// Healthy: pings are answered and the connection stays.
	for i := 1; i <= 3; i++ {
		require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond) // the keepalive timer
		clk.Advance(dingtalk.DefaultKeepAlive)
		waitLog(t, r.logs, "dingtalk_keepalive_ok", i)
	}
	require.Equal(t, 1, r.srv.Accepted())

	r.srv.Freeze(true)
	n := len(r.sink.States())
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond)
	clk.Advance(dingtalk.DefaultKeepAlive)
	// The ping is out; its pong timer is the one pending timer.
	require.Eventually(t, func() bool { return clk.Pending() == 1 && !has(r.logs.String(), "dingtalk_pong_missing") }, waitTimeout, time.Millisecond)
	clk.Advance(dingtalk.DefaultPongTimeout)
	waitLog(t, r.logs, "dingtalk_pong_missing", 1)
	n = r.sink.waitState(t, "the dead connection given up", n, isDown)
	r.srv.Freeze(false)
	recs := waitLog(t, r.logs, "dingtalk_reconnect_scheduled", 1)
	clk.Advance(logDelay(t, recs[0]))
	r.sink.waitState(t, "reconnected", n, isUp)
	require.NoError(t, r.srv.WaitAccepted(tctx(t), 2))
}

// TestUnauthorized: refused credentials end Run with ErrUnauthorized and
// never show the secret.
func TestUnauthorized(t *testing.T) {
	t.Parallel()
	srv := newFake(t, dingtalktest.Config{})
	log, buf := newLogger()
	const secret = "wrong-secret-7Hq2Lm9Xz"
	ch, err := dingtalk.New(dingtalk.Config{ClientID: srv.ClientID(), ClientSecret: secret, APIBase: srv.URL(), Logger: log})
	require.NoError(t, err)
	err = ch.Run(tctx(t), newRecSink())
	require.ErrorIs(t, err, dingtalk.ErrUnauthorized)
	noSecrets(t, err.Error(), secret)
	noSecrets(t, buf.String(), secret)
	require.Contains(t, buf.String(), "dingtalk_unauthorized")
}

// TestRunTwice: a second Run while the first is active fails; after it
// ended Run works again and Send no longer fails fast.
func TestRunTwice(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	require.ErrorIs(t, r.ch.Run(tctx(t), newRecSink()), dingtalk.ErrRunning)
	require.NoError(t, r.stop())
	last := r.sink.States()[len(r.sink.States())-1]
	require.Equal(t, "stopped", last.Reason)
	require.False(t, last.Connected)
	_, err := r.ch.Send(tctx(t), channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: groupID}, Text: "after Run"})
	require.NoError(t, err, "Send works without Run (the robot API)")
	sink := newRecSink()
	run(t, r.ch, sink)
	sink.waitState(t, "connected again", 0, isUp)
	require.Error(t, r.ch.Run(tctx(t), nil))
}

// TestOpenFailuresAreRetried: a throttled or failing connections/open and
// a refused ticket are retried; a 429's Retry-After lengthens the wait.
func TestOpenFailuresAreRetried(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	srv := newFake(t, dingtalktest.Config{})
	srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpOpen, Status: 429, Code: "Throttling", RetryAfter: 30})
	srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpOpen, Status: 502, Body: "<html>bad gateway</html>"})
	srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpOpen, Body: `{"endpoint":"ftp://x","ticket":"t-123456"}`, Status: 200})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *dingtalk.Config) {
		c.Clock, c.Logger = clk, log
		c.RetryMin, c.RetryMax = time.Second, time.Minute
	})
	sink := newRecSink()
	run(t, ch, sink)
	for i, want := range []time.Duration{30 * time.Second, 2 * time.Second, 4 * time.Second} {
		recs := waitLog(t, buf, "dingtalk_reconnect_scheduled", i+1)
		d := logDelay(t, recs[i])
		if i == 0 {
			require.Equal(t, want, d, "Retry-After")
		} else {
			within(t, want, d, "backoff")
		}
		clk.Advance(d)
	}
	sink.waitState(t, "connected", 0, isUp)
	require.Len(t, srv.Opens(), 1, "only the last attempt got a ticket")
}

// TestStopWhileRedelivering: a message still refused when Run stops is
// logged as lost, and Run returns promptly.
func TestStopWhileRedelivering(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.Clock = clk })
	r.sink.SetHandler(func(context.Context, channel.Event) error { return errors.New("disk full") })
	_, err := r.srv.Push(tctx(t), dingtalktest.Incoming{From: alice, Text: "x"})
	require.NoError(t, err)
	waitLog(t, r.logs, "dingtalk_event_nacked", 1)
	require.NoError(t, r.stop())
	waitLog(t, r.logs, "dingtalk_event_dropped", 1)
}
