package store

import (
	"cmp"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// idealClaim computes, from the table, what a claim of max items at now
// must return: the claimable rows in claim order, skipping a row whose
// session already has limit unexpired leases (counting the rows taken
// before it in this claim). The table does not have the DB's soft leases
// (see DB.Claim); those come from the index.
func idealClaim(t *testing.T, d *DB, now int64, max, perPrivate, perGroup int) []string {
	t.Helper()
	rows, err := d.rdb.QueryContext(t.Context(), `SELECT id, session_key, chat_kind, priority, event_time, status,
    available_at, coalesce(lease_until, 0) FROM inbound_items WHERE status IN ('pending', 'leased')`)
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	type row struct {
		id, session, kind, status string
		priority                  int
		eventTime, avail, until   int64
	}
	var cands []row
	busy := map[string]int{}
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.id, &r.session, &r.kind, &r.priority, &r.eventTime, &r.status, &r.avail, &r.until))
		d.sched.mu.Lock()
		if it := d.sched.items[r.id]; it != nil && it.soft {
			r.status, r.until = "leased", it.leaseUntil
		}
		d.sched.mu.Unlock()
		switch {
		case r.status == "leased" && r.until > now:
			busy[r.session]++
		case r.status == "pending" && r.avail <= now, r.status == "leased":
			cands = append(cands, r)
		}
	}
	require.NoError(t, rows.Err())
	slices.SortFunc(cands, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.priority, a.priority), cmp.Compare(a.eventTime, b.eventTime), strings.Compare(a.id, b.id))
	})
	var out []string
	for _, r := range cands {
		if len(out) == max {
			break
		}
		limit := perGroup
		if r.kind == "private" {
			limit = perPrivate
		}
		if busy[r.session] >= limit {
			continue
		}
		busy[r.session]++
		out = append(out, r.id)
	}
	return out
}

// TestClaimIndexMatchesTable drives the queue with random operations and
// checks before every claim that the in-memory claim index picks exactly
// what the table says is claimable, in order and within the limits; halfway
// it reopens the file, so the index is rebuilt from the table.
func TestClaimIndexMatchesTable(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 42))
			clk := clock.NewFake(t0)
			path := filepath.Join(t.TempDir(), "q.db")
			d, err := Open(path, Options{Clock: clk})
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			ctx := t.Context()
			var held []inbound.Lease
			n := 0
			for step := range 600 {
				if step == 300 {
					require.NoError(t, d.Close())
					d, err = Open(path, Options{Clock: clk})
					require.NoError(t, err)
				}
				switch op := rng.IntN(10); {
				case op < 4: // enqueue
					kind := channel.Group
					if rng.IntN(3) == 0 {
						kind = channel.Private
					}
					ev := testEvent(kind, fmt.Sprint("c", rng.IntN(5)), fmt.Sprint(n), clk.Now().Add(-time.Duration(rng.IntN(5000))*time.Millisecond), "x")
					n++
					it := inbound.Item{Event: ev, Priority: []int{0, 60, 80, 100}[rng.IntN(4)]}
					if rng.IntN(4) == 0 {
						it.AvailableAt = clk.Now().Add(time.Duration(rng.IntN(20)) * time.Second)
					}
					_, err := d.Enqueue(ctx, it)
					require.NoError(t, err)
					if rng.IntN(8) == 0 { // a duplicate delivery with a higher priority
						it.Priority = 100
						_, err := d.Enqueue(ctx, it)
						require.NoError(t, err)
					}
				case op < 6: // claim
					limits := inbound.Limits{Max: 1 + rng.IntN(6), PerGroup: 1 + rng.IntN(3), PerPrivate: 1 + rng.IntN(2),
						Lease: time.Duration(5+rng.IntN(30)) * time.Second, Owner: "w",
						HoldBelow: []int{0, 70, 101}[rng.IntN(3)]}
					want := idealClaim(t, d, ms(clk.Now()), limits.Max, limits.PerPrivate, limits.PerGroup)
					ls, err := d.Claim(ctx, limits)
					require.NoError(t, err)
					require.Equal(t, want, append([]string(nil), ids(ls)...), "step %d", step)
					held = append(held, ls...)
				case op < 8 && len(held) > 0: // end a lease in one of five ways
					i := rng.IntN(len(held))
					l := held[i]
					var err error
					switch rng.IntN(5) {
					case 0, 1:
						err = d.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied})
					case 2:
						err = d.Retry(ctx, l, clk.Now().Add(time.Duration(rng.IntN(10))*time.Second), nil)
					case 3:
						err = d.Snooze(ctx, l, time.Time{}, "offline")
					case 4:
						err = d.Release(ctx, l)
					}
					if err != nil {
						require.ErrorIs(t, err, inbound.ErrLeaseLost)
					}
					held = slices.Delete(held, i, i+1)
				case op < 9 && len(held) > 0: // extend
					l := &held[rng.IntN(len(held))]
					if err := d.Extend(ctx, l, time.Duration(5+rng.IntN(30))*time.Second); err != nil {
						require.ErrorIs(t, err, inbound.ErrLeaseLost)
					}
				default:
					clk.Advance(time.Duration(rng.IntN(8000)) * time.Millisecond)
				}
			}
		})
	}
}

