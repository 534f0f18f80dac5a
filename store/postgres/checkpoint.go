package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/inbound"
)

// The DB keeps the per-bot checkpoints the replay cutoff is computed from.
var _ inbound.Checkpoints = (*DB)(nil)

// SaveCheckpoint implements inbound.Checkpoints: it stores the bot's last
// online time (to the millisecond), replacing the previous one. A zero
// time is refused.
func (d *DB) SaveCheckpoint(ctx context.Context, bot string, at time.Time) error {
	if at.IsZero() {
		return fmt.Errorf("postgres: save checkpoint %s: %w: zero time", bot, errInvalidInput)
	}
	now := d.nowMs()
	err := d.tx(ctx, "", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO checkpoints (bot, at, updated_at) VALUES ($1, $2, $3)
ON CONFLICT (bot) DO UPDATE SET at = excluded.at, updated_at = excluded.updated_at`, bot, at.UnixMilli(), now)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: save checkpoint %s: %w", bot, err)
	}
	return nil
}

// LoadCheckpoint implements inbound.Checkpoints: the bot's last saved
// time in UTC, ok=false when none was saved.
func (d *DB) LoadCheckpoint(ctx context.Context, bot string) (time.Time, bool, error) {
	if err := d.usable(); err != nil {
		return time.Time{}, false, err
	}
	var at int64
	err := d.pool.QueryRow(ctx, `SELECT at FROM checkpoints WHERE bot = $1`, bot).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: load checkpoint %s: %w", bot, err)
	}
	return time.UnixMilli(at).UTC(), true, nil
}

// NewestEventTime returns the newest event time in the transcript (every
// direction), ok=false when it is empty. The inbound coordinator uses it
// as the initial disconnect time when no checkpoint was saved. It reads
// the whole transcript, so call it at start-up rather than per message.
func (d *DB) NewestEventTime(ctx context.Context) (time.Time, bool, error) {
	if err := d.usable(); err != nil {
		return time.Time{}, false, err
	}
	var t *int64
	if err := d.pool.QueryRow(ctx, `SELECT max(event_time) FROM message_events`).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: newest event time: %w", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return fromMs(*t), true, nil
}

// NewestSessionEventTime returns the newest event time of a session's
// transcript strictly before before, ok=false when there is none. The
// inbound coordinator uses it as a session's backfill watermark; before
// (the reconnect time) keeps messages that arrived live after the
// reconnect from hiding the outage.
func (d *DB) NewestSessionEventTime(ctx context.Context, sessionKey string, before time.Time) (time.Time, bool, error) {
	if err := d.usable(); err != nil {
		return time.Time{}, false, err
	}
	var t *int64
	err := d.pool.QueryRow(ctx, `SELECT max(event_time) FROM message_events WHERE session_key = $1 AND event_time < $2`,
		sessionKey, before.UnixMilli()).Scan(&t)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: newest session event time: %w", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return fromMs(*t), true, nil
}
