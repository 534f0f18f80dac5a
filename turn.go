package persona

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/route"
)

// ErrorLine is sent for a direct turn whose generation failed definitively.
// It has no trailing full stop because the splitter removes one anyway.
const ErrorLine = "Sorry, something went wrong on my side and I can't answer that right now"

// action is what a turn asks the queue to do with its lease.
type action struct {
	kind    actionKind
	outcome inbound.Outcome
	at      time.Time
	err     error
}

type actionKind int

const (
	actComplete actionKind = iota
	actRetry
	actSnooze
	actRelease
	// actAbandon: the lease was lost; nothing more is written.
	actAbandon
)

func complete(code outcome.Code, reason string) action {
	return action{kind: actComplete, outcome: inbound.Outcome{Code: code, Reason: reason}}
}

// runTurn processes one lease: it keeps the lease alive, runs the turn and
// hands the result to the queue on a detached context.
//
// The bookkeeping write (complete, retry, release) runs on its own
// goroutine (tracked by wg), so the worker is free for the next turn while
// the write waits for its group commit; at most 4 × Workers such writes
// wait at once, beyond that the worker waits too. The lease stays held
// until the write lands, so the session's in-flight count and the crash
// semantics are those of a turn still running.
func (p *Pipeline) runTurn(parent context.Context, l inbound.Lease, wg *sync.WaitGroup) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	// The heartbeat starts once the turn does something that can take time
	// (a model call, a send): most turns end in the gates within
	// microseconds, far inside the lease, and need no goroutine or timer.
	var hbOnce sync.Once
	hbDone := make(chan struct{})
	heartbeat := func() {
		hbOnce.Do(func() {
			go func() {
				defer close(hbDone)
				p.heartbeat(ctx, &l, cancel)
			}()
		})
	}
	act := p.guardedTurn(ctx, l, heartbeat)
	lost := act.kind == actAbandon || errors.Is(context.Cause(ctx), inbound.ErrLeaseLost)
	cancel(nil)
	hbOnce.Do(func() { close(hbDone) }) // never started
	<-hbDone
	if lost {
		p.log.Warn("lease lost; turn abandoned", "id", l.ID)
		return
	}
	if parent.Err() != nil && act.kind != actComplete {
		act = action{kind: actRelease}
	}
	p.finishing <- struct{}{}
	wg.Go(func() {
		defer func() { <-p.finishing }()
		p.finish(parent, l, act)
		// The session's slot is free (or the item is due again): more may
		// be claimable.
		p.Wake()
	})
}

// guardedTurn runs the turn so that no stage can take the process down
// or loop forever: a claim past MaxAttempts (its earlier attempts all died
// with the process) ends the message without running any stage; a panic
// in any stage, the embedder's included, becomes a charged retry with the
// panic and its stack logged; and the result is checked before it is
// recorded (validate).
func (p *Pipeline) guardedTurn(ctx context.Context, l inbound.Lease, heartbeat func()) (act action) {
	if l.Attempts > p.opt.MaxAttempts {
		return p.exhausted(ctx, l)
	}
	defer func() {
		if r := recover(); r != nil {
			stack := debug.Stack()
			p.log.Error("turn panicked", "id", l.ID, "attempt", l.Attempts, "panic", fmt.Sprint(r), "stack", string(stack))
			act = action{kind: actRetry, err: fmt.Errorf("%w: %v", ErrPanic, r)}
		}
	}()
	return p.validate(p.turn(ctx, l, heartbeat))
}

// ErrPanic is wrapped by the error recorded for an attempt that panicked.
var ErrPanic = errors.New("persona: a stage panicked")

// exhausted ends an item claimed more often than MaxAttempts allows: the
// attempts before this claim ended without a result (the process died
// during each, or their retries were never recorded), so it is dropped
// before any stage runs again.
func (p *Pipeline) exhausted(ctx context.Context, l inbound.Lease) action {
	reason := fmt.Sprintf("claimed for attempt %d of at most %d: the earlier attempts ended without a result, so the process most likely crashed or was killed while handling this message",
		l.Attempts, p.opt.MaxAttempts)
	if rec, err := p.opt.Queue.Lookup(ctx, l.ID); err == nil && rec.LastError != "" {
		reason += "; last error: " + rec.LastError
	}
	p.log.Error("message dropped after repeated crashes", "id", l.ID, "attempts", l.Attempts)
	return complete(inbound.DroppedRetriesExhausted, reason)
}

