package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/personakit/persona/clock"
)

// Defaults of Config.
const (
	// DefaultGrace is the default Config.Grace.
	DefaultGrace = time.Minute
	// DefaultMaxLate is the default Config.MaxLate.
	DefaultMaxLate = time.Hour
	// DefaultBatch is the default Config.Batch.
	DefaultBatch = 100
	// DefaultRetry is the default Config.Retry.
	DefaultRetry = 10 * time.Second
	// PollInterval is the longest Run waits between two looks at the
	// store, so that schedules added or edited by another process are
	// seen without a Wake.
	PollInterval = time.Minute
)

// maxWalk bounds the due times a catch-up walks one by one from a
// schedule's NextDue (see Runner.latest).
const maxWalk = 10_000

// farFuture parks a schedule that has no due time left (its spec never
// matches again): it is never due, yet NextDue stays set.
var farFuture = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// Config configures a Runner.
type Config struct {
	// Store holds the schedules (required).
	Store Store
	// Clock is the source of now and of Run's timers (nil = clock.Real).
	Clock clock.Clock
	// Fire is called for every due time to fire (required). It must be
	// idempotent per Firing.ID: the same firing can be handed over more
	// than once (a crash before the advance, two runners on one store), and
	// only the first should take effect — the pipeline enqueues an item
	// with that id, which the queue refuses to duplicate. An error leaves
	// the schedule where it was; the next Tick tries the same firing again.
	Fire func(ctx context.Context, f Firing) error
	// Skip is told about a due time that is too old to fire (more than
	// MaxLate before now); the schedule then moves on without firing.
	// Like Fire it may see the same firing again when the advance after it
	// failed. Optional.
	Skip func(ctx context.Context, f Firing)
	// Grace is how late a firing may be and still count as on time
	// (Firing.Late false). 0 means DefaultGrace.
	Grace time.Duration
	// MaxLate is how old a missed due time may be and still fire (late);
	// older ones are skipped. 0 means DefaultMaxLate. Must not be below
	// Grace.
	MaxLate time.Duration
	// Logger receives the runner's diagnostics (nil = discard).
	Logger *slog.Logger
	// Batch is how many due schedules one store query returns; a Tick
	// pages through all of them. 0 means DefaultBatch.
	Batch int
	// Retry is how long Run waits before it tries again when a Tick
	// failed and something is still due. 0 means DefaultRetry.
	Retry time.Duration
	// Workers is how many due schedules a Tick handles at once (0 or 1:
	// one after the other, earliest first). More let a store that groups
	// concurrent writes into one commit (package store does) advance many
	// schedules per commit; Fire and Skip are then called concurrently for
	// different schedules, still starting earliest first.
	Workers int
}

// Runner fires the due times of the schedules in a Store. Create it with
// NewRunner; drive it with Run, or call Tick from a loop of your own.
// Several runners, in one process or several, may share a store: each
// firing is advanced by exactly one of them (compare-and-set), though two
// may both hand the same firing, with the same Firing.ID, to Fire.
type Runner struct {
	store   Store
	clk     clock.Clock
	fire    func(ctx context.Context, f Firing) error
	skip    func(ctx context.Context, f Firing)
	grace   time.Duration
	maxLate time.Duration
	log     *slog.Logger
	batch   int
	retry   time.Duration
	workers int
	wake    chan struct{}
}

