package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/inbound/checkpointtest"
	"github.com/personakit/persona/inbound/queuetest"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store/postgres"
)

var qt0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// openQueue opens a store on the schema of url with its process
// registration running, as a process that uses the queue has it.
func openQueue(t *testing.T, url string, clk clock.Clock) *postgres.DB {
	t.Helper()
	db := openURL(t, url, clk)
	db.StartPresenceForTest()
	t.Cleanup(db.StopPresenceForTest) // runs before the Close openURL registered
	return db
}

func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, clk *clock.Fake) inbound.Queue {
		return openQueue(t, pgtest.Schema(t), clk)
	})
}

func TestCheckpointsConformance(t *testing.T) {
	checkpointtest.Run(t, func(t *testing.T) inbound.Checkpoints {
		return open(t, clock.NewFake(checkpointtest.Start))
	})
}

// qEvent is a message event of chat (kind, chat) with id at.
func qEvent(kind channel.ChatKind, chat, id string, at time.Time, text string) channel.Event {
	ev := channel.Event{
		Platform: "test", BotID: "bot", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: kind, ID: chat}, MessageID: id, Time: at,
		Sender:   channel.Sender{ID: "u" + id, Name: "User " + id},
		Segments: []channel.Segment{channel.Text(text)},
	}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
	return ev
}

func qEnqueue(t *testing.T, d *postgres.DB, evs ...channel.Event) {
	t.Helper()
	for _, ev := range evs {
		ok, err := d.Enqueue(t.Context(), inbound.Item{Event: ev})
		require.NoError(t, err)
		require.True(t, ok)
	}
}

