package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/personakit/persona/outbound"
)

var _ outbound.DraftIntentLedger = (*DB)(nil)

// SaveDraft implements outbound.Ledger: the first draft saved for a turn
// wins; later calls return the stored one unchanged. dr.TurnID must be set
// (ErrInvalid).
func (d *DB) SaveDraft(ctx context.Context, dr outbound.Draft) (outbound.Draft, error) {
	if dr.TurnID == "" {
		return outbound.Draft{}, fmt.Errorf("%w: draft without a turn id", ErrInvalid)
	}
	body, err := json.Marshal(dr)
	if err != nil {
		return outbound.Draft{}, fmt.Errorf("%w: encode draft %s: %w", ErrInvalid, dr.TurnID, err)
	}
	now := d.now()
	var stored []byte
	err = d.write(ctx, func(tx wtx) error {
		var err error
		stored, err = insertDraft(tx, dr.TurnID, body, now)
		return err
	})
	if err != nil {
		return outbound.Draft{}, fmt.Errorf("store: save draft %s: %w", dr.TurnID, err)
	}
	var out outbound.Draft
	if err := json.Unmarshal(stored, &out); err != nil {
		return outbound.Draft{}, fmt.Errorf("store: save draft %s: decode: %w", dr.TurnID, err)
	}
	return out, nil
}

// SaveDraftIntent implements outbound.DraftIntentLedger: SaveDraft and,
// when the stored draft is dr, MarkIntent of slot 0 with fingerprint fp, in
// one transaction. A fingerprint mismatch on slot 0 fails the whole call
// (ErrFingerprintMismatch) and saves nothing.
func (d *DB) SaveDraftIntent(ctx context.Context, dr outbound.Draft, fp string) (outbound.Draft, bool, error) {
	if dr.TurnID == "" {
		return outbound.Draft{}, false, fmt.Errorf("%w: draft without a turn id", ErrInvalid)
	}
	body, err := json.Marshal(dr)
	if err != nil {
		return outbound.Draft{}, false, fmt.Errorf("%w: encode draft %s: %w", ErrInvalid, dr.TurnID, err)
	}
	now := d.now()
	var (
		stored []byte
		intent bool
	)
	err = d.write(ctx, func(tx wtx) error {
		intent = false
		var err error
		if stored, err = insertDraft(tx, dr.TurnID, body, now); err != nil {
			return err
		}
		if !bytes.Equal(stored, body) {
			return nil
		}
		if err := markIntent(tx, dr.TurnID, 0, fp, now); err != nil {
			// The draft row may be new: this failure is not clean.
			var c *cleanError
			if errors.As(err, &c) {
				return c.err
			}
			return err
		}
		intent = true
		return nil
	})
	if err != nil {
		return outbound.Draft{}, false, fmt.Errorf("store: save draft %s: %w", dr.TurnID, err)
	}
	if intent {
		return dr, true, nil
	}
	var out outbound.Draft
	if err := json.Unmarshal(stored, &out); err != nil {
		return outbound.Draft{}, false, fmt.Errorf("store: save draft %s: decode: %w", dr.TurnID, err)
	}
	return out, false, nil
}

// draftSlot is the ledger slot that holds a turn's draft (migration 0007):
// the draft sits in the same B-tree leaf as the turn's chunk slots.
const draftSlot = -1

// insertDraft stores body as the turn's draft unless the turn has one, and
// returns the stored draft: body itself when the row is new (no read-back),
// else the earlier draft.
func insertDraft(tx wtx, turnID string, body []byte, now int64) ([]byte, error) {
	res, err := tx.exec(`INSERT INTO delivery_ledger (turn_id, slot, fingerprint, state, draft, created_at, updated_at)
VALUES (?1, ?2, '', 'draft', ?3, ?4, ?4) ON CONFLICT (turn_id, slot) DO NOTHING`, turnID, draftSlot, string(body), now)
	if err != nil {
		return nil, err
	}
	if affected(res) == 1 {
		return body, nil
	}
	var stored []byte
	err = tx.queryRow(`SELECT draft FROM delivery_ledger WHERE turn_id = ?1 AND slot = ?2`, turnID, draftSlot).Scan(&stored)
	return stored, err
}

// LoadDraft implements outbound.Ledger.
func (d *DB) LoadDraft(ctx context.Context, turnID string) (outbound.Draft, bool, error) {
	var body []byte
	err := d.rdb.QueryRowContext(ctx, `SELECT draft FROM delivery_ledger WHERE turn_id = ?1 AND slot = ?2`,
		turnID, draftSlot).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return outbound.Draft{}, false, nil
	}
	if err != nil {
		return outbound.Draft{}, false, fmt.Errorf("store: load draft %s: %w", turnID, err)
	}
	var out outbound.Draft
	if err := json.Unmarshal(body, &out); err != nil {
		return outbound.Draft{}, false, fmt.Errorf("store: load draft %s: decode: %w", turnID, err)
	}
	return out, true, nil
}

