package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func mustParse(t *testing.T, s string) Spec {
	t.Helper()
	spec, err := Parse(s)
	require.NoError(t, err)
	return spec
}

// walk is latest by the definition: every due time from first on.
func walk(spec Spec, first, now time.Time, loc *time.Location) (time.Time, int) {
	due, missed := first, 0
	for {
		n := spec.Next(first, due, loc)
		if n.IsZero() || n.After(now) {
			return due, missed
		}
		due = n
		missed++
	}
}

func TestLatestMatchesWalk(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	t0 := time.Date(2026, 3, 7, 22, 0, 0, 0, time.UTC)
	cases := []struct {
		spec  string
		first time.Time
		after time.Duration
		loc   *time.Location
	}{
		{"every 30m", t0, 5*time.Hour + 10*time.Minute, time.UTC},
		{"every 30m", t0, 0, time.UTC},
		{"every 7m", t0.Add(123 * time.Millisecond), 1000 * time.Hour, time.UTC},
		{"every 24h", t0, 400 * 24 * time.Hour, ny},
		{"*/10 * * * *", t0, 55 * time.Minute, ny},
		{"*/10 * * * *", t0, 48 * time.Hour, ny},
		{"30 2 * * *", t0, 40 * 24 * time.Hour, ny},
		{"0 9 * * 1-5", t0, 90 * 24 * time.Hour, time.UTC},
	}
	for _, tc := range cases {
		spec := mustParse(t, tc.spec)
		now := tc.first.Add(tc.after)
		wantDue, wantMissed := walk(spec, tc.first, now, tc.loc)
		due, missed, exact := latest(spec, tc.first, now, tc.loc)
		require.True(t, exact, tc.spec)
		require.Truef(t, wantDue.Equal(due), "%s: want %s, got %s", tc.spec, wantDue, due)
		require.Equal(t, wantMissed, missed, tc.spec)
		require.Equal(t, tc.loc, due.Location())
	}
}

// TestLatestLongCatchUp: beyond maxWalk due times the runner jumps near
// now; the due time is still the latest, the count a lower bound.
func TestLatestLongCatchUp(t *testing.T) {
	cases := []struct {
		spec       string
		first, now time.Time
		want       time.Time
		exactCount int
	}{
		{"* * * * *", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 31, 0, 0, 30, 0, time.UTC),
			time.Date(2026, 1, 31, 0, 0, 0, 0, time.UTC), 30 * 1440},
		// Every minute of 1-10 January: the last hour, day and month before
		// now hold none, the last year does.
		{"* * 1-10 1 *", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC),
			time.Date(2026, 1, 10, 23, 59, 0, 0, time.UTC), 2*14400 - 1},
	}
	for _, tc := range cases {
		spec := mustParse(t, tc.spec)
		due, missed, exact := latest(spec, tc.first, tc.now, time.UTC)
		require.False(t, exact)
		require.Truef(t, tc.want.Equal(due), "%s: want %s, got %s", tc.spec, tc.want, due)
		require.GreaterOrEqual(t, missed, maxWalk)
		require.LessOrEqual(t, missed, tc.exactCount)
	}
}

func TestNextAfterDue(t *testing.T) {
	leap := mustParse(t, "0 0 29 2 *")
	got := nextAfterDue(leap, time.Date(2096, 2, 29, 0, 0, 0, 0, time.UTC), time.UTC)
	require.Equal(t, time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC), got, "eight years on, past one horizon")
	never := mustParse(t, "0 0 30 2 *")
	require.Equal(t, farFuture, nextAfterDue(never, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.UTC))
	every := mustParse(t, "every 45m")
	d := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, d.Add(45*time.Minute), nextAfterDue(every, d, time.UTC))
}

func TestWallInstant(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	civil := func(y int, mo time.Month, d, h, mi int) int64 {
		return time.Date(y, mo, d, h, mi, 0, 0, time.UTC).Unix()
	}
	// Ordinary, gap, overlap (first occurrence), and right after each.
	u, ok := wallInstant(civil(2026, 7, 1, 12, 0), berlin)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC), u.UTC())
	_, ok = wallInstant(civil(2026, 3, 29, 2, 30), berlin)
	require.False(t, ok)
	u, ok = wallInstant(civil(2026, 3, 29, 3, 0), berlin)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), u.UTC())
	u, ok = wallInstant(civil(2026, 10, 25, 2, 30), berlin)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), u.UTC())
	u, ok = wallInstant(civil(2026, 10, 25, 3, 0), berlin)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC), u.UTC())
}

func TestCivil(t *testing.T) {
	for _, d := range []time.Time{
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
	} {
		y, m, day := d.Date()
		require.Equal(t, d.Unix()/86400, civilDays(y, int(m), day), d)
		require.Equal(t, int(d.Weekday()), weekday(y, int(m), day), d)
	}
	require.Equal(t, 29, daysIn(2000, 2))
	require.Equal(t, 28, daysIn(2100, 2))
	require.Equal(t, 29, daysIn(2028, 2))
	require.Equal(t, 30, daysIn(2026, 11))
}
