package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/schedule"
)

var _ schedule.Store = (*DB)(nil)

// The schedules table holds the schedule.Store: times as unix ms, the
// target as JSON. AdvanceSchedule is one conditional UPDATE: at read
// committed a second writer of the same row waits for the first, then
// re-checks next_due against the committed row, so of several advances
// expecting the same NextDue exactly one changes it.

const schedCols = `id, session_key, target, spec, zone, prompt, next_due, last_due, enabled, created_at, updated_at`

// PutSchedule implements schedule.Store: it creates or replaces the
// schedule with s.ID. s must pass Validate and have NextDue set, else the
// error wraps schedule.ErrInvalid and nothing is written. A zero
// CreatedAt or UpdatedAt is stored as the store clock's now.
func (d *DB) PutSchedule(ctx context.Context, s schedule.Schedule) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("postgres: put schedule: %w", err)
	}
	if s.NextDue.IsZero() {
		return fmt.Errorf("postgres: put schedule %q: %w: no next due time (see schedule.Plan)", s.ID,
			schedule.ErrInvalid)
	}
	target, err := json.Marshal(s.Target)
	if err != nil {
		return fmt.Errorf("postgres: put schedule %q: encode target: %w", s.ID, err)
	}
	if err := d.usable(); err != nil {
		return err
	}
	now := d.nowMs()
	created, updated := now, now
	if !s.CreatedAt.IsZero() {
		created = s.CreatedAt.UnixMilli()
	}
	if !s.UpdatedAt.IsZero() {
		updated = s.UpdatedAt.UnixMilli()
	}
	var last *int64
	if !s.LastDue.IsZero() {
		v := s.LastDue.UnixMilli()
		last = &v
	}
	_, err = d.pool.Exec(ctx, `INSERT INTO schedules (`+schedCols+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (id) DO UPDATE SET session_key = excluded.session_key, target = excluded.target,
    spec = excluded.spec, zone = excluded.zone, prompt = excluded.prompt, next_due = excluded.next_due,
    last_due = excluded.last_due, enabled = excluded.enabled, created_at = excluded.created_at,
    updated_at = excluded.updated_at`,
		s.ID, s.SessionKey, string(target), s.Spec, s.Zone, s.Prompt, s.NextDue.UnixMilli(), last, s.Enabled,
		created, updated)
	if err != nil {
		return fmt.Errorf("postgres: put schedule %q: %w", s.ID, err)
	}
	return nil
}

// scanSchedule reads one row of schedCols.
func scanSchedule(row pgx.Row) (schedule.Schedule, error) {
	var (
		s                      schedule.Schedule
		target                 string
		next, created, updated int64
		last                   *int64
	)
	if err := row.Scan(&s.ID, &s.SessionKey, &target, &s.Spec, &s.Zone, &s.Prompt, &next, &last, &s.Enabled,
		&created, &updated); err != nil {
		return schedule.Schedule{}, err
	}
	if err := json.Unmarshal([]byte(target), &s.Target); err != nil {
		return schedule.Schedule{}, fmt.Errorf("schedule %q: decode target: %w", s.ID, err)
	}
	s.NextDue = time.UnixMilli(next).UTC()
	if last != nil {
		s.LastDue = time.UnixMilli(*last).UTC()
	}
	s.CreatedAt, s.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return s, nil
}

// selectSchedules runs a query of schedCols and reads every row.
func (d *DB) selectSchedules(ctx context.Context, what, query string, args ...any) ([]schedule.Schedule, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	defer rows.Close()
	var out []schedule.Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: %s: %w", what, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	return out, nil
}

// GetSchedule implements schedule.Store: the schedule with this id,
// ok=false when there is none.
func (d *DB) GetSchedule(ctx context.Context, id string) (schedule.Schedule, bool, error) {
	if err := d.usable(); err != nil {
		return schedule.Schedule{}, false, err
	}
	s, err := scanSchedule(d.pool.QueryRow(ctx, `SELECT `+schedCols+` FROM schedules WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return schedule.Schedule{}, false, nil
	}
	if err != nil {
		return schedule.Schedule{}, false, fmt.Errorf("postgres: get schedule %q: %w", id, err)
	}
	return s, true, nil
}

// ListSchedules implements schedule.Store: the schedules of a session
// ("" = of every session), ordered by id (byte order).
func (d *DB) ListSchedules(ctx context.Context, sessionKey string) ([]schedule.Schedule, error) {
	if sessionKey == "" {
		return d.selectSchedules(ctx, "list schedules", `SELECT `+schedCols+` FROM schedules ORDER BY id`)
	}
	return d.selectSchedules(ctx, "list schedules of "+sessionKey,
		`SELECT `+schedCols+` FROM schedules WHERE session_key = $1 ORDER BY id`, sessionKey)
}

// DeleteSchedule implements schedule.Store; schedule.ErrNotFound when the
// id is not stored.
func (d *DB) DeleteSchedule(ctx context.Context, id string) error {
	if err := d.usable(); err != nil {
		return err
	}
	tag, err := d.pool.Exec(ctx, `DELETE FROM schedules WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("postgres: delete schedule %q: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: delete schedule %q: %w", id, schedule.ErrNotFound)
	}
	return nil
}

// DueSchedules implements schedule.Store: at most limit (> 0, else
// schedule.ErrInvalid) enabled schedules with NextDue ≤ now, earliest
// first, ties by id.
func (d *DB) DueSchedules(ctx context.Context, now time.Time, limit int) ([]schedule.Schedule, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("postgres: due schedules: %w: limit %d is not positive", schedule.ErrInvalid, limit)
	}
	return d.selectSchedules(ctx, "due schedules", `SELECT `+schedCols+` FROM schedules
WHERE enabled AND next_due <= $1 ORDER BY next_due, id LIMIT $2`, now.UnixMilli(), limit)
}

// NextDueAt implements schedule.Store: the earliest NextDue of the
// enabled schedules, ok=false when there is none.
func (d *DB) NextDueAt(ctx context.Context) (time.Time, bool, error) {
	if err := d.usable(); err != nil {
		return time.Time{}, false, err
	}
	var at *int64
	if err := d.pool.QueryRow(ctx, `SELECT min(next_due) FROM schedules WHERE enabled`).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: next due schedule: %w", err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(*at).UTC(), true, nil
}

// AdvanceSchedule implements schedule.Store: a compare-and-set on
// next_due at millisecond precision. It sets NextDue to next and LastDue
// to fired (a zero fired keeps LastDue), and reports ok=false, changing
// nothing, when the schedule is gone or its NextDue is not expect. Of
// several processes advancing the same due time, exactly one succeeds.
func (d *DB) AdvanceSchedule(ctx context.Context, id string, expect, fired, next time.Time) (bool, error) {
	if next.IsZero() {
		return false, fmt.Errorf("postgres: advance schedule %q: %w: zero next due time", id, schedule.ErrInvalid)
	}
	if err := d.usable(); err != nil {
		return false, err
	}
	var last *int64
	if !fired.IsZero() {
		v := fired.UnixMilli()
		last = &v
	}
	tag, err := d.pool.Exec(ctx, `UPDATE schedules SET next_due = $1, last_due = coalesce($2, last_due)
WHERE id = $3 AND next_due = $4`, next.UnixMilli(), last, id, expect.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("postgres: advance schedule %q: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}