// NewRunner returns a runner for c. Store and Fire are required; negative
// durations or batch, and MaxLate below Grace, are refused. Errors wrap
// ErrInvalid.
func NewRunner(c Config) (*Runner, error) {
	switch {
	case c.Store == nil:
		return nil, fmt.Errorf("%w: runner needs a Store", ErrInvalid)
	case c.Fire == nil:
		return nil, fmt.Errorf("%w: runner needs a Fire callback", ErrInvalid)
	case c.Grace < 0, c.MaxLate < 0, c.Retry < 0:
		return nil, fmt.Errorf("%w: runner durations must not be negative (grace %s, max late %s, retry %s)",
			ErrInvalid, c.Grace, c.MaxLate, c.Retry)
	case c.Batch < 0:
		return nil, fmt.Errorf("%w: runner batch %d is negative", ErrInvalid, c.Batch)
	case c.Workers < 0:
		return nil, fmt.Errorf("%w: runner workers %d is negative", ErrInvalid, c.Workers)
	}
	r := &Runner{
		store:   c.Store,
		clk:     clock.OrReal(c.Clock),
		fire:    c.Fire,
		skip:    c.Skip,
		grace:   orDefault(c.Grace, DefaultGrace),
		maxLate: orDefault(c.MaxLate, DefaultMaxLate),
		log:     c.Logger,
		batch:   c.Batch,
		retry:   orDefault(c.Retry, DefaultRetry),
		workers: c.Workers,
		wake:    make(chan struct{}, 1),
	}
	if r.maxLate < r.grace {
		return nil, fmt.Errorf("%w: runner max late %s is below its grace %s", ErrInvalid, r.maxLate, r.grace)
	}
	if r.batch == 0 {
		r.batch = DefaultBatch
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Tick fires every schedule due at the clock's now and returns how many
// firings Fire accepted.
//
// For each enabled schedule with NextDue ≤ now it finds the latest due
// time d ≤ now, walking the spec from NextDue (an interval spec's due
// times are NextDue + k·interval: the lattice Plan anchored at the plan
// time, which every advance keeps, so it survives restarts). If d is at
// most MaxLate old it is fired once — Late when older than Grace, Missed
// counting the due times from NextDue up to d that are skipped — otherwise
// Skip is told and nothing fires. Then AdvanceSchedule moves NextDue to
// the first due time after d, expecting the NextDue it read; when another
// runner got there first the advance is refused and that is fine.
//
// A Fire error leaves the schedule as it was (the next Tick tries the
// same firing again); Tick goes on with the other schedules and returns
// the first error. Fire may see a firing it already accepted when an
// earlier advance failed, which is why it must be idempotent.
func (r *Runner) Tick(ctx context.Context) (int, error) {
	now := r.clk.Now()
	fired := 0
	var first error
	fail := func(err error) {
		if first == nil {
			first = err
		}
	}
	// seen holds every schedule this Tick handled; those still due after
	// their turn (a Fire error) are counted in stuck, so that the next
	// page asks for that many more and still reaches the rest.
	seen := map[string]bool{}
	stuck := 0
	for {
		if err := ctx.Err(); err != nil {
			fail(err)
			return fired, first
		}
		limit := r.batch + stuck
		due, err := r.store.DueSchedules(ctx, now, limit)
		if err != nil {
			fail(fmt.Errorf("schedule: list due schedules: %w", err))
			return fired, first
		}
		var todo []Schedule
		for _, s := range due {
			if !seen[s.ID] {
				seen[s.ID] = true
				todo = append(todo, s)
			}
		}
		for _, res := range r.handleAll(ctx, todo, now) {
			fired += res.fired
			if res.err != nil {
				fail(res.err)
			}
			if !res.settled {
				stuck++
			}
		}
		if len(todo) == 0 || len(due) < limit {
			return fired, first
		}
	}
}

// result is what handle did with one schedule.
type result struct {
	fired   int
	settled bool
	err     error
}

// handleAll handles the schedules of one page, earliest first, on up to
// Workers goroutines; the results are in the order of ss.
func (r *Runner) handleAll(ctx context.Context, ss []Schedule, now time.Time) []result {
	out := make([]result, len(ss))
	if r.workers <= 1 || len(ss) <= 1 {
		for i, s := range ss {
			out[i].fired, out[i].settled, out[i].err = r.handle(ctx, s, now)
		}
		return out
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(r.workers, len(ss)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ss) {
					return
				}
				out[i].fired, out[i].settled, out[i].err = r.handle(ctx, ss[i], now)
			}
		})
	}
	wg.Wait()
	return out
}

// handle fires (or skips) one due schedule and advances it. It returns
// how many firings Fire accepted (0 or 1), and whether the schedule is no
// longer due (advanced by this runner or another).
func (r *Runner) handle(ctx context.Context, s Schedule, now time.Time) (fired int, settled bool, err error) {
	log := scheduleLogger{r.log, s.ID}
	if s.NextDue.After(now) {
		return 0, true, nil // not due (a store that returned too much)
	}
	spec, err := Parse(s.Spec)
	if err != nil {
		log.Error("schedule: stored spec does not parse", "err", err)
		return 0, false, fmt.Errorf("schedule %q: %w", s.ID, err)
	}
	loc, err := LoadZone(s.Zone)
	if err != nil {
		log.Error("schedule: stored zone does not load", "err", err)
		return 0, false, fmt.Errorf("schedule %q: %w", s.ID, err)
	}
	due, missed, exact := latest(spec, s.NextDue, now, loc)
	f := Firing{Schedule: s, Due: due, Late: now.Sub(due) > r.grace, Missed: missed}
	if !exact {
		log.Warn("schedule: very long catch-up; the missed count is a lower bound", "missed", missed)
	}
	var firedAt time.Time
	if now.Sub(due) > r.maxLate {
		log.Info("schedule: skipping a due time older than the max late", "due", due, "missed", missed,
			"max_late", r.maxLate)
		if r.skip != nil {
			r.skip(ctx, f)
		}
	} else {
		if err := r.callFire(ctx, f); err != nil {
			log.Warn("schedule: fire failed; will retry", "due", due, "id", f.ID(), "err", err)
			return 0, false, fmt.Errorf("schedule %q: fire %s: %w", s.ID, f.ID(), err)
		}
		fired, firedAt = 1, due
	}
	next := nextAfterDue(spec, due, loc)
	if next.Equal(farFuture) {
		log.Warn("schedule: no due time left; parked", "spec", s.Spec, "zone", s.Zone)
	}
	ok, err := r.store.AdvanceSchedule(ctx, s.ID, s.NextDue, firedAt, next)
	if err != nil {
		log.Warn("schedule: advance failed; the same firing will be handed to Fire again", "id", f.ID(), "err", err)
		return fired, false, fmt.Errorf("schedule %q: advance: %w", s.ID, err)
	}
	if !ok {
		log.Debug("schedule: already advanced or edited elsewhere", "expect", s.NextDue)
	}
	return fired, true, nil
}

