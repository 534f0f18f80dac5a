package memorytest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// RunJobs runs the memory.JobStore conformance suite against the stores
// open returns (a fresh, empty one per subtest, reading now from clk).
// What CompleteJob applies is read back when the store implements
// memory.FactStore too.
func RunJobs(t *testing.T, open func(t *testing.T, clk *clock.Fake) memory.JobStore) {
	t.Helper()
	run(t, open, []testCase[memory.JobStore]{
		{"EnqueueIdempotent", testJobsEnqueue},
		{"ClaimRoundTrip", testJobsClaim},
		{"ClaimOrderAndLimit", testJobsOrder},
		{"AvailableAt", testJobsAvailable},
		{"LeaseExpiryFencesOldHolder", testJobsFencing},
		{"Extend", testJobsExtend},
		{"RetryAndDead", testJobsRetry},
		{"CompleteAppliesChanges", testJobsComplete},
		{"CompleteInvalidWritesNothing", testJobsCompleteInvalid},
		{"ConcurrentClaims", testJobsConcurrent},
	})
}

func job(key string) memory.Job {
	return memory.Job{MessageKey: key, SessionKey: sessionA, Platform: platform, SubjectUserID: "u1"}
}

func enqueue(t *testing.T, js memory.JobStore, jobs ...memory.Job) {
	t.Helper()
	for _, j := range jobs {
		ok, err := js.EnqueueJob(t.Context(), j)
		require.NoError(t, err)
		require.True(t, ok, "job %s added", j.MessageKey)
	}
}

func claim(t *testing.T, js memory.JobStore, owner string, n int, lease time.Duration) []memory.JobLease {
	t.Helper()
	ls, err := js.ClaimJobs(t.Context(), owner, n, lease)
	require.NoError(t, err)
	return ls
}

func jobKeys(ls []memory.JobLease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Job.MessageKey
	}
	return out
}

func testJobsEnqueue(t *testing.T, h *harness[memory.JobStore]) {
	enqueue(t, h.st, job("m1"))
	dup := job("m1")
	dup.SessionKey, dup.SubjectUserID = sessionB, "u2"
	ok, err := h.st.EnqueueJob(t.Context(), dup)
	require.NoError(t, err)
	require.False(t, ok, "a second job for the same message is ignored")
	ls := claim(t, h.st, "w", 10, time.Minute)
	require.Len(t, ls, 1)
	require.Equal(t, job("m1"), withoutAvail(ls[0].Job), "the first job is kept")

	// Even once the job is done.
	_, err = h.st.CompleteJob(t.Context(), ls[0], nil)
	require.NoError(t, err)
	ok, err = h.st.EnqueueJob(t.Context(), job("m1"))
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, claim(t, h.st, "w", 10, time.Minute))

	_, err = h.st.EnqueueJob(t.Context(), memory.Job{SessionKey: sessionA})
	require.Error(t, err, "a job without a message key")
}

func withoutAvail(j memory.Job) memory.Job {
	j.AvailableAt = time.Time{}
	return j
}

func testJobsClaim(t *testing.T, h *harness[memory.JobStore]) {
	h.clk.Advance(1500 * time.Microsecond)
	j := memory.Job{MessageKey: "testchat/bot1/group:g-a/1", SessionKey: sessionA, Platform: platform, SubjectUserID: "小明"}
	enqueue(t, h.st, j)
	ls := claim(t, h.st, "worker-1", 5, 90*time.Second)
	require.Len(t, ls, 1)
	l := ls[0]
	require.Positive(t, l.ID)
	require.Equal(t, j, withoutAvail(l.Job))
	require.Equal(t, "worker-1", l.Owner)
	sameTime(t, h.clk.Now().Add(90*time.Second), l.Until, "Until")
	require.Equal(t, 1, l.Attempts)
	require.Equal(t, 1, l.Claims)
	require.Empty(t, claim(t, h.st, "worker-2", 5, time.Minute), "a leased job is not claimed again")
	require.Empty(t, claim(t, h.st, "worker-2", 0, time.Minute), "n = 0")
}

