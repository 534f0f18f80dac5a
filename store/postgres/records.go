package postgres

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// The read side of the queue: the event log the event center and the
// status command read.

// sqlRecordCols selects a record (scanned by scanRecord) from
// inbound_items i joined with its transcript row m.
const sqlRecordCols = `i.id, i.session_key, i.sender_id, i.message_id, coalesce(m.text, ''), i.source,
    i.priority, i.status, i.attempts, i.history_only, i.event_time, i.available_at, i.enqueued_at,
    coalesce(i.first_claimed_at, 0), coalesce(i.completed_at, 0), coalesce(i.last_error, ''),
    coalesce(i.outcome, ''), coalesce(i.reason, ''), coalesce(i.delivery_stage, ''), i.outbound_ids,
    coalesce(i.merged_into, ''), coalesce(i.gates_done_at, 0), coalesce(i.generation_start_at, 0),
    coalesce(i.generation_end_at, 0), coalesce(i.first_send_at, 0), coalesce(i.first_ack_at, 0),
    i.tokens, coalesce(i.kind, ''), i.trail`

// sqlRecordFrom is the FROM clause of sqlRecordCols.
const sqlRecordFrom = ` FROM inbound_items i LEFT JOIN message_events m ON m.id = i.id`

// recordDest is the scan destination of one sqlRecordCols row.
type recordDest struct {
	r                                         inbound.Record
	source, status, code, stage               string
	eventTime, avail, enqueued                int64
	firstClaim, completed                     int64
	gates, genStart, genEnd, firstSend, ackAt int64
	outboundIDs, tokens, trail                *string
}

// targets lists the destinations in sqlRecordCols' order.
func (x *recordDest) targets() []any {
	r := &x.r
	return []any{&r.ID, &r.SessionKey, &r.SenderID, &r.MessageID, &r.Text, &x.source, &r.Priority, &x.status,
		&r.Attempts, &r.HistoryOnly, &x.eventTime, &x.avail, &x.enqueued, &x.firstClaim, &x.completed,
		&r.LastError, &x.code, &r.Outcome.Reason, &x.stage, &x.outboundIDs, &r.Outcome.MergedInto,
		&x.gates, &x.genStart, &x.genEnd, &x.firstSend, &x.ackAt, &x.tokens, &r.Outcome.Kind, &x.trail}
}

// record converts the scanned columns.
func (x *recordDest) record() (inbound.Record, error) {
	r := x.r
	r.Source = channel.Source(x.source)
	r.Status = inbound.Status(x.status)
	r.Outcome.Code = outcome.Code(x.code)
	r.Outcome.Stage = inbound.DeliveryStage(x.stage)
	r.EventTime, r.AvailableAt, r.EnqueuedAt = fromMs(x.eventTime), fromMs(x.avail), fromMs(x.enqueued)
	r.FirstClaim, r.CompletedAt = fromMs(x.firstClaim), fromMs(x.completed)
	r.Outcome.Timings = inbound.Timings{
		GatesDone: fromMs(x.gates), GenerationStart: fromMs(x.genStart), GenerationEnd: fromMs(x.genEnd),
		FirstSend: fromMs(x.firstSend), FirstAck: fromMs(x.ackAt),
	}
	if x.trail != nil {
		r.Outcome.Trail = new(inbound.Trail)
		if err := json.Unmarshal([]byte(*x.trail), r.Outcome.Trail); err != nil {
			return inbound.Record{}, fmt.Errorf("decode trail of %s: %w", r.ID, err)
		}
	}
	if x.outboundIDs != nil {
		if err := json.Unmarshal([]byte(*x.outboundIDs), &r.Outcome.OutboundIDs); err != nil {
			return inbound.Record{}, fmt.Errorf("decode outbound ids of %s: %w", r.ID, err)
		}
	}
	if x.tokens != nil {
		if err := json.Unmarshal([]byte(*x.tokens), &r.Outcome.Tokens); err != nil {
			return inbound.Record{}, fmt.Errorf("decode tokens of %s: %w", r.ID, err)
		}
	}
	return r, nil
}

// scanRecord reads one row of sqlRecordCols.
func scanRecord(row pgx.CollectableRow) (inbound.Record, error) {
	var x recordDest
	if err := row.Scan(x.targets()...); err != nil {
		return inbound.Record{}, err
	}
	return x.record()
}

