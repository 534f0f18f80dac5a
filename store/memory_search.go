package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/memory"
)

// Full-text search (see migrations/0002_memory.sql and
// 0004_search_async.sql). The store writes the Go-tokenized text
// (memory.IndexText) of every history row and fact into its search_tokens
// column, computed before the write is submitted; triggers keep the FTS4
// tables in step. Facts are indexed when they are written. History rows are
// queued instead, and the search indexer (search_index.go) indexes them in
// batches, so the history index lags the transcript by at most one indexer
// pass; SearchHistory first indexes what is still queued for its sessions.

// searchTokens is the indexed form of a history row: the message text and
// the sender's name. Notices are not indexed.
func searchTokens(ev *channel.Event, dir memory.Direction) string {
	return rowTokens(ev.TextAndSpeech(), ev.Sender.Name, string(dir))
}

// rowTokens is searchTokens from the message_events columns.
func rowTokens(text, senderName, dir string) string {
	if dir == string(memory.Notice) {
		return ""
	}
	return memory.IndexText(text, senderName)
}

// searchSID is the FTS4 language id (index partition) of a session: 31 bits
// of its FNV-1a hash.
func searchSID(session string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(session))
	return int64(h.Sum32() & 0x7fffffff)
}

// bm25K1 is the BM25 term-frequency saturation.
const bm25K1 = 1.2

// bm25 scores one row from its FTS4 matchinfo(…, 'pcnx') blob for a table
// with one column: Σ idf·tf·(k1+1)/(tf + k1) over the query phrases, idf =
// ln(1 + (N−df+0.5)/(df+0.5)). It is BM25 without document-length
// normalisation (b = 0): chat messages are short, and the per-row length
// lookup ('l') would double the cost of a search.
func bm25(mi []byte) float64 {
	u := func(i int) float64 {
		if 4*i+4 > len(mi) {
			return 0
		}
		return float64(binary.NativeEndian.Uint32(mi[4*i:]))
	}
	p := int(u(0))
	// c = u(1) = 1; n = u(2); x (3 values per phrase) from 3.
	n := u(2)
	var score float64
	for i := range p {
		tf, df := u(3+3*i), u(3+3*i+2)
		if tf == 0 {
			continue
		}
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		score += idf * tf * (bm25K1 + 1) / (tf + bm25K1)
	}
	return score
}

// maxSearchSessions bounds the sessions one history search visits.
const maxSearchSessions = 64

// History search runs in two phases. The first reads only the FTS4 index
// partition of the session (no table lookups) and scores every match; the
// second loads the best few rows and applies the row filters.
const (
	sqlSearchIndex = `
SELECT docid, matchinfo(message_search, 'pcnx') FROM message_search
WHERE message_search MATCH ?1 AND message_search.search_sid = ?2 AND docid >= ?3`
	// sqlSearchFloor finds the rowid below which a session's history is
	// older than its newest searchWindow messages. The session's rows in
	// the timeline's tail (see timeline.go) count as its newest: the floor
	// is found among them when they are more than the window, else counted
	// off the timeline past them. (The tail's rows are the newest but for
	// older messages stored late, by a backfill: those can move the
	// window's edge by at most their number.)
	sqlSearchFloor = `
SELECT floor FROM (SELECT coalesce(
    (SELECT rowid FROM message_events WHERE ` + sqlTailFrom + ` AND session_key = ?1
        ORDER BY event_time DESC, rowid DESC LIMIT 1 OFFSET ?2),
    (SELECT rid FROM message_timeline WHERE session_key = ?1 ORDER BY event_time DESC, rid DESC LIMIT 1
        OFFSET max(0, ?2 - (SELECT count(*) FROM message_events WHERE ` + sqlTailFrom + ` AND session_key = ?1)))
) AS floor) WHERE floor IS NOT NULL`
	sqlSearchRows = `
SELECT m.rowid, m.id, m.platform, m.sender_id, m.sender_name, m.direction, m.event_time, m.text
FROM json_each(?1) j CROSS JOIN message_events m ON m.rowid = j.value
WHERE m.session_key = ?2 AND m.recalled_at IS NULL AND m.direction <> 'notice'
    AND m.event_time < ?3 AND m.event_time > ?4 AND (?5 = '' OR m.sender_id = ?5)
    AND NOT EXISTS (SELECT 1 FROM memory_hidden_senders h WHERE h.platform = m.platform AND h.user_id = m.sender_id)`
)

