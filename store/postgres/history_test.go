package postgres_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/memory/memorytest"
)

func TestHistoryConformance(t *testing.T) {
	memorytest.RunHistory(t, func(t *testing.T, clk *clock.Fake) memory.History { return open(t, clk) })
}

func TestHistorySearchConformance(t *testing.T) {
	memorytest.RunSearch(t, func(t *testing.T, clk *clock.Fake) memorytest.SearchStore { return open(t, clk) })
}

func TestSummaryStoreConformance(t *testing.T) {
	memorytest.RunSummaries(t, func(t *testing.T, clk *clock.Fake) memorytest.SummaryStore { return open(t, clk) })
}

// historyEvent is a text message in a group chat of platform "pg".
func historyEvent(chat, id, sender, text string, at time.Time) channel.Event {
	ev := channel.Event{
		Platform: "pg", BotID: "bot", Kind: channel.KindMessage, Chat: channel.Chat{Kind: channel.Group, ID: chat},
		MessageID: id, Time: at, Sender: channel.Sender{ID: sender, Name: sender},
		Segments: []channel.Segment{channel.Text(text)},
	}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
	return ev
}

func historyEntry(ev channel.Event) memory.Entry {
	return memory.Entry{Key: ev.Key(), SessionKey: ev.SessionKey, Direction: memory.In, Event: ev}
}

func historySearch(t *testing.T, s memory.HistorySearch, session, text string) []string {
	t.Helper()
	hits, err := s.SearchHistory(t.Context(), memory.HistoryQuery{Sessions: []string{session}, Tokens: memory.QueryTokens(text)})
	require.NoError(t, err)
	var keys []string
	for _, h := range hits {
		keys = append(keys, h.Key)
	}
	return keys
}

// TestHistorySharedAcrossStores: two stores on one schema (two processes)
// see each other's writes at once: there is no per-process cache.
func TestHistorySharedAcrossStores(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(memorytest.Start)
	a := openURL(t, url, clk)
	b := openURL(t, url, clk)

	ev := historyEvent("g1", "1", "u1", "明天去杭州看西湖 lake trip", memorytest.Start)
	require.NoError(t, a.Append(t.Context(), historyEntry(ev)))
	require.Equal(t, []string{ev.Key()}, historySearch(t, b, ev.SessionKey, "西湖"))
	require.Equal(t, []string{ev.Key()}, historySearch(t, b, ev.SessionKey, "LAKE"))
	es, err := b.Recent(t.Context(), ev.SessionKey, 10)
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "明天去杭州看西湖 lake trip", es[0].Event.Text())

	// An edit through b replaces what a finds; a recall through a hides
	// the message from b's search but not from its transcript.
	ev.Segments = []channel.Segment{channel.Text("改去苏州 river")}
	require.NoError(t, b.Append(t.Context(), historyEntry(ev)))
	require.Empty(t, historySearch(t, a, ev.SessionKey, "西湖"))
	require.Equal(t, []string{ev.Key()}, historySearch(t, a, ev.SessionKey, "苏州"))
	es, err = a.Recent(t.Context(), ev.SessionKey, 10)
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "改去苏州 river", es[0].Event.Text())

	require.NoError(t, a.MarkRecalled(t.Context(), ev.Key(), memorytest.Start.Add(time.Minute)))
	require.Empty(t, historySearch(t, b, ev.SessionKey, "苏州"))
	es, err = b.Recent(t.Context(), ev.SessionKey, 10)
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.False(t, es[0].RecalledAt.IsZero())
}

// TestHistoryConcurrentWritersAcrossStores: writers in two stores append
// to one session at once; every message is then in both stores' Recent
// and search, once.
func TestHistoryConcurrentWritersAcrossStores(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(memorytest.Start)
	stores := []memory.History{openURL(t, url, clk), openURL(t, url, clk)}
	const writers, each = 4, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		st := stores[w%2]
		wg.Go(func() {
			for i := range each {
				ev := historyEvent("g", fmt.Sprintf("%d-%d", w, i), fmt.Sprint("u", w), "咖啡 coffee",
					memorytest.Start.Add(time.Duration(i*writers+w)*time.Millisecond))
				// Appended twice, as a retried write would be.
				for range 2 {
					if err := st.Append(t.Context(), historyEntry(ev)); err != nil {
						errs <- err
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	session := historyEvent("g", "", "", "", time.Time{}).SessionKey
	for _, st := range stores {
		es, err := st.Recent(t.Context(), session, 1000)
		require.NoError(t, err)
		require.Len(t, es, writers*each)
		for i := 1; i < len(es); i++ {
			require.True(t, es[i-1].Event.Time.Before(es[i].Event.Time), "oldest first")
		}
		hits, err := st.(memory.HistorySearch).SearchHistory(t.Context(),
			memory.HistoryQuery{Sessions: []string{session}, Tokens: memory.QueryTokens("咖啡"), Limit: 1000})
		require.NoError(t, err)
		require.Len(t, hits, writers*each)
	}
}

// TestHistoryStoresAwkwardText: text PostgreSQL cannot store as is (a NUL
// byte, invalid UTF-8) is cleaned instead of failing the append, and the
// message stays searchable.
func TestHistoryStoresAwkwardText(t *testing.T) {
	db := open(t, clock.NewFake(memorytest.Start))
	ev := historyEvent("g", "1", "u\x001", "bad\x00byte \xff\xfe 北京", memorytest.Start)
	require.NoError(t, db.Append(t.Context(), historyEntry(ev)))
	require.Equal(t, []string{ev.Key()}, historySearch(t, db, ev.SessionKey, "北京"))
	m, err := db.Message(t.Context(), ev.Key())
	require.NoError(t, err)
	require.Equal(t, "u1", m.SenderID)
	require.Equal(t, "badbyte \uFFFD 北京", m.Text)
}

// TestHistoryRankingPrefersRareTokens: among messages matching one query
// token each, the one with the rarer token ranks first (BM25's idf).
func TestHistoryRankingPrefersRareTokens(t *testing.T) {
	db := open(t, clock.NewFake(memorytest.Start))
	var session, rare string
	for i := range 8 {
		text := "common word"
		if i == 3 {
			text = "rare thing"
		}
		ev := historyEvent("g", fmt.Sprint(i), "u", text, memorytest.Start.Add(time.Duration(i)*time.Second))
		require.NoError(t, db.Append(t.Context(), historyEntry(ev)))
		session = ev.SessionKey
		if i == 3 {
			rare = ev.Key()
		}
	}
	got := historySearch(t, db, session, "common rare")
	require.Len(t, got, 8)
	require.Equal(t, rare, got[0])
}
