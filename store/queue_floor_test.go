package store

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
)

// liveByScan lists the ids of the live queue rows by a full scan, without
// the floor.
func liveByScan(t *testing.T, d *DB) []string {
	t.Helper()
	return queryStrings(t, d, `SELECT id FROM inbound_items WHERE status IN ('pending', 'leased') ORDER BY id`)
}

// requireFloorBelowLive checks the queue floor's invariant: no live row
// lies below it.
func requireFloorBelowLive(t *testing.T, d *DB, msg string) {
	t.Helper()
	var below int
	require.NoError(t, d.rdb.QueryRowContext(t.Context(), `SELECT count(*) FROM inbound_items
WHERE status IN ('pending', 'leased') AND rid < (SELECT rid FROM queue_floor)`).Scan(&below))
	require.Zero(t, below, msg)
}

// floor reads the queue floor.
func floor(t *testing.T, d *DB) int64 {
	t.Helper()
	var f int64
	require.NoError(t, d.rdb.QueryRowContext(t.Context(), `SELECT rid FROM queue_floor`).Scan(&f))
	return f
}

// The queue floor stays below every live row through random enqueues
// (some of messages whose transcript rows were written long before),
// claims, completions, retries and releases, with the floor raised at
// every timeline flush; after a reopen the claim index holds exactly the
// live rows a full scan finds.
func TestQueueFloorKeepsEveryLiveRow(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "floor.db")
	clk := clock.NewFake(t0)
	d, err := Open(path, Options{Clock: clk, noTimelineFlusher: true})
	require.NoError(t, err)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(7, 11))
	chats := []channel.Chat{{Kind: channel.Group, ID: "g1"}, {Kind: channel.Group, ID: "g2"}, {Kind: channel.Private, ID: "u9"}}
	var (
		next    int
		backlog []channel.Event // messages in the transcript, not yet queued
		leases  []inbound.Lease
	)
	newEvent := func() channel.Event {
		next++
		return msgEvent(chats[rng.IntN(len(chats))], fmt.Sprint(next), "u1", "Ann", fmt.Sprint("message ", next),
			t0.Add(time.Duration(next)*time.Second))
	}
	limits := inbound.Limits{Max: 8, PerGroup: 8, PerPrivate: 8, Owner: "w"}
	lowered := 0
	for step := range 600 {
		switch op := rng.IntN(10); {
		case op < 3:
			_, err := d.Enqueue(ctx, inbound.Item{Event: newEvent(), Priority: 100})
			require.NoError(t, err)
		case op < 4:
			// A message the transcript holds before the queue does (a
			// backfill seen first, delivered live later): its queue row
			// gets the transcript row's older rowid.
			ev := newEvent()
			require.NoError(t, d.Append(ctx, memory.Entry{Event: ev}))
			backlog = append(backlog, ev)
		case op < 5 && len(backlog) > 0:
			i := rng.IntN(len(backlog))
			before := floor(t, d)
			_, err := d.Enqueue(ctx, inbound.Item{Event: backlog[i], Priority: 100})
			require.NoError(t, err)
			if floor(t, d) < before {
				lowered++
			}
			backlog = slices.Delete(backlog, i, i+1)
		case op < 7:
			ls, err := d.Claim(ctx, limits)
			require.NoError(t, err)
			leases = append(leases, ls...)
		case op < 8 && len(leases) > 0:
			i := rng.IntN(len(leases))
			l := leases[i]
			leases = slices.Delete(leases, i, i+1)
			switch rng.IntN(6) {
			case 0:
				require.NoError(t, d.Retry(ctx, l, clk.Now(), fmt.Errorf("flaky")))
			case 1:
				require.NoError(t, d.Release(ctx, l))
			default:
				require.NoError(t, d.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied, Reason: "test"}))
			}
		case op < 9:
			// Every claimable item done, and the floor raised past them.
			ls, err := d.Claim(ctx, inbound.Limits{Max: 1000, PerGroup: 1000, PerPrivate: 1000, Owner: "w"})
			require.NoError(t, err)
			for _, l := range append(leases, ls...) {
				require.NoError(t, d.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied, Reason: "test"}))
			}
			leases = nil
			require.NoError(t, d.flushTimeline(ctx))
		default:
			require.NoError(t, d.flushTimeline(ctx))
		}
		requireFloorBelowLive(t, d, fmt.Sprint("step ", step))
	}
	// Live items to find after the reopen: pending ones, a leased one and
	// the rest of the backlog.
	for range 3 {
		_, err := d.Enqueue(ctx, inbound.Item{Event: newEvent(), Priority: 100})
		require.NoError(t, err)
	}
	_, err = d.Claim(ctx, inbound.Limits{Max: 1, PerGroup: 1, PerPrivate: 1, Owner: "w"})
	require.NoError(t, err)
	for _, ev := range backlog {
		_, err := d.Enqueue(ctx, inbound.Item{Event: ev, Priority: 100})
		require.NoError(t, err)
	}
	require.NoError(t, d.flushTimeline(ctx))
	requireFloorBelowLive(t, d, "at the end")
	require.Greater(t, floor(t, d), int64(1), "the floor moved up")
	require.Positive(t, lowered, "some older rows lowered the floor")
	want := liveByScan(t, d)
	require.GreaterOrEqual(t, len(want), 3)
	require.NoError(t, d.Close())

	d, err = Open(path, Options{Clock: clk, noTimelineFlusher: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	requireFloorBelowLive(t, d, "after reopen")
	var got []string
	for _, st := range []inbound.Status{inbound.StatusPending, inbound.StatusLeased} {
		recs, err := d.Records(ctx, RecordQuery{Status: st})
		require.NoError(t, err)
		for _, r := range recs {
			got = append(got, r.ID)
		}
	}
	slices.Sort(got)
	require.Equal(t, want, got, "the reopened store lists every live row")
	clk.Advance(time.Hour) // every retry is due, every lease expired
	_, err = d.ReleaseExpired(ctx)
	require.NoError(t, err)
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1000, PerGroup: 1000, PerPrivate: 1000, Owner: "w2"})
	require.NoError(t, err)
	require.ElementsMatch(t, want, ids(ls), "and claims every one")
}