// searchWindow bounds history search to the newest messages of a session
// (a structured time filter): the cost of a search grows with the matches
// it scores, and a very busy chat's old history matters least.
const searchWindow = 20000

// searchOversample is how many index matches per wanted hit the second
// phase loads, to make up for rows the filters drop.
const searchOversample = 4

// SearchHistory implements memory.HistorySearch: in each session's index
// partition (at most 64 sessions), among the session's newest 20,000
// messages (searchWindow), it scores every match with BM25 (newer
// first among equal scores), loads the best 4×q.Limit rows (default limit
// 50), drops recalled, notice, out-of-range and hidden-sender rows and
// returns the best q.Limit, best first, then newest first.
//
// It first indexes the history rows still queued for those sessions
// (catchUpSearchIndex), so it finds every message written before it was
// called; only a backlog of more than 4,096 rows (searchCatchUpBatches ×
// searchIndexBatch) is left partly to the background indexer.
func (d *DB) SearchHistory(ctx context.Context, q memory.HistoryQuery) ([]memory.HistoryHit, error) {
	expr := memory.MatchExpr(q.Tokens)
	if expr == "" || len(q.Sessions) == 0 {
		return nil, nil
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	before, after := int64(math.MaxInt64), int64(math.MinInt64)
	if !q.Before.IsZero() {
		before = ms(q.Before)
	}
	if !q.After.IsZero() {
		after = ms(q.After)
	}
	sessions := slices.Compact(slices.Sorted(slices.Values(q.Sessions)))
	if len(sessions) > maxSearchSessions {
		sessions = sessions[:maxSearchSessions]
	}
	if err := d.catchUpSearchIndex(ctx, sessions); err != nil {
		return nil, fmt.Errorf("store: search history: %w", err)
	}
	var hits []memory.HistoryHit
	for _, s := range sessions {
		h, err := d.searchSession(ctx, s, expr, limit, before, after, q.SenderID)
		if err != nil {
			return nil, fmt.Errorf("store: search history: %w", err)
		}
		hits = append(hits, h...)
	}
	slices.SortFunc(hits, func(a, b memory.HistoryHit) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), b.Time.Compare(a.Time), strings.Compare(a.Key, b.Key))
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits, nil
}

type scoredDoc struct {
	docid int64
	score float64
}

func (d *DB) searchSession(ctx context.Context, s, expr string, limit int, before, after int64, sender string) ([]memory.HistoryHit, error) {
	var floor int64
	err := d.rdb.QueryRowContext(ctx, sqlSearchFloor, s, searchWindow).Scan(&floor)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	rows, err := d.rdb.QueryContext(ctx, sqlSearchIndex, expr, searchSID(s), floor)
	if err != nil {
		return nil, err
	}
	var docs []scoredDoc
	for rows.Next() {
		var (
			doc scoredDoc
			mi  sql.RawBytes
		)
		if err := rows.Scan(&doc.docid, &mi); err != nil {
			_ = rows.Close()
			return nil, err
		}
		doc.score = bm25(mi)
		docs = append(docs, doc)
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(docs) == 0 {
		return nil, nil
	}
	slices.SortFunc(docs, func(a, b scoredDoc) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(b.docid, a.docid))
	})
	docs = docs[:min(len(docs), searchOversample*limit)]
	score := make(map[int64]float64, len(docs))
	ids := make([]int64, len(docs))
	for i, doc := range docs {
		ids[i] = doc.docid
		score[doc.docid] = doc.score
	}
	idj, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rs, err := d.rdb.QueryContext(ctx, sqlSearchRows, string(idj), s, before, after, sender)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rs.Close() }()
	var hits []memory.HistoryHit
	for rs.Next() {
		var (
			h     memory.HistoryHit
			rowid int64
			dir   string
			et    int64
		)
		if err := rs.Scan(&rowid, &h.Key, &h.Platform, &h.SenderID, &h.SenderName, &dir, &et, &h.Text); err != nil {
			return nil, err
		}
		h.SessionKey, h.Direction, h.Time, h.Score = s, memory.Direction(dir), fromMs(et), score[rowid]
		hits = append(hits, h)
	}
	return hits, rs.Err()
}

