package memory_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/store"
)

const cityAnswer = `{"candidates":[
 {"op":"upsert","scope":"user","subject_user_id":"u1","key":"home_city","kind":"fact","content":"住在杭州","evidence":"我住在杭州","source_type":"explicit","confidence":0.95,"importance":0.8},
 {"op":"upsert","scope":"user","key":"mood","kind":"fact","content":"今天有点累","source_type":"explicit","confidence":0.9,"importance":0.2},
 {"op":"upsert","scope":"user","key":"job_guess","kind":"fact","content":"可能是程序员","source_type":"inferred","confidence":0.6,"importance":0.7},
 {"op":"upsert","scope":"group","key":"trip","kind":"episode","content":"组织了一次西湖徒步","source_type":"explicit","confidence":0.9,"importance":0.6}
]}`

func newExtractor(t *testing.T, d memory.ExtractStore, m agent.Model, clk clock.Clock) *memory.Extractor {
	t.Helper()
	x, err := memory.NewExtractor(d, m, memory.ExtractConfig{Clock: clk, Owner: "w1"})
	require.NoError(t, err)
	return x
}

func TestEligible(t *testing.T) {
	t.Parallel()
	ev := func(text string) memory.Entry {
		return memory.Entry{Direction: memory.In, Event: event(group1, "1", "u1", "", text, t0)}
	}
	bot := ev("hello there")
	bot.Event.Sender.IsBot = true
	self := ev("hello there")
	self.Direction = memory.Out
	cases := []struct {
		e    memory.Entry
		want bool
	}{
		{ev("hi"), true},
		{ev("我在"), true},
		{ev("a"), false},
		{ev("?!… 😀"), false},
		{ev("https://example.com/abc?x=1"), false},
		{ev("see https://example.com/abc ok"), true},
		{bot, false},
		{self, false},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, memory.Eligible(&tc.e), tc.e.Event.Text())
	}
}

func TestExtractionKeepsSourcesAndRules(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	add(t, d, event(group1, "1", "u2", "Bob", "周末大家去哪玩", t0))
	e := add(t, d, event(group1, "2", "u1", "小明", "我住在杭州，上周组织了一次西湖徒步", t0.Add(time.Minute)))
	m := agenttest.New().OnPurpose(agent.PurposeMemory, agenttest.Reply(cityAnswer))
	x := newExtractor(t, d, m, clk)

	ok, err := x.Enqueue(t.Context(), e)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = x.Enqueue(t.Context(), e)
	require.NoError(t, err)
	require.False(t, ok, "one job per message")

	n, err := x.RunOnce(t.Context(), 2)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	reqs := m.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, agent.PurposeMemory, reqs[0].Purpose)
	prompt := reqs[0].Messages[1].Content
	require.Contains(t, prompt, "周末大家去哪玩", "recent context")
	require.Contains(t, prompt, "NEW MESSAGE:\n[2026-03-01 12:01] 小明 (u_")
	require.NotContains(t, prompt, "(id ")

	facts, err := d.Facts(t.Context(), "onebot", "u1")
	require.NoError(t, err)
	require.Len(t, facts, 1, "low importance and low-confidence inferred candidates dropped")
	require.Equal(t, "住在杭州", facts[0].Content)
	require.Equal(t, []string{e.Key}, facts[0].SourceMessageIDs)
	require.Equal(t, session(group1), facts[0].SessionKey)

	// The group episode expires after 90 days.
	r := newRecaller(t, d, clk, memory.RecallConfig{})
	rc, err := r.Recall(t.Context(), memory.Query{SessionKey: session(group1), UserID: "u1", Text: "西湖徒步"})
	require.NoError(t, err)
	require.Contains(t, contents(rc), "组织了一次西湖徒步")
	for _, f := range rc.Facts {
		if f.Kind == memory.KindEpisode {
			require.Equal(t, t0.Add(90*24*time.Hour), f.ExpiresAt)
			require.Equal(t, []string{e.Key}, f.SourceMessageIDs)
		}
	}
	counts, err := d.JobCounts(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"done": 1}, counts)
}

func TestExtractionRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	e := add(t, d, event(private, "1", "u1", "", "I moved to Berlin last month", t0))
	m := agenttest.New().OnPurpose(agent.PurposeMemory,
		agenttest.Fail(&agent.Error{Kind: agent.KindServer}),
		agenttest.Reply("not json"),
		agenttest.Reply(`{"candidates":[{"op":"upsert","scope":"user","key":"city","content":"lives in Berlin","confidence":0.9,"importance":0.7}]}`))
	x := newExtractor(t, d, m, clk)
	_, err := x.Enqueue(t.Context(), e)
	require.NoError(t, err)

	n, err := x.RunOnce(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	clk.Advance(14 * time.Second)
	n, _ = x.RunOnce(t.Context(), 1)
	require.Zero(t, n, "first retry after 15 s")
	clk.Advance(time.Second)
	n, _ = x.RunOnce(t.Context(), 1)
	require.Equal(t, 1, n)
	clk.Advance(29 * time.Second)
	n, _ = x.RunOnce(t.Context(), 1)
	require.Zero(t, n, "second retry after 30 s")
	clk.Advance(time.Second)
	n, _ = x.RunOnce(t.Context(), 1)
	require.Equal(t, 1, n)
	facts, err := d.Facts(t.Context(), "onebot", "u1")
	require.NoError(t, err)
	require.Len(t, facts, 1)
	require.Equal(t, memory.ScopeUser, facts[0].Scope)
	require.Equal(t, "private", facts[0].ChatKind)
}

