package inbound

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// fakeQueue is a hand-written Queue: each method calls its func field, or
// fails when the field is nil.
type fakeQueue struct {
	EnqueueFunc func(ctx context.Context, it Item) (bool, error)
}

var errUnexpected = errors.New("fakeQueue: unexpected call")

func (q *fakeQueue) Enqueue(ctx context.Context, it Item) (bool, error) {
	if q.EnqueueFunc == nil {
		return false, errUnexpected
	}
	return q.EnqueueFunc(ctx, it)
}
func (q *fakeQueue) Record(context.Context, Item, Outcome) (bool, error) { return false, errUnexpected }
func (q *fakeQueue) Claim(context.Context, Limits) ([]Lease, error)      { return nil, errUnexpected }
func (q *fakeQueue) Extend(context.Context, *Lease, time.Duration) error { return errUnexpected }
func (q *fakeQueue) Complete(context.Context, Lease, Outcome) error      { return errUnexpected }
func (q *fakeQueue) Retry(context.Context, Lease, time.Time, error) error {
	return errUnexpected
}
func (q *fakeQueue) Snooze(context.Context, Lease, time.Time, string) error {
	return errUnexpected
}
func (q *fakeQueue) Release(context.Context, Lease) error        { return errUnexpected }
func (q *fakeQueue) ReleaseExpired(context.Context) (int, error) { return 0, errUnexpected }
func (q *fakeQueue) NextAvailable(context.Context) (time.Time, bool, error) {
	return time.Time{}, false, errUnexpected
}
func (q *fakeQueue) Lookup(context.Context, string) (Record, error) { return Record{}, errUnexpected }

var _ Queue = (*fakeQueue)(nil)

// flakyQueue fails Enqueue `fails` times, then stores items by id. Every
// call is reported on calls with the clock time.
type flakyQueue struct {
	clk   clock.Clock
	mu    sync.Mutex
	fails int
	items map[string]Item
	order []string
	calls chan time.Time
}

func newFlakyQueue(clk clock.Clock, fails int) (*flakyQueue, *fakeQueue) {
	f := &flakyQueue{clk: clk, fails: fails, items: map[string]Item{}, calls: make(chan time.Time, 100)}
	return f, &fakeQueue{EnqueueFunc: f.enqueue}
}

var errStoreDown = errors.New("store down")

func (f *flakyQueue) enqueue(_ context.Context, it Item) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls <- f.clk.Now()
	if f.fails > 0 {
		f.fails--
		return false, errStoreDown
	}
	if _, ok := f.items[it.ID]; ok {
		return false, nil
	}
	f.items[it.ID] = it
	f.order = append(f.order, it.ID)
	return true, nil
}

func (f *flakyQueue) failNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = n
}

func (f *flakyQueue) stored() ([]string, map[string]Item) {
	f.mu.Lock()
	defer f.mu.Unlock()
	items := map[string]Item{}
	for k, v := range f.items {
		items[k] = v
	}
	return append([]string(nil), f.order...), items
}

// timerClock is a Fake clock that reports every timer it arms, so a test
// knows the exact backoff and when it may advance time.
type timerClock struct {
	*clock.Fake
	armed chan time.Duration
}

func newTimerClock() *timerClock {
	return &timerClock{Fake: clock.NewFake(jt0), armed: make(chan time.Duration, 100)}
}

func (c *timerClock) NewTimer(d time.Duration) clock.Timer {
	t := c.Fake.NewTimer(d)
	c.armed <- d
	return t
}

// replayed collects OnReplayed calls.
type replayed struct {
	mu   sync.Mutex
	ids  []string
	enq  []bool
	done chan string
}

func newReplayed() *replayed { return &replayed{done: make(chan string, 100)} }

func (r *replayed) on(it Item, enqueued bool) {
	r.mu.Lock()
	r.ids = append(r.ids, it.ID)
	r.enq = append(r.enq, enqueued)
	r.mu.Unlock()
	r.done <- it.ID
}