// Lookup implements inbound.Queue and inbound.RecordReader: the record of
// one item, or an error wrapping inbound.ErrNotFound.
func (d *DB) Lookup(ctx context.Context, id string) (inbound.Record, error) {
	if err := d.usable(); err != nil {
		return inbound.Record{}, err
	}
	rows, _ := d.pool.Query(ctx, `SELECT `+sqlRecordCols+sqlRecordFrom+` WHERE i.id = $1`, id)
	r, err := pgx.CollectExactlyOneRow(rows, scanRecord)
	if errors.Is(err, pgx.ErrNoRows) {
		return inbound.Record{}, fmt.Errorf("postgres: lookup %s: %w", id, inbound.ErrNotFound)
	}
	if err != nil {
		return inbound.Record{}, fmt.Errorf("postgres: lookup %s: %w", id, err)
	}
	return r, nil
}

// errBadQuery wraps inbound.ErrInvalidQuery for the readers' errors.
func errBadQuery(format string, args ...any) error {
	return fmt.Errorf("%w: %s", inbound.ErrInvalidQuery, fmt.Sprintf(format, args...))
}

// sqlArgs collects the positional parameters of a statement being built.
type sqlArgs []any

// add appends v and returns its placeholder.
func (a *sqlArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// asciiUpper and asciiLower fold ASCII letters in SQL (translate), so
// that the text filter ignores the case of ASCII letters only, whatever
// the database's locale.
const (
	asciiUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	asciiLower = "abcdefghijklmnopqrstuvwxyz"
)

// foldASCII lowers the ASCII letters of s.
func foldASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// recordFilter turns q's filters (all but the cursor and the limit) into
// conditions on sqlRecordCols' tables.
func recordFilter(q inbound.RecordQuery, args *sqlArgs) ([]string, error) {
	var where []string
	if q.SessionKey != "" {
		where = append(where, "i.session_key = "+args.add(q.SessionKey))
	}
	if q.SenderID != "" {
		where = append(where, "i.sender_id = "+args.add(q.SenderID))
	}
	if q.Code != "" {
		if !q.Code.Valid() {
			return nil, errBadQuery("outcome code %q", q.Code)
		}
		where = append(where, "i.outcome = "+args.add(string(q.Code)))
	}
	if q.Text != "" {
		where = append(where, fmt.Sprintf("strpos(translate(coalesce(m.text, ''), '%s', '%s'), %s) > 0",
			asciiUpper, asciiLower, args.add(foldASCII(q.Text))))
	}
	if !q.Since.IsZero() {
		where = append(where, "i.event_time >= "+args.add(ms(q.Since)))
	}
	if !q.Until.IsZero() {
		where = append(where, "i.event_time < "+args.add(ms(q.Until)))
	}
	switch q.Status {
	case "":
	case inbound.StatusPending, inbound.StatusLeased, inbound.StatusDone:
		where = append(where, "i.status = "+args.add(string(q.Status)))
	default:
		return nil, errBadQuery("status %q", q.Status)
	}
	return where, nil
}

// whereClause joins conditions into a WHERE clause ("" for none).
func whereClause(where []string) string {
	if len(where) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(where, " AND ")
}

// selectRecords runs a sqlRecordCols statement.
func (d *DB) selectRecords(ctx context.Context, stmt string, args []any) ([]inbound.Record, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	rows, _ := d.pool.Query(ctx, stmt, args...)
	return pgx.CollectRows(rows, scanRecord)
}

// ListRecords implements inbound.RecordReader: one page of the records
// matching q, newest event time first, ties broken by id descending.
//
// Every filter is optional: the session, the sender id, the outcome code,
// a piece of the message text (case-insensitive for ASCII letters; % and _
// are plain characters), the event time range [Since, Until) and the queue
// state. Paging is by key (the event time and id of the last record
// shown), so a page never repeats or skips a record because newer ones
// arrived: pass RecordPage.Next as the next query's Before. A malformed
// cursor, an invalid code or an unknown state fails with an error
// wrapping inbound.ErrInvalidQuery.
func (d *DB) ListRecords(ctx context.Context, q inbound.RecordQuery) (inbound.RecordPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = inbound.DefaultRecordPage
	}
	limit = min(limit, inbound.MaxRecordPage)
	var args sqlArgs
	where, err := recordFilter(q, &args)
	if err != nil {
		return inbound.RecordPage{}, fmt.Errorf("postgres: list records: %w", err)
	}
	if q.Before != "" {
		t, id, err := decodeListCursor(q.Before)
		if err != nil {
			return inbound.RecordPage{}, fmt.Errorf("postgres: list records: %w", err)
		}
		where = append(where, fmt.Sprintf("(i.event_time, i.id) < (%s, %s)", args.add(t), args.add(id)))
	}
	stmt := `SELECT ` + sqlRecordCols + sqlRecordFrom + whereClause(where) +
		` ORDER BY i.event_time DESC, i.id DESC LIMIT ` + args.add(limit+1)
	recs, err := d.selectRecords(ctx, stmt, args)
	if err != nil {
		return inbound.RecordPage{}, fmt.Errorf("postgres: list records: %w", err)
	}
	page := inbound.RecordPage{Records: recs}
	if len(recs) > limit {
		page.Records = recs[:limit]
		last := recs[limit-1]
		page.Next = encodeListCursor(ms(last.EventTime), last.ID)
	}
	return page, nil
}