func testJobsOrder(t *testing.T, h *harness[memory.JobStore]) {
	// Available times out of enqueue order, all in the past.
	// (The contract says which jobs a claim takes, oldest first, not the
	// order of the returned slice.)
	for _, off := range []int{3, 1, 4, 0, 2} {
		j := job(fmt.Sprint("m", off))
		j.AvailableAt = Start.Add(-time.Duration(10-off) * time.Minute)
		enqueue(t, h.st, j)
	}
	require.ElementsMatch(t, []string{"m0", "m1"}, jobKeys(claim(t, h.st, "w", 2, time.Hour)), "oldest first")
	require.ElementsMatch(t, []string{"m2"}, jobKeys(claim(t, h.st, "w", 1, time.Hour)))
	require.ElementsMatch(t, []string{"m3", "m4"}, jobKeys(claim(t, h.st, "w", 10, time.Hour)))
	require.Empty(t, claim(t, h.st, "w", 10, time.Hour))
	// Once the leases expire, every job is claimable again.
	h.clk.Advance(time.Hour)
	require.Len(t, claim(t, h.st, "v", 10, time.Hour), 5)
}

func testJobsAvailable(t *testing.T, h *harness[memory.JobStore]) {
	later := job("later")
	later.AvailableAt = Start.Add(time.Minute)
	enqueue(t, h.st, later, job("now"))
	require.Equal(t, []string{"now"}, jobKeys(claim(t, h.st, "w", 10, time.Hour)))
	h.clk.Advance(time.Minute - time.Millisecond)
	require.Empty(t, claim(t, h.st, "w", 10, time.Minute), "not yet available")
	h.clk.Advance(time.Millisecond)
	ls := claim(t, h.st, "w", 10, time.Minute)
	require.Equal(t, []string{"later"}, jobKeys(ls))
	sameTime(t, later.AvailableAt, ls[0].Job.AvailableAt, "AvailableAt")
}

func testJobsFencing(t *testing.T, h *harness[memory.JobStore]) {
	enqueue(t, h.st, job("m1"))
	a := claim(t, h.st, "a", 1, time.Minute)[0]
	h.clk.Advance(time.Minute - time.Millisecond)
	require.Empty(t, claim(t, h.st, "b", 1, time.Minute), "the lease has not expired")
	h.clk.Advance(time.Millisecond)
	ls := claim(t, h.st, "b", 1, time.Minute)
	require.Len(t, ls, 1, "an expired lease is claimed again")
	b := ls[0]
	require.Equal(t, a.ID, b.ID)
	require.Equal(t, 2, b.Attempts, "every claim counts an attempt")
	require.Equal(t, 2, b.Claims)

	_, err := h.st.CompleteJob(t.Context(), a, []memory.Change{userFact("u1", "stale", "from a stale lease", sessionA, channel.Group)})
	require.ErrorIs(t, err, memory.ErrLeaseLost)
	_, err = h.st.ExtendJob(t.Context(), a, time.Minute)
	require.ErrorIs(t, err, memory.ErrLeaseLost)
	require.ErrorIs(t, h.st.RetryJob(t.Context(), a, h.clk.Now(), errors.New("x"), false), memory.ErrLeaseLost)
	require.ErrorIs(t, h.st.RetryJob(t.Context(), a, h.clk.Now(), errors.New("x"), true), memory.ErrLeaseLost)
	if fs, ok := h.st.(memory.FactStore); ok {
		require.Empty(t, candidates(t, fs, nil), "a fenced completion writes nothing")
	}
	// The same owner name does not help a stale lease either.
	stale := b
	stale.Claims = 1
	_, err = h.st.CompleteJob(t.Context(), stale, nil)
	require.ErrorIs(t, err, memory.ErrLeaseLost)

	_, err = h.st.CompleteJob(t.Context(), b, nil)
	require.NoError(t, err, "the current holder completes")
}

func testJobsExtend(t *testing.T, h *harness[memory.JobStore]) {
	enqueue(t, h.st, job("m1"))
	l := claim(t, h.st, "a", 1, time.Minute)[0]
	h.clk.Advance(50 * time.Second)
	l2, err := h.st.ExtendJob(t.Context(), l, 2*time.Minute)
	require.NoError(t, err)
	sameTime(t, h.clk.Now().Add(2*time.Minute), l2.Until, "Until")
	require.Equal(t, l.ID, l2.ID)
	require.Equal(t, l.Claims, l2.Claims)
	h.clk.Advance(time.Minute)
	require.Empty(t, claim(t, h.st, "b", 1, time.Minute), "past the old deadline, the lease holds")
	h.clk.Advance(time.Minute)
	require.Len(t, claim(t, h.st, "b", 1, time.Minute), 1, "past the new deadline it expires")
	_, err = h.st.ExtendJob(t.Context(), l2, time.Minute)
	require.ErrorIs(t, err, memory.ErrLeaseLost)
}

