package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

// openAtVersion creates a database at path with the first version
// migrations applied and PRAGMA user_version set to it, and returns a plain
// connection to it (the caller closes it), for writing rows as that version
// stored them.
func openAtVersion(t *testing.T, path string, version int) *sql.DB {
	t.Helper()
	migs, err := loadMigrations(migrationFS)
	require.NoError(t, err)
	raw, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	for _, m := range migs[:version] {
		_, err := raw.Exec(m.SQL)
		require.NoError(t, err, m.Name)
	}
	_, err = raw.Exec(fmt.Sprintf("PRAGMA user_version = %d", version))
	require.NoError(t, err)
	return raw
}

// createVersion4 writes a database at schema version 4 holding the given
// queue items, each with its transcript row unless orphan lists its id, as
// version 4 stored them (queue rows keyed by their TEXT id).
func createVersion4(t *testing.T, path string, items []inbound.Item, status map[string]string, orphan map[string]bool) {
	t.Helper()
	raw := openAtVersion(t, path, 4)
	defer func() { require.NoError(t, raw.Close()) }()
	for i, it := range items {
		r, err := newEventRow(it.ID, it.SessionKey, &it.Event, memory.In, time.Time{}, ms(t0))
		require.NoError(t, err)
		if !orphan[it.ID] {
			// A row of another chat first, so that the transcript rowids
			// and the old queue rowids differ.
			_, err = raw.Exec(`INSERT INTO message_events (id, session_key, event_time, payload, direction, created_at)
VALUES (?1, 'other', 0, '{}', 'in', 0)`, "filler-"+it.ID)
			require.NoError(t, err)
			_, err = raw.Exec(`INSERT INTO message_events (id, session_key, platform, bot_id, chat_kind, chat_id,
    message_id, seq, sender_id, sender_name, event_time, text, payload, direction, created_at, search_tokens, search_sid)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, 'in', ?11, ?14, ?15)`,
				r.id, r.session, r.platform, r.botID, r.chatKind, r.chatID, r.messageID, r.seq, r.senderID,
				r.senderName, r.eventTime, r.text, r.payload, r.searchTokens, r.searchSID)
			require.NoError(t, err)
		}
		st := status[it.ID]
		var code any
		if st == "done" {
			code = string(outcome.Replied)
		}
		_, err = raw.Exec(`INSERT INTO inbound_items (id, session_key, chat_kind, sender_id, message_id, event_time,
    priority, status, attempts, claims, available_at, outcome, enqueued_at, created_at, updated_at)
VALUES (?1, ?2, 'group', ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10, ?9, ?9, ?9)`,
			it.ID, it.SessionKey, r.senderID, r.messageID, r.eventTime, it.Priority, st, i%2, ms(t0), code)
		require.NoError(t, err)
	}
}