// Records returns every record matching q's filters, oldest event first
// (ties by id): the whole listing at once, for tests and tools. q.Limit >
// 0 caps the number of records; q.Before must be empty.
func (d *DB) Records(ctx context.Context, q inbound.RecordQuery) ([]inbound.Record, error) {
	var args sqlArgs
	where, err := recordFilter(q, &args)
	if err == nil && q.Before != "" {
		err = errBadQuery("Records does not page (Before %q)", q.Before)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: records: %w", err)
	}
	stmt := `SELECT ` + sqlRecordCols + sqlRecordFrom + whereClause(where) + ` ORDER BY i.event_time, i.id`
	if q.Limit > 0 {
		stmt += ` LIMIT ` + args.add(q.Limit)
	}
	recs, err := d.selectRecords(ctx, stmt, args)
	if err != nil {
		return nil, fmt.Errorf("postgres: records: %w", err)
	}
	return recs, nil
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
		return 0, "", errBadQuery("malformed cursor %q", c)
	}
	ts, id, ok := strings.Cut(string(raw), ":")
	if !ok || id == "" {
		return 0, "", errBadQuery("malformed cursor %q", c)
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, "", errBadQuery("malformed cursor %q", c)
	}
	return t, id, nil
}

// The live feed.
//
// A plain sequence number does not order completions across concurrent
// transactions: one that drew number 5 may commit after a reader saw 6,
// which the reader then never goes back for. So a completion stores its
// transaction's id (pg_current_xact_id) and a sequence number, and the
// feed shows only the completions of transactions below the reader's
// snapshot xmin (every one of them has ended: nothing can still commit
// below it), ordered by (transaction id, sequence number). A transaction
// that is still running holds back the feed from its id on until it ends,
// and every transaction that starts later gets a higher id, so a record
// that shows up later always sorts after the ones shown before.

// sqlSettled is the condition of a completion the feed may show.
const sqlSettled = `i.completed_xid IS NOT NULL AND i.completed_xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint`

// feedCursor is a CompletedAfter cursor: a completing transaction's id
// and sequence number, "<xid>.<seq>".
func feedCursor(xid, seq int64) string {
	return strconv.FormatInt(xid, 10) + "." + strconv.FormatInt(seq, 10)
}

// parseFeedCursor reads a cursor made by feedCursor ("" is before the
// first record).
func parseFeedCursor(c string) (xid, seq int64, err error) {
	if c == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(c, ".")
	if ok {
		xid, err = strconv.ParseInt(a, 10, 64)
		if err == nil {
			seq, err = strconv.ParseInt(b, 10, 64)
		}
	}
	if !ok || err != nil || xid < 0 || seq < 0 {
		return 0, 0, errBadQuery("cursor %q", c)
	}
	return xid, seq, nil
}

// CompletedAfter implements inbound.RecordReader: up to limit records
// (≤ 0: inbound.DefaultRecordPage; at most inbound.MaxRecordPage) that
// became done after cursor, in completion order, and the cursor of the
// last one (cursor itself when there is none). Records completed by
// transactions of any process appear in an order that never puts one
// before a record a reader has already been given (see above). A
// malformed cursor fails with an error wrapping inbound.ErrInvalidQuery.
func (d *DB) CompletedAfter(ctx context.Context, cursor string, limit int) ([]inbound.Record, string, error) {
	xid, seq, err := parseFeedCursor(cursor)
	if err != nil {
		return nil, cursor, fmt.Errorf("postgres: completed after: %w", err)
	}
	if err := d.usable(); err != nil {
		return nil, cursor, err
	}
	if limit <= 0 {
		limit = inbound.DefaultRecordPage
	}
	limit = min(limit, inbound.MaxRecordPage)
	type feedRow struct {
		xid, seq int64
		r        inbound.Record
	}
	rows, _ := d.pool.Query(ctx, `SELECT i.completed_xid, i.completed_seq, `+sqlRecordCols+sqlRecordFrom+`
WHERE `+sqlSettled+` AND (i.completed_xid, i.completed_seq) > ($1, $2)
ORDER BY i.completed_xid, i.completed_seq LIMIT $3`, xid, seq, limit)
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (feedRow, error) {
		var (
			f feedRow
			x recordDest
		)
		if err := row.Scan(append([]any{&f.xid, &f.seq}, x.targets()...)...); err != nil {
			return f, err
		}
		f.r, err = x.record()
		return f, err
	})
	if err != nil {
		return nil, cursor, fmt.Errorf("postgres: completed after: %w", err)
	}
	if len(got) == 0 {
		return nil, cursor, nil
	}
	out := make([]inbound.Record, len(got))
	for i := range got {
		out[i] = got[i].r
	}
	last := got[len(got)-1]
	return out, feedCursor(last.xid, last.seq), nil
}

