package persona

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
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

// before keeps the context entries in order: the history's own run of
// them when they are contiguous (no copy, capacity cut at the length), a
// copy when something in between is not context, and an empty, non-nil
// slice when nothing is.
func TestBeforeLendsAContiguousRun(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	entry := func(id string, dir memory.Direction, offset time.Duration) memory.Entry {
		ev := channel.Event{Platform: "p", BotID: "b", Kind: channel.KindMessage,
			Chat: channel.Chat{Kind: channel.Group, ID: "g"}, MessageID: id, Time: at.Add(offset)}
		return memory.Entry{Key: ev.Key(), Direction: dir, Event: ev}
	}
	cur := entry("cur", memory.In, 0)
	l := inbound.Lease{Item: inbound.Item{ID: cur.Key, Event: cur.Event}}
	p := &Pipeline{}
	keys := func(es []memory.Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Event.MessageID)
		}
		return out
	}

	hist := []memory.Entry{entry("a", memory.In, -3*time.Second), entry("b", memory.Out, -2*time.Second), cur,
		entry("later", memory.In, time.Second)}
	got := p.before(hist, l)
	require.Equal(t, []string{"a", "b"}, keys(got))
	require.Same(t, &hist[0], &got[0], "a contiguous run is lent")
	require.Equal(t, len(got), cap(got))

	hist = []memory.Entry{entry("a", memory.In, -3*time.Second), entry("n", memory.Notice, -2*time.Second),
		entry("b", memory.In, -time.Second), cur}
	got = p.before(hist, l)
	require.Equal(t, []string{"a", "b"}, keys(got))
	require.NotSame(t, &hist[0], &got[0], "a broken run is copied")

	got = p.before([]memory.Entry{cur}, l)
	require.NotNil(t, got)
	require.Empty(t, got)
}