// validate checks a turn's result at the stage boundary: a completion must
// carry a valid outcome code (outcome.Code.Valid). One that does not —
// a zero route.Decision, outbound.Verdict or gate verdict, or a code an
// embedder's stage made up badly — ends the message as
// dropped_invalid_result, with the reason naming the bad code, instead of
// being handed to the queue, which would refuse it and leave the item to
// run again and again.
func (p *Pipeline) validate(act action) action {
	if act.kind != actComplete || act.outcome.Code.Valid() {
		return act
	}
	p.log.Error("a stage returned an invalid outcome code", "code", string(act.outcome.Code), "reason", act.outcome.Reason)
	act.outcome.Reason = fmt.Sprintf("a stage returned the invalid outcome code %q (reason %q)", string(act.outcome.Code), act.outcome.Reason)
	act.outcome.Code = outcome.DroppedInvalidResult
	return act
}

// heartbeat extends the lease every RenewEvery; a lost lease cancels the
// turn at once.
func (p *Pipeline) heartbeat(ctx context.Context, l *inbound.Lease, cancel context.CancelCauseFunc) {
	for clock.Sleep(p.clk, ctx.Done(), p.opt.RenewEvery) {
		err := p.opt.Queue.Extend(ctx, l, p.opt.Lease)
		switch {
		case errors.Is(err, inbound.ErrLeaseLost):
			cancel(inbound.ErrLeaseLost)
			return
		case err != nil && ctx.Err() == nil:
			p.log.Warn("lease renewal failed", "id", l.ID, "err", err)
		}
	}
}

// finish applies the turn's action to the queue. Bookkeeping runs detached
// from cancellation with a short timeout.
func (p *Pipeline) finish(ctx context.Context, l inbound.Lease, act action) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultBookkeeping)
	defer cancel()
	var err error
	switch act.kind {
	case actComplete:
		err = p.opt.Queue.Complete(bctx, l, act.outcome)
		if err == nil {
			p.notify(l.ID, act.outcome)
		}
	case actRetry:
		if l.Attempts >= p.opt.MaxAttempts {
			o := inbound.Outcome{Code: inbound.DroppedRetriesExhausted,
				Reason: fmt.Sprintf("failed %d attempts; last error: %v", l.Attempts, act.err)}
			if err = p.opt.Queue.Complete(bctx, l, o); err == nil {
				p.notify(l.ID, o)
			}
			break
		}
		at := p.clk.Now().Add(inbound.RetryDelay(l.Attempts, p.opt.RetryBase, p.opt.RetryCap))
		err = p.opt.Queue.Retry(bctx, l, at, act.err)
	case actSnooze:
		err = p.opt.Queue.Snooze(bctx, l, act.at, act.err.Error())
	case actRelease:
		err = p.opt.Queue.Release(bctx, l)
	}
	if err != nil {
		p.log.Error("queue bookkeeping failed", "id", l.ID, "err", err)
	}
}

// storeHeld stores a claim the queue holds in memory (inbound.Lease.Held)
// by extending the lease (freshen does, right before a turn runs, so that
// an attempt that crashes the process is counted). ok is false when it
// failed; act then says why (actAbandon: the lease is lost).
func (p *Pipeline) storeHeld(ctx context.Context, l *inbound.Lease) (act action, ok bool) {
	if !l.Held {
		return action{}, true
	}
	if err := p.opt.Queue.Extend(ctx, l, p.opt.Lease); err != nil {
		if errors.Is(err, inbound.ErrLeaseLost) {
			return action{kind: actAbandon}, false
		}
		return action{kind: actRetry, err: fmt.Errorf("extend lease: %w", err)}, false
	}
	l.Held = false
	return action{}, true
}

