package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
)

// The queue (inbound_items, migration 0003).
//
// Every operation is one short transaction, safe with any number of
// processes on the database. Claim locks the sessions it takes items from
// (queue_sessions rows, FOR UPDATE SKIP LOCKED) and counts their unexpired
// leases under that lock, so two claimers never both fill a session's last
// in-flight slot; it locks the items it takes with SKIP LOCKED too, so
// claimers never wait for each other nor take the same item. The claims
// count is the lease's fencing token: every lease operation updates the
// row only while it is leased to the lease's owner with its claims count,
// and fails with inbound.ErrLeaseLost, changing nothing, otherwise.
// Claims are always stored before Claim returns (Limits.HoldBelow is
// ignored, Lease.Held stays false).

// The DB implements the queue ports.
var (
	_ inbound.Queue        = (*DB)(nil)
	_ inbound.Waker        = (*DB)(nil)
	_ inbound.RecordReader = (*DB)(nil)
)

// errInvalidInput is wrapped by the errors for input the queue refuses (an
// item without an id or session key, an invalid outcome code).
var errInvalidInput = ErrInvalid

// queueTopic is the notification topic of the queue (see OnClaimable).
const queueTopic = "queue"

// OnClaimable implements inbound.Waker: fn is called whenever any process
// sharing the store made an item claimable now or sooner than before (an
// enqueue, a retry, snooze or release, expired or orphaned leases freed,
// a completion that freed a slot of a session with waiting items), and
// once after the notification listener reconnected.
func (d *DB) OnClaimable(fn func()) (stop func()) {
	return d.Subscribe(queueTopic, func(string) { fn() })
}

// wakeClaimers queues the "queue" notification in tx (sent at commit).
func (d *DB) wakeClaimers(ctx context.Context, tx pgx.Tx) error {
	return d.notify(ctx, tx, queueTopic, "")
}

// eventCols are the message_events columns of one event, made storable
// (pgText).
type eventCols struct {
	id, session, platform, botID, chatKind, chatID, messageID string
	senderID, senderName, text, payload, tokens               string
	direction                                                 memory.Direction
	eventTime                                                 int64
}

// newEventCols encodes ev for its message_events row, with the search
// tokens every writer of the transcript stores (searchTokens). A zero
// event time is replaced by now.
func newEventCols(id, session string, ev *channel.Event, dir memory.Direction, now int64) (eventCols, error) {
	payload, err := encodeEvent(ev)
	if err != nil {
		return eventCols{}, fmt.Errorf("%w: %w", errInvalidInput, err)
	}
	et := now
	if !ev.Time.IsZero() {
		et = ms(ev.Time)
	}
	return eventCols{
		id: pgText(id), session: pgText(session), platform: pgText(ev.Platform), botID: pgText(ev.BotID),
		chatKind: pgText(string(ev.Chat.Kind)), chatID: pgText(ev.Chat.ID), messageID: pgText(ev.MessageID),
		senderID: pgText(ev.Sender.ID), senderName: pgText(ev.Sender.Name), text: pgText(ev.TextAndSpeech()),
		payload: payload, tokens: searchTokens(ev, dir), direction: dir, eventTime: et,
	}, nil
}

// sqlUpsertEvent writes a transcript row, keeping created_at and
// recalled_at of an existing one (as History.Append does).
const sqlUpsertEvent = `
INSERT INTO message_events (id, session_key, platform, bot_id, chat_kind, chat_id, message_id, sender_id,
    sender_name, event_time, text, payload, direction, created_at, search_tokens)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (id) DO UPDATE SET
    session_key = excluded.session_key, platform = excluded.platform, bot_id = excluded.bot_id,
    chat_kind = excluded.chat_kind, chat_id = excluded.chat_id, message_id = excluded.message_id,
    sender_id = excluded.sender_id, sender_name = excluded.sender_name, event_time = excluded.event_time,
    text = excluded.text, payload = excluded.payload, direction = excluded.direction,
    search_tokens = excluded.search_tokens`

