package scheduletest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/schedule"
)

// Start is the time every subtest starts at (a Monday, 09:00 UTC).
var Start = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// Run runs the conformance suite against the stores open returns: the
// Store contract under "Store/", and the Runner driving that store with a
// fake clock under "Runner/". open is called once per subtest, possibly
// from several goroutines at once, and must return an independent, empty
// store each time.
func Run(t *testing.T, open func(t *testing.T) schedule.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"Store/RoundTripEveryField", testRoundTrip},
		{"Store/PutReplaces", testPutReplaces},
		{"Store/GetMissing", testGetMissing},
		{"Store/PutRejectsInvalid", testPutInvalid},
		{"Store/ListBySession", testList},
		{"Store/Delete", testDelete},
		{"Store/DueOrderAndLimit", testDueOrder},
		{"Store/DueExcludesDisabled", testDueDisabled},
		{"Store/NextDueAt", testNextDueAt},
		{"Store/AdvanceCompareAndSet", testAdvanceCAS},
		{"Store/AdvanceSkippedKeepsLastDue", testAdvanceSkipped},
		{"Store/AdvanceMissingOrInvalid", testAdvanceMissing},
		{"Store/AdvanceConcurrent", testAdvanceConcurrent},
		{"Runner/OnTime", testRunnerOnTime},
		{"Runner/SeveralDue", testRunnerSeveral},
		{"Runner/DowntimeFiresLatestOnce", testRunnerDowntime},
		{"Runner/CronCatchUp", testRunnerCronCatchUp},
		{"Runner/DowntimeBeyondMaxLateSkips", testRunnerTooLate},
		{"Runner/FireErrorRetried", testRunnerFireError},
		{"Runner/CrashBeforeAdvanceRefires", testRunnerCrash},
		{"Runner/PagesPastFailingSchedules", testRunnerPages},
		{"Runner/Workers", testRunnerWorkers},
		{"Runner/DisabledNeverFires", testRunnerDisabled},
		{"Runner/TwoRunnersRace", testRunnerRace},
		{"Runner/RunWakesAtDueTime", testRunWakesAtDue},
		{"Runner/RunWake", testRunWake},
		{"Runner/RunRetriesAfterFailure", testRunRetry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := open(t)
			require.NotNil(t, st, "open returned nil")
			tc.fn(t, &harness{t: t, st: st, clk: clock.NewFake(Start)})
		})
	}
}

// harness bundles a store under test with a fake clock.
type harness struct {
	t   *testing.T
	st  schedule.Store
	clk *clock.Fake
}

// target is a valid target for chat id.
func target(chat string) schedule.Target {
	return schedule.Target{Platform: "test", BotID: "bot", Chat: channel.Chat{Kind: channel.Group, ID: chat}}
}

// sched returns a valid, enabled schedule planned at the clock's now.
func (h *harness) sched(id, session, spec, zone string) schedule.Schedule {
	h.t.Helper()
	s := schedule.Schedule{ID: id, SessionKey: session, Target: target(session), Spec: spec, Zone: zone,
		Prompt: "say something about " + id, Enabled: true}
	require.NoError(h.t, schedule.Plan(&s, h.clk.Now()))
	return s
}

// put plans and stores a schedule.
func (h *harness) put(id, session, spec, zone string) schedule.Schedule {
	h.t.Helper()
	s := h.sched(id, session, spec, zone)
	require.NoError(h.t, h.st.PutSchedule(h.t.Context(), s))
	return s
}

// putAt stores a valid schedule with the given NextDue.
func (h *harness) putAt(id string, next time.Time, enabled bool) schedule.Schedule {
	h.t.Helper()
	s := h.sched(id, "s-"+id, "every 1h", "")
	s.NextDue, s.Enabled = next, enabled
	require.NoError(h.t, h.st.PutSchedule(h.t.Context(), s))
	return s
}

func (h *harness) get(id string) schedule.Schedule {
	h.t.Helper()
	s, ok, err := h.st.GetSchedule(h.t.Context(), id)
	require.NoError(h.t, err)
	require.True(h.t, ok, "schedule %q not found", id)
	return s
}

// requireTime asserts two instants are equal.
func requireTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.Truef(t, want.Equal(got), "%s: want %s, got %s", what, want, got)
}

// ms truncates to the millisecond.
func ms(t time.Time) time.Time { return msTime(t) }

