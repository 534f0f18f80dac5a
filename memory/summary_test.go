package memory_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// summaryModel answers summary calls with "summary #n" and counts them.
func summaryModel(calls *atomic.Int32) *agenttest.Model {
	return agenttest.New().Otherwise(agenttest.Func(func(_ context.Context, req agent.Request) (*agent.Response, error) {
		if req.Purpose != agent.PurposeSummary {
			return nil, fmt.Errorf("unexpected purpose %q", req.Purpose)
		}
		n := calls.Add(1)
		return &agent.Response{Text: fmt.Sprintf("summary #%d", n)}, nil
	}))
}

func TestSummaryEpochs(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	var calls atomic.Int32
	m := summaryModel(&calls)
	s, err := memory.NewSummarizer(d, m, memory.SummaryConfig{Clock: clk})
	require.NoError(t, err)
	ctx := t.Context()
	keys := make([]string, 0, 260)
	addN := func(n int) {
		for range n {
			i := len(keys)
			e := add(t, d, event(group1, fmt.Sprintf("%03d", i), "u1", "A", fmt.Sprintf("message %d", i), t0.Add(time.Duration(i)*time.Second)))
			keys = append(keys, e.Key)
		}
	}

	addN(99) // below KeepRecent + Epoch
	_, changed, err := s.Refresh(ctx, session(group1))
	require.NoError(t, err)
	require.False(t, changed)
	_, ok, err := s.Checkpoint(ctx, session(group1))
	require.NoError(t, err)
	require.False(t, ok)

	addN(1) // 100: one epoch of 50 folds, 50 stay recent
	cp, changed, err := s.Refresh(ctx, session(group1))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 1, cp.Epoch)
	require.Equal(t, 50, cp.Messages)
	require.Equal(t, keys[49], cp.Watermark.Key)
	require.Equal(t, "summary #1", cp.Text)
	require.Equal(t, int32(1), calls.Load())

	// Without input change nothing is recomputed, however often Refresh
	// runs, and a Summarizer rebuilt with the same version (a config
	// reload) keeps it too.
	addN(49)
	for range 3 {
		_, changed, err = s.Refresh(ctx, session(group1))
		require.NoError(t, err)
		require.False(t, changed)
	}
	s2, err := memory.NewSummarizer(d, m, memory.SummaryConfig{Clock: clk, MaxChars: 1000, KeepRecent: 50})
	require.NoError(t, err)
	_, changed, err = s2.Refresh(ctx, session(group1))
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, int32(1), calls.Load())

	// The prefix advances only in whole epochs.
	addN(1) // 100 unsummarised after the watermark
	cp, changed, err = s.Refresh(ctx, session(group1))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 2, cp.Epoch)
	require.Equal(t, keys[99], cp.Watermark.Key)
	require.Equal(t, int32(2), calls.Load())
	reqs := m.Requests()
	require.Contains(t, reqs[len(reqs)-1].Messages[1].Content, "PREVIOUS SUMMARY:\nsummary #1")

	// A recalled message inside the current epoch changes its input.
	require.NoError(t, d.MarkRecalled(ctx, keys[70], t0.Add(time.Hour)))
	cp, changed, err = s.Refresh(ctx, session(group1))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 2, cp.Epoch)
	require.Equal(t, "summary #3", cp.Text)
	require.NotContains(t, m.Requests()[2].Messages[1].Content, "message 70\n")

	// A version bump recomputes; a second refresh does not.
	s3, err := memory.NewSummarizer(d, m, memory.SummaryConfig{Clock: clk, Version: 2})
	require.NoError(t, err)
	cp, changed, err = s3.Refresh(ctx, session(group1))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 2, cp.Version)
	require.Equal(t, "summary #4", cp.Text)
	_, changed, err = s3.Refresh(ctx, session(group1))
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, int32(4), calls.Load())

	// The stable history after the checkpoint.
	recent, err := memory.RecentAfter(ctx, d, session(group1), cp.Watermark, 80)
	require.NoError(t, err)
	require.Len(t, recent, 50)
	require.Equal(t, keys[100], recent[0].Key)
}

func TestSummaryCapsAndFailures(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	m := agenttest.New().OnPurpose(agent.PurposeSummary,
		agenttest.Fail(&agent.Error{Kind: agent.KindTimeout}),
		agenttest.Reply(strings.Repeat("长", 5000)))
	s, err := memory.NewSummarizer(d, m, memory.SummaryConfig{Clock: clk, Epoch: 10, KeepRecent: 5})
	require.NoError(t, err)
	for i := range 16 {
		add(t, d, event(group1, fmt.Sprint(i), "u1", "A", "你好", t0.Add(time.Duration(i)*time.Second)))
	}
	_, changed, err := s.Refresh(t.Context(), session(group1))
	require.Error(t, err)
	require.False(t, changed)
	cp, changed, err := s.Refresh(t.Context(), session(group1))
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 10, cp.Messages)
	require.Equal(t, 4000, len([]rune(cp.Text)))
}

func TestAfter(t *testing.T) {
	t.Parallel()
	t1 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	entries := []memory.Entry{
		{Key: "a"}, {Key: "b"}, {Key: "c"}, {Key: "d"},
	}
	entries[0].Event.Time = t1.Add(-time.Minute)
	entries[1].Event.Time = t1
	entries[2].Event.Time = t1
	entries[3].Event.Time = t1.Add(time.Minute)
	keys := func(es []memory.Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Key)
		}
		return out
	}
	require.Equal(t, []string{"a", "b", "c", "d"}, keys(memory.After(entries, memory.Watermark{})), "the zero watermark keeps all")
	require.Equal(t, []string{"c", "d"}, keys(memory.After(entries, memory.Watermark{Time: t1, Key: "b"})),
		"at the watermark's time only later keys come after it")
}
