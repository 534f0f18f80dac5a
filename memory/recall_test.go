package memory_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

func newRecaller(t *testing.T, d memory.Store, clk clock.Clock, cfg memory.RecallConfig) *memory.Recaller {
	t.Helper()
	cfg.Clock = clk
	r, err := memory.NewRecaller(d, d, cfg)
	require.NoError(t, err)
	t.Cleanup(r.Wait)
	return r
}

func TestRecallHistoryChineseEnglishMixed(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	zh := add(t, d, event(group1, "1", "u1", "小明", "我下周要去北京出差，顺便看看长城", t0))
	en := add(t, d, event(group1, "2", "u2", "Alice", "My favourite database is SQLite", t0.Add(time.Minute)))
	mixed := add(t, d, event(group1, "3", "u3", "Bob", "周末用Go写了一个SQLite备份工具", t0.Add(2*time.Minute)))
	add(t, d, event(group1, "4", "u4", "Eve", "今天天气不错", t0.Add(3*time.Minute)))
	clk.Advance(time.Hour)
	r := newRecaller(t, d, clk, memory.RecallConfig{})

	cases := []struct {
		name, text string
		want       []string
	}{
		{"chinese-unspaced", "北京出差的事怎么样了", []string{zh.Key}},
		{"english", "which DATABASE do you like", []string{en.Key}},
		{"mixed", "那个SQLite备份工具", []string{mixed.Key, en.Key}},
		{"nothing", "量子计算", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := r.Recall(t.Context(), memory.Query{SessionKey: session(group1), UserID: "u9", Text: tc.text})
			require.NoError(t, err)
			require.Equal(t, tc.want, snippetKeys(rc))
		})
	}
	// Before bounds the search to history not already in the prompt.
	rc, err := r.Recall(t.Context(), memory.Query{SessionKey: session(group1), Text: "sqlite", Before: t0.Add(2 * time.Minute)})
	require.NoError(t, err)
	require.Equal(t, []string{en.Key}, snippetKeys(rc))
}

func TestRecallFactsRankingAndCore(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	apply(t, d,
		fact(group1, "u1", "home_city", "住在杭州西湖边", 0.95, 0.95),                   // core
		fact(group1, "u1", "pet", "养了一只叫豆豆的猫咪", 0.8, 0.6),                        // matches "猫咪"
		fact(group1, "u1", "job", "works as a backend engineer in Go", 0.8, 0.7), // about the speaker
		fact(group1, "u2", "food", "loves spicy hotpot", 0.9, 0.7),               // other user, no match
		fact(group1, "u2", "cat", "也养了猫咪", 0.9, 0.7),                             // other user, matches
	)
	r := newRecaller(t, d, clk, memory.RecallConfig{})
	rc, err := r.Recall(t.Context(), memory.Query{SessionKey: session(group1), UserID: "u1", Participants: []string{"u2"}, Text: "你家的猫咪最近好吗"})
	require.NoError(t, err)
	got := contents(rc)
	require.Equal(t, "住在杭州西湖边", got[0], "core fact first")
	require.True(t, rc.Facts[0].Core)
	require.Contains(t, got, "养了一只叫豆豆的猫咪")
	require.Contains(t, got, "也养了猫咪")
	require.Contains(t, got, "works as a backend engineer in Go")
	require.NotContains(t, got, "loves spicy hotpot", "unrelated fact about another user")
	require.Less(t, indexOf(got, "养了一只叫豆豆的猫咪"), indexOf(got, "works as a backend engineer in Go"))

	// Returned ids get last_verified_at touched asynchronously.
	r.Wait()
	all, err := d.Facts(t.Context(), "onebot", "u1")
	require.NoError(t, err)
	for _, f := range all {
		require.Equal(t, t0, f.LastVerifiedAt, f.Key)
	}

	block := memory.RenderBlock(rc, memory.BlockOptions{Alias: func(id string) string { return map[string]string{"u1": "小明", "u2": "Alice"}[id] }})
	require.True(t, strings.HasPrefix(block, "(core) 小明: 住在杭州西湖边\n"), block)
	require.NotContains(t, block, "u1")
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func TestRecallScopesAndSwitches(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	inG2 := fact(group2, "u1", "game", "plays chess every evening", 0.9, 0.8)
	inPrivate := fact(private, "u1", "music", "likes chess music playlists", 0.9, 0.8)
	sensitive := fact(private, "u1", "health", "has a chess injury", 0.95, 0.8)
	sensitive.Fact.Sensitive = true
	otherPlatform := fact(group1, "u1", "tg", "chess on telegram", 0.9, 0.8)
	otherPlatform.Fact.Platform = "telegram"
	otherPlatform.Fact.SessionKey = "default:telegram:bot:group:g1"
	groupFact := memory.Change{Fact: memory.Fact{Scope: memory.ScopeGroup, Key: "topic", Content: "this group plays chess on Fridays",
		SessionKey: session(group2), ChatKind: "group", Platform: "onebot", Confidence: 0.9, Importance: 0.8}}
	expired := fact(group1, "u1", "old", "chess club member", 0.9, 0.8)
	expired.Fact.ExpiresAt = t0.Add(-time.Hour)
	apply(t, d, inG2, inPrivate, sensitive, otherPlatform, groupFact, expired)
	q := memory.Query{SessionKey: session(group1), UserID: "u1", Text: "chess"}

	def := newRecaller(t, d, clk, memory.RecallConfig{})
	rc, err := def.Recall(t.Context(), q)
	require.NoError(t, err)
	require.Equal(t, []string{"likes chess music playlists"}, contents(rc), "defaults: private-chat user facts only")

	cross := newRecaller(t, d, clk, memory.RecallConfig{CrossGroup: true})
	rc, err = cross.Recall(t.Context(), q)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"likes chess music playlists", "plays chess every evening"}, contents(rc))

	both := newRecaller(t, d, clk, memory.RecallConfig{CrossGroup: true, CrossChannel: true})
	rc, err = both.Recall(t.Context(), q)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"likes chess music playlists", "plays chess every evening", "chess on telegram"}, contents(rc))

	// In the private chat the sensitive fact is recalled; group facts of
	// another group never are.
	rc, err = def.Recall(t.Context(), memory.Query{SessionKey: session(private), UserID: "u1", Text: "chess"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"likes chess music playlists", "has a chess injury"}, contents(rc))
}

