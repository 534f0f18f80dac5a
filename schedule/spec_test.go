package schedule_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/schedule"
)

func TestParseValid(t *testing.T) {
	cases := []struct{ spec, canonical string }{
		{"every 90m", "every 1h30m"},
		{"every 1h30m", "every 1h30m"},
		{"EVERY 24h", "every 24h"},
		{"every 1.5h", "every 1h30m"},
		{"every 60m", "every 1h"},
		{"  every \t 5m  ", "every 5m"},
		{"every 1m", "every 1m"},
		{"every 8784h", "every 8784h"},
		{"every 120s", "every 2m"},
		{"* * * * *", "* * * * *"},
		{"*/15 * * * *", "*/15 * * * *"},
		{"0,15,30,45 * * * *", "*/15 * * * *"},
		{"0-59 * * * *", "* * * * *"},
		{"1-59/2 * * * *", "1-59/2 * * * *"},
		{"0 9 * * 1-5", "0 9 * * 1-5"},
		{"0 9 * * MON-FRI", "0 9 * * 1-5"},
		{"0 9 * * mon,tue,wed,thu,fri", "0 9 * * 1-5"},
		{"0 12 1 jan,Jul *", "0 12 1 1,7 *"},
		{"0 12 1 JAN-dec *", "0 12 1 * *"},
		{"0 0 * * 7", "0 0 * * 0"},
		{"0 0 * * 0,7", "0 0 * * 0"},
		{"0 0 * * 5-7", "0 0 * * 0,5,6"},
		{"5 4 * * sun", "5 4 * * 0"},
		{"23 0-20/2 * * *", "23 0-20/2 * * *"},
		{"0 0 1,15 * *", "0 0 1,15 * *"},
		{"0 0 1-31 * *", "0 0 1-31 * *"},
		{"0 0 */2 * 1", "0 0 */2 * 1"},
		{"0 0 * 1-12/3 *", "0 0 * */3 *"},
		{"0 0 * * */2", "0 0 * * */2"},
		{"0 0 * * 0-6", "0 0 * * 0-6"},
		{"7,8,9,30 9-17 * * *", "7-9,30 9-17 * * *"},
		{"05 08 * * *", "5 8 * * *"},
		{"0 0 30 2 *", "0 0 30 2 *"},
		{"@hourly", "0 * * * *"},
		{"@daily", "0 0 * * *"},
		{"@WEEKLY", "0 0 * * 0"},
		{" @monthly ", "0 0 1 * *"},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			s, err := schedule.Parse(tc.spec)
			require.NoError(t, err)
			require.False(t, s.IsZero())
			require.Equal(t, tc.canonical, s.String())
			again, err := schedule.Parse(s.String())
			require.NoError(t, err)
			require.Equal(t, s, again, "the canonical form parses to the same spec")
		})
	}
}

