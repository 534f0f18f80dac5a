package chantest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
)

// platform is the in-memory "platform side" of a chantest.Channel: Emit is
// Inject, Received is Sent. Like a polling cursor that did not advance, it
// redelivers NACKed events before the next one.
type platform struct {
	c       *chantest.Channel
	mu      sync.Mutex
	pending []channel.Event
}

func (p *platform) requeue(ev channel.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = append(p.pending, ev)
}

func (p *platform) Emit(ctx context.Context, in chantest.Inbound) (string, error) {
	p.mu.Lock()
	redeliver := p.pending
	p.pending = nil
	p.mu.Unlock()
	for _, ev := range redeliver {
		if err := p.c.Inject(ctx, ev); err != nil {
			p.requeue(ev)
		}
	}
	var opts []chantest.SayOption
	if in.MentionBot {
		opts = append(opts, chantest.MentionBot())
	}
	if in.QuoteID != "" {
		opts = append(opts, chantest.QuoteOf(in.QuoteID))
	}
	ev, err := p.c.Say(ctx, in.Chat, in.From, in.Text, opts...)
	if err != nil {
		p.requeue(ev)
	}
	return ev.MessageID, err
}

func (p *platform) Received(context.Context) ([]chantest.Delivered, error) {
	var out []chantest.Delivered
	for _, s := range p.c.Sent() {
		out = append(out, chantest.Delivered{
			Chat:      s.Out.Chat,
			Text:      s.Out.Text,
			ReplyTo:   s.Out.ReplyTo,
			Mentions:  s.Out.Mentions,
			MessageID: s.Receipt.MessageIDs[0],
		})
	}
	return out, nil
}

func (p *platform) SetOffline(ctx context.Context, offline bool) error {
	p.c.SetOnline(ctx, !offline)
	return nil
}

func (p *platform) RejectNextSend(context.Context) error {
	p.c.FailNext(1, &channel.RejectedError{Code: "403", Reason: "rejected by the test platform"})
	return nil
}

var allCaps = chantest.Capabilities{Redelivers: true, Offline: true, Reject: true, SendMentions: true}

type parallelHarness struct{ chantest.HarnessFunc }

func (parallelHarness) Parallel() bool { return true }

func TestConformance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    chantest.Harness
	}{
		{"RealClock", chantest.HarnessFunc(func(t *testing.T) chantest.Env {
			c := chantest.New(chantest.Config{})
			return chantest.Env{Channel: c, Platform: &platform{c: c}, BotID: c.BotID(), Caps: allCaps}
		})},
		{"FakeClockCustomIDs", parallelHarness{func(t *testing.T) chantest.Env {
			c := chantest.New(chantest.Config{
				Platform: "memory", BotID: "10001",
				Clock: clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
				Limit: channel.TextLimit{Unit: channel.UTF16, Max: 4096},
			})
			return chantest.Env{
				Channel: c, Platform: &platform{c: c}, BotID: "10001", Caps: allCaps,
				Group: channel.Chat{Kind: channel.Group, ID: "-100777"},
				User:  channel.Sender{ID: "555", Name: "Bob", Role: channel.RoleAdmin},
			}
		}}},
		{"ByteLimitNoCaps", parallelHarness{func(t *testing.T) chantest.Env {
			// 2000 bytes: the 1,000-rune text is only checked inbound.
			c := chantest.New(chantest.Config{Limit: channel.TextLimit{Unit: channel.Bytes, Max: 2000}})
			return chantest.Env{Channel: c, Platform: &platform{c: c}, BotID: c.BotID()}
		}}},
		{"Bare", parallelHarness{func(t *testing.T) chantest.Env {
			c := chantest.New(chantest.Config{})
			return chantest.Env{Channel: c.Bare(), Platform: &platform{c: c}, BotID: c.BotID(), Caps: allCaps}
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chantest.Conformance(t, tc.h)
		})
	}
}
