package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/memory"
)

// Append implements memory.History: it upserts the message_events row keyed
// by e.Key (filled from e.Event.Key() when empty). An existing row gets the
// new payload, text and sender details and keeps its created_at and, unless
// e.RecalledAt is set, its recall time. e.SessionKey defaults to
// e.Event.SessionKey and must not end up empty (ErrInvalid); e.Direction
// defaults to "out" for the bot's own messages, "notice" for notices and
// "in" otherwise.
func (d *DB) Append(ctx context.Context, e memory.Entry) error {
	if e.Key == "" {
		e.Key = e.Event.Key()
	}
	if e.SessionKey == "" {
		e.SessionKey = e.Event.SessionKey
	}
	if e.SessionKey == "" {
		return fmt.Errorf("%w: history entry %s without a session key", ErrInvalid, e.Key)
	}
	if e.Direction == "" {
		switch e.Event.Kind {
		case channel.KindSelf:
			e.Direction = memory.Out
		case channel.KindNotice:
			e.Direction = memory.Notice
		default:
			e.Direction = memory.In
		}
	}
	switch e.Direction {
	case memory.In, memory.Out, memory.Notice:
	default:
		return fmt.Errorf("%w: history entry %s: direction %q", ErrInvalid, e.Key, e.Direction)
	}
	now := d.now()
	r, err := d.eventRow(e.Key, e.SessionKey, &e.Event, e.Direction, e.RecalledAt, now)
	if err != nil {
		return err
	}
	// The event as Recent would decode it from the row, for the caches.
	held, herr := storedEvent(&e.Event)
	err = d.writeThen(ctx, func(tx wtx) error { return upsertEvent(tx, &r, now) },
		func() { d.hist.upsert(histEntryOf(&r, &held), herr == nil) })
	if err != nil {
		return fmt.Errorf("store: append %s: %w", e.Key, err)
	}
	if herr == nil {
		d.events.put(e.Key, r.payload, &held)
	}
	if r.searchTokens != "" {
		d.kickSearchIndex()
	}
	return nil
}

// sqlRecent reads a session's newest entries, in no particular order
// (recentRows sorts them): the newest ?2 of the session's timeline and the
// session's rows in the timeline's tail (see timeline.go) are sorted
// together by key alone, and only the newest ?2 keys' rows are read. The
// tail's rows are looked up by rowid among those listed in ?3 (a JSON
// array, see tailCounter); sqlRecentScan finds them by scanning the tail
// instead.
var (
	sqlRecent     = recentSQL(`rowid IN (SELECT value FROM json_each(?3)) AND `)
	sqlRecentScan = recentSQL("")
)

// recentSQL is sqlRecent with listed (a condition on the tail's rowids,
// ending in AND, or nothing) in its tail arm.
func recentSQL(listed string) string {
	return `
SELECT m.id, m.direction, m.payload, m.recalled_at, m.event_time, m.rowid FROM (
    SELECT * FROM (SELECT event_time, rid FROM message_timeline WHERE session_key = ?1
        ORDER BY event_time DESC, rid DESC LIMIT ?2)
    UNION ALL
    SELECT event_time, rowid FROM message_events WHERE ` + listed + sqlTailFrom + ` AND session_key = ?1
    ORDER BY 1 DESC, 2 DESC LIMIT ?2) k
CROSS JOIN message_events m ON m.rowid = k.rid`
}

// recentTries is how many times recentRows reads by the listed rowids
// before it scans the tail.
const recentTries = 3

// Recent implements memory.History: the newest limit entries of the session,
// returned oldest first (by event time, then insertion order). limit ≤ 0
// returns nothing.
//
// It is answered from the history cache (histcache.go) when that holds the
// session's newest limit entries, or all of them; otherwise it reads SQL
// (at least histMinRead rows) and caches what it read. The returned slice is
// the caller's; the events in it are shared and must not be modified.
func (d *DB) Recent(ctx context.Context, sessionKey string, limit int) ([]memory.Entry, error) {
	return d.recent(ctx, sessionKey, limit, false)
}

var _ memory.RecentViewer = (*DB)(nil)

// RecentView implements memory.RecentViewer: Recent, except that an answer
// from the history cache is the cached window itself, not a copy. The
// caller must not modify the returned entries (appending to the slice is
// safe: its capacity ends at its length). A turn reads a window of up to
// 400 entries of about 400 bytes each; copying it was the largest single
// source of garbage in the replied pipeline benchmark.
func (d *DB) RecentView(ctx context.Context, sessionKey string, limit int) ([]memory.Entry, error) {
	return d.recent(ctx, sessionKey, limit, true)
}

