package schedule_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/schedule"
	"github.com/personakit/persona/schedule/scheduletest"
)

func valid() schedule.Schedule {
	return schedule.Schedule{
		ID: "daily-news", SessionKey: "default:telegram:b:group:-100",
		Target: schedule.Target{Platform: "telegram", BotID: "b", Chat: channel.Chat{Kind: channel.Group, ID: "-100"}},
		Spec:   "0 9 * * mon-fri", Zone: "Europe/Berlin", Prompt: "Share today's news.", Enabled: true,
	}
}

func TestValidate(t *testing.T) {
	s := valid()
	require.NoError(t, s.Validate())
	cases := []struct {
		name   string
		mutate func(s *schedule.Schedule)
		want   string
	}{
		{"empty id", func(s *schedule.Schedule) { s.ID = "" }, "id is empty"},
		{"long id", func(s *schedule.Schedule) { s.ID = strings.Repeat("x", 129) }, "id of 129 bytes is longer than 128"},
		{"control in id", func(s *schedule.Schedule) { s.ID = "a\tb" }, "control character"},
		{"bad utf8 id", func(s *schedule.Schedule) { s.ID = "a\xffb" }, "not valid UTF-8"},
		{"no session", func(s *schedule.Schedule) { s.SessionKey = "" }, "session key is empty"},
		{"control in session", func(s *schedule.Schedule) { s.SessionKey = "a\x00" }, "control character"},
		{"no platform", func(s *schedule.Schedule) { s.Target.Platform = "" }, "no platform"},
		{"no bot", func(s *schedule.Schedule) { s.Target.BotID = "" }, "no bot id"},
		{"bad chat kind", func(s *schedule.Schedule) { s.Target.Chat.Kind = "channel" }, `chat kind "channel"`},
		{"no chat id", func(s *schedule.Schedule) { s.Target.Chat.ID = "" }, "chat has no id"},
		{"bad spec", func(s *schedule.Schedule) { s.Spec = "0 25 * * *" }, "hour field"},
		{"empty spec", func(s *schedule.Schedule) { s.Spec = "" }, "spec is empty"},
		{"unknown zone", func(s *schedule.Schedule) { s.Zone = "Europe/Atlantis" }, `unknown time zone "Europe/Atlantis"`},
		{"local zone", func(s *schedule.Schedule) { s.Zone = "Local" }, "depends on the host"},
		{"blank prompt", func(s *schedule.Schedule) { s.Prompt = " \n\t" }, "empty prompt"},
		{"long prompt", func(s *schedule.Schedule) { s.Prompt = strings.Repeat("é", 2001) }, "prompt of 4002 bytes is longer than 4000"},
		{"bad utf8 prompt", func(s *schedule.Schedule) { s.Prompt = "hi \xff" }, "prompt is not valid UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := valid()
			tc.mutate(&s)
			err := s.Validate()
			require.ErrorIs(t, err, schedule.ErrInvalid)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	var nilSched *schedule.Schedule
	require.ErrorIs(t, nilSched.Validate(), schedule.ErrInvalid)
	bad := valid()
	bad.Spec = "every 5s"
	require.ErrorIs(t, bad.Validate(), schedule.ErrSpec)

	// Limits are inclusive; "" and "UTC" zones are UTC.
	s = valid()
	s.ID, s.Prompt, s.Zone = strings.Repeat("x", schedule.MaxIDBytes), strings.Repeat("p", schedule.MaxPromptBytes), ""
	require.NoError(t, s.Validate())
	s.Zone = "UTC"
	require.NoError(t, s.Validate())
}

func TestPlan(t *testing.T) {
	now := time.Date(2026, 3, 2, 9, 30, 15, 123456789, time.UTC) // a Monday
	s := valid()
	s.Spec = "0 9 * * MON-FRI"
	require.NoError(t, schedule.Plan(&s, now))
	require.Equal(t, "0 9 * * 1-5", s.Spec, "canonical spec")
	require.Equal(t, time.Date(2026, 3, 3, 8, 0, 0, 0, time.UTC), s.NextDue, "09:00 CET Tuesday")
	require.Equal(t, now.Truncate(time.Millisecond), s.CreatedAt)
	require.Equal(t, now.Truncate(time.Millisecond), s.UpdatedAt)

	// An edit keeps CreatedAt and re-anchors an interval at now.
	later := now.Add(time.Hour)
	s.Spec = "every 90m"
	require.NoError(t, schedule.Plan(&s, later))
	require.Equal(t, "every 1h30m", s.Spec)
	require.Equal(t, later.Truncate(time.Millisecond).Add(90*time.Minute), s.NextDue)
	require.Equal(t, now.Truncate(time.Millisecond), s.CreatedAt)
	require.Equal(t, later.Truncate(time.Millisecond), s.UpdatedAt)

	// A spec that never falls due is refused, and s is left alone.
	before := s
	s.Spec = "0 0 30 2 *"
	err := schedule.Plan(&s, now)
	require.ErrorIs(t, err, schedule.ErrInvalid)
	require.ErrorIs(t, err, schedule.ErrSpec)
	require.Contains(t, err.Error(), "never falls due")
	s.Spec = before.Spec
	require.Equal(t, before, s)

	bad := valid()
	bad.Prompt = ""
	require.ErrorIs(t, schedule.Plan(&bad, now), schedule.ErrInvalid)
	require.True(t, bad.NextDue.IsZero(), "not changed on error")
	bad = valid()
	bad.Spec = "every 1s"
	require.ErrorIs(t, schedule.Plan(&bad, now), schedule.ErrSpec)
	require.ErrorIs(t, schedule.Plan(nil, now), schedule.ErrInvalid)
}

func TestNextAfter(t *testing.T) {
	s := valid()
	s.Spec, s.Zone = "every 1h", ""
	s.NextDue = time.Date(2026, 3, 2, 9, 20, 0, 0, time.UTC)
	got, err := s.NextAfter(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 3, 2, 12, 20, 0, 0, time.UTC), got.UTC(), "on NextDue's lattice")
	s.NextDue = time.Time{}
	got, err = s.NextAfter(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 3, 2, 13, 0, 0, 0, time.UTC), got.UTC(), "anchored at t")
	s.Spec, s.Zone = "0 9 * * *", "Asia/Shanghai"
	got, err = s.NextAfter(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 3, 3, 1, 0, 0, 0, time.UTC), got.UTC())
	require.Equal(t, "Asia/Shanghai", got.Location().String())
	s.Spec = "bogus"
	_, err = s.NextAfter(time.Now())
	require.ErrorIs(t, err, schedule.ErrSpec)
	s.Spec, s.Zone = "@daily", "Nowhere/Land"
	_, err = s.NextAfter(time.Now())
	require.ErrorIs(t, err, schedule.ErrInvalid)
}

