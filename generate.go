package persona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/route"
)

// Session state kept in the session flags (never expiring).
const (
	flagAliasSecret   = "alias_secret"
	flagHistoryAnchor = "history_anchor"
	// historyWindow bounds how much history (after the summary watermark,
	// when there is one) a prompt is built from. The context builder keeps
	// the window from the previous turn's anchor and advances it in epochs,
	// so the input must reach back past the anchor: a short sliding window
	// (the last 30 messages) would move the prompt prefix on every turn.
	historyWindow = 400
)

var forever = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// generation holds the generation-stage parts built once per pipeline.
type generation struct {
	builder  *agent.ContextBuilder
	overflow *agent.ContextBuilder
	tracker  *agent.PrefixTracker
	loop     *agent.Loop

	recaller   *memory.Recaller
	extractor  *memory.Extractor
	summarizer *memory.Summarizer
	summaries  chan string // sessions whose summary may need to advance
	// sums keeps alias hashes across turns: each turn aliases every
	// message id of its history again.
	sums *agent.AliasSums
	// histBufs holds the slices generate converts a turn's history into
	// (*[]agent.ChatMessage).
	histBufs sync.Pool
}

// buildGeneration prepares context assembly, memory and the agent loop.
func (p *Pipeline) buildGeneration(db Storage) error {
	full := agent.NewContextBuilder(agent.ContextConfig{ContextWindow: p.opt.ContextWindow})
	g := &generation{
		builder: full,
		// After a context overflow the prompt is built once more with
		// half the history budget (the whole window shrunk so that the
		// history's share halves, at least overflowFloor tokens).
		overflow: agent.NewContextBuilder(agent.ContextConfig{ContextWindow: overflowWindow(full.Budget()), HistoryCache: -1}),
		tracker:  &agent.PrefixTracker{Logger: p.log},
		sums:     agent.NewAliasSums(0),
	}
	if p.opt.Memory {
		if db == nil || p.opt.Model == nil {
			return errors.New("persona: Options.Memory needs the default store (DataDir or DB) and a Model")
		}
		var err error
		if g.recaller, err = memory.NewRecaller(db, db, memory.RecallConfig{Clock: p.clk}); err != nil {
			return err
		}
		if g.extractor, err = memory.NewExtractor(db, p.model, memory.ExtractConfig{Clock: p.clk, Logger: p.log, Scopes: p.scopes}); err != nil {
			return err
		}
		if g.summarizer, err = memory.NewSummarizer(db, p.model, memory.SummaryConfig{Clock: p.clk, Logger: p.log, Scopes: p.scopes}); err != nil {
			return err
		}
		g.summaries = make(chan string, 256)
	}
	if p.opt.Agent && !p.opt.customRunner {
		reg := p.opt.Tools
		if reg == nil {
			reg = agent.NewRegistry()
		}
		if p.opt.Web != nil {
			if _, ok := reg.Lookup(web.ToolName); !ok {
				if err := reg.Register(p.opt.Web.Tool(), agent.Core()); err != nil {
					return fmt.Errorf("persona: register web_fetch: %w", err)
				}
			}
		}
		loop, err := agent.NewLoop(agent.LoopConfig{Registry: reg, Clock: p.clk, Logger: p.log,
			RequestTimeout: p.opt.RequestTimeout, Secrets: p.opt.Secrets, Snapshots: flagSnapshots{p},
			ToolImages: p.attach})
		if err != nil {
			return err
		}
		g.loop = loop
	}
	p.runner = p.opt.Runner
	if g.loop != nil {
		p.runner = loopRunner{g.loop}
	}
	if p.opt.WrapRunner != nil {
		p.runner = p.opt.WrapRunner(p.runner)
		if p.runner == nil {
			return errors.New("persona: Options.WrapRunner returned nil")
		}
	}
	p.gen = g
	return nil
}

// overflowFloor is the smallest context window an overflow retry uses.
const overflowFloor = 8192

