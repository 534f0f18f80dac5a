package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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
	if it.ID == "" {
		it.ID = it.Event.Key()
	}
	if it.SessionKey == "" {
		it.SessionKey = it.Event.SessionKey
	}
	switch {
	case it.ID == "":
		return itemRow{}, fmt.Errorf("%w: item without an id", ErrInvalid)
	case it.SessionKey == "":
		return itemRow{}, fmt.Errorf("%w: item %s without a session key (set Item.SessionKey or Event.SessionKey)", ErrInvalid, it.ID)
	}
	ev, err := newEventRow(it.ID, it.SessionKey, &it.Event, dir, time.Time{}, now)
	if err != nil {
		return itemRow{}, err
	}
	r := itemRow{ev: ev, chatKind: string(sessionKind(it)), source: string(it.Event.Source), avail: now,
		priority: it.Priority, history: it.HistoryOnly}
	if r.source == "" {
		r.source = string(channel.SourceLive)
	}
	if !it.AvailableAt.IsZero() {
		r.avail = ms(it.AvailableAt)
	}
	return r, nil
}

// sessionKind is the chat kind that selects the session's in-flight limit:
// the event's chat kind, else the kind named in the session key, else group.
func sessionKind(it *inbound.Item) channel.ChatKind {
	if it.Event.Chat.Kind.Valid() {
		return it.Event.Chat.Kind
	}
	if p, err := channel.ParseSessionKey(it.SessionKey); err == nil {
		return p.Chat.Kind
	}
	return channel.Group
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
		d.events.put(it.ID, r.ev.payload, *held)
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
    generation_end_at, first_send_at, first_ack_at, tokens, kind, completed_at)
VALUES (?25, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'done', 0, ?11, ?12, ?12, ?12,
    ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?12)`

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
	if len(o.OutboundIDs) > 0 {
		b, err := json.Marshal(o.OutboundIDs)
		if err != nil {
			return outcomeRow{}, err
		}
		r.outbound = string(b)
	}
	if len(o.Tokens) > 0 {
		b, err := json.Marshal(o.Tokens)
		if err != nil {
			return outcomeRow{}, err
		}
		r.tokens = string(b)
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
			or.firstSend, or.firstAck, or.tokens, or.kind, r.ev.rowid); err != nil {
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
		d.events.put(it.ID, r.ev.payload, held)
	}
	if inserted && r.ev.searchTokens != "" {
		d.kickSearchIndex()
	}
	return inserted, nil
}

// sqlClaim leases the items the claim index picked (?4, a JSON array of
// ids) in one statement. The guard repeats the claimability test, so an
// item that changed under the index (another handle on the file) is not
// leased twice: it just does not come back. ?5 lists the ids whose event
// payload the index does not hold; only those read it.
const sqlClaim = `
UPDATE inbound_items SET
    status = 'leased', lease_owner = ?3, lease_until = ?2, attempts = attempts + 1, claims = claims + 1,
    first_claimed_at = coalesce(first_claimed_at, ?1),
    outcome = NULL, reason = NULL, merged_into = NULL, updated_at = ?1
WHERE rid IN (SELECT value FROM json_each(?4))
    AND ((status = 'pending' AND available_at <= ?1) OR (status = 'leased' AND lease_until <= ?1))
