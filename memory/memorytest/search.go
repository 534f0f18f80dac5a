package memorytest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// RunSearch runs the memory.HistorySearch conformance suite against the
// stores open returns (a fresh, empty one per subtest, reading now from
// clk). Messages are written through the store's memory.History; the
// hidden-user case needs the store to implement memory.FactStore too.
func RunSearch(t *testing.T, open func(t *testing.T, clk *clock.Fake) SearchStore) {
	t.Helper()
	run(t, open, []testCase[SearchStore]{
		{"ChineseAndEnglish", testSearchLanguages},
		{"HitFields", testSearchHitFields},
		{"BestFirst", testSearchBestFirst},
		{"Sessions", testSearchSessions},
		{"Filters", testSearchFilters},
		{"Limit", testSearchLimit},
		{"EditsAndRecalls", testSearchEditsAndRecalls},
		{"HiddenUsers", testSearchHidden},
		{"Message", testSearchMessage},
		{"MessagesBefore", testSearchMessagesBefore},
	})
}

// search runs a query over the sessions and returns the hit keys, best
// first, checking every hit scored.
func search(t *testing.T, s memory.HistorySearch, q memory.HistoryQuery) []string {
	t.Helper()
	hits, err := s.SearchHistory(t.Context(), q)
	require.NoError(t, err)
	var keys []string
	for i, hit := range hits {
		keys = append(keys, hit.Key)
		require.Positive(t, hit.Score, "hit %s", hit.Key)
		if i > 0 {
			require.LessOrEqual(t, hit.Score, hits[i-1].Score, "best first")
		}
	}
	return keys
}

// find searches sessionA for the tokens of text.
func find(t *testing.T, s memory.HistorySearch, text string) []string {
	t.Helper()
	return search(t, s, memory.HistoryQuery{Sessions: []string{sessionA}, Tokens: memory.QueryTokens(text)})
}

func testSearchLanguages(t *testing.T, h *harness[SearchStore]) {
	keys := appendEvents(t, h.st,
		message(groupA, "1", "u1", "小明", "我下周要去北京出差，顺便看看长城", Start),
		message(groupA, "2", "u2", "Alice", "My favourite database engine is PostgreSQL, honestly.", Start.Add(time.Second)),
		message(groupA, "3", "u3", "Bob", "周末用Go写了一个PostgreSQL的小工具", Start.Add(2*time.Second)),
		message(groupA, "4", "u4", "Carol", "今天上海下雨了，记得带伞", Start.Add(3*time.Second)),
		message(groupA, "5", "u5", "Dave", "The weather in London is rainy again", Start.Add(4*time.Second)),
	)
	zh, en, mixed, rain, london := keys[0], keys[1], keys[2], keys[3], keys[4]
	single := []struct{ query, want string }{
		{"北京", zh},
		{"长城怎么样", zh},
		{"下雨", rain},
		{"上海的天气", rain},
		{"小工具", mixed},
		{"favourite DATABASE", en},
		{"London", london},
		{"rainy", london},
		{"alice", en}, // sender names are searchable
		{"小明", zh},
	}
	for _, tc := range single {
		got := find(t, h.st, tc.query)
		require.NotEmpty(t, got, tc.query)
		require.Equal(t, tc.want, got[0], "best hit for %q", tc.query)
		require.NotContains(t, got[1:], tc.want, tc.query)
	}
	require.ElementsMatch(t, []string{en, mixed}, find(t, h.st, "postgresql"), "English word in Chinese text")
	require.ElementsMatch(t, []string{en, mixed}, find(t, h.st, "PostgreSQL"), "case-insensitive")
	require.Empty(t, find(t, h.st, "广州"), "no match")
	require.Empty(t, find(t, h.st, "Tokyo"), "no match")
	require.Empty(t, search(t, h.st, memory.HistoryQuery{Sessions: []string{sessionA}}), "no tokens")
	require.Empty(t, search(t, h.st, memory.HistoryQuery{Tokens: []string{"北京"}}), "no sessions")
}

