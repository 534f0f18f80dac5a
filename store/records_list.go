package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// *DB is the record reader of the event center and the status command.
var _ inbound.RecordReader = (*DB)(nil)

// The listing order of ListRecords: newest event first, ties by id.
const sqlListOrder = ` ORDER BY i.event_time DESC, i.id DESC LIMIT ?`

// ListRecords implements inbound.RecordReader: one page of the records
// matching q, newest event time first (ties broken by id, descending).
//
// Every filter is optional: the session (through the transcript's session
// timeline), the sender id, the outcome code, a piece of the message text
// (case-insensitive for ASCII letters, as SQLite's lower() folds them), the
// event time range [Since, Until) and the queue state. A record whose claim
// is held in memory only (see Claim) is shown as the claim index has it:
// leased, without the outcome of an earlier attempt, and the state and code
// filters see it so.
//
// Paging is by key (the event time and id of the last record shown), so a
// page never repeats or skips a record because newer ones arrived: pass
// RecordPage.Next as the next query's Before. The cursor is opaque; a
// malformed one, an invalid code or an unknown state fails with an error
// wrapping errBadQuery. A listing without a session filter reads the whole
// queue table (it has no index on event time), which is fine for an
// operator's page but not for a hot path.
func (d *DB) ListRecords(ctx context.Context, q inbound.RecordQuery) (inbound.RecordPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = inbound.DefaultRecordPage
	}
	limit = min(limit, inbound.MaxRecordPage)

	var (
		where []string
		args  []any
	)
	if q.SessionKey != "" {
		where = append(where, "i.rid IN ("+sqlSessionRowids+") AND i.session_key = ?")
		args = append(args, q.SessionKey, q.SessionKey, q.SessionKey)
	}
	if q.SenderID != "" {
		where = append(where, "i.sender_id = ?")
		args = append(args, q.SenderID)
	}
	if q.Code != "" {
		if !q.Code.Valid() {
			return inbound.RecordPage{}, fmt.Errorf("store: list records: %w: outcome code %q", errBadQuery, q.Code)
		}
		where = append(where, "i.outcome = ?")
		args = append(args, string(q.Code))
	}
	if q.Text != "" {
		where = append(where, "instr(lower(coalesce(m.text, '')), lower(?)) > 0")
		args = append(args, q.Text)
	}
	if !q.Since.IsZero() {
		where = append(where, "i.event_time >= ?")
		args = append(args, ms(q.Since))
	}
	if !q.Until.IsZero() {
		where = append(where, "i.event_time < ?")
		args = append(args, ms(q.Until))
	}
	// A soft lease is not in its row (see Records): a pending or leased
	// item may be either, so both are read and told apart after the overlay.
	live := false
	switch q.Status {
	case "":
	case inbound.StatusPending, inbound.StatusLeased:
		live = true
		where = append(where, "i."+sqlFromQueueFloor+" AND i.status IN ('pending', 'leased')")
	case inbound.StatusDone:
		where = append(where, "i.status = 'done'")
	default:
		return inbound.RecordPage{}, fmt.Errorf("store: list records: %w: status %q", errBadQuery, q.Status)
	}
	var (
		after   bool
		afterMs int64
		afterID string
	)
	if q.Before != "" {
		var err error
		if afterMs, afterID, err = decodeListCursor(q.Before); err != nil {
			return inbound.RecordPage{}, fmt.Errorf("store: list records: %w", err)
		}
		after = true
	}

	// The overlay can hide a row the SQL filter selected (a soft lease has
	// no outcome yet, and its state is leased), so rows are read in batches
	// of a page and one until the page is full or the rows run out.
	batch := limit + 1
	out := make([]inbound.Record, 0, batch)
	for {
		w, a := where, args
		if after {
			w = append(w[:len(w):len(w)], "(i.event_time, i.id) < (?, ?)")
			a = append(a[:len(a):len(a)], afterMs, afterID)
		}
		cond := ""
		if len(w) > 0 {
			cond = " WHERE " + strings.Join(w, " AND ")
		}
		// The page's rows are picked first, reading the transcript only
		// when the text filter needs it; only they are read whole.
		from := "inbound_items i"
		if q.Text != "" {
			from = "inbound_items i LEFT JOIN message_events m ON m.rowid = i.rid"
		}
		stmt := sqlRecordCols + " WHERE i.rid IN (SELECT i.rid FROM " + from + cond + sqlListOrder + ")" +
			" ORDER BY i.event_time DESC, i.id DESC"
		recs, err := selectAll(ctx, d, "list records", scanRecord, stmt, append(a, batch)...)
		if err != nil {
			return inbound.RecordPage{}, err
		}
		for _, r := range recs {
			d.sched.overlay(&r)
			if live && r.Status != q.Status || q.Code != "" && r.Outcome.Code != q.Code {
				continue
			}
			out = append(out, r)
			if len(out) == batch {
				break
			}
		}
		if len(out) == batch || len(recs) < batch {
			break
		}
		last := recs[len(recs)-1]
		after, afterMs, afterID = true, ms(last.EventTime), last.ID
	}
	page := inbound.RecordPage{Records: out}
	if len(out) > limit {
		page.Records = out[:limit]
		last := out[limit-1]
		page.Next = encodeListCursor(ms(last.EventTime), last.ID)
	}
	return page, nil
}

