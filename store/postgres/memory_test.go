package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/memory/memorytest"
	"github.com/personakit/persona/store/postgres"
)

func TestMemoryFactStoreConformance(t *testing.T) {
	memorytest.RunFacts(t, func(t *testing.T, clk *clock.Fake) memory.FactStore { return open(t, clk) })
}

func TestMemoryJobStoreConformance(t *testing.T) {
	memorytest.RunJobs(t, func(t *testing.T, clk *clock.Fake) memory.JobStore { return open(t, clk) })
}

// memFact is a user fact about u1 on the platform "chat".
func memFact(key, content string) memory.Change {
	return memory.Change{Fact: memory.Fact{Scope: memory.ScopeUser, SubjectUserID: "u1", Key: key, Content: content,
		SessionKey: "chat/bot/group:g", ChatKind: "group", Platform: "chat", Confidence: 0.9, Importance: 0.5}}
}

// memJob is an extraction job about u1 on the platform "chat".
func memJob(key string) memory.Job {
	return memory.Job{MessageKey: key, SessionKey: "chat/bot/group:g", Platform: "chat", SubjectUserID: "u1"}
}

// activeFacts returns the active facts about u1 by key.
func activeFacts(t *testing.T, db interface {
	Facts(ctx context.Context, platform, subject string) ([]memory.Fact, error)
}) map[string]memory.Fact {
	t.Helper()
	fs, err := db.Facts(t.Context(), "chat", "u1")
	require.NoError(t, err)
	out := map[string]memory.Fact{}
	for _, f := range fs {
		if f.Status == memory.StatusActive {
			_, dup := out[f.Key]
			require.False(t, dup, "two active rows for key %s", f.Key)
			out[f.Key] = f
		}
	}
	return out
}

// TestMemoryJobsTwoStores claims, from two stores on one schema (two
// processes sharing a database) and many goroutines each, jobs whose
// completion writes facts: no job is claimed twice while its lease holds,
// and every job completes once.
func TestMemoryJobsTwoStores(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(memorytest.Start)
	a, b := openURL(t, url, clk), openURL(t, url, clk)
	const jobs, perStore = 60, 4
	for i := range jobs {
		ok, err := a.EnqueueJob(t.Context(), memJob(fmt.Sprintf("m%02d", i)))
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, err := b.EnqueueJob(t.Context(), memJob("m00"))
	require.NoError(t, err)
	require.False(t, ok, "the other store sees the job")

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[string][]string{}
		errs []error
	)
	for s, db := range []*postgres.DB{a, b} {
		for w := range perStore {
			owner := fmt.Sprintf("%d-%d", s, w)
			wg.Go(func() {
				for {
					ls, err := db.ClaimJobs(t.Context(), owner, 2, time.Minute)
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
						seen[l.Job.MessageKey] = append(seen[l.Job.MessageKey], owner)
					}
					mu.Unlock()
					for _, l := range ls {
						// Writers of one key take turns: a few keys for
						// all, so that completions refresh and supersede
						// each other's facts.
						c := memFact(fmt.Sprint("k", l.ID%3), fmt.Sprint("content ", l.ID%5))
						c.Fact.SourceMessageIDs = []string{l.Job.MessageKey}
						if _, err := db.CompleteJob(t.Context(), l, []memory.Change{c}); err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
					}
				}
			})
		}
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Len(t, seen, jobs)
	for k, owners := range seen {
		require.Len(t, owners, 1, "job %s claimed by %v", k, owners)
	}
	counts, err := b.JobCounts(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"done": jobs}, counts)
	active := activeFacts(t, a)
	require.Len(t, active, 3, "one active row per key")
	all, err := b.Facts(t.Context(), "chat", "u1")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(all), 3)
}

// TestMemoryJobsStaleLeaseAcrossStores lets a lease taken through one
// store expire and the job be claimed through the other: the first
// holder's completion writes nothing.
func TestMemoryJobsStaleLeaseAcrossStores(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(memorytest.Start)
	a, b := openURL(t, url, clk), openURL(t, url, clk)
	ok, err := a.EnqueueJob(t.Context(), memJob("m1"))
	require.NoError(t, err)
	require.True(t, ok)

	ls, err := a.ClaimJobs(t.Context(), "proc-a", 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	stale := ls[0]
	ls, err = b.ClaimJobs(t.Context(), "proc-b", 5, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ls, "the lease holds in the other store too")

	clk.Advance(time.Minute)
	ls, err = b.ClaimJobs(t.Context(), "proc-b", 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, ls, 1, "the expired lease is claimed again")
	current := ls[0]
	require.Equal(t, stale.ID, current.ID)
	require.Equal(t, 2, current.Claims)

	_, err = a.CompleteJob(t.Context(), stale, []memory.Change{memFact("stale", "from the stale lease")})
	require.ErrorIs(t, err, memory.ErrLeaseLost)
	require.Empty(t, activeFacts(t, b), "a stale completion writes nothing")
	_, err = a.ExtendJob(t.Context(), stale, time.Minute)
	require.ErrorIs(t, err, memory.ErrLeaseLost)
	require.ErrorIs(t, a.RetryJob(t.Context(), stale, clk.Now(), nil, true), memory.ErrLeaseLost)

	res, err := b.CompleteJob(t.Context(), current, []memory.Change{memFact("fresh", "from the current lease")})
	require.NoError(t, err)
	require.Equal(t, memory.ApplyResult{Inserted: 1}, res)
	require.Equal(t, []string{"fresh"}, keysOf(activeFacts(t, a)))
	counts, err := a.JobCounts(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"done": 1}, counts)
}

