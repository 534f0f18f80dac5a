package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/inbound/queuetest"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// open opens a store in a fresh temporary directory.
func open(t testing.TB, clk clock.Clock, opts ...func(*Options)) *DB {
	t.Helper()
	o := Options{Clock: clk}
	for _, f := range opts {
		f(&o)
	}
	d, err := Open(filepath.Join(t.TempDir(), "persona.db"), o)
	require.NoError(t, err)
	t.Cleanup(func() {
		if !t.Failed() {
			requireNoEphemeralTables(t, d)
		}
		require.NoError(t, d.Close())
	})
	return d
}

func direct(o *Options) { o.directWrites = true }

// queryStrings runs a read on the read pool and returns its one column of
// every row.
func queryStrings(t testing.TB, d *DB, q string, args ...any) []string {
	t.Helper()
	out, err := selectAll(t.Context(), d, "test query", func(sc interface{ Scan(...any) error }) (string, error) {
		var s string
		err := sc.Scan(&s)
		return s, err
	}, q, args...)
	require.NoError(t, err, q)
	return out
}

func TestQueueConformance(t *testing.T) {
	t.Parallel()
	modes := []struct {
		name string
		opts []func(*Options)
	}{
		{"group-commit", nil},
		{"direct", []func(*Options){direct}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			queuetest.Run(t, func(t *testing.T, clk *clock.Fake) inbound.Queue {
				return open(t, clk, m.opts...)
			})
		})
	}
}

// writerQuery runs a read on the writer connection (pragmas that are per
// connection).
func writerQuery(t *testing.T, d *DB, q string, dest ...any) {
	t.Helper()
	require.NoError(t, d.write(t.Context(), func(tx wtx) error { return tx.queryRow(q).Scan(dest...) }))
}

func TestOpenSettings(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		sync SyncMode
		want int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{
		{"normal", SyncNormal, 1},
		{"full", SyncFull, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := open(t, nil, func(o *Options) { o.Synchronous = tc.sync; o.BusyTimeout = 2 * time.Second })
			var mode string
			require.NoError(t, d.rdb.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode))
			require.Equal(t, "wal", mode, "reader sees WAL")
			writerQuery(t, d, "PRAGMA journal_mode", &mode)
			require.Equal(t, "wal", mode)
			var n int
			writerQuery(t, d, "PRAGMA synchronous", &n)
			require.Equal(t, tc.want, n)
			writerQuery(t, d, "PRAGMA foreign_keys", &n)
			require.Equal(t, 1, n)
			writerQuery(t, d, "PRAGMA busy_timeout", &n)
			require.Equal(t, 2000, n)
			writerQuery(t, d, "PRAGMA cache_size", &n)
			require.Equal(t, -writerCacheKiB, n, "the writer's page cache stays small (see Open)")
			require.NoError(t, d.rdb.QueryRowContext(t.Context(), "PRAGMA query_only").Scan(&n))
			require.Equal(t, 1, n, "readers are read-only")
			require.Equal(t, DefaultReadConns, d.rdb.Stats().MaxOpenConnections)
		})
	}
}

func TestOpenRejectsBadPaths(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", ":memory:", "file:x.db?mode=memory"} {
		_, err := Open(p, Options{})
		require.ErrorIs(t, err, ErrInvalid, p)
	}
	_, err := Open(filepath.Join(t.TempDir(), "missing", "dir", "x.db"), Options{})
	require.Error(t, err)
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "persona.db")
	for range 3 { // opening an up-to-date database again is a no-op
		d, err := Open(path, Options{})
		require.NoError(t, err)
		var v int
		require.NoError(t, d.rdb.QueryRowContext(t.Context(), "PRAGMA user_version").Scan(&v))
		require.Equal(t, SchemaVersion(), v)
		require.Positive(t, v)
		require.NoError(t, d.Close())
	}

	// A database from a newer build is refused, untouched.
	raw, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	_, err = raw.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion()+1))
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	_, err = Open(path, Options{})
	require.ErrorIs(t, err, ErrSchemaTooNew)
}