func TestFiringID(t *testing.T) {
	f := schedule.Firing{Schedule: schedule.Schedule{ID: "news:1"}, Due: time.UnixMilli(1772442000123)}
	require.Equal(t, "schedule:news:1:1772442000123", f.ID())
	f.Due = f.Due.In(time.FixedZone("X", 3600)).Add(456 * time.Microsecond)
	require.Equal(t, "schedule:news:1:1772442000123", f.ID(), "same instant, any zone, sub-ms ignored")
	f.Late, f.Missed = true, 4
	require.Equal(t, "schedule:news:1:1772442000123", f.ID(), "depends on schedule and due time only")
}

func TestLoadZone(t *testing.T) {
	for _, name := range []string{"", "UTC"} {
		loc, err := schedule.LoadZone(name)
		require.NoError(t, err)
		require.Equal(t, time.UTC, loc)
	}
	a, err := schedule.LoadZone("Asia/Shanghai")
	require.NoError(t, err)
	b, err := schedule.LoadZone("Asia/Shanghai")
	require.NoError(t, err)
	require.Same(t, a, b, "cached")
	for _, bad := range []string{"Local", "Nowhere/Land", "../etc/passwd", "asia/shanghai "} {
		_, err := schedule.LoadZone(bad)
		require.ErrorIs(t, err, schedule.ErrInvalid, bad)
	}
}