// requireSame asserts that got is want as a store keeps it (times at ms).
func requireSame(t *testing.T, want, got schedule.Schedule) {
	t.Helper()
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.SessionKey, got.SessionKey)
	require.Equal(t, want.Target, got.Target)
	require.Equal(t, want.Spec, got.Spec)
	require.Equal(t, want.Zone, got.Zone)
	require.Equal(t, want.Prompt, got.Prompt)
	require.Equal(t, want.Enabled, got.Enabled)
	requireTime(t, ms(want.NextDue), got.NextDue, "NextDue")
	requireTime(t, ms(want.CreatedAt), got.CreatedAt, "CreatedAt")
	requireTime(t, ms(want.UpdatedAt), got.UpdatedAt, "UpdatedAt")
	require.Equal(t, want.LastDue.IsZero(), got.LastDue.IsZero(), "LastDue zero-ness")
	requireTime(t, ms(want.LastDue), got.LastDue, "LastDue")
}

func ids(ss []schedule.Schedule) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

// --- Store ---

func testRoundTrip(t *testing.T, h *harness) {
	ctx := t.Context()
	full := schedule.Schedule{
		ID:         "morning:news/1",
		SessionKey: "default:onebot:10001:group:42",
		Target: schedule.Target{Profile: "night-owl", Platform: "onebot", BotID: "10001",
			Chat: channel.Chat{Kind: channel.Group, ID: "42 ünïcode"}},
		Spec:      "0 9 * * 1-5",
		Zone:      "Asia/Shanghai",
		Prompt:    "Good morning! 早上好\nShare one \"headline\".",
		NextDue:   Start.Add(time.Hour + 123456789*time.Nanosecond),
		LastDue:   Start.Add(-23*time.Hour + 987654321*time.Nanosecond),
		Enabled:   true,
		CreatedAt: Start.Add(-48*time.Hour + 555*time.Microsecond),
		UpdatedAt: Start.Add(-time.Hour + 999999*time.Nanosecond),
	}
	bare := schedule.Schedule{
		ID: "b", SessionKey: "default:telegram:b:private:7",
		Target: schedule.Target{Platform: "telegram", BotID: "b", Chat: channel.Chat{Kind: channel.Private, ID: "7"}},
		Spec:   "every 1h30m", Prompt: "ping", NextDue: Start.Add(90 * time.Minute),
		CreatedAt: Start, UpdatedAt: Start,
	}
	require.NoError(t, h.st.PutSchedule(ctx, full))
	require.NoError(t, h.st.PutSchedule(ctx, bare))
	requireSame(t, full, h.get(full.ID))
	got := h.get(bare.ID)
	requireSame(t, bare, got)
	require.True(t, got.LastDue.IsZero())
	require.False(t, got.Enabled)
	require.Empty(t, got.Target.Profile)
	require.Empty(t, got.Zone)

	// Every read returns the same fields.
	all, err := h.st.ListSchedules(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 2)
	requireSame(t, bare, all[0])
	requireSame(t, full, all[1])
	due, err := h.st.DueSchedules(ctx, Start.Add(2*time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, due, 1)
	requireSame(t, full, due[0])
	at, ok, err := h.st.NextDueAt(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	requireTime(t, ms(full.NextDue), at, "NextDueAt")
	require.Equal(t, full.NextDue.UnixMilli(), at.UnixMilli())
}

func testPutReplaces(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.put("a", "s1", "every 30m", "")
	s.SessionKey = "s2"
	s.Target = target("other")
	s.Spec = "*/5 * * * *"
	s.Zone = "Europe/Berlin"
	s.Prompt = "changed"
	s.Enabled = false
	s.NextDue = Start.Add(5 * time.Minute)
	s.LastDue = Start.Add(-time.Minute)
	s.UpdatedAt = Start.Add(time.Second)
	require.NoError(t, h.st.PutSchedule(ctx, s))
	requireSame(t, s, h.get("a"))
	all, err := h.st.ListSchedules(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 1)
}

func testGetMissing(t *testing.T, h *harness) {
	s, ok, err := h.st.GetSchedule(t.Context(), "nope")
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, s.ID)
}

func testPutInvalid(t *testing.T, h *harness) {
	cases := map[string]func(s *schedule.Schedule){
		"empty id":        func(s *schedule.Schedule) { s.ID = "" },
		"control in id":   func(s *schedule.Schedule) { s.ID = "a\nb" },
		"no session":      func(s *schedule.Schedule) { s.SessionKey = "" },
		"bad spec":        func(s *schedule.Schedule) { s.Spec = "every 10s" },
		"bad zone":        func(s *schedule.Schedule) { s.Zone = "Mars/Olympus_Mons" },
		"empty prompt":    func(s *schedule.Schedule) { s.Prompt = "  " },
		"long prompt":     func(s *schedule.Schedule) { s.Prompt = string(make([]byte, schedule.MaxPromptBytes+1)) },
		"no platform":     func(s *schedule.Schedule) { s.Target.Platform = "" },
		"bad chat kind":   func(s *schedule.Schedule) { s.Target.Chat.Kind = "channel" },
		"zero next due":   func(s *schedule.Schedule) { s.NextDue = time.Time{} },
		"no chat id":      func(s *schedule.Schedule) { s.Target.Chat.ID = "" },
		"no bot id":       func(s *schedule.Schedule) { s.Target.BotID = "" },
		"overlong id":     func(s *schedule.Schedule) { s.ID = string(make([]byte, schedule.MaxIDBytes+1)) },
		"invalid utf8 id": func(s *schedule.Schedule) { s.ID = "\xff" },
	}
	for name, mutate := range cases {
		s := h.sched("x", "s", "every 1h", "")
		mutate(&s)
		err := h.st.PutSchedule(t.Context(), s)
		require.ErrorIs(t, err, schedule.ErrInvalid, name)
	}
	all, err := h.st.ListSchedules(t.Context(), "")
	require.NoError(t, err)
	require.Empty(t, all, "an invalid put wrote something")
}

func testList(t *testing.T, h *harness) {
	ctx := t.Context()
	h.put("c", "s1", "every 1h", "")
	h.put("a", "s1", "every 1h", "")
	h.put("b", "s2", "every 1h", "")
	h.put("d", "s1", "@daily", "Europe/Berlin")
	got, err := h.st.ListSchedules(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c", "d"}, ids(got))
	got, err = h.st.ListSchedules(ctx, "s2")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, ids(got))
	got, err = h.st.ListSchedules(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "d"}, ids(got))
	got, err = h.st.ListSchedules(ctx, "s3")
	require.NoError(t, err)
	require.Empty(t, got)
}

