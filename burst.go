package persona

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// Same-person bursts: a newer direct message from someone whose
// reply is still being generated is classified against it; a supplement or
// correction makes the running turn regenerate with it, a repeat is
// answered by the running reply, anything else gets its own turn.
//
// The running direct turns are registered here, per (session, sender), when
// they start; the newer message is checked against them when it is claimed
// (up to 3 group / 2 private items of a session run at once, so it is
// claimed while the older reply generates). This registry replaces the
// enqueue-time registry of direct calls (who addressed the bot, when) that
// HandleEvent could keep, which would only
// have repeated what the claim-time check already knows.

// Burst defaults.
const (
	mergeWindow    = 2 * time.Minute
	mergeThreshold = 0.70
	mergeTimeout   = 20 * time.Second
	maxGenerations = 3
)

// Burst labels returned by the classifier.
const (
	labelRepeat      = "repeat"
	labelSupplement  = "supplement"
	labelCorrection  = "correction"
	labelIndependent = "independent"
)

// runningTurn is a direct turn whose reply is being generated.
type runningTurn struct {
	id      string
	started time.Time

	mu        sync.Mutex
	events    []channel.Event // the trigger, then absorbed messages
	sealed    bool            // no more merges (before the last generation)
	sending   bool            // the first chunk is going out: no interrupts
	stop      bool            // superseded by a newer turn (sealed case)
	interrupt context.CancelFunc
	merged    bool // a merge arrived since the generation started
}

// burstKey identifies one person in one session.
type burstKey struct{ session, sender string }

// bursts tracks running direct turns by (session, sender).
type bursts struct {
	mu      sync.Mutex
	running map[burstKey]*runningTurn
}

func newBursts() *bursts { return &bursts{running: map[burstKey]*runningTurn{}} }

func (b *bursts) begin(l inbound.Lease, now time.Time) *runningTurn {
	r := &runningTurn{id: l.ID, started: now, events: []channel.Event{l.Event}}
	b.mu.Lock()
	b.running[burstKey{l.SessionKey, l.Event.Sender.ID}] = r
	b.mu.Unlock()
	return r
}

func (b *bursts) end(l inbound.Lease, r *runningTurn) {
	b.mu.Lock()
	k := burstKey{l.SessionKey, l.Event.Sender.ID}
	if b.running[k] == r {
		delete(b.running, k)
	}
	b.mu.Unlock()
}

func (b *bursts) get(session, sender string) *runningTurn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running[burstKey{session, sender}]
}

// generation returns the context of one generation attempt; a merge
// cancels it. It seals the turn before its last attempt.
func (r *runningTurn) generation(ctx context.Context, n int) context.Context {
	gctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	r.interrupt, r.merged = cancel, false
	if n >= maxGenerations {
		r.sealed = true
	}
	r.mu.Unlock()
	return gctx
}

// takeMerge reports (and clears) whether a merge arrived during the
// current generation.
func (r *runningTurn) takeMerge() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.merged
	r.merged = false
	return m
}

func (r *runningTurn) snapshot() []channel.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]channel.Event(nil), r.events...)
}

// merge absorbs ev unless the turn is sealed or already sending.
func (r *runningTurn) merge(ev channel.Event) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sealed || r.sending || r.stop {
		return false
	}
	r.events = append(r.events, ev)
	r.merged = true
	if r.interrupt != nil {
		r.interrupt()
	}
	return true
}

// supersede asks a sealed turn that has not started sending to stop.
func (r *runningTurn) supersede() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sending || r.stop {
		return false
	}
	r.stop = true
	if r.interrupt != nil {
		r.interrupt()
	}
	return true
}

// sideEffect marks the turn as having done something outside (a say
// line): like sending, it ends merging and superseding. It reports false
// (and marks nothing) when the turn was superseded or a merge is waiting
// to restart its generation.
func (r *runningTurn) sideEffect() bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop || r.merged {
		return false
	}
	r.sending = true
	return true
}

// startSending marks the first chunk as going out; false when the turn was
// superseded.
func (r *runningTurn) startSending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop {
		return false
	}
	r.sending = true
	return true
}

