package memorytest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// RunFacts runs the memory.FactStore conformance suite against the stores
// open returns (a fresh, empty one per subtest, reading now from clk).
// Facts are read back through CandidateFacts; the job cancellation of
// ForgetUser is checked when the store implements memory.JobStore too.
func RunFacts(t *testing.T, open func(t *testing.T, clk *clock.Fake) memory.FactStore) {
	t.Helper()
	run(t, open, []testCase[memory.FactStore]{
		{"RoundTripEveryField", testFactsRoundTrip},
		{"RefreshSupersedeForget", testFactsLifecycle},
		{"ScopeOwners", testFactsScopeOwners},
		{"RejectsInvalid", testFactsInvalid},
		{"CandidateFilter", testFactsFilter},
		{"CandidateExpiry", testFactsExpiry},
		{"CandidateOrderAndLimit", testFactsOrder},
		{"MatchFacts", testFactsMatch},
		{"MatchFactsRanking", testFactsMatchRanking},
		{"TouchFacts", testFactsTouch},
		{"ForgetUser", testFactsForget},
		{"ConcurrentSameKey", testFactsConcurrent},
	})
}

// Sessions facts are learned in: groupA, groupB and a private chat.
var (
	privateU1   = channel.Chat{Kind: channel.Private, ID: "u1"}
	privSession = channel.SessionKey("", platform, bot, privateU1)
)

// userFact is a valid user-scoped change about subject, learned in session
// (a chat of kind chatKind) on the platform.
func userFact(subject, key, content, session string, chatKind channel.ChatKind) memory.Change {
	return memory.Change{Fact: memory.Fact{Scope: memory.ScopeUser, SubjectUserID: subject, Key: key, Content: content,
		Kind: memory.KindFact, SourceType: memory.Explicit, SessionKey: session, ChatKind: string(chatKind),
		Platform: platform, Confidence: 0.9, Importance: 0.5}}
}

// groupFact is a valid group-scoped change of session.
func groupFact(key, content, session string) memory.Change {
	return memory.Change{Fact: memory.Fact{Scope: memory.ScopeGroup, Key: key, Content: content, Kind: memory.KindFact,
		SourceType: memory.Explicit, SessionKey: session, ChatKind: string(channel.Group), Platform: platform,
		Confidence: 0.9, Importance: 0.5}}
}

func apply(t *testing.T, fs memory.FactStore, cs ...memory.Change) memory.ApplyResult {
	t.Helper()
	res, err := fs.ApplyChanges(t.Context(), cs)
	require.NoError(t, err)
	return res
}

// candidates returns the candidates of a filter on groupA with u1
// participating, modified by mod.
func candidates(t *testing.T, fs memory.FactStore, mod func(f *memory.FactFilter)) []memory.Fact {
	t.Helper()
	f := memory.FactFilter{SessionKey: sessionA, Platform: platform, Participants: []string{"u1"}, Now: Start}
	if mod != nil {
		mod(&f)
	}
	facts, err := fs.CandidateFacts(t.Context(), f)
	require.NoError(t, err)
	for _, fact := range facts {
		require.Equal(t, memory.StatusActive, fact.Status, "candidate %s", fact.Key)
	}
	return facts
}

func factKeys(fs []memory.Fact) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Key
	}
	return out
}

// byKey returns the one candidate with the key.
func byKey(t *testing.T, facts []memory.Fact, key string) memory.Fact {
	t.Helper()
	var found []memory.Fact
	for _, f := range facts {
		if f.Key == key {
			found = append(found, f)
		}
	}
	require.Len(t, found, 1, "active facts with key %q", key)
	return found[0]
}

