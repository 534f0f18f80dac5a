package onebot_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
	"github.com/personakit/persona/clock"
)

// within requires d to be base ±20 %.
func within(t *testing.T, base, d time.Duration, msg string) {
	t.Helper()
	require.GreaterOrEqual(t, d, base*8/10, msg)
	require.LessOrEqual(t, d, base*12/10, msg)
}

// TestForwardReconnectBackoff drives the forward-WebSocket reconnect with a
// fake clock: nothing sleeps; the test advances the clock by exactly the
// delay the adapter scheduled (the log line is written once its timer is
// armed). Delays are 1 s doubling to 60 s with ±20 % jitter, and reset
// after a successful connection.
func TestForwardReconnectBackoff(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := forwardRig(t, onebottest.Config{}, onebot.Config{Clock: clk, BackoffMin: time.Second, BackoffMax: time.Minute})
	s := r.run(t)

	delay := func(i int) time.Duration {
		recs := r.logs.wait(t, "reconnect_scheduled", i)
		return recs[i-1].attrs["delay"].(time.Duration)
	}

	// A dropped connection is redialled after ~1 s of clock time.
	n := s.stateCount()
	r.fake.Drop()
	s.waitState(t, "the drop", n, func(st channel.State) bool { return !st.Connected && !st.Online })
	d := delay(1)
	within(t, time.Second, d, "first delay")
	_, err := r.ch.Send(tctx(t), channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: "1"}, Text: "x"})
	require.ErrorIs(t, err, channel.ErrOffline, "sends fail fast while disconnected")
	n = s.stateCount()
	clk.Advance(d)
	s.waitState(t, "the reconnect", n, isUp)

	// While the implementation is down every attempt fails; the delays
	// double up to 60 s.
	n = s.stateCount()
	r.fake.SetDown(true)
	s.waitState(t, "the drop", n, func(st channel.State) bool { return !st.Connected })
	bases := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i, b := range bases {
		d := delay(2 + i)
		within(t, b*time.Second, d, "delay of attempt "+itoa(int64(i+1)))
		if i < len(bases)-1 {
			clk.Advance(d)
			r.logs.wait(t, "dial_failed", i+1)
		}
	}
	require.Len(t, r.logs.all("connection_opened"), 2, "no connection while down")

	// Back up: the next attempt connects and the backoff resets.
	r.fake.SetDown(false)
	n = s.stateCount()
	clk.Advance(72 * time.Second)
	s.waitState(t, "the reconnect after the outage", n, isUp)
	n = s.stateCount()
	r.fake.Drop()
	s.waitState(t, "another drop", n, func(st channel.State) bool { return !st.Connected })
	within(t, time.Second, delay(2+len(bases)), "delay after a successful connection")
	require.Equal(t, 0, r.ch.PendingCalls())
}

// TestHeartbeatWatchdog: heartbeats drive "effectively online"; a missed
// heartbeat (2 × interval on the injected clock) reports the account
// offline, the next one brings it back.
func TestHeartbeatWatchdog(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := reverseRig(t, onebottest.Config{HeartbeatInterval: 5 * time.Second}, onebot.Config{Clock: clk})
	s := r.run(t)
	ctx := tctx(t)
	group := channel.Chat{Kind: channel.Group, ID: "100200300"}

	require.NoError(t, r.fake.Heartbeat(ctx))
	recs := r.logs.wait(t, "heartbeat", 1)
	require.Equal(t, 10*time.Second, recs[0].attrs["watchdog"])
	n := s.stateCount()
	clk.Advance(10 * time.Second)
	s.waitState(t, "heartbeat missed", n, func(st channel.State) bool { return st.Connected && !st.Online })
	r.logs.wait(t, "heartbeat_missed", 1)
	_, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "x"})
	require.ErrorIs(t, err, channel.ErrOffline)

	n = s.stateCount()
	require.NoError(t, r.fake.Heartbeat(ctx))
	s.waitState(t, "back online", n, isUp)
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "y"})
	require.NoError(t, err)

	// status.good=false also makes the account effectively offline.
	n = s.stateCount()
	require.NoError(t, r.fake.PushRaw(ctx, []byte(`{"time":1,"self_id":10001000,"post_type":"meta_event","meta_event_type":"heartbeat","status":{"online":true,"good":false},"interval":5000}`)))
	s.waitState(t, "not good", n, func(st channel.State) bool { return st.Connected && !st.Online })
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "z"})
	require.True(t, errors.Is(err, channel.ErrOffline))
}

// TestHTTPBootstrapRetry: in HTTP mode the adapter retries get_login_info /
// get_status with backoff until the HTTP API answers; a later connection
// refusal marks it disconnected (channel.ErrOffline) and it recovers.
func TestHTTPBootstrapRetry(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens yet

	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	al, alog := newLogs(t, "adapter")
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeHTTP, URL: "http://" + addr, Clock: clk, Logger: alog})
	require.NoError(t, err)
	s := newSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ch.Run(ctx, s) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	d := al.wait(t, "reconnect_scheduled", 1)[0].attrs["delay"].(time.Duration)
	within(t, time.Second, d, "first bootstrap retry")
	clk.Advance(d)
	d = al.wait(t, "reconnect_scheduled", 2)[1].attrs["delay"].(time.Duration)
	within(t, 2*time.Second, d, "second bootstrap retry")

	// The implementation comes up on that address.
	fake := onebottest.New(onebottest.Config{})
	t.Cleanup(fake.Close)
	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	clk.Advance(d)
	s.waitState(t, "connected", 0, isUp)
	_, err = ch.Send(tctx(t), channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: "1"}, Text: "hi"})
	require.NoError(t, err)

	// It goes away: the next call is refused → offline, and Run retries.
	require.NoError(t, srv.Close())
	n := s.stateCount()
	for i := 0; ; i++ {
		// A pooled keep-alive connection may first fail with EOF
		// (transient); the next dial is refused.
		_, err = ch.Send(tctx(t), channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: "1"}, Text: "lost"})
		require.Error(t, err)
		if errors.Is(err, channel.ErrOffline) {
			break
		}
		require.Less(t, i, 3, "still not offline: %v", err)
	}
	s.waitState(t, "disconnected", n, func(st channel.State) bool { return !st.Connected })
	al.wait(t, "api_unreachable", 1)
	_, err = ch.Send(tctx(t), channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: "1"}, Text: "fast"})
	require.ErrorIs(t, err, channel.ErrOffline, "fails fast while down")
}