// turn runs the stages for one claimed item and returns what to do with it.
// It calls heartbeat (once is enough) before anything that can take time:
// resuming a delivery, or going on past the gates.
func (p *Pipeline) turn(ctx context.Context, l inbound.Lease, heartbeat func()) action {
	var tr turnTrail
	act := p.stages(ctx, l, heartbeat, &tr)
	if act.kind == actComplete {
		if tr.note != "" {
			// Something the turn could not do but went on without (a voice
			// clip not transcribed) is told in the record.
			act.outcome.Reason = strings.TrimPrefix(act.outcome.Reason+"; "+tr.note, "; ")
			tr.Notes = append(tr.Notes, tr.note)
		}
		if act.outcome.Trail == nil && !tr.empty() {
			act.outcome.Trail = &tr.Trail
		}
	}
	return act
}

// turnTrail is what a turn learns about its own decisions as it goes: the
// record's trail, and a note the record's reason should add.
type turnTrail struct {
	inbound.Trail
	note string
}

func (t *turnTrail) empty() bool {
	return t.Trigger == "" && len(t.Gates) == 0 && t.StoppedBy == "" && t.Command == "" &&
		t.Schedule == "" && t.Router == nil && len(t.Review) == 0 && len(t.Notes) == 0
}

// review adds one review verdict to the trail.
func (t *turnTrail) review(gen int, v outbound.Verdict, err error) {
	if err != nil {
		return
	}
	t.Review = append(t.Review, inbound.ReviewStep{Generation: gen, Send: v.Send, Code: v.Code, Reason: v.Reason,
		Rewritten: v.Rewritten, Regenerate: v.Regenerate})
}

// passedGates lists the names of the gates of the chain before the one
// named stopped (all of them when stopped is "").
func passedGates(c gate.Chain, stopped string) []string {
	out := make([]string, 0, len(c))
	for _, g := range c {
		if stopped != "" && g.Name() == stopped {
			break
		}
		out = append(out, g.Name())
	}
	return out
}

