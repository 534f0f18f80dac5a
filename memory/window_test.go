package memory_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// hotpotChat writes 20 messages about hotpot, users and the bot taking
// turns, one a minute, and returns them oldest first.
func hotpotChat(t *testing.T, d memory.History) []memory.Entry {
	t.Helper()
	var out []memory.Entry
	for i := range 20 {
		ev := event(group1, fmt.Sprint(100+i), "u1", "小明", fmt.Sprintf("火锅 第%d次 想吃火锅", i), t0.Add(time.Duration(i)*time.Minute))
		dir := memory.In
		if i%2 == 1 {
			ev.Kind, ev.Sender = channel.KindSelf, channel.Sender{ID: "bot", Name: "persona"}
			ev.Segments = []channel.Segment{channel.Text(fmt.Sprintf("好呀，火锅 第%d次 我也想吃火锅", i))}
			dir = memory.Out
		}
		e := memory.Entry{Key: ev.Key(), SessionKey: ev.SessionKey, Direction: dir, Event: ev}
		require.NoError(t, d.Append(t.Context(), e))
		out = append(out, e)
	}
	return out
}

func keysOf(es []memory.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

func overlap(a, b []string) []string {
	var out []string
	for _, k := range a {
		if slices.Contains(b, k) {
			out = append(out, k)
		}
	}
	return out
}

func TestRecallNeverRepeatsTheHistoryWindow(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0.Add(time.Hour))
	d := openStore(t, clk, "")
	all := hotpotChat(t, d)
	window := all[12:] // the prompt's history, the current message last
	cur := window[len(window)-1]
	windowKeys := keysOf(window)
	r := newRecaller(t, d, clk, memory.RecallConfig{})
	base := memory.Query{SessionKey: session(group1), UserID: "u1", Text: cur.Event.Text()}

	// Bounding by the current message alone repeats the window.
	q := base
	q.Before = cur.Event.Time
	rc, err := r.Recall(t.Context(), q)
	require.NoError(t, err)
	require.NotEmpty(t, overlap(snippetKeys(rc), windowKeys), "the bug this guards against")

	// The window excluded: older messages only, and no bot replies.
	q = base
	q.ExcludeHistory(window)
	require.Equal(t, window[0].Event.Time, q.Before)
	require.Equal(t, windowKeys, q.Exclude)
	rc, err = r.Recall(t.Context(), q)
	require.NoError(t, err)
	require.NotEmpty(t, rc.Snippets)
	require.Empty(t, overlap(snippetKeys(rc), windowKeys))
	for _, s := range rc.Snippets {
		require.Equal(t, memory.In, s.Direction, "the bot's own replies are not snippets")
		require.True(t, s.Time.Before(window[0].Event.Time))
	}

	// Exclude holds without Before: equal times, or a window message older
	// than its neighbours (stored late).
	q = base
	q.Exclude = append(keysOf(all[2:4]), windowKeys...)
	rc, err = r.Recall(t.Context(), q)
	require.NoError(t, err)
	require.NotEmpty(t, rc.Snippets)
	require.Empty(t, overlap(snippetKeys(rc), q.Exclude))

	// The memory_search tool admits the bot's own messages, never the
	// window's.
	q = base
	q.ExcludeHistory(window)
	q.OwnMessages = true
	rc, err = r.Recall(t.Context(), q)
	require.NoError(t, err)
	require.Empty(t, overlap(snippetKeys(rc), windowKeys))
	require.True(t, slices.ContainsFunc(rc.Snippets, func(s memory.Snippet) bool { return s.Direction == memory.Out }))
}

func TestRecallLeavesOutFactsTheWindowSays(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0.Add(time.Hour))
	d := openStore(t, clk, "")
	all := hotpotChat(t, d)
	window := all[12:]
	fromWindow := fact(group1, "u1", "food", "最爱吃火锅", 0.95, 0.95)
	fromWindow.Fact.SourceMessageIDs = []string{window[2].Key}
	older := fact(group1, "u1", "spicy", "火锅要特辣", 0.95, 0.95)
	older.Fact.SourceMessageIDs = []string{all[0].Key, window[4].Key}
	apply(t, d, fromWindow, older)
	r := newRecaller(t, d, clk, memory.RecallConfig{})
	q := memory.Query{SessionKey: session(group1), UserID: "u1", Text: "火锅"}
	rc, err := r.Recall(t.Context(), q)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"最爱吃火锅", "火锅要特辣"}, contents(rc))
	q.ExcludeHistory(window)
	rc, err = r.Recall(t.Context(), q)
	require.NoError(t, err)
	require.Equal(t, []string{"火锅要特辣"}, contents(rc), "a fact only the window's messages say is left out")
}

func TestRenderLines(t *testing.T) {
	t.Parallel()
	sc, err := agent.NewScope(qqSession, []byte("0123456789abcdef0123456789abcdef"), nil)
	require.NoError(t, err)
	sc.Name(qqBea, "Bea")
	day := t0.Add(-3 * 24 * time.Hour)
	rc := memory.Recollection{
		Facts: []memory.RecalledFact{
			{Fact: memory.Fact{Scope: memory.ScopeUser, SubjectUserID: qqJie, Content: "住在杭州，和 " + qqBea + " 是同事"}},
			{Fact: memory.Fact{Scope: memory.ScopeUser, SubjectUserID: qqBea, Content: "爱喝茶", Evidence: "我爱喝茶"}, Core: true},
			{Fact: memory.Fact{Scope: memory.ScopeGroup, Content: "群里每周五\n打羽毛球"}},
		},
		Snippets: []memory.Snippet{
			{Message: memory.Message{SenderID: qqJie, SenderName: "阿杰", Direction: memory.In, Time: day, Text: "周末\n  去西湖？"}},
			{Message: memory.Message{SenderID: qqBot, Direction: memory.Out, Time: day, Text: "好呀"}},
		},
	}
	lines := memory.RenderLines(rc, memory.BlockOptions{Scope: sc})
	jie, bea := sc.User(qqJie), sc.User(qqBea)
	require.Equal(t, []string{
		`(core) Bea (` + bea + `): 爱喝茶 — "我爱喝茶"`,
		jie + ": 住在杭州，和 " + bea + " 是同事",
		"群里每周五 打羽毛球",
		"阿杰 (" + jie + ") said on 2026-02-26: 周末 去西湖？",
		"you said on 2026-02-26: 好呀",
	}, lines)
	block := memory.RenderBlock(rc, memory.BlockOptions{Scope: sc})
	require.Equal(t, strings.Join(lines, "\n"), block)
	for _, l := range lines {
		require.False(t, strings.HasPrefix(l, "-"), "no bullets: the agent's block adds them")
		require.NotContains(t, l, "[Memory")
	}
	for _, id := range realIDs {
		require.NotContains(t, block, id)
	}

	// Relative dates; without a Scope no alias and never an id as a name.
	lines = memory.RenderLines(memory.Recollection{Facts: rc.Facts[:1], Snippets: rc.Snippets[:1]}, memory.BlockOptions{Now: t0})
	require.Equal(t, []string{"someone: 住在杭州，和 " + qqBea + " 是同事", "阿杰 said 3 days ago: 周末 去西湖？"}, lines)
	require.Nil(t, memory.RenderLines(memory.Recollection{}, memory.BlockOptions{}))
	require.Empty(t, memory.RenderBlock(memory.Recollection{}, memory.BlockOptions{}))
}