func TestLoadMigrationsValidatesNames(t *testing.T) {
	t.Parallel()
	ms, err := loadMigrations(migrationFS)
	require.NoError(t, err)
	for i, m := range ms {
		require.Equal(t, i+1, m.Version)
		require.NotEmpty(t, m.SQL)
	}
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "persona.db")
	clk := clock.NewFake(t0)
	d, err := Open(path, Options{Clock: clk})
	require.NoError(t, err)
	ev := testEvent(channel.Group, "g1", "1", t0, "persisted")
	ok, err := d.Enqueue(t.Context(), inbound.Item{Event: ev, Priority: inbound.PriorityDirect})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, d.SetFlag(t.Context(), gate.Flag{SessionKey: ev.SessionKey, Name: "pause", Until: t0.Add(time.Hour)}))
	require.NoError(t, d.SaveCheckpoint(t.Context(), "bot", t0))
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "a second Close is a no-op")

	d, err = Open(path, Options{Clock: clk})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	r, err := d.Lookup(t.Context(), ev.Key())
	require.NoError(t, err)
	require.Equal(t, "persisted", r.Text)
	require.Equal(t, inbound.PriorityDirect, r.Priority)
	_, ok, err = d.GetFlag(t.Context(), ev.SessionKey, "", "pause")
	require.NoError(t, err)
	require.True(t, ok)
	at, ok, err := d.LoadCheckpoint(t.Context(), "bot")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, t0.Equal(at))
	ls, err := d.Claim(t.Context(), inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, "persisted", ls[0].Event.Text())
}

func TestClosedStore(t *testing.T) {
	t.Parallel()
	for _, mode := range []func(*Options){func(*Options) {}, direct} {
		o := Options{}
		mode(&o)
		d, err := Open(filepath.Join(t.TempDir(), "x.db"), o)
		require.NoError(t, err)
		require.NoError(t, d.Close())
		_, err = d.Enqueue(t.Context(), inbound.Item{Event: testEvent(channel.Group, "g", "1", t0, "x")})
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, d.SetFlag(t.Context(), gate.Flag{SessionKey: "s", Name: "n"}), ErrClosed)
	}
}

// enqueue enqueues the events as plain items, in order, failing the test on
// an error.
func enqueue(t testing.TB, d *DB, evs ...channel.Event) {
	t.Helper()
	for _, ev := range evs {
		_, err := d.Enqueue(t.Context(), inbound.Item{Event: ev})
		require.NoError(t, err)
	}
}

func testEvent(kind channel.ChatKind, chat, id string, at time.Time, text string) channel.Event {
	ev := channel.Event{
		Platform: "test", BotID: "bot", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: kind, ID: chat}, MessageID: id, Time: at,
		Sender:   channel.Sender{ID: "u" + id, Name: "User " + id},
		Segments: []channel.Segment{channel.Text(text)},
	}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
	return ev
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()

	noSession := testEvent(channel.Group, "g", "1", t0, "x")
	noSession.SessionKey = ""
	badRaw := testEvent(channel.Group, "g", "2", t0, "x")
	badRaw.Raw = []byte("{not json")
	cases := []struct {
		name string
		it   inbound.Item
	}{
		{"zero item", inbound.Item{}},
		{"no session key", inbound.Item{Event: noSession}},
		{"id but no session", inbound.Item{ID: "id"}},
		{"unencodable raw payload", inbound.Item{Event: badRaw}},
	}
	for _, tc := range cases {
		ok, err := d.Enqueue(ctx, tc.it)
		require.ErrorIs(t, err, ErrInvalid, tc.name)
		require.False(t, ok)
		ok, err = d.Record(ctx, tc.it, inbound.Outcome{Code: outcome.Replied})
		require.ErrorIs(t, err, ErrInvalid, tc.name)
		require.False(t, ok)
	}
	recs, err := d.Records(ctx, RecordQuery{})
	require.NoError(t, err)
	require.Empty(t, recs, "nothing stored")

	// An invalid outcome code is refused and the lease stays held.
	ev := testEvent(channel.Group, "g", "3", t0, "x")
	enqueue(t, d, ev)
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	for _, code := range []outcome.Code{"", "Not Valid"} {
		require.ErrorIs(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: code}), ErrInvalid)
	}
	require.NoError(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied}))
	require.ErrorIs(t, d.Extend(ctx, nil, time.Minute), ErrInvalid)

	require.ErrorIs(t, d.Append(ctx, memory.Entry{Event: noSession}), ErrInvalid)
	require.ErrorIs(t, d.Append(ctx, memory.Entry{Event: ev, Direction: "sideways"}), ErrInvalid)
	_, err = d.SaveDraft(ctx, outbound.Draft{})
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, d.MarkIntent(ctx, "", 0, "fp"), ErrInvalid)
	require.ErrorIs(t, d.MarkSent(ctx, "", 0, nil, t0), ErrInvalid)
	require.ErrorIs(t, d.SetFlag(ctx, gate.Flag{}), ErrInvalid)
	require.ErrorIs(t, d.SaveCheckpoint(ctx, "bot", time.Time{}), ErrInvalid)
}

