package scheduletest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/personakit/persona/schedule"
)

// Memory is an in-memory schedule.Store for tests of code that uses
// schedules. It keeps times at millisecond precision in UTC, like a
// durable store, and is safe for concurrent use. The zero value is not
// usable; create it with NewMemory.
type Memory struct {
	mu sync.Mutex
	m  map[string]schedule.Schedule
}

var _ schedule.Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{m: map[string]schedule.Schedule{}} }

// msTime truncates t to the millisecond, in UTC; the zero time stays zero.
func msTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// PutSchedule implements schedule.Store.
func (m *Memory) PutSchedule(ctx context.Context, s schedule.Schedule) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("scheduletest: put schedule: %w", err)
	}
	if s.NextDue.IsZero() {
		return fmt.Errorf("%w: scheduletest: put schedule %q without a next due time", schedule.ErrInvalid, s.ID)
	}
	s.NextDue, s.LastDue = msTime(s.NextDue), msTime(s.LastDue)
	s.CreatedAt, s.UpdatedAt = msTime(s.CreatedAt), msTime(s.UpdatedAt)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[s.ID] = s
	return nil
}

// GetSchedule implements schedule.Store.
func (m *Memory) GetSchedule(ctx context.Context, id string) (schedule.Schedule, bool, error) {
	if err := ctx.Err(); err != nil {
		return schedule.Schedule{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[id]
	return s, ok, nil
}

// ListSchedules implements schedule.Store.
func (m *Memory) ListSchedules(ctx context.Context, sessionKey string) ([]schedule.Schedule, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	var out []schedule.Schedule
	for _, s := range m.m {
		if sessionKey == "" || s.SessionKey == sessionKey {
			out = append(out, s)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b schedule.Schedule) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteSchedule implements schedule.Store.
func (m *Memory) DeleteSchedule(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[id]; !ok {
		return fmt.Errorf("scheduletest: delete schedule %q: %w", id, schedule.ErrNotFound)
	}
	delete(m.m, id)
	return nil
}

// DueSchedules implements schedule.Store.
func (m *Memory) DueSchedules(ctx context.Context, now time.Time, limit int) ([]schedule.Schedule, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: scheduletest: due schedules limit %d is not positive", schedule.ErrInvalid, limit)
	}
	m.mu.Lock()
	var out []schedule.Schedule
	for _, s := range m.m {
		if s.Enabled && !s.NextDue.After(now) {
			out = append(out, s)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b schedule.Schedule) int {
		return cmp.Or(a.NextDue.Compare(b.NextDue), cmp.Compare(a.ID, b.ID))
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// NextDueAt implements schedule.Store.
func (m *Memory) NextDueAt(ctx context.Context) (time.Time, bool, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var at time.Time
	ok := false
	for _, s := range m.m {
		if s.Enabled && (!ok || s.NextDue.Before(at)) {
			at, ok = s.NextDue, true
		}
	}
	return at, ok, nil
}

// AdvanceSchedule implements schedule.Store.
func (m *Memory) AdvanceSchedule(ctx context.Context, id string, expect, fired, next time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if next.IsZero() {
		return false, fmt.Errorf("%w: scheduletest: advance schedule %q to a zero time", schedule.ErrInvalid, id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[id]
	if !ok || s.NextDue.UnixMilli() != expect.UnixMilli() {
		return false, nil
	}
	s.NextDue = msTime(next)
	if !fired.IsZero() {
		s.LastDue = msTime(fired)
	}
	m.m[id] = s
	return true, nil
}