// TestQueueSharedByProcesses hammers one queue from three stores on the
// same schema (three processes), several claimers each: no item is ever
// held by two claimers at once, no session ever has more leases than its
// limit, and every item ends done once.
func TestQueueSharedByProcesses(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(qt0)
	dbs := []*postgres.DB{openQueue(t, url, clk), openQueue(t, url, clk), openQueue(t, url, clk)}
	const (
		sessions   = 4
		perSession = 40
		perGroup   = 2
		perPrivate = 1
	)
	limit := map[string]int{}
	var all []channel.Event
	for s := range sessions {
		kind, lim := channel.Group, perGroup
		if s%3 == 0 {
			kind, lim = channel.Private, perPrivate
		}
		for i := range perSession {
			ev := qEvent(kind, fmt.Sprint("c", s), fmt.Sprintf("%d-%d", s, i), qt0.Add(time.Duration(i)*time.Millisecond), "x")
			all = append(all, ev)
			limit[ev.SessionKey] = lim
		}
	}
	// Enqueued through every store at once.
	var wg sync.WaitGroup
	for i, d := range dbs {
		wg.Go(func() {
			for j := i; j < len(all); j += len(dbs) {
				_, err := d.Enqueue(t.Context(), inbound.Item{Event: all[j], Priority: (j % 4) * 20})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())

	var (
		mu       sync.Mutex
		held     = map[string]string{} // item → claimer holding it now
		inflight = map[string]int{}    // session → leases known to be held
		done     = map[string]bool{}
		claims   = map[string]int{}
		problems []string
	)
	for di, d := range dbs {
		for w := range 4 {
			wg.Go(func() {
				owner := fmt.Sprintf("p%d/w%d", di, w)
				rnd := rand.New(rand.NewPCG(uint64(di), uint64(w)))
				idle := 0
				for idle < 200 {
					ls, err := d.Claim(t.Context(), inbound.Limits{Max: 1 + rnd.IntN(3), Owner: owner,
						PerGroup: perGroup, PerPrivate: perPrivate})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					finished := len(done) == len(all)
					for _, l := range ls {
						if prev, ok := held[l.ID]; ok {
							problems = append(problems, fmt.Sprintf("%s claimed by %s while %s held it", l.ID, owner, prev))
						}
						held[l.ID] = owner
						claims[l.ID]++
						inflight[l.SessionKey]++
						if inflight[l.SessionKey] > limit[l.SessionKey] {
							problems = append(problems, fmt.Sprintf("session %s has %d leases", l.SessionKey, inflight[l.SessionKey]))
						}
						if l.Claims != claims[l.ID] {
							problems = append(problems, fmt.Sprintf("%s: lease claims %d, seen %d", l.ID, l.Claims, claims[l.ID]))
						}
					}
					mu.Unlock()
					if len(ls) == 0 {
						if finished {
							return
						}
						idle++
						continue
					}
					idle = 0
					for _, l := range ls {
						// The slot is given back in the books before the store
						// frees it, so the books never count fewer leases than
						// the store has.
						mu.Lock()
						delete(held, l.ID)
						inflight[l.SessionKey]--
						mu.Unlock()
						if rnd.IntN(4) == 0 {
							err = d.Snooze(t.Context(), l, time.Time{}, "again")
						} else {
							err = d.Complete(t.Context(), l, inbound.Outcome{Code: outcome.Replied})
							if err == nil {
								mu.Lock()
								done[l.ID] = true
								mu.Unlock()
							}
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	require.Empty(t, problems)
	require.Len(t, done, len(all), "every item done")
	for _, ev := range all {
		r, err := dbs[0].Lookup(t.Context(), ev.Key())
		require.NoError(t, err)
		require.Equal(t, inbound.StatusDone, r.Status)
		require.Equal(t, 1, r.Attempts, "snoozes give their attempts back")
	}
}

// TestQueueStaleHolderInAnotherProcess: a lease that expired and was
// claimed by another process is lost to its first holder.
func TestQueueStaleHolderInAnotherProcess(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(qt0)
	a, b := openQueue(t, url, clk), openQueue(t, url, clk)
	ctx := t.Context()
	ev := qEvent(channel.Group, "g", "1", qt0, "hello")
	qEnqueue(t, a, ev)
	la, err := a.Claim(ctx, inbound.Limits{Max: 1, Owner: "a/1", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, la, 1)
	lb, err := b.Claim(ctx, inbound.Limits{Max: 1, Owner: "b/1"})
	require.NoError(t, err)
	require.Empty(t, lb, "the lease holds")

	clk.Advance(time.Minute)
	lb, err = b.Claim(ctx, inbound.Limits{Max: 1, Owner: "b/1"})
	require.NoError(t, err)
	require.Len(t, lb, 1, "claimable once expired")
	require.Equal(t, 2, lb[0].Claims)
	require.Equal(t, 2, lb[0].Attempts)
	require.Equal(t, "hello", lb[0].Event.Text())

	before, err := b.Lookup(ctx, ev.Key())
	require.NoError(t, err)
	l := la[0]
	require.ErrorIs(t, a.Extend(ctx, &l, time.Minute), inbound.ErrLeaseLost)
	require.ErrorIs(t, a.Complete(ctx, la[0], inbound.Outcome{Code: outcome.Replied}), inbound.ErrLeaseLost)
	require.ErrorIs(t, a.Retry(ctx, la[0], time.Time{}, errors.New("x")), inbound.ErrLeaseLost)
	require.ErrorIs(t, a.Release(ctx, la[0]), inbound.ErrLeaseLost)
	after, err := b.Lookup(ctx, ev.Key())
	require.NoError(t, err)
	require.Equal(t, before, after, "the stale holder changed nothing")
	require.NoError(t, b.Complete(ctx, lb[0], inbound.Outcome{Code: outcome.Replied}))
}

// TestQueueWakesOtherProcesses: an enqueue, a snooze and a release in one
// store wake the claimers of another.
func TestQueueWakesOtherProcesses(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(qt0)
	a, b := openQueue(t, url, clk), openQueue(t, url, clk)
	ctx := t.Context()
	woken := make(chan struct{}, 64)
	stop := b.OnClaimable(func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	defer stop()
	drain := func() {
		for {
			select {
			case <-woken:
			default:
				return
			}
		}
	}
	// The listener may not listen yet: enqueue until a wake-up arrives.
	deadline := time.After(20 * time.Second)
	for i := 0; ; i++ {
		qEnqueue(t, a, qEvent(channel.Group, "g", fmt.Sprint("warm", i), qt0, "x"))
		select {
		case <-woken:
		case <-time.After(200 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("no wake-up within 20 s")
		}
		break
	}
	ls, err := a.Claim(ctx, inbound.Limits{Max: 1, Owner: "a"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	wait := func(what string) {
		t.Helper()
		select {
		case <-woken:
		case <-time.After(20 * time.Second):
			t.Fatalf("no wake-up after %s", what)
		}
	}
	drain()
	require.NoError(t, a.Snooze(ctx, ls[0], time.Time{}, "offline"))
	wait("snooze")
	ls, err = a.Claim(ctx, inbound.Limits{Max: 1, Owner: "a"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	drain()
	require.NoError(t, a.Release(ctx, ls[0]))
	wait("release")
	drain()
	qEnqueue(t, a, qEvent(channel.Group, "g2", "new", qt0, "x"))
	wait("enqueue")
}

// TestQueueFreesDeadProcessLeases: the leases of a store whose process is
// gone (its presence connection closed) are freed by the reaper of
// another, reported as orphaned by the next claim, and lost to their old
// holder; a live process's leases are left alone.
func TestQueueFreesDeadProcessLeases(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(qt0)
	a, b := openQueue(t, url, clk), openQueue(t, url, clk)
	ctx := t.Context()
	ev1 := qEvent(channel.Group, "g1", "1", qt0, "x")
	ev2 := qEvent(channel.Private, "p1", "2", qt0.Add(time.Second), "x")
	ev3 := qEvent(channel.Group, "g3", "3", qt0.Add(2*time.Second), "x")
	qEnqueue(t, a, ev1, ev2, ev3)
	la, err := a.Claim(ctx, inbound.Limits{Max: 2, Owner: "a"})
	require.NoError(t, err)
	require.Len(t, la, 2)
	lb, err := b.Claim(ctx, inbound.Limits{Max: 1, Owner: "b"})
	require.NoError(t, err)
	require.Len(t, lb, 1)
	require.False(t, lb[0].Orphaned)

	n, err := b.ReapDeadProcesses(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "both processes are alive")
	n, err = a.ReapDeadProcesses(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	// a dies: its connection to the server goes away.
	require.NoError(t, a.Close())
	a.StopPresenceForTest()
	// b's reaper (here, or its own loop every 2 s) frees them once the
	// server has noticed the closed connection.
	deadline := time.Now().Add(20 * time.Second)
	for freed := 0; freed < len(la); {
		require.True(t, time.Now().Before(deadline), "a's leases were not freed within 20 s")
		time.Sleep(20 * time.Millisecond)
		_, err = b.ReapDeadProcesses(ctx)
		require.NoError(t, err)
		freed = 0
		for _, l := range la {
			r, err := b.Lookup(ctx, l.ID)
			require.NoError(t, err)
			if r.Status == inbound.StatusPending {
				freed++
			}
		}
	}
	for _, l := range la {
		r, err := b.Lookup(ctx, l.ID)
		require.NoError(t, err)
		require.Equal(t, inbound.StatusPending, r.Status)
		require.Equal(t, 1, r.Attempts, "the attempt stays counted")
		require.Contains(t, r.LastError, "died")
	}
	r, err := b.Lookup(ctx, lb[0].ID)
	require.NoError(t, err)
	require.Equal(t, inbound.StatusLeased, r.Status, "b's own lease is untouched")

	// Claimable at once, without waiting for the lease to expire, and
	// reported as orphaned until a lease operation settles them.
	got, err := b.Claim(ctx, inbound.Limits{Max: 5, Owner: "b"})
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, l := range got {
		require.True(t, l.Orphaned, l.ID)
		require.Equal(t, 2, l.Attempts)
		require.Equal(t, 2, l.Claims)
	}
	require.NoError(t, b.Snooze(ctx, got[0], time.Time{}, "later"))
	require.NoError(t, b.Complete(ctx, got[1], inbound.Outcome{Code: outcome.Replied}))
	again, err := b.Claim(ctx, inbound.Limits{Max: 5, Owner: "b"})
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.False(t, again[0].Orphaned, "settled by the snooze")
	require.NoError(t, b.Complete(ctx, again[0], inbound.Outcome{Code: outcome.Replied}))

	n, err = b.ReapDeadProcesses(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a dead process is forgotten once freed")
}

// TestQueueSurvivesPresenceReconnect: a live process whose presence
// connection was cut registers again and keeps claiming.
func TestQueueSurvivesPresenceReconnect(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(qt0)
	a, b := openQueue(t, url, clk), openQueue(t, url, clk)
	ctx := t.Context()
	qEnqueue(t, a, qEvent(channel.Group, "g", "1", qt0, "x"), qEvent(channel.Group, "g", "2", qt0, "x"))
	deadline := time.Now().Add(20 * time.Second)
	pid := a.PresenceBackendPIDForTest()
	for pid == 0 { // registration runs in the background
		require.True(t, time.Now().Before(deadline), "a did not register within 20 s")
		time.Sleep(10 * time.Millisecond)
		pid = a.PresenceBackendPIDForTest()
	}
	killBackend(t, url, pid)
	// Until a registers again its leases may be taken for a dead
	// process's; once it has, they stay.
	for a.PresenceBackendPIDForTest() == pid || a.PresenceBackendPIDForTest() == 0 {
		require.True(t, time.Now().Before(deadline), "a did not register again within 20 s")
		time.Sleep(50 * time.Millisecond)
	}
	ls, err := a.Claim(ctx, inbound.Limits{Max: 2, Owner: "a"})
	require.NoError(t, err)
	require.Len(t, ls, 2)
	n, err := b.ReapDeadProcesses(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	for _, l := range ls {
		require.NoError(t, a.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied}))
	}
}

// killBackend terminates a server backend, as if its client had died.
func killBackend(t *testing.T, url string, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := rawConn(t, url)
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok))
	require.True(t, ok)
}

func TestQueueLookupUnknown(t *testing.T) {
	d := openQueue(t, pgtest.Schema(t), clock.NewFake(qt0))
	_, err := d.Lookup(t.Context(), "test/bot/group:none/404")
	require.ErrorIs(t, err, inbound.ErrNotFound)
}

// TestEnqueueWritesTranscript: Enqueue writes the message_events row as
// the history does (search tokens included), and a text PostgreSQL cannot
// store as it is (a NUL byte) does not lose the message.
func TestEnqueueWritesTranscript(t *testing.T) {
	url := pgtest.Schema(t)
	d := openQueue(t, url, clock.NewFake(qt0))
	ctx := t.Context()
	ev := qEvent(channel.Group, "g", "1", qt0, "hello\x00 searchable world")
	qEnqueue(t, d, ev)
	r, err := d.Lookup(ctx, ev.Key())
	require.NoError(t, err)
	require.Equal(t, "hello searchable world", r.Text)
	var dir, tokens string
	require.NoError(t, rawConn(t, url).QueryRow(ctx,
		`SELECT direction, search_tokens FROM message_events WHERE id = $1`, ev.Key()).Scan(&dir, &tokens))
	require.Equal(t, "in", dir)
	require.Contains(t, tokens, "searchable")

	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, "hello\x00 searchable world", ls[0].Event.Text(), "the event itself is kept whole")
	require.NoError(t, d.Retry(ctx, ls[0], time.Time{}, errors.New("bad\x00 byte")))
	r, err = d.Lookup(ctx, ev.Key())
	require.NoError(t, err)
	require.Equal(t, "bad byte", r.LastError)
}
