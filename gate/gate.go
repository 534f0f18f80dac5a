package gate

import (
	"context"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outcome"
)

// Outcome codes decided by the gates of this package.
const (
	// IgnoredProactiveOff: an unprompted message while proactive replies are
	// off (both switches off, or no router).
	IgnoredProactiveOff outcome.Code = "ignored_proactive_off"
)

// Turn is what a gate looks at: one claimed inbound message and the facts
// computed about it before the gates run.
type Turn struct {
	Event      channel.Event
	SessionKey string
	// Direct is set when a direct trigger matched (private chat, mention,
	// quote of the bot, alias, ...); Trigger names it. Unprompted group
	// messages have Direct=false and Trigger "".
	Direct  bool
	Trigger string
	// Owner is set when the sender is one of the bot's owners.
	Owner bool
	// Now is the decision time (from the pipeline's clock).
	Now time.Time
}

// Verdict is a gate's decision. The zero Verdict passes.
type Verdict struct {
	// Stop ends the message with Code and Reason.
	Stop   bool
	Code   outcome.Code
	Reason string
	// Gate names the gate that stopped (filled in by Chain).
	Gate string
}

// Pass is the passing verdict.
var Pass = Verdict{}

// Stopped returns a stopping verdict.
func Stopped(code outcome.Code, reason string) Verdict {
	return Verdict{Stop: true, Code: code, Reason: reason}
}

// Gate is one deterministic check.
type Gate interface {
	// Name identifies the gate in records and logs.
	Name() string
	// Check decides for one turn. It must not call a model.
	Check(ctx context.Context, t *Turn) Verdict
}

// Func adapts a function to a Gate.
type Func struct {
	GateName string
	F        func(ctx context.Context, t *Turn) Verdict
}

// Name returns GateName.
func (f Func) Name() string { return f.GateName }

// Check calls F.
func (f Func) Check(ctx context.Context, t *Turn) Verdict { return f.F(ctx, t) }

// New returns a Gate named name that runs f.
func New(name string, f func(ctx context.Context, t *Turn) Verdict) Gate {
	return Func{GateName: name, F: f}
}

// Chain runs gates in order and stops at the first stop.
type Chain []Gate

// Check runs every gate in order and returns the first stopping verdict
// (with Gate set to the stopping gate's name unless the gate named itself,
// as a nested Chain does), or Pass.
func (c Chain) Check(ctx context.Context, t *Turn) Verdict {
	for _, g := range c {
		if v := g.Check(ctx, t); v.Stop {
			if v.Gate == "" {
				v.Gate = g.Name()
			}
			return v
		}
	}
	return Pass
}

// Name returns "chain".
func (c Chain) Name() string { return "chain" }

// Insert returns a new chain with g placed before the gate named before (at
// the end when no gate has that name).
func (c Chain) Insert(before string, g Gate) Chain {
	out := make(Chain, 0, len(c)+1)
	done := false
	for _, x := range c {
		if !done && x.Name() == before {
			out = append(out, g)
			done = true
		}
		out = append(out, x)
	}
	if !done {
		out = append(out, g)
	}
	return out
}

// Remove returns a new chain without the gate named name.
func (c Chain) Remove(name string) Chain {
	out := make(Chain, 0, len(c))
	for _, x := range c {
		if x.Name() != name {
			out = append(out, x)
		}
	}
	return out
}

// Replace returns a new chain with the gate named g.Name() replaced by g.
func (c Chain) Replace(g Gate) Chain {
	out := make(Chain, len(c))
	for i, x := range c {
		if x.Name() == g.Name() {
			out[i] = g
		} else {
			out[i] = x
		}
	}
	return out
}

// ProactiveSwitch stops unprompted messages when proactive replies are off
// (gate G10). enabled is consulted for every turn.
func ProactiveSwitch(enabled func(t *Turn) bool) Gate {
	return New("proactive_switch", func(_ context.Context, t *Turn) Verdict {
		if t.Direct || enabled(t) {
			return Pass
		}
		return Stopped(IgnoredProactiveOff, "not addressed to the bot and proactive replies are off")
	})
}