// upsertEvent writes r's transcript row in tx.
func upsertEvent(ctx context.Context, tx pgx.Tx, r *eventCols, now int64) error {
	_, err := tx.Exec(ctx, sqlUpsertEvent, r.id, r.session, r.platform, r.botID, r.chatKind, r.chatID, r.messageID,
		r.senderID, r.senderName, r.eventTime, r.text, r.payload, string(r.direction), now, r.tokens)
	return err
}

// itemCols are an item's own inbound_items columns.
type itemCols struct {
	ev       eventCols
	chatKind string
	source   string
	avail    int64
	priority int
	history  bool
}

// prepareItem fills it's id and session key from its event when empty,
// validates it and encodes its rows.
func prepareItem(it *inbound.Item, dir memory.Direction, now int64) (itemCols, error) {
	if err := it.Normalize(); err != nil {
		return itemCols{}, fmt.Errorf("%w: %w", errInvalidInput, err)
	}
	ev, err := newEventCols(it.ID, it.SessionKey, &it.Event, dir, now)
	if err != nil {
		return itemCols{}, err
	}
	c := itemCols{ev: ev, chatKind: string(it.LimitKind()), source: pgText(string(it.Event.Source)), avail: now,
		priority: it.Priority, history: it.HistoryOnly}
	if c.source == "" {
		c.source = string(channel.SourceLive)
	}
	if !it.AvailableAt.IsZero() {
		c.avail = ms(it.AvailableAt)
	}
	return c, nil
}

const sqlInsertItem = `
INSERT INTO inbound_items (id, session_key, chat_kind, sender_id, message_id, event_time, source, history_only,
    priority, status, attempts, claims, available_at, enqueued_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', 0, 0, $10, $11, $11, $11)
ON CONFLICT (id) DO NOTHING`

// sqlRaiseItem applies a repeated delivery to a still-pending item: the
// higher priority wins, and a delivery that is not history-only ends the
// history-only mark.
const sqlRaiseItem = `
UPDATE inbound_items SET priority = greatest(priority, $2), history_only = history_only AND $3, updated_at = $4
WHERE id = $1 AND status = 'pending' AND (priority < $2 OR (history_only AND NOT $3))`

const sqlInsertSession = `INSERT INTO queue_sessions (session_key) VALUES ($1) ON CONFLICT DO NOTHING`

