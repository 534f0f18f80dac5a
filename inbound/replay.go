package inbound

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Replay backoff of the journal: 2 s doubling to 30 s, reset after a
// success.
const (
	DefaultReplayBase = 2 * time.Second
	DefaultReplayCap  = 30 * time.Second
)

// ReplayDelay is the wait after the n-th consecutive failed replay (1-based):
// 2, 4, 8, 16, 30, 30, … s.
func ReplayDelay(failures int) time.Duration {
	return RetryDelay(failures, DefaultReplayBase, DefaultReplayCap)
}

// ReplayOptions configure a Replayer. The zero value is usable.
type ReplayOptions struct {
	// Clock times the backoff (nil = wall clock).
	Clock clock.Clock
	// Logger receives journal_replayed and journal_replay_failed records
	// (nil = discard).
	Logger *slog.Logger
	// OnReplayed, when set, is called after each entry was enqueued and
	// removed from the journal, with Enqueue's result (false: the queue
	// already had it). The pipeline uses it to request a backfill of the
	// entry's session. It runs on the replaying goroutine and must not call
	// ReplayOnce.
	OnReplayed func(it Item, enqueued bool)
}

// Replayer moves journal entries into the queue. Enqueue is idempotent, so
// replaying an entry twice (a crash between Enqueue and Remove) is safe.
// Entries are replayed in journal order and a round stops at the first
// failure, which keeps the rest for the next round.
type Replayer struct {
	j          Journal
	q          Queue
	clk        clock.Clock
	log        *slog.Logger
	onReplayed func(Item, bool)
	kick       chan struct{}
	round      sync.Mutex // one replay round at a time
}

// NewReplayer returns a Replayer from j into q.
func NewReplayer(j Journal, q Queue, opts ReplayOptions) *Replayer {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Replayer{
		j:          j,
		q:          q,
		clk:        clock.OrReal(opts.Clock),
		log:        log,
		onReplayed: opts.OnReplayed,
		kick:       make(chan struct{}, 1),
	}
}

// Kick wakes Run to replay at once, even while it waits out a backoff; the
// backoff still grows if that replay fails. Call it after every journal
// append. It never blocks; kicks before Run starts are kept.
func (r *Replayer) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// ReplayOnce replays every pending entry once, in journal order, marking
// each event Source=journal, and removes each entry after its successful
// Enqueue. It stops at the first failure and returns how many entries were
// replayed before it. The pipeline calls it at start, before claiming.
func (r *Replayer) ReplayOnce(ctx context.Context) (replayed int, err error) {
	r.round.Lock()
	defer r.round.Unlock()
	items, err := r.j.Pending(ctx)
	if err != nil {
		return 0, fmt.Errorf("inbound: journal replay: %w", err)
	}
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return replayed, err
		}
		it.Event.Source = channel.SourceJournal
		enqueued, err := r.q.Enqueue(ctx, it)
		if err != nil {
			return replayed, fmt.Errorf("inbound: journal replay of %s: %w", it.ID, err)
		}
		if err := r.j.Remove(ctx, it.ID); err != nil {
			return replayed, fmt.Errorf("inbound: journal replay: remove %s: %w", it.ID, err)
		}
		replayed++
		if r.onReplayed != nil {
			r.onReplayed(it, enqueued)
		}
	}
	return replayed, nil
}

// Run replays at once, then whenever Kick is called. After a failed round
// it retries with ReplayDelay backoff (2 s doubling to 30 s), reset by the
// next successful round. Run returns nil when ctx ends.
func (r *Replayer) Run(ctx context.Context) error {
	failures := 0
	for {
		n, err := r.ReplayOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var timer clock.Timer
		var wait <-chan time.Time
		if err != nil {
			failures++
			d := ReplayDelay(failures)
			r.log.WarnContext(ctx, "journal_replay_failed",
				slog.Int("replayed", n), slog.Int("failures", failures),
				slog.Duration("retry_in", d), slog.Any("error", err))
			timer = r.clk.NewTimer(d)
			wait = timer.C()
		} else {
			if n > 0 {
				r.log.InfoContext(ctx, "journal_replayed", slog.Int("replayed", n), slog.Int("failures", failures))
			}
			failures = 0
		}
		select {
		case <-ctx.Done():
		case <-r.kick:
		case <-wait:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}
