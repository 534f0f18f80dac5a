package persona

import (
	"context"
	"errors"
	"fmt"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/route"
)

// HandleEvent is the single entry for events. It does no model work and
// returns only once the event is durable:
//
//  1. a malformed event is rejected with an error (and counted), never
//     stored half-formed;
//  2. the bot's own messages go into history only;
//  3. notices go into history with a terminal notice_<type> record and
//     never enter the queue (a recall marks the message recalled);
//  4. private chats pass the admission policy or are recorded as
//     ignored_private_admission;
//  5. the priority is computed (direct triggers first) and the item is
//     enqueued idempotently (a redelivery is a no-op); if the queue cannot be
//     written the item goes to the journal, and only if that fails too is an
//     error returned, so the channel can NACK.
func (p *Pipeline) HandleEvent(ctx context.Context, ev channel.Event) error {
	return p.handle(ctx, ev, false)
}

// enqueueFetched is how the coordinator hands over a message it fetched
// (backfill or gap refetch): the HandleEvent rules, with history-only as
// the coordinator decided.
func (p *Pipeline) enqueueFetched(ctx context.Context, ev channel.Event, historyOnly bool) error {
	return p.handle(ctx, ev, historyOnly)
}

func (p *Pipeline) handle(ctx context.Context, ev channel.Event, historyOnly bool) error {
	if ev.Profile == "" {
		ev.Profile = p.opt.Profile
	}
	if ev.Source == "" {
		ev.Source = channel.SourceLive
	}
	if err := ev.Validate(); err != nil {
		p.stats.Rejected.Add(1)
		p.log.Warn("event rejected", "err", err, "platform", ev.Platform, "chat", ev.Chat.String())
		return err
	}
	ev.SessionKey = channel.SessionKey(ev.Profile, ev.Platform, ev.BotID, ev.Chat)
	// Detached: the append must finish even if the adapter's request ends.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultEnqueueTimeout)
	defer cancel()

	if err := p.handleDurably(actx, ev, historyOnly); err != nil {
		return err
	}
	// A session whose Scope is kept learns the new ids at once (a Scope
	// made later learns them from the history).
	p.scopes.learn(&ev)
	// Sequence-gap detection sees every live group message with a seq
	// number, the bot's own included, once it is durable.
	if ev.Source == channel.SourceLive && ev.Seq > 0 && ev.Chat.Kind == channel.Group {
		if st := p.channelFor(ev.Platform, ev.BotID); st != nil {
			st.coord.ObserveLive(actx, ev)
		}
	}
	return nil
}

// handleDurably applies steps 2–5 of HandleEvent.
func (p *Pipeline) handleDurably(actx context.Context, ev channel.Event, historyOnly bool) error {
	switch ev.Kind {
	case channel.KindSelf:
		return p.appendHistory(actx, ev, memory.Out)
	case channel.KindNotice:
		return p.handleNotice(actx, ev)
	}

	it := inbound.Item{ID: ev.Key(), SessionKey: ev.SessionKey, Event: ev, HistoryOnly: historyOnly}
	if v := p.admit.Admit(&ev); v.Stop {
		o := inbound.Outcome{Code: v.Code, Reason: v.Reason}
		if _, err := p.opt.Queue.Record(actx, it, o); err != nil {
			return fmt.Errorf("persona: record admission refusal: %w", err)
		}
		p.notify(it.ID, o)
		return nil
	}
	it.Priority = priority(&ev, route.Classify(&ev, p.identity, p.opt.Triggers))
	switch album := albumOf(ev.Segments); {
	case ev.MediaOnly():
		it.AvailableAt = ev.Time.Add(inbound.MediaMergeWindow)
		if album != "" && p.hold.hasAlbum(ev.SessionKey, ev.Sender.ID, album) {
			// A later picture of an album waits a little longer, so that
			// the first, when nothing took it in, takes it.
			it.AvailableAt = it.AvailableAt.Add(albumWait)
		}
	case album != "":
		it.AvailableAt = ev.Time.Add(albumWait)
	}
	if now := p.clk.Now(); !it.AvailableAt.IsZero() && it.AvailableAt.Before(now) {
		it.AvailableAt = now
	}
	if ev.MediaOnly() && !historyOnly {
		// Noted before it is stored, so that no turn can see the item
		// queued and not yet held (a redelivery is noted once).
		p.hold.note(&it, p.clk.Now())
	}
	return p.enqueue(actx, it)
}

// enqueue stores an item in the queue (in the journal when the queue
// cannot be written) and wakes the dispatcher.
func (p *Pipeline) enqueue(actx context.Context, it inbound.Item) error {
	enqueued, err := p.opt.Queue.Enqueue(actx, it)
	if err != nil {
		p.log.Warn("enqueue failed; writing to journal", "id", it.ID, "err", err)
		if jerr := p.opt.Journal.Append(actx, it); jerr != nil {
			return fmt.Errorf("persona: enqueue failed and journal failed: %w", errors.Join(err, jerr))
		}
		p.stats.Journaled.Add(1)
		p.replayer.Kick()
		return nil
	}
	if !enqueued {
		p.stats.Duplicates.Add(1)
		return nil
	}
	p.stats.Enqueued.Add(1)
	p.Wake()
	return nil
}

// priority implements the claim priorities: direct 100, quote 80, a link
// the link trigger resolves 60, else 0.
func priority(ev *channel.Event, trigger string) int {
	switch {
	case trigger == route.TriggerLink:
		return inbound.PriorityLink
	case trigger != "":
		return inbound.PriorityDirect
	case ev.QuoteID() != "":
		return inbound.PriorityQuote
	}
	return inbound.PriorityOther
}

func (p *Pipeline) appendHistory(ctx context.Context, ev channel.Event, dir memory.Direction) error {
	if err := p.opt.History.Append(ctx, memory.Entry{Key: ev.Key(), SessionKey: ev.SessionKey, Direction: dir, Event: ev}); err != nil {
		return fmt.Errorf("persona: append history: %w", err)
	}
	return nil
}

func (p *Pipeline) handleNotice(ctx context.Context, ev channel.Event) error {
	n := ev.Notice
	if (n.Type == channel.NoticeGroupRecall || n.Type == channel.NoticeFriendRecall) && n.TargetMessageID != "" {
		target := ev
		target.MessageID = n.TargetMessageID
		if err := p.opt.History.MarkRecalled(ctx, target.Key(), ev.Time); err != nil {
			p.log.Warn("mark recalled", "err", err)
		}
	}
	it := inbound.Item{ID: ev.Key(), SessionKey: ev.SessionKey, Event: ev}
	act, why := p.noticeAction(ctx, &ev)
	if act {
		// The bot acts on it (a reply, an answer to the platform): a turn
		// does, so that it happens once, durably, through the gates.
		it.Priority = inbound.PriorityDirect
		return p.enqueue(ctx, it)
	}
	o := inbound.Outcome{Code: outcome.Notice(n.Type), Reason: noticeReason(why), Kind: "notice"}
	created, err := p.opt.Queue.Record(ctx, it, o)
	if err != nil {
		return fmt.Errorf("persona: record notice: %w", err)
	}
	if created {
		p.notify(it.ID, o)
	}
	return nil
}

func (p *Pipeline) notify(id string, o inbound.Outcome) {
	if p.opt.OnOutcome != nil {
		p.opt.OnOutcome(id, o)
	}
	p.listenMu.Lock()
	ls := p.listeners
	p.listenMu.Unlock()
	for _, f := range ls {
		f(id, o)
	}
}