// overflowWindow returns the context window whose budget gives half the
// history of b (at least overflowFloor tokens).
func overflowWindow(b agent.Budget) int {
	// History is 55 % of the input, which is the window less the output
	// reserve and the safety margin.
	in := (b.History/2)*100/55 + 1
	return max(in+agent.DefaultMaxOutput+agent.SafetyTokens, overflowFloor)
}

// flagSnapshots keeps the agent's loaded-tool snapshots of group sessions
// in the session flags, so a restart keeps them (valid 30 minutes).
type flagSnapshots struct{ p *Pipeline }

const flagToolSnapshot = "tool_snapshot"

func (s flagSnapshots) LoadSnapshot(ctx context.Context, session string) (agent.ToolSnapshot, bool, error) {
	f, ok, err := s.p.flags.GetFlag(ctx, session, "", flagToolSnapshot)
	if err != nil || !ok || !f.Active(s.p.clk.Now()) {
		return agent.ToolSnapshot{}, false, err
	}
	var snap agent.ToolSnapshot
	if err := json.Unmarshal([]byte(f.Value), &snap); err != nil {
		return agent.ToolSnapshot{}, false, fmt.Errorf("tool snapshot: %w", err)
	}
	return snap, true, nil
}

func (s flagSnapshots) SaveSnapshot(ctx context.Context, session string, snap agent.ToolSnapshot) error {
	b, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	return s.p.flags.SetFlag(ctx, gate.Flag{SessionKey: session, Name: flagToolSnapshot,
		Until: snap.SavedAt.Add(agent.DefaultSnapshotTTL), Value: string(b)})
}

// runMemory runs the extraction workers and the summary refresher until
// ctx ends.
func (p *Pipeline) runMemory(ctx context.Context) error {
	g := p.gen
	if g.extractor == nil {
		return nil
	}
	// Both stop with ctx and are waited for, so nothing touches the store
	// after Run returns.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case session := <-g.summaries:
				if _, _, err := g.summarizer.Refresh(ctx, session); err != nil && ctx.Err() == nil {
					p.log.Warn("summary refresh", "session", session, "err", err)
				}
			}
		}
	})
	return g.extractor.Run(ctx)
}

// sessionValue returns a value kept in the session flags, creating it with
// make when missing.
func (p *Pipeline) sessionValue(ctx context.Context, session, name string, make func() (string, error)) (string, error) {
	f, ok, err := p.flags.GetFlag(ctx, session, "", name)
	if err != nil {
		return "", err
	}
	if ok && f.Value != "" {
		return f.Value, nil
	}
	if make == nil {
		return "", nil
	}
	v, err := make()
	if err != nil {
		return "", err
	}
	return v, p.flags.SetFlag(ctx, gate.Flag{SessionKey: session, Name: name, Until: forever, Value: v})
}