func testDelete(t *testing.T, h *harness) {
	ctx := t.Context()
	h.put("a", "s1", "every 1h", "")
	h.put("b", "s1", "every 1h", "")
	require.NoError(t, h.st.DeleteSchedule(ctx, "a"))
	_, ok, err := h.st.GetSchedule(ctx, "a")
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, h.st.DeleteSchedule(ctx, "a"), schedule.ErrNotFound)
	require.ErrorIs(t, h.st.DeleteSchedule(ctx, "never"), schedule.ErrNotFound)
	got, err := h.st.ListSchedules(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, ids(got))
}

func testDueOrder(t *testing.T, h *harness) {
	ctx := t.Context()
	now := Start
	h.putAt("late", now.Add(-time.Hour), true)
	h.putAt("later", now, true) // due exactly now: included
	h.putAt("early", now.Add(-3*time.Hour), true)
	h.putAt("tie-b", now.Add(-2*time.Hour), true)
	h.putAt("tie-a", now.Add(-2*time.Hour), true)
	h.putAt("future", now.Add(time.Millisecond), true)

	got, err := h.st.DueSchedules(ctx, now, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"early", "tie-a", "tie-b", "late", "later"}, ids(got))
	got, err = h.st.DueSchedules(ctx, now, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"early", "tie-a"}, ids(got))
	got, err = h.st.DueSchedules(ctx, now.Add(-3*time.Hour-time.Millisecond), 10)
	require.NoError(t, err)
	require.Empty(t, got)
	for _, limit := range []int{0, -1} {
		_, err = h.st.DueSchedules(ctx, now, limit)
		require.ErrorIs(t, err, schedule.ErrInvalid, "limit %d", limit)
	}
}

func testDueDisabled(t *testing.T, h *harness) {
	ctx := t.Context()
	h.putAt("off", Start.Add(-2*time.Hour), false)
	h.putAt("on", Start.Add(-time.Hour), true)
	got, err := h.st.DueSchedules(ctx, Start, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"on"}, ids(got))
	require.NoError(t, h.st.DeleteSchedule(ctx, "on"))
	got, err = h.st.DueSchedules(ctx, Start, 10)
	require.NoError(t, err)
	require.Empty(t, got)
}