// TestMemoryJobsStaleRace races, many times over, the stale holder's
// completion against the new holder's: exactly one of them applies.
func TestMemoryJobsStaleRace(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(memorytest.Start)
	a, b := openURL(t, url, clk), openURL(t, url, clk)
	const rounds = 20
	for i := range rounds {
		key := fmt.Sprint("r", i)
		ok, err := a.EnqueueJob(t.Context(), memJob(key))
		require.NoError(t, err)
		require.True(t, ok)
		ls, err := a.ClaimJobs(t.Context(), "proc-a", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, ls, 1)
		clk.Advance(time.Minute)
		ls2, err := b.ClaimJobs(t.Context(), "proc-b", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, ls2, 1)

		var wg sync.WaitGroup
		errA, errB := make(chan error, 1), make(chan error, 1)
		wg.Go(func() {
			_, err := a.CompleteJob(t.Context(), ls[0], []memory.Change{memFact(key, "stale")})
			errA <- err
		})
		wg.Go(func() {
			_, err := b.CompleteJob(t.Context(), ls2[0], []memory.Change{memFact(key, "current")})
			errB <- err
		})
		wg.Wait()
		require.ErrorIs(t, <-errA, memory.ErrLeaseLost)
		require.NoError(t, <-errB)
		f, ok := activeFacts(t, b)[key]
		require.True(t, ok)
		require.Equal(t, "current", f.Content)
		require.Equal(t, 1, f.Version, "applied once")
	}
}

// TestMemoryForgetCancelsAcrossStores forgets a user through one store
// while the other holds a lease on one of the user's jobs, and hides the
// user's history.
func TestMemoryForgetCancelsAcrossStores(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(memorytest.Start)
	a, b := openURL(t, url, clk), openURL(t, url, clk)
	_, err := a.ApplyChanges(t.Context(), []memory.Change{memFact("name", "小明"), memFact("city", "lives in 杭州")})
	require.NoError(t, err)
	for _, k := range []string{"m1", "m2"} {
		_, err := a.EnqueueJob(t.Context(), memJob(k))
		require.NoError(t, err)
	}
	ls, err := a.ClaimJobs(t.Context(), "proc-a", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, ls, 1)

	res, err := b.ForgetUser(t.Context(), "chat", "u1", memory.ForgetOptions{ExcludeHistory: true})
	require.NoError(t, err)
	require.Equal(t, memory.ForgetResult{Facts: 2, JobsCancelled: 2, HistoryHidden: true}, res)
	_, err = a.CompleteJob(t.Context(), ls[0], []memory.Change{memFact("name", "小明")})
	require.ErrorIs(t, err, memory.ErrLeaseLost)
	require.Empty(t, activeFacts(t, a))
	all, err := a.Facts(t.Context(), "chat", "u1")
	require.NoError(t, err)
	require.Len(t, all, 2)
	for _, f := range all {
		require.Equal(t, memory.StatusForgotten, f.Status)
		require.Empty(t, f.Content)
		require.Empty(t, f.Evidence)
		require.Empty(t, f.SourceMessageIDs)
		got, err := b.Fact(t.Context(), f.ID)
		require.NoError(t, err)
		require.Equal(t, f, got)
	}
	_, err = a.Fact(t.Context(), 1<<40)
	require.ErrorIs(t, err, memory.ErrNotFound)

	again, err := a.ForgetUser(t.Context(), "chat", "u1", memory.ForgetOptions{ExcludeHistory: true})
	require.NoError(t, err)
	require.Equal(t, memory.ForgetResult{HistoryHidden: true}, again)

	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var hidden int
	require.NoError(t, conn.QueryRow(t.Context(),
		`SELECT count(*) FROM memory_hidden_senders WHERE platform = 'chat' AND user_id = 'u1'`).Scan(&hidden))
	require.Equal(t, 1, hidden)
	counts, err := b.JobCounts(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int{"cancelled": 2}, counts)
}

func keysOf(m map[string]memory.Fact) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestMemoryFactWritersAcrossStores runs, through two stores, batches of
// changes over the same keys in different orders together with touches
// and "forget me": every operation succeeds (lock conflicts are waited
// out or retried), and each key keeps at most one active row.
func TestMemoryFactWritersAcrossStores(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(memorytest.Start)
	a, b := openURL(t, url, clk), openURL(t, url, clk)
	keys := []string{"k0", "k1", "k2", "k3"}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for w, db := range []*postgres.DB{a, b, a, b} {
		wg.Go(func() {
			for i := range 15 {
				var cs []memory.Change
				for j := range keys {
					k := keys[(j+w+i)%len(keys)]
					cs = append(cs, memFact(k, fmt.Sprintf("%s value %d", k, (i+w)%3)))
				}
				if _, err := db.ApplyChanges(t.Context(), cs); err != nil {
					fail(err)
				}
			}
		})
	}
	wg.Go(func() {
		for range 15 {
			fs, err := b.Facts(t.Context(), "chat", "u1")
			if err != nil {
				fail(err)
				continue
			}
			ids := make([]int64, 0, len(fs))
			for i := len(fs) - 1; i >= 0; i-- {
				ids = append(ids, fs[i].ID)
			}
			if err := b.TouchFacts(t.Context(), ids, clk.Now()); err != nil {
				fail(err)
			}
		}
	})
	wg.Go(func() {
		for range 5 {
			if _, err := a.ForgetUser(t.Context(), "chat", "u1", memory.ForgetOptions{}); err != nil {
				fail(err)
			}
		}
	})
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	activeFacts(t, a)
}
