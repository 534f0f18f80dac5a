package persona

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/clock"
)

// Loaded-tool snapshots live in the session flags: they survive a restart
// and expire after the snapshot TTL.
func TestToolSnapshotsInFlags(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	open := func() *Pipeline {
		p, err := New(Options{DataDir: dir, Model: agenttest.New(), Clock: clk, Agent: true})
		require.NoError(t, err)
		return p
	}
	p := open()
	ctx := t.Context()
	snap := agent.ToolSnapshot{Loaded: []string{"weather", "calendar"}, SavedAt: clk.Now()}
	require.NoError(t, flagSnapshots{p}.SaveSnapshot(ctx, "s1", snap))
	require.NoError(t, p.Close())

	p = open()
	defer func() { require.NoError(t, p.Close()) }()
	got, ok, err := flagSnapshots{p}.LoadSnapshot(ctx, "s1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, snap.Loaded, got.Loaded)
	clk.Advance(agent.DefaultSnapshotTTL)
	_, ok, err = flagSnapshots{p}.LoadSnapshot(ctx, "s1")
	require.NoError(t, err)
	require.False(t, ok, "expired")
}