// A new live row below the floor lowers it (the trigger of migration
// 0010), so a reopened store still finds it.
func TestQueueFloorLoweredByAnOlderRow(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "floor.db")
	d, err := Open(path, Options{Clock: clock.NewFake(t0), noTimelineFlusher: true})
	require.NoError(t, err)
	ctx := t.Context()
	g := channel.Chat{Kind: channel.Group, ID: "g1"}
	old := msgEvent(g, "old", "u1", "Ann", "said while the bot was away", t0)
	require.NoError(t, d.Append(ctx, memory.Entry{Event: old}))
	for i := range 5 {
		_, err := d.Enqueue(ctx, inbound.Item{Event: msgEvent(g, fmt.Sprint(i), "u1", "Ann", "hi", t0.Add(time.Minute))})
		require.NoError(t, err)
	}
	ls, err := d.Claim(ctx, inbound.Limits{Max: 10, PerGroup: 10, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 5)
	for _, l := range ls {
		require.NoError(t, d.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied, Reason: "test"}))
	}
	require.NoError(t, d.flushTimeline(ctx))
	raised := floor(t, d)
	ok, err := d.Enqueue(ctx, inbound.Item{Event: old})
	require.NoError(t, err)
	require.True(t, ok)
	rec, err := d.Lookup(ctx, old.Key())
	require.NoError(t, err)
	require.Less(t, floor(t, d), raised, "lowered for the older row")
	requireFloorBelowLive(t, d, "after the older row")
	require.NoError(t, d.Close())

	d, err = Open(path, Options{Clock: clock.NewFake(t0), noTimelineFlusher: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	ls, err = d.Claim(ctx, inbound.Limits{Max: 10, PerGroup: 10, Owner: "w"})
	require.NoError(t, err)
	require.Equal(t, []string{rec.ID}, ids(ls))
}