// Slots implements outbound.Ledger: the turn's slots ordered by slot number.
func (d *DB) Slots(ctx context.Context, turnID string) ([]outbound.Slot, error) {
	rows, err := d.rdb.QueryContext(ctx, `SELECT slot, fingerprint, state, platform_message_ids, sent_at, updated_at
FROM delivery_ledger WHERE turn_id = ?1 AND slot >= 0 ORDER BY slot`, turnID)
	if err != nil {
		return nil, fmt.Errorf("store: slots %s: %w", turnID, err)
	}
	defer func() { _ = rows.Close() }()
	var out []outbound.Slot
	for rows.Next() {
		s := outbound.Slot{TurnID: turnID}
		var (
			state   string
			ids     sql.NullString
			sentAt  sql.NullInt64
			updated int64
		)
		if err := rows.Scan(&s.N, &s.Fingerprint, &state, &ids, &sentAt, &updated); err != nil {
			return nil, fmt.Errorf("store: slots %s: %w", turnID, err)
		}
		s.State = outbound.SlotState(state)
		s.SentAt = fromNullMs(sentAt)
		if s.State == outbound.SlotIntent {
			// An intent row is written once and changed only when it
			// becomes sent: its last change is when the intent was made.
			s.IntentAt = fromMs(updated)
		}
		if ids.Valid {
			if err := json.Unmarshal([]byte(ids.String), &s.MessageIDs); err != nil {
				return nil, fmt.Errorf("store: slots %s: decode ids: %w", turnID, err)
			}
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: slots %s: %w", turnID, err)
	}
	return out, nil
}

// checkSlot validates a chunk slot: a turn id, and a slot number ≥ 0.
func checkSlot(turnID string, n int) error {
	switch {
	case turnID == "":
		return fmt.Errorf("%w: ledger slot without a turn id", ErrInvalid)
	case n < 0:
		return fmt.Errorf("%w: ledger slot %d of %s: slots are numbered from 0", ErrInvalid, n, turnID)
	}
	return nil
}

// MarkIntent implements outbound.Ledger: it records slot n in state intent.
// An existing slot keeps its state (a sent slot is never downgraded); an
// existing slot with a different fingerprint is ErrFingerprintMismatch.
func (d *DB) MarkIntent(ctx context.Context, turnID string, n int, fingerprint string) error {
	if err := checkSlot(turnID, n); err != nil {
		return err
	}
	now := d.now()
	err := d.write(ctx, func(tx wtx) error { return markIntent(tx, turnID, n, fingerprint, now) })
	if err != nil {
		return fmt.Errorf("store: mark intent %s/%d: %w", turnID, n, err)
	}
	return nil
}

// markIntent is the write of MarkIntent. A fingerprint mismatch is a clean
// error when it is the first statement of the operation's transaction work
// (the caller wraps it otherwise).
func markIntent(tx wtx, turnID string, n int, fingerprint string, now int64) error {
	res, err := tx.exec(`INSERT INTO delivery_ledger (turn_id, slot, fingerprint, state, created_at, updated_at)
VALUES (?1, ?2, ?3, 'intent', ?4, ?4) ON CONFLICT (turn_id, slot) DO NOTHING`, turnID, n, fingerprint, now)
	if err != nil {
		return err
	}
	if affected(res) == 1 {
		return nil
	}
	var have string
	if err := tx.queryRow(`SELECT fingerprint FROM delivery_ledger WHERE turn_id = ?1 AND slot = ?2`,
		turnID, n).Scan(&have); err != nil {
		return err
	}
	if have != fingerprint && have != "" {
		return clean(fmt.Errorf("%w: slot %d has %q, not %q", ErrFingerprintMismatch, n, have, fingerprint))
	}
	if have == "" {
		_, err = tx.exec(`UPDATE delivery_ledger SET fingerprint = ?3, updated_at = ?4
WHERE turn_id = ?1 AND slot = ?2`, turnID, n, fingerprint, now)
	}
	return err
}

// MarkSent implements outbound.Ledger: slot n becomes sent with the platform
// message ids and the send time (zero = now). A slot without a prior intent
// is recorded as sent with an empty fingerprint, so a delivery is never
// forgotten.
func (d *DB) MarkSent(ctx context.Context, turnID string, n int, messageIDs []string, at time.Time) error {
	if err := checkSlot(turnID, n); err != nil {
		return err
	}
	// json.Marshal's bytes, without reflection (see eventjson.go).
	ids := []byte("[]")
	if len(messageIDs) > 0 {
		ids = appendStringsJSON(nil, messageIDs)
	}
	now := d.now()
	sent := now
	if !at.IsZero() {
		sent = ms(at)
	}
	err := d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`INSERT INTO delivery_ledger (turn_id, slot, fingerprint, state, platform_message_ids,
    sent_at, created_at, updated_at)
VALUES (?1, ?2, '', 'sent', ?3, ?4, ?5, ?5)
ON CONFLICT (turn_id, slot) DO UPDATE SET state = 'sent', platform_message_ids = excluded.platform_message_ids,
    sent_at = excluded.sent_at, updated_at = excluded.updated_at`, turnID, n, string(ids), sent, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: mark sent %s/%d: %w", turnID, n, err)
	}
	return nil
}

// ClearIntent implements outbound.Ledger: it removes slot n while it is
// still in state intent (the send is known to have failed), so a retry
// sends the chunk again. A sent slot, or a missing one, is left alone.
func (d *DB) ClearIntent(ctx context.Context, turnID string, n int) error {
	if err := checkSlot(turnID, n); err != nil {
		return err
	}
	err := d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`DELETE FROM delivery_ledger WHERE turn_id = ?1 AND slot = ?2 AND state = 'intent'`, turnID, n)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: clear intent %s/%d: %w", turnID, n, err)
	}
	return nil
}