// TestClaimIndexSurvivesRestart: the next DB on the file rebuilds its index
// from the table. Delays hold; the previous DB's leases are freed (their
// holders went with it): claimable at once, their attempts counted, and
// the old holder's lease is lost.
func TestClaimIndexSurvivesRestart(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	path := filepath.Join(t.TempDir(), "q.db")
	d, err := Open(path, Options{Clock: clk})
	require.NoError(t, err)
	ctx := t.Context()
	var keys []string
	for i := range 4 {
		ev := testEvent(channel.Group, "g", fmt.Sprint(i), t0.Add(time.Duration(i)*time.Second), "x")
		it := inbound.Item{Event: ev}
		if i == 3 {
			it.AvailableAt = t0.Add(time.Hour)
		}
		_, err := d.Enqueue(ctx, it)
		require.NoError(t, err)
		keys = append(keys, ev.Key())
	}
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "old", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, keys[:1], ids(ls))
	require.NoError(t, d.Close())

	d, err = Open(path, Options{Clock: clk})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	rec, err := d.Lookup(ctx, keys[0])
	require.NoError(t, err)
	require.Equal(t, inbound.StatusPending, rec.Status, "freed at Open, though its lease has not expired")
	require.Equal(t, 1, rec.Attempts)
	require.Equal(t, freedAtOpen, rec.LastError)
	require.ErrorIs(t, d.Extend(ctx, &ls[0], time.Minute), inbound.ErrLeaseLost, "the old lease is dead")
	limits := inbound.Limits{Max: 10, PerGroup: 2, Owner: "new", Lease: time.Minute}
	got, err := d.Claim(ctx, limits)
	require.NoError(t, err)
	require.Equal(t, keys[:2], ids(got), "front first, up to the limit: the freed item is claimable at once")
	require.Equal(t, 2, got[0].Attempts)
	require.Equal(t, 2, got[0].Claims)
	at, ok, err := d.NextAvailable(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, t0, at.UTC(), "keys[2] has been available since it was enqueued")
	clk.Advance(90 * time.Minute)
	got, err = d.Claim(ctx, inbound.Limits{Max: 10, PerGroup: 10, Owner: "new"})
	require.NoError(t, err)
	require.Equal(t, keys, ids(got), "the delay of keys[3] held; the expired leases are claimable again")
}