// stages runs the stages of turn; tr collects the trail and what the
// record's reason should add.
func (p *Pipeline) stages(ctx context.Context, l inbound.Lease, heartbeat func(), tr *turnTrail) action {
	ev := l.Event
	if l.HistoryOnly {
		return complete(inbound.BackfillHistoryOnly, "backfilled message kept as history only")
	}
	if ev.Time.Before(p.replayCutoff(&ev)) {
		return complete(inbound.IgnoredStale, "older than the replay cutoff")
	}
	// A turn that already saved a draft resumes sending it, without
	// regenerating. Only an item claimed before can have one.
	if l.Claims > 1 {
		if d, ok, err := p.opt.Ledger.LoadDraft(ctx, l.ID); err != nil {
			return action{kind: actRetry, err: fmt.Errorf("load draft: %w", err)}
		} else if ok {
			heartbeat()
			return p.deliver(ctx, l, outbound.Verdict{Send: true, Code: d.Code, Reason: d.Reason}, inbound.Outcome{}, nil)
		}
	}

	// A notice or a schedule the bot acts on: a friend request is
	// answered here; a poke, a new member or a schedule makes a message
	// the rest of the turn answers (a synthetic turn).
	var syn *synthetic
	if ev.Kind == channel.KindNotice && ev.Notice != nil {
		act, s := p.noticeTurn(ctx, l, tr)
		if s == nil {
			return act
		}
		syn = s
		l.Event = syn.asMessage(l.Event)
	}

	// Media-turn assembly, then speech to text: both before the gates,
	// which see the message as it will be answered.
	act, done, owners := p.assemble(ctx, &l)
	if done {
		return act
	}
	if p.media != nil && syn == nil && hasMedia(&l.Event) {
		// The turn writes what it learns (transcripts, descriptions) into
		// its own copy of the event.
		l.Event = l.Event.Clone()
		heartbeat()
		if act, retry, why := p.transcribe(ctx, &l, owners); retry {
			return act
		} else if why != "" {
			tr.note = why
		}
	}
	ev = l.Event
	st := p.channelFor(ev.Platform, ev.BotID)
	trigger := route.Classify(&ev, p.identity, p.opt.Triggers)
	if syn != nil {
		trigger = syn.trigger
	} else if trigger == route.TriggerOwnerCommand {
		// The owner's commands come before the gates: /resume must work
		// while the chat is paused.
		tr.Trigger = trigger
		heartbeat()
		if act, handled := p.command(ctx, l, true, tr); handled {
			return act
		}
	}
	t := &gate.Turn{Event: ev, SessionKey: l.SessionKey, Direct: trigger != "", Trigger: trigger,
		Owner: p.identity.IsOwner(&ev), Now: p.clk.Now()}
	if st != nil {
		t.Members, _ = channel.As[channel.MemberLookup](st.ch)
	}
	tr.Trigger = trigger
	v := p.gates.Check(ctx, t)
	if v.Err == nil {
		tr.Gates, tr.StoppedBy = passedGates(p.gates, v.Gate), v.Gate
	}
	if v.Err != nil {
		return action{kind: actRetry, err: fmt.Errorf("gate %s: %w", v.Gate, v.Err)}
	}
	if v.Stop && !v.Code.Valid() {
		return complete(outcome.DroppedInvalidResult, fmt.Sprintf("gate %q stopped the message without a valid outcome code (%q)", v.Gate, string(v.Code)))
	}
	if v.Stop {
		reason := fmt.Sprintf("%s (gate %s)", v.Reason, v.Gate)
		if v.Reply != "" && syn == nil {
			// Quiet hours: the notice goes out without a model call and the
			// message records the gate's code.
			heartbeat()
			return p.deliver(ctx, l, outbound.Verdict{Send: true, Text: v.Reply, Code: v.Code, Reason: reason}, inbound.Outcome{}, nil)
		}
		return complete(v.Code, reason)
	}
	rec := inbound.Outcome{Timings: inbound.Timings{GatesDone: p.clk.Now()}}
	heartbeat()
	if trigger == route.TriggerPluginCommand && syn == nil {
		if act, handled := p.command(ctx, l, t.Owner, tr); handled {
			return act
		}
	}
	if syn != nil {
		ok, why, err := p.claimCooldown(ctx, l, syn)
		if err != nil {
			return action{kind: actRetry, err: err}
		}
		if !ok {
			return complete(syn.quiet, "not answered: "+why)
		}
	}
	// Every model call from here on is made for this session: its Scope
	// rides in the context to the boundary (and to the exit, which makes
	// mentions of the ids the model names).
	se, err := p.scopes.forTurn(ctx, l.SessionKey)
	if err != nil {
		return action{kind: actRetry, err: err}
	}
	sc := se.sc
	sc.Learn(&ev)
	ctx = agent.WithScope(ctx, sc)
	// Pictures are fetched once the gates let the message through, and
	// described (by the vision model, once per picture) meanwhile.
	img := p.prepareImages(ctx, &l, owners)
	if !t.Direct || img.needsText(p.attach) {
		// The router, a chat model without vision, and stickers (never
		// attached) read the descriptions.
		img.wait(ctx, &l.Event)
		ev = l.Event
	}
	var (
		run        *runningTurn
		companions []channel.Event
	)
	if t.Direct && syn == nil {
		act, done, comp := p.arrive(ctx, l)
		if done {
			return act
		}
		companions = comp
		run = p.bursts.begin(l, p.clk.Now())
		defer p.bursts.end(l, run)
	}
	var hist []memory.Entry
	chatIn := false
	if !t.Direct {
		if p.router == nil {
			return complete(gate.IgnoredProactiveOff, "not addressed to the bot and no router is configured")
		}
		// The router may see more than the review's transcript: its window
		// moves by epochs so that its requests share a prefix.
		n := p.opt.HistoryLimit
		if rl, ok := p.router.(interface{ RecentLimit() int }); ok {
			n = max(n, rl.RecentLimit())
		}
		all, err := p.recentN(ctx, l, n)
		if err != nil {
			return action{kind: actRetry, err: err}
		}
		p.scopes.teach(se, all, n)
		hist = all[max(0, len(all)-p.opt.HistoryLimit):]
		in := route.Input{Event: ev, SessionKey: l.SessionKey, Owner: t.Owner}
		for i := range all {
			in.Recent = append(in.Recent, all[i].Event)
		}
		dec, err := p.router.Route(ctx, in)
		if err == nil {
			tr.Router = &inbound.RouterTrail{Directed: dec.Directed, ChatIn: dec.ChatIn, ChatInPass: dec.ChatInPass,
				Reply: dec.Reply, Code: dec.Code, Reason: dec.Reason}
		}
		for range dec.Calls {
			p.countModelCall(ctx, &ev)
		}
		if dec.Calls > 0 {
			rec.Tokens = append(rec.Tokens, tokens(agent.PurposeRouter, dec.Model, dec.Usage))
		}
		if err != nil {
			if ctx.Err() != nil {
				return action{kind: actRelease}
			}
			return complete(route.IgnoredRouterFailed, "router failed: "+err.Error())
		}
		if !dec.Reply {
			if !dec.Code.Valid() {
				rec.Code = outcome.DroppedInvalidResult
				rec.Reason = fmt.Sprintf("the router decided not to reply without a valid outcome code (%q, reason %q)", string(dec.Code), dec.Reason)
				return action{kind: actComplete, outcome: rec}
			}
			rec.Code, rec.Reason = dec.Code, dec.Reason
			return action{kind: actComplete, outcome: rec}
		}
		rec.Reason, chatIn = dec.Reason, dec.ChatInPass
	}

	if p.sources != nil && syn == nil {
		p.readLinks(ctx, l, tr)
	}

	// Generation and sending share the global reply slots.
	select {
	case p.replySem <- struct{}{}:
	case <-ctx.Done():
		return action{kind: actRelease}
	}
	defer func() { <-p.replySem }()
	// People see the bot typing while it thinks, not only while it sends:
	// a direct turn shows the indicator from here (generation starts) until
	// the turn ends, however it ends.
	if t.Direct && st != nil {
		if ty, ok := channel.As[channel.Typer](st.ch); ok {
			tc := outbound.StartTyping(ctx, p.clk, ty, ev.Chat, outbound.DefaultTypingKeepalive, outbound.DefaultTypingTTL)
			defer tc.Stop()
		}
	}

	// A direct turn reads the history once, for the review and for the
	// first generation's prompt.
	var raw []memory.Entry
	lastBot := newestBotMessage(hist)
	if hist == nil {
		var err error
		if raw, err = memory.RecentOf(ctx, p.opt.History, l.SessionKey, p.historyRead()); err != nil {
			return action{kind: actRetry, err: fmt.Errorf("read history: %w", err)}
		}
		p.scopes.teach(se, raw, p.historyRead())
		// Replies to messages newer than this one count too: the review's
		// closing check dates the bot's last message by them (instead of a
		// state row written after every reply: every sent chunk is in the
		// transcript, see afterSend).
		lastBot = newestBotMessage(raw)
		hist = p.recentOf(raw, l)
	}
	// Each generation's model call is counted while the turn goes on (the
	// count depends on nothing the turn does): the count's write overlaps
	// the generation and the delivery instead of holding a reply slot on
	// its own. The turn ends, and its outcome is recorded, only once every
	// count is stored.
	var counted sync.WaitGroup
	defer counted.Wait()
	var v2 outbound.Verdict
	for gen := 1; ; gen++ {
		gctx, extra := ctx, companions
		if run != nil {
			gctx = run.generation(ctx, gen)
			extra = append(slices.Clone(companions), run.snapshot()[1:]...)
		}
		counted.Go(func() { p.countModelCall(ctx, &ev) })
		// A regeneration reads the history again: replies may have gone
		// out meanwhile.
		text, usage, said, err := p.generate(gctx, l, t, extra, &rec, raw, run, img)
		raw = nil
		if run != nil && ctx.Err() == nil {
			if run.stopped() {
				return complete(outcome.SupersededFollowUp, "a newer message from the same person superseded this reply; the newer turn answers both")
			}
			if run.takeMerge() && gen < maxGenerations {
				continue // regenerate with the absorbed message
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return action{kind: actRelease}
			}
			if agent.Transient(err) {
				return action{kind: actRetry, err: err}
			}
			if !t.Direct {
				return complete(outcome.IgnoredGenerationFailed, "generation failed: "+err.Error())
			}
			return p.deliver(ctx, l, outbound.Verdict{Send: true, Text: ErrorLine, Code: outcome.RepliedError,
				Reason: "generation failed: " + err.Error()}, rec, run)
		}
		rec.Tokens = append(rec.Tokens, tokens(agent.PurposeChat, usage.model, usage.Usage))
		prop := p.proposal(l, t, st, text, hist)
		prop.Said, prop.LastBotMessage = said, lastBot
		prop.HasImages, prop.FromDescriptions = img.attached(), img != nil && img.fromDescriptions
		v2, err = p.reviewer.Review(ctx, prop)
		tr.review(gen, v2, err)
		if err == nil && v2.Regenerate {
			if img.attached() && !img.fromDescriptions {
				// The model could not see the pictures: once more, from
				// their descriptions.
				img.fromDescriptions = true
				img.wait(ctx, &l.Event)
				p.log.Info("model could not see the images; regenerating from descriptions", "id", l.ID)
				continue
			}
			// Nothing to regenerate from: review the same draft as if
			// it came from descriptions, so the review does not ask again.
			prop.FromDescriptions = true
			v2, err = p.reviewer.Review(ctx, prop)
			tr.review(gen, v2, err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return action{kind: actRelease}
			}
			return action{kind: actRetry, err: fmt.Errorf("review: %w", err)}
		}
		for _, u := range v2.Usage {
			rec.Tokens = append(rec.Tokens, tokens(u.Purpose, u.Model, u.Usage))
		}
		if run != nil && run.takeMerge() && gen < maxGenerations {
			continue // a message arrived during the review: regenerate
		}
		break
	}
	if !v2.Code.Valid() {
		rec.Code, rec.Stage = outcome.DroppedInvalidResult, inbound.StageGenerated
		rec.Reason = fmt.Sprintf("the reviewer returned a verdict without a valid outcome code (%q, send %t, reason %q)", string(v2.Code), v2.Send, v2.Reason)
		return action{kind: actComplete, outcome: rec}
	}
	if !v2.Send {
		rec.Code, rec.Reason, rec.Stage = v2.Code, v2.Reason, inbound.StageGenerated
		return action{kind: actComplete, outcome: rec}
	}
	if syn != nil {
		v2.Code = syn.code
	}
	act = p.deliver(ctx, l, v2, rec, run)
	if act.kind == actComplete && act.outcome.Code.Replied() && syn == nil {
		p.afterReply(ctx, l)
	}
	if chatIn && act.kind == actComplete && act.outcome.Code.Replied() {
		if cr, ok := p.router.(interface {
			ChatReplySent(context.Context, string, *channel.Event, time.Time) error
		}); ok {
			if err := cr.ChatReplySent(context.WithoutCancel(ctx), l.SessionKey, &ev, p.clk.Now()); err != nil {
				p.log.Warn("start chat cooldown", "session", l.SessionKey, "err", err)
			}
		}
	}
	return act
}