func TestParseInvalid(t *testing.T) {
	cases := []struct{ spec, want string }{
		{"", "empty"},
		{"   ", "empty"},
		{"every", "one duration"},
		{"every 5", "not a duration"},
		{"every five minutes", "one duration"},
		{"every 30s", "shorter than the minimum 1m"},
		{"every 90s", "not a whole number of minutes"},
		{"every -5m", "shorter than the minimum"},
		{"every 0m", "shorter than the minimum"},
		{"every 9000h", "longer than the maximum 8784h"},
		{"every 1x", "not a duration"},
		{"* * * *", "5 fields"},
		{"* * * * * *", "5 fields"},
		{"daily", "5 fields"},
		{"60 * * * *", "minute field \"60\": 60 is out of range 0-59"},
		{"* 24 * * *", "hour field \"24\": 24 is out of range 0-23"},
		{"* * 0 * *", "day-of-month field \"0\": 0 is out of range 1-31"},
		{"* * 32 * *", "day-of-month field"},
		{"* * * 13 *", "month field \"13\""},
		{"* * * 0 *", "out of range 1-12"},
		{"* * * * 8", "day-of-week field \"8\": 8 is out of range 0-7"},
		{"5-1 * * * *", "range 5-1 runs backwards"},
		{"*/0 * * * *", "step 0 is out of range 1-59"},
		{"*/60 * * * *", "step 60 is out of range 1-59"},
		{"* */24 * * *", "step 24 is out of range 1-23"},
		{"1,,2 * * * *", "empty list element"},
		{"1, * * * *", "empty list element"},
		{"a * * * *", `"a" is not a number 0-59`},
		{"* * * foo *", `"foo" is neither a number 1-12 nor a name (jan-dec)`},
		{"* * * mon *", "month field"},
		{"* * * * jan", `"jan" is neither a number 0-7 nor a name (sun-sat)`},
		{"* * * * monday", "day-of-week field"},
		{"@yearly", `unknown shortcut "@yearly"`},
		{"@reboot", "unknown shortcut"},
		{"@daily 5", "nothing may follow @daily"},
		{"5/15 * * * *", "a step needs a range or *"},
		{"*5 * * * *", `"*" may only be followed by "/step"`},
		{"*,5 * * * *", `"*" may only be followed by "/step"`},
		{"1,* * * * *", `"*" cannot be part of a list`},
		{"1-2-3 * * * *", `"2-3" is not a number`},
		{"-1 * * * *", "missing value"},
		{"1- * * * *", "missing value"},
		{"*/ * * * *", `step "" is not a number`},
		{"*/+5 * * * *", `step "+5" is not a number`},
		{"*/2x * * * *", "is not a number"},
		{"1-5/0 * * * *", "step 0 is out of range"},
		{"99999999999999999999 * * * *", "out of range 0-59"},
		{"0 0 * * mon-", "missing value"},
		{"0 0 ½ * *", "not a number"},
	}
	require.GreaterOrEqual(t, len(cases), 20)
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			s, err := schedule.Parse(tc.spec)
			require.Error(t, err)
			require.ErrorIs(t, err, schedule.ErrSpec)
			require.Contains(t, err.Error(), tc.want)
			if strings.TrimSpace(tc.spec) != "" {
				require.Contains(t, err.Error(), fmt.Sprintf("%q", tc.spec), "the error quotes the spec")
			}
			require.True(t, s.IsZero())
			require.True(t, s.Next(time.Now(), time.Now(), nil).IsZero())
		})
	}
}

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

func utc(y int, mo time.Month, d, h, mi int) time.Time {
	return time.Date(y, mo, d, h, mi, 0, 0, time.UTC)
}

func TestNextInterval(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	anchor := utc(2026, 1, 1, 0, 0)
	cases := []struct {
		name          string
		spec          string
		anchor, t     time.Time
		loc           *time.Location
		want          time.Time
		wantInLocName string
	}{
		{"from the anchor", "every 90m", anchor, anchor, nil, anchor.Add(90 * time.Minute), "UTC"},
		{"strictly after a due time", "every 90m", anchor, anchor.Add(90 * time.Minute), nil, anchor.Add(180 * time.Minute), "UTC"},
		{"just before a due time", "every 90m", anchor, anchor.Add(90*time.Minute - time.Nanosecond), nil, anchor.Add(90 * time.Minute), "UTC"},
		{"far after the anchor", "every 7m", anchor, anchor.Add(1000*time.Hour + 3*time.Minute), nil, anchor.Add(1000*time.Hour + 4*time.Minute), "UTC"},
		{"before the anchor", "every 1h", utc(2026, 3, 2, 12, 0), utc(2026, 3, 2, 9, 30), nil, utc(2026, 3, 2, 10, 0), "UTC"},
		{"anchor with nanoseconds", "every 1h30m", anchor.Add(500 * time.Millisecond), anchor.Add(90*time.Minute + 500*time.Millisecond), nil, anchor.Add(180*time.Minute + 500*time.Millisecond), "UTC"},
		{"t with more nanoseconds", "every 1h30m", anchor.Add(500 * time.Millisecond), anchor.Add(90*time.Minute + 600*time.Millisecond), nil, anchor.Add(180*time.Minute + 500*time.Millisecond), "UTC"},
		{"t with fewer nanoseconds", "every 1h30m", anchor.Add(500 * time.Millisecond), anchor.Add(90*time.Minute + 400*time.Millisecond), nil, anchor.Add(90*time.Minute + 500*time.Millisecond), "UTC"},
		{"zero anchor is year 1", "every 24h", time.Time{}, utc(2026, 3, 2, 10, 0), nil, utc(2026, 3, 3, 0, 0), "UTC"},
		{"elapsed time across DST", "every 24h", utc(2026, 3, 7, 17, 0), utc(2026, 3, 7, 17, 0), ny, utc(2026, 3, 8, 17, 0), "America/New_York"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := schedule.Parse(tc.spec)
			require.NoError(t, err)
			got := s.Next(tc.anchor, tc.t, tc.loc)
			require.Truef(t, tc.want.Equal(got), "want %s, got %s", tc.want, got)
			require.True(t, got.After(tc.t))
			require.Equal(t, tc.wantInLocName, got.Location().String())
		})
	}
	// Across DST the wall clock moves: 12:00 EST, then 13:00 EDT.
	s, _ := schedule.Parse("every 24h")
	got := s.Next(utc(2026, 3, 7, 17, 0), utc(2026, 3, 7, 17, 0), ny)
	require.Equal(t, 13, got.Hour())
}