// scheduleLogger logs about one schedule (without the cost of slog's With
// on every schedule handled).
type scheduleLogger struct {
	l  *slog.Logger
	id string
}

func (l scheduleLogger) Debug(msg string, args ...any) {
	l.l.Debug(msg, append(args, "schedule", l.id)...)
}
func (l scheduleLogger) Info(msg string, args ...any) {
	l.l.Info(msg, append(args, "schedule", l.id)...)
}
func (l scheduleLogger) Warn(msg string, args ...any) {
	l.l.Warn(msg, append(args, "schedule", l.id)...)
}
func (l scheduleLogger) Error(msg string, args ...any) {
	l.l.Error(msg, append(args, "schedule", l.id)...)
}

// callFire calls Fire, turning a panic into an error so that one bad
// firing cannot stop the runner.
func (r *Runner) callFire(ctx context.Context, f Firing) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("fire panicked: %v", p)
		}
	}()
	return r.fire(ctx, f)
}

// latest returns the latest due time ≤ now, starting from first (a due
// time ≤ now), and how many due times lie before it from first on. For an
// interval it is arithmetic. For a cron spec it walks up to maxWalk due
// times, then jumps close to now: the count is then a lower bound (exact
// false).
func latest(spec Spec, first, now time.Time, loc *time.Location) (due time.Time, missed int, exact bool) {
	if iv := spec.Interval(); iv > 0 {
		// The first lattice point after now, minus one step.
		due = nextEvery(iv, first, now).Add(-iv)
		return due.In(loc), int((due.Unix() - first.Unix()) / int64(iv/time.Second)), true
	}
	due = first
	for range maxWalk {
		n := spec.Next(due, due, loc)
		if n.IsZero() || n.After(now) {
			return due.In(loc), missed, true
		}
		due = n
		missed++
	}
	// Too many to walk: jump to the first due time of the smallest window
	// before now that holds one after the walk's position (the windows in
	// between are empty), then walk the rest, which lies in that window.
	for _, w := range []time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour,
		6 * 366 * 24 * time.Hour} {
		from := now.Add(-w)
		if !from.After(due) {
			break
		}
		if n := spec.Next(from, from, loc); !n.IsZero() && !n.After(now) {
			due = n
			missed++
			break
		}
	}
	for {
		n := spec.Next(due, due, loc)
		if n.IsZero() || n.After(now) {
			return due.In(loc), missed, false
		}
		due = n
		missed++
	}
}

// nextAfterDue returns the due time that follows due, searching past the
// five-year horizon of Spec.Next (a yearly Feb 29 can be eight years
// away), or farFuture when there is none.
func nextAfterDue(spec Spec, due time.Time, loc *time.Location) time.Time {
	from := due
	for range 10 {
		n := spec.Next(due, from, loc)
		if !n.IsZero() {
			return n.UTC()
		}
		from = from.AddDate(horizonYears, 0, 0)
	}
	return farFuture
}

// Run fires due schedules until ctx ends, and returns ctx's error. It
// ticks, then waits for the earliest NextDue in the store, a Wake, or at
// most PollInterval, and ticks again. After a failed Tick that left
// something due it waits Config.Retry. Errors are logged, not returned.
func (r *Runner) Run(ctx context.Context) error {
	hot := false // the previous wait was zero: something stayed due
	for {
		_, tickErr := r.Tick(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if tickErr != nil {
			r.log.Warn("schedule: tick failed", "err", tickErr)
		}
		wait := PollInterval
		at, ok, err := r.store.NextDueAt(ctx)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.log.Warn("schedule: read next due time", "err", err)
			wait = r.retry
		case ok:
			wait = at.Sub(r.clk.Now())
			if wait <= 0 {
				// Still due after the Tick: a failed firing, or one that
				// became due meanwhile. Retry at once only once in a row.
				if tickErr != nil || hot {
					wait = r.retry
				} else {
					wait = 0
				}
			}
		}
		wait = min(wait, PollInterval)
		hot = wait == 0
		if err := r.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// sleep waits d on the runner's clock, or until a Wake or ctx's end.
func (r *Runner) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := r.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
	case <-r.wake:
	}
	return nil
}

// Wake makes Run look at the store again at once; call it after adding or
// editing a schedule. It never blocks; wakes that arrive while Run is
// busy collapse into one.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}