// Enqueue implements inbound.Queue. It fills it.ID from it.Event.Key()
// and it.SessionKey from it.Event.SessionKey when they are empty, and
// refuses an item that still has neither. In one transaction it upserts
// the message_events row (direction "in"; an existing row gets the new
// payload) and inserts the queue row. For an item that already exists it
// returns false; a still-pending item then gets priority max(old, new),
// and a delivery that is not history-only clears its history-only mark.
// A new item, or a pending one that changed, wakes the claimers of every
// process (OnClaimable).
func (d *DB) Enqueue(ctx context.Context, it inbound.Item) (bool, error) {
	d.startPresence()
	now := d.nowMs()
	c, err := prepareItem(&it, memory.In, now)
	if err != nil {
		return false, fmt.Errorf("postgres: enqueue: %w", err)
	}
	var enqueued bool
	err = d.tx(ctx, "", func(tx pgx.Tx) error {
		enqueued = false
		if err := upsertEvent(ctx, tx, &c.ev, now); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sqlInsertItem, c.ev.id, c.ev.session, c.chatKind, c.ev.senderID, c.ev.messageID,
			c.ev.eventTime, c.source, c.history, c.priority, c.avail, now)
		if err != nil {
			return err
		}
		changed := tag.RowsAffected() == 1
		if changed {
			enqueued = true
			if _, err := tx.Exec(ctx, sqlInsertSession, c.ev.session); err != nil {
				return err
			}
		} else {
			tag, err := tx.Exec(ctx, sqlRaiseItem, c.ev.id, c.priority, c.history, now)
			if err != nil {
				return err
			}
			changed = tag.RowsAffected() == 1
		}
		if changed {
			return d.wakeClaimers(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("postgres: enqueue %s: %w", it.ID, err)
	}
	return enqueued, nil
}

// outcomeCols is an encoded inbound.Outcome; nil stands for NULL.
type outcomeCols struct {
	code, reason, stage, outbound, merged, tokens, kind, trail any
	gates, genStart, genEnd, firstSend, firstAck               any
}

// encodeOutcome validates and encodes o.
func encodeOutcome(o *inbound.Outcome) (outcomeCols, error) {
	if !o.Code.Valid() {
		return outcomeCols{}, fmt.Errorf("%w: outcome code %q", errInvalidInput, o.Code)
	}
	c := outcomeCols{
		code: string(o.Code), reason: nullStr(o.Reason), stage: nullStr(string(o.Stage)),
		merged: nullStr(o.MergedInto), kind: nullStr(o.Kind),
		gates: nullMs(o.Timings.GatesDone), genStart: nullMs(o.Timings.GenerationStart),
		genEnd: nullMs(o.Timings.GenerationEnd), firstSend: nullMs(o.Timings.FirstSend),
		firstAck: nullMs(o.Timings.FirstAck),
	}
	enc := func(v any) (any, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode outcome: %w", err)
		}
		return string(b), nil
	}
	var err error
	if len(o.OutboundIDs) > 0 {
		if c.outbound, err = enc(o.OutboundIDs); err != nil {
			return outcomeCols{}, err
		}
	}
	if len(o.Tokens) > 0 {
		if c.tokens, err = enc(o.Tokens); err != nil {
			return outcomeCols{}, err
		}
	}
	if o.Trail != nil {
		if c.trail, err = enc(o.Trail); err != nil {
			return outcomeCols{}, err
		}
	}
	return c, nil
}

// nullStr is s made storable (pgText), or NULL when empty.
func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return pgText(s)
}