// behindTheIndex opens a DB on a new file holding two pending items of two
// groups (their keys in claim order), and a plain SQLite connection to the
// same file: something other than the DB (an operator's tool, say) that
// writes to the table behind the DB's claim index.
func behindTheIndex(t *testing.T) (a *DB, raw *sql.DB, keys []string) {
	t.Helper()
	clk := clock.NewFake(t0)
	path := filepath.Join(t.TempDir(), "q.db")
	a, err := Open(path, Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	for i := range 2 {
		ev := testEvent(channel.Group, fmt.Sprint("g", i), "m", t0.Add(time.Duration(i)*time.Second), "x")
		_, err := a.Enqueue(t.Context(), inbound.Item{Event: ev})
		require.NoError(t, err)
		keys = append(keys, ev.Key())
	}
	raw, err = sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, raw.Close()) })
	return a, raw, keys
}

// leaseBehind stores a lease of the item with id to owner "b" through raw,
// as a claim of another writer would.
func leaseBehind(t *testing.T, raw *sql.DB, id string) {
	t.Helper()
	res, err := raw.ExecContext(t.Context(), `UPDATE inbound_items SET status = 'leased', lease_owner = 'b',
    lease_until = ?1, claims = claims + 1, attempts = attempts + 1, first_claimed_at = coalesce(first_claimed_at, ?1)
WHERE id = ?2 AND status = 'pending'`, ms(t0.Add(time.Minute)), id)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestClaimGuardAgainstWritesBehindTheIndex: a lease is written to the
// table behind the DB's back; the DB's stored claim does not lease the
// item again, learns its state, and takes the next item.
func TestClaimGuardAgainstWritesBehindTheIndex(t *testing.T) {
	t.Parallel()
	a, raw, keys := behindTheIndex(t)
	ctx := t.Context()
	leaseBehind(t, raw, keys[0])

	la, err := a.Claim(ctx, inbound.Limits{Max: 1, Owner: "a"})
	require.NoError(t, err)
	require.Empty(t, la, "the item b holds is not leased twice")
	la, err = a.Claim(ctx, inbound.Limits{Max: 1, Owner: "a"})
	require.NoError(t, err)
	require.Equal(t, keys[1:], ids(la))
	rec, err := a.Lookup(ctx, keys[0])
	require.NoError(t, err)
	require.Equal(t, inbound.StatusLeased, rec.Status)
	// a re-read the row: its index has b's stored lease, not a lease of
	// its own.
	a.sched.mu.Lock()
	it := a.sched.items[keys[0]]
	soft, claims, attempts := it.soft, it.claims, it.attempts
	a.sched.mu.Unlock()
	require.False(t, soft)
	require.Equal(t, 1, claims)
	require.Equal(t, 1, attempts)
	require.NoError(t, a.Complete(ctx, la[0], inbound.Outcome{Code: outcome.Replied}))
}

// TestHeldLeaseLosesToWriteBehindTheIndex: the table does not show the
// DB's leases held in memory, so a writer behind its back may lease the
// same item; the row's claims count lets only the first lease operation
// to reach the row through, and the loser's index learns the row's state.
func TestHeldLeaseLosesToWriteBehindTheIndex(t *testing.T) {
	t.Parallel()
	a, raw, keys := behindTheIndex(t)
	ctx := t.Context()
	held := inbound.Limits{Max: 1, Owner: "a", HoldBelow: math.MaxInt}
	la, err := a.Claim(ctx, held)
	require.NoError(t, err)
	require.Equal(t, keys[:1], ids(la))
	require.True(t, la[0].Held)

	leaseBehind(t, raw, keys[0])
	require.ErrorIs(t, a.Complete(ctx, la[0], inbound.Outcome{Code: outcome.Replied}), inbound.ErrLeaseLost)
	rec, err := a.Lookup(ctx, keys[0])
	require.NoError(t, err)
	require.Equal(t, inbound.StatusLeased, rec.Status, "a learnt b's lease from the row")
	require.Equal(t, "b", leaseOwner(t, raw, keys[0]))
	require.Equal(t, 1, rec.Attempts)
	la, err = a.Claim(ctx, held)
	require.NoError(t, err)
	require.Equal(t, keys[1:], ids(la), "a leases the other item, not b's again")
	require.NoError(t, a.Complete(ctx, la[0], inbound.Outcome{Code: outcome.Replied}))
}

// leaseOwner reads the row's lease owner through raw.
func leaseOwner(t *testing.T, raw *sql.DB, id string) string {
	t.Helper()
	var owner sql.NullString
	require.NoError(t, raw.QueryRowContext(t.Context(), `SELECT lease_owner FROM inbound_items WHERE id = ?`, id).Scan(&owner))
	return owner.String
}

// TestClaimWritesNothing: a claim leases in memory (Lookup shows it); the
// lease's first operation writes the claim together with its own change.
func TestClaimWritesNothing(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	// This test counts the writer's operations; the timeline flusher
	// writes on its own.
	d := open(t, clk, noFlusher)
	ctx := t.Context()
	ev := testEvent(channel.Group, "g", "m", t0, "x")
	enqueue(t, d, ev)
	row := func() (status string, attempts, claims int, owner, first sql.NullString) {
		require.NoError(t, d.rdb.QueryRowContext(ctx, `SELECT status, attempts, claims, lease_owner,
    CAST(first_claimed_at AS TEXT) FROM inbound_items WHERE id = ?`, ev.Key()).Scan(&status, &attempts, &claims, &owner, &first))
		return status, attempts, claims, owner, first
	}
	w0 := d.WriterStats()
	clk.Advance(time.Second)
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w", HoldBelow: 1})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, 1, ls[0].Attempts)
	require.Equal(t, 1, ls[0].Claims)
	require.Equal(t, w0.Ops, d.WriterStats().Ops, "the claim wrote nothing")
	status, attempts, claims, owner, first := row()
	require.Equal(t, "pending", status)
	require.Zero(t, attempts)
	require.Zero(t, claims)
	require.False(t, owner.Valid)
	require.False(t, first.Valid)
	rec, err := d.Lookup(ctx, ev.Key())
	require.NoError(t, err)
	require.Equal(t, inbound.StatusLeased, rec.Status)
	require.Equal(t, 1, rec.Attempts)
	require.Equal(t, t0.Add(time.Second), rec.FirstClaim)
	leased, err := d.Records(ctx, RecordQuery{Status: inbound.StatusLeased})
	require.NoError(t, err)
	require.Len(t, leased, 1)
	pending, err := d.Records(ctx, RecordQuery{Status: inbound.StatusPending})
	require.NoError(t, err)
	require.Empty(t, pending)

	clk.Advance(time.Second)
	require.NoError(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied}))
	require.Equal(t, w0.Ops+1, d.WriterStats().Ops, "claim and completion in one write")
	status, attempts, claims, owner, first = row()
	require.Equal(t, "done", status)
	require.Equal(t, 1, attempts)
	require.Equal(t, 1, claims)
	require.Equal(t, "w", owner.String)
	require.Equal(t, fmt.Sprint(ms(t0.Add(time.Second))), first.String)
}