func testNextDueAt(t *testing.T, h *harness) {
	ctx := t.Context()
	_, ok, err := h.st.NextDueAt(ctx)
	require.NoError(t, err)
	require.False(t, ok, "empty store")
	h.putAt("off", Start.Add(time.Minute), false)
	_, ok, err = h.st.NextDueAt(ctx)
	require.NoError(t, err)
	require.False(t, ok, "only a disabled schedule")
	h.putAt("b", Start.Add(3*time.Hour), true)
	h.putAt("a", Start.Add(2*time.Hour+7*time.Millisecond), true)
	at, ok, err := h.st.NextDueAt(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	requireTime(t, Start.Add(2*time.Hour+7*time.Millisecond), at, "NextDueAt")
	// A past NextDue is still the earliest.
	h.putAt("c", Start.Add(-time.Hour), true)
	at, ok, err = h.st.NextDueAt(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	requireTime(t, Start.Add(-time.Hour), at, "NextDueAt")
}

func testAdvanceCAS(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.put("a", "s", "every 30m", "")
	before := h.get("a")
	due := s.NextDue
	next := due.Add(30 * time.Minute)

	ok, err := h.st.AdvanceSchedule(ctx, "a", due.Add(-time.Millisecond), due, next)
	require.NoError(t, err)
	require.False(t, ok, "stale expect must be refused")
	requireSame(t, before, h.get("a"))

	ok, err = h.st.AdvanceSchedule(ctx, "a", due, due, next)
	require.NoError(t, err)
	require.True(t, ok)
	got := h.get("a")
	requireTime(t, next, got.NextDue, "NextDue")
	requireTime(t, due, got.LastDue, "LastDue")
	requireTime(t, before.UpdatedAt, got.UpdatedAt, "UpdatedAt is left alone")
	require.Equal(t, before.Spec, got.Spec)

	// The same advance again is now stale.
	ok, err = h.st.AdvanceSchedule(ctx, "a", due, due, next)
	require.NoError(t, err)
	require.False(t, ok)
	requireTime(t, next, h.get("a").NextDue, "NextDue")

	// An edit (a new Put) moves NextDue: an advance that expected the old
	// one is refused.
	edited := h.get("a")
	edited.NextDue = Start.Add(7 * time.Hour)
	require.NoError(t, h.st.PutSchedule(ctx, edited))
	ok, err = h.st.AdvanceSchedule(ctx, "a", next, next, next.Add(30*time.Minute))
	require.NoError(t, err)
	require.False(t, ok)
	requireTime(t, Start.Add(7*time.Hour), h.get("a").NextDue, "NextDue after edit")

	// expect is compared at millisecond precision.
	odd := Start.Add(9*time.Hour + 250*time.Microsecond)
	edited.NextDue = odd
	require.NoError(t, h.st.PutSchedule(ctx, edited))
	ok, err = h.st.AdvanceSchedule(ctx, "a", odd, odd, odd.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, ok, "expect with sub-millisecond digits must match the stored millisecond")
}

func testAdvanceSkipped(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.put("a", "s", "every 30m", "")
	ok, err := h.st.AdvanceSchedule(ctx, "a", s.NextDue, s.NextDue, s.NextDue.Add(30*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	fired := s.NextDue
	ok, err = h.st.AdvanceSchedule(ctx, "a", fired.Add(30*time.Minute), time.Time{}, fired.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, ok)
	got := h.get("a")
	requireTime(t, fired, got.LastDue, "LastDue kept by a skipped firing")
	requireTime(t, fired.Add(time.Hour), got.NextDue, "NextDue")

	// A never-fired schedule stays never fired.
	b := h.put("b", "s", "every 30m", "")
	ok, err = h.st.AdvanceSchedule(ctx, "b", b.NextDue, time.Time{}, b.NextDue.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, h.get("b").LastDue.IsZero())
}

func testAdvanceMissing(t *testing.T, h *harness) {
	ctx := t.Context()
	ok, err := h.st.AdvanceSchedule(ctx, "ghost", Start, Start, Start.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, ok)
	s := h.put("a", "s", "every 30m", "")
	_, err = h.st.AdvanceSchedule(ctx, "a", s.NextDue, s.NextDue, time.Time{})
	require.ErrorIs(t, err, schedule.ErrInvalid)
	requireTime(t, s.NextDue, h.get("a").NextDue, "NextDue after a refused advance")
}

func testAdvanceConcurrent(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.put("a", "s", "every 30m", "")
	const n = 8
	var wg sync.WaitGroup
	results := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			fired := s.NextDue.Add(time.Duration(i) * time.Millisecond)
			results[i], errs[i] = h.st.AdvanceSchedule(ctx, "a", s.NextDue, fired, s.NextDue.Add(time.Hour))
		})
	}
	wg.Wait()
	won := -1
	for i := range n {
		require.NoError(t, errs[i])
		if results[i] {
			require.Equal(t, -1, won, "two advances with the same expect both succeeded")
			won = i
		}
	}
	require.NotEqual(t, -1, won, "no advance succeeded")
	requireTime(t, s.NextDue.Add(time.Duration(won)*time.Millisecond), h.get("a").LastDue, "LastDue of the winner")
}

// --- Runner ---

// recorder collects firings and skips; failures makes the next calls of
// Fire fail.
type recorder struct {
	mu       sync.Mutex
	fired    []schedule.Firing
	skipped  []schedule.Firing
	failures int
	ch       chan schedule.Firing
}

func (r *recorder) fire(_ context.Context, f schedule.Firing) error {
	r.mu.Lock()
	if r.failures > 0 {
		r.failures--
		r.mu.Unlock()
		return errors.New("enqueue failed")
	}
	r.fired = append(r.fired, f)
	ch := r.ch
	r.mu.Unlock()
	if ch != nil {
		ch <- f
	}
	return nil
}

func (r *recorder) skip(_ context.Context, f schedule.Firing) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped = append(r.skipped, f)
}