// nullMs is t in unix milliseconds, or NULL for the zero time.
func nullMs(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// sqlCompletion numbers a record becoming done for the live feed: the
// completing transaction's id, then a sequence number (see
// CompletedAfter).
const sqlCompletion = `completed_xid = pg_current_xact_id()::text::bigint, completed_seq = nextval('inbound_completed_seq')`

const sqlInsertDone = `
INSERT INTO inbound_items (id, session_key, chat_kind, sender_id, message_id, event_time, source, history_only,
    priority, status, attempts, claims, available_at, enqueued_at, created_at, updated_at,
    outcome, reason, delivery_stage, outbound_ids, merged_into, gates_done_at, generation_start_at,
    generation_end_at, first_send_at, first_ack_at, tokens, kind, trail, completed_at,
    completed_xid, completed_seq)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'done', 0, 0, $10, $11, $11, $11,
    $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $11,
    pg_current_xact_id()::text::bigint, nextval('inbound_completed_seq'))
ON CONFLICT (id) DO NOTHING`

// Record implements inbound.Queue: it stores an item that is done from the
// start with its outcome and its message_events row (direction "notice"
// for a notice event, "out" for the bot's own message, else "in"). It is
// idempotent: when the item already exists nothing changes and it returns
// false.
func (d *DB) Record(ctx context.Context, it inbound.Item, o inbound.Outcome) (bool, error) {
	now := d.nowMs()
	c, err := prepareItem(&it, entryDirection(&it.Event), now)
	if err != nil {
		return false, fmt.Errorf("postgres: record: %w", err)
	}
	oc, err := encodeOutcome(&o)
	if err != nil {
		return false, fmt.Errorf("postgres: record %s: %w", it.ID, err)
	}
	var inserted bool
	err = d.tx(ctx, "", func(tx pgx.Tx) error {
		inserted = false
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbound_items WHERE id = $1)`, c.ev.id).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		if err := upsertEvent(ctx, tx, &c.ev, now); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sqlInsertDone, c.ev.id, c.ev.session, c.chatKind, c.ev.senderID, c.ev.messageID,
			c.ev.eventTime, c.source, c.history, c.priority, c.avail, now,
			oc.code, oc.reason, oc.stage, oc.outbound, oc.merged, oc.gates, oc.genStart, oc.genEnd,
			oc.firstSend, oc.firstAck, oc.tokens, oc.kind, oc.trail)
		if err != nil {
			return err
		}
		inserted = tag.RowsAffected() == 1
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("postgres: record %s: %w", it.ID, err)
	}
	return inserted, nil
}

// claimable is the condition of a row Claim may take at $now: pending and
// available, or leased with an expired lease.
func claimable(alias, now string) string {
	return fmt.Sprintf(`((%[1]s.status = 'pending' AND %[1]s.available_at <= %[2]s) OR
    (%[1]s.status = 'leased' AND %[1]s.lease_until <= %[2]s))`, alias, now)
}

// sqlClaimSessions lists the sessions with a claimable item at $1 that
// seem to have a free in-flight slot ($2 per private chat, $3 per group),
// best item first (the count is a hint: it is taken again under the
// sessions' locks).
var sqlClaimSessions = `
SELECT b.session_key FROM (
    SELECT DISTINCT ON (i.session_key) i.session_key, i.chat_kind, i.priority, i.event_time, i.id
    FROM inbound_items i
    WHERE ` + claimable("i", "$1") + `
    ORDER BY i.session_key, i.priority DESC, i.event_time, i.id) b
WHERE (SELECT count(*) FROM inbound_items l
       WHERE l.session_key = b.session_key AND l.status = 'leased' AND l.lease_until > $1)
    < CASE WHEN b.chat_kind = 'private' THEN $2::bigint ELSE $3::bigint END
ORDER BY b.priority DESC, b.event_time, b.id`

// sqlLockSessions locks up to $2 of the sessions $1, in that order,
// skipping those another claimer holds.
const sqlLockSessions = `
SELECT s.session_key FROM unnest($1::text[]) WITH ORDINALITY AS c(key, n)
JOIN queue_sessions s ON s.session_key = c.key
ORDER BY c.n
LIMIT $2
FOR UPDATE OF s SKIP LOCKED`

// sqlClaimItems leases, in the locked sessions $1, up to $5 claimable
// items at $2 in claim order, each session up to its free slots (its
// limit, $3 private or $4 group, less its unexpired leases), for owner $6
// of process $8 until $7. An item another transaction has locked is
// skipped.
var sqlClaimItems = `
WITH inflight AS (
    SELECT session_key, count(*) AS n FROM inbound_items
    WHERE session_key = ANY($1::text[]) AND status = 'leased' AND lease_until > $2
    GROUP BY session_key
), ranked AS (
    SELECT i.id, i.session_key, i.priority, i.event_time,
        row_number() OVER w AS rn, first_value(i.chat_kind) OVER w AS kind
    FROM inbound_items i
    WHERE i.session_key = ANY($1::text[]) AND ` + claimable("i", "$2") + `
    WINDOW w AS (PARTITION BY i.session_key ORDER BY i.priority DESC, i.event_time, i.id)
), chosen AS (
    SELECT r.id FROM ranked r LEFT JOIN inflight f ON f.session_key = r.session_key
    WHERE r.rn + coalesce(f.n, 0) <= CASE WHEN r.kind = 'private' THEN $3::bigint ELSE $4::bigint END
    ORDER BY r.priority DESC, r.event_time, r.id
    LIMIT $5
), locked AS (
    SELECT i.id FROM inbound_items i
    WHERE i.id IN (SELECT id FROM chosen) AND ` + claimable("i", "$2") + `
    FOR UPDATE SKIP LOCKED
)
UPDATE inbound_items i SET status = 'leased', lease_owner = $6, lease_until = $7, lease_proc = $8,
    claims = i.claims + 1, attempts = i.attempts + 1, first_claimed_at = coalesce(i.first_claimed_at, $2),
    outcome = NULL, reason = NULL, merged_into = NULL, updated_at = $2
FROM locked l
WHERE i.id = l.id
RETURNING i.id, i.session_key, i.priority, i.event_time, i.history_only, i.available_at, i.attempts, i.claims,
    i.orphaned, (SELECT m.payload FROM message_events m WHERE m.id = i.id)`

// claimedRow is one row sqlClaimItems returned.
type claimedRow struct {
	id, session       string
	priority          int
	eventTime, avail  int64
	history, orphaned bool
	attempts, claims  int
	payload           *string
}

// Claim implements inbound.Queue: it leases up to limits.Max claimable
// items (pending and available, or leased with an expired lease) in the
// order priority DESC, event time, id, honouring the per-session in-flight
// limits (limits.PerGroup, default 3; limits.PerPrivate, default 2;
// unexpired leases count) across every process. Each lease lasts
// limits.Lease (default inbound.DefaultLease), counts one claim and one
// attempt and clears the previous attempt's outcome. Leases are returned
// in claim order with their events; Lease.Orphaned reports an item whose
// previous lease was freed because its process died. Limits.Max ≤ 0
// claims nothing.
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
	proc, err := d.procID(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	now := d.nowMs()
	until := now + lease.Milliseconds()
	var got []claimedRow
	err = d.tx(ctx, "", func(tx pgx.Tx) error {
		got = got[:0]
		rows, _ := tx.Query(ctx, sqlClaimSessions, now, perPrivate, perGroup)
		cands, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(cands) == 0 {
			return err
		}
		rows, _ = tx.Query(ctx, sqlLockSessions, cands, limits.Max)
		locked, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(locked) == 0 {
			return err
		}
		rows, _ = tx.Query(ctx, sqlClaimItems, locked, now, perPrivate, perGroup, limits.Max, limits.Owner, until, proc)
		got, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimedRow, error) {
			var c claimedRow
			err := row.Scan(&c.id, &c.session, &c.priority, &c.eventTime, &c.history, &c.avail, &c.attempts,
				&c.claims, &c.orphaned, &c.payload)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	slices.SortFunc(got, func(a, b claimedRow) int {
		return cmp.Or(cmp.Compare(b.priority, a.priority), cmp.Compare(a.eventTime, b.eventTime), strings.Compare(a.id, b.id))
	})
	leases := make([]inbound.Lease, 0, len(got))
	for _, c := range got {
		l := inbound.Lease{
			Item: inbound.Item{ID: c.id, SessionKey: c.session, Priority: c.priority, HistoryOnly: c.history,
				AvailableAt: fromMs(c.avail)},
			Owner: limits.Owner, Until: fromMs(until), Attempts: c.attempts, Claims: c.claims, Orphaned: c.orphaned,
		}
		if c.payload != nil {
			if ev, err := decodeEvent(*c.payload); err != nil {
				// The lease is stored; report it with what is known rather
				// than strand it until it expires.
				d.log.Error("postgres: undecodable event payload", "id", c.id, "err", err)
			} else {
				l.Event = ev
			}
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// leaseHeld is the condition of every lease operation: $1 id, $2 owner,
// $3 claims.
const leaseHeld = ` WHERE id = $1 AND status = 'leased' AND lease_owner = $2 AND claims = $3`

// leaseOp runs the update set (its parameters after $3 are args) on the
// item of lease l when l is its current lease, and fails with
// inbound.ErrLeaseLost, changing nothing, when it is not. It returns the
// item's session key. wake queues the claimers' notification in the same
// transaction (when it returns true).
func (d *DB) leaseOp(ctx context.Context, op string, l *inbound.Lease, set string, args []any,
	wake func(ctx context.Context, tx pgx.Tx, session string) (bool, error)) error {
	err := d.tx(ctx, "", func(tx pgx.Tx) error {
		var session string
		err := tx.QueryRow(ctx, `UPDATE inbound_items SET `+set+leaseHeld+` RETURNING session_key`,
			append([]any{l.ID, l.Owner, l.Claims}, args...)...).Scan(&session)
		if errors.Is(err, pgx.ErrNoRows) {
			return inbound.ErrLeaseLost
		}
		if err != nil || wake == nil {
			return err
		}
		ok, err := wake(ctx, tx, session)
		if err != nil || !ok {
			return err
		}
		return d.wakeClaimers(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("postgres: %s %s: %w", op, l.ID, err)
	}
	return nil
}

// always wakes the claimers after a lease operation.
func always(context.Context, pgx.Tx, string) (bool, error) { return true, nil }

// Extend implements inbound.Queue: it moves the lease's expiry to now + dur
// (dur ≤ 0 means inbound.DefaultLease) and updates l.Until. It fails with
// inbound.ErrLeaseLost, changing nothing, unless l is the item's current
// lease (an expired lease nobody claimed since still is).
func (d *DB) Extend(ctx context.Context, l *inbound.Lease, dur time.Duration) error {
	if l == nil {
		return fmt.Errorf("postgres: extend: %w: nil lease", errInvalidInput)
	}
	if dur <= 0 {
		dur = inbound.DefaultLease
	}
	now := d.nowMs()
	until := now + dur.Milliseconds()
	if err := d.leaseOp(ctx, "extend", l, `lease_until = $4, updated_at = $5`, []any{until, now}, nil); err != nil {
		return err
	}
	l.Until, l.Held = fromMs(until), false
	return nil
}

// stageRank orders delivery stages; a stage is only replaced by one of a
// higher rank (failed outranks send_attempted but not acknowledged).
const stageRank = `CASE %s WHEN 'generated' THEN 1 WHEN 'send_attempted' THEN 2 WHEN 'failed' THEN 3
    WHEN 'acknowledged' THEN 4 WHEN 'echo_persisted' THEN 5 ELSE 0 END`

var sqlCompleteSet = `status = 'done', lease_until = NULL, lease_proc = NULL, orphaned = false,
    outcome = $4, reason = $5,
    delivery_stage = CASE WHEN ` + fmt.Sprintf(stageRank, "$6::text") + ` >= ` + fmt.Sprintf(stageRank, "delivery_stage") + `
        THEN $6::text ELSE delivery_stage END,
    outbound_ids = coalesce($7::text, outbound_ids), merged_into = $8,
    gates_done_at = coalesce($9::bigint, gates_done_at), generation_start_at = coalesce($10::bigint, generation_start_at),
    generation_end_at = coalesce($11::bigint, generation_end_at), first_send_at = coalesce($12::bigint, first_send_at),
    first_ack_at = coalesce($13::bigint, first_ack_at), tokens = coalesce($14::text, tokens), kind = $15,
    completed_at = $16, updated_at = $16, trail = coalesce($17::text, trail), ` + sqlCompletion

// Complete implements inbound.Queue: the item becomes done with the
// outcome's code, reason, delivery stage (never moved backwards), outbound
// ids, merge target, timings, tokens, kind and trail; completed_at is now.
// o.Code must be a valid outcome code. Only the current lease holder may
// complete (inbound.ErrLeaseLost). When the session has items waiting,
// the claimers are woken: the completion freed one of its slots.
func (d *DB) Complete(ctx context.Context, l inbound.Lease, o inbound.Outcome) error {
	oc, err := encodeOutcome(&o)
	if err != nil {
		return fmt.Errorf("postgres: complete %s: %w", l.ID, err)
	}
	now := d.nowMs()
	args := []any{oc.code, oc.reason, oc.stage, oc.outbound, oc.merged, oc.gates, oc.genStart, oc.genEnd,
		oc.firstSend, oc.firstAck, oc.tokens, oc.kind, now, oc.trail}
	waiting := func(ctx context.Context, tx pgx.Tx, session string) (bool, error) {
		var ok bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbound_items
WHERE session_key = $1 AND status = 'pending')`, session).Scan(&ok)
		return ok, err
	}
	return d.leaseOp(ctx, "complete", &l, sqlCompleteSet, args, waiting)
}