func TestNewRunnerConfig(t *testing.T) {
	st := scheduletest.NewMemory()
	fire := func(context.Context, schedule.Firing) error { return nil }
	cases := map[string]schedule.Config{
		"no store":                    {Fire: fire},
		"no fire":                     {Store: st},
		"negative grace":              {Store: st, Fire: fire, Grace: -time.Second},
		"negative maxlate":            {Store: st, Fire: fire, MaxLate: -time.Second},
		"negative retry":              {Store: st, Fire: fire, Retry: -time.Second},
		"negative batch":              {Store: st, Fire: fire, Batch: -1},
		"maxlate < grace":             {Store: st, Fire: fire, Grace: time.Hour, MaxLate: time.Minute},
		"default maxlate below grace": {Store: st, Fire: fire, Grace: 2 * time.Hour},
	}
	for name, c := range cases {
		r, err := schedule.NewRunner(c)
		require.ErrorIs(t, err, schedule.ErrInvalid, name)
		require.Nil(t, r)
	}
	r, err := schedule.NewRunner(schedule.Config{Store: st, Fire: fire})
	require.NoError(t, err)
	require.NotNil(t, r)
}

// TestRunnerFirePanics: a panicking Fire is an error, not a crash, and
// the schedule is not advanced.
func TestRunnerFirePanics(t *testing.T) {
	st := scheduletest.NewMemory()
	s := valid()
	s.Spec, s.Zone = "every 1h", ""
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	require.NoError(t, schedule.Plan(&s, now))
	require.NoError(t, st.PutSchedule(t.Context(), s))
	clk := clock.NewFake(s.NextDue)
	r, err := schedule.NewRunner(schedule.Config{Store: st, Clock: clk,
		Fire: func(context.Context, schedule.Firing) error { panic("boom") }})
	require.NoError(t, err)
	n, err := r.Tick(t.Context())
	require.ErrorContains(t, err, "boom")
	require.Zero(t, n)
	got, _, err := st.GetSchedule(t.Context(), s.ID)
	require.NoError(t, err)
	require.Equal(t, s.NextDue, got.NextDue)
}

// TestRunnerBrokenStoredSchedule: a stored schedule whose spec or zone no
// longer loads is reported, and does not stop the others.
func TestRunnerBrokenStoredSchedule(t *testing.T) {
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	good := valid()
	good.ID, good.Spec, good.Zone = "good", "every 1h", ""
	require.NoError(t, schedule.Plan(&good, now))
	st := &brokenStore{Memory: scheduletest.NewMemory()}
	require.NoError(t, st.PutSchedule(t.Context(), good))
	broken := good
	broken.ID, broken.Spec = "broken", "every 1s"
	st.extra = []schedule.Schedule{broken}
	var fired []string
	r, err := schedule.NewRunner(schedule.Config{Store: st, Clock: clock.NewFake(good.NextDue),
		Fire: func(_ context.Context, f schedule.Firing) error { fired = append(fired, f.Schedule.ID); return nil }})
	require.NoError(t, err)
	n, err := r.Tick(t.Context())
	require.ErrorIs(t, err, schedule.ErrSpec)
	require.Contains(t, err.Error(), `schedule "broken"`)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"good"}, fired)
}

// brokenStore returns extra schedules (which Put would refuse) as due.
type brokenStore struct {
	*scheduletest.Memory
	extra []schedule.Schedule
}

func (b *brokenStore) DueSchedules(ctx context.Context, now time.Time, limit int) ([]schedule.Schedule, error) {
	due, err := b.Memory.DueSchedules(ctx, now, limit)
	return append(b.extra, due...), err
}