func (r *recorder) firedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.fired))
	for i, f := range r.fired {
		out[i] = f.ID()
	}
	return out
}

func (h *harness) runner(rec *recorder, mod ...func(*schedule.Config)) *schedule.Runner {
	h.t.Helper()
	c := schedule.Config{Store: h.st, Clock: h.clk, Fire: rec.fire, Skip: rec.skip}
	for _, m := range mod {
		m(&c)
	}
	r, err := schedule.NewRunner(c)
	require.NoError(h.t, err)
	return r
}

func (h *harness) tick(r *schedule.Runner) int {
	h.t.Helper()
	n, err := r.Tick(h.t.Context())
	require.NoError(h.t, err)
	return n
}

func fid(id string, due time.Time) string {
	return "schedule:" + id + ":" + strconv.FormatInt(due.UnixMilli(), 10)
}

func testRunnerOnTime(t *testing.T, h *harness) {
	rec := &recorder{}
	r := h.runner(rec)
	s := h.put("a", "s", "every 30m", "")
	due := Start.Add(30 * time.Minute)
	requireTime(t, due, s.NextDue, "planned NextDue")

	h.clk.Set(due.Add(-time.Second))
	require.Equal(t, 0, h.tick(r), "not due yet")
	h.clk.Set(due.Add(20 * time.Second))
	require.Equal(t, 1, h.tick(r))
	require.Len(t, rec.fired, 1)
	f := rec.fired[0]
	requireTime(t, due, f.Due, "Due")
	require.False(t, f.Late)
	require.Zero(t, f.Missed)
	require.Equal(t, "a", f.Schedule.ID)
	require.Equal(t, fid("a", due), f.ID())
	got := h.get("a")
	requireTime(t, due.Add(30*time.Minute), got.NextDue, "NextDue advanced")
	requireTime(t, due, got.LastDue, "LastDue")
	require.Equal(t, 0, h.tick(r), "fired once")
	require.Empty(t, rec.skipped)

	h.clk.Set(due.Add(30 * time.Minute))
	require.Equal(t, 1, h.tick(r))
	require.Equal(t, []string{fid("a", due), fid("a", due.Add(30*time.Minute))}, rec.firedIDs())
}

func testRunnerSeveral(t *testing.T, h *harness) {
	rec := &recorder{}
	r := h.runner(rec)
	h.put("hourly", "s1", "every 1h", "")                // 10:00
	h.put("quarter", "s2", "*/15 * * * *", "")           // 09:15
	h.put("berlin", "s3", "0 10 * * *", "Europe/Berlin") // 10:00 CET = 09:00 UTC tomorrow
	h.put("shanghai", "s1", "30 17 * * *", "Asia/Shanghai")
	h.put("later", "s4", "every 2h", "")
	// 17:30 in Shanghai is 09:30 UTC.
	h.clk.Set(Start.Add(time.Hour))
	require.Equal(t, 3, h.tick(r))
	require.Equal(t, []string{
		fid("quarter", Start.Add(time.Hour)),
		fid("shanghai", Start.Add(30*time.Minute)),
		fid("hourly", Start.Add(time.Hour)),
	}, rec.firedIDs(), "fired by NextDue, earliest first")
	byID := map[string]schedule.Firing{}
	for _, f := range rec.fired {
		byID[f.Schedule.ID] = f
	}
	require.False(t, byID["quarter"].Late, "10:00 fires on time")
	require.Equal(t, 3, byID["quarter"].Missed, "09:15, 09:30 and 09:45 skipped for 10:00")
	require.True(t, byID["shanghai"].Late)
	require.Zero(t, byID["shanghai"].Missed)
	require.False(t, byID["hourly"].Late)
	requireTime(t, Start.Add(time.Hour+15*time.Minute), h.get("quarter").NextDue, "quarter NextDue")
	requireTime(t, Start.Add(24*time.Hour+30*time.Minute), h.get("shanghai").NextDue, "shanghai NextDue")
	requireTime(t, Start.Add(24*time.Hour), h.get("berlin").NextDue, "berlin NextDue")
	requireTime(t, Start.Add(2*time.Hour), h.get("later").NextDue, "later NextDue")
}