RETURNING id, attempts, claims, history_only, session_key, chat_kind, priority, event_time, available_at,
    CASE WHEN rid IN (SELECT value FROM json_each(?5))
        THEN (SELECT payload FROM message_events m WHERE m.rowid = inbound_items.rid) END`

// sqlClaimHeld is sqlClaim for a pick whose events the index holds all
// (the usual case): it reads no payload, and SQLite builds no lookup table
// for an empty ?5.
var sqlClaimHeld = strings.Replace(sqlClaim, `CASE WHEN rid IN (SELECT value FROM json_each(?5))
        THEN (SELECT payload FROM message_events m WHERE m.rowid = inbound_items.rid) END`, `NULL`, 1)

// claimed is one row returned by sqlClaim.
type claimed struct {
	attempts int
	claims   int
	payload  []byte
	// The leased row as the claim index needs it.
	item schedItem
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
// it costs the same whatever the backlog, and a claim with nothing
// claimable touches no SQL at all; the leases are written by one guarded
// UPDATE. Concurrent claims never pick the same item: an item is reserved
// in the index from the moment it is picked.
//
// Lease operations (Extend, Complete, Retry, Snooze, Release) succeed only
// while the row is leased to l.Owner with l.Claims claims; every claim
// increments the claims, so a holder whose lease expired and was claimed
// again, even under the same owner name, gets inbound.ErrLeaseLost.
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
	chosen := d.sched.pick(now, limits.Max, perPrivate, perGroup)
	if len(chosen) == 0 {
		return nil, nil
	}
	return d.leasePicked(ctx, chosen, now, until, limits.Owner)
}

// leasePicked writes the leases of the items a pick reserved and settles
// the claim index in the write's post-commit hook.
func (d *DB) leasePicked(ctx context.Context, chosen []picked, now, until int64, owner string) ([]inbound.Lease, error) {
	ids := make([]int64, len(chosen))
	var need []int64
	for i, it := range chosen {
		ids[i] = it.rid
		if it.ev == nil {
			need = append(need, it.rid)
		}
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		d.sched.settleClaim(chosen, nil, now)
		return nil, fmt.Errorf("store: claim: %w", err)
	}
	needJSON, err := json.Marshal(need)
	if err != nil {
		d.sched.settleClaim(chosen, nil, now)
		return nil, fmt.Errorf("store: claim: %w", err)
	}
	got := make(map[string]claimed, len(chosen))
	rids := make(map[string]int64, len(chosen))
	for _, p := range chosen {
		rids[p.id] = p.rid
	}
	var lost []string
	err = d.writeThen(ctx, func(tx wtx) error {
		clear(got)
		var rs *sql.Rows
		var err error
		if len(need) == 0 {
			rs, err = tx.query(sqlClaimHeld, now, until, owner, string(idsJSON))
		} else {
			rs, err = tx.query(sqlClaim, now, until, owner, string(idsJSON), string(needJSON))
		}
		if err != nil {
			return err
		}
		defer func() { _ = rs.Close() }()
		for rs.Next() {
			var (
				id      string
				c       claimed
				payload sql.RawBytes
			)
			var kind string
			it := &c.item
			if err := rs.Scan(&id, &c.attempts, &c.claims, &it.history, &it.session, &kind, &it.priority,
				&it.eventTime, &it.availableAt, &payload); err != nil {
				return err
			}
			it.id, it.private, it.leased, it.leaseUntil, it.claims = id, kind == "private", true, until, c.claims
			it.rid = rids[id]
			if payload != nil {
				c.payload = append([]byte(nil), payload...)
			}
			got[id] = c
		}
		return rs.Err()
	}, func() {
		items := make(map[string]*schedItem, len(got))
		for id, c := range got {
			items[id] = &c.item
		}
		lost = d.sched.settleClaim(chosen, items, now)
	})
	if err != nil {
		d.sched.settleClaim(chosen, nil, now)
		return nil, fmt.Errorf("store: claim: %w", err)
	}
	if len(lost) > 0 {
		d.refresh(ctx, lost)
	}
	leases := make([]inbound.Lease, 0, len(got))
	for _, it := range chosen {
		c, ok := got[it.id]
		if !ok {
			continue
		}
		l := inbound.Lease{
			Item: inbound.Item{ID: it.id, SessionKey: c.item.session, Priority: c.item.priority, HistoryOnly: c.item.history,
				AvailableAt: fromMs(c.item.availableAt)},
			Owner: owner, Until: fromMs(until), Attempts: c.attempts, Claims: c.claims,
		}
		if it.ev != nil {
			l.Event = *it.ev
		} else if len(c.payload) > 0 {
			ev, err := d.events.decode(it.id, c.payload)
			if err != nil {
				// The lease is held; report it with what is known rather than
				// stranding it until expiry.
				d.log.Error("store: undecodable event payload", "id", it.id, "err", err)
			} else {
				l.Event = ev
			}
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// sqlLiveItem reads one item for the claim index.
const sqlLiveItem = `SELECT id, session_key, chat_kind, priority, event_time, history_only, available_at,
    status, coalesce(lease_until, 0), claims, rid FROM inbound_items WHERE ` + itemByID + ` AND status IN ('pending', 'leased')`

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

// leaseOp runs a conditional update on the item of lease l: it changes the
// row only while it is leased by l.Owner with l.Claims claims, and returns
// inbound.ErrLeaseLost otherwise. The claim count acts as a fencing token:
// every claim increments it and nothing decrements it, so a holder whose
// lease expired and was claimed again (even under the same owner name) no
// longer matches.
//
// after updates the claim index; it runs after the commit, in commit order,
// and only when the operation succeeded.
func (d *DB) leaseOp(ctx context.Context, op string, l *inbound.Lease, after func(), q string, args ...any) error {
	all := append([]any{l.ID, l.Owner, l.Claims}, args...)
	err := d.writeThen(ctx, func(tx wtx) error {
		res, err := tx.exec(q, all...)
		if err != nil {
			return err
		}
		if affected(res) == 0 {
			return clean(inbound.ErrLeaseLost)
		}
		return nil
	}, after)
	if err != nil {
		return fmt.Errorf("store: %s %s: %w", op, l.ID, err)
	}
	return nil
}

// leaseHeld is the condition every lease operation shares; ?1 id, ?2 owner,
// ?3 claims.
const leaseHeld = ` WHERE ` + itemByID + ` AND status = 'leased' AND lease_owner = ?2 AND claims = ?3`

const sqlExtend = `UPDATE inbound_items SET lease_until = ?4, updated_at = ?5` + leaseHeld

// Extend implements inbound.Queue: it moves the lease's expiry to now + dur
// (dur ≤ 0 means inbound.DefaultLease) and updates l.Until. It fails with
// inbound.ErrLeaseLost, changing nothing, unless l is the current lease.
func (d *DB) Extend(ctx context.Context, l *inbound.Lease, dur time.Duration) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", ErrInvalid)
	}
	if dur <= 0 {
		dur = inbound.DefaultLease
	}
	now := d.now()
	until := now + dur.Milliseconds()
	after := func() { d.sched.leaseChanged(l.ID, l.Claims, false, true, 0, until, now) }
	if err := d.leaseOp(ctx, "extend", l, after, sqlExtend, until, now); err != nil {
		return err
	}
	l.Until = fromMs(until)
	return nil
}

// stageRank orders delivery stages; a stage is only replaced by one of a
// higher rank (failed outranks send_attempted but not acknowledged).
const stageRank = `CASE %s WHEN 'generated' THEN 1 WHEN 'send_attempted' THEN 2 WHEN 'failed' THEN 3
    WHEN 'acknowledged' THEN 4 WHEN 'echo_persisted' THEN 5 ELSE 0 END`

var sqlComplete = `UPDATE inbound_items SET
    status = 'done', lease_until = NULL, outcome = ?4, reason = ?5,
    delivery_stage = CASE WHEN ` + fmt.Sprintf(stageRank, "?6") + ` >= ` + fmt.Sprintf(stageRank, "delivery_stage") + `
        THEN ?6 ELSE delivery_stage END,
    outbound_ids = coalesce(?7, outbound_ids), merged_into = ?8,
    gates_done_at = coalesce(?9, gates_done_at), generation_start_at = coalesce(?10, generation_start_at),
    generation_end_at = coalesce(?11, generation_end_at), first_send_at = coalesce(?12, first_send_at),
    first_ack_at = coalesce(?13, first_ack_at), tokens = coalesce(?14, tokens), kind = ?15,
    completed_at = ?16, updated_at = ?16` + leaseHeld

// Complete implements inbound.Queue: the item becomes done with the
// outcome's code, reason, delivery stage (never moved backwards), outbound
// ids, merge target, timings, tokens and kind; completed_at is now. o.Code
// must be a valid outcome code (ErrInvalid otherwise). Only the current
// lease holder may complete (inbound.ErrLeaseLost).
func (d *DB) Complete(ctx context.Context, l inbound.Lease, o inbound.Outcome) error {
	or, err := encodeOutcome(&o)
	if err != nil {
		return fmt.Errorf("store: complete %s: %w", l.ID, err)
	}
	now := d.now()
	after := func() { d.sched.leaseChanged(l.ID, l.Claims, true, false, 0, 0, now) }
	return d.leaseOp(ctx, "complete", &l, after, sqlComplete, or.code, or.reason, or.stage, or.outbound, or.merged,
		or.gates, or.genStart, or.genEnd, or.firstSend, or.firstAck, or.tokens, or.kind, now)
}

const sqlRetry = `UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL,
    available_at = ?4, attempts = max(attempts - ?5, 0), last_error = ?6, updated_at = ?7` + leaseHeld

// Retry implements inbound.Queue: the item returns to pending, claimable
// from at (zero = now), its attempt stays counted and cause's text is kept
// as last_error.
func (d *DB) Retry(ctx context.Context, l inbound.Lease, at time.Time, cause error) error {
	now := d.now()
	var msg any
	if cause != nil {
		msg = cause.Error()
	}
	avail := availAt(at, now)
	after := func() { d.sched.leaseChanged(l.ID, l.Claims, false, false, avail, 0, now) }
	return d.leaseOp(ctx, "retry", &l, after, sqlRetry, avail, 0, msg, now)
}

// Snooze implements inbound.Queue: like Retry, but the attempt is given back
// (attempts − 1); reason is kept as last_error.
func (d *DB) Snooze(ctx context.Context, l inbound.Lease, at time.Time, reason string) error {
	now := d.now()
	avail := availAt(at, now)
	after := func() { d.sched.leaseChanged(l.ID, l.Claims, false, false, avail, 0, now) }
	return d.leaseOp(ctx, "snooze", &l, after, sqlRetry, avail, 1, nullStr(reason), now)
}

const sqlRelease = `UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL,
    available_at = ?4, attempts = max(attempts - 1, 0), updated_at = ?4` + leaseHeld

// Release implements inbound.Queue: the item is pending and claimable at
// once, and the attempt is given back.
func (d *DB) Release(ctx context.Context, l inbound.Lease) error {
	now := d.now()
	after := func() { d.sched.leaseChanged(l.ID, l.Claims, false, false, now, 0, now) }
	return d.leaseOp(ctx, "release", &l, after, sqlRelease, now)
}

func availAt(at time.Time, now int64) int64 {
	if at.IsZero() {
		return now
	}
	return ms(at)
}

const sqlReleaseExpired = `UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL,
    updated_at = ?1