// TestClaimWithoutHeldPayload: items loaded from the table (no payload in
// memory) come with their decoded events.
func TestClaimWithoutHeldPayload(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	path := filepath.Join(t.TempDir(), "q.db")
	d, err := Open(path, Options{Clock: clk})
	require.NoError(t, err)
	ev := testEvent(channel.Private, "u1", "m1", t0, "hello there")
	_, err = d.Enqueue(t.Context(), inbound.Item{Event: ev})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	d, err = Open(path, Options{Clock: clk})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	ls, err := d.Claim(t.Context(), inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, "hello there", ls[0].Event.Text())
	require.Equal(t, ev.SessionKey, ls[0].Event.SessionKey)
}

// TestSoftLeaseSurvivesReload: a reload (what ReleaseExpired does) keeps
// the soft leases the table does not have, so the session's limit still
// holds and the holder can still complete.
func TestSoftLeaseSurvivesReload(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	x := testEvent(channel.Private, "p1", "x", t0.Add(-2*time.Second), "x")
	enqueue(t, d, x)
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, PerPrivate: 1, Owner: "w1", Lease: time.Minute, HoldBelow: 1})
	require.NoError(t, err)
	require.Equal(t, []string{x.Key()}, ids(ls))
	require.NoError(t, d.reload(ctx))

	z := testEvent(channel.Private, "p1", "z", t0.Add(-time.Second), "z")
	_, err = d.Enqueue(ctx, inbound.Item{Event: z, Priority: 100})
	require.NoError(t, err)
	more, err := d.Claim(ctx, inbound.Limits{Max: 5, PerPrivate: 1, Owner: "w2", Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, more, "the session is full")
	require.NoError(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied}))
	more, err = d.Claim(ctx, inbound.Limits{Max: 5, PerPrivate: 1, Owner: "w2", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{z.Key()}, ids(more), "the completion freed the slot")
}

