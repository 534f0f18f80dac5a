package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/schedule"
	"github.com/personakit/persona/schedule/scheduletest"
)

func TestScheduleStoreConformance(t *testing.T) {
	scheduletest.Run(t, func(t *testing.T) schedule.Store {
		return open(t, clock.NewFake(scheduletest.Start))
	})
}

// testSchedule is a valid schedule planned at at.
func testSchedule(t testing.TB, id, spec string, at time.Time) schedule.Schedule {
	t.Helper()
	s := schedule.Schedule{
		ID: id, SessionKey: "default:onebot:1:group:" + id,
		Target: schedule.Target{Platform: "onebot", BotID: "1", Chat: channel.Chat{Kind: channel.Group, ID: id}},
		Spec:   spec, Zone: "Asia/Shanghai", Prompt: "scheduled " + id, Enabled: true,
	}
	require.NoError(t, schedule.Plan(&s, at))
	return s
}

// TestSchedulesSurviveReopen: schedules are durable, and a firing handed
// to Fire before a crash (no advance) is handed over again, with the same
// id, by the runner of the next process.
func TestSchedulesSurviveReopen(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "persona.db")
	clk := clock.NewFake(t0)
	d, err := Open(path, Options{Clock: clk})
	require.NoError(t, err)
	s := testSchedule(t, "a", "every 30m", t0)
	require.NoError(t, d.PutSchedule(ctx, s))

	var fired []string
	fire := func(_ context.Context, f schedule.Firing) error { fired = append(fired, f.ID()); return nil }
	clk.Set(s.NextDue)
	// The first process fires and "dies" before the advance.
	crashing := &advanceFails{DB: d}
	r, err := schedule.NewRunner(schedule.Config{Store: crashing, Clock: clk, Fire: fire})
	require.NoError(t, err)
	n, err := r.Tick(ctx)
	require.Error(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, d.Close())

	d, err = Open(path, Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	got, ok, err := d.GetSchedule(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, s.NextDue, got.NextDue)
	require.Equal(t, s.Target, got.Target)
	require.Equal(t, "Asia/Shanghai", got.Zone)

	r, err = schedule.NewRunner(schedule.Config{Store: d, Clock: clk, Fire: fire})
	require.NoError(t, err)
	n, err = r.Tick(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, fired, 2)
	require.Equal(t, fired[0], fired[1], "the same firing id after the restart")
	got, _, err = d.GetSchedule(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, s.NextDue.Add(30*time.Minute), got.NextDue)
	require.Equal(t, s.NextDue, got.LastDue)
}

// advanceFails is a store whose advances all fail.
type advanceFails struct{ *DB }

func (a *advanceFails) AdvanceSchedule(context.Context, string, time.Time, time.Time, time.Time) (bool, error) {
	return false, fmt.Errorf("killed")
}

func TestPutScheduleErrors(t *testing.T) {
	ctx := t.Context()
	d := open(t, clock.NewFake(t0))
	s := testSchedule(t, "a", "every 30m", t0)
	s.Spec = "every 5s"
	err := d.PutSchedule(ctx, s)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, schedule.ErrInvalid)
	require.ErrorIs(t, err, schedule.ErrSpec)
	s = testSchedule(t, "a", "every 30m", t0)
	s.NextDue = time.Time{}
	err = d.PutSchedule(ctx, s)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "no next due time")
	_, err = d.DueSchedules(ctx, t0, 0)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = d.AdvanceSchedule(ctx, "a", t0, t0, time.Time{})
	require.ErrorIs(t, err, ErrInvalid)

	// Zero created/updated times are the store clock's now.
	s = testSchedule(t, "b", "every 30m", t0)
	s.CreatedAt, s.UpdatedAt = time.Time{}, time.Time{}
	require.NoError(t, d.PutSchedule(ctx, s))
	got, _, err := d.GetSchedule(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, t0, got.CreatedAt)
	require.Equal(t, t0, got.UpdatedAt)
}

// TestScheduleCorruptTarget: a row whose target is not JSON is a clear
// error, not a panic or a zero target.
func TestScheduleCorruptTarget(t *testing.T) {
	ctx := t.Context()
	d := open(t, clock.NewFake(t0))
	require.NoError(t, d.PutSchedule(ctx, testSchedule(t, "a", "every 30m", t0)))
	require.NoError(t, d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`UPDATE schedules SET target = '{not json' WHERE id = 'a'`)
		return err
	}))
	_, _, err := d.GetSchedule(ctx, "a")
	require.ErrorContains(t, err, `schedule "a": decode target`)
	_, err = d.ListSchedules(ctx, "")
	require.ErrorContains(t, err, "decode target")
}

// TestScheduleDueUsesIndex: the due query reads the partial index on
// next_due rather than scanning the table.
func TestScheduleDueUsesIndex(t *testing.T) {
	d := open(t, clock.NewFake(t0))
	rows, err := d.rdb.QueryContext(t.Context(), `EXPLAIN QUERY PLAN SELECT `+sqlScheduleCols+` FROM schedules
WHERE enabled = 1 AND next_due <= ? ORDER BY next_due, id LIMIT ?`, 0, 10)
	require.NoError(t, err)
	defer rows.Close()
	var plan string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
		plan += detail + "\n"
	}
	require.NoError(t, rows.Err())
	require.Contains(t, plan, "schedules_due", plan)
}

// BenchmarkScheduleTick measures a Tick that fires and advances 1,000
// schedules on SQLite (every op is one Tick; ns/schedule divides it), with
// the schedules handled one by one and by 8 workers, whose advances the
// writer commits in groups.
func BenchmarkScheduleTick(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { benchScheduleTick(b, workers) })
	}
}

func benchScheduleTick(b *testing.B, workers int) {
	const n = 1000
	ctx := context.Background()
	clk := clock.NewFake(t0)
	d := open(b, clk)
	for i := range n {
		require.NoError(b, d.PutSchedule(ctx, testSchedule(b, fmt.Sprintf("s%04d", i), "every 1m", t0)))
	}
	var fired atomic.Int64
	r, err := schedule.NewRunner(schedule.Config{Store: d, Clock: clk, Workers: workers,
		Fire: func(context.Context, schedule.Firing) error { fired.Add(1); return nil }})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		clk.Advance(time.Minute)
		got, err := r.Tick(ctx)
		if err != nil || got != n {
			b.Fatalf("tick fired %d of %d: %v", got, n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/schedule")
	require.Equal(b, int64(b.N*n), fired.Load())
}