// generate assembles the prompt (persona and fixed rules, summary, stable
// history, then the per-turn blocks after the cache breakpoint, the speaker,
// the clock and the current message, with ids aliased) and runs the
// Runner. The reply comes back with real ids restored. raw is the
// session's history as the turn already read it (at least historyWindow
// newest entries, see historyRead), or nil to read it here; it may be
// shared with the History (memory.RecentOf), so generate only reads it.
func (p *Pipeline) generate(ctx context.Context, l inbound.Lease, t *gate.Turn, extra []channel.Event, rec *inbound.Outcome, raw []memory.Entry, turn *runningTurn, img *imagePrep) (string, usageInfo, []string, error) {
	g, ev := p.gen, l.Event
	sc := agent.ScopeFrom(ctx)
	if sc == nil {
		var err error
		if sc, err = p.scopes.Scope(ctx, l.SessionKey); err != nil {
			return "", usageInfo{}, nil, err
		}
	}
	// The prompt is rendered through a fresh Aliaser with the session's
	// secret (the history cache builds on one that starts empty); its
	// aliases are the Scope's.
	al := sc.NewAliaser()
	anchor, err := p.sessionValue(ctx, l.SessionKey, flagHistoryAnchor, nil)
	if err != nil {
		return "", usageInfo{}, nil, fmt.Errorf("history anchor: %w", err)
	}
	in := agent.ContextInput{Persona: p.opt.Persona, Rules: p.opt.Rules, HistoryAnchor: anchor, Chat: ev.Chat, BotID: ev.BotID,
		Speaker: agent.Speaker{ID: ev.Sender.ID, Name: ev.Sender.Name, Role: ev.Sender.Role, Owner: t.Owner,
			Aliases: route.MatchedAliases(&ev, p.identity)},
		Now: p.clk.Now(), Zone: p.opt.Zone, Current: agent.ChatMessageFromEvent(&ev, false), Aliaser: al}
	if img.attached() && !img.fromDescriptions {
		in.Current.Parts, in.DependencyImages = img.parts, img.depParts
	} else {
		in.MediaIndex = img.dependencyLines()
	}
	if p.sources != nil {
		for _, src := range p.sources.Recent(l.SessionKey, in.Now) {
			in.RecentSources = append(in.RecentSources, sourceLine(src))
		}
	}
	var watermark memory.Watermark
	if g.summarizer != nil {
		if sum, ok, err := g.summarizer.Checkpoint(ctx, l.SessionKey); err != nil {
			p.log.Warn("summary checkpoint", "session", l.SessionKey, "err", err)
		} else if ok {
			in.Summary, watermark = sum.Text, sum.Watermark
		}
	}
	// raw may be shared with the History (memory.RecentOf): read only.
	hist := raw[max(0, len(raw)-historyWindow):]
	if raw == nil {
		if hist, err = memory.RecentOf(ctx, p.opt.History, l.SessionKey, historyWindow); err != nil {
			return "", usageInfo{}, nil, fmt.Errorf("history: %w", err)
		}
	}
	// The builder keeps nothing of in.History (it copies what it caches),
	// so the slice goes back to the pool after Build.
	hp, _ := g.histBufs.Get().(*[]agent.ChatMessage)
	if hp == nil {
		hp = new([]agent.ChatMessage)
	}
	in.History = slices.Grow((*hp)[:0], len(hist))
	var window []memory.Entry // what the prompt's history may show, for recall
	for i := range hist {
		if e := &hist[i]; isContext(e, &l) && watermark.Precedes(e) {
			in.History = append(in.History, agent.ChatMessageFromEvent(&e.Event, e.Direction == memory.Out))
			if g.recaller != nil {
				window = append(window, *e)
			}
		}
	}
	defer func() {
		// The builder keeps nothing of in.History (it copies what it
		// caches).
		clear(in.History)
		*hp = in.History[:0]
		g.histBufs.Put(hp)
	}()
	for _, e := range extra {
		in.Candidates = append(in.Candidates, agent.ChatMessageFromEvent(&e, false))
	}
	if g.recaller != nil {
		// Recall never brings back what the prompt's history already
		// shows.
		q := memory.Query{SessionKey: l.SessionKey, UserID: ev.Sender.ID, Text: ev.TextAndSpeech()}
		q.ExcludeHistory(append(window, memory.Entry{Key: l.ID, SessionKey: l.SessionKey, Direction: memory.In, Event: ev}))
		rc, err := g.recaller.Recall(ctx, q)
		if err != nil {
			p.log.Warn("memory recall", "session", l.SessionKey, "err", err)
		} else {
			in.Memory = memory.RenderLines(rc, memory.BlockOptions{Scope: sc, Alias: sc.User, Now: in.Now})
		}
	}
	gctx, cancel := context.WithTimeout(agent.WithAliaser(agent.WithScope(ctx, sc), al), p.opt.RequestTimeout)
	defer cancel()
	rec.Timings.GenerationStart = p.clk.Now()
	tr := &turnRun{session: l.SessionKey, group: ev.Chat.Kind == channel.Group, message: ev.TextAndSpeech(),
		say: p.sayFunc(l, al, turn), deadline: p.clk.Now().Add(p.opt.RequestTimeout - time.Second)}
	gctx = context.WithValue(gctx, turnRunKey{}, tr)
	var res *agent.Result
	for _, b := range []*agent.ContextBuilder{g.builder, g.overflow} {
		asm := b.Build(in)
		g.tracker.Observe(l.SessionKey, asm)
		if asm.HistoryAnchor != anchor {
			if err := p.flags.SetFlag(ctx, gate.Flag{SessionKey: l.SessionKey, Name: flagHistoryAnchor, Until: forever, Value: asm.HistoryAnchor}); err != nil {
				p.log.Warn("save history anchor", "err", err)
			}
			anchor = asm.HistoryAnchor
		}
		res, err = p.runner.Run(gctx, agent.RunInput{Model: p.model, Request: asm.Request(agent.PurposeChat), Owner: t.Owner})
		var me *agent.Error
		if b == g.overflow || !errors.As(err, &me) || me.Kind != agent.KindContextOverflow || len(tr.said) > 0 {
			break
		}
		// The provider found the prompt too long for its window: once
		// more with half the window.
		p.log.Warn("context overflow; retrying with half the context window", "session", l.SessionKey,
			"history_tokens", g.overflow.Budget().History, "err", err)
	}
	said := tr.said
	if p.sources != nil {
		// Pages the tools read join the chat's recent sources, so the
		// next turns see them (and the link trigger does not read them
		// again).
		for _, e := range tr.evidence {
			if e.URL != "" && (e.Tool == web.ToolName || e.Tool == "browser_render") {
				p.sources.Add(l.SessionKey, web.Source{URL: e.URL, Title: e.Title, Excerpt: e.Excerpt, At: p.clk.Now()})
			}
		}
	}
	rec.Timings.GenerationEnd = p.clk.Now()
	if err == nil && res == nil {
		err = &agent.Error{Kind: agent.KindInvalidRequest, Message: "the runner returned neither a result nor an error"}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = &agent.Error{Kind: agent.KindTimeout, Message: "turn request timeout", Err: err}
		}
		return "", usageInfo{}, nil, err
	}
	// The boundary restored the ids already; a Runner that called a model
	// of its own may have brought aliases back.
	text, unknown := sc.Restore(res.Text, al)
	if len(unknown) > 0 {
		p.log.Info("reply mentions unknown aliases", "session", l.SessionKey, "aliases", unknown)
	}
	for i, s := range said {
		said[i], _ = sc.Restore(s, al)
	}
	return text, usageInfo{Usage: res.Usage, model: res.Model}, said, nil
}