func testFactsRoundTrip(t *testing.T, h *harness[memory.FactStore]) {
	h.clk.Advance(1234567 * time.Nanosecond)
	now := h.clk.Now()
	want := memory.Fact{
		Scope: memory.ScopeUser, SubjectUserID: "u1", Key: "home_city", Kind: memory.KindPreference,
		Content: "住在杭州 lives in Hangzhou", Evidence: "我住杭州", SourceMessageIDs: []string{"k/1", "k/2"},
		SessionKey: sessionA, ChatKind: string(channel.Group), Platform: platform,
		EventTime: Start.Add(-time.Hour + 987654*time.Nanosecond), SourceType: memory.Inferred,
		Confidence: 0.93, Importance: 0.71, ExpiresAt: Start.Add(90*24*time.Hour + 555*time.Microsecond),
	}
	res := apply(t, h.st, memory.Change{Fact: want})
	require.Equal(t, memory.ApplyResult{Inserted: 1}, res)
	got := byKey(t, candidates(t, h.st, nil), "home_city")
	require.Positive(t, got.ID)
	require.Equal(t, want.Scope, got.Scope)
	require.Equal(t, want.SubjectUserID, got.SubjectUserID)
	require.Equal(t, want.Kind, got.Kind)
	require.Equal(t, want.Content, got.Content)
	require.Equal(t, want.Evidence, got.Evidence)
	require.Equal(t, want.SourceMessageIDs, got.SourceMessageIDs)
	require.Equal(t, want.SessionKey, got.SessionKey)
	require.Equal(t, want.ChatKind, got.ChatKind)
	require.Equal(t, want.Platform, got.Platform)
	sameTime(t, want.EventTime, got.EventTime, "EventTime")
	require.Equal(t, want.SourceType, got.SourceType)
	require.InDelta(t, want.Confidence, got.Confidence, 1e-9)
	require.InDelta(t, want.Importance, got.Importance, 1e-9)
	require.False(t, got.Sensitive)
	sameTime(t, want.ExpiresAt, got.ExpiresAt, "ExpiresAt")
	sameTime(t, now, got.CreatedAt, "CreatedAt")
	sameTime(t, now, got.UpdatedAt, "UpdatedAt")
	require.Equal(t, 1, got.Version)
	require.Zero(t, got.SupersedesID)
	require.Equal(t, memory.StatusActive, got.Status)

	// A sensitive global fact without expiry, and an over-long evidence.
	long := strings.Repeat("证", memory.MaxEvidenceRunes+10)
	g := memory.Fact{Scope: memory.ScopeGroup, Key: "secret", Kind: memory.KindInstruction, Content: "the door code is 1234",
		Evidence: long, SessionKey: sessionA, ChatKind: string(channel.Group), Platform: platform,
		EventTime: Start, SourceType: memory.Explicit, Confidence: 1, Importance: 1, Sensitive: true}
	apply(t, h.st, memory.Change{Fact: g})
	got = byKey(t, candidates(t, h.st, nil), "secret")
	require.True(t, got.Sensitive)
	require.True(t, got.ExpiresAt.IsZero(), "no expiry stays none")
	require.Empty(t, got.SourceMessageIDs)
	require.LessOrEqual(t, utf8.RuneCountInString(got.Evidence), memory.MaxEvidenceRunes, "evidence is at most 60 runes")
	require.True(t, strings.HasPrefix(long, got.Evidence))
}