func TestNextCron(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	berlin := mustLoad(t, "Europe/Berlin")
	shanghai := mustLoad(t, "Asia/Shanghai")
	lordHowe := mustLoad(t, "Australia/Lord_Howe")
	cases := []struct {
		name string
		spec string
		loc  *time.Location
		t    time.Time
		want time.Time // zero: none within five years
	}{
		{"step", "*/15 * * * *", nil, utc(2026, 3, 2, 10, 7).Add(30 * time.Second), utc(2026, 3, 2, 10, 15)},
		{"strictly after", "0 9 * * *", nil, utc(2026, 3, 2, 9, 0), utc(2026, 3, 3, 9, 0)},
		{"just before", "0 9 * * *", nil, utc(2026, 3, 2, 9, 0).Add(-time.Millisecond), utc(2026, 3, 2, 9, 0)},
		{"inside the due minute", "0 9 * * *", nil, utc(2026, 3, 2, 9, 0).Add(30 * time.Second), utc(2026, 3, 3, 9, 0)},
		{"lists", "5,35 */6 * * *", nil, utc(2026, 3, 2, 6, 40), utc(2026, 3, 2, 12, 5)},
		{"stepped range", "0 9-17/4 * * *", nil, utc(2026, 3, 2, 13, 1), utc(2026, 3, 2, 17, 0)},
		{"stepped range wraps to the next day", "0 9-17/4 * * *", nil, utc(2026, 3, 2, 17, 1), utc(2026, 3, 3, 9, 0)},
		{"names", "0 12 * jan,jul mon-fri", nil, utc(2026, 3, 2, 0, 0), utc(2026, 7, 1, 12, 0)},
		{"weekday 7 is Sunday", "0 0 * * 7", nil, utc(2026, 3, 2, 0, 0), utc(2026, 3, 8, 0, 0)},
		{"range through 7", "0 0 * * 5-7", nil, utc(2026, 3, 7, 1, 0), utc(2026, 3, 8, 0, 0)},
		{"dom or dow: the Friday", "0 0 13 * 5", nil, utc(2026, 3, 2, 0, 0), utc(2026, 3, 6, 0, 0)},
		{"dom or dow: the 13th", "0 0 13 * 5", nil, utc(2026, 4, 10, 0, 0), utc(2026, 4, 13, 0, 0)},
		{"dow only when dom is *", "0 0 * * 1", nil, utc(2026, 3, 3, 0, 0), utc(2026, 3, 9, 0, 0)},
		{"dom only when dow is *", "0 0 13 * *", nil, utc(2026, 3, 3, 0, 0), utc(2026, 3, 13, 0, 0)},
		{"starred dom step and dow: both", "0 0 */2 * 1", nil, utc(2026, 3, 2, 0, 0), utc(2026, 3, 9, 0, 0)},
		{"starred dow step and dom: both", "0 0 1 * */2", nil, utc(2026, 3, 2, 0, 0), utc(2026, 8, 1, 0, 0)},
		{"31st skips short months", "0 0 31 * *", nil, utc(2026, 4, 1, 0, 0), utc(2026, 5, 31, 0, 0)},
		{"30th skips February", "0 0 30 * *", nil, utc(2026, 2, 1, 0, 0), utc(2026, 3, 30, 0, 0)},
		{"end of year", "59 23 31 12 *", nil, utc(2026, 12, 31, 23, 59), utc(2027, 12, 31, 23, 59)},
		{"leap day", "0 0 29 2 *", nil, utc(2026, 3, 1, 0, 0), utc(2028, 2, 29, 0, 0)},
		{"leap day in 2000", "0 0 29 2 *", nil, utc(1999, 1, 1, 0, 0), utc(2000, 2, 29, 0, 0)},
		{"no leap day in 2100", "0 0 29 2 *", nil, utc(2096, 3, 1, 0, 0), time.Time{}},
		{"never", "0 0 30 2 *", nil, utc(2026, 1, 1, 0, 0), time.Time{}},
		{"never in November", "0 0 31 11 *", nil, utc(2026, 1, 1, 0, 0), time.Time{}},
		{"@monthly", "@monthly", nil, utc(2026, 1, 31, 12, 0), utc(2026, 2, 1, 0, 0)},
		{"@weekly", "@weekly", nil, utc(2026, 3, 2, 0, 0), utc(2026, 3, 8, 0, 0)},
		{"@hourly", "@hourly", nil, utc(2026, 3, 2, 10, 0), utc(2026, 3, 2, 11, 0)},
		{"@daily", "@daily", nil, utc(2026, 12, 31, 0, 0), utc(2027, 1, 1, 0, 0)},

		// New York: spring forward 2026-03-08 02:00 EST → 03:00 EDT; fall
		// back 2026-11-01 02:00 EDT → 01:00 EST.
		{"NY wall time", "0 9 * * *", ny, utc(2026, 3, 2, 0, 0), utc(2026, 3, 2, 14, 0)},
		{"NY gap skips the day", "30 2 * * *", ny, utc(2026, 3, 7, 17, 0), utc(2026, 3, 9, 6, 30)},
		{"NY gap skips the missing hour", "*/30 * * * *", ny, utc(2026, 3, 8, 6, 45), utc(2026, 3, 8, 7, 0)},
		{"NY after the gap", "0 3 * * *", ny, utc(2026, 3, 7, 17, 0), utc(2026, 3, 8, 7, 0)},
		{"NY summer offset", "0 9 * * *", ny, utc(2026, 3, 8, 12, 0), utc(2026, 3, 8, 13, 0)},
		{"NY overlap: first occurrence", "30 1 * * *", ny, utc(2026, 10, 31, 16, 0), utc(2026, 11, 1, 5, 30)},
		{"NY overlap fires once", "30 1 * * *", ny, utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)},
		{"NY overlap: repeated hour is quiet", "*/20 * * * *", ny, utc(2026, 11, 1, 5, 50), utc(2026, 11, 1, 7, 0)},
		{"NY from inside the repeated hour", "*/20 * * * *", ny, utc(2026, 11, 1, 6, 10), utc(2026, 11, 1, 7, 0)},

		// Berlin: spring forward 2026-03-29 02:00 CET → 03:00 CEST; fall back
		// 2026-10-25 03:00 CEST → 02:00 CET.
		{"Berlin gap", "30 2 * * *", berlin, utc(2026, 3, 28, 11, 0), utc(2026, 3, 30, 0, 30)},
		{"Berlin gap hour", "0 * * * *", berlin, utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 0)},
		{"Berlin overlap first", "30 2 * * *", berlin, utc(2026, 10, 24, 11, 0), utc(2026, 10, 25, 0, 30)},
		{"Berlin overlap once", "30 2 * * *", berlin, utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)},
		{"Berlin hourly across overlap", "0 * * * *", berlin, utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 2, 0)},

		// Shanghai has no DST: 09:00 CST is 01:00 UTC all year.
		{"Shanghai weekdays", "0 9 * * 1-5", shanghai, utc(2026, 3, 6, 2, 0), utc(2026, 3, 9, 1, 0)},
		{"Shanghai summer", "0 9 * * *", shanghai, utc(2026, 7, 1, 0, 0), utc(2026, 7, 1, 1, 0)},
		{"Shanghai date line", "0 0 1 * *", shanghai, utc(2026, 3, 31, 15, 0), utc(2026, 3, 31, 16, 0)},

		// Lord Howe moves by 30 minutes: 2026-10-04 02:00 → 02:30.
		{"half-hour gap", "15 2 * * *", lordHowe, utc(2026, 10, 3, 0, 0), utc(2026, 10, 4, 15, 15)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := schedule.Parse(tc.spec)
			require.NoError(t, err)
			got := s.Next(time.Time{}, tc.t, tc.loc)
			if tc.want.IsZero() {
				require.True(t, got.IsZero(), "want none, got %s", got)
				return
			}
			require.Truef(t, tc.want.Equal(got), "want %s, got %s (%s)", tc.want, got, got.UTC())
			if tc.loc != nil {
				require.Equal(t, tc.loc, got.Location())
			}
		})
	}
}

