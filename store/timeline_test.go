package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
)

// noFlusher opens a store whose timeline the test flushes itself.
func noFlusher(o *Options) { o.noTimelineFlusher = true }

// sqlTailSize counts the transcript rows without a timeline entry.
const sqlTailSize = `SELECT count(*) FROM message_events WHERE ` + sqlTailFrom

// tailSize is the number of transcript rows without a timeline entry.
func tailSize(t *testing.T, d *DB) int {
	t.Helper()
	var n int
	require.NoError(t, d.rdb.QueryRowContext(t.Context(), sqlTailSize).Scan(&n))
	return n
}

// timelineEvent is a chat message of session chat at base+minute.
func timelineEvent(chat, id string, minute int) channel.Event {
	c := channel.Chat{Kind: channel.Group, ID: chat}
	ev := channel.Event{Platform: "p", BotID: "b", Kind: channel.KindMessage, Chat: c, MessageID: id,
		Time: t0.Add(time.Duration(minute) * time.Minute), Sender: channel.Sender{ID: "u" + id, Name: "n"},
		Segments: []channel.Segment{channel.Text("text " + id)}}
	ev.SessionKey = channel.SessionKey("", "p", "b", c)
	return ev
}

// insertEvent writes ev's transcript row (direction in) inside a write.
func insertEvent(tx wtx, ev channel.Event) error {
	r, err := newEventRow(ev.Key(), ev.SessionKey, &ev, memory.In, time.Time{}, ms(t0))
	if err != nil {
		return err
	}
	return upsertEvent(tx, &r, ms(t0))
}

// sessionReads runs every read of a session's history: through the
// timeline and its tail, and the same reads answered by scanning the whole
// transcript (the oracle, which does not depend on the timeline).
type sessionReads struct {
	Recent, RecentScan, Before, After, Newest, Records []string
	Count                                              int
	Floor                                              int64
}