// recent is Recent, or RecentView with shared.
func (d *DB) recent(ctx context.Context, sessionKey string, limit int, shared bool) ([]memory.Entry, error) {
	if limit <= 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store: recent %s: %w", sessionKey, err)
	}
	out, t, ok := d.hist.get(sessionKey, limit, shared)
	if ok {
		return out, nil
	}
	n := max(limit, histMinRead)
	rows, err := d.recentRows(ctx, sessionKey, n)
	if err != nil {
		return nil, err
	}
	d.hist.install(sessionKey, t, rows, len(rows) < n)
	return entries(rows[max(0, len(rows)-limit):]), nil
}

// recentRows reads the newest limit rows of the session from SQL, oldest
// first.
//
// The session's rows in the timeline's tail are read by the rowids this
// handle listed for it (tailCounter). The writer lists a row before its
// transaction commits, so when the session's list version is the same
// after the query as before it, every row of the session that the query's
// snapshot holds was listed. Otherwise the read is repeated, and after
// recentTries it scans the tail instead. The tail an earlier DB on the file
// left is listed at Open (see startTimelineFlusher).
func (d *DB) recentRows(ctx context.Context, sessionKey string, limit int) ([]histEntry, error) {
	stmt, err := d.events.recentStmt(ctx, d.rdb)
	if err != nil {
		return nil, fmt.Errorf("store: recent %s: %w", sessionKey, err)
	}
	for try := 1; ; try++ {
		if try > recentTries {
			rows, err := d.rdb.QueryContext(ctx, sqlRecentScan, sessionKey, limit)
			return d.scanRecent(sessionKey, limit, rows, err)
		}
		listed, ver := d.w.tail.session(sessionKey)
		rows, err := stmt.QueryContext(ctx, sessionKey, limit, listed)
		out, err := d.scanRecent(sessionKey, limit, rows, err)
		if err != nil || d.w.tail.version(sessionKey) == ver {
			return out, err
		}
	}
}

// scanRecent reads the rows of a Recent query, oldest first.
func (d *DB) scanRecent(sessionKey string, limit int, rows *sql.Rows, err error) ([]histEntry, error) {
	if err != nil {
		return nil, fmt.Errorf("store: recent %s: %w", sessionKey, err)
	}
	defer func() { _ = rows.Close() }()
	var (
		out      = make([]histEntry, 0, min(limit, 32)) // most sessions are short
		dir      sql.RawBytes
		payload  sql.RawBytes // only valid until Next: decode copies what it keeps
		recalled sql.NullInt64
	)
	for rows.Next() {
		he := histEntry{e: memory.Entry{SessionKey: sessionKey}}
		e := &he.e
		if err := rows.Scan(&e.Key, &dir, &payload, &recalled, &he.t, &he.rowid); err != nil {
			return nil, fmt.Errorf("store: recent %s: %w", sessionKey, err)
		}
		e.Direction = direction(dir)
		e.RecalledAt = fromNullMs(recalled)
		ev, err := d.events.decode(e.Key, payload)
		if err != nil {
			return nil, fmt.Errorf("store: recent %s: decode %s: %w", sessionKey, e.Key, err)
		}
		e.Event = ev
		out = append(out, he)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: recent %s: %w", sessionKey, err)
	}
	slices.SortFunc(out, func(a, b histEntry) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.rowid, b.rowid)
	})
	return out, nil
}

// direction converts a stored direction without allocating for the known
// ones.
func direction(b []byte) memory.Direction {
	switch string(b) {
	case string(memory.In):
		return memory.In
	case string(memory.Out):
		return memory.Out
	case string(memory.Notice):
		return memory.Notice
	}
	return memory.Direction(b)
}

// MarkRecalled implements memory.History: it sets the recall time of the
// entry with this key. An unknown key is not an error (a recall notice may
// name a message that was never stored).
func (d *DB) MarkRecalled(ctx context.Context, key string, at time.Time) error {
	if at.IsZero() {
		at = d.clk.Now()
	}
	at = fromMs(ms(at)) // as it reads back
	err := d.writeThen(ctx, func(tx wtx) error {
		_, err := tx.exec(`UPDATE message_events SET recalled_at = ?2 WHERE id = ?1`, key, ms(at))
		return err
	}, func() { d.hist.recalled(key, at) })
	if err != nil {
		return fmt.Errorf("store: mark recalled %s: %w", key, err)
	}
	return nil
}