const messageCols = `id, session_key, platform, sender_id, sender_name, direction, event_time, text, recalled_at IS NOT NULL`

func scanMessage(sc interface{ Scan(...any) error }) (memory.Message, error) {
	var (
		m   memory.Message
		dir string
		et  int64
	)
	err := sc.Scan(&m.Key, &m.SessionKey, &m.Platform, &m.SenderID, &m.SenderName, &dir, &et, &m.Text, &m.Recalled)
	m.Direction, m.Time = memory.Direction(dir), fromMs(et)
	return m, err
}

// queryMessages runs a message_events query selecting messageCols.
func (d *DB) queryMessages(ctx context.Context, q string, args ...any) ([]memory.Message, error) {
	rows, err := d.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []memory.Message
	for rows.Next() {
		m, err := scanMessage(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// Message implements memory.HistorySearch.
func (d *DB) Message(ctx context.Context, key string) (memory.Message, error) {
	m, err := scanMessage(d.rdb.QueryRowContext(ctx, `SELECT `+messageCols+` FROM message_events WHERE id = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return m, fmt.Errorf("store: message %s: %w", key, memory.ErrNotFound)
	}
	if err != nil {
		return m, fmt.Errorf("store: message %s: %w", key, err)
	}
	return m, nil
}

// The session history reads of the summary store. Each reads the session's
// timeline in order (see timeline.go) and sorts the session's rows in the
// timeline's tail in with it, in one statement.
const (
	// sqlMessagesBefore: the newest ?4 shown rows before (?2, ?3).
	sqlMessagesBefore = `SELECT ` + messageCols + ` FROM (
    SELECT * FROM (SELECT m.* FROM message_timeline t CROSS JOIN message_events m ON m.rowid = t.rid
        WHERE t.session_key = ?1 AND t.event_time <= ?2 AND m.direction <> 'notice' AND m.recalled_at IS NULL
            AND (t.event_time < ?2 OR (t.event_time = ?2 AND m.id < ?3))
        ORDER BY t.event_time DESC, m.id DESC LIMIT ?4)
    UNION ALL
    SELECT * FROM message_events WHERE ` + sqlTailFrom + ` AND session_key = ?1
        AND direction <> 'notice' AND recalled_at IS NULL AND (event_time < ?2 OR (event_time = ?2 AND id < ?3)))
ORDER BY event_time DESC, id DESC LIMIT ?4`
	// sqlMessagesAfter: the oldest ?4 rows after (?2, ?3), notices left out.
	sqlMessagesAfter = `SELECT ` + messageCols + ` FROM (
    SELECT * FROM (SELECT m.* FROM message_timeline t CROSS JOIN message_events m ON m.rowid = t.rid
        WHERE t.session_key = ?1 AND t.event_time >= ?2 AND m.direction <> 'notice'
            AND (t.event_time > ?2 OR (t.event_time = ?2 AND m.id > ?3))
        ORDER BY t.event_time, m.id LIMIT ?4)
    UNION ALL
    SELECT * FROM message_events WHERE ` + sqlTailFrom + ` AND session_key = ?1
        AND direction <> 'notice' AND (event_time > ?2 OR (event_time = ?2 AND id > ?3)))
ORDER BY event_time, id LIMIT ?4`
	// sqlCountAfter counts the rows after (?2, ?3), notices left out.
	sqlCountAfter = `SELECT
    (SELECT count(*) FROM message_timeline t CROSS JOIN message_events m ON m.rowid = t.rid
        WHERE t.session_key = ?1 AND t.event_time >= ?2 AND m.direction <> 'notice'
            AND (t.event_time > ?2 OR m.id > ?3))
    + (SELECT count(*) FROM message_events WHERE ` + sqlTailFrom + ` AND session_key = ?1
        AND direction <> 'notice' AND (event_time > ?2 OR (event_time = ?2 AND id > ?3)))`
)

// MessagesBefore implements memory.HistorySearch: chat messages (no
// notices, no recalled messages) of the session before the watermark in
// (event time, key) order, the newest limit of them, oldest first.
func (d *DB) MessagesBefore(ctx context.Context, sessionKey string, before memory.Watermark, limit int) ([]memory.Message, error) {
	if limit <= 0 {
		return nil, nil
	}
	t := ms(before.Time)
	out, err := d.queryMessages(ctx, sqlMessagesBefore, sessionKey, t, before.Key, limit)
	if err != nil {
		return nil, fmt.Errorf("store: messages before: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}

// MessagesAfter implements memory.SummaryStore.
func (d *DB) MessagesAfter(ctx context.Context, sessionKey string, after memory.Watermark, limit int) ([]memory.Message, error) {
	if limit <= 0 {
		return nil, nil
	}
	t := int64(math.MinInt64)
	if !after.IsZero() {
		t = ms(after.Time)
	}
	out, err := d.queryMessages(ctx, sqlMessagesAfter, sessionKey, t, after.Key, limit)
	if err != nil {
		return nil, fmt.Errorf("store: messages after: %w", err)
	}
	return out, nil
}

// CountAfter implements memory.SummaryStore.
func (d *DB) CountAfter(ctx context.Context, sessionKey string, after memory.Watermark) (int, error) {
	t := int64(math.MinInt64)
	if !after.IsZero() {
		t = ms(after.Time)
	}
	var n int
	err := d.rdb.QueryRowContext(ctx, sqlCountAfter, sessionKey, t, after.Key).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: count after: %w", err)
	}
	return n, nil
}

// rebuildBatch is the number of rows RebuildSearchIndex tokenizes per
// transaction.
const rebuildBatch = 2000

// RebuildSearchIndex recomputes the search tokens of every history row and
// fact in batches and then rebuilds both FTS4 indexes from them. Run it
// after a VACUUM (which may renumber the history rowids the index points
// at) or to index rows written before migration 0002. Queued history rows
// are indexed on the way. It returns the number of history rows visited.
func (d *DB) RebuildSearchIndex(ctx context.Context) (int, error) {
	var (
		last  = ""
		total = 0
	)
	for {
		type row struct {
			id, session, text, name, dir string
		}
		rows, err := d.rdb.QueryContext(ctx, `SELECT id, session_key, text, sender_name, direction
FROM message_events WHERE id > ? ORDER BY id LIMIT ?`, last, rebuildBatch)
		if err != nil {
			return total, fmt.Errorf("store: rebuild search index: %w", err)
		}
		var batch []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.session, &r.text, &r.name, &r.dir); err != nil {
				_ = rows.Close()
				return total, fmt.Errorf("store: rebuild search index: %w", err)
			}
			batch = append(batch, r)
		}
		_ = rows.Close()
		if err := rows.Err(); err != nil {
			return total, fmt.Errorf("store: rebuild search index: %w", err)
		}
		if len(batch) == 0 {
			break
		}
		err = d.write(ctx, func(tx wtx) error {
			for _, r := range batch {
				if _, err := tx.exec(`UPDATE message_events SET search_tokens = ?2, search_sid = ?3 WHERE id = ?1`,
					r.id, rowTokens(r.text, r.name, r.dir), searchSID(r.session)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("store: rebuild search index: %w", err)
		}
		total += len(batch)
		last = batch[len(batch)-1].id
	}
	err := d.write(ctx, func(tx wtx) error {
		if _, err := tx.exec(`UPDATE memory_items SET search_tokens = '' WHERE status = 'forgotten'`); err != nil {
			return err
		}
		// 'rebuild' indexes every row of message_events, queued or not, and
		// also the rows without tokens (notices), which must not be in the
		// index (see migrations/0004_search_async.sql): they have no terms,
		// only their document entries go. Nothing is left queued.
		for _, q := range []string{
			`INSERT INTO message_search (message_search) VALUES ('rebuild')`,
			`DELETE FROM message_search WHERE docid IN (SELECT rowid FROM message_events WHERE search_tokens = '')`,
			`DELETE FROM message_search_queue`,
			`INSERT INTO memory_item_search (memory_item_search) VALUES ('rebuild')`,
		} {
			if _, err := tx.exec(q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return total, fmt.Errorf("store: rebuild search index: %w", err)
	}
	return total, nil
}