// TestStaleSoftHolderLoses: once a soft lease expired and the item was
// claimed again, the old holder's operations fail and change nothing, and
// the index keeps the new holder's lease.
func TestStaleSoftHolderLoses(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	x := testEvent(channel.Private, "p1", "x", t0.Add(-2*time.Second), "x")
	enqueue(t, d, x)
	old, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w1", Lease: time.Second, HoldBelow: 1})
	require.NoError(t, err)
	require.Len(t, old, 1)
	clk.Advance(2 * time.Second) // the lease expired
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w1", Lease: time.Hour, HoldBelow: 1})
	require.NoError(t, err)
	require.Equal(t, []string{x.Key()}, ids(ls))
	require.Equal(t, 2, ls[0].Claims)
	require.Equal(t, 2, ls[0].Attempts)

	require.ErrorIs(t, d.Release(ctx, old[0]), inbound.ErrLeaseLost)
	require.ErrorIs(t, d.Complete(ctx, old[0], inbound.Outcome{Code: outcome.Replied}), inbound.ErrLeaseLost)
	d.sched.mu.Lock()
	it := d.sched.items[x.Key()]
	loc, claims, soft, inflight := it.loc, it.claims, it.soft, d.sched.sessions[it.session].inflight
	d.sched.mu.Unlock()
	require.Equal(t, locLeased, loc)
	require.Equal(t, 2, claims)
	require.True(t, soft)
	require.Equal(t, 1, inflight)
	require.NoError(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied}), "the index knows the new holder")
	rec, err := d.Lookup(ctx, x.Key())
	require.NoError(t, err)
	require.Equal(t, 2, rec.Attempts)
	d.sched.mu.Lock()
	_, still := d.sched.items[x.Key()]
	d.sched.mu.Unlock()
	require.False(t, still)
}

// TestCloseWritesHeldLeases: Close writes the leases still held in memory
// (their attempts were made), a holder's operation after Close fails at
// once, and the next Open frees them: pending, the attempt counted, the
// old lease lost.
func TestCloseWritesHeldLeases(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	path := filepath.Join(t.TempDir(), "q.db")
	d, err := Open(path, Options{Clock: clk})
	require.NoError(t, err)
	ctx := t.Context()
	ev := testEvent(channel.Group, "g", "m", t0, "x")
	enqueue(t, d, ev)
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w", HoldBelow: 1})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.True(t, ls[0].Held)
	require.NoError(t, d.Close())
	require.ErrorIs(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied}), ErrClosed)
	raw, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	var status string
	var attempts int
	require.NoError(t, raw.QueryRowContext(ctx, `SELECT status, attempts FROM inbound_items WHERE id = ?`, ev.Key()).
		Scan(&status, &attempts))
	require.NoError(t, raw.Close())
	require.Equal(t, "leased", status, "written by Close")
	require.Equal(t, 1, attempts)

	d, err = Open(path, Options{Clock: clk})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	rec, err := d.Lookup(ctx, ev.Key())
	require.NoError(t, err)
	require.Equal(t, inbound.StatusPending, rec.Status)
	require.Equal(t, 1, rec.Attempts)
	require.ErrorIs(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied}), inbound.ErrLeaseLost)
	again, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w", HoldBelow: 1})
	require.NoError(t, err)
	require.Equal(t, []string{ev.Key()}, ids(again))
	require.Equal(t, 2, again[0].Attempts)
	require.NoError(t, d.Complete(ctx, again[0], inbound.Outcome{Code: outcome.Replied}))
}

