package store

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A session's history is found through message_timeline (see
// migrations/0008_timeline.sql), not through an index on message_events.
// SQLite keeps an index up row by row: each new transcript row wrote its
// session's leaf page of the (session_key, event_time) index at its own
// commit, one page per message when messages spread over many chats (the
// WAL frame, and the checkpoint's copy of it). The timeline is written in
// bulk instead: every transcript row up to message_timeline_mark.through
// has its entry; the newer rows (the tail) get theirs when the timeline
// flusher moves the whole tail in one sorted INSERT, so that a session's
// new entries share a page. A query of a session's history reads both,
// in one statement (so one snapshot): the timeline, and the session's rows
// of the tail straight from message_events, by rowid. Recent, the read on
// a reply's path, looks those up among the rowids the writer listed for
// the session (tailCounter); the other reads scan the tail (at most a few
// thousand rows, the newest).
//
// Triggers keep the entry of a row below the mark in step when the row's
// session or time changes or the row goes.

const (
	// timelineFlushRows is the tail size at which the flusher moves the
	// tail into the timeline at once.
	timelineFlushRows = 1024
	// timelineFlushEvery is how often the flusher moves a smaller tail.
	timelineFlushEvery = 2 * time.Second
)

// sqlTailFrom is the condition on message_events.rowid of the transcript
// rows that have no timeline entry yet.
const sqlTailFrom = `rowid > (SELECT through FROM message_timeline_mark)`

// sqlSessionRowids selects the rowids of a session's transcript rows; it
// takes the session key twice, as positional parameters.
const sqlSessionRowids = `SELECT rid FROM message_timeline WHERE session_key = ?
UNION ALL
SELECT rowid FROM message_events WHERE ` + sqlTailFrom + ` AND session_key = ?`

// sqlFlushTimeline moves the tail into the timeline, sorted so that each
// session's entries go in together, then moves the mark past it.
const (
	sqlFlushTimeline = `INSERT OR IGNORE INTO message_timeline (session_key, event_time, rid)
SELECT session_key, event_time, rowid FROM message_events WHERE ` + sqlTailFrom + `
ORDER BY session_key, event_time, rowid`
	sqlFlushTimelineMark = `UPDATE message_timeline_mark
SET through = max(through, (SELECT coalesce(max(rowid), 0) FROM message_events)) RETURNING through`
)

// tailCounter counts the transcript rows inserted since the last flush
// (the tail's size as this handle knows it: it decides when to flush,
// nothing else), wakes the flusher when the tail is full, and lists the
// tail's rows per session (see DB.recentRows).
type tailCounter struct {
	rows atomic.Int64
	full chan struct{}

	mu  sync.Mutex
	seq uint64
	// sess lists, per session, the rowids of the rows this handle wrote
	// since the last flush (and of the tail it found at Open): a superset of
	// its rows in the tail, as a write may roll back or move a row to
	// another session. ver is the seq of the session's last addition.
	sess map[string]*tailSession
}

type tailSession struct {
	rowids []int64
	ver    uint64
}

func newTailCounter() *tailCounter {
	return &tailCounter{full: make(chan struct{}, 1), sess: make(map[string]*tailSession)}
}

// added counts one new transcript row and lists it.
func (c *tailCounter) added(session string, rowid int64) {
	c.list(session, rowid)
	if c.rows.Add(1) >= timelineFlushRows {
		select {
		case c.full <- struct{}{}:
		default:
		}
	}
}

// list lists rowid under session. The writer calls it before the row's
// transaction commits, so a reader that finds the session's version
// unchanged after its query knows no row of the session committed
// unlisted before its snapshot (see DB.recentRows).
func (c *tailCounter) list(session string, rowid int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sess[session]
	if s == nil {
		s = &tailSession{}
		c.sess[session] = s
	}
	c.seq++
	s.rowids = append(s.rowids, rowid)
	s.ver = c.seq
}

