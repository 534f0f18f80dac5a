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
	"github.com/personakit/persona/outcome"
)

func deferSearch(o *Options) { o.DeferSearch = true }

// untokenizedRanges returns the recorded ranges of untokenized rows
// (to 0 = open).
func untokenizedRanges(t *testing.T, d *DB) [][2]int64 {
	t.Helper()
	rows, err := d.rdb.QueryContext(t.Context(), `SELECT from_rowid, coalesce(to_rowid, 0) FROM search_untokenized ORDER BY 1`)
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	var out [][2]int64
	for rows.Next() {
		var r [2]int64
		require.NoError(t, rows.Scan(&r[0], &r[1]))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestDeferSearchTokenizesOnSearch: a DB with DeferSearch stores new rows
// untokenized and unqueued; a search tokenizes and indexes its sessions'
// rows first and finds them, leaving the other sessions' rows alone.
func TestDeferSearchTokenizesOnSearch(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), deferSearch)
	g1 := channel.Chat{Kind: channel.Group, ID: "g1"}
	g2 := channel.Chat{Kind: channel.Group, ID: "g2"}
	s1 := channel.SessionKey("", "onebot", "bot", g1)
	s2 := channel.SessionKey("", "onebot", "bot", g2)
	require.Equal(t, [][2]int64{{1, 0}}, untokenizedRanges(t, d), "an open range from the first rowid")

	k1 := appendMsg(t, d, msgEvent(g1, "1", "u1", "Ann", "明天去杭州", t0))
	ev2 := msgEvent(g1, "2", "u2", "Bob", "a message about green tea", t0.Add(time.Second))
	_, err := d.Enqueue(t.Context(), inboundItem(ev2))
	require.NoError(t, err)
	ev3 := msgEvent(g1, "3", "u3", "Cid", "recorded message about coffee", t0.Add(2*time.Second))
	_, err = d.Record(t.Context(), inboundItem(ev3), inbound.Outcome{Code: outcome.Replied})
	require.NoError(t, err)
	k4 := appendMsg(t, d, msgEvent(g2, "4", "u1", "Ann", "more green tea over here", t0.Add(3*time.Second)))
	for _, k := range []string{k1, ev2.Key(), ev3.Key(), k4} {
		tokens, queued := rowSearch(t, d, k)
		require.Empty(t, tokens, k)
		require.False(t, queued, k)
	}
	requireSearchIndexConsistent(t, d)

	require.Equal(t, []string{ev2.Key()}, searchKeys(t, d, s1, "tea"))
	require.Equal(t, []string{k1}, searchKeys(t, d, s1, "杭州"))
	require.Equal(t, []string{ev3.Key()}, searchKeys(t, d, s1, "coffee"))
	tokens, _ := rowSearch(t, d, k4)
	require.Empty(t, tokens, "the other session's row is left alone")
	s := requireSearchIndexConsistent(t, d)
	require.Equal(t, 3, s.ftsDocs)
	require.Equal(t, []string{k4}, searchKeys(t, d, s2, "tea"))
	require.Equal(t, [][2]int64{{1, 0}}, untokenizedRanges(t, d), "the range stays open while the DB writes")
}

// TestDeferSearchKeepsIndexedRowsIndexed: a DB with DeferSearch that
// rewrites a row already in the index keeps it there, with its new text.
func TestDeferSearchKeepsIndexedRowsIndexed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "d.db")
	clk := clock.NewFake(t0)
	d, err := Open(path, Options{Clock: clk, NoSearchIndexer: true})
	require.NoError(t, err)
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	ev := msgEvent(g, "1", "u1", "Ann", "first words about tea", t0)
	appendMsg(t, d, ev)
	require.Equal(t, []string{ev.Key()}, searchKeys(t, d, session, "tea"))
	require.NoError(t, d.Close())

	d, err = Open(path, Options{Clock: clk, DeferSearch: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	ev.Segments = []channel.Segment{channel.Text("edited words about coffee")}
	appendMsg(t, d, ev)
	tokens, _ := rowSearch(t, d, ev.Key())
	require.NotEmpty(t, tokens)
	require.Equal(t, []string{ev.Key()}, searchKeys(t, d, session, "coffee"))
	require.Empty(t, searchKeys(t, d, session, "tea"))
	requireSearchIndexConsistent(t, d)
}

// TestDeferSearchBacklogOnReopen: a DB opened with the indexer on a file a
// DeferSearch DB wrote closes the open range and tokenizes and indexes its
// rows in the background; a DeferSearch DB opened after it starts a new
// range.
func TestDeferSearchBacklogOnReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "d.db")
	clk := clock.NewFake(t0)
	d, err := Open(path, Options{Clock: clk, DeferSearch: true})
	require.NoError(t, err)
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	var keys []string
	for i := range searchIndexBatch + 10 { // more than one tokenizing batch
		keys = append(keys, appendMsg(t, d, msgEvent(g, fmt.Sprint(i), "u1", "Ann", fmt.Sprintf("tea w%d", i), t0.Add(time.Duration(i)*time.Second))))
	}
	notice := msgEvent(g, "n", "u1", "Ann", "", t0.Add(time.Hour))
	notice.Kind = channel.KindNotice
	_, err = d.Record(t.Context(), inboundItem(notice), inbound.Outcome{Code: outcome.Replied})
	require.NoError(t, err)
	require.NoError(t, d.Close())

	d, err = Open(path, Options{Clock: clk})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s := readSearchState(t, d)
		return s.queued == 0 && s.ftsDocs == len(keys)
	}, 30*time.Second, 10*time.Millisecond, "the background indexer tokenizes and indexes the backlog")
	require.Empty(t, untokenizedRanges(t, d))
	requireSearchIndexConsistent(t, d)
	for _, i := range []int{0, 17, searchIndexBatch + 3} { // both tokenizing batches
		require.Equal(t, []string{keys[i]}, searchKeys(t, d, session, fmt.Sprintf("w%d", i)))
	}
	var last int64
	require.NoError(t, d.rdb.QueryRowContext(t.Context(), `SELECT max(rowid) FROM message_events`).Scan(&last))
	require.NoError(t, d.Close())

	d, err = Open(path, Options{Clock: clk, DeferSearch: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	require.Equal(t, [][2]int64{{last + 1, 0}}, untokenizedRanges(t, d))
}
