package store

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// idealClaim computes, from the table alone, what a claim of max items at
// now must return: the claimable rows in claim order, skipping a row whose
// session already has limit unexpired leases (counting the rows taken
// before it in this claim).
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
						Lease: time.Duration(5+rng.IntN(30)) * time.Second, Owner: "w"}
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

// TestClaimIndexSurvivesRestart: leases and delays written by one handle
// are honoured by the next handle on the file, which rebuilds its index
// from the table.
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
	limits := inbound.Limits{Max: 10, PerGroup: 2, Owner: "new", Lease: time.Minute}
	got, err := d.Claim(ctx, limits)
	require.NoError(t, err)
	require.Equal(t, keys[1:2], ids(got), "the old unexpired lease still counts against the session")
	// The old holder's lease is still valid on the new handle.
	require.NoError(t, d.Extend(ctx, &ls[0], time.Minute))
	clk.Advance(90 * time.Second)
	got, err = d.Claim(ctx, limits)
	require.NoError(t, err)
	require.Equal(t, keys[:2], ids(got), "both leases expired: claimable again, front first, up to the limit")
	at, ok, err := d.NextAvailable(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, t0, at.UTC(), "keys[2] has been available since it was enqueued")
}

// TestClaimGuardAgainstSecondHandle: a second handle on the same file
// claims an item behind the first handle's back; the first handle's claim
// does not lease it again, learns its state, and takes the next item.
func TestClaimGuardAgainstSecondHandle(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	path := filepath.Join(t.TempDir(), "q.db")
	a, err := Open(path, Options{Clock: clk})
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
	ctx := t.Context()
	var keys []string
	for i := range 2 {
		ev := testEvent(channel.Group, fmt.Sprint("g", i), "m", t0.Add(time.Duration(i)*time.Second), "x")
		_, err := a.Enqueue(ctx, inbound.Item{Event: ev})
		require.NoError(t, err)
		keys = append(keys, ev.Key())
	}
	b, err := Open(path, Options{Clock: clk})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	lb, err := b.Claim(ctx, inbound.Limits{Max: 1, Owner: "b"})
	require.NoError(t, err)
	require.Equal(t, keys[:1], ids(lb))

	la, err := a.Claim(ctx, inbound.Limits{Max: 1, Owner: "a"})
	require.NoError(t, err)
	require.Empty(t, la, "the item b holds is not leased twice")
	la, err = a.Claim(ctx, inbound.Limits{Max: 1, Owner: "a"})
	require.NoError(t, err)
	require.Equal(t, keys[1:], ids(la))
	rec, err := a.Lookup(ctx, keys[0])
	require.NoError(t, err)
	require.Equal(t, inbound.StatusLeased, rec.Status)
	require.NoError(t, b.Complete(ctx, lb[0], inbound.Outcome{Code: outcome.Replied}))
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

// leasedIn counts a session's unexpired leases in the table.
func leasedIn(t *testing.T, d *DB, session string) int {
	t.Helper()
	var n int
	require.NoError(t, d.rdb.QueryRow(`SELECT count(*) FROM inbound_items
WHERE session_key = ? AND status = 'leased' AND lease_until > ?`, session, d.now()).Scan(&n))
	return n
}

// TestClaimSettlesAfterReload: a reload (what ReleaseExpired does) between
// a claim's pick and its write does not lose the lease the write committed,
// so the session's limit still holds.
func TestClaimSettlesAfterReload(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	x := testEvent(channel.Private, "p1", "x", t0.Add(-2*time.Second), "x")
	_, err := d.Enqueue(ctx, inbound.Item{Event: x})
	require.NoError(t, err)

	now := ms(clk.Now())
	chosen := d.sched.pick(now, 1, 1, 1)
	require.Len(t, chosen, 1)
	require.NoError(t, d.reload(ctx))
	ls, err := d.leasePicked(ctx, chosen, now, now+60_000, "w1")
	require.NoError(t, err)
	require.Equal(t, []string{x.Key()}, ids(ls))

	z := testEvent(channel.Private, "p1", "z", t0.Add(-time.Second), "z")
	_, err = d.Enqueue(ctx, inbound.Item{Event: z, Priority: 100})
	require.NoError(t, err)
	more, err := d.Claim(ctx, inbound.Limits{Max: 5, PerPrivate: 1, Owner: "w2", Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, more, "the session is full")
	require.Equal(t, 1, leasedIn(t, d, x.SessionKey))
	require.NoError(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied}))
	more, err = d.Claim(ctx, inbound.Limits{Max: 5, PerPrivate: 1, Owner: "w2", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{z.Key()}, ids(more), "the completion freed the slot")
}

// TestClaimSettlesAfterOldHolderRelease: an expired holder's Release that
// commits between a claim's pick and its write (same millisecond) moves the
// item back to ready; the claim's write still leases it, and the index
// follows the lease.
func TestClaimSettlesAfterOldHolderRelease(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()
	x := testEvent(channel.Private, "p1", "x", t0.Add(-2*time.Second), "x")
	_, err := d.Enqueue(ctx, inbound.Item{Event: x})
	require.NoError(t, err)
	old, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w1", Lease: time.Second})
	require.NoError(t, err)
	require.Len(t, old, 1)
	clk.Advance(2 * time.Second) // the lease expired

	now := ms(clk.Now())
	chosen := d.sched.pick(now, 1, 2, 2)
	require.Len(t, chosen, 1)
	require.NoError(t, d.Release(ctx, old[0])) // the old holder, claims still match
	ls, err := d.leasePicked(ctx, chosen, now, now+3_600_000, "w2")
	require.NoError(t, err)
	require.Equal(t, []string{x.Key()}, ids(ls))
	require.Equal(t, 2, ls[0].Claims)

	d.sched.mu.Lock()
	it := d.sched.items[x.Key()]
	loc, claims, inflight := it.loc, it.claims, d.sched.sessions[it.session].inflight
	d.sched.mu.Unlock()
	require.Equal(t, locLeased, loc)
	require.Equal(t, 2, claims)
	require.Equal(t, 1, inflight)
	require.NoError(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied}), "the index knows the new holder")
	d.sched.mu.Lock()
	_, still := d.sched.items[x.Key()]
	d.sched.mu.Unlock()
	require.False(t, still)
}

// TestClaimHeldStatement: the claim statement for picks whose events the
// index holds is sqlClaim without the payload lookup (a silent no-op of its
// derivation would read payloads on every claim again).
func TestClaimHeldStatement(t *testing.T) {
	t.Parallel()
	require.NotEqual(t, sqlClaim, sqlClaimHeld)
	require.Contains(t, sqlClaim, "json_each(?5)")
	require.NotContains(t, sqlClaimHeld, "?5")
	require.NotContains(t, sqlClaimHeld, "payload")
}
