package store

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/internal/cputime"
	"github.com/personakit/persona/outcome"
)

// benchItems builds n queue items spread over the given number of group
// sessions.
func benchItems(n, sessions int) []inbound.Item {
	base := time.Now().Add(-time.Hour)
	items := make([]inbound.Item, n)
	for i := range items {
		ev := channel.Event{
			Platform: "onebot", BotID: "10001", Kind: channel.KindMessage,
			Chat:      channel.Chat{Kind: channel.Group, ID: fmt.Sprint(100000 + i%sessions)},
			MessageID: fmt.Sprint(i), Time: base.Add(time.Duration(i) * time.Millisecond),
			Sender:   channel.Sender{ID: fmt.Sprint(2000 + i%97), Name: "someone", Role: channel.RoleMember},
			Segments: []channel.Segment{channel.Text("a typical short chat message, nothing special " + fmt.Sprint(i))},
			Source:   channel.SourceLive,
		}
		ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
		items[i] = inbound.Item{Event: ev, Priority: []int{0, 0, 60, 80, 100}[i%5]}
	}
	return items
}

// BenchmarkQueueThroughput measures the full queue cycle on a real SQLite
// file: every item is enqueued, claimed and completed. 64 producers enqueue
// concurrently (as channel goroutines do); 4 consumers claim batches of 64
// with generous per-session limits over 1000 sessions and complete each lease
// on its own goroutine (as workers finishing turns do). items/s counts items
// that went through the whole cycle per second; cpu-µs/item is the process's
// CPU time (every goroutine and the kernel) per item; writer-µs/item the
// time the single writer spent per item (its busy time, see WriterStats),
// which bounds items/s at 10⁶ / writer-µs/item. The group-commit case
// is the store as shipped, its figures including the search indexing of
// the transcript rows (done in the background; what is still queued when
// the last item completes is indexed before the clock stops);
// group-commit-no-search-index is the store as a pipeline without memory
// opens it (DeferSearch: rows are stored untokenized until a first search);
// direct runs every operation in its own transaction, for comparison.
//
//	go test ./store -run xxx -bench Queue -benchmem
func BenchmarkQueueThroughput(b *testing.B) {
	modes := []struct {
		name   string
		opts   Options
		stored bool // claims held, then stored when the turn starts, as the pipeline claims
	}{
		{"group-commit", Options{}, false},
		{"group-commit-no-search-index", Options{DeferSearch: true}, false},
		{"pipeline-claims-no-search-index", Options{DeferSearch: true}, true},
		{"direct", Options{directWrites: true}, false},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			runThroughput(b, m.opts, 64, 4, m.stored)
		})
	}
}

func runThroughput(b *testing.B, opts Options, producers, consumers int, stored bool) {
	d, err := Open(filepath.Join(b.TempDir(), "bench.db"), opts)
	require.NoError(b, err)
	defer func() { require.NoError(b, d.Close()) }()
	items := benchItems(b.N, 1000)
	ctx := context.Background()
	var (
		next, done atomic.Int64
		wake       = make(chan struct{}, 1)
		// Held claims, as a caller may ask for them: direct-trigger
		// items (priority 100, a fifth here) stored at once, the others
		// held until their completion writes them. (The pipeline holds
		// none: it has every claim stored at once.)
		limits = inbound.Limits{Max: 64, PerGroup: 64, PerPrivate: 64, Owner: "bench",
			HoldBelow: inbound.PriorityDirect}
		done1 = inbound.Outcome{Code: outcome.Replied, Reason: "bench", Stage: inbound.StageAcknowledged}
	)
	if stored {
		// The pipeline's pattern: every claim held while it waits for a
		// worker, stored (Extend) when its turn starts, then completed.
		limits.HoldBelow = math.MaxInt
	}
	b.ReportAllocs()
	b.ResetTimer()
	w0 := d.WriterStats()
	cpu0 := cputime.Process()
	start := time.Now()
	var g errgroup.Group
	for range producers {
		g.Go(func() error {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(items)) {
					return nil
				}
				if _, err := d.Enqueue(ctx, items[i]); err != nil {
					return err
				}
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		})
	}
	for range consumers {
		g.Go(func() error {
			for done.Load() < int64(len(items)) {
				ls, err := d.Claim(ctx, limits)
				if err != nil {
					return err
				}
				if len(ls) == 0 {
					select {
					case <-wake:
					case <-time.After(time.Millisecond):
					}
					continue
				}
				var wg sync.WaitGroup
				errs := make([]error, len(ls))
				for i, l := range ls {
					wg.Go(func() {
						if stored {
							// As the pipeline does: the claim is stored
							// right before the turn runs.
							if errs[i] = d.Extend(ctx, &l, inbound.DefaultLease); errs[i] != nil {
								return
							}
						}
						errs[i] = d.Complete(ctx, l, done1)
					})
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						return err
					}
				}
				done.Add(int64(len(ls)))
			}
			return nil
		})
	}
	require.NoError(b, g.Wait())
	// The transcript rows are indexed for search in the background; finish
	// that work inside the measurement. With DeferSearch they wait for the
	// first search (what a pipeline without memory does), so there is
	// nothing to finish.
	if !opts.DeferSearch {
		drainSearchIndex(b, d)
	}
	elapsed := time.Since(start)
	cpu := cputime.Process() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/item")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "items/s")
	w := d.WriterStats()
	b.ReportMetric(float64(w.Ops-w0.Ops)/float64(max(w.Batches-w0.Batches, 1)), "ops/batch")
	b.ReportMetric(float64((w.Busy-w0.Busy).Microseconds())/float64(b.N), "writer-µs/item")

	counts, err := d.CountOutcomes(ctx)
	require.NoError(b, err)
	require.Equal(b, b.N, counts[outcome.Replied], "every item completed once")
}

// drainSearchIndex indexes every queued history row.
func drainSearchIndex(b *testing.B, d *DB) {
	b.Helper()
	for {
		n, err := d.indexPending(context.Background(), nil, searchIndexBatch)
		require.NoError(b, err)
		if n == 0 {
			return
		}
	}
}
