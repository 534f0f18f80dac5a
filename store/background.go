package store

import (
	"context"
	"sync"
)

// background is one of the store's maintenance goroutines (the search
// indexer, the timeline flusher): started by Open, stopped by Close.
type background struct {
	cancel   context.CancelFunc
	stopped  chan struct{}
	stopOnce sync.Once
}

// start runs loop on its own goroutine until stop; disabled only marks the
// goroutine as stopped (tests and benchmarks that do the work themselves).
func (b *background) start(disabled bool, loop func(ctx context.Context)) {
	b.stopped = make(chan struct{})
	if disabled {
		close(b.stopped)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() {
		defer close(b.stopped)
		loop(ctx)
	}()
}

// running reports whether the goroutine was started (and not disabled).
func (b *background) running() bool { return b.cancel != nil }

// stop cancels the goroutine's context and waits for it to return. Later
// calls, and calls before start (Open failed first), return at once.
func (b *background) stop() {
	b.stopOnce.Do(func() {
		if b.cancel != nil {
			b.cancel()
		}
	})
	if b.stopped != nil {
		<-b.stopped
	}
}