func readSession(t *testing.T, d *DB, session string) (got, want sessionReads) {
	t.Helper()
	ctx := t.Context()
	rows, err := d.recentRows(ctx, session, 4)
	require.NoError(t, err)
	for _, r := range rows {
		got.Recent = append(got.Recent, fmt.Sprint(r.e.Key, "@", r.t))
	}
	scanned, err := d.rdb.QueryContext(ctx, sqlRecentScan, session, 4)
	rows, err = d.scanRecent(session, 4, scanned, err)
	require.NoError(t, err)
	for _, r := range rows {
		got.RecentScan = append(got.RecentScan, fmt.Sprint(r.e.Key, "@", r.t))
	}
	wm := memory.Watermark{Time: t0.Add(5 * time.Minute), Key: "m"}
	before, err := d.MessagesBefore(ctx, session, wm, 3)
	require.NoError(t, err)
	for _, m := range before {
		got.Before = append(got.Before, m.Key)
	}
	after, err := d.MessagesAfter(ctx, session, wm, 3)
	require.NoError(t, err)
	for _, m := range after {
		got.After = append(got.After, m.Key)
	}
	got.Count, err = d.CountAfter(ctx, session, wm)
	require.NoError(t, err)
	at, ok, err := d.NewestSessionEventTime(ctx, session, t0.Add(7*time.Minute))
	require.NoError(t, err)
	if ok {
		got.Newest = []string{fmt.Sprint(at.UnixMilli())}
	}
	recs, err := d.Records(ctx, RecordQuery{SessionKey: session})
	require.NoError(t, err)
	for _, r := range recs {
		got.Records = append(got.Records, r.ID)
	}
	err = d.rdb.QueryRowContext(ctx, sqlSearchFloor, session, 2).Scan(&got.Floor)
	if err != sql.ErrNoRows {
		require.NoError(t, err)
	}

	scan := func(q string, args ...any) []string { return queryStrings(t, d, q, args...) }
	want.Recent = scan(`SELECT id || '@' || event_time FROM (SELECT id, event_time, rowid AS r FROM message_events NOT INDEXED
WHERE session_key = ?1 ORDER BY event_time DESC, rowid DESC LIMIT 4) ORDER BY event_time, r`, session)
	want.RecentScan = want.Recent
	w := ms(wm.Time)
	want.Before = scan(`SELECT id FROM (SELECT * FROM message_events NOT INDEXED WHERE session_key = ?1
    AND direction <> 'notice' AND recalled_at IS NULL AND (event_time < ?2 OR (event_time = ?2 AND id < ?3))
ORDER BY event_time DESC, id DESC LIMIT 3) ORDER BY event_time, id`, session, w, wm.Key)
	want.After = scan(`SELECT id FROM message_events NOT INDEXED WHERE session_key = ?1 AND direction <> 'notice'
    AND (event_time > ?2 OR (event_time = ?2 AND id > ?3)) ORDER BY event_time, id LIMIT 3`, session, w, wm.Key)
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT count(*) FROM message_events NOT INDEXED
WHERE session_key = ?1 AND direction <> 'notice' AND (event_time > ?2 OR (event_time = ?2 AND id > ?3))`,
		session, w, wm.Key).Scan(&want.Count))
	want.Newest = scan(`SELECT max(event_time) FROM message_events NOT INDEXED WHERE session_key = ?1 AND event_time < ?2
HAVING count(*) > 0`, session, ms(t0.Add(7*time.Minute)))
	want.Records = scan(`SELECT i.id FROM inbound_items i JOIN message_events m NOT INDEXED ON m.rowid = i.rid
WHERE i.session_key = ?1 AND m.session_key = ?1 ORDER BY i.event_time, i.id`, session)
	// The search floor counts the tail's rows as the session's newest.
	err = d.rdb.QueryRowContext(ctx, `SELECT rowid FROM message_events NOT INDEXED WHERE session_key = ?1
ORDER BY rowid > (SELECT through FROM message_timeline_mark) DESC, event_time DESC, rowid DESC LIMIT 1 OFFSET 2`,
		session).Scan(&want.Floor)
	if err != sql.ErrNoRows {
		require.NoError(t, err)
	}
	return got, want
}

// TestTimelineReads checks every session read against a scan of the whole
// transcript while rows sit in the tail, after a flush, with a new tail,
// after rows below the mark change session or time or go, and after a new
// row takes a rowid below the mark.
func TestTimelineReads(t *testing.T) {
	t.Parallel()
	d := open(t, nil, noFlusher)
	ctx := t.Context()
	sessions := []string{timelineEvent("a", "x", 0).SessionKey, timelineEvent("b", "x", 0).SessionKey}
	check := func(stage string) {
		t.Helper()
		for _, s := range sessions {
			got, want := readSession(t, d, s)
			require.Equal(t, want, got, "%s, session %s", stage, s)
		}
	}
	write := func(chat, id string, minute int, dir memory.Direction) {
		t.Helper()
		ev := timelineEvent(chat, id, minute)
		if dir == memory.In {
			_, err := d.Enqueue(ctx, inbound.Item{Event: ev})
			require.NoError(t, err)
			return
		}
		require.NoError(t, d.Append(ctx, memory.Entry{Key: ev.Key(), SessionKey: ev.SessionKey, Direction: dir, Event: ev}))
	}
	// Equal times, notices and the bot's own messages, in both sessions.
	for i, minute := range []int{1, 3, 3, 5, 5, 6, 8} {
		write("a", fmt.Sprintf("m%d", i), minute, []memory.Direction{memory.In, memory.Out, memory.Notice}[i%3])
		write("b", fmt.Sprintf("k%d", i), 9-minute, memory.In)
	}
	require.Equal(t, 14, tailSize(t, d))
	check("all in the tail")

	require.NoError(t, d.flushTimeline(ctx))
	require.Zero(t, tailSize(t, d))
	check("all flushed")

	for i := range 3 {
		write("a", fmt.Sprintf("n%d", i), 7+i, memory.In)
	}
	require.Equal(t, 3, tailSize(t, d))
	check("a new tail")

	// A row of the tail moves to another session.
	tailMoved, tailOld := timelineEvent("b", "n1", 8), timelineEvent("a", "n1", 8)
	require.NoError(t, d.Append(ctx, memory.Entry{Key: tailOld.Key(), SessionKey: tailMoved.SessionKey,
		Direction: memory.In, Event: tailMoved}))
	require.Equal(t, 3, tailSize(t, d))
	check("a tail row moved")

	// Rows below the mark move: to another time, and to another session.
	moved := timelineEvent("a", "m1", 2)
	require.NoError(t, d.Append(ctx, memory.Entry{Key: moved.Key(), SessionKey: moved.SessionKey, Direction: memory.Out, Event: moved}))
	other, old := timelineEvent("b", "m3", 4), timelineEvent("a", "m3", 5)
	require.NoError(t, d.Append(ctx, memory.Entry{Key: old.Key(), SessionKey: other.SessionKey,
		Direction: memory.In, Event: other}))
	check("flushed rows moved")

	// A flushed row goes, and the largest rowid is taken again below the
	// mark (the tail is flushed first so that the largest row is flushed).
	require.NoError(t, d.flushTimeline(ctx))
	require.NoError(t, d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`DELETE FROM message_events WHERE rowid = (SELECT max(rowid) FROM message_events)`)
		return err
	}))
	check("a flushed row deleted")
	write("a", "reused", 4, memory.Out)
	require.Zero(t, tailSize(t, d), "the new row took a rowid below the mark")
	check("a rowid below the mark reused")
}

// TestTimelineFlusher: a store opened on a file with a tail flushes it at
// once, a full tail wakes the flusher, and a smaller one is flushed every
// period.
func TestTimelineFlusher(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "persona.db")
	d, err := Open(path, Options{noTimelineFlusher: true})
	require.NoError(t, err)
	ctx := t.Context()
	insert := func(d *DB, n, from int) {
		require.NoError(t, d.write(ctx, func(tx wtx) error {
			for i := range n {
				if err := insertEvent(tx, timelineEvent(fmt.Sprint(i%7), fmt.Sprint(from+i), i)); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	insert(d, 10, 0)
	require.NoError(t, d.Close())

	// A second handle lists the tail the first left.
	d, err = Open(path, Options{noTimelineFlusher: true})
	require.NoError(t, err)
	require.Equal(t, int64(10), d.w.tail.rows.Load(), "the tail left by the last handle is counted")
	for chat := range 7 {
		got, want := readSession(t, d, timelineEvent(fmt.Sprint(chat), "x", 0).SessionKey)
		require.Equal(t, want, got, "the tail left by the last handle is listed")
	}
	require.NoError(t, d.Close())

	// A third, whose flusher's period is an hour, so that only its wake-ups
	// flush: the tail found at open, then a full one.
	d, err = Open(path, Options{timelineEvery: time.Hour})
	require.NoError(t, err)
	tailEmpty := func() bool {
		var n int
		return d.rdb.QueryRowContext(ctx, sqlTailSize).Scan(&n) == nil && n == 0
	}
	require.Eventually(t, tailEmpty, 10*time.Second, 5*time.Millisecond)
	insert(d, timelineFlushRows, 10)
	require.Eventually(t, tailEmpty, 10*time.Second, 5*time.Millisecond)
	var entries int
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT count(*) FROM message_timeline`).Scan(&entries))
	require.Equal(t, timelineFlushRows+10, entries)
	require.Zero(t, d.w.tail.rows.Load())
	require.NoError(t, d.Close())

	// A fourth, with a short period, flushes a small tail on its own.
	d, err = Open(path, Options{timelineEvery: 5 * time.Millisecond})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	insert(d, 3, 10+timelineFlushRows)
	require.Eventually(t, tailEmpty, 10*time.Second, 5*time.Millisecond)
}