// countModelCall records one model call against the quotas.
func (p *Pipeline) countModelCall(ctx context.Context, ev *channel.Event) {
	if err := p.rules.RecordModelCall(ctx, ev, p.clk.Now()); err != nil {
		p.log.Warn("record model call", "err", err)
	}
}

func tokens(purpose, model string, u agent.Usage) inbound.Tokens {
	return inbound.Tokens{Purpose: purpose, Model: model, Input: u.InputTokens, CachedInput: u.CachedInputTokens, Output: u.OutputTokens}
}

// proposal collects what the reviewer needs about the turn.
func (p *Pipeline) proposal(l inbound.Lease, t *gate.Turn, st *chanState, text string, hist []memory.Entry) outbound.Proposal {
	ev := l.Event
	prop := outbound.Proposal{TurnID: l.ID, SessionKey: l.SessionKey, Event: ev, Text: text,
		Direct: t.Direct, Owner: t.Owner, HasImages: ev.Has(channel.SegImage), PeerIsBot: ev.Sender.IsBot,
		MentionsBot: t.Trigger == route.TriggerMention || t.Trigger == route.TriggerQuote || t.Trigger == route.TriggerAlias}
	if st != nil {
		if ar, ok := channel.As[channel.AccountRisk](st.ch); ok {
			prop.AccountRisk = ar.AccountRisk()
		}
	}
	prop.Transcript = make([]outbound.Line, 0, len(hist))
	for _, e := range hist {
		fromBot := e.Direction == memory.Out
		prop.Transcript = append(prop.Transcript, outbound.Line{Speaker: speaker(&e.Event), Text: e.Event.TextAndSpeech(), FromBot: fromBot})
		if fromBot {
			prop.Recent = append(prop.Recent, outbound.BotReply{Text: e.Event.Text(), At: e.Event.Time})
		}
	}
	return prop
}

