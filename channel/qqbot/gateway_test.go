package qqbot_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
	"github.com/personakit/persona/clock"
)

// readState reads the state file an adapter keeps in dir.
func readState(t *testing.T, dir, appID string) (sessionID string, seq int64) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "qq-"+appID+".state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", 0
	}
	require.NoError(t, err)
	var st struct {
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
	}
	require.NoError(t, json.Unmarshal(data, &st))
	return st.SessionID, st.Seq
}

func TestGatewayIdentifyAndReady(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)

	ids := srv.Identifies()
	require.Len(t, ids, 1)
	require.Equal(t, "QQBot "+srv.CurrentToken(), ids[0].Token, "Identify token format")
	require.Equal(t, qqbot.DefaultIntents, ids[0].Intents)
	require.Equal(t, int64(1<<25|1<<30|1<<12), ids[0].Intents, "group+C2C, public guild messages, direct messages")
	require.Equal(t, []int{0, 1}, ids[0].Shard)
	require.Equal(t, srv.BotUserID(), ch.UserID(), "the bot's guild user id from READY")
	st := sink.States()
	require.Equal(t, channel.State{Platform: "qq", BotID: srv.AppID(), Connected: true, Online: true, Reason: "gateway ready"}, st[len(st)-1])
}

// A heartbeat goes out every heartbeat_interval on the injected clock,
// carrying null before any dispatch was accepted and the last accepted s
// after.
func TestHeartbeatCarriesLastAcceptedSeq(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	dir := t.TempDir()
	srv := newFake(t, qqbottest.Config{Clock: clk, HeartbeatInterval: 30 * time.Second})
	ch := newChannel(t, srv, func(c *qqbot.Config) { c.Clock = clk; c.StateDir = dir })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)

	// READY was s=1 (accepted at once: it needs no delivery).
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond, "the heartbeat timer")
	clk.Advance(29 * time.Second)
	require.Empty(t, srv.Heartbeats(), "no heartbeat before the interval")
	clk.Advance(time.Second)
	require.NoError(t, srv.Wait(ctx, func() bool { return len(srv.Heartbeats()) == 1 }))
	require.JSONEq(t, `1`, string(srv.Heartbeats()[0]))

	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "hi"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	require.Eventually(t, func() bool {
		_, seq := readState(t, dir, srv.AppID())
		return seq == p.Seq
	}, waitTimeout, time.Millisecond, "the accepted s is recorded")
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond, "the next heartbeat timer")
	clk.Advance(30 * time.Second)
	require.NoError(t, srv.Wait(ctx, func() bool { return len(srv.Heartbeats()) == 2 }))
	var got int64
	require.NoError(t, json.Unmarshal(srv.Heartbeats()[1], &got))
	require.Equal(t, p.Seq, got, "the heartbeat carries the last accepted s")
}

// A heartbeat that is not acknowledged by the time the next is due means
// a dead connection: the adapter reconnects and resumes.
func TestMissedHeartbeatAckReconnects(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := newFake(t, qqbottest.Config{Clock: clk, HeartbeatInterval: 10 * time.Second})
	ch := newChannel(t, srv, func(c *qqbot.Config) { c.Clock = clk; c.RetryMin, c.RetryMax = time.Second, 2*time.Second })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	srv.SetHeartbeatAcks(false)
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond)
	clk.Advance(10 * time.Second)
	require.NoError(t, srv.Wait(ctx, func() bool { return len(srv.Heartbeats()) == 1 }))
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond)
	srv.SetHeartbeatAcks(true)
	clk.Advance(10 * time.Second) // the first beat was never acknowledged
	sink.waitOnline(t, false)
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond, "the reconnect backoff")
	clk.Advance(2 * time.Second)
	require.NoError(t, srv.Wait(ctx, func() bool { return len(srv.Resumes()) == 1 }))
	sink.waitOnline(t, true)
}

// After a drop, the adapter resumes the session with the last accepted s,
// and what was pushed meanwhile arrives.
func TestResumeAfterDrop(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)

	p1, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "one"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	require.Eventually(t, func() bool { return srv.SessionSeq() == p1.Seq }, waitTimeout, time.Millisecond)
	require.True(t, srv.DropConnection(0, ""))
	sink.waitOnline(t, false)
	p2, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "two"})
	require.NoError(t, err)

	evs := sink.waitEvents(t, 2)
	require.Equal(t, p2.ID, evs[1].MessageID)
	rs := srv.Resumes()
	require.NotEmpty(t, rs)
	require.Equal(t, p1.Seq, rs[0].Seq, "resumed from the last accepted s")
	require.Equal(t, srv.CurrentToken(), rs[0].Token, "Resume carries the bare access token, as botgo does")
	require.Len(t, srv.Identifies(), 1, "no second Identify")
	sink.waitOnline(t, true)
}