// sayFunc sends the agent's say lines at once, each through the delivery
// ledger under its own id (the turn id plus the line number), so a retried
// turn never says a line twice.
//
// A line said is a side effect the turn cannot take back: from then on no
// newer message is folded into it (a follow-up gets its own turn).
func (p *Pipeline) sayFunc(l inbound.Lease, al *agent.Aliaser, run *runningTurn) func(context.Context, string) error {
	n := 0
	return func(ctx context.Context, text string) error {
		n++
		st := p.channelFor(l.Event.Platform, l.Event.BotID)
		if st == nil {
			return fmt.Errorf("no channel for platform %q", l.Event.Platform)
		}
		if run != nil && !run.sideEffect() {
			// A newer message is being folded in: this generation is
			// about to start over, so its line is not said.
			return context.Canceled
		}
		if sc := agent.ScopeFrom(ctx); sc != nil {
			text, _ = sc.Restore(text, al)
		} else {
			text, _ = al.Restore(text)
		}
		id := fmt.Sprintf("%s/say/%d", l.ID, n)
		_, err := p.sender.Send(ctx, outbound.Reply{TurnID: id, SessionKey: l.SessionKey,
			Channel: p.exit.Bind(st.ch, id, l.SessionKey, l.Claims == 1), Chat: l.Event.Chat, Text: text, Code: outcome.Replied,
			Reason: "said during the agent run", CurrentMessageID: l.Event.MessageID, Guard: p.sendGuard(l, nil)})
		return err
	}
}