func TestEnqueueWritesTranscript(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	ev := testEvent(channel.Private, "42", "7", t0.Add(-time.Second), "hi there")
	ev.Seq = 99
	enqueue(t, d, ev)

	var (
		session, platform, bot, kind, chat, mid, sender, name, text, dir string
		seq, evTime, created                                             int64
	)
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT session_key, platform, bot_id, chat_kind, chat_id,
message_id, seq, sender_id, sender_name, event_time, text, direction, created_at FROM message_events WHERE id = ?`,
		ev.Key()).Scan(&session, &platform, &bot, &kind, &chat, &mid, &seq, &sender, &name, &evTime, &text, &dir, &created))
	require.Equal(t, []any{ev.SessionKey, "test", "bot", "private", "42", "7", int64(99), "u7", "User 7", ev.Time.UnixMilli(), "hi there", "in", t0.UnixMilli()},
		[]any{session, platform, bot, kind, chat, mid, seq, sender, name, evTime, text, dir, created})

	// A second enqueue refreshes the payload but keeps created_at.
	clk.Advance(time.Minute)
	ev.Segments = []channel.Segment{channel.Text("edited")}
	ok, err := d.Enqueue(ctx, inbound.Item{Event: ev})
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT text, created_at FROM message_events WHERE id = ?`,
		ev.Key()).Scan(&text, &created))
	require.Equal(t, "edited", text)
	require.Equal(t, t0.UnixMilli(), created)
	var n int
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT count(*) FROM message_events`).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT count(*) FROM inbound_items`).Scan(&n))
	require.Equal(t, 1, n)

	// The event-center view.
	var code sql.NullString
	var attempts int
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT code, attempts FROM inbound_events WHERE id = ?`,
		ev.Key()).Scan(&code, &attempts))
	require.False(t, code.Valid)
	require.Zero(t, attempts)
}

func TestRecordDirection(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	ctx := t.Context()
	notice := testEvent(channel.Group, "g", "", t0, "")
	notice.Kind = channel.KindNotice
	notice.Notice = &channel.Notice{Type: channel.NoticeGroupRecall, TargetMessageID: "5"}
	msg := testEvent(channel.Private, "p", "1", t0, "let me in")
	for _, tc := range []struct {
		ev   channel.Event
		want string
	}{{notice, "notice"}, {msg, "in"}} {
		ok, err := d.Record(ctx, inbound.Item{Event: tc.ev}, inbound.Outcome{Code: outcome.Notice("group_recall")})
		require.NoError(t, err)
		require.True(t, ok)
		var dir string
		require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT direction FROM message_events WHERE id = ?`,
			tc.ev.Key()).Scan(&dir))
		require.Equal(t, tc.want, dir)
	}
}