func testRunnerDowntime(t *testing.T, h *harness) {
	rec := &recorder{}
	r := h.runner(rec, func(c *schedule.Config) { c.MaxLate = time.Hour })
	h.put("a", "s", "every 30m", "")
	// Down for 5 h 10 min: due at 09:30, 10:00, ..., 14:00 (ten times).
	now := Start.Add(5*time.Hour + 10*time.Minute)
	h.clk.Set(now)
	require.Equal(t, 1, h.tick(r))
	require.Len(t, rec.fired, 1)
	f := rec.fired[0]
	requireTime(t, Start.Add(5*time.Hour), f.Due, "the latest due time")
	require.True(t, f.Late)
	require.Equal(t, 9, f.Missed)
	require.Empty(t, rec.skipped)
	got := h.get("a")
	requireTime(t, Start.Add(5*time.Hour+30*time.Minute), got.NextDue, "NextDue stays on the lattice")
	requireTime(t, f.Due, got.LastDue, "LastDue")
	require.Equal(t, 0, h.tick(r))
}

func testRunnerCronCatchUp(t *testing.T, h *harness) {
	rec := &recorder{}
	r := h.runner(rec)
	h.put("a", "s", "*/10 * * * *", "America/New_York")
	h.clk.Set(Start.Add(55 * time.Minute))
	require.Equal(t, 1, h.tick(r))
	f := rec.fired[0]
	requireTime(t, Start.Add(50*time.Minute), f.Due, "Due")
	require.Equal(t, 4, f.Missed)
	require.True(t, f.Late)
	requireTime(t, Start.Add(time.Hour), h.get("a").NextDue, "NextDue")
}

func testRunnerTooLate(t *testing.T, h *harness) {
	rec := &recorder{}
	r := h.runner(rec, func(c *schedule.Config) { c.MaxLate = time.Hour })
	// 09:00 in Shanghai is 01:00 UTC; first due 2026-03-03 01:00 UTC.
	h.put("a", "s", "0 9 * * *", "Asia/Shanghai")
	now := time.Date(2026, 3, 5, 3, 0, 0, 0, time.UTC) // 2 h after the third due time
	h.clk.Set(now)
	require.Equal(t, 0, h.tick(r))
	require.Empty(t, rec.fired)
	require.Len(t, rec.skipped, 1)
	f := rec.skipped[0]
	requireTime(t, time.Date(2026, 3, 5, 1, 0, 0, 0, time.UTC), f.Due, "skipped due time")
	require.Equal(t, 2, f.Missed)
	require.True(t, f.Late)
	got := h.get("a")
	require.True(t, got.NextDue.After(now), "NextDue in the future")
	requireTime(t, time.Date(2026, 3, 6, 1, 0, 0, 0, time.UTC), got.NextDue, "NextDue")
	require.True(t, got.LastDue.IsZero(), "nothing fired")

	// Without a Skip callback the schedule still moves on. (An interval
	// always has a due time within one interval of now, so it is a daily
	// cron line that can be this late.)
	h.put("b", "s", "0 1 * * *", "")
	h.clk.Set(now.Add(48 * time.Hour))
	quiet := h.runner(rec, func(c *schedule.Config) { c.Skip = nil })
	require.Equal(t, 0, h.tick(quiet))
	require.True(t, h.get("b").NextDue.After(h.clk.Now()))
}

func testRunnerFireError(t *testing.T, h *harness) {
	rec := &recorder{failures: 1}
	r := h.runner(rec)
	s := h.put("a", "s", "every 30m", "")
	h.clk.Set(s.NextDue)
	n, err := r.Tick(t.Context())
	require.Error(t, err)
	require.Equal(t, 0, n)
	got := h.get("a")
	requireTime(t, s.NextDue, got.NextDue, "not advanced")
	require.True(t, got.LastDue.IsZero())

	h.clk.Advance(10 * time.Second)
	require.Equal(t, 1, h.tick(r))
	require.Equal(t, []string{fid("a", s.NextDue)}, rec.firedIDs(), "the same firing")
	requireTime(t, s.NextDue.Add(30*time.Minute), h.get("a").NextDue, "advanced")
}

// flakyAdvance fails AdvanceSchedule a number of times, as if the process
// died after Fire and before the advance.
type flakyAdvance struct {
	schedule.Store
	mu    sync.Mutex
	fails int
}

func (f *flakyAdvance) AdvanceSchedule(ctx context.Context, id string, expect, fired, next time.Time) (bool, error) {
	f.mu.Lock()
	if f.fails > 0 {
		f.fails--
		f.mu.Unlock()
		return false, errors.New("crashed before the advance")
	}
	f.mu.Unlock()
	return f.Store.AdvanceSchedule(ctx, id, expect, fired, next)
}