func TestFactsSupersedeNotDuplicate(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	require.Equal(t, memory.ApplyResult{Inserted: 1}, apply(t, d, fact(private, "u1", "home_city", "lives in Hangzhou", 0.9, 0.8)))
	same := fact(private, "u1", "home_city", "Lives in Hangzhou ", 0.95, 0.8)
	same.Fact.SourceMessageIDs = []string{"m2"}
	require.Equal(t, memory.ApplyResult{Refreshed: 1}, apply(t, d, same))
	require.Equal(t, memory.ApplyResult{Superseded: 1}, apply(t, d, fact(private, "u1", "home_city", "moved to Shanghai", 0.9, 0.8)))
	all, err := d.Facts(t.Context(), "onebot", "u1")
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, memory.StatusSuperseded, all[0].Status)
	require.Equal(t, []string{"src-home_city", "m2"}, all[0].SourceMessageIDs)
	require.Equal(t, memory.StatusActive, all[1].Status)
	require.Equal(t, 2, all[1].Version)
	require.Equal(t, all[0].ID, all[1].SupersedesID)

	r := newRecaller(t, d, clk, memory.RecallConfig{})
	rc, err := r.Recall(t.Context(), memory.Query{SessionKey: session(private), UserID: "u1", Text: "Hangzhou Shanghai"})
	require.NoError(t, err)
	require.Equal(t, []string{"moved to Shanghai"}, contents(rc))
}

func TestSearchTool(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := openStore(t, clk, "")
	add(t, d, event(group1, "1", "u1", "小明", "我下周要去北京出差", t0))
	apply(t, d, fact(group1, "u1", "home_city", "住在杭州", 0.95, 0.95))
	r := newRecaller(t, d, clk, memory.RecallConfig{})
	tool := memory.SearchTool(r, memory.Query{SessionKey: session(group1), UserID: "u1"})
	spec := tool.Spec()
	require.Equal(t, "memory_search", spec.Name)
	require.True(t, json.Valid(spec.Parameters))
	out, err := tool.Call(context.Background(), json.RawMessage(`{"query":"北京"}`))
	require.NoError(t, err)
	require.Contains(t, out, "- 小明 said on 2026-03-01: 我下周要去北京出差")
	require.NotContains(t, out, "住在杭州", "core facts are not repeated by the tool")
	out, err = tool.Call(t.Context(), json.RawMessage(`{"query":"火星","limit":3}`))
	require.NoError(t, err)
	require.Equal(t, "No matching memories.", out)
	_, err = tool.Call(t.Context(), json.RawMessage(`{"query":""}`))
	require.Error(t, err)
}