// encodeListCursor is the opaque ListRecords cursor of the record with
// event time t (unix ms) and id.
func encodeListCursor(t int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t, 10) + ":" + id))
}

// decodeListCursor reads a cursor made by encodeListCursor.
func decodeListCursor(c string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("%w: malformed cursor %q", errBadQuery, c)
	}
	ts, id, ok := strings.Cut(string(raw), ":")
	if !ok || id == "" {
		return 0, "", fmt.Errorf("%w: malformed cursor %q", errBadQuery, c)
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("%w: malformed cursor %q", errBadQuery, c)
	}
	return t, id, nil
}

// sqlCompletedAfter reads the records completed after a completion number,
// in completion order, through the inbound_items_completed index, with the
// completion number before sqlRecordCols' columns.
var sqlCompletedAfter = "SELECT i.completed_seq, " + strings.TrimPrefix(sqlRecordCols, "SELECT ") +
	" WHERE i.completed_seq > ? ORDER BY i.completed_seq LIMIT ?"

// CompletedAfter implements inbound.RecordReader: up to limit records
// (≤ 0: inbound.DefaultRecordPage; at most inbound.MaxRecordPage) that
// became done after cursor, in the order they did, and the cursor of the
// last one (cursor itself when there is none). A cursor is the decimal
// completion number of a record ("" = before the first); anything else
// fails with an error wrapping errBadQuery. Completion numbers are given by
// the single writer in commit order, so a reader that saw number n has
// seen every number below it: records completed in the same millisecond
// are neither repeated nor skipped.
func (d *DB) CompletedAfter(ctx context.Context, cursor string, limit int) ([]inbound.Record, string, error) {
	var seq int64
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n < 0 {
			return nil, cursor, fmt.Errorf("store: completed after: %w: cursor %q", errBadQuery, cursor)
		}
		seq = n
	}
	if limit <= 0 {
		limit = inbound.DefaultRecordPage
	}
	limit = min(limit, inbound.MaxRecordPage)
	type seqRecord struct {
		seq int64
		r   inbound.Record
	}
	scan := func(sc interface{ Scan(...any) error }) (seqRecord, error) {
		var s seqRecord
		r, err := scanRecord(prefixScanner{sc: sc, pre: []any{&s.seq}})
		s.r = r
		return s, err
	}
	rows, err := selectAll(ctx, d, "completed after", scan, sqlCompletedAfter, seq, limit)
	if err != nil {
		return nil, cursor, err
	}
	if len(rows) == 0 {
		return nil, cursor, nil
	}
	out := make([]inbound.Record, len(rows))
	for i := range rows {
		out[i] = rows[i].r
		d.sched.overlay(&out[i])
	}
	return out, strconv.FormatInt(rows[len(rows)-1].seq, 10), nil
}

// FeedHead returns the CompletedAfter cursor of the newest completed
// record ("" when none is): a live feed that starts from it sees only the
// records completed later. It reads one index entry.
func (d *DB) FeedHead(ctx context.Context) (string, error) {
	var n sql.NullInt64
	err := d.rdb.QueryRowContext(ctx,
		`SELECT max(completed_seq) FROM inbound_items WHERE completed_seq IS NOT NULL`).Scan(&n)
	if err != nil {
		return "", fmt.Errorf("store: feed head: %w", err)
	}
	if !n.Valid {
		return "", nil
	}
	return strconv.FormatInt(n.Int64, 10), nil
}