// sqlBackToPending ends a lease with the item pending from $4, giving
// back $5 attempts (0 or 1) and keeping $6 as last_error.
const sqlBackToPending = `status = 'pending', lease_owner = NULL, lease_until = NULL, lease_proc = NULL,
    orphaned = false, available_at = $4, attempts = greatest(attempts - $5, 0), last_error = $6, updated_at = $7`

// Retry implements inbound.Queue: the item returns to pending, claimable
// from at (zero = now); its attempt stays counted and cause's text is
// kept as last_error.
func (d *DB) Retry(ctx context.Context, l inbound.Lease, at time.Time, cause error) error {
	now := d.nowMs()
	var msg any
	if cause != nil {
		msg = pgText(cause.Error())
	}
	return d.leaseOp(ctx, "retry", &l, sqlBackToPending, []any{availAt(at, now), 0, msg, now}, always)
}

// Snooze implements inbound.Queue: like Retry, but the attempt is given
// back; reason is kept as last_error.
func (d *DB) Snooze(ctx context.Context, l inbound.Lease, at time.Time, reason string) error {
	now := d.nowMs()
	return d.leaseOp(ctx, "snooze", &l, sqlBackToPending, []any{availAt(at, now), 1, nullStr(reason), now}, always)
}

// Release implements inbound.Queue: the item is pending and claimable at
// once, and the attempt is given back.
func (d *DB) Release(ctx context.Context, l inbound.Lease) error {
	now := d.nowMs()
	return d.leaseOp(ctx, "release", &l, `status = 'pending', lease_owner = NULL, lease_until = NULL,
    lease_proc = NULL, orphaned = false, available_at = $4, attempts = greatest(attempts - 1, 0), updated_at = $4`,
		[]any{now}, always)
}