// FeedHead implements eventcenter.FeedHeader: the CompletedAfter cursor
// of the newest record the feed shows now ("" when none): a feed that
// starts from it sees only the records that show up later.
func (d *DB) FeedHead(ctx context.Context) (string, error) {
	if err := d.usable(); err != nil {
		return "", err
	}
	var xid, seq int64
	err := d.pool.QueryRow(ctx, `SELECT i.completed_xid, i.completed_seq FROM inbound_items i WHERE `+sqlSettled+`
ORDER BY i.completed_xid DESC, i.completed_seq DESC LIMIT 1`).Scan(&xid, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("postgres: feed head: %w", err)
	}
	return feedCursor(xid, seq), nil
}

// The statements of Summarize; $1 and $2 bound completed_at.
const (
	sqlSummaryOutcomes = `SELECT coalesce(outcome, ''), count(*) FROM inbound_items
WHERE status = 'done' AND completed_at >= $1 AND completed_at < $2 GROUP BY 1`
	sqlSummaryTokens = `SELECT coalesce(t->>'purpose', '') COLLATE "C" AS purpose, count(*),
    coalesce(sum((t->>'input')::bigint), 0)::bigint, coalesce(sum((t->>'cached_input')::bigint), 0)::bigint,
    coalesce(sum((t->>'output')::bigint), 0)::bigint
FROM inbound_items i, jsonb_array_elements(i.tokens::jsonb) t
WHERE i.status = 'done' AND i.completed_at >= $1 AND i.completed_at < $2 AND i.tokens IS NOT NULL
GROUP BY 1 ORDER BY 1`
	sqlSummaryPending = `SELECT count(*) FROM inbound_items WHERE status IN ('pending', 'leased')`
)

// Summarize implements inbound.RecordReader: the records completed in
// [since, until) counted per outcome code, their token use summed per
// purpose (Calls counts the Tokens entries of the purpose), and the items
// pending or leased now. A zero since or until leaves that end open; until
// before since fails with an error wrapping inbound.ErrInvalidQuery. The
// counts come from one snapshot.
func (d *DB) Summarize(ctx context.Context, since, until time.Time) (inbound.Summary, error) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if !since.IsZero() {
		lo = ms(since)
	}
	if !until.IsZero() {
		hi = ms(until)
	}
	if hi < lo {
		return inbound.Summary{}, fmt.Errorf("postgres: summarize: %w", errBadQuery("until %s is before since %s",
			until.Format(time.RFC3339), since.Format(time.RFC3339)))
	}
	s := inbound.Summary{Since: since, Until: until, Outcomes: map[outcome.Code]int{}}
	err := d.tx(ctx, pgx.RepeatableRead, func(tx pgx.Tx) error {
		s.Outcomes, s.Tokens, s.Pending = map[outcome.Code]int{}, nil, 0
		rows, _ := tx.Query(ctx, sqlSummaryOutcomes, lo, hi)
		var (
			code string
			n    int
		)
		if _, err := pgx.ForEachRow(rows, []any{&code, &n}, func() error {
			if code != "" {
				s.Outcomes[outcome.Code(code)] = n
			}
			return nil
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, sqlSummaryTokens, lo, hi)
		var t inbound.TokenTotal
		if _, err := pgx.ForEachRow(rows, []any{&t.Purpose, &t.Calls, &t.Input, &t.CachedInput, &t.Output}, func() error {
			s.Tokens = append(s.Tokens, t)
			return nil
		}); err != nil {
			return err
		}
		return tx.QueryRow(ctx, sqlSummaryPending).Scan(&s.Pending)
	})
	if err != nil {
		return inbound.Summary{}, fmt.Errorf("postgres: summarize: %w", err)
	}
	return s, nil
}

// CountOutcomes returns how many done items ended with each outcome code.
func (d *DB) CountOutcomes(ctx context.Context) (map[outcome.Code]int, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	rows, _ := d.pool.Query(ctx,
		`SELECT coalesce(outcome, ''), count(*) FROM inbound_items WHERE status = 'done' GROUP BY 1`)
	out := map[outcome.Code]int{}
	var (
		code string
		n    int
	)
	if _, err := pgx.ForEachRow(rows, []any{&code, &n}, func() error {
		out[outcome.Code(code)] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("postgres: count outcomes: %w", err)
	}
	return out, nil
}