func testRunnerCrash(t *testing.T, h *harness) {
	rec := &recorder{}
	flaky := &flakyAdvance{Store: h.st, fails: 1}
	r := h.runner(rec, func(c *schedule.Config) { c.Store = flaky })
	s := h.put("a", "s", "every 30m", "")
	h.clk.Set(s.NextDue)
	n, err := r.Tick(t.Context())
	require.Error(t, err)
	require.Equal(t, 1, n, "Fire accepted the firing")
	requireTime(t, s.NextDue, h.get("a").NextDue, "not advanced")

	// A restarted runner hands the same firing over again; the caller's
	// dedupe by ID makes it once.
	r2 := h.runner(rec, func(c *schedule.Config) { c.Store = flaky })
	h.clk.Advance(time.Second)
	require.Equal(t, 1, h.tick(r2))
	ids := rec.firedIDs()
	require.Equal(t, []string{fid("a", s.NextDue), fid("a", s.NextDue)}, ids)
	require.Len(t, slices.Compact(ids), 1, "one distinct firing")
	requireTime(t, s.NextDue.Add(30*time.Minute), h.get("a").NextDue, "advanced")
}

func testRunnerPages(t *testing.T, h *harness) {
	rec := &recorder{}
	failing := map[string]bool{"a0": true, "a1": true}
	var mu sync.Mutex
	calls := map[string]int{}
	fire := func(ctx context.Context, f schedule.Firing) error {
		mu.Lock()
		calls[f.Schedule.ID]++
		mu.Unlock()
		if failing[f.Schedule.ID] {
			return fmt.Errorf("cannot fire %s", f.Schedule.ID)
		}
		return rec.fire(ctx, f)
	}
	r := h.runner(rec, func(c *schedule.Config) { c.Batch = 2; c.Fire = fire })
	for i := range 7 {
		h.putAt(fmt.Sprintf("a%d", i), Start.Add(time.Duration(i)*time.Minute), true)
	}
	h.clk.Set(Start.Add(10 * time.Minute))
	n, err := r.Tick(t.Context())
	require.Error(t, err, "the failures are reported")
	require.Equal(t, 5, n, "the failing earliest ones do not hold the rest back")
	for i := range 7 {
		require.Equal(t, 1, calls[fmt.Sprintf("a%d", i)], "each tried once per Tick")
	}
	got, err := h.st.DueSchedules(t.Context(), h.clk.Now(), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a0", "a1"}, ids(got))
}

func testRunnerWorkers(t *testing.T, h *harness) {
	var mu sync.Mutex
	calls := map[string]int{}
	fire := func(_ context.Context, f schedule.Firing) error {
		mu.Lock()
		defer mu.Unlock()
		calls[f.ID()]++
		if f.Schedule.ID == "w07" || f.Schedule.ID == "w23" {
			return errors.New("refused")
		}
		return nil
	}
	r := h.runner(&recorder{}, func(c *schedule.Config) { c.Fire = fire; c.Workers = 4; c.Batch = 5 })
	for i := range 30 {
		h.putAt(fmt.Sprintf("w%02d", i), Start.Add(-time.Duration(i)*time.Second), true)
	}
	n, err := r.Tick(t.Context())
	require.ErrorContains(t, err, `"w23"`, "the first failure in due order (w23 is due before w07)")
	require.Equal(t, 28, n)
	mu.Lock()
	require.Len(t, calls, 30)
	for id, c := range calls {
		require.Equal(t, 1, c, id)
	}
	mu.Unlock()
	got, err := h.st.DueSchedules(t.Context(), Start, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"w23", "w07"}, ids(got))
}

func testRunnerDisabled(t *testing.T, h *harness) {
	rec := &recorder{}
	r := h.runner(rec)
	s := h.sched("a", "s", "every 30m", "")
	s.Enabled = false
	require.NoError(t, h.st.PutSchedule(t.Context(), s))
	h.clk.Set(Start.Add(3 * time.Hour))
	require.Equal(t, 0, h.tick(r))
	require.Empty(t, rec.fired)
	require.Empty(t, rec.skipped)
	requireTime(t, s.NextDue, h.get("a").NextDue, "disabled schedules are not advanced")
}