func testJobsRetry(t *testing.T, h *harness[memory.JobStore]) {
	enqueue(t, h.st, job("m1"), job("m2"))
	ls := claim(t, h.st, "a", 2, time.Minute)
	require.Len(t, ls, 2)
	require.NoError(t, h.st.RetryJob(t.Context(), ls[0], Start.Add(30*time.Second), errors.New("model timeout"), false))
	require.NoError(t, h.st.RetryJob(t.Context(), ls[1], Start, errors.New("bad answer"), true))
	_, err := h.st.CompleteJob(t.Context(), ls[0], nil)
	require.ErrorIs(t, err, memory.ErrLeaseLost, "a retried lease is released")

	require.Empty(t, claim(t, h.st, "b", 10, time.Minute), "not before the retry time")
	h.clk.Advance(30 * time.Second)
	again := claim(t, h.st, "b", 10, time.Minute)
	require.Equal(t, []string{"m1"}, jobKeys(again), "a dead job is never claimed again")
	require.Equal(t, 2, again[0].Attempts)
	require.NoError(t, h.st.RetryJob(t.Context(), again[0], h.clk.Now(), nil, false), "no cause")
	again = claim(t, h.st, "b", 10, time.Minute)
	require.Len(t, again, 1)
	require.Equal(t, 3, again[0].Attempts)
	h.clk.Advance(24 * time.Hour)
	require.Equal(t, []string{"m1"}, jobKeys(claim(t, h.st, "c", 10, time.Minute)),
		"the expired lease again, never the dead job")
}

func testJobsComplete(t *testing.T, h *harness[memory.JobStore]) {
	enqueue(t, h.st, job("m1"))
	l := claim(t, h.st, "a", 1, time.Minute)[0]
	res, err := h.st.CompleteJob(t.Context(), l, []memory.Change{
		userFact("u1", "pet", "has a cat", sessionA, channel.Group),
		userFact("u1", "job", "teacher", sessionA, channel.Group),
		userFact("u1", "job", "teacher", sessionA, channel.Group),
	})
	require.NoError(t, err)
	require.Equal(t, memory.ApplyResult{Inserted: 2, Refreshed: 1}, res)
	if fs, ok := h.st.(memory.FactStore); ok {
		require.ElementsMatch(t, []string{"pet", "job"}, factKeys(candidates(t, fs, nil)))
	}
	_, err = h.st.CompleteJob(t.Context(), l, []memory.Change{userFact("u1", "twice", "applied twice", sessionA, channel.Group)})
	require.ErrorIs(t, err, memory.ErrLeaseLost, "a completed job cannot complete again")
	if fs, ok := h.st.(memory.FactStore); ok {
		require.NotContains(t, factKeys(candidates(t, fs, nil)), "twice")
	}
	h.clk.Advance(time.Hour)
	require.Empty(t, claim(t, h.st, "b", 10, time.Minute), "a done job is never claimed")
}

func testJobsCompleteInvalid(t *testing.T, h *harness[memory.JobStore]) {
	enqueue(t, h.st, job("m1"))
	l := claim(t, h.st, "a", 1, time.Minute)[0]
	bad := userFact("u1", "", "no key", sessionA, channel.Group)
	_, err := h.st.CompleteJob(t.Context(), l, []memory.Change{userFact("u1", "good", "a good fact", sessionA, channel.Group), bad})
	require.Error(t, err)
	require.NotErrorIs(t, err, memory.ErrLeaseLost)
	if fs, ok := h.st.(memory.FactStore); ok {
		require.Empty(t, candidates(t, fs, nil), "a failed completion writes nothing")
	}
	res, err := h.st.CompleteJob(t.Context(), l, nil)
	require.NoError(t, err, "the lease is still held")
	require.Equal(t, memory.ApplyResult{}, res)
}

func testJobsConcurrent(t *testing.T, h *harness[memory.JobStore]) {
	const jobs, workers = 40, 4
	for i := range jobs {
		enqueue(t, h.st, job(fmt.Sprintf("m%02d", i)))
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[string]int{}
		errs []error
	)
	for w := range workers {
		wg.Go(func() {
			for {
				ls, err := h.st.ClaimJobs(t.Context(), fmt.Sprint("w", w), 3, time.Minute)
				if err == nil && len(ls) == 0 {
					return
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				for _, l := range ls {
					seen[l.Job.MessageKey]++
				}
				mu.Unlock()
				for _, l := range ls {
					if _, err := h.st.CompleteJob(t.Context(), l, nil); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Len(t, seen, jobs)
	for k, n := range seen {
		require.Equal(t, 1, n, "job %s claimed more than once", k)
	}
}