// availAt is at in unix milliseconds, now for the zero time.
func availAt(at time.Time, now int64) int64 {
	if at.IsZero() {
		return now
	}
	return ms(at)
}

// sqlReleaseExpired returns every item whose lease expired by $1 to
// pending. Rows another transaction has locked (a claim taking one over,
// a lease operation) are left to it.
const sqlReleaseExpired = `
UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL, lease_proc = NULL,
    updated_at = $1
WHERE id IN (SELECT id FROM inbound_items WHERE status = 'leased' AND lease_until <= $1 FOR UPDATE SKIP LOCKED)`

// ReleaseExpired implements inbound.Queue: every item whose lease has
// expired becomes pending again (its attempts stay counted; the next
// claim moves its claims count on, so the old lease stays dead). It
// reports how many and wakes the claimers when there were any.
func (d *DB) ReleaseExpired(ctx context.Context) (int, error) {
	now := d.nowMs()
	var n int64
	err := d.tx(ctx, "", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlReleaseExpired, now)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if n > 0 {
			return d.wakeClaimers(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: release expired: %w", err)
	}
	return int(n), nil
}

// NextAvailable implements inbound.Queue: the earliest available_at of a
// pending item or lease expiry of a leased one (an expired lease is
// claimable too); the time may be in the past. ok is false when no item
// is pending or leased.
func (d *DB) NextAvailable(ctx context.Context) (time.Time, bool, error) {
	if err := d.usable(); err != nil {
		return time.Time{}, false, err
	}
	var at *int64
	err := d.pool.QueryRow(ctx, `SELECT least(
    (SELECT min(available_at) FROM inbound_items WHERE status = 'pending'),
    (SELECT min(lease_until) FROM inbound_items WHERE status = 'leased'))`).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: next available: %w", err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return fromMs(*at), true, nil
}