// newestBotMessage returns the time of the newest of the bot's own
// messages in hist (zero when there is none).
func newestBotMessage(hist []memory.Entry) time.Time {
	var last time.Time
	for i := range hist {
		if hist[i].Direction == memory.Out && hist[i].Event.Time.After(last) {
			last = hist[i].Event.Time
		}
	}
	return last
}

type usageInfo struct {
	agent.Usage
	model string
}

// recentN returns the turn's n most recent history entries said before
// the current message, oldest first.
func (p *Pipeline) recentN(ctx context.Context, l inbound.Lease, n int) ([]memory.Entry, error) {
	hist, err := p.opt.History.Recent(ctx, l.SessionKey, n+1)
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	out := p.before(hist[max(0, len(hist)-(n+1)):], l)
	return out[max(0, len(out)-n):], nil
}

// recentOf returns the turn's recent history (at most HistoryLimit entries)
// from the session's newest entries, oldest first: those of the newest
// HistoryLimit+1 that were said before the current message (messages that
// arrived later are not context for this turn). Like raw, which it may
// share (see before), it is read-only.
func (p *Pipeline) recentOf(raw []memory.Entry, l inbound.Lease) []memory.Entry {
	out := p.before(raw[max(0, len(raw)-(p.opt.HistoryLimit+1)):], l)
	if len(out) > p.opt.HistoryLimit {
		out = out[len(out)-p.opt.HistoryLimit:]
	}
	return out
}

