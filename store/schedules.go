package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/personakit/persona/schedule"
)

var _ schedule.Store = (*DB)(nil)

// The schedules table (migration 0011) holds the schedule.Store: times as
// unix ms, the target as JSON, enabled as 0/1. Writes go through the
// writer; reads use the read pool. AdvanceSchedule's compare-and-set runs
// in the writer's transaction, so of several advances expecting the same
// NextDue exactly one changes the row.

const sqlScheduleCols = `id, session_key, target, spec, zone, prompt, next_due, last_due, enabled, created_at, updated_at`

const sqlPutSchedule = `INSERT INTO schedules (` + sqlScheduleCols + `)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
ON CONFLICT (id) DO UPDATE SET session_key = excluded.session_key, target = excluded.target,
    spec = excluded.spec, zone = excluded.zone, prompt = excluded.prompt, next_due = excluded.next_due,
    last_due = excluded.last_due, enabled = excluded.enabled, created_at = excluded.created_at,
    updated_at = excluded.updated_at`

// PutSchedule implements schedule.Store: it creates or replaces the
// schedule with s.ID. s must pass Validate and have NextDue set; the
// error then wraps both ErrInvalid and schedule.ErrInvalid. A zero
// CreatedAt or UpdatedAt is stored as the store clock's now.
func (d *DB) PutSchedule(ctx context.Context, s schedule.Schedule) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: put schedule: %w", ErrInvalid, err)
	}
	if s.NextDue.IsZero() {
		return fmt.Errorf("%w: put schedule %q: %w: no next due time (see schedule.Plan)", ErrInvalid, s.ID,
			schedule.ErrInvalid)
	}
	target, err := json.Marshal(s.Target)
	if err != nil {
		return fmt.Errorf("store: put schedule %q: encode target: %w", s.ID, err)
	}
	now := d.now()
	created, updated := now, now
	if !s.CreatedAt.IsZero() {
		created = ms(s.CreatedAt)
	}
	if !s.UpdatedAt.IsZero() {
		updated = ms(s.UpdatedAt)
	}
	err = d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(sqlPutSchedule, s.ID, s.SessionKey, string(target), s.Spec, s.Zone, s.Prompt,
			ms(s.NextDue), nullMs(s.LastDue), s.Enabled, created, updated)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: put schedule %q: %w", s.ID, err)
	}
	return nil
}

// scanSchedule reads one row of sqlScheduleCols.
func scanSchedule(sc interface{ Scan(...any) error }) (schedule.Schedule, error) {
	var (
		s                      schedule.Schedule
		target                 string
		next, created, updated int64
		last                   sql.NullInt64
		enabled                bool
	)
	if err := sc.Scan(&s.ID, &s.SessionKey, &target, &s.Spec, &s.Zone, &s.Prompt, &next, &last, &enabled,
		&created, &updated); err != nil {
		return schedule.Schedule{}, err
	}
	if err := json.Unmarshal([]byte(target), &s.Target); err != nil {
		return schedule.Schedule{}, fmt.Errorf("schedule %q: decode target: %w", s.ID, err)
	}
	s.NextDue, s.LastDue = fromMs(next), fromNullMs(last)
	s.Enabled = enabled
	s.CreatedAt, s.UpdatedAt = fromMs(created), fromMs(updated)
	return s, nil
}

// GetSchedule implements schedule.Store.
func (d *DB) GetSchedule(ctx context.Context, id string) (schedule.Schedule, bool, error) {
	s, err := scanSchedule(d.rdb.QueryRowContext(ctx, `SELECT `+sqlScheduleCols+` FROM schedules WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return schedule.Schedule{}, false, nil
	}
	if err != nil {
		return schedule.Schedule{}, false, fmt.Errorf("store: get schedule %q: %w", id, err)
	}
	return s, true, nil
}

// ListSchedules implements schedule.Store: the schedules of a session (""
// = every session), ordered by id.
func (d *DB) ListSchedules(ctx context.Context, sessionKey string) ([]schedule.Schedule, error) {
	if sessionKey == "" {
		return selectAll(ctx, d, "list schedules", scanSchedule,
			`SELECT `+sqlScheduleCols+` FROM schedules ORDER BY id`)
	}
	return selectAll(ctx, d, "list schedules of "+sessionKey, scanSchedule,
		`SELECT `+sqlScheduleCols+` FROM schedules WHERE session_key = ? ORDER BY id`, sessionKey)
}

// DeleteSchedule implements schedule.Store; schedule.ErrNotFound when the
// id is not stored.
func (d *DB) DeleteSchedule(ctx context.Context, id string) error {
	var n int64
	err := d.write(ctx, func(tx wtx) error {
		res, err := tx.exec(`DELETE FROM schedules WHERE id = ?1`, id)
		if err != nil {
			return err
		}
		n = affected(res)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: delete schedule %q: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("store: delete schedule %q: %w", id, schedule.ErrNotFound)
	}
	return nil
}

// DueSchedules implements schedule.Store: enabled schedules with NextDue ≤
// now, earliest first (ties by id), at most limit (> 0).
func (d *DB) DueSchedules(ctx context.Context, now time.Time, limit int) ([]schedule.Schedule, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: due schedules: %w: limit %d is not positive", ErrInvalid, schedule.ErrInvalid, limit)
	}
	return selectAll(ctx, d, "due schedules", scanSchedule, `SELECT `+sqlScheduleCols+` FROM schedules
WHERE enabled = 1 AND next_due <= ? ORDER BY next_due, id LIMIT ?`, ms(now), limit)
}

// NextDueAt implements schedule.Store.
func (d *DB) NextDueAt(ctx context.Context) (time.Time, bool, error) {
	var at sql.NullInt64
	err := d.rdb.QueryRowContext(ctx, `SELECT min(next_due) FROM schedules WHERE enabled = 1`).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: next due schedule: %w", err)
	}
	if !at.Valid {
		return time.Time{}, false, nil
	}
	return fromMs(at.Int64), true, nil
}

// AdvanceSchedule implements schedule.Store: a compare-and-set on
// next_due (at millisecond precision) in one statement of the writer.
func (d *DB) AdvanceSchedule(ctx context.Context, id string, expect, fired, next time.Time) (bool, error) {
	if next.IsZero() {
		return false, fmt.Errorf("%w: advance schedule %q: %w: zero next due time", ErrInvalid, id, schedule.ErrInvalid)
	}
	var n int64
	err := d.write(ctx, func(tx wtx) error {
		res, err := tx.exec(`UPDATE schedules SET next_due = ?1, last_due = coalesce(?2, last_due)
WHERE id = ?3 AND next_due = ?4`, ms(next), nullMs(fired), id, ms(expect))
		if err != nil {
			return err
		}
		n = affected(res)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: advance schedule %q: %w", id, err)
	}
	return n == 1, nil
}
