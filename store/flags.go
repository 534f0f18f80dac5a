package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/personakit/persona/gate"
)

var _ gate.BatchFlags = (*DB)(nil)

const sqlSetFlag = `INSERT INTO session_flags (session_key, subject, flag, until, value, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (session_key, subject, flag) DO UPDATE SET until = excluded.until, value = excluded.value,
    updated_at = excluded.updated_at`

// SetFlag implements gate.Flags: it stores or replaces the flag
// (session key, subject, name). f.SessionKey and f.Name must be set
// (ErrInvalid).
func (d *DB) SetFlag(ctx context.Context, f gate.Flag) error {
	if f.SessionKey == "" || f.Name == "" {
		return fmt.Errorf("%w: flag needs a session key and a name", ErrInvalid)
	}
	now := d.now()
	err := d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(sqlSetFlag, f.SessionKey, f.Subject, f.Name, nullMs(f.Until), f.Value, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: set flag %s/%s/%s: %w", f.SessionKey, f.Subject, f.Name, err)
	}
	return nil
}

// SetFlags implements gate.BatchFlags: it stores or replaces every flag
// of fs in one write, all or none. Every flag needs a session key and a
// name (ErrInvalid, nothing written).
func (d *DB) SetFlags(ctx context.Context, fs []gate.Flag) error {
	for _, f := range fs {
		if f.SessionKey == "" || f.Name == "" {
			return fmt.Errorf("%w: flag needs a session key and a name", ErrInvalid)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	now := d.now()
	err := d.write(ctx, func(tx wtx) error {
		for _, f := range fs {
			if _, err := tx.exec(sqlSetFlag, f.SessionKey, f.Subject, f.Name, nullMs(f.Until), f.Value, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: set %d flags: %w", len(fs), err)
	}
	return nil
}

// GetFlag implements gate.Flags. Expired flags are returned as stored; use
// Flag.Active.
func (d *DB) GetFlag(ctx context.Context, sessionKey, subject, name string) (gate.Flag, bool, error) {
	f := gate.Flag{SessionKey: sessionKey, Subject: subject, Name: name}
	var until sql.NullInt64
	err := d.rdb.QueryRowContext(ctx, `SELECT until, value FROM session_flags
WHERE session_key = ? AND subject = ? AND flag = ?`, sessionKey, subject, name).Scan(&until, &f.Value)
	if errors.Is(err, sql.ErrNoRows) {
		return gate.Flag{}, false, nil
	}
	if err != nil {
		return gate.Flag{}, false, fmt.Errorf("store: get flag %s/%s/%s: %w", sessionKey, subject, name, err)
	}
	f.Until = fromNullMs(until)
	return f, true, nil
}

// HasSubjectFlags implements gate.SubjectFlagProber: whether the session
// has any flag of this name with a non-empty subject (expired or not).
func (d *DB) HasSubjectFlags(ctx context.Context, sessionKey, name string) (bool, error) {
	var has bool
	err := d.rdb.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM session_flags
WHERE session_key = ? AND subject <> '' AND flag = ?)`, sessionKey, name).Scan(&has)
	if err != nil {
		return false, fmt.Errorf("store: probe flags %s/%s: %w", sessionKey, name, err)
	}
	return has, nil
}

// ClearFlag implements gate.Flags: it removes the flag; removing a missing
// flag is not an error.
func (d *DB) ClearFlag(ctx context.Context, sessionKey, subject, name string) error {
	err := d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`DELETE FROM session_flags WHERE session_key = ?1 AND subject = ?2 AND flag = ?3`,
			sessionKey, subject, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: clear flag %s/%s/%s: %w", sessionKey, subject, name, err)
	}
	return nil
}

// SaveCheckpoint implements inbound.Checkpoints: it stores the bot's last
// online time, replacing the previous one.
func (d *DB) SaveCheckpoint(ctx context.Context, bot string, at time.Time) error {
	if at.IsZero() {
		return fmt.Errorf("%w: checkpoint of %s with a zero time", ErrInvalid, bot)
	}
	now := d.now()
	err := d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`INSERT INTO checkpoints (bot, at, updated_at) VALUES (?1, ?2, ?3)
ON CONFLICT (bot) DO UPDATE SET at = excluded.at, updated_at = excluded.updated_at`, bot, ms(at), now)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: save checkpoint %s: %w", bot, err)
	}
	return nil
}

// LoadCheckpoint implements inbound.Checkpoints.
func (d *DB) LoadCheckpoint(ctx context.Context, bot string) (time.Time, bool, error) {
	var at int64
	err := d.rdb.QueryRowContext(ctx, `SELECT at FROM checkpoints WHERE bot = ?`, bot).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: load checkpoint %s: %w", bot, err)
	}
	return fromMs(at), true, nil
}
