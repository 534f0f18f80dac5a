package clock_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// fired reports whether tm has fired, without blocking.
func fired(tm clock.Timer) (time.Time, bool) {
	select {
	case at := <-tm.C():
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestOrReal(t *testing.T) {
	t.Parallel()
	require.Equal(t, clock.Real, clock.OrReal(nil))
	f := clock.NewFake(t0)
	require.Same(t, f, clock.OrReal(f))
}

func TestRealClock(t *testing.T) {
	t.Parallel()
	before := time.Now()
	now := clock.Real.Now()
	require.False(t, now.Before(before))
	require.WithinDuration(t, time.Now(), now, time.Minute)

	// A zero timer fires at once; no sleeping involved.
	tm := clock.Real.NewTimer(0)
	select {
	case <-tm.C():
	case <-t.Context().Done():
		t.Fatal("context ended before the zero timer fired")
	}
	require.False(t, tm.Stop(), "Stop after firing")

	long := clock.Real.NewTimer(time.Hour)
	require.True(t, long.Stop(), "Stop of a pending timer")
	require.False(t, long.Stop(), "second Stop")
	_, ok := fired(long)
	require.False(t, ok)
}

func TestFakeNowAndSet(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	require.Equal(t, t0, f.Now())
	f.Advance(90 * time.Second)
	require.Equal(t, t0.Add(90*time.Second), f.Now())
	f.Set(t0.Add(time.Hour))
	require.Equal(t, t0.Add(time.Hour), f.Now())
	f.Set(t0) // never backwards
	require.Equal(t, t0.Add(time.Hour), f.Now())
	f.Advance(-time.Minute) // never backwards
	require.Equal(t, t0.Add(time.Hour), f.Now())
	f.Advance(0)
	require.Equal(t, t0.Add(time.Hour), f.Now())
}

func TestFakeTimerFiresAtDeadline(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	tm := f.NewTimer(10 * time.Second)
	require.Equal(t, 1, f.Pending())

	f.Advance(10*time.Second - time.Nanosecond)
	_, ok := fired(tm)
	require.False(t, ok, "fired before its deadline")
	require.Equal(t, 1, f.Pending())

	f.Advance(time.Nanosecond)
	at, ok := fired(tm)
	require.True(t, ok, "not fired at its deadline")
	require.Equal(t, t0.Add(10*time.Second), at)
	require.Zero(t, f.Pending())
	require.False(t, tm.Stop(), "Stop after firing")

	f.Advance(time.Hour)
	_, ok = fired(tm)
	require.False(t, ok, "a timer fires only once")
}

func TestFakeTimerDeliversTheNewTime(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Minute) // overshoot
	at, ok := fired(tm)
	require.True(t, ok)
	require.Equal(t, t0.Add(time.Minute), at)
}

func TestFakeNewTimerNonPositiveFiresImmediately(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Second} {
		f := clock.NewFake(t0)
		tm := f.NewTimer(d)
		at, ok := fired(tm)
		require.True(t, ok, "NewTimer(%s) did not fire at once", d)
		require.Equal(t, t0, at)
		require.Zero(t, f.Pending(), "an immediate timer is not pending")
		require.False(t, tm.Stop(), "Stop of a fired timer")
	}
}

// TestFakeAdvanceFiresDueTimersInOrder advances one step at a time over
// timers created out of deadline order: each step fires exactly the timers
// due by then, so they fire earliest first; one big step fires them all.
func TestFakeAdvanceFiresDueTimersInOrder(t *testing.T) {
	t.Parallel()
	type armed struct {
		name string
		d    time.Duration
		tm   clock.Timer
	}
	arm := func(f *clock.Fake) []*armed {
		ts := []*armed{{name: "c", d: 3 * time.Second}, {name: "a", d: time.Second}, {name: "d", d: time.Hour}, {name: "b", d: 2 * time.Second}}
		for _, a := range ts {
			a.tm = f.NewTimer(a.d)
		}
		return ts
	}

	f := clock.NewFake(t0)
	ts := arm(f)
	var got []string
	for range 3 {
		f.Advance(time.Second)
		for _, a := range ts {
			if _, ok := fired(a.tm); ok {
				got = append(got, a.name)
			}
		}
	}
	require.Equal(t, []string{"a", "b", "c"}, got)
	require.Equal(t, 1, f.Pending())

	f = clock.NewFake(t0)
	ts = arm(f)
	f.Advance(3 * time.Second)
	got = nil
	for _, a := range ts {
		if at, ok := fired(a.tm); ok {
			require.Equal(t, t0.Add(3*time.Second), at)
			got = append(got, a.name)
		}
	}
	require.ElementsMatch(t, []string{"a", "b", "c"}, got)
	require.Equal(t, 1, f.Pending(), "the one-hour timer is still pending")
}

