package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/memory"
)

// Full-text search over the transcript. PostgreSQL's own text search does
// not split Chinese (or Japanese, Korean) into words, so the store does
// not let it tokenize: every writer stores the row's tokens, computed in
// Go by the module's tokenizer (searchTokens), space-joined in
// search_tokens, and migrations/0004_search.sql indexes them as an array
// (string_to_array(search_tokens, ' ')) with GIN. A query's tokens match
// array elements exactly, so what was indexed is what is found, whatever
// the database's locale. Rows are scored with BM25 in SQL.

var _ memory.HistorySearch = (*DB)(nil)

// searchWindow bounds a history search to the newest messages of each
// session: a very busy chat's old history matters least, and the window
// keeps the cost of scoring every match bounded.
const searchWindow = 20000

// maxSearchSessions bounds the sessions one history search visits.
const maxSearchSessions = 64

// maxSearchTokens bounds the distinct tokens of one search.
const maxSearchTokens = 32

// bm25K1 is the BM25 term-frequency saturation.
const bm25K1 = 1.2

// sqlSearchHistory scores the matches of the query tokens ($2) in each
// session ($1) with BM25 without length normalisation (chat messages are
// short): Σ idf·tf·(k1+1)/(tf+k1) over the tokens a row contains, with
// idf = ln(1 + (N−df+0.5)/(df+0.5)), where N is the number of rows in the
// session's window and df the number of them containing the token. The
// window is the session's newest $3 rows. It then drops recalled rows,
// notices, rows outside the time bounds ($4, $5 exclusive), other senders
// ($6 unless it is empty) and the rows of hidden senders, and returns the
// best $7, best first, then newest first, then by key.
const sqlSearchHistory = `
WITH sess AS (
    SELECT DISTINCT unnest($1::text[]) AS session_key),
win AS (
    SELECT s.session_key,
        coalesce((SELECT e.event_time FROM message_events e WHERE e.session_key = s.session_key
            ORDER BY e.event_time DESC, e.seq DESC OFFSET $3 - 1 LIMIT 1), -9223372036854775808) AS floor,
        (SELECT count(*) FROM (SELECT 1 FROM message_events e WHERE e.session_key = s.session_key LIMIT $3) w) AS n
    FROM sess s),
cand AS (
    SELECT e.id, e.session_key, string_to_array(e.search_tokens, ' ') AS terms
    FROM win JOIN message_events e ON e.session_key = win.session_key AND e.event_time >= win.floor
    WHERE string_to_array(e.search_tokens, ' ') && $2::text[]),
tf AS (
    SELECT c.id, c.session_key, q.tok, cardinality(array_positions(c.terms, q.tok)) AS tf
    FROM cand c CROSS JOIN unnest($2::text[]) AS q(tok)
    WHERE q.tok = ANY (c.terms)),
df AS (
    SELECT session_key, tok, count(*) AS df FROM tf GROUP BY session_key, tok),
scored AS (
    SELECT tf.id, sum(
        ln(1 + (greatest(win.n, df.df)::float8 - df.df + 0.5) / (df.df + 0.5))
        * tf.tf * ($8::float8 + 1) / (tf.tf + $8::float8)) AS score
    FROM tf JOIN df USING (session_key, tok) JOIN win USING (session_key)
    GROUP BY tf.id)
SELECT m.id, m.session_key, m.platform, m.sender_id, m.sender_name, m.direction, m.event_time, m.text, s.score
FROM scored s JOIN message_events m ON m.id = s.id
WHERE m.recalled_at IS NULL AND m.direction <> 'notice'
    AND m.event_time < $4 AND m.event_time > $5 AND ($6 = '' OR m.sender_id = $6)
    AND NOT EXISTS (SELECT 1 FROM memory_hidden_senders h WHERE h.platform = m.platform AND h.user_id = m.sender_id)
ORDER BY s.score DESC, m.event_time DESC, m.id COLLATE "C"
LIMIT $7`