// historyRead is how many of the session's newest entries a direct turn
// reads, once, for both the review's transcript (HistoryLimit+1) and the
// prompt (historyWindow).
func (p *Pipeline) historyRead() int { return max(historyWindow, p.opt.HistoryLimit+1) }

// before returns the entries of hist that are context for the current
// message, read-only: hist's own run of them when they are contiguous
// (the usual case: the current message and anything newer come last), a
// new slice otherwise.
func (p *Pipeline) before(hist []memory.Entry, l inbound.Lease) []memory.Entry {
	first, last, n := -1, -1, 0
	for i := range hist {
		if isContext(&hist[i], &l) {
			if first < 0 {
				first = i
			}
			last = i
			n++
		}
	}
	if n == 0 {
		return []memory.Entry{} // not nil: the turn has read its history
	}
	if last-first+1 == n {
		return slices.Clip(hist[first : last+1])
	}
	out := make([]memory.Entry, 0, n)
	for i := range hist {
		if isContext(&hist[i], &l) {
			out = append(out, hist[i])
		}
	}
	return out
}

// isContext reports whether a history entry is context for the current
// message: said before it (not later, not itself), not a notice, not
// recalled.
func isContext(e *memory.Entry, l *inbound.Lease) bool {
	return e.Key != l.ID && e.Direction != memory.Notice && e.RecalledAt.IsZero() && !e.Event.Time.After(l.Event.Time)
}

// afterReply queues the memory work of an answered turn: fact extraction
// from the user's message and a summary check. Both run in the background.
func (p *Pipeline) afterReply(ctx context.Context, l inbound.Lease) {
	g := p.gen
	if g.extractor == nil {
		return
	}
	e := memory.Entry{Key: l.ID, SessionKey: l.SessionKey, Direction: memory.In, Event: l.Event}
	if _, err := g.extractor.Enqueue(context.WithoutCancel(ctx), e); err != nil {
		p.log.Warn("queue fact extraction", "id", l.ID, "err", err)
	}
	select {
	case g.summaries <- l.SessionKey:
	default: // a refresh is already due; the next reply asks again
	}
}

// sourceLine renders a page the session read for the recent-sources
// block: title, address and the start of its text.
func sourceLine(s web.Source) string {
	line := s.URL
	if s.Title != "" {
		line = s.Title + " (" + s.URL + ")"
	}
	if s.Excerpt != "" {
		line += ": " + s.Excerpt
	}
	return line
}

// readLinks reads the links of a message the turn answers (at most
// route.MaxLinksPerMessage, each once per session while it is recent) so
// that the prompt's recent-sources block shows them. A link that cannot
// be read is noted in the trail; the turn goes on.
func (p *Pipeline) readLinks(ctx context.Context, l inbound.Lease, tr *turnTrail) {
	for _, u := range route.Links(&l.Event, route.MaxLinksPerMessage) {
		if !p.opt.Web.Resolvable(u) {
			continue
		}
		now := p.clk.Now()
		if p.sources.Seen(l.SessionKey, u, now) {
			tr.Notes = append(tr.Notes, "link already read in this chat: "+u)
			continue
		}
		doc, err := p.opt.Web.Fetch(ctx, u)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			tr.Notes = append(tr.Notes, "link not read: "+err.Error())
			continue
		}
		p.sources.Add(l.SessionKey, doc.Source())
		tr.Notes = append(tr.Notes, "link read: "+doc.Source().URL)
	}
}