func TestFakeSetFiresEveryDueTimer(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	a := f.NewTimer(time.Second)
	b := f.NewTimer(time.Second) // same deadline
	c := f.NewTimer(time.Hour)
	f.Set(t0.Add(time.Minute))
	_, okA := fired(a)
	_, okB := fired(b)
	_, okC := fired(c)
	require.True(t, okA)
	require.True(t, okB)
	require.False(t, okC)
	require.Equal(t, 1, f.Pending())
}

func TestFakeStop(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	a := f.NewTimer(time.Second)
	b := f.NewTimer(2 * time.Second)
	require.Equal(t, 2, f.Pending())

	require.True(t, a.Stop(), "Stop of a pending timer")
	require.Equal(t, 1, f.Pending())
	require.False(t, a.Stop(), "second Stop")

	f.Advance(time.Hour)
	_, ok := fired(a)
	require.False(t, ok, "a stopped timer never fires")
	_, ok = fired(b)
	require.True(t, ok)
	require.False(t, b.Stop(), "Stop after firing")
	require.Zero(t, f.Pending())
}

func TestFakeConcurrentAdvanceAddsUp(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(t0)
	var wg sync.WaitGroup
	for range 2000 {
		wg.Go(func() {
			f.Advance(time.Second)
			_ = f.NewTimer(time.Millisecond).Stop()
			_ = f.Pending()
		})
	}
	wg.Wait()
	require.Equal(t, t0.Add(2000*time.Second), f.Now(), "concurrent Advance calls lost time")
}

func TestSleep(t *testing.T) {
	t.Parallel()

	t.Run("non-positive duration returns at once", func(t *testing.T) {
		t.Parallel()
		f := clock.NewFake(t0)
		require.True(t, clock.Sleep(f, nil, 0))
		require.True(t, clock.Sleep(f, nil, -time.Second))
		require.Zero(t, f.Pending())
	})

	t.Run("full duration", func(t *testing.T) {
		t.Parallel()
		f := clock.NewFake(t0)
		done := make(chan bool, 1)
		go func() { done <- clock.Sleep(f, nil, 5*time.Second) }()
		waitPending(t, f, 1)
		f.Advance(4 * time.Second)
		select {
		case <-done:
			t.Fatal("Sleep returned before its duration")
		default:
		}
		f.Advance(time.Second)
		require.True(t, <-done)
		require.Zero(t, f.Pending())
	})

	t.Run("done closed", func(t *testing.T) {
		t.Parallel()
		f := clock.NewFake(t0)
		stop := make(chan struct{})
		done := make(chan bool, 1)
		go func() { done <- clock.Sleep(f, stop, time.Hour) }()
		waitPending(t, f, 1)
		close(stop)
		require.False(t, <-done)
		require.Zero(t, f.Pending(), "Sleep stops its timer when interrupted")
	})

	t.Run("already closed done", func(t *testing.T) {
		t.Parallel()
		f := clock.NewFake(t0)
		stop := make(chan struct{})
		close(stop)
		require.False(t, clock.Sleep(f, stop, time.Hour))
		require.Zero(t, f.Pending())
	})

	t.Run("context done channel", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		f := clock.NewFake(t0)
		done := make(chan bool, 1)
		go func() { done <- clock.Sleep(f, ctx.Done(), time.Minute) }()
		waitPending(t, f, 1)
		cancel()
		require.False(t, <-done)
	})
}

// waitPending waits (without sleeping) until f has n pending timers.
func waitPending(t *testing.T, f *clock.Fake, n int) {
	t.Helper()
	start := time.Now()
	for f.Pending() != n {
		if time.Since(start) > 10*time.Second || t.Context().Err() != nil {
			t.Fatalf("gave up waiting for %d pending timers", n)
		}
		runtime.Gosched()
	}
}
