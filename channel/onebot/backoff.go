package onebot

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// backoffDelay is the wait before retry number attempt (1-based): min
// doubling per attempt up to max, then scaled by 1+0.2*jitter, where jitter
// is in [-1, 1]. So the delays are 1 s, 2 s, 4 s, … 60 s, each ±20 %.
func backoffDelay(lo, hi time.Duration, attempt int, jitter float64) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	jitter = min(max(jitter, -1), 1)
	return time.Duration(float64(d) * (1 + 0.2*jitter))
}

// backoff returns the jittered delay before retry number attempt.
func (c *Channel) backoff(attempt int) time.Duration {
	return backoffDelay(c.cfg.BackoffMin, c.cfg.BackoffMax, attempt, rand.Float64()*2-1)
}

// pause waits d on the channel's clock and reports false when ctx ended
// first. The log line (msg with args and the delay) is written once the
// timer is armed, so a test that saw it can advance a fake clock.
func (c *Channel) pause(ctx context.Context, d time.Duration, level slog.Level, msg string, args ...any) bool {
	t := c.clk.NewTimer(d)
	defer t.Stop()
	c.log.Log(ctx, level, msg, append(args, "delay", d)...)
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// withTimeout returns a context that is cancelled with cause ErrTimeout
// after d on the channel's clock. The timer is armed before withTimeout
// returns.
func (c *Channel) withTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := c.clk.NewTimer(d)
	stop := make(chan struct{})
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel(ErrTimeout)
		case <-stop:
		case <-ctx.Done():
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			close(stop)
			cancel(context.Canceled)
		})
	}
}