// prefixScanner scans the leading columns of a row into pre and the rest
// into the destinations its caller gives.
type prefixScanner struct {
	sc  interface{ Scan(...any) error }
	pre []any
}

func (p prefixScanner) Scan(dest ...any) error {
	return p.sc.Scan(append(p.pre[:len(p.pre):len(p.pre)], dest...)...)
}

// The statements of Summarize; ?1 and ?2 bound completed_at.
const (
	sqlSummaryOutcomes = `SELECT coalesce(outcome, ''), count(*) FROM inbound_items
WHERE status = 'done' AND completed_at >= ?1 AND completed_at < ?2 GROUP BY 1`
	sqlSummaryTokens = `SELECT coalesce(json_extract(t.value, '$.purpose'), ''), count(*),
    coalesce(sum(json_extract(t.value, '$.input')), 0), coalesce(sum(json_extract(t.value, '$.cached_input')), 0),
    coalesce(sum(json_extract(t.value, '$.output')), 0)
FROM inbound_items i, json_each(i.tokens) t
WHERE i.status = 'done' AND i.completed_at >= ?1 AND i.completed_at < ?2 AND i.tokens IS NOT NULL
GROUP BY 1 ORDER BY 1`
	sqlSummaryPending = `SELECT count(*) FROM inbound_items WHERE ` + sqlFromQueueFloor +
		` AND status IN ('pending', 'leased')`
)

// Summarize implements inbound.RecordReader: the records completed in
// [since, until) counted per outcome code, their token use summed per
// purpose (Calls counts the Tokens entries of the purpose), and the items
// pending or leased now. A zero since or until leaves that end open; until
// before since fails with an error wrapping errBadQuery. The three counts
// come from one read snapshot. It reads every queue row (completed_at has
// no index), so it is meant for an operator's page, not for every message.
func (d *DB) Summarize(ctx context.Context, since, until time.Time) (inbound.Summary, error) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if !since.IsZero() {
		lo = ms(since)
	}
	if !until.IsZero() {
		hi = ms(until)
	}
	if hi < lo {
		return inbound.Summary{}, fmt.Errorf("store: summarize: %w: until %s is before since %s", errBadQuery,
			until.Format(time.RFC3339), since.Format(time.RFC3339))
	}
	s := inbound.Summary{Since: since, Until: until, Outcomes: map[outcome.Code]int{}}
	// One transaction: its reads share the snapshot its first read takes.
	tx, err := d.rdb.BeginTx(ctx, nil)
	if err != nil {
		return inbound.Summary{}, fmt.Errorf("store: summarize: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := summaryRows(ctx, tx, sqlSummaryOutcomes, []any{lo, hi}, func(sc *sql.Rows) error {
		var (
			code string
			n    int
		)
		if err := sc.Scan(&code, &n); err != nil {
			return err
		}
		if code != "" {
			s.Outcomes[outcome.Code(code)] = n
		}
		return nil
	}); err != nil {
		return inbound.Summary{}, err
	}
	if err := summaryRows(ctx, tx, sqlSummaryTokens, []any{lo, hi}, func(sc *sql.Rows) error {
		var t inbound.TokenTotal
		if err := sc.Scan(&t.Purpose, &t.Calls, &t.Input, &t.CachedInput, &t.Output); err != nil {
			return err
		}
		s.Tokens = append(s.Tokens, t)
		return nil
	}); err != nil {
		return inbound.Summary{}, err
	}
	if err := tx.QueryRowContext(ctx, sqlSummaryPending).Scan(&s.Pending); err != nil {
		return inbound.Summary{}, fmt.Errorf("store: summarize: %w", err)
	}
	return s, nil
}

// summaryRows runs one Summarize query in tx and calls row for each row.
func summaryRows(ctx context.Context, tx *sql.Tx, q string, args []any, row func(*sql.Rows) error) error {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("store: summarize: %w", err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		if err := row(rows); err != nil {
			return fmt.Errorf("store: summarize: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: summarize: %w", err)
	}
	return nil
}

// errBadQuery is the store's ErrInvalid for a record query, also
// inbound.ErrInvalidQuery so that readers of the port need not know the
// store.
var errBadQuery = fmt.Errorf("%w: %w", ErrInvalid, inbound.ErrInvalidQuery)