// TestLeasesUnderConcurrency drives claims (stored and held), lease
// operations, expiries and ReleaseExpired from several goroutines at once
// and checks that every item is completed exactly once and that the claim
// index ends empty.
func TestLeasesUnderConcurrency(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	const items = 300
	for i := range items {
		kind := channel.Group
		if i%3 == 0 {
			kind = channel.Private
		}
		ev := testEvent(kind, fmt.Sprint("c", i%17), fmt.Sprint(i), t0.Add(time.Duration(i)*time.Millisecond), "x")
		_, err := d.Enqueue(ctx, inbound.Item{Event: ev, Priority: []int{0, 60, 80, 100}[i%4]})
		require.NoError(t, err)
	}
	var (
		mu        sync.Mutex
		completed = map[string]int{}
		done      atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			owner := fmt.Sprint("w", w)
			for done.Load() < items {
				select {
				case <-stop:
					return
				default:
				}
				ls, err := d.Claim(ctx, inbound.Limits{Max: 1 + rng.IntN(4), Owner: owner, Lease: time.Second,
					HoldBelow: []int{0, 70, 101}[rng.IntN(3)]})
				if err != nil {
					t.Error(err)
					return
				}
				for _, l := range ls {
					var err error
					switch r := rng.IntN(20); {
					case r < 12:
						err = d.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied})
						if err == nil {
							mu.Lock()
							completed[l.ID]++
							mu.Unlock()
							done.Add(1)
						}
					case r < 15:
						err = d.Extend(ctx, &l, time.Second)
					case r < 17:
						err = d.Retry(ctx, l, time.Time{}, nil)
					case r < 19:
						err = d.Release(ctx, l)
					default: // abandoned: the lease expires
					}
					if err != nil && !errors.Is(err, inbound.ErrLeaseLost) {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for done.Load() < items {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			clk.Advance(300 * time.Millisecond)
			if _, err := d.ReleaseExpired(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		close(stop)
		<-finished
		t.Fatalf("only %d of %d items completed", done.Load(), items)
	}
	require.Len(t, completed, items)
	for id, n := range completed {
		require.Equal(t, 1, n, "%s completed %d times", id, n)
	}
	counts, err := d.CountOutcomes(ctx)
	require.NoError(t, err)
	require.Equal(t, items, counts[outcome.Replied])
	d.sched.mu.Lock()
	left := len(d.sched.items)
	d.sched.mu.Unlock()
	require.Zero(t, left, "the claim index is empty")
}

// TestReleaseExpiredCountsEachItemOnce: a row whose stored lease expired
// and that was claimed again in memory, that lease expired too, is
// released once, by its held lease's write.
func TestReleaseExpiredCountsEachItemOnce(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	x := testEvent(channel.Group, "g", "x", t0, "x")
	enqueue(t, d, x)
	_, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w1", Lease: time.Second}) // stored
	require.NoError(t, err)
	clk.Advance(2 * time.Second)
	again, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w2", Lease: time.Second, HoldBelow: 1})
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.True(t, again[0].Held)
	clk.Advance(2 * time.Second)
	n, err := d.ReleaseExpired(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rec, err := d.Lookup(ctx, x.Key())
	require.NoError(t, err)
	require.Equal(t, inbound.StatusPending, rec.Status)
	require.Equal(t, 2, rec.Attempts, "both attempts stay counted")
}