// naiveNext is Next for a cron spec by brute force: every minute after t,
// checked field by field with the time package, within limit.
func naiveNext(c naiveCron, t time.Time, loc *time.Location, limit time.Duration) time.Time {
	u := t.Truncate(time.Minute).Add(time.Minute)
	for end := t.Add(limit); !u.After(end); u = u.Add(time.Minute) {
		w := u.In(loc)
		if !c.matches(w) {
			continue
		}
		// A repeated wall time counts at its first occurrence only.
		if p := u.Add(-time.Hour).In(loc); p.Hour() == w.Hour() && p.Minute() == w.Minute() && p.Day() == w.Day() {
			continue
		}
		return w
	}
	return time.Time{}
}

// naiveCron is an independent reading of a cron line, for naiveNext.
type naiveCron struct {
	min, hour, dom, mon, dow map[int]bool
	domStar, dowStar         bool
}

func (c naiveCron) matches(w time.Time) bool {
	if !c.min[w.Minute()] || !c.hour[w.Hour()] || !c.mon[int(w.Month())] {
		return false
	}
	d, wd := c.dom[w.Day()], c.dow[int(w.Weekday())]
	if c.domStar || c.dowStar {
		return d && wd
	}
	return d || wd
}

// naiveParse reads a cron line of numbers, "*", "*/n", "a-b" and "a-b/n"
// lists.
func naiveParse(t *testing.T, line string) naiveCron {
	f := strings.Fields(line)
	require.Len(t, f, 5)
	field := func(s string, lo, hi int) map[int]bool {
		m := map[int]bool{}
		for part := range strings.SplitSeq(s, ",") {
			rng, step := part, 1
			if i := strings.Index(part, "/"); i >= 0 {
				rng = part[:i]
				_, err := fmt.Sscan(part[i+1:], &step)
				require.NoError(t, err)
			}
			a, b := lo, hi
			switch {
			case rng == "*":
			case strings.Contains(rng, "-"):
				_, err := fmt.Sscanf(rng, "%d-%d", &a, &b)
				require.NoError(t, err)
			default:
				_, err := fmt.Sscan(rng, &a)
				require.NoError(t, err)
				b = a
			}
			for v := a; v <= b; v += step {
				if hi == 6 && v == 7 { // day-of-week 7 is Sunday
					v = 0
					m[v] = true
					break
				}
				m[v] = true
			}
		}
		return m
	}
	return naiveCron{
		min: field(f[0], 0, 59), hour: field(f[1], 0, 23), dom: field(f[2], 1, 31), mon: field(f[3], 1, 12),
		dow: field(f[4], 0, 6), domStar: strings.HasPrefix(f[2], "*"), dowStar: strings.HasPrefix(f[4], "*"),
	}
}

