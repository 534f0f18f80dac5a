package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/gate"
)

var (
	_ gate.BatchFlags        = (*DB)(nil)
	_ gate.SubjectFlagProber = (*DB)(nil)
)

// errBadFlag is wrapped by the errors about a flag without a session key
// or a name: nothing is written.
var errBadFlag = fmt.Errorf("%w: a flag needs a session key and a name", ErrInvalid)

// flagUntil is the stored form of a deadline: NULL for the zero time.
func flagUntil(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := t.UnixMilli()
	return &v
}

// SetFlag implements gate.Flags: it stores or replaces the flag
// (session key, subject, name), dated by the store's clock. f.SessionKey
// and f.Name must be set.
func (d *DB) SetFlag(ctx context.Context, f gate.Flag) error {
	return d.setFlags(ctx, []gate.Flag{f}, fmt.Sprintf("set flag %s/%s/%s", f.SessionKey, f.Subject, f.Name))
}

// SetFlags implements gate.BatchFlags: it stores or replaces every flag
// of fs in one statement, all or none; when fs names a flag twice, the
// later one wins. Every flag needs a session key and a name, else
// nothing is written.
func (d *DB) SetFlags(ctx context.Context, fs []gate.Flag) error {
	return d.setFlags(ctx, fs, fmt.Sprintf("set %d flags", len(fs)))
}

// setFlags is the write of SetFlag and SetFlags. The flags go in key
// order, so that two batches over the same keys lock their rows in the
// same order and cannot deadlock; a key given twice is written once (one
// INSERT ... ON CONFLICT cannot change a row twice).
func (d *DB) setFlags(ctx context.Context, fs []gate.Flag, what string) error {
	for _, f := range fs {
		if f.SessionKey == "" || f.Name == "" {
			return fmt.Errorf("postgres: %s: %w", what, errBadFlag)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	if err := d.usable(); err != nil {
		return err
	}
	byKey := func(a, b gate.Flag) int {
		return cmp.Or(cmp.Compare(a.SessionKey, b.SessionKey), cmp.Compare(a.Subject, b.Subject),
			cmp.Compare(a.Name, b.Name))
	}
	sorted := slices.Clone(fs)
	slices.SortStableFunc(sorted, byKey)
	var (
		sessions, subjects, names, values = make([]string, 0, len(sorted)), make([]string, 0, len(sorted)),
			make([]string, 0, len(sorted)), make([]string, 0, len(sorted))
		untils = make([]*int64, 0, len(sorted))
	)
	for i, f := range sorted {
		if i+1 < len(sorted) && byKey(f, sorted[i+1]) == 0 {
			continue // a later flag of the batch replaces this one
		}
		sessions, subjects, names = append(sessions, f.SessionKey), append(subjects, f.Subject), append(names, f.Name)
		untils, values = append(untils, flagUntil(f.Until)), append(values, f.Value)
	}
	_, err := d.pool.Exec(ctx, `INSERT INTO session_flags (session_key, subject, flag, until, value, updated_at)
SELECT s, u, n, t, v, $6 FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[])
    WITH ORDINALITY AS f (s, u, n, t, v, i) ORDER BY i
ON CONFLICT (session_key, subject, flag) DO UPDATE SET until = excluded.until, value = excluded.value,
    updated_at = excluded.updated_at`, sessions, subjects, names, untils, values, d.nowMs())
	if err != nil {
		return fmt.Errorf("postgres: %s: %w", what, err)
	}
	return nil
}

// GetFlag implements gate.Flags: the stored flag, ok=false when there is
// none. Expired flags are returned as stored; the caller checks
// Flag.Active against its clock.
func (d *DB) GetFlag(ctx context.Context, sessionKey, subject, name string) (gate.Flag, bool, error) {
	if err := d.usable(); err != nil {
		return gate.Flag{}, false, err
	}
	f := gate.Flag{SessionKey: sessionKey, Subject: subject, Name: name}
	var until *int64
	err := d.pool.QueryRow(ctx, `SELECT until, value FROM session_flags
WHERE session_key = $1 AND subject = $2 AND flag = $3`, sessionKey, subject, name).Scan(&until, &f.Value)
	if errors.Is(err, pgx.ErrNoRows) {
		return gate.Flag{}, false, nil
	}
	if err != nil {
		return gate.Flag{}, false, fmt.Errorf("postgres: get flag %s/%s/%s: %w", sessionKey, subject, name, err)
	}
	if until != nil {
		f.Until = time.UnixMilli(*until).UTC()
	}
	return f, true, nil
}

// HasSubjectFlags implements gate.SubjectFlagProber: whether the session
// has any flag of this name with a non-empty subject, expired or not.
func (d *DB) HasSubjectFlags(ctx context.Context, sessionKey, name string) (bool, error) {
	if err := d.usable(); err != nil {
		return false, err
	}
	var has bool
	err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM session_flags
WHERE session_key = $1 AND flag = $2 AND subject <> '')`, sessionKey, name).Scan(&has)
	if err != nil {
		return false, fmt.Errorf("postgres: probe flags %s/%s: %w", sessionKey, name, err)
	}
	return has, nil
}

// ClearFlag implements gate.Flags: it removes the flag; removing a
// missing flag is not an error.
func (d *DB) ClearFlag(ctx context.Context, sessionKey, subject, name string) error {
	if err := d.usable(); err != nil {
		return err
	}
	_, err := d.pool.Exec(ctx, `DELETE FROM session_flags WHERE session_key = $1 AND subject = $2 AND flag = $3`,
		sessionKey, subject, name)
	if err != nil {
		return fmt.Errorf("postgres: clear flag %s/%s/%s: %w", sessionKey, subject, name, err)
	}
	return nil
}