// SearchHistory implements memory.HistorySearch: among the newest 20,000
// messages of each session (at most 64 sessions), it scores every message
// containing any of the query tokens with BM25 (see sqlSearchHistory),
// drops recalled messages, notices, messages outside the time bounds or
// from other senders and those of users hidden by ForgetUser, and returns
// the best q.Limit (default 50), best first, then newest first. Query
// tokens are matched exactly as given (memory.QueryTokens makes them).
func (d *DB) SearchHistory(ctx context.Context, q memory.HistoryQuery) ([]memory.HistoryHit, error) {
	tokens := searchQueryTokens(q.Tokens)
	if len(tokens) == 0 || len(q.Sessions) == 0 {
		return nil, nil
	}
	if err := d.historyClosed(); err != nil {
		return nil, err
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
	rows, err := d.pool.Query(ctx, sqlSearchHistory, sessions, tokens, searchWindow, before, after, q.SenderID,
		limit, bm25K1)
	if err != nil {
		return nil, fmt.Errorf("postgres: search history: %w", err)
	}
	defer rows.Close()
	var hits []memory.HistoryHit
	for rows.Next() {
		var (
			h   memory.HistoryHit
			dir string
			et  int64
		)
		if err := rows.Scan(&h.Key, &h.SessionKey, &h.Platform, &h.SenderID, &h.SenderName, &dir, &et, &h.Text,
			&h.Score); err != nil {
			return nil, fmt.Errorf("postgres: search history: %w", err)
		}
		h.Direction, h.Time = memory.Direction(dir), fromMs(et)
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: search history: %w", err)
	}
	return hits, nil
}

// searchQueryTokens returns the distinct non-empty query tokens, in order,
// at most maxSearchTokens.
func searchQueryTokens(in []string) []string {
	out := make([]string, 0, len(in))
	for _, t := range in {
		if t == "" || slices.Contains(out, t) {
			continue
		}
		out = append(out, pgText(t))
		if len(out) == maxSearchTokens {
			break
		}
	}
	return out
}

// historyMessageCols are the message_events columns scanHistoryMessage
// reads.
const historyMessageCols = `id, session_key, platform, sender_id, sender_name, direction, event_time, text,
    recalled_at IS NOT NULL`

// scanHistoryMessage reads a row of historyMessageCols.
func scanHistoryMessage(row pgx.Row) (memory.Message, error) {
	var (
		m   memory.Message
		dir string
		et  int64
	)
	err := row.Scan(&m.Key, &m.SessionKey, &m.Platform, &m.SenderID, &m.SenderName, &dir, &et, &m.Text, &m.Recalled)
	m.Direction, m.Time = memory.Direction(dir), fromMs(et)
	return m, err
}

// queryHistoryMessages runs a query selecting historyMessageCols.
func (d *DB) queryHistoryMessages(ctx context.Context, sql string, args ...any) ([]memory.Message, error) {
	if err := d.historyClosed(); err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []memory.Message
	for rows.Next() {
		m, err := scanHistoryMessage(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// Message implements memory.HistorySearch: the transcript row with this
// key, whatever its direction, recalled or not (memory.ErrNotFound if
// there is none).
func (d *DB) Message(ctx context.Context, key string) (memory.Message, error) {
	if err := d.historyClosed(); err != nil {
		return memory.Message{}, err
	}
	m, err := scanHistoryMessage(d.pool.QueryRow(ctx, `SELECT `+historyMessageCols+` FROM message_events WHERE id = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return memory.Message{}, fmt.Errorf("postgres: message %s: %w", key, memory.ErrNotFound)
	}
	if err != nil {
		return memory.Message{}, fmt.Errorf("postgres: message %s: %w", key, err)
	}
	return m, nil
}

// sqlMessagesBefore reads the newest $4 chat messages of session $1 that
// are not recalled, strictly before the watermark ($2, $3) in (event
// time, key) order. Keys compare byte-wise (COLLATE "C"), as Go compares
// memory.Watermark keys.
const sqlMessagesBefore = `SELECT ` + historyMessageCols + ` FROM message_events
WHERE session_key = $1 AND direction <> 'notice' AND recalled_at IS NULL
    AND event_time <= $2 AND (event_time < $2 OR id COLLATE "C" < $3)
ORDER BY event_time DESC, id COLLATE "C" DESC
LIMIT $4`

// MessagesBefore implements memory.HistorySearch: the chat messages (no
// notices, no recalled messages) of the session before the watermark in
// (event time, key) order, the newest limit of them, oldest first.
func (d *DB) MessagesBefore(ctx context.Context, sessionKey string, before memory.Watermark, limit int) ([]memory.Message, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := d.queryHistoryMessages(ctx, sqlMessagesBefore, sessionKey, ms(before.Time), before.Key, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: messages before: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}