// TestNextMatchesBruteForce checks Next against a minute-by-minute search.
func TestNextMatchesBruteForce(t *testing.T) {
	specs := []string{
		"* * * * *", "*/7 * * * *", "13 * * * *", "0 */5 * * *", "30 2 * * *", "0,30 1-3 * * *",
		"45 23 * * 0", "0 0 1 * *", "0 12 15 * 3", "0 12 */3 * 1-5", "5 4 * * 7", "0 0 29 * *",
		"10-50/20 9-17 * * 1-5", "0 0 * 3,10,11 0", "59 1 1-7 * 0", "0 2 * * 6,0",
	}
	zones := []*time.Location{time.UTC, mustLoad(t, "America/New_York"), mustLoad(t, "Europe/Berlin"),
		mustLoad(t, "Asia/Shanghai")}
	starts := []time.Time{
		utc(2026, 3, 7, 22, 17), utc(2026, 3, 28, 23, 59), utc(2026, 10, 24, 23, 1), utc(2026, 10, 31, 20, 0),
		utc(2026, 11, 1, 5, 40), utc(2026, 11, 1, 6, 20), utc(2028, 2, 27, 12, 0),
	}
	const limit = 40 * 24 * time.Hour
	for _, line := range specs {
		s, err := schedule.Parse(line)
		require.NoError(t, err)
		naive := naiveParse(t, line)
		for _, loc := range zones {
			for _, start := range starts {
				// Follow a few due times from each start.
				at := start.Add(13 * time.Second)
				for range 4 {
					want := naiveNext(naive, at, loc, limit)
					got := s.Next(time.Time{}, at, loc)
					if want.IsZero() {
						require.True(t, got.IsZero() || got.Sub(at) > limit, "%s in %s after %s: got %s", line, loc, at, got)
						break
					}
					require.Truef(t, want.Equal(got), "%s in %s after %s: want %s, got %s", line, loc, at, want, got)
					at = got
				}
			}
		}
	}
}