func testSearchHitFields(t *testing.T, h *harness[SearchStore]) {
	at := Start.Add(1500 * time.Microsecond)
	ev := message(groupA, "1", "u1", "小明", "昨天在杭州西湖划船 boating", at)
	out := message(groupA, "2", bot, "Bot", "杭州很美 lovely", at.Add(time.Second))
	out.Kind = channel.KindSelf
	appendEvents(t, h.st, ev, out)
	hits, err := h.st.SearchHistory(t.Context(), memory.HistoryQuery{Sessions: []string{sessionA}, Tokens: memory.QueryTokens("西湖")})
	require.NoError(t, err)
	require.Len(t, hits, 1)
	want := memory.Message{Key: ev.Key(), SessionKey: sessionA, Platform: platform, SenderID: "u1", SenderName: "小明",
		Direction: memory.In, Text: "昨天在杭州西湖划船 boating"}
	got := hits[0].Message
	sameTime(t, at, got.Time, "Time")
	got.Time = time.Time{}
	require.Equal(t, want, got)

	hits, err = h.st.SearchHistory(t.Context(), memory.HistoryQuery{Sessions: []string{sessionA}, Tokens: memory.QueryTokens("lovely")})
	require.NoError(t, err)
	require.Len(t, hits, 1)
	require.Equal(t, memory.Out, hits[0].Direction, "the bot's own messages are searchable")
}

func testSearchBestFirst(t *testing.T, h *harness[SearchStore]) {
	keys := appendEvents(t, h.st,
		message(groupA, "1", "u1", "", "apple pie recipe", Start),
		message(groupA, "2", "u1", "", "apple and banana smoothie", Start.Add(time.Second)),
		message(groupA, "3", "u1", "", "banana bread", Start.Add(2*time.Second)),
		message(groupA, "4", "u1", "", "我喜欢吃苹果", Start.Add(3*time.Second)),
		message(groupA, "5", "u1", "", "苹果和香蕉都很好吃", Start.Add(4*time.Second)),
		message(groupA, "6", "u1", "", "unrelated words", Start.Add(5*time.Second)),
	)
	got := find(t, h.st, "apple banana")
	require.Len(t, got, 3)
	require.Equal(t, keys[1], got[0], "the message matching both tokens first")
	require.ElementsMatch(t, []string{keys[0], keys[2]}, got[1:])

	got = find(t, h.st, "苹果 香蕉")
	require.Len(t, got, 2)
	require.Equal(t, keys[4], got[0], "the message matching both tokens first")
	require.Equal(t, keys[3], got[1])
}

func testSearchSessions(t *testing.T, h *harness[SearchStore]) {
	groupC := channel.Chat{Kind: channel.Private, ID: "u9"}
	ka := appendEvents(t, h.st, message(groupA, "1", "u1", "", "meeting about 预算 budget", Start))[0]
	kb := appendEvents(t, h.st, message(groupB, "1", "u1", "", "the 预算 budget is final", Start.Add(time.Second)))[0]
	kc := appendEvents(t, h.st, message(groupC, "1", "u9", "", "private budget 预算", Start.Add(2*time.Second)))[0]
	sessionC := channel.SessionKey("", platform, bot, groupC)
	q := func(tokens string, sessions ...string) []string {
		return search(t, h.st, memory.HistoryQuery{Sessions: sessions, Tokens: memory.QueryTokens(tokens)})
	}
	require.Equal(t, []string{ka}, q("budget", sessionA))
	require.Equal(t, []string{kb}, q("预算", sessionB))
	require.ElementsMatch(t, []string{ka, kb}, q("budget", sessionA, sessionB))
	require.ElementsMatch(t, []string{ka, kb, kc}, q("预算", sessionA, sessionB, sessionC))
	require.ElementsMatch(t, []string{ka}, q("budget", sessionA, sessionA), "a session named twice")
	require.Empty(t, q("budget", "no such session"))
}

