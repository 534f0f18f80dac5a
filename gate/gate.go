package gate

import (
	"context"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outcome"
)

// Turn is what a gate looks at: one claimed inbound message and the facts
// computed about it before the gates run.
type Turn struct {
	// Event is the claimed message.
	Event channel.Event
	// SessionKey is its session (channel.SessionKey).
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
	// Members is the channel's optional member-lookup capability (nil when
	// the channel has none). The member-level gate uses it, through a
	// cache, when the event does not carry the sender's level.
	Members channel.MemberLookup
}

// Verdict is a gate's decision. The zero Verdict passes.
//
// A stopping verdict may carry Reply: a fixed text (no model, no review)
// the pipeline sends to the chat before it records Code. Only the
// quiet-hours gate sets it (the configured quiet_reply, at most once per
// interval per chat; the gate has already used up the allowance when it
// returns Reply, so the pipeline sends it at most once and does not retry
// it as a reply).
//
// Err reports that a gate could not decide (a Flags or Quota read failed).
// Stop is false then, and Chain stops at that gate: the pipeline should
// retry the turn later rather than answer or drop it.
type Verdict struct {
	// Stop ends the message with Code and Reason.
	Stop   bool
	Code   outcome.Code
	Reason string
	// Gate names the gate that stopped (filled in by Chain).
	Gate string
	// Reply is an optional text to send with a stop (see above).
	Reply string
	// Err is set when the gate could not decide (see above).
	Err error
}

// Failed returns a verdict for a gate that could not decide because of err.
func Failed(err error) Verdict { return Verdict{Err: err} }

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
	// GateName is returned by Name.
	GateName string
	// F decides.
	F func(ctx context.Context, t *Turn) Verdict
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

// Check runs every gate in order and returns the first stopping (or
// failed, see [Verdict].Err) verdict, with Gate set to the gate's name
// unless the gate named itself (as a nested Chain does), or Pass.
func (c Chain) Check(ctx context.Context, t *Turn) Verdict {
	for _, g := range c {
		if v := g.Check(ctx, t); v.Stop || v.Err != nil {
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
	return New(NameProactiveSwitch, func(_ context.Context, t *Turn) Verdict {
		if t.Direct || enabled(t) {
			return Pass
		}
		return Stopped(IgnoredProactiveOff, "not addressed to the bot and proactive replies are off")
	})
}