// startRun runs the replayer until the test ends and checks Run's nil result.
func startRun(t *testing.T, r *Replayer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestReplayDelay(t *testing.T) {
	t.Parallel()
	want := []time.Duration{2, 4, 8, 16, 30, 30, 30}
	for i, w := range want {
		require.Equal(t, w*time.Second, ReplayDelay(i+1), "failure %d", i+1)
	}
}

func TestReplayerBackoffUntilEnqueueSucceeds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fails  int
		delays []time.Duration // seconds
	}{
		{"succeeds at once", 0, nil},
		{"one failure", 1, []time.Duration{2}},
		{"three failures", 3, []time.Duration{2, 4, 8}},
		{"seven failures", 7, []time.Duration{2, 4, 8, 16, 30, 30, 30}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newTimerClock()
			path := filepath.Join(t.TempDir(), "journal")
			j := openTestJournal(t, path)
			ctx := t.Context()
			for n := 1; n <= 3; n++ {
				require.NoError(t, j.Append(ctx, journalItemN(n)))
			}
			fq, q := newFlakyQueue(clk, tc.fails)
			rep := newReplayed()
			r := NewReplayer(j, q, ReplayOptions{Clock: clk, OnReplayed: rep.on})
			startRun(t, r)

			at := jt0
			for i, d := range tc.delays {
				require.Equal(t, at, <-fq.calls, "attempt %d time", i+1)
				require.Equal(t, d*time.Second, <-clk.armed, "backoff after failure %d", i+1)
				// Nothing is lost while the queue is down, even across a reopen.
				require.Equal(t, []string{keyOf(1), keyOf(2), keyOf(3)}, pendingIDs(t, j))
				reopened, err := OpenJournal(path)
				require.NoError(t, err)
				require.Len(t, pendingIDs(t, reopened), 3)
				require.NoError(t, reopened.Close())

				clk.Advance(d*time.Second - time.Millisecond)
				select {
				case <-fq.calls:
					require.FailNow(t, "retried before the backoff elapsed")
				default:
				}
				clk.Advance(time.Millisecond)
				at = at.Add(d * time.Second)
			}
			for n := 1; n <= 3; n++ {
				require.Equal(t, keyOf(n), <-rep.done)
				require.Equal(t, at, <-fq.calls, "successful attempt time")
			}

			order, items := fq.stored()
			require.Equal(t, []string{keyOf(1), keyOf(2), keyOf(3)}, order, "replayed in journal order")
			for _, it := range items {
				require.Equal(t, channel.SourceJournal, it.Event.Source)
			}
			require.Empty(t, pendingIDs(t, j), "removed after success")
			require.Empty(t, clk.armed, "no timer after success")
		})
	}
}

func TestReplayerKickAndBackoffReset(t *testing.T) {
	t.Parallel()
	clk := newTimerClock()
	j := openTestJournal(t, filepath.Join(t.TempDir(), "journal"))
	ctx := t.Context()
	fq, q := newFlakyQueue(clk, 0)
	rep := newReplayed()
	r := NewReplayer(j, q, ReplayOptions{Clock: clk, OnReplayed: rep.on})
	r.Kick() // a kick before Run is kept and harmless
	startRun(t, r)

	// Idle with an empty journal: an append plus Kick replays at once.
	require.NoError(t, j.Append(ctx, journalItemN(1)))
	r.Kick()
	require.Equal(t, keyOf(1), <-rep.done)
	<-fq.calls

	// The queue goes down: backoff 2 s, then a Kick retries at once and the
	// backoff keeps growing (4 s): kicks do not reset it.
	fq.failNext(2)
	require.NoError(t, j.Append(ctx, journalItemN(2)))
	r.Kick()
	require.Equal(t, jt0, <-fq.calls)
	require.Equal(t, 2*time.Second, <-clk.armed)
	require.NoError(t, j.Append(ctx, journalItemN(3)))
	r.Kick()
	require.Equal(t, jt0, <-fq.calls, "retried at once, not after 2 s")
	require.Equal(t, 4*time.Second, <-clk.armed)
	require.Equal(t, 1, clk.Pending(), "only the 4 s timer: the 2 s one was stopped")

	clk.Advance(4 * time.Second)
	require.Equal(t, keyOf(2), <-rep.done)
	require.Equal(t, keyOf(3), <-rep.done)
	require.Equal(t, jt0.Add(4*time.Second), <-fq.calls)
	require.Equal(t, jt0.Add(4*time.Second), <-fq.calls)

	// After a success the backoff starts over at 2 s.
	fq.failNext(1)
	require.NoError(t, j.Append(ctx, journalItemN(4)))
	r.Kick()
	<-fq.calls
	require.Equal(t, 2*time.Second, <-clk.armed, "reset after a success")
	clk.Advance(2 * time.Second)
	require.Equal(t, keyOf(4), <-rep.done)
	require.Empty(t, pendingIDs(t, j))
}

func TestReplayerRunStops(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fails int
	}{
		{"while idle", 0},
		{"during a backoff", 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newTimerClock()
			j := openTestJournal(t, filepath.Join(t.TempDir(), "journal"))
			require.NoError(t, j.Append(t.Context(), journalItemN(1)))
			fq, q := newFlakyQueue(clk, tc.fails)
			r := NewReplayer(j, q, ReplayOptions{Clock: clk})
			stop := startRun(t, r)
			<-fq.calls
			if tc.fails > 0 {
				<-clk.armed
			}
			stop() // Run returned nil
			require.Zero(t, clk.Pending(), "the backoff timer was stopped")
		})
	}
}