func TestRecordsAndCounts(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()

	_, ok, err := d.NewestEventTime(ctx)
	require.NoError(t, err)
	require.False(t, ok)

	var evs []channel.Event
	for i := range 5 {
		ev := testEvent(channel.Group, []string{"a", "b"}[i%2], fmt.Sprint(i), t0.Add(time.Duration(5-i)*time.Second), "m")
		evs = append(evs, ev)
		enqueue(t, d, ev)
	}
	_, err = d.Record(ctx, inbound.Item{Event: testEvent(channel.Group, "a", "r", t0, "m")},
		inbound.Outcome{Code: inbound.IgnoredStale})
	require.NoError(t, err)
	ls, err := d.Claim(ctx, inbound.Limits{Max: 2, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 2)
	for _, l := range ls {
		require.NoError(t, d.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied}))
	}

	all, err := d.Records(ctx, RecordQuery{})
	require.NoError(t, err)
	require.Len(t, all, 6)
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		require.True(t, a.EventTime.Before(b.EventTime) || a.EventTime.Equal(b.EventTime) && a.ID < b.ID, "ordered")
	}
	sessA, err := d.Records(ctx, RecordQuery{SessionKey: evs[0].SessionKey})
	require.NoError(t, err)
	require.Len(t, sessA, 4)
	pending, err := d.Records(ctx, RecordQuery{Status: inbound.StatusPending, Limit: 2})
	require.NoError(t, err)
	require.Len(t, pending, 2)
	for _, r := range pending {
		require.Equal(t, inbound.StatusPending, r.Status)
	}

	counts, err := d.CountOutcomes(ctx)
	require.NoError(t, err)
	require.Equal(t, map[outcome.Code]int{outcome.Replied: 2, inbound.IgnoredStale: 1}, counts)

	newest, ok, err := d.NewestEventTime(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, t0.Add(5*time.Second).Equal(newest))
}

func TestCompleteStageIsMonotone(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	ev := testEvent(channel.Group, "g", "1", t0, "x")
	enqueue(t, d, ev)
	// Simulate a stage recorded earlier (an echo that came back first).
	require.NoError(t, d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`UPDATE inbound_items SET delivery_stage = 'acknowledged' WHERE id = ?`, ev.Key())
		return err
	}))
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.NoError(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied, Stage: inbound.StageFailed}))
	r, err := d.Lookup(ctx, ev.Key())
	require.NoError(t, err)
	require.Equal(t, inbound.StageAcknowledged, r.Outcome.Stage, "failed never overwrites acknowledged")
}

