package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/personakit/persona/outbound"
)

var _ outbound.DraftIntentLedger = (*DB)(nil)

// ErrFingerprintMismatch is returned by MarkIntent (and SaveDraftIntent)
// when the slot is already recorded with another fingerprint: the turn is
// about to send something else than what the ledger holds for that chunk.
// Test for it with errors.Is.
var ErrFingerprintMismatch = errors.New("postgres: ledger slot fingerprint mismatch")

// errBadSlot is wrapped by the errors about a malformed ledger call (no
// turn id, a negative slot): nothing is written.
var errBadSlot = fmt.Errorf("%w: ledger slot", ErrInvalid)

// ledgerQuerier is what the ledger's writes need: the pool for a single
// statement, a transaction for a combined write.
type ledgerQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SaveDraft implements outbound.Ledger: the first draft saved for a turn
// wins; later calls return the stored one unchanged, also when several
// processes save a draft of the same turn at once. dr.TurnID must be set.
func (d *DB) SaveDraft(ctx context.Context, dr outbound.Draft) (outbound.Draft, error) {
	if dr.TurnID == "" {
		return outbound.Draft{}, fmt.Errorf("postgres: save draft: %w: draft without a turn id", errBadSlot)
	}
	body, err := json.Marshal(dr)
	if err != nil {
		return outbound.Draft{}, fmt.Errorf("postgres: save draft %s: encode: %w", dr.TurnID, err)
	}
	if err := d.usable(); err != nil {
		return outbound.Draft{}, err
	}
	stored, err := insertDraft(ctx, d.pool, dr.TurnID, body, d.nowMs())
	if err != nil {
		return outbound.Draft{}, fmt.Errorf("postgres: save draft %s: %w", dr.TurnID, err)
	}
	if bytes.Equal(stored, body) {
		return dr, nil
	}
	var out outbound.Draft
	if err := json.Unmarshal(stored, &out); err != nil {
		return outbound.Draft{}, fmt.Errorf("postgres: save draft %s: decode: %w", dr.TurnID, err)
	}
	return out, nil
}

// SaveDraftIntent implements outbound.DraftIntentLedger: SaveDraft and,
// when the stored draft is dr, MarkIntent of slot 0 with fingerprint fp,
// in one transaction. A fingerprint mismatch on slot 0 fails the whole
// call (ErrFingerprintMismatch) and saves nothing.
func (d *DB) SaveDraftIntent(ctx context.Context, dr outbound.Draft, fp string) (outbound.Draft, bool, error) {
	if dr.TurnID == "" {
		return outbound.Draft{}, false, fmt.Errorf("postgres: save draft: %w: draft without a turn id", errBadSlot)
	}
	body, err := json.Marshal(dr)
	if err != nil {
		return outbound.Draft{}, false, fmt.Errorf("postgres: save draft %s: encode: %w", dr.TurnID, err)
	}
	now := d.nowMs()
	var (
		stored []byte
		intent bool
	)
	err = d.tx(ctx, "", func(tx pgx.Tx) error {
		intent = false
		var err error
		if stored, err = insertDraft(ctx, tx, dr.TurnID, body, now); err != nil {
			return err
		}
		if !bytes.Equal(stored, body) {
			return nil
		}
		if err := markIntent(ctx, tx, dr.TurnID, 0, fp, now); err != nil {
			return err
		}
		intent = true
		return nil
	})
	if err != nil {
		return outbound.Draft{}, false, fmt.Errorf("postgres: save draft %s: %w", dr.TurnID, err)
	}
	if bytes.Equal(stored, body) {
		return dr, intent, nil
	}
	var out outbound.Draft
	if err := json.Unmarshal(stored, &out); err != nil {
		return outbound.Draft{}, false, fmt.Errorf("postgres: save draft %s: decode: %w", dr.TurnID, err)
	}
	return out, false, nil
}