// testRunnerRace runs two runners on one store at the same instants: every
// due time is fired, none is invented, and a due time fired twice is
// fired with the same ID both times (the CAS advance refuses the loser's
// advance, not its Fire), so the caller's dedupe by ID makes it once.
func testRunnerRace(t *testing.T, h *harness) {
	var mu sync.Mutex
	count := map[string]int{}
	fire := func(_ context.Context, f schedule.Firing) error {
		mu.Lock()
		defer mu.Unlock()
		count[f.ID()]++
		return nil
	}
	rec := &recorder{}
	r1 := h.runner(rec, func(c *schedule.Config) { c.Fire = fire; c.Batch = 3 })
	r2 := h.runner(rec, func(c *schedule.Config) { c.Fire = fire; c.Batch = 3 })
	const schedules, rounds = 10, 6
	want := map[string]bool{}
	for i := range schedules {
		id := fmt.Sprintf("s%02d", i)
		h.put(id, "sess", "every 30m", "")
		for k := 1; k <= rounds; k++ {
			want[fid(id, Start.Add(time.Duration(k)*30*time.Minute))] = true
		}
	}
	for range rounds {
		h.clk.Advance(30 * time.Minute)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, r := range []*schedule.Runner{r1, r2} {
			wg.Go(func() { _, errs[i] = r.Tick(t.Context()) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(count)),
		"every due time fired, no other")
	for id, n := range count {
		require.LessOrEqual(t, n, 2, "firing %s handed over more than once per runner", id)
	}
	all, err := h.st.ListSchedules(t.Context(), "")
	require.NoError(t, err)
	for _, s := range all {
		requireTime(t, Start.Add(rounds*30*time.Minute), s.LastDue, s.ID+" LastDue")
		requireTime(t, Start.Add((rounds+1)*30*time.Minute), s.NextDue, s.ID+" NextDue")
	}
}

// startRun runs r.Run in the background until the test ends and waits for
// its first wait (a pending timer on the fake clock).
func (h *harness) startRun(r *schedule.Runner) (stop func() error) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	h.waitTimer()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	h.t.Cleanup(func() { _ = stop() })
	return stop
}

// waitTimer waits until a goroutine armed a timer on the fake clock.
func (h *harness) waitTimer() {
	h.t.Helper()
	require.Eventually(h.t, func() bool { return h.clk.Pending() > 0 }, 5*time.Second, time.Millisecond,
		"Run never waited")
}

func receive(t *testing.T, ch <-chan schedule.Firing) schedule.Firing {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no firing")
		return schedule.Firing{}
	}
}

func testRunWakesAtDue(t *testing.T, h *harness) {
	rec := &recorder{ch: make(chan schedule.Firing, 4)}
	r := h.runner(rec)
	s := h.put("a", "s", "every 45m", "")
	stop := h.startRun(r)
	require.Empty(t, rec.firedIDs())

	h.clk.Set(s.NextDue.Add(-time.Millisecond))
	h.waitTimer()
	require.Empty(t, rec.firedIDs(), "woke early")
	h.clk.Set(s.NextDue)
	f := receive(t, rec.ch)
	require.Equal(t, fid("a", s.NextDue), f.ID())
	require.False(t, f.Late)

	// And again at the next due time.
	h.waitTimer()
	h.clk.Set(s.NextDue.Add(45 * time.Minute))
	f = receive(t, rec.ch)
	require.Equal(t, fid("a", s.NextDue.Add(45*time.Minute)), f.ID())
	require.ErrorIs(t, stop(), context.Canceled)
}

func testRunWake(t *testing.T, h *harness) {
	rec := &recorder{ch: make(chan schedule.Firing, 4)}
	r := h.runner(rec)
	stop := h.startRun(r) // nothing stored: waits the poll interval
	s := h.sched("a", "s", "every 1h", "")
	s.NextDue = h.clk.Now() // due right away (as another process might store it)
	require.NoError(t, h.st.PutSchedule(t.Context(), s))
	r.Wake()
	f := receive(t, rec.ch)
	require.Equal(t, fid("a", Start), f.ID())
	require.Equal(t, Start, h.clk.Now(), "fired without the clock moving")

	// Without a Wake, Run still looks again after PollInterval.
	h.waitTimer()
	s2 := h.sched("b", "s", "every 1h", "")
	s2.NextDue = h.clk.Now()
	require.NoError(t, h.st.PutSchedule(t.Context(), s2))
	h.clk.Advance(schedule.PollInterval)
	f = receive(t, rec.ch)
	require.Equal(t, "b", f.Schedule.ID)
	require.ErrorIs(t, stop(), context.Canceled)
}

func testRunRetry(t *testing.T, h *harness) {
	rec := &recorder{failures: 1, ch: make(chan schedule.Firing, 4)}
	r := h.runner(rec, func(c *schedule.Config) { c.Retry = 10 * time.Second })
	s := h.sched("a", "s", "every 1h", "")
	s.NextDue = h.clk.Now()
	require.NoError(t, h.st.PutSchedule(t.Context(), s))
	stop := h.startRun(r) // the first Tick fails, then Run waits Retry
	require.Empty(t, rec.firedIDs())
	h.clk.Advance(10*time.Second - time.Millisecond)
	h.waitTimer()
	require.Empty(t, rec.firedIDs(), "retried before Retry passed")
	h.clk.Advance(time.Millisecond)
	f := receive(t, rec.ch)
	require.Equal(t, fid("a", Start), f.ID())
	require.ErrorIs(t, stop(), context.Canceled)
	require.Equal(t, []string{fid("a", Start)}, rec.firedIDs())
}