func TestQueueMigrationKeysRowsByTranscriptRowid(t *testing.T) {
	t.Parallel()
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	var items []inbound.Item
	for i, id := range []string{"1", "2", "3", "4"} {
		ev := msgEvent(g, id, "u1", "Ann", "message "+id, t0.Add(time.Duration(i)*time.Second))
		items = append(items, inbound.Item{ID: ev.Key(), SessionKey: ev.SessionKey, Event: ev, Priority: 10 * i})
	}
	status := map[string]string{items[0].ID: "pending", items[1].ID: "done", items[2].ID: "pending", items[3].ID: "done"}
	orphan := map[string]bool{items[3].ID: true}
	path := filepath.Join(t.TempDir(), "v4.db")
	createVersion4(t, path, items, status, orphan)

	clk := clock.NewFake(t0.Add(time.Minute))
	d, err := Open(path, Options{Clock: clk})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	ctx := t.Context()

	// Every row survived, keyed by its transcript row's rowid; the orphan
	// (no transcript row) is kept under a negative key.
	for _, it := range items {
		var rid, mrid sql.NullInt64
		require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT rid FROM inbound_items WHERE id = ?`, it.ID).Scan(&rid))
		err := d.rdb.QueryRowContext(ctx, `SELECT rowid FROM message_events WHERE id = ?`, it.ID).Scan(&mrid)
		if orphan[it.ID] {
			require.ErrorIs(t, err, sql.ErrNoRows)
			require.Negative(t, rid.Int64)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, mrid, rid, it.ID)
	}
	recs, err := d.Records(ctx, RecordQuery{})
	require.NoError(t, err)
	require.Len(t, recs, 4)
	rec, err := d.Lookup(ctx, items[1].ID)
	require.NoError(t, err)
	require.Equal(t, outcome.Replied, rec.Outcome.Code)
	require.Equal(t, "message 2", rec.Text)

	// The pending items are claimable in priority order and complete by id.
	ls, err := d.Claim(ctx, inbound.Limits{Max: 10, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, items[2].ID, ls[0].ID)
	require.Equal(t, items[0].ID, ls[1].ID)
	require.Equal(t, "message 3", ls[0].Event.Text())
	for _, l := range ls {
		require.NoError(t, d.Complete(ctx, l, inbound.Outcome{Code: outcome.SupersededRepeat, Reason: "test"}))
	}
	counts, err := d.CountOutcomes(ctx)
	require.NoError(t, err)
	require.Equal(t, map[outcome.Code]int{outcome.Replied: 2, outcome.SupersededRepeat: 2}, counts)

	// New items go under their transcript rowid; a repeated delivery is
	// still a no-op.
	ev := msgEvent(g, "5", "u2", "Bob", "message 5", t0.Add(time.Hour))
	ok, err := d.Enqueue(ctx, inbound.Item{Event: ev})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = d.Enqueue(ctx, inbound.Item{Event: ev})
	require.NoError(t, err)
	require.False(t, ok)
	var rid, mrid int64
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT rid FROM inbound_items WHERE id = ?`, ev.Key()).Scan(&rid))
	require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT rowid FROM message_events WHERE id = ?`, ev.Key()).Scan(&mrid))
	require.Equal(t, mrid, rid)
}

// TestLedgerMigrationMovesDrafts: migration 0007 moves each turn's draft
// into the delivery ledger as slot -1, next to its chunk slots, which stay
// as they were.
func TestLedgerMigrationMovesDrafts(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v6.db")
	raw := openAtVersion(t, path, 6)
	dr := outbound.Draft{TurnID: "turn-1", SessionKey: "s", Code: outcome.Replied, Reason: "why",
		Chunks: []outbound.Chunk{{Text: "hello"}, {Text: "again"}}}
	body, err := json.Marshal(dr)
	require.NoError(t, err)
	_, err = raw.Exec(`INSERT INTO turn_drafts (turn_id, draft, created_at) VALUES ('turn-1', ?, 1)`, string(body))
	require.NoError(t, err)
	_, err = raw.Exec(`INSERT INTO delivery_ledger (turn_id, slot, fingerprint, state, platform_message_ids, sent_at, created_at, updated_at)
