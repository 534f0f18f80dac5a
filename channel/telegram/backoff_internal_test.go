package telegram

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram/telegramtest"
	"github.com/personakit/persona/clock"
)

func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	c, err := New(Config{Token: "1:x"})
	require.NoError(t, err)
	c.jitter = func() float64 { return 0.5 } // factor exactly 1
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, c.backoff(n))
	}
	s := time.Second
	require.Equal(t, []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s, 60 * s}, got)

	c.jitter = func() float64 { return 0 }
	require.Equal(t, 800*time.Millisecond, c.backoff(1), "-20 %")
	require.Equal(t, 48*time.Second, c.backoff(10))
	c.jitter = func() float64 { return 0.999999 }
	require.InDelta(t, float64(72*time.Second), float64(c.backoff(1000)), float64(time.Millisecond), "+20 % at the cap, no overflow")
}

// stateSink records state reports.
type stateSink struct {
	mu     sync.Mutex
	states []channel.State
}

func (s *stateSink) HandleEvent(context.Context, channel.Event) error { return nil }
func (s *stateSink) ReportState(_ context.Context, st channel.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states = append(s.states, st)
}

func (s *stateSink) last() (channel.State, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.states) == 0 {
		return channel.State{}, 0
	}
	return s.states[len(s.states)-1], len(s.states)
}

// Reconnect backoff on the injected clock: with the API down from the
// start, getMe is retried after 1, 2, 4, ... 60, 60 s (jitter pinned to
// 1.0), the channel reports offline after the third failure, and online
// again as soon as the API answers.
func TestReconnectBackoffOnClock(t *testing.T) {
	t.Parallel()
	srv := telegramtest.New(telegramtest.Config{})
	t.Cleanup(srv.Close)
	require.NoError(t, srv.SetOffline(t.Context(), true))
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := New(Config{Token: srv.Token(), APIBase: srv.URL(), Clock: clk})
	require.NoError(t, err)
	c.jitter = func() float64 { return 0.5 }
	sink := &stateSink{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, sink) }()
	t.Cleanup(func() { cancel(); <-done })

	// waitArmed waits for the n-th getMe and the retry timer it arms.
	waitArmed := func(n int) {
		t.Helper()
		require.NoError(t, srv.WaitCalls(t.Context(), "getMe", n))
		require.Eventually(t, func() bool { return clk.Pending() == 1 }, 10*time.Second, time.Millisecond)
	}
	s := time.Second
	for i, d := range []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s} {
		waitArmed(i + 1)
		st, _ := sink.last()
		if i+1 >= DefaultOfflineAfter {
			require.False(t, st.Online, "offline after %d failures", i+1)
			require.False(t, st.Connected)
			require.Contains(t, st.Reason, "getMe failed")
		}
		clk.Advance(d - time.Millisecond)
		require.Equal(t, 1, clk.Pending(), "retry %d fired before %s", i+1, d)
		require.Equal(t, i+1, srv.CallCount("getMe"))
		clk.Advance(time.Millisecond)
	}
	waitArmed(9)

	// Send fails fast while offline.
	_, err = c.Send(t.Context(), channel.Outgoing{Chat: channel.Chat{Kind: channel.Private, ID: "1"}, Text: "x"})
	require.ErrorIs(t, err, channel.ErrOffline)
	require.Zero(t, srv.CallCount("sendMessage"))

	require.NoError(t, srv.SetOffline(t.Context(), false))
	clk.Advance(60 * time.Second)
	require.Eventually(t, func() bool { st, _ := sink.last(); return st.Online && st.Connected }, 10*time.Second, time.Millisecond)
	st, _ := sink.last()
	require.Equal(t, srv.BotID(), st.BotID)
	require.Equal(t, "polling", st.Reason)
}