// insertDraft stores body as the turn's draft unless the turn has one,
// and returns the stored draft. ON CONFLICT waits for a concurrent insert
// of the same turn to commit; the read that follows (a new snapshot at
// read committed) then sees the winner's row.
func insertDraft(ctx context.Context, q ledgerQuerier, turnID string, body []byte, now int64) ([]byte, error) {
	tag, err := q.Exec(ctx, `INSERT INTO turn_drafts (turn_id, draft, created_at) VALUES ($1, $2, $3)
ON CONFLICT (turn_id) DO NOTHING`, turnID, string(body), now)
	if err != nil {
		return nil, err
	}
	if tag.RowsAffected() == 1 {
		return body, nil
	}
	var stored string
	if err := q.QueryRow(ctx, `SELECT draft FROM turn_drafts WHERE turn_id = $1`, turnID).Scan(&stored); err != nil {
		return nil, err
	}
	return []byte(stored), nil
}

// LoadDraft implements outbound.Ledger: the turn's draft, ok=false when
// none was saved.
func (d *DB) LoadDraft(ctx context.Context, turnID string) (outbound.Draft, bool, error) {
	if err := d.usable(); err != nil {
		return outbound.Draft{}, false, err
	}
	var body string
	err := d.pool.QueryRow(ctx, `SELECT draft FROM turn_drafts WHERE turn_id = $1`, turnID).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return outbound.Draft{}, false, nil
	}
	if err != nil {
		return outbound.Draft{}, false, fmt.Errorf("postgres: load draft %s: %w", turnID, err)
	}
	var out outbound.Draft
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		return outbound.Draft{}, false, fmt.Errorf("postgres: load draft %s: decode: %w", turnID, err)
	}
	return out, true, nil
}

// Slots implements outbound.Ledger: the turn's slots ordered by slot
// number. An intent slot is dated by its first MarkIntent.
func (d *DB) Slots(ctx context.Context, turnID string) ([]outbound.Slot, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, `SELECT slot, fingerprint, state, message_ids, intent_at, sent_at
FROM delivery_ledger WHERE turn_id = $1 ORDER BY slot`, turnID)
	if err != nil {
		return nil, fmt.Errorf("postgres: slots %s: %w", turnID, err)
	}
	defer rows.Close()
	var out []outbound.Slot
	for rows.Next() {
		s := outbound.Slot{TurnID: turnID}
		var (
			state            string
			ids              []string
			intentAt, sentAt *int64
		)
		if err := rows.Scan(&s.N, &s.Fingerprint, &state, &ids, &intentAt, &sentAt); err != nil {
			return nil, fmt.Errorf("postgres: slots %s: %w", turnID, err)
		}
		s.State = outbound.SlotState(state)
		if len(ids) > 0 {
			s.MessageIDs = ids
		}
		if sentAt != nil {
			s.SentAt = fromMs(*sentAt)
		}
		if s.State == outbound.SlotIntent && intentAt != nil {
			s.IntentAt = fromMs(*intentAt)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: slots %s: %w", turnID, err)
	}
	return out, nil
}

// checkSlot validates a chunk slot: a turn id and a slot number ≥ 0.
func checkSlot(turnID string, n int) error {
	switch {
	case turnID == "":
		return fmt.Errorf("%w: no turn id", errBadSlot)
	case n < 0:
		return fmt.Errorf("%w: slot %d of %s: slots are numbered from 0", errBadSlot, n, turnID)
	}
	return nil
}

// MarkIntent implements outbound.Ledger: it records slot n in state
// intent, dated now. An existing slot keeps its state and date (a sent
// slot is never downgraded); an existing slot with another fingerprint is
// ErrFingerprintMismatch. Of several processes marking the same slot with
// different fingerprints, exactly one records its own.
func (d *DB) MarkIntent(ctx context.Context, turnID string, n int, fingerprint string) error {
	if err := checkSlot(turnID, n); err != nil {
		return fmt.Errorf("postgres: mark intent: %w", err)
	}
	if err := d.usable(); err != nil {
		return err
	}
	if err := markIntent(ctx, d.pool, turnID, n, fingerprint, d.nowMs()); err != nil {
		return fmt.Errorf("postgres: mark intent %s/%d: %w", turnID, n, err)
	}
	return nil
}

