package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
)

func noIndexer(o *Options) { o.NoSearchIndexer = true }

// searchState is what the history search index holds.
type searchState struct {
	queued   int // rows waiting in message_search_queue
	tokened  int // rows with search tokens
	ftsDocs  int // documents in message_search (its docsize table)
	statDocs int // the FTS4 document count BM25 uses
}

func readSearchState(t *testing.T, d *DB) searchState {
	t.Helper()
	ctx := t.Context()
	var s searchState
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT
    (SELECT count(*) FROM message_search_queue),
    (SELECT count(*) FROM message_events WHERE search_tokens != ''),
    (SELECT count(*) FROM message_search_docsize)`).Scan(&s.queued, &s.tokened, &s.ftsDocs))
	var stat []byte
	err := d.rdb.QueryRowContext(ctx, `SELECT value FROM message_search_stat WHERE id = 0`).Scan(&stat)
	if !errors.Is(err, sql.ErrNoRows) {
		require.NoError(t, err)
		n, _ := binary.Uvarint(stat) // FTS varints are little-endian base 128
		s.statDocs = int(n)
	}
	return s
}

// requireSearchIndexConsistent checks the invariant of migration 0004 (a
// row is in message_search exactly when it has tokens and is not queued; a
// queue entry names a row with tokens and its partition; the document count
// agrees) and, when nothing is queued, FTS4's own integrity check of the
// index against the tokens.
func requireSearchIndexConsistent(t *testing.T, d *DB) searchState {
	t.Helper()
	ctx := t.Context()
	s := readSearchState(t, d)
	require.Equal(t, s.tokened-s.queued, s.ftsDocs, "indexed documents = rows with tokens, not queued: %+v", s)
	require.Equal(t, s.ftsDocs, s.statDocs, "FTS document count: %+v", s)
	var stray, badQueue int
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT count(*) FROM message_search_docsize s
LEFT JOIN message_events m ON m.rowid = s.docid
WHERE m.rowid IS NULL OR m.search_tokens = ''
    OR EXISTS (SELECT 1 FROM message_search_queue q WHERE q.docid = s.docid)`).Scan(&stray))
	require.Zero(t, stray, "index documents without tokens or queued")
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT count(*) FROM message_search_queue q
LEFT JOIN message_events m ON m.rowid = q.docid
WHERE m.rowid IS NULL OR m.search_tokens = '' OR m.search_sid != q.search_sid`).Scan(&badQueue))
	require.Zero(t, badQueue, "queue entries without a row, tokens or with another partition")
	if s.queued == 0 {
		// The check compares the index with the tokens of every row, so it
		// only holds when nothing is queued.
		require.NoError(t, d.write(ctx, func(tx wtx) error {
			_, err := tx.exec(`INSERT INTO message_search (message_search) VALUES ('integrity-check')`)
			return err
		}))
	}
	return s
}

// rowSearch returns a row's search tokens and whether it is queued.
func rowSearch(t *testing.T, d *DB, key string) (tokens string, queued bool) {
	t.Helper()
	require.NoError(t, d.rdb.QueryRowContext(t.Context(), `SELECT search_tokens,
    EXISTS (SELECT 1 FROM message_search_queue q WHERE q.docid = m.rowid)