func TestHistory(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	sess := channel.SessionKey("", "test", "bot", channel.Chat{Kind: channel.Group, ID: "g"})

	// Appended out of time order; two share an event time.
	times := []time.Duration{3, 1, 2, 2, 5}
	var keys []string
	for i, s := range times {
		ev := testEvent(channel.Group, "g", fmt.Sprint(i), t0.Add(s*time.Second), fmt.Sprint("m", i))
		require.NoError(t, d.Append(ctx, memory.Entry{Event: ev}))
		keys = append(keys, ev.Key())
	}
	self := testEvent(channel.Group, "g", "me", t0.Add(4*time.Second), "bot reply")
	self.Kind = channel.KindSelf
	require.NoError(t, d.Append(ctx, memory.Entry{Event: self}))
	other := testEvent(channel.Group, "other", "x", t0, "elsewhere")
	require.NoError(t, d.Append(ctx, memory.Entry{Event: other}))

	got, err := d.Recent(ctx, sess, 100)
	require.NoError(t, err)
	var order []string
	for _, e := range got {
		order = append(order, e.Event.Text())
		require.Equal(t, sess, e.SessionKey)
	}
	require.Equal(t, []string{"m1", "m2", "m3", "m0", "bot reply", "m4"}, order, "event time, then insertion")
	require.Equal(t, memory.Out, got[4].Direction)
	require.Equal(t, memory.In, got[0].Direction)

	got, err = d.Recent(ctx, sess, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"m0", "bot reply", "m4"}, []string{got[0].Event.Text(), got[1].Event.Text(), got[2].Event.Text()})
	got, err = d.Recent(ctx, sess, 0)
	require.NoError(t, err)
	require.Empty(t, got)

	// Upsert by key: payload replaced, position (created_at, insertion) kept.
	clk.Advance(time.Hour)
	ev := testEvent(channel.Group, "g", "2", t0.Add(2*time.Second), "m2 edited")
	require.NoError(t, d.Append(ctx, memory.Entry{Event: ev}))
	got, err = d.Recent(ctx, sess, 100)
	require.NoError(t, err)
	require.Len(t, got, 6)
	require.Equal(t, "m2 edited", got[1].Event.Text())
	var created int64
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT created_at FROM message_events WHERE id = ?`, ev.Key()).Scan(&created))
	require.Equal(t, t0.UnixMilli(), created)

	// Recall.
	require.NoError(t, d.MarkRecalled(ctx, keys[1], t0.Add(time.Minute)))
	require.NoError(t, d.MarkRecalled(ctx, "unknown-key", t0), "unknown keys are ignored")
	got, err = d.Recent(ctx, sess, 100)
	require.NoError(t, err)
	require.True(t, t0.Add(time.Minute).Equal(got[0].RecalledAt))
	require.True(t, got[1].RecalledAt.IsZero())
	// A later Append without a recall time keeps it.
	require.NoError(t, d.Append(ctx, memory.Entry{Event: testEvent(channel.Group, "g", "1", t0.Add(time.Second), "m1 again")}))
	got, err = d.Recent(ctx, sess, 100)
	require.NoError(t, err)
	require.True(t, t0.Add(time.Minute).Equal(got[0].RecalledAt))
}

func TestLedger(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()

	_, ok, err := d.LoadDraft(ctx, "turn")
	require.NoError(t, err)
	require.False(t, ok)
	first := outbound.Draft{TurnID: "turn", SessionKey: "s", Chat: channel.Chat{Kind: channel.Group, ID: "g"},
		Chunks: []outbound.Chunk{{Text: "one"}, {Text: "two", ReplyTo: "9", Mentions: []string{"u1"}}},
		Code:   outcome.Replied, Reason: "r"}
	got, err := d.SaveDraft(ctx, first)
	require.NoError(t, err)
	require.Equal(t, first, got)
	second := first
	second.Chunks = []outbound.Chunk{{Text: "regenerated"}}
	got, err = d.SaveDraft(ctx, second)
	require.NoError(t, err)
	require.Equal(t, first, got, "the first draft wins")
	got, ok, err = d.LoadDraft(ctx, "turn")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, first, got)

	slots, err := d.Slots(ctx, "turn")
	require.NoError(t, err)
	require.Empty(t, slots)

	require.NoError(t, d.MarkIntent(ctx, "turn", 1, "fp1"))
	require.NoError(t, d.MarkIntent(ctx, "turn", 0, "fp0"))
	require.NoError(t, d.MarkIntent(ctx, "turn", 0, "fp0"), "repeating an intent is fine")
	require.ErrorIs(t, d.MarkIntent(ctx, "turn", 0, "other"), ErrFingerprintMismatch)
	require.NoError(t, d.MarkSent(ctx, "turn", 0, []string{"m1", "m2"}, t0.Add(time.Second)))
	require.NoError(t, d.MarkIntent(ctx, "turn", 0, "fp0"), "never downgrades a sent slot")

	slots, err = d.Slots(ctx, "turn")
	require.NoError(t, err)
	require.Equal(t, []outbound.Slot{
		{TurnID: "turn", N: 0, Fingerprint: "fp0", State: outbound.SlotSent, MessageIDs: []string{"m1", "m2"}, SentAt: t0.Add(time.Second)},
		{TurnID: "turn", N: 1, Fingerprint: "fp1", State: outbound.SlotIntent, IntentAt: t0},
	}, slots)

	// ClearIntent removes intents only.
	require.NoError(t, d.ClearIntent(ctx, "turn", 1))
	require.NoError(t, d.ClearIntent(ctx, "turn", 0))
	require.NoError(t, d.ClearIntent(ctx, "turn", 7))
	slots, err = d.Slots(ctx, "turn")
	require.NoError(t, err)
	require.Len(t, slots, 1)
	require.Equal(t, outbound.SlotSent, slots[0].State)

	// MarkSent without an intent still records the delivery.
	require.NoError(t, d.MarkSent(ctx, "turn2", 3, nil, time.Time{}))
	slots, err = d.Slots(ctx, "turn2")
	require.NoError(t, err)
	require.Len(t, slots, 1)
	require.Equal(t, outbound.SlotSent, slots[0].State)
	require.True(t, t0.Equal(slots[0].SentAt))
	require.Empty(t, slots[0].MessageIDs)
}

func TestFlags(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	ctx := t.Context()
	cases := []gate.Flag{
		{SessionKey: "s", Subject: "", Name: "stop", Until: t0.Add(10 * time.Minute)},
		{SessionKey: "s", Subject: "u1", Name: "pause", Until: t0.Add(30 * time.Minute), Value: "3"},
		{SessionKey: "s", Subject: "text", Name: "lane", Value: `{"failures":2}`},
	}
	for _, f := range cases {
		_, ok, err := d.GetFlag(ctx, f.SessionKey, f.Subject, f.Name)
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, d.SetFlag(ctx, f))
		got, ok, err := d.GetFlag(ctx, f.SessionKey, f.Subject, f.Name)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, f.Value, got.Value)
		require.True(t, f.Until.Equal(got.Until), "until %s vs %s", f.Until, got.Until)
	}
	// Replace.
	f := cases[1]
	f.Until, f.Value = t0.Add(time.Minute), "4"
	require.NoError(t, d.SetFlag(ctx, f))
	got, _, err := d.GetFlag(ctx, "s", "u1", "pause")
	require.NoError(t, err)
	require.Equal(t, "4", got.Value)
	require.True(t, got.Active(t0))
	require.False(t, got.Active(t0.Add(time.Minute)))
	// Clear one; the others stay.
	require.NoError(t, d.ClearFlag(ctx, "s", "u1", "pause"))
	require.NoError(t, d.ClearFlag(ctx, "s", "u1", "pause"))
	_, ok, err := d.GetFlag(ctx, "s", "u1", "pause")
	require.NoError(t, err)
	require.False(t, ok)
	_, ok, err = d.GetFlag(ctx, "s", "", "stop")
	require.NoError(t, err)
	require.True(t, ok)
}

func TestCheckpoints(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	ctx := t.Context()
	_, ok, err := d.LoadCheckpoint(ctx, "bot")
	require.NoError(t, err)
	require.False(t, ok)
	for _, at := range []time.Time{t0, t0.Add(30 * time.Second), t0.Add(-time.Hour)} {
		require.NoError(t, d.SaveCheckpoint(ctx, "bot", at))
		got, ok, err := d.LoadCheckpoint(ctx, "bot")
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, at.Equal(got))
	}
	_, ok, err = d.LoadCheckpoint(ctx, "other")
	require.NoError(t, err)
	require.False(t, ok)
}

// TestGroupCommitIsolatesFailures submits many writes at once, half of which
// fail after writing: the failures roll back only themselves.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	ctx := t.Context()
	errBoom := errors.New("boom")
	const n = 200
	var wg sync.WaitGroup
	results := make([]error, n)
	for i := range n {
		wg.Go(func() {
			results[i] = d.write(ctx, func(tx wtx) error {
				if _, err := tx.exec(`INSERT INTO checkpoints (bot, at, updated_at) VALUES (?, 1, 1)`, fmt.Sprint(i)); err != nil {
					return err
				}
				if i%2 == 1 {
					return errBoom
				}
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range results {
		if i%2 == 1 {
			require.ErrorIs(t, err, errBoom)
		} else {
			require.NoError(t, err)
		}
	}
	for i := range n {
		_, ok, err := d.LoadCheckpoint(ctx, fmt.Sprint(i))
		require.NoError(t, err)
		require.Equal(t, i%2 == 0, ok, "op %d", i)
	}

	// A panicking op is an error, not a crash, and the writer keeps going.
	err := d.write(ctx, func(wtx) error { panic("bad op") })
	require.ErrorContains(t, err, "panicked")
	require.NoError(t, d.SaveCheckpoint(ctx, "after", t0))

	// An SQL error inside a batch is that op's own error.
	err = d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`INSERT INTO no_such_table VALUES (1)`)
		return err
	})
	require.Error(t, err)

	// A cancelled context is not run.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	err = d.write(cctx, func(wtx) error { ran = true; return nil })
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, ran)
}

func TestConcurrentReadersAndWriters(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				ev := testEvent(channel.Group, fmt.Sprint("g", w), fmt.Sprint(i), t0, "x")
				enqueue(t, d, ev)
				_, err := d.Recent(ctx, ev.SessionKey, 10)
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	recs, err := d.Records(ctx, RecordQuery{})
	require.NoError(t, err)
	require.Len(t, recs, 200)
}

// TestClaimSkipsFullSessions: one session's backlog at the front of the
// queue does not crowd out the others: a claim takes that session's free
// slots and then the items behind it, in claim order, whatever the
// backlog; a second claim finds nothing while the busy session is full.
func TestClaimSkipsFullSessions(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	var busy []string
	for i := range 100 {
		ev := testEvent(channel.Group, "busy", fmt.Sprint(i), t0.Add(time.Duration(i)*time.Millisecond), "x")
		_, err := d.Enqueue(ctx, inbound.Item{Event: ev, Priority: inbound.PriorityDirect})
		require.NoError(t, err)
		busy = append(busy, ev.Key())
	}
	var quiet []string
	for i := range 3 {
		ev := testEvent(channel.Group, fmt.Sprint("quiet", i), "q", t0, "x")
		_, err := d.Enqueue(ctx, inbound.Item{Event: ev, Priority: inbound.PriorityOther})
		require.NoError(t, err)
		quiet = append(quiet, ev.Key())
	}
	limits := inbound.Limits{Max: 8, Owner: "w"}
	first, err := d.Claim(ctx, limits)
	require.NoError(t, err)
	require.Equal(t, append(busy[:inbound.DefaultPerGroup:inbound.DefaultPerGroup], quiet...), ids(first),
		"the busy session's free slots, then the quiet sessions")
	second, err := d.Claim(ctx, limits)
	require.NoError(t, err)
	require.Empty(t, second, "the busy session is full")
	require.NoError(t, d.Complete(ctx, first[0], inbound.Outcome{Code: outcome.Replied}))
	third, err := d.Claim(ctx, limits)
	require.NoError(t, err)
	require.Equal(t, busy[3:4], ids(third), "one slot freed, one item claimed")
}

func ids(ls []inbound.Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.ID
	}
	return out
}

// TestWALRestart exercises the path the writer takes when the background
// checkpointer reports an oversized WAL: the WAL is copied back and starts
// over, so the next commit's frames are the only ones in it.
func TestWALRestart(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	ctx := t.Context()
	for i := range 20 {
		require.NoError(t, d.SaveCheckpoint(ctx, fmt.Sprint("bot", i), t0))
	}
	d.w.ckpt.stop() // no background checkpoint competing for the lock
	walFrames := func() int64 {
		var busy, frames, done int64
		require.NoError(t, d.cdb.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done))
		return frames
	}
	// (No checkpoint yet: the migrations and 20 commits fill the WAL.)
	d.w.ckpt.tooBig.Store(true)
	require.NoError(t, d.SaveCheckpoint(ctx, "after", t0))
	require.False(t, d.w.ckpt.tooBig.Load())
	require.LessOrEqual(t, walFrames(), int64(4), "the WAL started over: only the last commit's frames")
	_, ok, err := d.LoadCheckpoint(ctx, "bot7")
	require.NoError(t, err)
	require.True(t, ok)
	fi, err := os.Stat(d.Path() + "-wal")
	require.NoError(t, err)
	require.LessOrEqual(t, fi.Size(), int64(walSoftLimit), "the WAL file is never kept above the limit")
}

// TestCommitDelayUnderLoad: with the longest commit delay, concurrent
// writers in a steady trickle all commit, each within the delay of its
// batch, and no write is lost.
func TestCommitDelayUnderLoad(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0), func(o *Options) { o.CommitDelay = time.Hour })
	require.Equal(t, MaxCommitDelay, d.w.delay, "capped")
	ctx := t.Context()
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := range 40 {
				require.NoError(t, d.SaveCheckpoint(ctx, fmt.Sprintf("bot%d-%d", w, i), t0))
			}
		})
	}
	wg.Wait()
	require.Greater(t, d.w.batches.Load(), int64(0))
	for w := range 3 {
		for i := range 40 {
			_, ok, err := d.LoadCheckpoint(ctx, fmt.Sprintf("bot%d-%d", w, i))
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
}