func testFactsLifecycle(t *testing.T, h *harness[memory.FactStore]) {
	c := userFact("u1", "pet", "has a cat named Mimi", sessionA, channel.Group)
	c.Fact.SourceMessageIDs = []string{"m1"}
	require.Equal(t, memory.ApplyResult{Inserted: 1}, apply(t, h.st, c))
	first := byKey(t, candidates(t, h.st, nil), "pet")

	// The same content (case and surrounding space aside) refreshes it.
	h.clk.Advance(time.Minute)
	r := c
	r.Fact.Content = "  Has a cat named MIMI "
	r.Fact.SourceMessageIDs = []string{"m2", "m1"}
	r.Fact.Importance = 0.8
	require.Equal(t, memory.ApplyResult{Refreshed: 1}, apply(t, h.st, r))
	got := byKey(t, candidates(t, h.st, nil), "pet")
	require.Equal(t, first.ID, got.ID, "refreshed in place")
	require.Equal(t, 1, got.Version)
	require.ElementsMatch(t, []string{"m1", "m2"}, got.SourceMessageIDs, "sources merged")
	sameTime(t, h.clk.Now(), got.UpdatedAt, "UpdatedAt")
	sameTime(t, first.CreatedAt, got.CreatedAt, "CreatedAt")

	// A different content supersedes it.
	h.clk.Advance(time.Minute)
	s := c
	s.Fact.Content = "has a dog named Wangcai 旺财"
	require.Equal(t, memory.ApplyResult{Superseded: 1}, apply(t, h.st, s))
	facts := candidates(t, h.st, nil)
	got = byKey(t, facts, "pet")
	require.NotEqual(t, first.ID, got.ID)
	require.Equal(t, 2, got.Version)
	require.Equal(t, first.ID, got.SupersedesID)
	require.Equal(t, s.Fact.Content, got.Content)

	// Forget erases it; forgetting a missing key counts nothing.
	f := memory.Change{Forget: true, Fact: memory.Fact{Scope: memory.ScopeUser, SubjectUserID: "u1", Key: "pet",
		Platform: platform, SessionKey: sessionA}}
	missing := f
	missing.Fact.Key = "nothing"
	require.Equal(t, memory.ApplyResult{Forgotten: 1}, apply(t, h.st, f, missing))
	require.NotContains(t, factKeys(candidates(t, h.st, nil)), "pet")
	require.Equal(t, memory.ApplyResult{}, apply(t, h.st, f), "forgetting twice")

	// The key can be learned again; a batch counts each change.
	res := apply(t, h.st, c, userFact("u1", "food", "likes 火锅", sessionA, channel.Group),
		userFact("u1", "food", "likes 火锅", sessionA, channel.Group))
	require.Equal(t, memory.ApplyResult{Inserted: 2, Refreshed: 1}, res)
	require.ElementsMatch(t, []string{"pet", "food"}, factKeys(candidates(t, h.st, nil)))
	require.Equal(t, memory.ApplyResult{}, apply(t, h.st), "no changes")
}

func testFactsScopeOwners(t *testing.T, h *harness[memory.FactStore]) {
	// A group fact belongs to its session: the same key elsewhere is another fact.
	require.Equal(t, memory.ApplyResult{Inserted: 2}, apply(t, h.st,
		groupFact("rule", "no spoilers", sessionA), groupFact("rule", "english only", sessionB)))
	require.Equal(t, "no spoilers", byKey(t, candidates(t, h.st, nil), "rule").Content)
	b := candidates(t, h.st, func(f *memory.FactFilter) { f.SessionKey = sessionB })
	require.Equal(t, "english only", byKey(t, b, "rule").Content)

	// A user fact belongs to the platform: learned in another chat of it,
	// the same key supersedes.
	apply(t, h.st, userFact("u1", "job", "teacher", privSession, channel.Private))
	res := apply(t, h.st, userFact("u1", "job", "engineer", sessionA, channel.Group))
	require.Equal(t, memory.ApplyResult{Superseded: 1}, res)
	require.Equal(t, "engineer", byKey(t, candidates(t, h.st, nil), "job").Content)

	// Another subject, or another platform, is another fact.
	other := userFact("u1", "job", "pilot", sessionA, channel.Group)
	other.Fact.Platform = "otherchat"
	require.Equal(t, memory.ApplyResult{Inserted: 2}, apply(t, h.st, userFact("u2", "job", "chef", sessionA, channel.Group), other))
}

