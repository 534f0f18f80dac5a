package agent_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/clock"
)

func TestLoopCarryOver(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agent.LoopConfig{Steps: 14})
	steps := make([]agenttest.Step, 0, 15)
	for range 14 {
		steps = append(steps, distinct("lookup"))
	}
	m := agenttest.New(append(steps, finalize("partial answer"))...)
	res, err := f.loop.RunLoop(t.Context(), f.input(m))
	require.NoError(t, err)
	require.Equal(t, agent.FinishForcedSteps, res.Finish)

	arch := f.loop.Carry().Archive("g1")
	require.Len(t, arch, 12, "up to 12 step summaries")
	require.Contains(t, arch[0], "lookup(")
	require.Len(t, f.loop.Carry().RecentCalls("g1"), 8, "the last 8 tool calls")
	blocks := f.loop.MemoryBlocks("g1")
	require.Contains(t, blocks.CarryOver, "Carry-over from the last turn")
	require.Contains(t, blocks.RecentCalls, "Recent tool calls")

	// The next turn sees both blocks; a normal finish clears the archive.
	m = agenttest.New(finalize("ok"))
	_, err = f.loop.RunLoop(t.Context(), f.input(m))
	require.NoError(t, err)
	require.Contains(t, m.Last().Messages[1].Content, "Carry-over from the last turn")
	require.Contains(t, m.Last().Messages[1].Content, "Recent tool calls")
	require.Empty(t, f.loop.Carry().Archive("g1"))

	// SkipMemoryBlocks leaves them to the prompt builder.
	m = agenttest.New(finalize("ok"))
	in := f.input(m)
	in.SkipMemoryBlocks = true
	_, err = f.loop.RunLoop(t.Context(), in)
	require.NoError(t, err)
	require.NotContains(t, m.Last().Messages[1].Content, "Recent tool calls")

	f.clk.Advance(30*time.Minute + time.Second)
	require.Empty(t, f.loop.Carry().RecentCalls("g1"), "recent calls expire after 30 minutes")
	require.Equal(t, agent.MemoryBlocks{}, f.loop.MemoryBlocks("g1"))
}

func TestCarryStoreWindows(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(loopT0)
	s := agent.NewCarryStore(agent.CarryConfig{Clock: clk})
	s.SetArchive("s", []string{"a", "b"})
	for i := range 10 {
		s.AddCalls("s", agent.CallRecord{Tool: fmt.Sprint("t", i), At: clk.Now()})
	}
	require.Len(t, s.RecentCalls("s"), 8)
	require.Equal(t, "t2", s.RecentCalls("s")[0].Tool)
	clk.Advance(10 * time.Minute)
	require.Empty(t, s.Archive("s"), "the archive is valid 10 minutes")
	require.Len(t, s.RecentCalls("s"), 8)
	require.Empty(t, s.RecentCalls("other"))
}

type failingSnapshots struct{}

func (failingSnapshots) LoadSnapshot(context.Context, string) (agent.ToolSnapshot, bool, error) {
	return agent.ToolSnapshot{}, false, errors.New("db down")
}

func (failingSnapshots) SaveSnapshot(context.Context, string, agent.ToolSnapshot) error {
	return errors.New("db down")
}

func TestLoopSnapshotRestore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		group    bool
		after    time.Duration
		restored bool
	}{
		{name: "group within 30 min", group: true, after: 29 * time.Minute, restored: true},
		{name: "group after 30 min", group: true, after: 30 * time.Minute},
		{name: "private sessions keep nothing", group: false, after: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			snaps := agent.NewMemorySnapshots()
			f := newFixture(t, agent.LoopConfig{Snapshots: snaps})
			m := agenttest.New(agenttest.ToolCall(agent.ToolsLoad, `{"names":["notes"]}`), finalize("ok"))
			in := f.input(m)
			in.Group = tt.group
			_, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			f.clk.Advance(tt.after)

			m = agenttest.New(agenttest.ToolCall("notes", `{"n":1}`), finalize("ok"))
			in = f.input(m)
			in.Group = tt.group
			res, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			require.Equal(t, tt.restored, contains(toolNames(m.Requests()[0]), "notes"))
			if tt.restored {
				require.Equal(t, 0, res.Repairs)
				require.Equal(t, []string{`{"n":1}`}, f.rec.calls())
			} else {
				require.Equal(t, 1, res.Repairs, "not loaded")
			}
		})
	}
	t.Run("store errors are not fatal", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, agent.LoopConfig{Snapshots: failingSnapshots{}})
		in := f.input(agenttest.New(agenttest.ToolCall(agent.ToolsLoad, `{"names":["notes"]}`), finalize("ok")))
		in.Group = true
		res, err := f.loop.RunLoop(t.Context(), in)
		require.NoError(t, err)
		require.Equal(t, "ok", res.Text)
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestConfirmStore(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(loopT0)
	s := agent.NewConfirmStore(clk, 0)
	code := s.Issue("s", "install")
	require.Len(t, code, 6)
	require.Equal(t, code, s.Issue("s", "install"), "a pending code is reused")
	require.False(t, s.Redeem("s", "other", code), "codes are per tool")
	require.False(t, s.Redeem("t", "install", code), "codes are per session")
	require.False(t, s.Redeem("s", "install", "no code here"))
	require.True(t, s.Redeem("s", "install", "yes "+code))
	require.False(t, s.Redeem("s", "install", "yes "+code), "one-time")
	code = s.Issue("s", "install")
	clk.Advance(10 * time.Minute)
	require.False(t, s.Redeem("s", "install", code), "valid 10 minutes")
}