VALUES ('turn-1', 0, 'fp0', 'sent', '["m1"]', 5, 2, 5), ('turn-1', 1, 'fp1', 'intent', NULL, NULL, 3, 3)`)
	require.NoError(t, err)
	require.NoError(t, raw.Close())

	d, err := Open(path, Options{Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	ctx := t.Context()
	got, ok, err := d.LoadDraft(ctx, "turn-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, dr, got)
	slots, err := d.Slots(ctx, "turn-1")
	require.NoError(t, err)
	require.Len(t, slots, 2, "the draft is not a slot")
	require.Equal(t, outbound.SlotSent, slots[0].State)
	require.Equal(t, []string{"m1"}, slots[0].MessageIDs)
	require.Equal(t, "fp1", slots[1].Fingerprint)
	require.ErrorIs(t, d.MarkIntent(ctx, "turn-1", -1, "x"), ErrInvalid, "slot -1 is the draft's")
	require.ErrorIs(t, d.ClearIntent(ctx, "turn-1", -1), ErrInvalid)
	// A later draft does not replace the first one.
	again, err := d.SaveDraft(ctx, outbound.Draft{TurnID: "turn-1", Reason: "other"})
	require.NoError(t, err)
	require.Equal(t, dr, again)
}

// TestCheckListMigration: migration 0009 rewrites the CHECK constraints
// that tested membership in a list of three or more constants as
// comparisons. Stored rows stay, the constraints accept and reject the
// same values, the writes no longer build an ephemeral table, and a
// connection that read the old schema before the migration sees the new
// one (the runner increments schema_version).
func TestCheckListMigration(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v8.db")
	raw := openAtVersion(t, path, 8)
	defer func() { require.NoError(t, raw.Close()) }()
	raw.SetMaxOpenConns(1)
	_, err := raw.Exec(`INSERT INTO message_events (id, session_key, event_time, payload, direction, created_at)
VALUES ('m1', 's', 1, '{}', 'in', 1), ('m2', 's', 2, '{}', 'out', 2)`)
	require.NoError(t, err)
	_, err = raw.Exec(`INSERT INTO inbound_items (rid, id, session_key, chat_kind, event_time, status, available_at,
    outcome, enqueued_at, created_at, updated_at)
VALUES (1, 'm1', 's', 'group', 1, 'done', 1, 'replied', 1, 1, 1)`)
	require.NoError(t, err)
	_, err = raw.Exec(`INSERT INTO delivery_ledger (turn_id, slot, fingerprint, state, created_at, updated_at)
VALUES ('turn', 0, 'fp', 'sent', 1, 1)`)
	require.NoError(t, err)
	insertItem := `INSERT INTO inbound_items (rid, id, session_key, chat_kind, event_time, status, available_at,
    enqueued_at, created_at, updated_at) VALUES (?1, ?2, 's', 'group', 1, ?3, 1, 1, 1, 1)`
	ops := func(db *sql.DB, q string) []string {
		all, err := explain(db, q)
		require.NoError(t, err)
		return all
	}
	require.Contains(t, ops(raw, insertItem), "OpenEphemeral", "version 8 builds the list on every insert")

	d, err := Open(path, Options{Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	ctx := t.Context()

	var schema string
	require.NoError(t, d.rdb.QueryRowContext(ctx,
		`SELECT group_concat(sql, ';') FROM sqlite_schema WHERE name IN ('message_events', 'inbound_items', 'delivery_ledger', 'memory_items', 'memory_jobs')`).Scan(&schema))
	require.False(t, inList3.MatchString(schema), schema)
	for _, want := range []string{
		`CHECK (direction = 'in' OR direction = 'out' OR direction = 'notice')`,
		`CHECK (status = 'pending' OR status = 'leased' OR status = 'done')`,
		`CHECK (state = 'draft' OR state = 'intent' OR state = 'sent')`,
		`CHECK (scope = 'user' OR scope = 'group' OR scope = 'private' OR scope = 'global')`,
		`CHECK (kind = 'fact' OR kind = 'preference' OR kind = 'relation' OR kind = 'episode' OR kind = 'instruction')`,
		`CHECK (status = 'active' OR status = 'superseded' OR status = 'forgotten')`,
		`CHECK (status = 'pending' OR status = 'leased' OR status = 'done' OR status = 'failed' OR status = 'cancelled')`,
		`CHECK (chat_kind IN ('group', 'private'))`, // two values are compared directly: left as it was
	} {
		require.Contains(t, schema, want)
	}
	var check string
	require.NoError(t, d.rdb.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check))
	require.Equal(t, "ok", check)
	rec, err := d.Lookup(ctx, "m1")
	require.NoError(t, err)
	require.Equal(t, outcome.Replied, rec.Outcome.Code)
	slots, err := d.Slots(ctx, "turn")
	require.NoError(t, err)
	require.Len(t, slots, 1)

	// The old connection reloads the schema when it next runs a statement
	// (EXPLAIN alone compiles with the schema it has): the constraints
	// accept exactly what they accepted, and no list is built.
	for i, status := range []string{"pending", "leased", "done"} {
		_, err := raw.Exec(insertItem, 10+i, fmt.Sprint("ok-", i), status)
		require.NoError(t, err, status)
	}
	require.NotContains(t, ops(raw, insertItem), "OpenEphemeral")
	for i, status := range []string{"Done", "", "failed"} {
		_, err := raw.Exec(insertItem, 20+i, fmt.Sprint("bad-", i), status)
		require.ErrorContains(t, err, "CHECK constraint failed", status)
	}
	for table, bad := range map[string]string{
		"message_events":  `INSERT INTO message_events (id, session_key, event_time, payload, direction, created_at) VALUES ('x', 's', 1, '{}', 'sideways', 1)`,
		"delivery_ledger": `INSERT INTO delivery_ledger (turn_id, slot, fingerprint, state, created_at, updated_at) VALUES ('t', 1, '', 'lost', 1, 1)`,
		"memory_jobs": `INSERT INTO memory_jobs (message_key, session_key, status, available_at, created_at, updated_at)