func speaker(ev *channel.Event) string {
	if ev.Sender.Name != "" {
		return ev.Sender.Name
	}
	return "someone"
}

// deliver sends a reviewed reply and turns the result into an action.
func (p *Pipeline) deliver(ctx context.Context, l inbound.Lease, v outbound.Verdict, rec inbound.Outcome, run *runningTurn) action {
	return p.deliverGuarded(ctx, l, v, rec, run, true)
}

// deliverGuarded is deliver; guarded=false skips the check for a pause
// that started meanwhile (the owner's own /pause is confirmed).
func (p *Pipeline) deliverGuarded(ctx context.Context, l inbound.Lease, v outbound.Verdict, rec inbound.Outcome, run *runningTurn, guarded bool) action {
	ev := l.Event
	st := p.channelFor(ev.Platform, ev.BotID)
	if st == nil {
		return action{kind: actRetry, err: fmt.Errorf("no channel for platform %q bot %q", ev.Platform, ev.BotID)}
	}
	if !st.coord.Ready() {
		return action{kind: actSnooze, at: p.clk.Now().Add(p.opt.OfflineRetry), err: channel.ErrOffline}
	}
	r := outbound.Reply{TurnID: l.ID, SessionKey: l.SessionKey, Channel: p.exit.Bind(st.ch, l.ID, l.SessionKey, l.Claims == 1), Chat: ev.Chat,
		Text: v.Text, Code: v.Code, Reason: v.Reason, FirstAttempt: l.Claims == 1,
		CurrentMessageID: ev.MessageID, // the turn keeps the typing indicator on itself
	}
	if guarded {
		r.Guard = p.sendGuard(l, run)
	}
	if ev.Chat.Kind == channel.Group {
		r.ReplyTo = ev.MessageID
	}
	d, err := p.sender.Send(ctx, r)
	if err == nil {
		reason := d.Reason
		if rec.Reason != "" && d.Code.Replied() {
			reason = rec.Reason // the router's decisive reason
		}
		if d.Stopped && !d.Code.Valid() {
			rec.Code, rec.Stage = outcome.DroppedInvalidResult, inbound.StageGenerated
			rec.Reason = fmt.Sprintf("the sender stopped the reply without a valid outcome code (%q, reason %q)", string(d.Code), d.Reason)
			if len(d.MessageIDs) > 0 {
				rec.Stage, rec.OutboundIDs = inbound.StageAcknowledged, d.MessageIDs
			}
			return action{kind: actComplete, outcome: rec}
		}
		if !d.Code.Valid() {
			d.Code, d.Reason = v.Code, v.Reason // the verdict's, which was checked
		}
		if d.Stopped || (d.FirstSend.IsZero() && len(d.MessageIDs) == 0 && d.Chunks == 0) {
			rec.Code, rec.Reason, rec.Stage = d.Code, d.Reason, inbound.StageGenerated
			if rec.Code == "" {
				rec.Code, rec.Reason = v.Code, v.Reason
			}
			if len(d.MessageIDs) > 0 {
				rec.Stage, rec.OutboundIDs = inbound.StageAcknowledged, d.MessageIDs
			}
			return action{kind: actComplete, outcome: rec}
		}
		rec.Code, rec.Reason = d.Code, reason
		if d.Unknown > 0 {
			rec.Reason += fmt.Sprintf("; %d chunk(s) an earlier attempt was sending could not be confirmed in the chat and were not sent again (delivery_unknown)", d.Unknown)
		}
		rec.Stage = inbound.StageAcknowledged
		rec.OutboundIDs = d.MessageIDs
		rec.Timings.FirstSend, rec.Timings.FirstAck = d.FirstSend, d.FirstAck
		return action{kind: actComplete, outcome: rec}
	}
	if ctx.Err() != nil {
		return action{kind: actRelease}
	}
	if errors.Is(err, outbound.ErrDeliveryUnknown) {
		// A sender of the embedder's met a chunk whose fate an earlier
		// attempt left unknown: retrying cannot settle it.
		rec.Code, rec.Stage = v.Code, inbound.StageAcknowledged
		rec.Reason = v.Reason + "; a chunk an earlier attempt was sending could not be confirmed in the chat and was not sent again (delivery_unknown)"
		return action{kind: actComplete, outcome: rec}
	}
	var se *outbound.SendError
	if errors.As(err, &se) {
		rec.OutboundIDs = se.Delivered
	}
	switch c := channel.Classify(err); {
	case c == channel.ClassOffline:
		return action{kind: actSnooze, at: p.clk.Now().Add(p.opt.OfflineRetry), err: err}
	case c == channel.ClassRateLimited:
		var rl *channel.RateLimitedError
		wait := p.opt.OfflineRetry
		if errors.As(err, &rl) && rl.RetryAfter > 0 {
			wait = rl.RetryAfter
		}
		return action{kind: actSnooze, at: p.clk.Now().Add(wait), err: err}
	case c.Definitive():
		bctx := context.WithoutCancel(ctx)
		switch c {
		case channel.ClassKicked:
			if ev.Chat.Kind == channel.Group {
				if err := gate.MarkUnavailable(bctx, p.flags, l.SessionKey, p.clk.Now(), "kicked"); err != nil {
					p.log.Warn("mark group unavailable", "err", err)
				}
			}
		case channel.ClassMuted:
			var me *channel.MutedError
			until := p.clk.Now().Add(10 * time.Minute)
			if errors.As(err, &me) && !me.Until.IsZero() {
				until = me.Until
			}
			if err := gate.MarkMuted(bctx, p.flags, l.SessionKey, until); err != nil {
				p.log.Warn("mark muted", "err", err)
			}
		}
		rec.Code, rec.Reason = outbound.DroppedSendRejected, "platform rejected the reply: "+err.Error()
		rec.Stage = inbound.StageFailed
		if len(rec.OutboundIDs) > 0 {
			rec.Stage = inbound.StageAcknowledged
		}
		return action{kind: actComplete, outcome: rec}
	default:
		return action{kind: actRetry, err: err}
	}
}

// sendGuard is checked before the first chunk: a pause that started while
// the reply was generated (for the sender or the whole chat) stops it.
func (p *Pipeline) sendGuard(l inbound.Lease, run *runningTurn) func(context.Context) (outcome.Code, string) {
	return func(ctx context.Context) (outcome.Code, string) {
		if run != nil && !run.startSending() {
			return outcome.SupersededFollowUp, "a newer message from the same person superseded this reply; the newer turn answers both"
		}
		now := p.clk.Now()
		for _, subject := range []string{l.Event.Sender.ID, ""} {
			f, ok, err := p.flags.GetFlag(ctx, l.SessionKey, subject, gate.FlagSuppressed)
			if err == nil && ok && f.Active(now) {
				return gate.IgnoredResponseSuppression, "a pause started before the reply was sent"
			}
		}
		return "", ""
	}
}