// cut forgets the rows at or below through (now in the timeline).
func (c *tailCounter) cut(through int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, s := range c.sess {
		keep := s.rowids[:0]
		for _, r := range s.rowids {
			if r > through {
				keep = append(keep, r)
			}
		}
		s.rowids = keep
		if len(keep) == 0 {
			delete(c.sess, k)
		}
	}
}

// session returns the listed rowids of session as a JSON array and the
// session's version.
func (c *tailCounter) session(session string) (string, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sess[session]
	if s == nil {
		return "[]", 0
	}
	b := make([]byte, 0, 2+len(s.rowids)*8)
	b = append(b, '[')
	for i, r := range s.rowids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, r, 10)
	}
	return string(append(b, ']')), s.ver
}

// version returns the session's version (0 when nothing is listed).
func (c *tailCounter) version(session string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sess[session]; s != nil {
		return s.ver
	}
	return 0
}

// startTimelineFlusher starts the flusher (unless disabled, for tests that
// flush themselves), flushing smaller tails every period (≤ 0:
// timelineFlushEvery). A tail left by an earlier handle is listed, and
// flushed first.
func (d *DB) startTimelineFlusher(ctx context.Context, disabled bool, period time.Duration) error {
	n, err := d.listTail(ctx)
	if err != nil {
		return fmt.Errorf("timeline tail: %w", err)
	}
	d.w.tail.rows.Store(n)
	if n > 0 {
		d.w.tail.full <- struct{}{} // the channel is new: never blocks
	}
	if period <= 0 {
		period = timelineFlushEvery
	}
	d.tl.start(disabled, d.timelineLoop(period))
	return nil
}

// listTail lists the rows of the tail (left by an earlier handle) and
// returns their number.
func (d *DB) listTail(ctx context.Context) (int64, error) {
	rows, err := d.rdb.QueryContext(ctx, `SELECT rowid, session_key FROM message_events WHERE `+sqlTailFrom)
	if err != nil {
		return 0, err
	}
	defer func() { _ = rows.Close() }()
	var n int64
	for rows.Next() {
		var (
			rowid   int64
			session string
		)
		if err := rows.Scan(&rowid, &session); err != nil {
			return 0, err
		}
		d.w.tail.list(session, rowid)
		n++
	}
	return n, rows.Err()
}

// stopTimelineFlusher stops the flusher and waits for it: a flush in
// progress ends committed or not started. Later calls do nothing.
func (d *DB) stopTimelineFlusher() { d.tl.stop() }

// timelineLoop flushes when the tail is full and every period (a real-time
// maintenance period, like the search indexer's: it decides nothing a test
// drives with a fake clock, whose moves must not set off writes of their
// own).
func (d *DB) timelineLoop(period time.Duration) func(context.Context) {
	return func(ctx context.Context) {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-d.w.tail.full:
			case <-tick.C:
			case <-ctx.Done():
				return
			}
			if d.w.tail.rows.Load() <= 0 {
				continue
			}
			if err := d.flushTimeline(ctx); err != nil && ctx.Err() == nil {
				// The tail stays readable; the next tick tries again.
				d.log.Warn("store: timeline flush failed", "err", err)
			}
		}
	}
}

// flushTimeline moves the tail into the timeline in one write operation.
// Once it committed, the moved rows are no longer listed and no longer
// counted; if it fails, they still are.
func (d *DB) flushTimeline(ctx context.Context) error {
	var through, counted int64
	err := d.writeThen(ctx, func(tx wtx) error {
		if _, err := tx.exec(sqlFlushTimeline); err != nil {
			return err
		}
		if err := tx.queryRow(sqlFlushTimelineMark).Scan(&through); err != nil {
			return err
		}
		// The queue floor follows the completions since the last flush, so
		// that the next Open scans little (migration 0010).
		if _, err := tx.exec(sqlAdvanceQueueFloor); err != nil {
			return err
		}
		// The writer's goroutine runs this: every row counted so far is
		// in this transaction or committed before it, so in the flush.
		counted = d.w.tail.rows.Swap(0)
		return nil
	}, func() { d.w.tail.cut(through) })
	if err != nil {
		d.w.tail.rows.Add(counted)
	}
	return err
}