VALUES ('k', 's', 'waiting', 1, 1, 1)`,
		"memory_items": `INSERT INTO memory_items (scope, key, kind, content, event_time, source_type, confidence, importance,
    status, created_at, updated_at) VALUES ('user', 'k', 'rumour', 'c', 1, 'explicit', 1, 1, 'active', 1, 1)`,
	} {
		_, err := raw.Exec(bad)
		require.ErrorContains(t, err, "CHECK constraint failed", table)
	}
}

// TestQueueFloorMigration: migration 0010 starts the queue floor at the
// lowest live rid (an orphan's negative one included), so the store opened
// after it loads every live row, and a store without live rows starts the
// floor past its rows.
func TestQueueFloorMigration(t *testing.T) {
	t.Parallel()
	insert := func(raw *sql.DB, rid int, status string) {
		t.Helper()
		_, err := raw.Exec(`INSERT INTO inbound_items (rid, id, session_key, chat_kind, event_time, status, available_at,
    enqueued_at, created_at, updated_at, lease_owner, lease_until)
VALUES (?1, ?2, 's', 'group', ?1, ?3, 0, 0, 0, 0, CASE ?3 WHEN 'leased' THEN 'w' END, CASE ?3 WHEN 'leased' THEN 1 END)`,
			rid, fmt.Sprint("item-", rid), status)
		require.NoError(t, err)
	}
	path := filepath.Join(t.TempDir(), "v9.db")
	raw := openAtVersion(t, path, 9)
	for rid, status := range map[int]string{1: "done", 2: "done", 3: "pending", 4: "leased", 5: "done", -7: "pending"} {
		insert(raw, rid, status)
	}
	require.NoError(t, raw.Close())
	d, err := Open(path, Options{Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	require.Equal(t, int64(-7), floor(t, d))
	requireFloorBelowLive(t, d, "after the migration")
	recs, err := d.Records(t.Context(), RecordQuery{Status: inbound.StatusPending})
	require.NoError(t, err)
	leased, err := d.Records(t.Context(), RecordQuery{Status: inbound.StatusLeased})
	require.NoError(t, err)
	var got []string
	for _, r := range append(recs, leased...) {
		got = append(got, r.ID)
	}
	require.ElementsMatch(t, []string{"item--7", "item-3", "item-4"}, got)
	require.NoError(t, d.Close())

	path = filepath.Join(t.TempDir(), "v9-done.db")
	raw = openAtVersion(t, path, 9)
	insert(raw, 1, "done")
	insert(raw, 2, "done")
	require.NoError(t, raw.Close())
	d, err = Open(path, Options{Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	require.Equal(t, int64(3), floor(t, d))
}