// TestTimelineFlushForgetsRolledBackRows: a row counted by a write that
// rolled back is not counted after the next flush, so an idle store does
// not flush an empty tail forever.
func TestTimelineFlushForgetsRolledBackRows(t *testing.T) {
	t.Parallel()
	d := open(t, nil, noFlusher)
	ctx := t.Context()
	failed := errors.New("the write fails after inserting")
	err := d.write(ctx, func(tx wtx) error {
		if err := insertEvent(tx, timelineEvent("a", "1", 1)); err != nil {
			return err
		}
		return failed
	})
	require.ErrorIs(t, err, failed)
	require.Equal(t, int64(1), d.w.tail.rows.Load(), "the insert was counted before it rolled back")
	require.Zero(t, tailSize(t, d))
	require.NoError(t, d.flushTimeline(ctx))
	require.Zero(t, d.w.tail.rows.Load())
}

// TestTimelineMigration: migration 0008 gives every existing transcript row
// its timeline entry, marks them all and drops the old index.
func TestTimelineMigration(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v7.db")
	raw := openAtVersion(t, path, 7)
	for i := range 20 {
		ev := timelineEvent(fmt.Sprint(i%3), fmt.Sprint(i), 20-i)
		r, err := newEventRow(ev.Key(), ev.SessionKey, &ev, memory.In, time.Time{}, ms(t0))
		require.NoError(t, err)
		_, err = raw.Exec(`INSERT INTO message_events (id, session_key, event_time, payload, direction, created_at)
VALUES (?1, ?2, ?3, ?4, 'in', 0)`, r.id, r.session, r.eventTime, string(r.payload))
		require.NoError(t, err)
	}
	require.NoError(t, raw.Close())

	d, err := Open(path, Options{noTimelineFlusher: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	ctx := context.Background()
	require.Zero(t, tailSize(t, d))
	var missing, extra, idx int
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT count(*) FROM message_events m
WHERE NOT EXISTS (SELECT 1 FROM message_timeline t WHERE t.session_key = m.session_key AND t.event_time = m.event_time AND t.rid = m.rowid)`).Scan(&missing))
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM message_timeline) - (SELECT count(*) FROM message_events)`).Scan(&extra))
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'message_events_session_time'`).Scan(&idx))
	require.Zero(t, missing)
	require.Zero(t, extra)
	require.Zero(t, idx, "the old session index is gone")
	for _, chat := range []string{"0", "1", "2"} {
		got, want := readSession(t, d, timelineEvent(chat, "x", 0).SessionKey)
		require.Equal(t, want, got)
	}
}

// TestTailCounterLists: the per-session lists of the tail's rows, their
// versions (which never repeat, even for a session forgotten and listed
// again) and the cut after a flush.
func TestTailCounterLists(t *testing.T) {
	t.Parallel()
	c := newTailCounter()
	ids, v0 := c.session("a")
	require.Equal(t, "[]", ids)
	require.Zero(t, v0)
	c.added("a", 5)
	c.added("b", 6)
	c.list("a", 7) // an update of a row that may have moved to a
	ids, v1 := c.session("a")
	require.Equal(t, "[5,7]", ids)
	require.NotEqual(t, v0, v1)
	require.Equal(t, int64(2), c.rows.Load(), "updates are listed, not counted")
	c.cut(6)
	ids, v2 := c.session("a")
	require.Equal(t, "[7]", ids)
	require.Equal(t, v1, v2, "a cut does not add")
	require.Zero(t, c.version("b"), "b is forgotten")
	c.added("b", 8)
	require.Greater(t, c.version("b"), v1, "a session listed again gets a new version")
	for i := range timelineFlushRows {
		c.added("c", int64(10+i))
	}
	select {
	case <-c.full:
	default:
		t.Fatal("a full tail wakes the flusher")
	}
}

// TestTimelineRecentWhileWriting: a reader never misses a row whose write
// returned before its read began, while rows are written and the tail is
// flushed concurrently.
func TestTimelineRecentWhileWriting(t *testing.T) {
	t.Parallel()
	d := open(t, nil, noFlusher)
	ctx := t.Context()
	session := timelineEvent("w", "x", 0).SessionKey
	const n = 300
	var committed atomic.Int64
	done := make(chan struct{})
	var g errgroup.Group
	g.Go(func() error {
		defer close(done)
		for i := 1; i <= n; i++ {
			ev := timelineEvent("w", fmt.Sprintf("r%03d", i), i)
			if err := d.Append(ctx, memory.Entry{Key: ev.Key(), SessionKey: session, Direction: memory.In, Event: ev}); err != nil {
				return err
			}
			committed.Store(int64(i))
			if i%25 == 0 {
				if err := d.flushTimeline(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
	for range 2 {
		g.Go(func() error {
			for {
				select {
				case <-done:
					return nil
				default:
				}
				want := committed.Load()
				rows, err := d.recentRows(ctx, session, 2)
				if err != nil {
					return err
				}
				if want == 0 {
					continue
				}
				if len(rows) == 0 {
					return fmt.Errorf("no rows after %d were written", want)
				}
				var got int64
				if _, err := fmt.Sscanf(rows[len(rows)-1].e.Event.MessageID, "r%d", &got); err != nil {
					return err
				}
				if got < want {
					return fmt.Errorf("newest row r%03d, but r%03d was written before the read", got, want)
				}
			}
		})
	}
	require.NoError(t, g.Wait())
}