func TestExtractionSurvivesRestart(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	path := filepath.Join(t.TempDir(), "p.db")
	d1, err := store.Open(path, store.Options{Clock: clk})
	require.NoError(t, err)
	e := add(t, d1, event(private, "1", "u1", "", "我住在杭州", t0))

	called := make(chan struct{})
	release := make(chan struct{})
	m1 := agenttest.New().OnPurpose(agent.PurposeMemory, agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		close(called)
		<-release
		return &agent.Response{Text: cityAnswer}, nil
	}))
	x1 := newExtractor(t, d1, m1, clk)
	_, err = x1.Enqueue(t.Context(), e)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := x1.RunOnce(t.Context(), 1); done <- err }()
	<-called
	// The process "dies" while the job is leased and the model is working.
	require.NoError(t, d1.Close())
	close(release)
	require.ErrorIs(t, <-done, store.ErrClosed)

	d2 := openStore(t, clk, path)
	m2 := agenttest.New().OnPurpose(agent.PurposeMemory, agenttest.Reply(cityAnswer))
	x2 := newExtractor(t, d2, m2, clk)
	// The job is claimed again: at once when the store frees a gone
	// owner's leases at Open, else once the lease expires. No job is lost.
	n, err := x2.RunOnce(t.Context(), 1)
	require.NoError(t, err)
	if n == 0 {
		clk.Advance(memory.DefaultJobLease)
		n, err = x2.RunOnce(t.Context(), 1)
		require.NoError(t, err)
	}
	require.Equal(t, 1, n, "the job is claimed again: no job lost")
	// Enqueueing the same message again (a replay) adds nothing.
	ok, err := x2.Enqueue(t.Context(), e)
	require.NoError(t, err)
	require.False(t, ok)
	clk.Advance(memory.DefaultJobLease)
	n, err = x2.RunOnce(t.Context(), 1)
	require.NoError(t, err)
	require.Zero(t, n)

	facts, err := d2.Facts(t.Context(), "onebot", "u1")
	require.NoError(t, err)
	require.Len(t, facts, 1, "no duplicate fact")
	require.Equal(t, []string{e.Key}, facts[0].SourceMessageIDs)
	counts, err := d2.JobCounts(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"done": 1}, counts)
}

func TestForgetMe(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	e := add(t, d, event(group1, "1", "u1", "小明", "我的猫叫豆豆，猫咪很可爱", t0))
	e2 := add(t, d, event(group1, "2", "u1", "小明", "猫咪今天生病了", t0.Add(time.Minute)))
	other := add(t, d, event(group1, "3", "u2", "Bob", "我也喜欢猫咪", t0.Add(2*time.Minute)))
	apply(t, d, fact(group1, "u1", "cat", "养了一只叫豆豆的猫咪", 0.95, 0.95))
	apply(t, d, fact(group1, "u1", "cat", "猫咪叫豆豆，三岁", 0.95, 0.95)) // a superseded version
	apply(t, d, fact(group1, "u2", "cat", "喜欢猫咪", 0.9, 0.8))

	// A job is running (leased) and another is pending when the user asks.
	held := make(chan struct{})
	release := make(chan struct{})
	m := agenttest.New().OnPurpose(agent.PurposeMemory, agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) {
		close(held)
		<-release
		return &agent.Response{Text: cityAnswer}, nil
	}))
	x := newExtractor(t, d, m, clk)
	_, err := x.Enqueue(t.Context(), e)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := x.RunOnce(t.Context(), 1); done <- err }()
	<-held
	_, err = x.Enqueue(t.Context(), e2)
	require.NoError(t, err)

	res, err := d.ForgetUser(t.Context(), "onebot", "u1", memory.ForgetOptions{ExcludeHistory: true})
	require.NoError(t, err)
	require.Equal(t, memory.ForgetResult{Facts: 2, JobsCancelled: 2, HistoryHidden: true}, res)
	reply := memory.ForgetReply(res)
	require.Contains(t, reply, "2 remembered fact")
	require.NotContains(t, reply, "豆豆")

	close(release)
	require.NoError(t, <-done, "the running job's result is dropped")

	facts, err := d.Facts(t.Context(), "onebot", "u1")
	require.NoError(t, err)
	require.Len(t, facts, 2)
	for _, f := range facts {
		require.Equal(t, memory.StatusForgotten, f.Status)
		require.Empty(t, f.Content)
		require.Empty(t, f.SourceMessageIDs)
	}
	r := newRecaller(t, d, clk, memory.RecallConfig{})
	rc, err := r.Recall(t.Context(), memory.Query{SessionKey: session(group1), UserID: "u1", Participants: []string{"u2"}, Text: "猫咪豆豆"})
	require.NoError(t, err)
	require.Equal(t, []string{"喜欢猫咪"}, contents(rc))
	require.Equal(t, []string{other.Key}, snippetKeys(rc), "the user's history is hidden from memory search")
	for _, s := range rc.Snippets {
		require.False(t, strings.Contains(s.Text, "豆豆"))
	}
	counts, err := d.JobCounts(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"cancelled": 2}, counts)
	// Nothing left to claim.
	n, err := x.RunOnce(t.Context(), 5)
	require.NoError(t, err)
	require.Zero(t, n)
	// History rows stay for conversation continuity.
	recent, err := d.Recent(t.Context(), session(group1), 10)
	require.NoError(t, err)
	require.Len(t, recent, 3)
}