func TestReconnectOpResumes(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	require.True(t, srv.SendOp(7, nil))
	require.NoError(t, srv.Wait(tctx(t), func() bool { return len(srv.Resumes()) == 1 }))
	sink.waitOnline(t, true)
	require.Len(t, srv.Identifies(), 1)
}

// Op 9 on a Resume: the session is forgotten and the next connection
// identifies anew.
func TestInvalidSessionIdentifiesAnew(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	srv.ForgetSessions()
	require.True(t, srv.DropConnection(0, ""))
	require.NoError(t, srv.Wait(tctx(t), func() bool { return len(srv.Identifies()) == 2 }))
	require.Len(t, srv.Resumes(), 1, "one Resume, refused with op 9")
	p, err := srv.Push(tctx(t), qqbottest.Incoming{Chat: aliceChat, From: alice, Text: "after"})
	require.NoError(t, err)
	evs := sink.waitEvents(t, 1)
	require.Equal(t, p.ID, evs[0].MessageID)
}

func TestCloseCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code     int
		identify bool // the next connection identifies (else resumes)
	}{
		{4009, false},
		{4008, false},
		{4006, true},
		{4007, true},
		{4900, true},
		{4001, true},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			t.Parallel()
			srv := newFake(t, qqbottest.Config{})
			ch := newChannel(t, srv, nil)
			sink := newRecSink()
			run(t, ch, sink)
			sink.waitOnline(t, true)
			require.True(t, srv.DropConnection(tc.code, "test"))
			ctx := tctx(t)
			if tc.identify {
				require.NoError(t, srv.Wait(ctx, func() bool { return len(srv.Identifies()) == 2 }), "code %d", tc.code)
				require.Empty(t, srv.Resumes(), "code %d", tc.code)
			} else {
				require.NoError(t, srv.Wait(ctx, func() bool { return len(srv.Resumes()) == 1 }), "code %d", tc.code)
				require.Len(t, srv.Identifies(), 1, "code %d", tc.code)
			}
		})
	}
}

func TestFatalCloseCodesEndRun(t *testing.T) {
	t.Parallel()
	for _, code := range []int{4010, 4013, 4014, 4914, 4915} {
		srv := newFake(t, qqbottest.Config{})
		ch := newChannel(t, srv, nil)
		sink := newRecSink()
		done := make(chan error, 1)
		go func() { done <- ch.Run(t.Context(), sink) }()
		sink.waitOnline(t, true)
		require.True(t, srv.DropConnection(code, "fatal"))
		select {
		case err := <-done:
			var ge *qqbot.GatewayError
			require.ErrorAs(t, err, &ge, "code %d", code)
			require.Equal(t, code, ge.Code)
		case <-time.After(waitTimeout):
			t.Fatalf("Run did not end after close code %d", code)
		}
	}
}

// Intents the bot may not use close the connection with 4014, which ends
// Run.
func TestDisallowedIntentsEndRun(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{Intents: 1 << 25})
	ch := newChannel(t, srv, nil)
	err := ch.Run(tctx(t), newRecSink())
	var ge *qqbot.GatewayError
	require.ErrorAs(t, err, &ge)
	require.Equal(t, 4014, ge.Code)

	ch2 := newChannel(t, srv, func(c *qqbot.Config) { c.Intents = qqbot.IntentGroupAndC2C })
	sink := newRecSink()
	run(t, ch2, sink)
	sink.waitOnline(t, true)
}

