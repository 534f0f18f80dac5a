package store

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

func TestMemoryJobLeases(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	ok, err := d.EnqueueJob(ctx, memory.Job{MessageKey: "m1", SessionKey: "s", Platform: "onebot", SubjectUserID: "u1"})
	require.NoError(t, err)
	require.True(t, ok)
	_, err = d.EnqueueJob(ctx, memory.Job{MessageKey: "m2"})
	require.ErrorIs(t, err, ErrInvalid)

	ls, err := d.ClaimJobs(ctx, "a", 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, 1, ls[0].Attempts)
	l := ls[0]
	l, err = d.ExtendJob(ctx, l, 2*time.Minute)
	require.NoError(t, err)
	require.Equal(t, t0.Add(2*time.Minute), l.Until)

	// Expired and claimed by another worker: the first holder is fenced.
	clk.Advance(2 * time.Minute)
	ls2, err := d.ClaimJobs(ctx, "b", 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, ls2, 1)
	require.Equal(t, 2, ls2[0].Claims)
	_, err = d.CompleteJob(ctx, l, []memory.Change{fact0("u1", "k", "v")})
	require.ErrorIs(t, err, memory.ErrLeaseLost)
	require.ErrorIs(t, d.RetryJob(ctx, l, clk.Now(), errors.New("x"), false), memory.ErrLeaseLost)
	_, err = d.ExtendJob(ctx, l, time.Minute)
	require.ErrorIs(t, err, memory.ErrLeaseLost)
	facts, err := d.Facts(ctx, "onebot", "u1")
	require.NoError(t, err)
	require.Empty(t, facts, "a fenced completion writes nothing")

	// Retry delays the next claim; dead marks it failed.
	require.NoError(t, d.RetryJob(ctx, ls2[0], clk.Now().Add(time.Minute), errors.New("boom"), false))
	ls3, err := d.ClaimJobs(ctx, "b", 5, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ls3)
	clk.Advance(time.Minute)
	ls3, err = d.ClaimJobs(ctx, "b", 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, ls3, 1)
	require.Equal(t, 3, ls3[0].Attempts)
	require.NoError(t, d.RetryJob(ctx, ls3[0], clk.Now(), errors.New("boom"), true))
	counts, err := d.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"failed": 1}, counts)
}

func fact0(subject, key, content string) memory.Change {
	return memory.Change{Fact: memory.Fact{Scope: memory.ScopeUser, SubjectUserID: subject, Key: key, Content: content,
		Platform: "onebot", Confidence: 1, Importance: 1}}
}

func TestApplyChangesValidation(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	bad := []memory.Change{
		{Fact: memory.Fact{Scope: "team", Key: "k", Content: "c"}},
		{Fact: memory.Fact{Scope: memory.ScopeUser, Content: "c"}},
		{Fact: memory.Fact{Scope: memory.ScopeUser, Key: "k"}},
		{Fact: memory.Fact{Scope: memory.ScopeGroup, Key: "k", Content: "c"}},
		{Fact: memory.Fact{Scope: memory.ScopeUser, Key: "k", Content: "c", Kind: "rumour"}},
	}
	for _, c := range bad {
		_, err := d.ApplyChanges(t.Context(), []memory.Change{c})
		require.ErrorIs(t, err, ErrInvalid)
	}
	long := fact0("u1", "k", "c")
	long.Fact.Evidence = "这是一段非常长的证据文本，超过了六十个字符的限制，所以应该被截断到正好六十个字符，多余的部分不会被保存下来的，对吧对吧对吧"
	_, err := d.ApplyChanges(t.Context(), []memory.Change{long})
	require.NoError(t, err)
	facts, err := d.Facts(t.Context(), "onebot", "u1")
	require.NoError(t, err)
	require.Len(t, []rune(facts[0].Evidence), memory.MaxEvidenceRunes)
	_, err = d.Fact(t.Context(), 999)
	require.ErrorIs(t, err, memory.ErrNotFound)
	_, err = d.Message(t.Context(), "nope")
	require.ErrorIs(t, err, memory.ErrNotFound)
}
