package outbound

import (
	"context"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// TypingController keeps a chat's typing indicator on: it shows it at once
// and again every keepalive until Stop or until the safety TTL passed. A
// stopped controller is sealed: it never restarts.
type TypingController struct {
	stop chan struct{}
	once sync.Once
	done chan struct{}
}

// StartTyping starts a typing controller for chat on the clock clk.
// Indicator errors are ignored (typing is cosmetic). Always call Stop.
func StartTyping(ctx context.Context, clk clock.Clock, t channel.Typer, chat channel.Chat, keepalive, ttl time.Duration) *TypingController {
	if keepalive <= 0 {
		keepalive = DefaultTypingKeepalive
	}
	if ttl <= 0 {
		ttl = DefaultTypingTTL
	}
	tc := &TypingController{stop: make(chan struct{}), done: make(chan struct{})}
	start := clk.Now()
	_ = t.Typing(ctx, chat)
	go func() {
		defer close(tc.done)
		for {
			tm := clk.NewTimer(keepalive)
			select {
			case <-tc.stop:
				tm.Stop()
				return
			case <-ctx.Done():
				tm.Stop()
				return
			case now := <-tm.C():
				if now.Sub(start) >= ttl {
					return
				}
				_ = t.Typing(ctx, chat)
			}
		}
	}()
	return tc
}

// Stop stops the indicator's keepalive and waits for it to end. It is safe
// to call more than once.
func (tc *TypingController) Stop() {
	tc.once.Do(func() { close(tc.stop) })
	<-tc.done
}