func testSearchFilters(t *testing.T, h *harness[SearchStore]) {
	var keys []string
	for i := range 6 {
		keys = append(keys, appendEvents(t, h.st, message(groupA, fmt.Sprint(i), fmt.Sprint("u", i%2), "", "咖啡 coffee",
			Start.Add(time.Duration(i)*time.Minute)))...)
	}
	q := func(mod func(*memory.HistoryQuery)) []string {
		hq := memory.HistoryQuery{Sessions: []string{sessionA}, Tokens: []string{"coffee"}, Limit: 20}
		mod(&hq)
		return search(t, h.st, hq)
	}
	require.ElementsMatch(t, keys, q(func(*memory.HistoryQuery) {}))
	require.ElementsMatch(t, keys[:3], q(func(q *memory.HistoryQuery) { q.Before = Start.Add(3 * time.Minute) }),
		"Before is exclusive")
	require.ElementsMatch(t, keys[3:], q(func(q *memory.HistoryQuery) { q.After = Start.Add(2 * time.Minute) }),
		"After is exclusive")
	require.ElementsMatch(t, keys[2:4], q(func(q *memory.HistoryQuery) {
		q.After, q.Before = Start.Add(time.Minute), Start.Add(4*time.Minute)
	}))
	require.ElementsMatch(t, []string{keys[1], keys[3], keys[5]}, q(func(q *memory.HistoryQuery) { q.SenderID = "u1" }))
	require.ElementsMatch(t, []string{keys[1], keys[3]}, q(func(q *memory.HistoryQuery) {
		q.SenderID, q.Before, q.Tokens = "u1", Start.Add(5*time.Minute), []string{"咖啡"}
	}))
	require.Empty(t, q(func(q *memory.HistoryQuery) { q.SenderID = "nobody" }))
	// Millisecond bounds: a message at the bound itself is out.
	require.ElementsMatch(t, keys[1:2], q(func(q *memory.HistoryQuery) {
		q.After, q.Before = Start.Add(time.Minute-time.Millisecond), Start.Add(time.Minute+time.Millisecond)
	}))
}

func testSearchLimit(t *testing.T, h *harness[SearchStore]) {
	for i := range 60 {
		appendEvents(t, h.st, message(groupA, fmt.Sprint(i), "u1", "", fmt.Sprint("tea 茶 number ", i),
			Start.Add(time.Duration(i)*time.Second)))
	}
	hit := func(limit int) []string {
		return search(t, h.st, memory.HistoryQuery{Sessions: []string{sessionA}, Tokens: []string{"tea"}, Limit: limit})
	}
	require.Len(t, hit(5), 5)
	require.Len(t, hit(60), 60)
	require.Len(t, hit(0), 50, "the default limit")
	require.Len(t, hit(-1), 50, "the default limit")
}

func testSearchEditsAndRecalls(t *testing.T, h *harness[SearchStore]) {
	ev := message(groupA, "1", "u1", "", "明天去杭州 trip", Start)
	key := appendEvents(t, h.st, ev)[0]
	require.Equal(t, []string{key}, find(t, h.st, "杭州"))

	// An edit replaces the searchable text.
	ev.Segments = []channel.Segment{channel.Text("明天去苏州 journey")}
	appendEvents(t, h.st, ev)
	require.Empty(t, find(t, h.st, "杭州"))
	require.Empty(t, find(t, h.st, "trip"))
	require.Equal(t, []string{key}, find(t, h.st, "苏州"))
	appendEvents(t, h.st, ev)
	require.Equal(t, []string{key}, find(t, h.st, "journey"), "a repeated append adds no second hit")

	// A recalled message is not found.
	other := appendEvents(t, h.st, message(groupA, "2", "u2", "", "苏州 again", Start.Add(time.Second)))[0]
	require.NoError(t, h.st.MarkRecalled(t.Context(), key, Start.Add(time.Minute)))
	require.Equal(t, []string{other}, find(t, h.st, "苏州"))
}