// Reconnect attempts wait 1 s doubling (±20 %) on the injected clock.
func TestReconnectBackoffOnClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := newFake(t, qqbottest.Config{Clock: clk})
	ch := newChannel(t, srv, func(c *qqbot.Config) {
		c.Clock = clk
		c.RetryMin, c.RetryMax = time.Second, 8*time.Second
	})
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	require.NoError(t, srv.SetOffline(ctx, true))
	sink.waitOnline(t, false)

	gatewayCalls := func() int {
		n := 0
		for _, c := range srv.Calls() {
			if c.Path == "/gateway" {
				n++
			}
		}
		return n
	}
	// The heartbeat timer of the dead connection is gone once the
	// reconnect timer is the only one.
	base := gatewayCalls()
	for i, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond, "attempt %d: backoff timer", i+1)
		clk.Advance(d * 79 / 100)
		require.Equal(t, 1, clk.Pending(), "attempt %d: fired before 80 %% of %s", i+1, d)
		require.Equal(t, base+i, gatewayCalls())
		clk.Advance(d * 42 / 100) // now past 120 %
		require.Eventually(t, func() bool { return gatewayCalls() == base+i+1 }, waitTimeout, time.Millisecond, "attempt %d", i+1)
	}
	require.NoError(t, srv.SetOffline(ctx, false))
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond)
	clk.Advance(10 * time.Second)
	sink.waitOnline(t, true)
}

// A refused event closes the connection and is delivered again after the
// backoff, from the last accepted s; the saved s never passes an event
// the sink did not accept.
func TestNackRedeliversAfterResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := newFake(t, qqbottest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *qqbot.Config) { c.StateDir = dir; c.Logger = log })
	var mu sync.Mutex
	refuse := 2
	var savedAtHandle []int64
	sink := newRecSink()
	sink.SetHandler(func(_ context.Context, ev channel.Event) error {
		_, saved := readState(t, dir, srv.AppID())
		mu.Lock()
		defer mu.Unlock()
		savedAtHandle = append(savedAtHandle, saved)
		if refuse > 0 {
			refuse--
			return errors.New("store unavailable")
		}
		return nil
	})
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "hello"})
	require.NoError(t, err)

	evs := sink.waitEvents(t, 1)
	require.Equal(t, p.ID, evs[0].MessageID)
	require.Len(t, sink.Refused(), 2)
	require.Len(t, srv.Identifies(), 1)
	require.GreaterOrEqual(t, len(srv.Resumes()), 2)
	require.Eventually(t, func() bool {
		_, seq := readState(t, dir, srv.AppID())
		return seq >= p.Seq
	}, waitTimeout, time.Millisecond)
	mu.Lock()
	require.Len(t, savedAtHandle, 3)
	for _, saved := range savedAtHandle {
		require.Less(t, saved, p.Seq, "the saved s passed the event before the sink accepted it")
	}
	mu.Unlock()
	require.Contains(t, buf.String(), "qq_event_nacked")
}

// The process dies while the sink handles the second of three events; a
// new process with the same StateDir resumes the session after the first
// and receives the other two, each once.
func TestRestartResumesFromSavedSeq(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := newFake(t, qqbottest.Config{})
	ctx := tctx(t)

	reached := make(chan struct{})
	var once sync.Once
	sink1 := newRecSink()
	sink1.SetHandler(func(ctx context.Context, ev channel.Event) error {
		if ev.Text() == "two" {
			once.Do(func() { close(reached) })
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	ch1 := newChannel(t, srv, func(c *qqbot.Config) { c.StateDir = dir })
	stop1 := run(t, ch1, sink1)
	sink1.waitOnline(t, true)
	var pushed []qqbottest.Pushed
	for _, text := range []string{"one", "two", "three"} {
		p, err := srv.Push(ctx, qqbottest.Incoming{Chat: aliceChat, From: alice, Text: text})
		require.NoError(t, err)
		pushed = append(pushed, p)
	}
	select {
	case <-reached:
	case <-time.After(waitTimeout):
		t.Fatal("the first process never reached the second event")
	}
	require.NoError(t, stop1())
	sessionID, seq := readState(t, dir, srv.AppID())
	require.NotEmpty(t, sessionID)
	require.Equal(t, pushed[0].Seq, seq, "only the accepted event moved the saved s")

	sink2 := newRecSink()
	ch2 := newChannel(t, srv, func(c *qqbot.Config) { c.StateDir = dir })
	run(t, ch2, sink2)
	evs := sink2.waitEvents(t, 2)
	require.Equal(t, []string{pushed[1].ID, pushed[2].ID}, []string{evs[0].MessageID, evs[1].MessageID})
	rs := srv.Resumes()
	require.NotEmpty(t, rs)
	require.Equal(t, qqbottest.Resume{Token: rs[0].Token, SessionID: sessionID, Seq: seq}, rs[0])
	require.Len(t, srv.Identifies(), 1, "the restart resumed instead of identifying")
}
