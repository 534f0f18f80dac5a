package store

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
)

// msgEvent builds a group (or private) message event.
func msgEvent(chat channel.Chat, id, sender, name, text string, at time.Time) channel.Event {
	ev := channel.Event{
		Platform: "onebot", BotID: "bot", Kind: channel.KindMessage, Chat: chat, MessageID: id, Time: at,
		Sender:   channel.Sender{ID: sender, Name: name},
		Segments: []channel.Segment{{Type: channel.SegText, Text: text}},
	}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, chat)
	return ev
}

func appendMsg(t *testing.T, d *DB, ev channel.Event) string {
	t.Helper()
	require.NoError(t, d.Append(t.Context(), memory.Entry{Event: ev}))
	return ev.Key()
}

func searchKeys(t *testing.T, d *DB, session, query string) []string {
	t.Helper()
	hits, err := d.SearchHistory(t.Context(), memory.HistoryQuery{Sessions: []string{session}, Tokens: memory.QueryTokens(query)})
	require.NoError(t, err)
	var keys []string
	for _, h := range hits {
		keys = append(keys, h.Key)
		require.Positive(t, h.Score)
	}
	return keys
}

func TestSearchHistoryLanguages(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	zh := appendMsg(t, d, msgEvent(g, "1", "u1", "小明", "我下周要去北京出差，顺便看看长城", t0))
	en := appendMsg(t, d, msgEvent(g, "2", "u2", "Alice", "My favourite database is SQLite, honestly.", t0.Add(time.Second)))
	mixed := appendMsg(t, d, msgEvent(g, "3", "u3", "Bob", "周末用Go写了一个SQLite的小工具", t0.Add(2*time.Second)))
	ja := appendMsg(t, d, msgEvent(g, "4", "u4", "Ken", "東京のラーメンが大好きです", t0.Add(3*time.Second)))
	session := channel.SessionKey("", "onebot", "bot", g)

	cases := []struct {
		query string
		want  []string
	}{
		{"北京", []string{zh}},
		{"去北京出差", []string{zh}},
		{"长城怎么样", []string{zh}},
		{"sqlite", []string{mixed, en}}, // equal scores: newer first
		{"SQLite 小工具", []string{mixed, en}},
		{"Favourite DATABASE", []string{en}},
		{"ラーメン", []string{ja}},
		{"東京", []string{ja}},
		{"alice", []string{en}}, // sender names are indexed
		{"小明", []string{zh}},    // CJK sender name
		{"上海", nil},
		{"!!!", nil},
	}
	for _, tc := range cases {
		got := searchKeys(t, d, session, tc.query)
		if len(tc.want) == 1 || tc.want == nil {
			require.Equal(t, tc.want, got, tc.query)
		} else {
			require.ElementsMatch(t, tc.want, got, tc.query)
			require.Equal(t, tc.want[0], got[0], "best hit for %q", tc.query)
		}
	}
	// Another session's partition does not see these rows.
	require.Empty(t, searchKeys(t, d, channel.SessionKey("", "onebot", "bot", channel.Chat{Kind: channel.Group, ID: "g2"}), "北京"))
}

func TestSearchHistoryFollowsUpdatesAndRecalls(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	ev := msgEvent(g, "1", "u1", "A", "明天去杭州", t0)
	key := appendMsg(t, d, ev)
	require.Equal(t, []string{key}, searchKeys(t, d, session, "杭州"))

	// An edit re-indexes: the old words are gone, the new found.
	ev.Segments[0].Text = "明天去苏州"
	appendMsg(t, d, ev)
	require.Empty(t, searchKeys(t, d, session, "杭州"))
	require.Equal(t, []string{key}, searchKeys(t, d, session, "苏州"))

	// Idempotent re-append does not duplicate the index entry.
	appendMsg(t, d, ev)
	require.Equal(t, []string{key}, searchKeys(t, d, session, "苏州"))

	// Recalled messages are not searchable.
	require.NoError(t, d.MarkRecalled(t.Context(), key, t0.Add(time.Minute)))
	require.Empty(t, searchKeys(t, d, session, "苏州"))

	// The enqueue path indexes too.
	ev2 := msgEvent(g, "2", "u2", "B", "enqueue path works", t0.Add(time.Second))
	_, err := d.Enqueue(t.Context(), inboundItem(ev2))
	require.NoError(t, err)
	require.Equal(t, []string{ev2.Key()}, searchKeys(t, d, session, "enqueue"))

	// The rebuild reproduces the same index.
	n, err := d.RebuildSearchIndex(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []string{ev2.Key()}, searchKeys(t, d, session, "enqueue"))
	require.Empty(t, searchKeys(t, d, session, "苏州"))
}

func TestSearchHistoryFilters(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	var keys []string
	for i := range 5 {
		keys = append(keys, appendMsg(t, d, msgEvent(g, fmt.Sprint(i), fmt.Sprintf("u%d", i%2), "", "咖啡 coffee", t0.Add(time.Duration(i)*time.Minute))))
	}
	hits, err := d.SearchHistory(t.Context(), memory.HistoryQuery{Sessions: []string{session}, Tokens: []string{"coffee"},
		Before: t0.Add(3 * time.Minute), After: t0, SenderID: "u1", Limit: 10})
	require.NoError(t, err)
	require.Len(t, hits, 1)
	require.Equal(t, keys[1], hits[0].Key)

	res, err := d.ForgetUser(t.Context(), "onebot", "u1", memory.ForgetOptions{ExcludeHistory: true})
	require.NoError(t, err)
	require.True(t, res.HistoryHidden)
	got := searchKeys(t, d, session, "咖啡")
	require.ElementsMatch(t, []string{keys[0], keys[2], keys[4]}, got)
}

func TestMigrationFromVersion1(t *testing.T) {
	t.Parallel()
	require.Equal(t, 3, SchemaVersion())
	path := filepath.Join(t.TempDir(), "p.db")
	d, err := Open(path, Options{Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	require.NoError(t, d.Close())
}

func inboundItem(ev channel.Event) inbound.Item { return inbound.Item{Event: ev} }