func TestReplayOnce(t *testing.T) {
	t.Parallel()
	errRemove := errors.New("disk full")
	tests := []struct {
		name        string
		duplicate   bool // the queue already has item 2
		failAt      int  // Enqueue of this item fails (0 = none)
		removeErrAt int  // Remove of this item fails (0 = none)
		replayed    int
		err         error
		pending     []int
		enqueued    []bool
	}{
		{name: "all", replayed: 3, enqueued: []bool{true, true, true}},
		{name: "already queued is removed too", duplicate: true, replayed: 3, enqueued: []bool{true, false, true}},
		{name: "stops at the first failure", failAt: 2, replayed: 1, err: errStoreDown, pending: []int{2, 3}, enqueued: []bool{true}},
		{name: "remove failure keeps the entry", removeErrAt: 2, replayed: 1, err: errRemove, pending: []int{2, 3}, enqueued: []bool{true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fj := openTestJournal(t, filepath.Join(t.TempDir(), "journal"))
			ctx := t.Context()
			for n := 1; n <= 3; n++ {
				require.NoError(t, fj.Append(ctx, journalItemN(n)))
			}
			j := &hookJournal{Journal: fj, removeErr: map[string]error{}}
			if tc.removeErrAt > 0 {
				j.removeErr[keyOf(tc.removeErrAt)] = errRemove
			}
			var got []Item
			q := &fakeQueue{EnqueueFunc: func(_ context.Context, it Item) (bool, error) {
				if tc.failAt > 0 && it.ID == keyOf(tc.failAt) {
					return false, errStoreDown
				}
				got = append(got, it)
				return !tc.duplicate || it.ID != keyOf(2), nil
			}}
			rep := newReplayed()
			r := NewReplayer(j, q, ReplayOptions{OnReplayed: rep.on})

			n, err := r.ReplayOnce(ctx)
			require.Equal(t, tc.replayed, n)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			wantPending := []string{}
			for _, p := range tc.pending {
				wantPending = append(wantPending, keyOf(p))
			}
			require.Equal(t, wantPending, pendingIDs(t, fj))
			require.Equal(t, tc.enqueued, rep.enq)
			for _, it := range got {
				require.Equal(t, channel.SourceJournal, it.Event.Source)
				require.Equal(t, it.Event.Key(), it.ID)
			}

			// A later round replays what is left; enqueue is idempotent.
			delete(j.removeErr, keyOf(tc.removeErrAt))
			tc.failAt = 0
			_, err = r.ReplayOnce(ctx)
			require.NoError(t, err)
			require.Empty(t, pendingIDs(t, fj))
		})
	}

	t.Run("pending error", func(t *testing.T) {
		t.Parallel()
		fj, err := OpenJournal(filepath.Join(t.TempDir(), "journal"))
		require.NoError(t, err)
		require.NoError(t, fj.Close())
		r := NewReplayer(fj, &fakeQueue{}, ReplayOptions{})
		n, err := r.ReplayOnce(t.Context())
		require.Zero(t, n)
		require.ErrorIs(t, err, ErrJournalClosed)
	})

	t.Run("empty journal", func(t *testing.T) {
		t.Parallel()
		r := NewReplayer(openTestJournal(t, filepath.Join(t.TempDir(), "journal")), &fakeQueue{}, ReplayOptions{})
		n, err := r.ReplayOnce(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// hookJournal wraps a Journal to fail Remove for chosen ids.
type hookJournal struct {
	Journal
	removeErr map[string]error
}

func (h *hookJournal) Remove(ctx context.Context, ids ...string) error {
	for _, id := range ids {
		if err := h.removeErr[id]; err != nil {
			return err
		}
	}
	return h.Journal.Remove(ctx, ids...)
}

// A crash leaves a torn last line; the restarted process replays what was
// durable before claiming.
func TestReplayAfterCrashWithTornLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal")
	j := openTestJournal(t, path)
	ctx := t.Context()
	require.NoError(t, j.Append(ctx, journalItemN(1)))
	require.NoError(t, j.Append(ctx, journalItemN(2)))
	require.NoError(t, j.Close())
	appendBytes(t, path, []byte(`{"op":"add","id":"onebot/10001/group:g1/3","item":{"event":{"platf`))

	j2 := openTestJournal(t, path)
	fq, q := newFlakyQueue(clock.NewFake(jt0), 0)
	n, err := NewReplayer(j2, q, ReplayOptions{}).ReplayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	order, _ := fq.stored()
	require.Equal(t, []string{keyOf(1), keyOf(2)}, order)
	require.Empty(t, pendingIDs(t, j2))
}