func testSearchHidden(t *testing.T, h *harness[SearchStore]) {
	fs, ok := h.st.(memory.FactStore)
	if !ok {
		t.Skip("the store does not implement memory.FactStore (ForgetUser)")
	}
	keys := appendEvents(t, h.st,
		message(groupA, "1", "u1", "", "我的生日是五月 birthday", Start),
		message(groupA, "2", "u2", "", "生日快乐 birthday", Start.Add(time.Second)),
	)
	other := message(groupA, "3", "u1", "", "birthday on another platform", Start.Add(2*time.Second))
	other.Platform = "otherchat"
	other.SessionKey = sessionA
	keys = append(keys, appendEvents(t, h.st, other)...)

	res, err := fs.ForgetUser(t.Context(), platform, "u1", memory.ForgetOptions{})
	require.NoError(t, err)
	require.False(t, res.HistoryHidden)
	require.ElementsMatch(t, keys, find(t, h.st, "birthday"), "without ExcludeHistory nothing is hidden")

	res, err = fs.ForgetUser(t.Context(), platform, "u1", memory.ForgetOptions{ExcludeHistory: true})
	require.NoError(t, err)
	require.True(t, res.HistoryHidden)
	require.ElementsMatch(t, keys[1:], find(t, h.st, "birthday"), "u1's messages on this platform are hidden")
	require.Empty(t, find(t, h.st, "五月"))
	// Messages written after the forget are hidden too.
	appendEvents(t, h.st, message(groupA, "4", "u1", "", "later birthday note", Start.Add(time.Minute)))
	require.ElementsMatch(t, keys[1:], find(t, h.st, "birthday"))
}

func testSearchMessage(t *testing.T, h *harness[SearchStore]) {
	at := Start.Add(2500 * time.Microsecond)
	ev := message(groupA, "1", "u1", "Alice", "hello 你好", at)
	key := appendEvents(t, h.st, ev)[0]
	m, err := h.st.Message(t.Context(), key)
	require.NoError(t, err)
	sameTime(t, at, m.Time, "Time")
	m.Time = time.Time{}
	require.Equal(t, memory.Message{Key: key, SessionKey: sessionA, Platform: platform, SenderID: "u1",
		SenderName: "Alice", Direction: memory.In, Text: "hello 你好"}, m)

	require.NoError(t, h.st.MarkRecalled(t.Context(), key, Start.Add(time.Minute)))
	m, err = h.st.Message(t.Context(), key)
	require.NoError(t, err)
	require.True(t, m.Recalled, "a recalled message is still readable, marked")

	_, err = h.st.Message(t.Context(), "no/such/key")
	require.Error(t, err)
	require.True(t, errors.Is(err, memory.ErrNotFound), "want memory.ErrNotFound, got %v", err)
}

func testSearchMessagesBefore(t *testing.T, h *harness[SearchStore]) {
	// Two messages share a time: the key breaks the tie.
	evs := []channel.Event{
		message(groupA, "a", "u1", "", "one", Start),
		message(groupA, "b", "u2", "", "two", Start.Add(time.Second)),
		message(groupA, "c", "u1", "", "three", Start.Add(2*time.Second)),
		message(groupA, "d", "u2", "", "four", Start.Add(2*time.Second)),
		message(groupA, "e", "u1", "", "five", Start.Add(3*time.Second)),
	}
	keys := appendEvents(t, h.st, evs...)
	appendEvents(t, h.st, message(groupB, "x", "u1", "", "elsewhere", Start.Add(time.Second)))
	before := func(w memory.Watermark, limit int) []string {
		ms, err := h.st.MessagesBefore(t.Context(), sessionA, w, limit)
		require.NoError(t, err)
		out := make([]string, len(ms))
		for i, m := range ms {
			require.Equal(t, sessionA, m.SessionKey)
			out[i] = m.Key
		}
		return out
	}
	require.Equal(t, keys[:4], before(memory.Watermark{Time: Start.Add(3 * time.Second), Key: keys[4]}, 10),
		"strictly before, oldest first")
	require.Equal(t, keys[2:4], before(memory.Watermark{Time: Start.Add(3 * time.Second), Key: keys[4]}, 2),
		"the newest limit of them")
	require.Equal(t, keys[:3], before(memory.Watermark{Time: Start.Add(2 * time.Second), Key: keys[3]}, 10),
		"a watermark between two messages of the same time")
	require.Equal(t, keys[:2], before(memory.Watermark{Time: Start.Add(2 * time.Second), Key: keys[2]}, 10))
	require.Empty(t, before(memory.Watermark{Time: Start, Key: keys[0]}, 10))
	require.Equal(t, keys, before(memory.Watermark{Time: Start.Add(time.Hour)}, 10))
	require.Empty(t, before(memory.Watermark{Time: Start.Add(time.Hour)}, 0), "limit 0")
}