// markIntentTries bounds markIntent's retries when the slot it looks at
// keeps changing under it (cleared and re-marked by other processes).
const markIntentTries = 8

// markIntent is the write of MarkIntent. The insert records the intent
// once (ON CONFLICT DO NOTHING: the first writer wins); a slot that
// exists is compared. A slot marked sent without an intent (empty
// fingerprint) takes the fingerprint, once, by a conditional update. A
// slot that disappears or changes between the statements (a concurrent
// ClearIntent or fill-in) is looked at again.
func markIntent(ctx context.Context, q ledgerQuerier, turnID string, n int, fingerprint string, now int64) error {
	for range markIntentTries {
		tag, err := q.Exec(ctx, `INSERT INTO delivery_ledger
    (turn_id, slot, fingerprint, state, intent_at, created_at, updated_at)
VALUES ($1, $2, $3, 'intent', $4, $4, $4) ON CONFLICT (turn_id, slot) DO NOTHING`, turnID, n, fingerprint, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var have string
		err = q.QueryRow(ctx, `SELECT fingerprint FROM delivery_ledger WHERE turn_id = $1 AND slot = $2`,
			turnID, n).Scan(&have)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // cleared in between: insert again
		}
		if err != nil {
			return err
		}
		switch {
		case have == fingerprint:
			return nil
		case have != "":
			return fmt.Errorf("%w: slot %d has %q, not %q", ErrFingerprintMismatch, n, have, fingerprint)
		}
		tag, err = q.Exec(ctx, `UPDATE delivery_ledger SET fingerprint = $3, updated_at = $4
WHERE turn_id = $1 AND slot = $2 AND fingerprint = ''`, turnID, n, fingerprint, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
	}
	return fmt.Errorf("slot %d kept changing during %d attempts", n, markIntentTries)
}

// MarkSent implements outbound.Ledger: slot n becomes sent with the
// platform message ids and the send time (zero = now). A slot without a
// prior intent is recorded as sent with an empty fingerprint, so that a
// delivery is never forgotten; the fingerprint and date of an intent
// stay.
func (d *DB) MarkSent(ctx context.Context, turnID string, n int, messageIDs []string, at time.Time) error {
	if err := checkSlot(turnID, n); err != nil {
		return fmt.Errorf("postgres: mark sent: %w", err)
	}
	if err := d.usable(); err != nil {
		return err
	}
	if messageIDs == nil {
		messageIDs = []string{}
	}
	now := d.nowMs()
	sent := now
	if !at.IsZero() {
		sent = ms(at)
	}
	_, err := d.pool.Exec(ctx, `INSERT INTO delivery_ledger
    (turn_id, slot, fingerprint, state, message_ids, sent_at, created_at, updated_at)
VALUES ($1, $2, '', 'sent', $3, $4, $5, $5)
ON CONFLICT (turn_id, slot) DO UPDATE SET state = 'sent', message_ids = excluded.message_ids,
    sent_at = excluded.sent_at, updated_at = excluded.updated_at`, turnID, n, messageIDs, sent, now)
	if err != nil {
		return fmt.Errorf("postgres: mark sent %s/%d: %w", turnID, n, err)
	}
	return nil
}

// ClearIntent implements outbound.Ledger: it removes slot n while it is
// still an intent (its send is known to have failed), so that a retry
// sends the chunk again. A sent slot, or a missing one, is left alone,
// also when it became sent while this call waited for it.
func (d *DB) ClearIntent(ctx context.Context, turnID string, n int) error {
	if err := checkSlot(turnID, n); err != nil {
		return fmt.Errorf("postgres: clear intent: %w", err)
	}
	if err := d.usable(); err != nil {
		return err
	}
	_, err := d.pool.Exec(ctx, `DELETE FROM delivery_ledger WHERE turn_id = $1 AND slot = $2 AND state = 'intent'`,
		turnID, n)
	if err != nil {
		return fmt.Errorf("postgres: clear intent %s/%d: %w", turnID, n, err)
	}
	return nil
}