func TestSpecZero(t *testing.T) {
	var s schedule.Spec
	require.True(t, s.IsZero())
	require.Empty(t, s.String())
	require.True(t, s.Next(time.Now(), time.Now(), time.UTC).IsZero())
	require.Zero(t, s.Interval())
	every, err := schedule.Parse("every 2h")
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, every.Interval())
	cron, err := schedule.Parse("@daily")
	require.NoError(t, err)
	require.Zero(t, cron.Interval())
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"every 90m", "every 1h30m", "0 9 * * 1-5", "*/15 * * * *", "0 0 29 2 *", "@weekly", "0 0 */2 * 1",
		"0 12 1 jan,jul sun-sat", "1-59/2 1-23/3 1-31/5 1-12/2 1-7/2", "every 1.5h", "* * * * 7", "0 0 30 2 *",
		"", "every", "5/15 * * * *", "*,1 * * * *", "@yearly",
	} {
		f.Add(seed, int64(1772442000), uint8(0))
	}
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Shanghai", "Australia/Lord_Howe"}
	locs := make([]*time.Location, len(zones))
	for i, z := range zones {
		locs[i] = mustLoad(f, z)
	}
	f.Fuzz(func(t *testing.T, spec string, sec int64, zone uint8) {
		s, err := schedule.Parse(spec)
		if err != nil {
			require.ErrorIs(t, err, schedule.ErrSpec)
			require.True(t, s.IsZero())
			return
		}
		again, err := schedule.Parse(s.String())
		require.NoError(t, err, "canonical form %q", s.String())
		require.Equal(t, s, again)
		// Any instant between 1900 and 2200.
		const lo, span = -2208988800, 9467280000
		sec = lo + (sec%span+span)%span
		at := time.Unix(sec, int64(uint64(sec)%1e9))
		loc := locs[int(zone)%len(locs)]
		next := s.Next(at.Add(-time.Duration(sec%7)*time.Hour), at, loc)
		require.True(t, next.IsZero() || next.After(at), "Next(%s) = %s is not after it", at, next)
		if !next.IsZero() && s.Interval() == 0 {
			require.Zero(t, next.Second(), "cron due times are whole minutes")
			require.True(t, next.Sub(at) <= 6*366*24*time.Hour)
			// The due time after next is later still.
			after := s.Next(next, next, loc)
			require.True(t, after.IsZero() || after.After(next))
		}
	})
}
