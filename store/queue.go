package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
)

// itemRow is a prepared inbound_items insert.
type itemRow struct {
	ev       eventRow
	chatKind string
	source   string
	avail    int64
	priority int
	history  bool
}

// prepareItem validates and completes it, and encodes its rows.
func (d *DB) prepareItem(it *inbound.Item, dir memory.Direction, now int64) (itemRow, error) {
	if err := it.Normalize(); err != nil {
		return itemRow{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ev, err := d.eventRow(it.ID, it.SessionKey, &it.Event, dir, time.Time{}, now)
	if err != nil {
		return itemRow{}, err
	}
	r := itemRow{ev: ev, chatKind: string(it.LimitKind()), source: string(it.Event.Source), avail: now,
		priority: it.Priority, history: it.HistoryOnly}
	if r.source == "" {
		r.source = string(channel.SourceLive)
	}
	if !it.AvailableAt.IsZero() {
		r.avail = ms(it.AvailableAt)
	}
	return r, nil
}

const sqlInsertItem = `
INSERT INTO inbound_items (rid, id, session_key, chat_kind, sender_id, message_id, event_time, seq, source,
    history_only, priority, status, attempts, available_at, enqueued_at, created_at, updated_at)
VALUES (?13, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', 0, ?11, ?12, ?12, ?12)
ON CONFLICT (rid) DO NOTHING`

// sqlRaisePriority applies a repeated delivery to a still-pending item: the
// higher priority wins, and an item that is not history-only (a live
// delivery) ends the history-only mark a backfill that saw the message first
// gave it.
const sqlRaisePriority = `
UPDATE inbound_items SET priority = max(priority, ?2), history_only = min(history_only, ?4), updated_at = ?3
WHERE rid = ?1 AND status = 'pending' AND (priority < ?2 OR history_only > ?4)`

// Enqueue implements inbound.Queue (a repeated delivery of a pending item
// raises its priority and, unless itself history-only, clears its
// history-only mark). It fills it.ID from it.Event.Key() and
// it.SessionKey from it.Event.SessionKey when they are empty and rejects an
// item that still has no session key (ErrInvalid). In one transaction it
// upserts the message_events row (direction "in") and inserts the
// inbound_items row; for an existing item it raises a still-pending row's
// priority to max(old, new) and returns false. The history row is keyed by
// the item id, the queue row by the history row's rowid.
func (d *DB) Enqueue(ctx context.Context, it inbound.Item) (bool, error) {
	now := d.now()
	r, err := d.prepareItem(&it, memory.In, now)
	if err != nil {
		return false, err
	}
	// The event as a claim (and Recent) would decode it from the row, kept
	// so neither has to.
	var held *channel.Event
	if ev, err := storedEvent(&it.Event); err == nil {
		held = &ev
	}
	var enqueued bool
	err = d.writeThen(ctx, func(tx wtx) error {
		enqueued = false
		if err := upsertEvent(tx, &r.ev, now); err != nil {
			return err
		}
		res, err := tx.exec(sqlInsertItem, it.ID, it.SessionKey, r.chatKind, r.ev.senderID, r.ev.messageID,
			r.ev.eventTime, r.ev.seq, r.source, r.history, r.priority, r.avail, now, r.ev.rowid)
		if err != nil {
			return err
		}
		if affected(res) == 1 {
			enqueued = true
			return nil
		}
		if d.sched.softLeased(it.ID) {
			return nil // leased, though the row does not show it yet (see Claim)
		}
		_, err = tx.exec(sqlRaisePriority, r.ev.rowid, r.priority, now, r.history)
		return err
	}, func() {
		d.hist.upsert(histEntryOf(&r.ev, held), held != nil)
		// The claim index follows the queue in commit order (see sched.go).
		if enqueued {
			d.sched.add(&schedItem{
				id: it.ID, rid: r.ev.rowid, session: it.SessionKey, private: r.chatKind == string(channel.Private), priority: r.priority,
				eventTime: r.ev.eventTime, history: r.history, availableAt: r.avail, ev: held, size: len(r.ev.payload),
			}, now)
		} else {
			d.sched.raise(it.ID, r.priority, r.history, held, len(r.ev.payload), now)
		}
	})
	if err != nil {
		return false, fmt.Errorf("store: enqueue %s: %w", it.ID, err)
	}
	if held != nil {
		d.events.put(it.ID, r.ev.payload, held)
	}
	if r.ev.searchTokens != "" {
		d.kickSearchIndex()
	}
	return enqueued, nil
}

const sqlInsertDone = `
INSERT INTO inbound_items (rid, id, session_key, chat_kind, sender_id, message_id, event_time, seq, source,
    history_only, priority, status, attempts, available_at, enqueued_at, created_at, updated_at,
    outcome, reason, delivery_stage, outbound_ids, merged_into, gates_done_at, generation_start_at,
    generation_end_at, first_send_at, first_ack_at, tokens, kind, completed_at, trail, completed_seq)
VALUES (?25, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'done', 0, ?11, ?12, ?12, ?12,
    ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?12, ?26, ` + sqlNextCompletedSeq + `)`

// sqlNextCompletedSeq numbers a record becoming done (migration 0011).
const sqlNextCompletedSeq = `(SELECT coalesce(max(completed_seq), 0) + 1 FROM inbound_items WHERE completed_seq IS NOT NULL)`

// sqlItemExists tells whether the item with id ?1 has a queue row.
const sqlItemExists = `SELECT EXISTS (SELECT 1 FROM inbound_items WHERE ` + itemByID + `)`

// itemByID selects the queue row of the item with id ?1 through the
// transcript's id index (migration 0005: the queue row is keyed by its
// transcript row's rowid).
const itemByID = `rid = (SELECT rowid FROM message_events WHERE id = ?1)`

// outcomeRow is an encoded inbound.Outcome.
type outcomeRow struct {
	code, reason, stage, outbound, merged, tokens, kind any
	gates, genStart, genEnd, firstSend, firstAck        any
	trail                                               any
}

// encodeOutcome validates and encodes o.
func encodeOutcome(o *inbound.Outcome) (outcomeRow, error) {
	if !o.Code.Valid() {
		return outcomeRow{}, fmt.Errorf("%w: outcome code %q", ErrInvalid, o.Code)
	}
	r := outcomeRow{
		code: string(o.Code), reason: nullStr(o.Reason), stage: nullStr(string(o.Stage)),
		merged: nullStr(o.MergedInto), kind: nullStr(o.Kind),
		gates: nullMs(o.Timings.GatesDone), genStart: nullMs(o.Timings.GenerationStart),
		genEnd: nullMs(o.Timings.GenerationEnd), firstSend: nullMs(o.Timings.FirstSend),
		firstAck: nullMs(o.Timings.FirstAck),
	}
	// The same bytes as json.Marshal, without reflection (see eventjson.go).
	if len(o.OutboundIDs) > 0 {
		r.outbound = string(appendStringsJSON(nil, o.OutboundIDs))
	}
	if len(o.Tokens) > 0 {
		r.tokens = string(appendTokensJSON(make([]byte, 0, 96*len(o.Tokens)), o.Tokens))
	}
	if o.Trail != nil {
		b, err := json.Marshal(o.Trail)
		if err != nil {
			return outcomeRow{}, fmt.Errorf("encode trail: %w", err)
		}
		r.trail = string(b)
	}
	return r, nil
}

// Record implements inbound.Queue: it stores an item that is done from the
// start, with its outcome and its message_events row (direction "notice" for
// a notice event, "out" for the bot's own message, else "in"). It is
// idempotent: when the item already exists nothing changes and it returns
// false.
func (d *DB) Record(ctx context.Context, it inbound.Item, o inbound.Outcome) (bool, error) {
	now := d.now()
	dir := memory.In
	switch it.Event.Kind {
	case channel.KindNotice:
		dir = memory.Notice
	case channel.KindSelf:
		dir = memory.Out
	}
	r, err := d.prepareItem(&it, dir, now)
	if err != nil {
		return false, err
	}
	or, err := encodeOutcome(&o)
	if err != nil {
		return false, fmt.Errorf("store: record %s: %w", it.ID, err)
	}
	held, herr := storedEvent(&it.Event)
	var inserted bool
	err = d.writeThen(ctx, func(tx wtx) error {
		inserted = false
		var exists bool
		if err := tx.queryRow(sqlItemExists, it.ID).Scan(&exists); err != nil {
			return clean(err)
		}
		if exists {
			return nil
		}
		if err := upsertEvent(tx, &r.ev, now); err != nil {
			return err
		}
		if _, err := tx.exec(sqlInsertDone, it.ID, it.SessionKey, r.chatKind, r.ev.senderID, r.ev.messageID,
			r.ev.eventTime, r.ev.seq, r.source, r.history, r.priority, r.avail, now,
			or.code, or.reason, or.stage, or.outbound, or.merged, or.gates, or.genStart, or.genEnd,
			or.firstSend, or.firstAck, or.tokens, or.kind, r.ev.rowid, or.trail); err != nil {
			return err
		}
		inserted = true
		return nil
	}, func() {
		if inserted {
			d.hist.upsert(histEntryOf(&r.ev, &held), herr == nil)
		}
	})
	if err != nil {
		return false, fmt.Errorf("store: record %s: %w", it.ID, err)
	}
	if inserted && herr == nil {
		d.events.put(it.ID, r.ev.payload, &held)
	}
	if inserted && r.ev.searchTokens != "" {
		d.kickSearchIndex()
	}
	return inserted, nil
}

// Claim implements inbound.Queue: it leases up to limits.Max claimable
// items (pending and available, or leased with an expired lease) in the
// order priority DESC, event time, id, skipping sessions at their
// in-flight limit (limits.PerGroup, default 3; limits.PerPrivate, default
// 2; the session kind is the stored chat kind; unexpired leases count).
// Each lease lasts limits.Lease (default inbound.DefaultLease), counts one
// attempt and clears the previous attempt's outcome and reason. The leases
// are returned in claim order with their decoded events. Limits.Max ≤ 0
// claims nothing.
//
// The choice is made on the DB's in-memory claim index (see sched.go), so
// it costs the same whatever the backlog, and concurrent claims never pick
// the same item.
//
// The claims of items with a priority of at least limits.HoldBelow are
// stored, all in one write, before Claim returns. The others are held in
// memory (inbound.Lease.Held): the index has them and Lookup and Records
// show them, and the row gets the claim with the lease's first operation
// (Extend, Complete, Retry, Snooze, Release), which writes the claim and
// its own change in one statement; ReleaseExpired writes back expired
// held leases, and Close the ones still held. A held claim whose first
// operation ends it (a turn the gates stop, say) then costs one queue
// write (its completion) instead of two. A process that dies holding such
// a lease leaves the row as it was before the claim: the item is
// claimable at once when the file is opened again, and
// that attempt is not counted (a stored lease of a process that dies is
// freed by the next Open too, its attempt counted; see Open). A holder
// about to do something that could kill the process (call a model, send)
// makes the attempt durable first by extending the lease. The pipeline
// holds no claims (it sets no HoldBelow): every claim it makes is stored
// before any stage runs.
//
// Lease operations (Extend, Complete, Retry, Snooze, Release) succeed only
// while the item is leased to l.Owner with l.Claims claims; every claim
// increments the claims, so a holder whose lease expired and was claimed
// again, even under the same owner name, gets inbound.ErrLeaseLost. The
// row's claims count fences the write, so a lease written behind this
// DB's back (no other DB can have the file open, but a plain SQLite
// connection can write it) makes the DB's own operation fail instead of
// doubling it.
func (d *DB) Claim(ctx context.Context, limits inbound.Limits) ([]inbound.Lease, error) {
	if limits.Max <= 0 {
		return nil, nil
	}
	perGroup, perPrivate, lease := limits.PerGroup, limits.PerPrivate, limits.Lease
	if perGroup <= 0 {
		perGroup = inbound.DefaultPerGroup
	}
	if perPrivate <= 0 {
		perPrivate = inbound.DefaultPerPrivate
	}
	if lease <= 0 {
		lease = inbound.DefaultLease
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := d.now()
	until := now + lease.Milliseconds()
	got := d.sched.claim(now, until, limits.Owner, limits.Max, perPrivate, perGroup)
	if len(got) == 0 {
		return nil, nil
	}
	// Events first: while every lease is still held in memory, a failure
	// takes them all back.
	var payloads map[int64][]byte
	for _, c := range got {
		if c.ev == nil {
			var err error
			if payloads, err = d.readPayloads(ctx, got); err != nil {
				d.sched.unclaim(got, now)
				return nil, fmt.Errorf("store: claim: %w", err)
			}
			break
		}
	}
	var store []claimedItem
	for _, c := range got {
		if c.priority >= limits.HoldBelow {
			store = append(store, c)
		}
	}
	if len(store) > 0 {
		lost, err := d.storeClaims(ctx, store, limits.Owner, now)
		if err != nil {
			d.sched.unclaim(got, now)
			return nil, fmt.Errorf("store: claim: %w", err)
		}
		if len(lost) > 0 {
			got = slices.DeleteFunc(got, func(c claimedItem) bool { return lost[c.id] })
		}
	}
	leases := make([]inbound.Lease, 0, len(got))
	for _, c := range got {
		l := inbound.Lease{
			Item: inbound.Item{ID: c.id, SessionKey: c.session, Priority: c.priority, HistoryOnly: c.history,
				AvailableAt: fromMs(c.availableAt)},
			Owner: limits.Owner, Until: fromMs(until), Attempts: c.attempts, Claims: c.claims,
			Held: c.priority < limits.HoldBelow, Orphaned: d.orphaned(c.id),
		}
		if c.ev != nil {
			l.Event = *c.ev
		} else if p := payloads[c.rid]; len(p) > 0 {
			ev, err := d.events.decode(c.id, p)
			if err != nil {
				// The lease is held; report it with what is known rather than
				// stranding it until expiry.
				d.log.Error("store: undecodable event payload", "id", c.id, "err", err)
			} else {
				l.Event = ev
			}
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// storeClaims writes the claims of items just leased by sched.claim (soft
// leases of owner) in one write, making them ordinary leases. It returns
// the items a write from outside the store changed behind the index (their
// rows' claims moved on): those are not leased, and the index re-reads them. On error
// nothing was written and the items are still soft leases.
func (d *DB) storeClaims(ctx context.Context, items []claimedItem, owner string, now int64) (map[string]bool, error) {
	ids := make([]string, 0, len(items))
	held := make([]softLease, 0, len(items))
	for _, c := range items {
		sl, isSoft, pinned, ok, _ := d.sched.pinLease(c.id, owner, c.claims)
		if !isSoft || !pinned || !ok {
			continue // cannot happen: nothing else knows the lease yet
		}
		ids, held = append(ids, c.id), append(held, sl)
	}
	done, err := d.storeHeld(ctx, ids, held, now)
	if err != nil {
		return nil, err
	}
	var lost map[string]bool
	for i, id := range ids {
		if !done[i] {
			if lost == nil {
				lost = map[string]bool{}
			}
			lost[id] = true
		}
	}
	if len(lost) > 0 {
		d.refresh(ctx, slices.Collect(maps.Keys(lost)))
	}
	return lost, nil
}

// storeHeld writes soft leases pinned by the caller into their rows, in one
// write: each written one becomes an ordinary lease in the index (done[i]),
// the others (the row moved on behind the index, or the write failed) are
// unpinned as they were.
func (d *DB) storeHeld(ctx context.Context, ids []string, held []softLease, now int64) (done []bool, err error) {
	done = make([]bool, len(ids))
	err = d.writeThen(ctx, func(tx wtx) error {
		for i, sl := range held {
			res, err := tx.exec(sqlWriteSoft, "leased", sl.owner, sl.claims, sl.leaseUntil, now, sl.attempts,
				nullMs0(sl.firstClaim), sl.rid, sl.dbClaims)
			if err != nil {
				return err
			}
			done[i] = affected(res) == 1
		}
		return nil
	}, func() {
		for i, id := range ids {
			if done[i] {
				d.sched.leaseChanged(id, held[i].claims, false, true, 0, held[i].leaseUntil, 0, now)
			}
		}
	})
	for i, id := range ids {
		if err != nil || !done[i] {
			d.sched.unpin(id, held[i].claims, now)
		}
	}
	return done, err
}

// readPayloads reads the stored events of the claimed items the index does
// not hold, by transcript rowid.
func (d *DB) readPayloads(ctx context.Context, got []claimedItem) (map[int64][]byte, error) {
	var rids []int64
	for _, c := range got {
		if c.ev == nil {
			rids = append(rids, c.rid)
		}
	}
	js, err := json.Marshal(rids)
	if err != nil {
		return nil, err
	}
	rows, err := d.rdb.QueryContext(ctx, `SELECT rowid, payload FROM message_events
WHERE rowid IN (SELECT value FROM json_each(?))`, string(js))
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := make(map[int64][]byte, len(rids))
	for rows.Next() {
		var (
			rid int64
			p   []byte
		)
		if err := rows.Scan(&rid, &p); err != nil {
			return nil, err
		}
		out[rid] = p
	}
	return out, rows.Err()
}

// sqlLiveItem reads one item for the claim index, with sqlLoadLive's
// columns (see scanLive).
const sqlLiveItem = `SELECT id, session_key, chat_kind, priority, event_time, history_only, available_at,
    status, coalesce(lease_until, 0), claims, rid, attempts FROM inbound_items WHERE ` + itemByID + ` AND status IN ('pending', 'leased')`

// refresh re-reads items whose state the claim index got wrong (a claim's
// guard rejected them) and indexes them as the table has them. The reads
// run inside a write operation and the index is updated by its post-commit
// hook, so no commit lands between the read and the update. A failure is
// logged: the next reload (ReleaseExpired, or the next Open) repairs the
// index.
func (d *DB) refresh(ctx context.Context, ids []string) {
	var rows []*schedItem
	err := d.writeThen(ctx, func(tx wtx) error {
		rows = rows[:0]
		for _, id := range ids {
			it, err := scanLive(tx.queryRow(sqlLiveItem, id))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return clean(err)
			}
			rows = append(rows, it)
		}
		return nil
	}, func() { d.sched.replace(ids, rows, d.now()) })
	if err != nil {
		d.log.Warn("store: claim index refresh failed", "ids", ids, "err", err)
	}
}

// leaseOp runs a lease operation on the item of lease l. The claim index
// is asked first: a lease it knows to be stale fails with
// inbound.ErrLeaseLost at once, and a lease it holds is pinned until the
// write lands (no claim takes the item meanwhile, even if the lease
// expires). A lease the row already has is updated by q (args after ?1 id,
// ?2 owner, ?3 claims), guarded by leaseHeld. A soft lease (see Claim) is
// written whole by the statement soft builds, guarded by the row's claims
// count.
//
// after updates the claim index; it runs after the commit, in commit order,
// and only when the operation succeeded.
func (d *DB) leaseOp(ctx context.Context, op string, l *inbound.Lease, after func(), q string, args []any,
	soft func(sl softLease) (string, []any)) error {
	var (
		sl                 softLease
		isSoft, pinned, ok bool
	)
	for {
		var wait <-chan struct{}
		sl, isSoft, pinned, ok, wait = d.sched.pinLease(l.ID, l.Owner, l.Claims)
		if wait == nil {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("store: %s %s: %w", op, l.ID, ctx.Err())
		}
	}
	if !ok {
		return fmt.Errorf("store: %s %s: %w", op, l.ID, inbound.ErrLeaseLost)
	}
	if isSoft {
		q, args = soft(sl)
	} else {
		args = append([]any{l.ID, l.Owner, l.Claims}, args...)
	}
	err := d.writeThen(ctx, func(tx wtx) error {
		res, err := tx.exec(q, args...)
		if err != nil {
			return err
		}
		if affected(res) == 0 {
			return clean(inbound.ErrLeaseLost)
		}
		return nil
	}, after)
	if err != nil {
		if pinned {
			d.sched.unpin(l.ID, l.Claims, d.now())
			if errors.Is(err, inbound.ErrLeaseLost) {
				// The row moved on behind the index's back.
				d.refresh(ctx, []string{l.ID})
			}
		}
		return fmt.Errorf("store: %s %s: %w", op, l.ID, err)
	}
	return nil
}

// leaseHeld is the condition every lease operation on a lease the row has
// shares; ?1 id, ?2 owner, ?3 claims.
const leaseHeld = ` WHERE ` + itemByID + ` AND status = 'leased' AND lease_owner = ?2 AND claims = ?3`

// softHeld is the condition of a write that puts a soft lease into the row:
// the row is live and has the claims count the index last wrote. Its
// parameters follow the statement's own.
func softHeld(rid, dbClaims int) string {
	return fmt.Sprintf(` WHERE rid = ?%d AND claims = ?%d AND status IN ('pending', 'leased')`, rid, dbClaims)
}

// softClaim sets the claim columns of a soft lease: ?3 claims, then
// attempts and the first claim time at the given parameters.
func softClaim(attempts, firstClaim int) string {
	return fmt.Sprintf(`claims = ?3, attempts = ?%d, first_claimed_at = coalesce(first_claimed_at, ?%d)`,
		attempts, firstClaim)
}

const sqlExtend = `UPDATE inbound_items SET lease_until = ?4, updated_at = ?5` + leaseHeld

var sqlExtendSoft = `UPDATE inbound_items SET status = 'leased', lease_owner = ?2, lease_until = ?4, updated_at = ?5,
    outcome = NULL, reason = NULL, merged_into = NULL, ` + softClaim(6, 7) + softHeld(8, 9)

// softArgs lists a soft statement's parameters: ?1 id, ?2 owner, ?3
// claims, args, then the attempts, the first claim time, the row and its
// claims count.
func softArgs(l *inbound.Lease, sl softLease, args ...any) []any {
	out := append([]any{l.ID, l.Owner, l.Claims}, args...)
	return append(out, sl.attempts, nullMs0(sl.firstClaim), sl.rid, sl.dbClaims)
}

// nullMs0 is a unix-millisecond time, NULL for zero.
func nullMs0(t int64) any {
	if t == 0 {
		return nil
	}
	return t
}

// Extend implements inbound.Queue: it moves the lease's expiry to now + dur
// (dur ≤ 0 means inbound.DefaultLease) and updates l.Until. It fails with
// inbound.ErrLeaseLost, changing nothing, unless l is the current lease.
// The first Extend of a held lease (see Claim) writes the claim and clears
// l.Held.
func (d *DB) Extend(ctx context.Context, l *inbound.Lease, dur time.Duration) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", ErrInvalid)
	}
	if dur <= 0 {
		dur = inbound.DefaultLease
	}
	now := d.now()
	until := now + dur.Milliseconds()
	after := func() { d.sched.leaseChanged(l.ID, l.Claims, false, true, 0, until, 0, now) }
	soft := func(sl softLease) (string, []any) { return sqlExtendSoft, softArgs(l, sl, until, now) }
	if err := d.leaseOp(ctx, "extend", l, after, sqlExtend, []any{until, now}, soft); err != nil {
		return err
	}
	l.Until, l.Held = fromMs(until), false
	return nil
}

// stageRank orders delivery stages; a stage is only replaced by one of a
// higher rank (failed outranks send_attempted but not acknowledged).
const stageRank = `CASE %s WHEN 'generated' THEN 1 WHEN 'send_attempted' THEN 2 WHEN 'failed' THEN 3
    WHEN 'acknowledged' THEN 4 WHEN 'echo_persisted' THEN 5 ELSE 0 END`

var sqlCompleteSet = `UPDATE inbound_items SET
    status = 'done', lease_until = NULL, outcome = ?4, reason = ?5,
    delivery_stage = CASE WHEN ` + fmt.Sprintf(stageRank, "?6") + ` >= ` + fmt.Sprintf(stageRank, "delivery_stage") + `
        THEN ?6 ELSE delivery_stage END,
    outbound_ids = coalesce(?7, outbound_ids), merged_into = ?8,
    gates_done_at = coalesce(?9, gates_done_at), generation_start_at = coalesce(?10, generation_start_at),
    generation_end_at = coalesce(?11, generation_end_at), first_send_at = coalesce(?12, first_send_at),
    first_ack_at = coalesce(?13, first_ack_at), tokens = coalesce(?14, tokens), kind = ?15,
    completed_at = ?16, updated_at = ?16, trail = coalesce(?17, trail),
    completed_seq = ` + sqlNextCompletedSeq

var (
	sqlComplete     = sqlCompleteSet + leaseHeld
	sqlCompleteSoft = sqlCompleteSet + `, lease_owner = ?2, ` + softClaim(18, 19) + softHeld(20, 21)
)

// Complete implements inbound.Queue: the item becomes done with the
// outcome's code, reason, delivery stage (never moved backwards), outbound
// ids, merge target, timings, tokens and kind; completed_at is now. o.Code
// must be a valid outcome code (ErrInvalid otherwise). Only the current
// lease holder may complete (inbound.ErrLeaseLost). A soft lease's claim
// is written by the same statement.
func (d *DB) Complete(ctx context.Context, l inbound.Lease, o inbound.Outcome) error {
	or, err := encodeOutcome(&o)
	if err != nil {
		return fmt.Errorf("store: complete %s: %w", l.ID, err)
	}
	now := d.now()
	after := func() { d.sched.leaseChanged(l.ID, l.Claims, true, false, 0, 0, 0, now) }
	args := []any{or.code, or.reason, or.stage, or.outbound, or.merged,
		or.gates, or.genStart, or.genEnd, or.firstSend, or.firstAck, or.tokens, or.kind, now, or.trail}
	soft := func(sl softLease) (string, []any) { return sqlCompleteSoft, softArgs(&l, sl, args...) }
	err = d.leaseOp(ctx, "complete", &l, after, sqlComplete, args, soft)
	if err == nil {
		d.settled(l.ID)
	}
	return err
}

const sqlRetrySet = `UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL,
    available_at = ?4, last_error = ?6, updated_at = ?7`

const sqlRetry = sqlRetrySet + `, attempts = max(attempts - ?5, 0)` + leaseHeld

// sqlRetrySoft writes a soft lease's claim and ends it like sqlRetry; ?8
// is the lease's attempts less the one given back.
var sqlRetrySoft = sqlRetrySet + `, outcome = NULL, reason = NULL, merged_into = NULL, ` + softClaim(8, 9) +
	softHeld(10, 11)

// Retry implements inbound.Queue: the item returns to pending, claimable
// from at (zero = now), its attempt stays counted and cause's text is kept
// as last_error.
func (d *DB) Retry(ctx context.Context, l inbound.Lease, at time.Time, cause error) error {
	now := d.now()
	var msg any
	if cause != nil {
		msg = cause.Error()
	}
	return d.backToPending(ctx, "retry", &l, availAt(at, now), 0, msg, now)
}

// Snooze implements inbound.Queue: like Retry, but the attempt is given back
// (attempts − 1); reason is kept as last_error.
func (d *DB) Snooze(ctx context.Context, l inbound.Lease, at time.Time, reason string) error {
	now := d.now()
	return d.backToPending(ctx, "snooze", &l, availAt(at, now), 1, nullStr(reason), now)
}

// backToPending ends lease l with the item pending from avail, giving back
// giveBack (0 or 1) attempts and keeping lastErr.
func (d *DB) backToPending(ctx context.Context, op string, l *inbound.Lease, avail int64, giveBack int, lastErr any,
	now int64) error {
	after := func() { d.sched.leaseChanged(l.ID, l.Claims, false, false, avail, 0, -giveBack, now) }
	soft := func(sl softLease) (string, []any) {
		sl.attempts = max(sl.attempts-giveBack, 0)
		return sqlRetrySoft, softArgs(l, sl, avail, giveBack, lastErr, now)
	}
	err := d.leaseOp(ctx, op, l, after, sqlRetry, []any{avail, giveBack, lastErr, now}, soft)
	if err == nil {
		d.settled(l.ID)
	}
	return err
}

const sqlRelease = `UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL,
    available_at = ?4, attempts = max(attempts - 1, 0), updated_at = ?4` + leaseHeld

var sqlReleaseSoft = `UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL,
    available_at = ?4, updated_at = ?4, outcome = NULL, reason = NULL, merged_into = NULL, ` + softClaim(5, 6) +
	softHeld(7, 8)

// Release implements inbound.Queue: the item is pending and claimable at
// once, and the attempt is given back.
func (d *DB) Release(ctx context.Context, l inbound.Lease) error {
	now := d.now()
	after := func() { d.sched.leaseChanged(l.ID, l.Claims, false, false, now, 0, -1, now) }
	soft := func(sl softLease) (string, []any) {
		sl.attempts = max(sl.attempts-1, 0)
		return sqlReleaseSoft, softArgs(&l, sl, now)
	}
	err := d.leaseOp(ctx, "release", &l, after, sqlRelease, []any{now}, soft)
	if err == nil {
		d.settled(l.ID)
	}
	return err
}

func availAt(at time.Time, now int64) int64 {
	if at.IsZero() {
		return now
	}
	return ms(at)
}

const sqlReleaseExpired = `UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL,
    updated_at = ?1
WHERE ` + sqlFromQueueFloor + ` AND status = 'leased' AND lease_until <= ?1`

// sqlFromQueueFloor selects the inbound_items rows that may be live: no
// row below the queue floor is (migration 0010).
const sqlFromQueueFloor = `rid >= (SELECT rid FROM queue_floor)`

// sqlAdvanceQueueFloor raises the queue floor to the lowest live rid, or
// past every row when none is live. It scans from the old floor to the
// first live row: the rows that completed since the last advance. Run in
// a write, it sees that write's own new rows, so it never passes one.
const sqlAdvanceQueueFloor = `UPDATE queue_floor SET rid = coalesce(
    (SELECT i.rid FROM inbound_items i WHERE i.rid >= queue_floor.rid AND i.status IN ('pending', 'leased')
        ORDER BY i.rid LIMIT 1),
    (SELECT max(i.rid) + 1 FROM inbound_items i WHERE i.rid >= queue_floor.rid),
    rid)`

// sqlWriteSoft puts a soft lease into its row as it stands: ?1 status,
// ?2 owner, ?3 claims, ?4 lease_until, ?5 now.
var sqlWriteSoft = `UPDATE inbound_items SET status = ?1, lease_owner = ?2, lease_until = ?4, updated_at = ?5,
    outcome = NULL, reason = NULL, merged_into = NULL, ` + softClaim(6, 7) + softHeld(8, 9)

// ReleaseExpired implements inbound.Queue: every item whose lease has
// expired becomes pending again (its attempts stay counted). Expired soft
// leases (see Claim) are written back with their claims and attempts.
func (d *DB) ReleaseExpired(ctx context.Context) (int, error) {
	now := d.now()
	var (
		n, hard int64
		ids     []string
		soft    []softLease
		ok      []bool
	)
	err := d.writeThen(ctx, func(tx wtx) error {
		n, hard = 0, 0
		if ids == nil {
			ids, soft = d.sched.pinSoft(now)
			ok = make([]bool, len(ids))
		}
		// The held leases first: a row whose expired lease was claimed again
		// in memory is released by its held lease's write, not counted twice.
		for i, sl := range soft {
			res, err := tx.exec(sqlWriteSoft, "pending", nil, sl.claims, nil, now, sl.attempts, nullMs0(sl.firstClaim),
				sl.rid, sl.dbClaims)
			if err != nil {
				return err
			}
			ok[i] = affected(res) == 1
			if ok[i] {
				n++
			}
		}
		res, err := tx.exec(sqlReleaseExpired, now)
		if err != nil {
			return err
		}
		hard = affected(res)
		n += hard
		return nil
	}, func() {
		for i, id := range ids {
			if ok[i] {
				d.sched.leaseChanged(id, soft[i].claims, false, false, soft[i].availableAt, 0, 0, now)
			}
		}
	})
	var lost []string
	for i, id := range ids {
		if err != nil || !ok[i] {
			d.sched.unpin(id, soft[i].claims, now)
			if err == nil {
				lost = append(lost, id)
			}
		}
	}
	if err != nil {
		return 0, fmt.Errorf("store: release expired: %w", err)
	}
	if len(lost) > 0 {
		d.refresh(ctx, lost)
	}
	if hard > 0 {
		if err := d.reload(ctx); err != nil {
			return int(n), fmt.Errorf("store: release expired: %w", err)
		}
	}
	return int(n), nil
}

// freedAtOpen is the last_error Open gives the items and memory jobs whose
// leases it frees.
const freedAtOpen = "lease freed when the store was opened: the DB that granted it was gone"

// sqlFreeLeases returns every leased item to pending, claimable from ?1 at
// the latest, its attempts and claims as they are (Open; see freeLeases).
const sqlFreeLeases = `UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL,
    available_at = min(available_at, ?1), last_error = ?2, updated_at = ?1
WHERE ` + sqlFromQueueFloor + ` AND status = 'leased'`

// sqlFreeJobLeases does the same for the memory jobs.
const sqlFreeJobLeases = `UPDATE memory_jobs SET status = 'pending', lease_owner = NULL, lease_until = NULL,
    available_at = min(available_at, ?1), last_error = ?2, updated_at = ?1
WHERE status = 'leased'`

// freeLeases frees, at Open, every lease the file records: the queue
// items' and the memory jobs'. Open holds the file's lock, so every such
// lease was granted by a DB that is gone (closed, or its process ended),
// and none of its holders can use it any more: waiting for its expiry
// would only hold its session's in-flight slot. Each freed item is
// pending and claimable at once; its attempts and claims stay as they are
// (a stored claim counted its attempt; the claims count moves on with the
// next claim, so the old lease stays dead). Leases held in memory only
// never reached the file: their rows are as before the claim already.
// It runs before the claim index is built (reload), so the index never
// sees the old leases.
func (d *DB) freeLeases(ctx context.Context) error {
	now := d.now()
	var items, jobs int64
	var orphans []string
	err := d.write(ctx, func(tx wtx) error {
		orphans = orphans[:0]
		rows, err := tx.query(`SELECT id FROM inbound_items WHERE ` + sqlFromQueueFloor + ` AND status = 'leased'`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				_ = rows.Close()
				return err
			}
			orphans = append(orphans, id)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		res, err := tx.exec(sqlFreeLeases, now, freedAtOpen)
		if err != nil {
			return err
		}
		items = affected(res)
		if res, err = tx.exec(sqlFreeJobLeases, now, freedAtOpen); err != nil {
			return err
		}
		jobs = affected(res)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: free the previous owner's leases: %w", err)
	}
	if items > 0 || jobs > 0 {
		d.log.Info("store: freed the leases of the file's previous owner", "items", items, "memory_jobs", jobs)
	}
	d.orphanMu.Lock()
	d.orphans = make(map[string]struct{}, len(orphans))
	for _, id := range orphans {
		d.orphans[id] = struct{}{}
	}
	d.orphanMu.Unlock()
	return nil
}

// orphaned reports whether an item's lease was freed at Open and nothing
// happened to it since.
func (d *DB) orphaned(id string) bool {
	d.orphanMu.Lock()
	defer d.orphanMu.Unlock()
	_, ok := d.orphans[id]
	return ok
}

// settled forgets an orphan: a lease operation ended its attempt.
func (d *DB) settled(id string) {
	d.orphanMu.Lock()
	delete(d.orphans, id)
	d.orphanMu.Unlock()
}

// writeSoftLeases puts every soft lease still held into its row (Close:
// the next handle on the file honours them like any lease). The leases
// written are ordinary ones afterwards, so their holders' operations do not
// wait on a pin.
func (d *DB) writeSoftLeases(ctx context.Context) error {
	ids, held := d.sched.pinSoft(0)
	if len(ids) == 0 {
		return nil
	}
	_, err := d.storeHeld(ctx, ids, held, d.now())
	return err
}

// NextAvailable implements inbound.Queue: the earliest available_at of a
// pending item or lease expiry of a leased one (an expired lease is
// claimable too), from the claim index. The time may be in the past. ok is
// false when no item is pending or leased. It visits every claimable item,
// so it is meant for schedulers and tests, not for every message.
func (d *DB) NextAvailable(ctx context.Context) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	at, ok := d.sched.next()
	if !ok {
		return time.Time{}, false, nil
	}
	return fromMs(at), true, nil
}

const sqlRecordCols = `SELECT i.id, i.session_key, i.sender_id, i.message_id, coalesce(m.text, ''), i.source,
    i.priority, i.status, i.attempts, i.history_only, i.event_time, i.available_at, i.enqueued_at,
    i.first_claimed_at, i.completed_at, coalesce(i.last_error, ''), coalesce(i.outcome, ''),
    coalesce(i.reason, ''), coalesce(i.delivery_stage, ''), i.outbound_ids, coalesce(i.merged_into, ''),
    i.gates_done_at, i.generation_start_at, i.generation_end_at, i.first_send_at, i.first_ack_at,
    i.tokens, coalesce(i.kind, ''), i.trail
FROM inbound_items i LEFT JOIN message_events m ON m.rowid = i.rid`

// scanRecord reads one row selected with sqlRecordCols.
func scanRecord(sc interface{ Scan(...any) error }) (inbound.Record, error) {
	var (
		r                                         inbound.Record
		source, status, code, stage               string
		eventTime, avail, enqueued                int64
		firstClaim, completed                     sql.NullInt64
		gates, genStart, genEnd, firstSend, ackAt sql.NullInt64
		outboundIDs, tokens, trail                sql.NullString
	)
	err := sc.Scan(&r.ID, &r.SessionKey, &r.SenderID, &r.MessageID, &r.Text, &source, &r.Priority, &status,
		&r.Attempts, &r.HistoryOnly, &eventTime, &avail, &enqueued, &firstClaim, &completed, &r.LastError,
		&code, &r.Outcome.Reason, &stage, &outboundIDs, &r.Outcome.MergedInto,
		&gates, &genStart, &genEnd, &firstSend, &ackAt, &tokens, &r.Outcome.Kind, &trail)
	if err != nil {
		return inbound.Record{}, err
	}
	r.Source = channel.Source(source)
	r.Status = inbound.Status(status)
	r.Outcome.Code = outcome.Code(code)
	r.Outcome.Stage = inbound.DeliveryStage(stage)
	r.EventTime, r.AvailableAt, r.EnqueuedAt = fromMs(eventTime), fromMs(avail), fromMs(enqueued)
	r.FirstClaim, r.CompletedAt = fromNullMs(firstClaim), fromNullMs(completed)
	r.Outcome.Timings = inbound.Timings{
		GatesDone: fromNullMs(gates), GenerationStart: fromNullMs(genStart), GenerationEnd: fromNullMs(genEnd),
		FirstSend: fromNullMs(firstSend), FirstAck: fromNullMs(ackAt),
	}
	if trail.Valid {
		r.Outcome.Trail = new(inbound.Trail)
		if err := json.Unmarshal([]byte(trail.String), r.Outcome.Trail); err != nil {
			return inbound.Record{}, fmt.Errorf("decode trail of %s: %w", r.ID, err)
		}
	}
	if outboundIDs.Valid {
		if err := json.Unmarshal([]byte(outboundIDs.String), &r.Outcome.OutboundIDs); err != nil {
			return inbound.Record{}, fmt.Errorf("decode outbound ids of %s: %w", r.ID, err)
		}
	}
	if tokens.Valid {
		if err := json.Unmarshal([]byte(tokens.String), &r.Outcome.Tokens); err != nil {
			return inbound.Record{}, fmt.Errorf("decode tokens of %s: %w", r.ID, err)
		}
	}
	return r, nil
}

// Lookup implements inbound.Queue: the record of one item, or
// inbound.ErrNotFound.
func (d *DB) Lookup(ctx context.Context, id string) (inbound.Record, error) {
	r, err := scanRecord(d.rdb.QueryRowContext(ctx, sqlRecordCols+` WHERE i.rid = (SELECT rowid FROM message_events WHERE id = ?)`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return inbound.Record{}, fmt.Errorf("store: lookup %s: %w", id, inbound.ErrNotFound)
	}
	if err != nil {
		return inbound.Record{}, fmt.Errorf("store: lookup %s: %w", id, err)
	}
	d.sched.overlay(&r)
	return r, nil
}

// RecordQuery selects records for Records. Zero fields do not filter.
type RecordQuery struct {
	// SessionKey restricts the result to one session.
	SessionKey string
	// Status restricts the result to one queue state.
	Status inbound.Status
	// Limit caps the number of records (≤ 0 = no cap).
	Limit int
}

// Records returns the records matching q ordered by event time, then id
// (the event center's listing).
func (d *DB) Records(ctx context.Context, q RecordQuery) ([]inbound.Record, error) {
	var (
		where []string
		args  []any
	)
	if q.SessionKey != "" {
		// Found through the transcript's session timeline (every item has
		// its transcript row under the same id and session).
		where = append(where, "i.rid IN ("+sqlSessionRowids+") AND i.session_key = ?")
		args = append(args, q.SessionKey, q.SessionKey, q.SessionKey)
	}
	// A soft lease (see Claim) is not in the row: a pending or leased item
	// may be either, so both are read and told apart after the overlay.
	live := q.Status == inbound.StatusPending || q.Status == inbound.StatusLeased
	switch {
	case live:
		where = append(where, "i."+sqlFromQueueFloor+" AND i.status IN ('pending', 'leased')")
	case q.Status != "":
		where = append(where, "i.status = ?")
		args = append(args, string(q.Status))
	}
	stmt := sqlRecordCols
	if len(where) > 0 {
		stmt += " WHERE " + strings.Join(where, " AND ")
	}
	stmt += " ORDER BY i.event_time, i.id"
	if q.Limit > 0 && !live {
		stmt += " LIMIT ?"
		args = append(args, q.Limit)
	}
	recs, err := selectAll(ctx, d, "records", scanRecord, stmt, args...)
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		d.sched.overlay(&r)
		if live && r.Status != q.Status {
			continue
		}
		out = append(out, r)
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
	}
	return out, nil
}

// NewestEventTime returns the newest event time in the transcript (every
// direction), ok=false when it is empty. The coordinator uses it as the
// initial disconnect time when no checkpoint was saved. It scans the
// transcript, so call it at start-up rather than per message.
func (d *DB) NewestEventTime(ctx context.Context) (time.Time, bool, error) {
	var t sql.NullInt64
	if err := d.rdb.QueryRowContext(ctx, `SELECT max(event_time) FROM message_events`).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("store: newest event time: %w", err)
	}
	if !t.Valid {
		return time.Time{}, false, nil
	}
	return fromMs(t.Int64), true, nil
}

// CountOutcomes returns how many done items ended with each outcome code.
func (d *DB) CountOutcomes(ctx context.Context) (map[outcome.Code]int, error) {
	rows, err := d.rdb.QueryContext(ctx,
		`SELECT coalesce(outcome, ''), count(*) FROM inbound_items WHERE status = 'done' GROUP BY outcome`)
	if err != nil {
		return nil, fmt.Errorf("store: count outcomes: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := map[outcome.Code]int{}
	for rows.Next() {
		var code string
		var n int
		if err := rows.Scan(&code, &n); err != nil {
			return nil, fmt.Errorf("store: count outcomes: %w", err)
		}
		out[outcome.Code(code)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: count outcomes: %w", err)
	}
	return out, nil
}