func (r *runningTurn) stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop
}

// arrive handles a direct message whose sender has another reply being
// generated. done=true means the message was answered by that reply
// (merged or a repeat) and act completes it. companions are the messages of
// a superseded sealed turn, which this turn answers too.
func (p *Pipeline) arrive(ctx context.Context, l inbound.Lease) (act action, done bool, companions []channel.Event) {
	prev := p.bursts.get(l.SessionKey, l.Event.Sender.ID)
	if prev == nil || prev.id == l.ID || p.clk.Now().Sub(prev.started) > mergeWindow {
		return action{}, false, nil
	}
	prev.mu.Lock()
	eligible := !prev.sending && !prev.stop
	prev.mu.Unlock()
	if !eligible {
		return action{}, false, nil
	}
	earlier := prev.snapshot()
	label, conf, usage, err := p.classify(ctx, earlier, l.Event)
	rec := inbound.Outcome{Tokens: []inbound.Tokens{tokens(agent.PurposeClassify, usage.model, usage.Usage)}}
	if err != nil {
		p.log.Warn("burst classifier failed; treating the message as independent", "id", l.ID, "err", err)
		return action{}, false, nil
	}
	if conf < mergeThreshold {
		return action{}, false, nil
	}
	switch label {
	case labelRepeat:
		rec.Code, rec.MergedInto = outcome.SupersededRepeat, prev.id
		rec.Reason = fmt.Sprintf("a repeat (confidence %.2f) of a message whose reply is being generated", conf)
		return action{kind: actComplete, outcome: rec}, true, nil
	case labelSupplement, labelCorrection:
		if prev.merge(l.Event) {
			rec.Code, rec.MergedInto = outcome.MergedIntoReply, prev.id
			rec.Reason = fmt.Sprintf("a %s (confidence %.2f) folded into the reply being generated", label, conf)
			return action{kind: actComplete, outcome: rec}, true, nil
		}
		if prev.supersede() {
			return action{}, false, earlier
		}
	}
	return action{}, false, nil
}

// classify asks the model how a newer message relates to the earlier ones.
func (p *Pipeline) classify(ctx context.Context, earlier []channel.Event, next channel.Event) (string, float64, usageInfo, error) {
	if p.model == nil {
		return labelIndependent, 0, usageInfo{}, nil
	}
	var b strings.Builder
	b.WriteString("Earlier message(s), whose reply is being written:\n")
	for _, e := range earlier {
		b.WriteString("- " + e.TextAndSpeech() + "\n")
	}
	b.WriteString("\nNewer message from the same person:\n- " + next.TextAndSpeech() + "\n")
	req := agent.Request{Purpose: agent.PurposeClassify, JSON: true, Messages: []agent.Message{
		{Role: agent.RoleSystem, Content: "Someone sent a chat message and, before the reply was ready, another one. " +
			"Classify the newer message: repeat (says the same again), supplement (adds to the earlier one), " +
			"correction (changes or fixes the earlier one) or independent (a new, separate topic). " +
			`Answer with one JSON object: {"label":"repeat|supplement|correction|independent","confidence":0..1}.`},
		{Role: agent.RoleUser, Content: b.String()},
	}}
	cctx, cancel := context.WithTimeout(ctx, mergeTimeout)
	defer cancel()
	p.countModelCall(ctx, &next)
	resp, err := p.model.Generate(cctx, req)
	if err != nil {
		return "", 0, usageInfo{}, err
	}
	u := usageInfo{Usage: resp.Usage, model: resp.Model}
	var out struct {
		Label      string  `json:"label"`
		Confidence float64 `json:"confidence"`
	}
	text := strings.TrimSpace(resp.Text)
	text = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(text, "```json"), "```"), "```")
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &out); err != nil {
		return "", 0, u, fmt.Errorf("unparsable classifier answer: %w", err)
	}
	switch out.Label {
	case labelRepeat, labelSupplement, labelCorrection, labelIndependent:
	default:
		return "", 0, u, fmt.Errorf("unknown classifier label %q", out.Label)
	}
	return out.Label, out.Confidence, u, nil
}