WHERE status = 'leased' AND lease_until <= ?1`

// ReleaseExpired implements inbound.Queue: every item whose lease has
// expired becomes pending again (its attempts stay counted).
func (d *DB) ReleaseExpired(ctx context.Context) (int, error) {
	now := d.now()
	var n int64
	err := d.write(ctx, func(tx wtx) error {
		res, err := tx.exec(sqlReleaseExpired, now)
		if err != nil {
			return err
		}
		n = affected(res)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: release expired: %w", err)
	}
	if n > 0 {
		if err := d.reload(ctx); err != nil {
			return int(n), fmt.Errorf("store: release expired: %w", err)
		}
	}
	return int(n), nil
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
    i.tokens, coalesce(i.kind, '')
FROM inbound_items i LEFT JOIN message_events m ON m.rowid = i.rid`

// scanRecord reads one row selected with sqlRecordCols.
func scanRecord(sc interface{ Scan(...any) error }) (inbound.Record, error) {
	var (
		r                                         inbound.Record
		source, status, code, stage               string
		eventTime, avail, enqueued                int64
		firstClaim, completed                     sql.NullInt64
		gates, genStart, genEnd, firstSend, ackAt sql.NullInt64
		outboundIDs, tokens                       sql.NullString
	)
	err := sc.Scan(&r.ID, &r.SessionKey, &r.SenderID, &r.MessageID, &r.Text, &source, &r.Priority, &status,
		&r.Attempts, &r.HistoryOnly, &eventTime, &avail, &enqueued, &firstClaim, &completed, &r.LastError,
		&code, &r.Outcome.Reason, &stage, &outboundIDs, &r.Outcome.MergedInto,
		&gates, &genStart, &genEnd, &firstSend, &ackAt, &tokens, &r.Outcome.Kind)
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
		// Found through the transcript's session index (every item has its
		// transcript row under the same id and session).
		where = append(where, "i.rid IN (SELECT rowid FROM message_events WHERE session_key = ?) AND i.session_key = ?")
		args = append(args, q.SessionKey, q.SessionKey)
	}
	if q.Status != "" {
		where = append(where, "i.status = ?")
		args = append(args, string(q.Status))
	}
	stmt := sqlRecordCols
	if len(where) > 0 {
		stmt += " WHERE " + strings.Join(where, " AND ")
	}
	stmt += " ORDER BY i.event_time, i.id"
	if q.Limit > 0 {
		stmt += " LIMIT ?"
		args = append(args, q.Limit)
	}
	return selectAll(ctx, d, "records", scanRecord, stmt, args...)
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
