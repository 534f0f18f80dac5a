package browser

import (
	"context"
	"time"

	"github.com/personakit/persona/clock"
)

// pool is a fixed number of slots plus a queue: acquire takes a slot,
// waiting at most wait (on the clock) for one to free up.
type pool struct {
	slots chan struct{}
	wait  time.Duration
	clock clock.Clock
}

func newPool(n int, wait time.Duration, c clock.Clock) *pool {
	return &pool{slots: make(chan struct{}, n), wait: wait, clock: c}
}

// acquire takes a slot and returns its release function. It fails with
// ErrBusy when none frees up within the queue wait, or with ctx's error.
func (p *pool) acquire(ctx context.Context) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	release = func() { <-p.slots }
	select {
	case p.slots <- struct{}{}:
		return release, nil
	default:
	}
	t := p.clock.NewTimer(p.wait)
	defer t.Stop()
	select {
	case p.slots <- struct{}{}:
		return release, nil
	case <-t.C():
		return nil, ErrBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// inUse reports how many slots are taken.
func (p *pool) inUse() int { return len(p.slots) }
