package outbound_test

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outbound"
)

func TestLanesBackoffCooldownAndRecovery(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(t0)
	var logs bytes.Buffer
	st := &outbound.MemoryState{}
	l, err := outbound.NewLanes(outbound.LanesConfig{State: st, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)

	s, err := l.Check(ctx, groupKey, outbound.LaneText)
	require.NoError(t, err)
	require.Equal(t, outbound.LaneStatus{}, s, "a fresh lane is open")

	// Backoff: 1, 2, 4, 8, 15, 15 min, each × jitter in [1.0, 1.2].
	bases := []time.Duration{1, 2, 4, 8, 15, 15}
	elapsed := time.Duration(0)
	for i, b := range bases {
		f, err := l.Fail(ctx, groupKey, outbound.LaneText)
		require.NoError(t, err)
		if elapsed >= 30*time.Minute {
			break
		}
		require.True(t, f.Wait, "failure %d", i+1)
		require.Equal(t, i+1, f.Failures)
		d := f.Until.Sub(clk.Now())
		require.GreaterOrEqual(t, d, b*time.Minute, "failure %d", i+1)
		require.LessOrEqual(t, d, b*time.Minute*12/10, "failure %d", i+1)

		c, err := l.Check(ctx, groupKey, outbound.LaneText)
		require.NoError(t, err)
		require.True(t, c.Wait)
		require.Equal(t, f.Until, c.Until, "snooze until the lane's next attempt")
		// The media lane is independent.
		m, err := l.Check(ctx, groupKey, outbound.LaneMedia)
		require.NoError(t, err)
		require.False(t, m.Wait || m.Drop)

		clk.Set(f.Until)
		elapsed = clk.Now().Sub(t0)
		c, err = l.Check(ctx, groupKey, outbound.LaneText)
		require.NoError(t, err)
		require.False(t, c.Wait || c.Drop, "due again")
	}
	// 30 minutes after the first failure: drop cooldown.
	require.GreaterOrEqual(t, clk.Now().Sub(t0), 30*time.Minute)
	c, err := l.Check(ctx, groupKey, outbound.LaneText)
	require.NoError(t, err)
	require.True(t, c.Drop)
	require.Equal(t, clk.Now().Add(30*time.Minute), c.Until)
	require.Contains(t, logs.String(), "outbound_delivery_backoff")
	require.Contains(t, logs.String(), "outbound_delivery_dropped")

	clk.Advance(29 * time.Minute)
	c, _ = l.Check(ctx, groupKey, outbound.LaneText)
	require.True(t, c.Drop)
	clk.Advance(time.Minute)
	c, _ = l.Check(ctx, groupKey, outbound.LaneText)
	require.False(t, c.Drop || c.Wait, "cooldown over")

	// A failure after the cooldown starts a new series; a success resets.
	f, err := l.Fail(ctx, groupKey, outbound.LaneText)
	require.NoError(t, err)
	require.Equal(t, 1, f.Failures)
	require.NoError(t, l.Succeed(ctx, groupKey, outbound.LaneText))
	c, _ = l.Check(ctx, groupKey, outbound.LaneText)
	require.Equal(t, outbound.LaneStatus{}, c)
	require.Contains(t, logs.String(), "outbound_delivery_recovered")
}

func TestLanesJitterIsDeterministic(t *testing.T) {
	t.Parallel()
	run := func() time.Time {
		l, err := outbound.NewLanes(outbound.LanesConfig{State: &outbound.MemoryState{}, Clock: clock.NewFake(t0)})
		require.NoError(t, err)
		s, err := l.Fail(t.Context(), groupKey, outbound.LaneMedia)
		require.NoError(t, err)
		return s.Until
	}
	require.Equal(t, run(), run())
	_, err := outbound.NewLanes(outbound.LanesConfig{})
	require.Error(t, err)
}