func testFactsInvalid(t *testing.T, h *harness[memory.FactStore]) {
	bad := map[string]func(c *memory.Change){
		"unknown scope":        func(c *memory.Change) { c.Fact.Scope = "planet" },
		"empty key":            func(c *memory.Change) { c.Fact.Key = " " },
		"empty content":        func(c *memory.Change) { c.Fact.Content = "" },
		"unknown kind":         func(c *memory.Change) { c.Fact.Kind = "rumour" },
		"unknown source type":  func(c *memory.Change) { c.Fact.SourceType = "guessed" },
		"group without a chat": func(c *memory.Change) { c.Fact.Scope, c.Fact.SessionKey = memory.ScopeGroup, "" },
	}
	for name, mutate := range bad {
		c := userFact("u1", "k-"+strings.ReplaceAll(name, " ", "_"), "content "+name, sessionA, channel.Group)
		mutate(&c)
		_, err := h.st.ApplyChanges(t.Context(), []memory.Change{c})
		require.Error(t, err, name)
	}
	require.Empty(t, candidates(t, h.st, nil), "nothing written")
}

func testFactsFilter(t *testing.T, h *harness[memory.FactStore]) {
	otherPlatform := userFact("u1", "u1_elsewhere", "on another platform", "otherchat:private:u1", channel.Private)
	otherPlatform.Fact.Platform = "otherchat"
	globalOther := memory.Change{Fact: memory.Fact{Scope: memory.ScopeGlobal, Key: "bot_other", Content: "other platform persona",
		Platform: "otherchat", Kind: memory.KindFact, SourceType: memory.Explicit, Confidence: 1, Importance: 0.5}}
	global := globalOther
	global.Fact.Key, global.Fact.Platform = "bot_name", platform
	sensitivePriv := userFact("u1", "u1_health", "has asthma", privSession, channel.Private)
	sensitivePriv.Fact.Sensitive = true
	sensitiveHere := groupFact("group_secret", "the wifi password is hunter2", sessionA)
	sensitiveHere.Fact.Sensitive = true
	privFact := memory.Change{Fact: memory.Fact{Scope: memory.ScopePrivate, Key: "private_note", Content: "a private chat note",
		SessionKey: privSession, ChatKind: string(channel.Private), Platform: platform, Kind: memory.KindFact,
		SourceType: memory.Explicit, Confidence: 1, Importance: 0.5}}
	apply(t, h.st,
		groupFact("group_a", "this group plays chess", sessionA),
		groupFact("group_b", "that group plays go", sessionB),
		privFact, global, globalOther, sensitivePriv, sensitiveHere, otherPlatform,
		userFact("u1", "u1_here", "u1 said it here", sessionA, channel.Group),
		userFact("u1", "u1_private", "u1 said it in private", privSession, channel.Private),
		userFact("u1", "u1_group_b", "u1 said it in group b", sessionB, channel.Group),
		userFact("u2", "u2_here", "u2 said it here", sessionA, channel.Group),
		userFact("u3", "u3_private", "u3 said it in private", channel.SessionKey("", platform, bot,
			channel.Chat{Kind: channel.Private, ID: "u3"}), channel.Private),
	)
	keys := func(mod func(f *memory.FactFilter)) []string { return factKeys(candidates(t, h.st, mod)) }
	base := []string{"group_a", "group_secret", "bot_name", "u1_here", "u1_private"}
	require.ElementsMatch(t, base, keys(nil))
	require.ElementsMatch(t, append(slicesClone(base), "u1_group_b"), keys(func(f *memory.FactFilter) { f.CrossGroup = true }))
	require.ElementsMatch(t, append(slicesClone(base), "u1_elsewhere", "bot_other"),
		keys(func(f *memory.FactFilter) { f.CrossChannel = true }))
	require.ElementsMatch(t, []string{"group_a", "group_secret", "bot_name", "u1_here", "u1_private", "u2_here", "u3_private"},
		keys(func(f *memory.FactFilter) { f.Participants = []string{"u1", "u2", "u3"} }))
	require.ElementsMatch(t, []string{"group_a", "group_secret", "bot_name"},
		keys(func(f *memory.FactFilter) { f.Participants = nil }), "no participants: no user facts")
	require.ElementsMatch(t, []string{"private_note", "u1_health", "bot_name", "u1_private"},
		keys(func(f *memory.FactFilter) { f.SessionKey = privSession }), "sensitive facts stay in their chat")
	require.ElementsMatch(t, []string{"group_b", "bot_name", "u1_private", "u1_group_b"},
		keys(func(f *memory.FactFilter) { f.SessionKey = sessionB }))
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

func testFactsExpiry(t *testing.T, h *harness[memory.FactStore]) {
	soon := groupFact("soon", "expires in an hour", sessionA)
	soon.Fact.ExpiresAt = Start.Add(time.Hour)
	past := groupFact("past", "expired yesterday", sessionA)
	past.Fact.ExpiresAt = Start.Add(-24 * time.Hour)
	apply(t, h.st, soon, past, groupFact("never", "never expires", sessionA))
	at := func(now time.Time) []string {
		return factKeys(candidates(t, h.st, func(f *memory.FactFilter) { f.Now = now }))
	}
	require.ElementsMatch(t, []string{"soon", "never"}, at(Start))
	require.ElementsMatch(t, []string{"soon", "never"}, at(Start.Add(time.Hour-time.Millisecond)))
	require.ElementsMatch(t, []string{"never"}, at(Start.Add(time.Hour+time.Millisecond)))
	require.ElementsMatch(t, []string{"soon", "never", "past"}, at(Start.Add(-48*time.Hour)))
}

func testFactsOrder(t *testing.T, h *harness[memory.FactStore]) {
	imp := []float64{0.3, 0.9, 0.1, 0.7, 0.5}
	for i, v := range imp {
		c := groupFact(fmt.Sprint("f", i), fmt.Sprint("fact number ", i), sessionA)
		c.Fact.Importance = v
		apply(t, h.st, c)
	}
	want := []string{"f1", "f3", "f4", "f0", "f2"}
	require.Equal(t, want, factKeys(candidates(t, h.st, nil)), "most important first")
	require.Equal(t, want[:2], factKeys(candidates(t, h.st, func(f *memory.FactFilter) { f.Limit = 2 })))
	require.Equal(t, want, factKeys(candidates(t, h.st, func(f *memory.FactFilter) { f.Limit = 0 })), "default limit")
	for i := range 210 {
		apply(t, h.st, groupFact(fmt.Sprint("bulk", i), fmt.Sprint("bulk fact ", i), sessionA))
	}
	require.Len(t, candidates(t, h.st, func(f *memory.FactFilter) { f.Limit = 0 }), 200, "the default limit is 200")
	require.Len(t, candidates(t, h.st, func(f *memory.FactFilter) { f.Limit = 215 }), 215)
}

func testFactsMatch(t *testing.T, h *harness[memory.FactStore]) {
	apply(t, h.st,
		groupFact("city", "住在杭州 lives in Hangzhou", sessionA),
		groupFact("food", "喜欢吃杭州的小笼包 and dumplings", sessionA),
		groupFact("sport", "plays tennis every Sunday", sessionA),
		groupFact("other_city", "出生在上海", sessionB),
	)
	all := candidates(t, h.st, nil)
	ids := map[string]int64{}
	var idList []int64
	for _, f := range all {
		ids[f.Key] = f.ID
		idList = append(idList, f.ID)
	}
	b := candidates(t, h.st, func(f *memory.FactFilter) { f.SessionKey = sessionB })
	ids["other_city"] = byKey(t, b, "other_city").ID
	match := func(ids []int64, query string) map[int64]float64 {
		ms, err := h.st.MatchFacts(t.Context(), ids, memory.QueryTokens(query))
		require.NoError(t, err)
		out := map[int64]float64{}
		for _, m := range ms {
			require.Positive(t, m.Score)
			out[m.ID] = m.Score
		}
		return out
	}
	got := match(idList, "杭州")
	require.Len(t, got, 2)
	require.Contains(t, got, ids["city"])
	require.Contains(t, got, ids["food"])
	require.Equal(t, map[int64]float64{ids["sport"]: match(idList, "TENNIS")[ids["sport"]]}, match(idList, "tennis"))
	require.Len(t, match(idList, "Tennis"), 1, "case-insensitive")
	require.Empty(t, match(idList, "上海"), "only the given ids")
	require.Len(t, match(append(idList, ids["other_city"]), "上海"), 1)
	require.Empty(t, match(idList, "football"))
	require.Empty(t, match(nil, "杭州"), "no ids")
	require.Empty(t, match(idList, ""), "no tokens")
}

// testFactsMatchRanking checks that MatchFacts scores by relevance: a
// fact matching more of the query's tokens scores higher, and a rare token
// outweighs a common one.
func testFactsMatchRanking(t *testing.T, h *harness[memory.FactStore]) {
	apply(t, h.st,
		groupFact("both_en", "apple and banana smoothie", sessionA),
		groupFact("one_en", "apple pie with cream", sessionA),
		groupFact("both_zh", "喜欢吃杭州的小笼包", sessionA),
		groupFact("one_zh", "住在杭州西湖边", sessionA),
	)
	ids := map[string]int64{}
	var idList []int64
	for _, f := range candidates(t, h.st, nil) {
		ids[f.Key] = f.ID
		idList = append(idList, f.ID)
	}
	score := func(query string) map[int64]float64 {
		ms, err := h.st.MatchFacts(t.Context(), idList, memory.QueryTokens(query))
		require.NoError(t, err)
		out := map[int64]float64{}
		for _, m := range ms {
			out[m.ID] = m.Score
		}
		return out
	}
	var wrong []string
	for _, tc := range []struct{ query, better, worse string }{
		{"apple banana", "both_en", "one_en"},
		{"杭州 小笼包", "both_zh", "one_zh"},
	} {
		got := score(tc.query)
		require.Len(t, got, 2, tc.query)
		if got[ids[tc.better]] <= got[ids[tc.worse]] {
			wrong = append(wrong, fmt.Sprintf("%q: %s scored %.3f, not above %s's %.3f", tc.query,
				tc.better, got[ids[tc.better]], tc.worse, got[ids[tc.worse]]))
		}
	}
	require.Empty(t, wrong, "MatchFacts must score a fact matching more query words higher: %s", strings.Join(wrong, "; "))
}

func testFactsTouch(t *testing.T, h *harness[memory.FactStore]) {
	apply(t, h.st, groupFact("a", "fact a", sessionA), groupFact("b", "fact b", sessionA))
	facts := candidates(t, h.st, nil)
	a := byKey(t, facts, "a")
	at := Start.Add(time.Hour + 777777*time.Nanosecond)
	require.NoError(t, h.st.TouchFacts(t.Context(), []int64{a.ID}, at))
	require.NoError(t, h.st.TouchFacts(t.Context(), nil, at), "no ids")
	facts = candidates(t, h.st, nil)
	sameTime(t, at, byKey(t, facts, "a").LastVerifiedAt, "LastVerifiedAt")
	require.False(t, byKey(t, facts, "b").LastVerifiedAt.Equal(ms(at)), "only the given facts")
	require.Equal(t, byKey(t, facts, "a").Content, "fact a")
}

func testFactsForget(t *testing.T, h *harness[memory.FactStore]) {
	otherPlatform := userFact("u1", "name", "Ming", "otherchat:private:u1", channel.Private)
	otherPlatform.Fact.Platform = "otherchat"
	apply(t, h.st,
		userFact("u1", "name", "小明", sessionA, channel.Group),
		userFact("u1", "city", "lives in Hangzhou", privSession, channel.Private),
		userFact("u2", "city", "lives in Hangzhou too", sessionA, channel.Group),
		groupFact("group", "a group fact", sessionA),
		otherPlatform,
	)
	all := candidates(t, h.st, func(f *memory.FactFilter) { f.Participants = []string{"u1", "u2"}; f.CrossChannel = true })
	require.Len(t, all, 5)
	var ids []int64
	for _, f := range all {
		ids = append(ids, f.ID)
	}

	var js memory.JobStore
	if s, ok := h.st.(memory.JobStore); ok {
		js = s
		for _, j := range []memory.Job{
			{MessageKey: "m1", SessionKey: sessionA, Platform: platform, SubjectUserID: "u1"},
			{MessageKey: "m2", SessionKey: sessionA, Platform: platform, SubjectUserID: "u1"},
			{MessageKey: "m3", SessionKey: sessionA, Platform: platform, SubjectUserID: "u2"},
			{MessageKey: "m4", SessionKey: sessionA, Platform: platform, SubjectUserID: "u1", AvailableAt: Start.Add(time.Minute)},
		} {
			ok, err := js.EnqueueJob(t.Context(), j)
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
	var running memory.JobLease
	if js != nil {
		ls, err := js.ClaimJobs(t.Context(), "w", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, ls, 1)
		require.Equal(t, "m1", ls[0].Job.MessageKey)
		running = ls[0]
	}

	res, err := h.st.ForgetUser(t.Context(), platform, "u1", memory.ForgetOptions{})
	require.NoError(t, err)
	require.Equal(t, 2, res.Facts)
	require.False(t, res.HistoryHidden)
	left := candidates(t, h.st, func(f *memory.FactFilter) { f.Participants = []string{"u1", "u2"}; f.CrossChannel = true })
	require.ElementsMatch(t, []string{"city", "group", "name"}, factKeys(left))
	for _, f := range left {
		if f.Key != "group" {
			if f.SubjectUserID == "u1" {
				require.Equal(t, "otherchat", f.Platform, "only the platform's facts are forgotten")
			}
		}
	}
	ms, err := h.st.MatchFacts(t.Context(), ids, memory.QueryTokens("小明 Hangzhou"))
	require.NoError(t, err)
	for _, m := range ms {
		for _, f := range all {
			if f.ID == m.ID {
				require.False(t, f.SubjectUserID == "u1" && f.Platform == platform, "forgotten fact %s still matches", f.Key)
			}
		}
	}

	if js != nil {
		require.Equal(t, 3, res.JobsCancelled, "the running and the pending jobs, delayed or not")
		_, err := js.CompleteJob(t.Context(), running, []memory.Change{userFact("u1", "name", "小明", sessionA, channel.Group)})
		require.ErrorIs(t, err, memory.ErrLeaseLost, "a cancelled job cannot complete")
		require.NotContains(t, factKeys(candidates(t, h.st, nil)), "name", "and writes nothing")
		h.clk.Advance(time.Hour)
		ls, err := js.ClaimJobs(t.Context(), "w", 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, ls, 1)
		require.Equal(t, "m3", ls[0].Job.MessageKey, "other users' jobs stay")
	}

	again, err := h.st.ForgetUser(t.Context(), platform, "u1", memory.ForgetOptions{})
	require.NoError(t, err)
	require.Zero(t, again.Facts, "forgetting twice")
	_, err = h.st.ForgetUser(t.Context(), platform, "", memory.ForgetOptions{})
	require.Error(t, err, "a forget without a user")
	left2 := candidates(t, h.st, func(f *memory.FactFilter) { f.Participants = []string{"u1", "u2"}; f.CrossChannel = true })
	require.Len(t, left2, 3)
}

func testFactsConcurrent(t *testing.T, h *harness[memory.FactStore]) {
	const writers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				c := userFact("u1", "mood", fmt.Sprintf("mood %d from %d", i%3, w), sessionA, channel.Group)
				if _, err := h.st.ApplyChanges(t.Context(), []memory.Change{c}); err != nil {
					errs <- err
				}
				if _, err := h.st.CandidateFacts(t.Context(), memory.FactFilter{SessionKey: sessionA, Platform: platform,
					Participants: []string{"u1"}, Now: Start}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	facts := candidates(t, h.st, nil)
	f := byKey(t, facts, "mood")
	require.GreaterOrEqual(t, f.Version, 2, "the key was superseded")
}