FROM message_events m WHERE id = ?`, key).Scan(&tokens, &queued))
	return tokens, queued
}

func TestSearchIndexOffWritePath(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), noIndexer)
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)

	// Append, Enqueue and Record store the tokens and queue the row; nothing
	// is indexed.
	k1 := appendMsg(t, d, msgEvent(g, "1", "u1", "Ann", "明天去杭州", t0))
	ev2 := msgEvent(g, "2", "u2", "Bob", "queued message about tea", t0.Add(time.Second))
	_, err := d.Enqueue(t.Context(), inboundItem(ev2))
	require.NoError(t, err)
	ev3 := msgEvent(g, "3", "u3", "Cid", "recorded message about coffee", t0.Add(2*time.Second))
	_, err = d.Record(t.Context(), inboundItem(ev3), inbound.Outcome{Code: outcome.Replied})
	require.NoError(t, err)
	for _, k := range []string{k1, ev2.Key(), ev3.Key()} {
		tokens, queued := rowSearch(t, d, k)
		require.NotEmpty(t, tokens, k)
		require.True(t, queued, k)
	}
	require.Equal(t, searchState{queued: 3, tokened: 3}, requireSearchIndexConsistent(t, d))

	// A search right after the writes catches up and finds them.
	require.Equal(t, []string{k1}, searchKeys(t, d, session, "杭州"))
	require.Equal(t, []string{ev2.Key()}, searchKeys(t, d, session, "tea"))
	require.Equal(t, []string{ev3.Key()}, searchKeys(t, d, session, "coffee"))
	require.Equal(t, []string{k1}, searchKeys(t, d, session, "ann"))
	require.Equal(t, searchState{tokened: 3, ftsDocs: 3, statDocs: 3}, requireSearchIndexConsistent(t, d))
}

func TestSearchIndexCatchUpPerSession(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), noIndexer)
	g1, g2, g3 := channel.Chat{Kind: channel.Group, ID: "g1"}, channel.Chat{Kind: channel.Group, ID: "g2"},
		channel.Chat{Kind: channel.Group, ID: "g3"}
	s1, s2 := channel.SessionKey("", "onebot", "bot", g1), channel.SessionKey("", "onebot", "bot", g2)
	k1 := appendMsg(t, d, msgEvent(g1, "1", "u1", "A", "lunch at noon", t0))
	k2 := appendMsg(t, d, msgEvent(g2, "2", "u1", "A", "lunch at one", t0))
	k3 := appendMsg(t, d, msgEvent(g3, "3", "u1", "A", "lunch at two", t0))

	// A search indexes the queued rows of the sessions it searches only.
	require.Equal(t, []string{k1}, searchKeys(t, d, s1, "lunch"))
	require.Equal(t, 2, readSearchState(t, d).queued)
	hits, err := d.SearchHistory(t.Context(), memory.HistoryQuery{Sessions: []string{s2, s1}, Tokens: []string{"lunch"}})
	require.NoError(t, err)
	require.Len(t, hits, 2)
	for _, k := range []string{k1, k2} {
		_, queued := rowSearch(t, d, k)
		require.False(t, queued, k)
	}
	_, queued := rowSearch(t, d, k3)
	require.True(t, queued)
	requireSearchIndexConsistent(t, d)
}

func TestSearchIndexHiddenSenders(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), noIndexer)
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	before := appendMsg(t, d, msgEvent(g, "1", "u1", "A", "secret plans", t0))
	other := appendMsg(t, d, msgEvent(g, "2", "u2", "B", "secret recipe", t0))
	_, err := d.ForgetUser(t.Context(), "onebot", "u1", memory.ForgetOptions{ExcludeHistory: true})
	require.NoError(t, err)
	// Queued before or written after "forget me", the user's messages are
	// indexed like any other and never found.
	after := appendMsg(t, d, msgEvent(g, "3", "u1", "A", "secret meeting", t0))
	require.Equal(t, []string{other}, searchKeys(t, d, session, "secret"))
	for _, k := range []string{before, after} {
		_, queued := rowSearch(t, d, k)
		require.False(t, queued, k)
	}
	require.Equal(t, 3, requireSearchIndexConsistent(t, d).ftsDocs)
}

func TestSearchIndexEdits(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), noIndexer)
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	// An indexed bystander: with it, a delete of a docid that is not in the
	// index would show in the counts (FTS4 resets an index whose content
	// table is about to be empty).
	appendMsg(t, d, msgEvent(g, "0", "u0", "B", "bystander", t0))
	ev := msgEvent(g, "1", "u1", "A", "明天去杭州", t0)
	key := appendMsg(t, d, ev)
	require.Equal(t, []string{key}, searchKeys(t, d, session, "杭州"))

	// Re-appending the same message changes nothing in the index.
	appendMsg(t, d, ev)
	_, queued := rowSearch(t, d, key)
	require.False(t, queued)
	require.Equal(t, 2, requireSearchIndexConsistent(t, d).ftsDocs)

	// An edit takes the old terms out of the index at once and queues the
	// row with its new tokens.
	ev.Segments[0].Text = "明天去苏州"
	appendMsg(t, d, ev)
	_, queued = rowSearch(t, d, key)
	require.True(t, queued)
	require.Equal(t, searchState{queued: 1, tokened: 2, ftsDocs: 1, statDocs: 1}, requireSearchIndexConsistent(t, d))
	require.Empty(t, searchKeys(t, d, session, "杭州"))
	require.Equal(t, []string{key}, searchKeys(t, d, session, "苏州"))

	// Two edits before any indexing: only the last text is indexed.
	ev.Segments[0].Text = "周末去成都"
	appendMsg(t, d, ev)
	ev.Segments[0].Text = "周末去深圳"
	appendMsg(t, d, ev)
	require.Equal(t, 1, requireSearchIndexConsistent(t, d).queued)
	require.Empty(t, searchKeys(t, d, session, "成都"))
	require.Empty(t, searchKeys(t, d, session, "苏州"))
	require.Equal(t, []string{key}, searchKeys(t, d, session, "深圳"))

	// A sender name change re-indexes too.
	ev.Sender.Name = "Zelda"
	appendMsg(t, d, ev)
	require.Equal(t, []string{key}, searchKeys(t, d, session, "zelda"))

	// Moving an indexed row to another session moves it to that partition.
	other := channel.SessionKey("", "onebot", "bot", channel.Chat{Kind: channel.Group, ID: "g2"})
	require.NoError(t, d.Append(t.Context(), memory.Entry{Key: key, SessionKey: other, Event: ev}))
	requireSearchIndexConsistent(t, d)
	require.Empty(t, searchKeys(t, d, session, "深圳"))
	require.Equal(t, []string{key}, searchKeys(t, d, other, "深圳"))

	// A queued row's queue entry follows it to its new partition.
	third := channel.SessionKey("", "onebot", "bot", channel.Chat{Kind: channel.Group, ID: "g3"})
	ev.Segments[0].Text = "下周去重庆"
	appendMsg(t, d, ev)
	require.NoError(t, d.Append(t.Context(), memory.Entry{Key: key, SessionKey: third, Event: ev}))
	require.Equal(t, 1, requireSearchIndexConsistent(t, d).queued)
	require.Empty(t, searchKeys(t, d, other, "重庆"))
	require.Equal(t, 1, readSearchState(t, d).queued, "a search elsewhere leaves it queued")
	require.Equal(t, []string{key}, searchKeys(t, d, third, "重庆"))
	require.Equal(t, searchState{tokened: 2, ftsDocs: 2, statDocs: 2}, requireSearchIndexConsistent(t, d))
}

func TestSearchIndexRowDeletes(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), noIndexer)
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	indexed := appendMsg(t, d, msgEvent(g, "1", "u1", "A", "indexed row", t0))
	require.Equal(t, []string{indexed}, searchKeys(t, d, session, "indexed"))
	queued := appendMsg(t, d, msgEvent(g, "2", "u1", "A", "queued row", t0))
	require.Equal(t, searchState{queued: 1, tokened: 2, ftsDocs: 1, statDocs: 1}, requireSearchIndexConsistent(t, d))

	// The store never deletes history, but the triggers handle it: a queued
	// row leaves the queue, an indexed row the index.
	for _, k := range []string{queued, indexed} {
		require.NoError(t, d.write(t.Context(), func(tx wtx) error {
			_, err := tx.exec(`DELETE FROM message_events WHERE id = ?`, k)
			return err
		}))
		requireSearchIndexConsistent(t, d)
	}
	require.Equal(t, searchState{}, readSearchState(t, d))
}

func TestSearchIndexNotices(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), noIndexer)
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	appendMsg(t, d, msgEvent(g, "0", "u0", "B", "bystander", t0))
	require.Len(t, searchKeys(t, d, session, "bystander"), 1)
	notice := msgEvent(g, "n1", "u1", "Noticer", "", t0)
	notice.Kind = channel.KindNotice
	notice.Notice = &channel.Notice{Type: channel.NoticeGroupRecall, TargetMessageID: "5"}
	_, err := d.Record(t.Context(), inboundItem(notice), inbound.Outcome{Code: outcome.Notice("group_recall")})
	require.NoError(t, err)
	// A notice entry with text is not indexed either.
	ev := msgEvent(g, "2", "u2", "B", "notice words", t0.Add(time.Second))
	require.NoError(t, d.Append(t.Context(), memory.Entry{Event: ev, Direction: memory.Notice}))
	// Nor is a message without text or sender name.
	empty := msgEvent(g, "3", "u3", "", "", t0.Add(2*time.Second))
	appendMsg(t, d, empty)
	for _, k := range []string{notice.Key(), ev.Key(), empty.Key()} {
		tokens, queued := rowSearch(t, d, k)
		require.Empty(t, tokens, k)
		require.False(t, queued, k)
	}
	require.Empty(t, searchKeys(t, d, session, "noticer"))
	require.Empty(t, searchKeys(t, d, session, "notice words"))
	require.Equal(t, searchState{tokened: 1, ftsDocs: 1, statDocs: 1}, requireSearchIndexConsistent(t, d))

	// The same key as a message is indexed; back to a notice, it leaves the
	// index.
	require.NoError(t, d.Append(t.Context(), memory.Entry{Event: ev, Direction: memory.In}))
	require.Equal(t, []string{ev.Key()}, searchKeys(t, d, session, "notice words"))
	require.NoError(t, d.Append(t.Context(), memory.Entry{Event: ev, Direction: memory.Notice}))
	tokens, queued := rowSearch(t, d, ev.Key())
	require.Empty(t, tokens)
	require.False(t, queued)
	require.Equal(t, searchState{tokened: 1, ftsDocs: 1, statDocs: 1}, requireSearchIndexConsistent(t, d))
	// And back to a message before it was indexed: out of the queue again.
	require.NoError(t, d.Append(t.Context(), memory.Entry{Event: ev, Direction: memory.In}))
	require.NoError(t, d.Append(t.Context(), memory.Entry{Event: ev, Direction: memory.Notice}))
	require.Equal(t, searchState{tokened: 1, ftsDocs: 1, statDocs: 1}, requireSearchIndexConsistent(t, d))
}

func TestSearchIndexBackground(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	for i := range 3 {
		appendMsg(t, d, msgEvent(g, fmt.Sprint(i), "u1", "A", fmt.Sprintf("background %d", i), t0))
	}
	// No search runs: the background indexer alone empties the backlog.
	require.Eventually(t, func() bool { return readSearchState(t, d).queued == 0 }, 20*time.Second, 5*time.Millisecond)
	var docs int
	require.NoError(t, d.rdb.QueryRowContext(t.Context(),
		`SELECT count(*) FROM message_search WHERE message_search MATCH 'background' AND search_sid = ?`,
		searchSID(channel.SessionKey("", "onebot", "bot", g))).Scan(&docs))
	require.Equal(t, 3, docs)
	require.Equal(t, 3, requireSearchIndexConsistent(t, d).tokened)
}

func TestSearchIndexBacklogAcrossBatches(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), noIndexer)
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	// More than a batch but less than the catch-up bound.
	n := searchIndexBatch + 10
	writeRows(t, d, g, n, 0)
	hits, err := d.SearchHistory(t.Context(), memory.HistoryQuery{Sessions: []string{session},
		Tokens: []string{"backlog"}, Limit: 1})
	require.NoError(t, err)
	require.Len(t, hits, 1)
	require.Equal(t, searchState{tokened: n, ftsDocs: n, statDocs: n}, requireSearchIndexConsistent(t, d))

	// A backlog beyond the bound a running background indexer would leave
	// to itself: with no indexer running, the search indexes all of it.
	big := searchCatchUpBatches*searchIndexBatch + 100
	writeRows(t, d, g, big, n)
	_, err = d.SearchHistory(t.Context(), memory.HistoryQuery{Sessions: []string{session}, Tokens: []string{"backlog"}})
	require.NoError(t, err)
	require.Zero(t, requireSearchIndexConsistent(t, d).queued)
}

// writeRows upserts n messages "backlog i" in one write operation.
func writeRows(t testing.TB, d *DB, g channel.Chat, n, from int) {
	t.Helper()
	rows := make([]eventRow, n)
	for i := range rows {
		ev := msgEvent(g, fmt.Sprint(from+i), "u1", "A", fmt.Sprintf("backlog message %d", from+i), t0.Add(time.Duration(from+i)*time.Millisecond))
		var err error
		rows[i], err = newEventRow(ev.Key(), ev.SessionKey, &ev, memory.In, time.Time{}, ms(t0))
		require.NoError(t, err)
	}
	require.NoError(t, d.write(context.Background(), func(tx wtx) error {
		for i := range rows {
			if err := upsertEvent(tx, &rows[i], ms(t0)); err != nil {
				return err
			}
		}
		return nil
	}))
	d.kickSearchIndex()
}

func TestRebuildSearchIndexWithQueuedRows(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), noIndexer)
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	k1 := appendMsg(t, d, msgEvent(g, "1", "u1", "A", "indexed before", t0))
	require.Equal(t, []string{k1}, searchKeys(t, d, session, "indexed"))
	k2 := appendMsg(t, d, msgEvent(g, "2", "u1", "A", "still queued", t0.Add(time.Second)))
	notice := msgEvent(g, "3", "u1", "A", "a notice", t0.Add(2*time.Second))
	require.NoError(t, d.Append(t.Context(), memory.Entry{Event: notice, Direction: memory.Notice}))
	require.Equal(t, 1, readSearchState(t, d).queued)

	n, err := d.RebuildSearchIndex(t.Context())
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, searchState{tokened: 2, ftsDocs: 2, statDocs: 2}, requireSearchIndexConsistent(t, d))
	require.Equal(t, []string{k1}, searchKeys(t, d, session, "indexed"))
	require.Equal(t, []string{k2}, searchKeys(t, d, session, "queued"))
	require.Empty(t, searchKeys(t, d, session, "notice"))

	// Rows queued after a rebuild are indexed as usual.
	k4 := appendMsg(t, d, msgEvent(g, "4", "u1", "A", "after the rebuild", t0.Add(3*time.Second)))
	require.Equal(t, []string{k4}, searchKeys(t, d, session, "rebuild"))
	requireSearchIndexConsistent(t, d)
}

// createVersion2 writes a database at schema version 2 with the given
// history rows, indexed as version 2 did (every row, through its insert
// trigger).
func createVersion2(t *testing.T, path string, rows []eventRow) {
	t.Helper()
	raw := openAtVersion(t, path, 2)
	defer func() { require.NoError(t, raw.Close()) }()
	for _, r := range rows {
		_, err := raw.Exec(`INSERT INTO message_events (id, session_key, platform, bot_id, chat_kind, chat_id,
    message_id, seq, sender_id, sender_name, event_time, text, payload, direction, created_at, search_tokens, search_sid)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?11, ?15, ?16)`,
			r.id, r.session, r.platform, r.botID, r.chatKind, r.chatID, r.messageID, r.seq, r.senderID,
			r.senderName, r.eventTime, r.text, r.payload, string(r.direction),
			rowTokens(r.text, r.senderName, string(r.direction)), r.searchSID)
		require.NoError(t, err)
	}
}

func TestSearchIndexMigrationFromVersion2(t *testing.T) {
	t.Parallel()
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	session := channel.SessionKey("", "onebot", "bot", g)
	evs := []channel.Event{
		msgEvent(g, "1", "u1", "Ann", "我下周要去北京出差", t0),
		msgEvent(g, "2", "u2", "Bob", "favourite database is sqlite", t0.Add(time.Second)),
		msgEvent(g, "3", "u3", "", "", t0.Add(2*time.Second)), // nothing to index
	}
	notice := msgEvent(g, "4", "u1", "Ann", "", t0.Add(3*time.Second))
	notice.Kind = channel.KindNotice
	var rows []eventRow
	for _, ev := range evs {
		r, err := newEventRow(ev.Key(), ev.SessionKey, &ev, memory.In, time.Time{}, ms(t0))
		require.NoError(t, err)
		rows = append(rows, r)
	}
	r, err := newEventRow(notice.Key(), notice.SessionKey, &notice, memory.Notice, time.Time{}, ms(t0))
	require.NoError(t, err)
	rows = append(rows, r)

	path := filepath.Join(t.TempDir(), "v2.db")
	createVersion2(t, path, rows)
	d, err := Open(path, Options{Clock: clock.NewFake(t0), NoSearchIndexer: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })

	// The indexed rows stay indexed, nothing is queued (no re-indexing),
	// and the rows without tokens left the index.
	require.Equal(t, searchState{tokened: 2, ftsDocs: 2, statDocs: 2}, requireSearchIndexConsistent(t, d))
	require.Equal(t, []string{evs[0].Key()}, searchKeys(t, d, session, "北京"))
	require.Equal(t, []string{evs[1].Key()}, searchKeys(t, d, session, "sqlite"))
	require.Equal(t, searchState{tokened: 2, ftsDocs: 2, statDocs: 2}, requireSearchIndexConsistent(t, d))

	// An old row edited after the migration is re-indexed once.
	evs[1].Segments[0].Text = "favourite database is postgres"
	appendMsg(t, d, evs[1])
	require.Empty(t, searchKeys(t, d, session, "sqlite"))
	require.Equal(t, []string{evs[1].Key()}, searchKeys(t, d, session, "postgres"))
	// The empty message gets text: it enters the index once.
	evs[2].Segments[0].Text = "now with text"
	appendMsg(t, d, evs[2])
	require.Equal(t, []string{evs[2].Key()}, searchKeys(t, d, session, "text"))
	require.Equal(t, searchState{tokened: 3, ftsDocs: 3, statDocs: 3}, requireSearchIndexConsistent(t, d))
}

func TestSearchIndexCloseWhileIndexing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.db")
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	d, err := Open(path, Options{Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	writeRows(t, d, g, 3*searchIndexBatch, 0)
	// Writers keep appending while the store closes under them.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				ev := msgEvent(g, fmt.Sprintf("w%d-%d", w, i), "u1", "A", "written while closing", t0)
				if err := d.Append(context.Background(), memory.Entry{Event: ev}); err != nil {
					return // ErrClosed
				}
			}
		})
	}
	// Close once the indexer is at work.
	require.Eventually(t, func() bool { return readSearchState(t, d).ftsDocs > 0 },
		20*time.Second, time.Millisecond)
	require.NoError(t, d.Close())
	wg.Wait()
	require.NoError(t, d.Close())

	// Whatever was left queued is indexed after a reopen.
	d, err = Open(path, Options{Clock: clock.NewFake(t0), NoSearchIndexer: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	for readSearchState(t, d).queued > 0 {
		_, err := d.indexPending(t.Context(), nil, searchIndexBatch)
		require.NoError(t, err)
	}
	s := requireSearchIndexConsistent(t, d)
	var total int
	require.NoError(t, d.rdb.QueryRowContext(t.Context(), `SELECT count(*) FROM message_events`).Scan(&total))
	require.Equal(t, total, s.tokened)
}
