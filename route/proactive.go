package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/outcome"
)

// Defaults of the proactive router.
const (
	// DefaultTimeout bounds all model calls of one rating together.
	DefaultTimeout = 60 * time.Second
	// DefaultTranscriptMessages and DefaultTranscriptChars shape the
	// transcript shown to the model: at least DefaultTranscriptMessages
	// messages (up to twice as many), each clipped to
	// DefaultTranscriptChars characters.
	DefaultTranscriptMessages = 30
	DefaultTranscriptChars    = 180
	// DefaultConcurrency is the number of router calls at once.
	DefaultConcurrency = 8
	// Talk-too-much: the bot sent more than DefaultTalkShare of the
	// session's messages within DefaultTalkWindow, at least
	// DefaultTalkMinBot of them, while at least DefaultTalkMinOthers other
	// people spoke.
	DefaultTalkWindow    = 10 * time.Minute
	DefaultTalkShare     = 0.25
	DefaultTalkMinBot    = 3
	DefaultTalkMinOthers = 2
)

// ErrInvalidConfig is wrapped by every error New returns.
var ErrInvalidConfig = errors.New("route: invalid config")

// errTimeout is the cancel cause when the rating budget runs out.
var errTimeout = errors.New("route: router timeout")

// Config configures the model-rated proactive router. Zero fields take
// the defaults above.
type Config struct {
	// Model rates the messages, called with purpose agent.PurposeRouter
	// (required).
	Model agent.Model
	// Flags holds the chat cooldown (required; the same store as the
	// gates').
	Flags gate.Flags
	// Settings returns the proactive settings of a message's chat; use
	// (*gate.Rules).Proactive. nil = the defaults (answer questions on,
	// chat-in low, cooldown 30 s) for every chat.
	Settings func(ev *channel.Event) gate.Proactive
	// Aliases are the bot's names, shown to the model.
	Aliases []string
	// Timeout bounds the whole rating, both attempts (60 s).
	Timeout time.Duration
	// TranscriptMessages and TranscriptChars bound the transcript: at
	// least TranscriptMessages messages (30) when there are that many, at
	// most twice that (see ModelRouter.RecentLimit), each of at most
	// TranscriptChars characters (180).
	TranscriptMessages int
	TranscriptChars    int
	// Concurrency is the number of router calls at once (8). Calls for one
	// session never overlap.
	Concurrency int
	// TalkWindow, TalkShare, TalkMinBot and TalkMinOthers tune
	// talk-too-much (10 min, 0.25, 3, 2).
	TalkWindow    time.Duration
	TalkShare     float64
	TalkMinBot    int
	TalkMinOthers int
	// Clock is the time source of ages, windows, the cooldown and the
	// timeout (nil = the wall clock).
	Clock clock.Clock
	// Logger receives a proactive_reply_route record per rating (nil =
	// discard).
	Logger *slog.Logger
}

// ModelRouter is the default Router: it asks a model to rate unprompted
// group messages and decides in the order the package documentation
// gives. Build it with New. It renders
// every id through the session's agent.Scope (the one the context
// carries, else a fallback of its own) and keeps, per session in memory,
// where its transcript window starts (see the package documentation,
// "Privacy and caching"). It is safe for concurrent use.
type ModelRouter struct {
	model              agent.Model
	flags              gate.Flags
	settings           func(ev *channel.Event) gate.Proactive
	aliases            []string
	timeout            time.Duration
	transcriptMessages int
	transcriptChars    int
	talkWindow         time.Duration
	talkShare          float64
	talkMinBot         int
	talkMinOthers      int
	clk                clock.Clock
	log                *slog.Logger
	slots              chan struct{}
	sessions           keyedMutex
	// secret keys the fallback Scopes (see scopeFor).
	secret []byte
	state  sessionState
}

var _ Router = (*ModelRouter)(nil)

// New validates cfg and returns the router.
func New(cfg Config) (*ModelRouter, error) {
	bad := func(format string, a ...any) (*ModelRouter, error) {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case cfg.Model == nil:
		return bad("Model is required")
	case cfg.Flags == nil:
		return bad("Flags is required")
	case cfg.Timeout < 0 || cfg.TalkWindow < 0:
		return bad("negative duration")
	case cfg.TranscriptMessages < 0 || cfg.TranscriptChars < 0 || cfg.Concurrency < 0 || cfg.TalkMinBot < 0 || cfg.TalkMinOthers < 0:
		return bad("negative count")
	case cfg.TranscriptChars > 0 && cfg.TranscriptChars < 2:
		return bad("TranscriptChars %d is too small", cfg.TranscriptChars)
	case cfg.TalkShare < 0 || cfg.TalkShare >= 1:
		return bad("TalkShare %v is outside [0,1)", cfg.TalkShare)
	}
	r := &ModelRouter{
		model: cfg.Model, flags: cfg.Flags, settings: cfg.Settings, timeout: cfg.Timeout,
		transcriptMessages: cfg.TranscriptMessages, transcriptChars: cfg.TranscriptChars,
		talkWindow: cfg.TalkWindow, talkShare: cfg.TalkShare, talkMinBot: cfg.TalkMinBot, talkMinOthers: cfg.TalkMinOthers,
		clk: clock.OrReal(cfg.Clock), log: cfg.Logger,
	}
	for _, a := range cfg.Aliases {
		if a = strings.TrimSpace(a); a != "" {
			r.aliases = append(r.aliases, a)
		}
	}
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setInt := func(n *int, def int) {
		if *n == 0 {
			*n = def
		}
	}
	setDur(&r.timeout, DefaultTimeout)
	setDur(&r.talkWindow, DefaultTalkWindow)
	setInt(&r.transcriptMessages, DefaultTranscriptMessages)
	setInt(&r.transcriptChars, DefaultTranscriptChars)
	setInt(&r.talkMinBot, DefaultTalkMinBot)
	setInt(&r.talkMinOthers, DefaultTalkMinOthers)
	if r.talkShare == 0 {
		r.talkShare = DefaultTalkShare
	}
	n := cfg.Concurrency
	if n == 0 {
		n = DefaultConcurrency
	}
	r.slots = make(chan struct{}, n)
	secret, err := agent.NewAliasSecret()
	if err != nil {
		return nil, fmt.Errorf("route: %w", err)
	}
	r.secret = secret
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

func (r *ModelRouter) settingsFor(ev *channel.Event) gate.Proactive {
	if r.settings == nil {
		return gate.Proactive{}.Resolved()
	}
	return r.settings(ev).Resolved()
}

// ChatReplySent starts the chat cooldown of a session after a chat-in
// reply (Decision.ChatInPass) was actually sent at at. The pipeline calls
// it after the send; a reply that was never sent starts no cooldown.
func (r *ModelRouter) ChatReplySent(ctx context.Context, sessionKey string, ev *channel.Event, at time.Time) error {
	return StartChatCooldown(ctx, r.flags, sessionKey, at.Add(r.settingsFor(ev).ChatCooldown))
}

// StartChatCooldown blocks chat-in replies in a session until until (the
// flag the default router reads).
func StartChatCooldown(ctx context.Context, f gate.Flags, sessionKey string, until time.Time) error {
	return f.SetFlag(ctx, gate.Flag{SessionKey: sessionKey, Name: gate.FlagChatCooldown, Until: until})
}

// Route rates in.Event (and in.Others) and decides each candidate in the
// order the package documentation gives. A model
// timeout, error or twice-unparsable answer is a Decision with
// IgnoredRouterFailed, not an error. Route returns an error only when ctx
// ended (the caller is shutting down: release the message, do not record
// it) or the cooldown flag could not be read.
func (r *ModelRouter) Route(ctx context.Context, in Input) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	session := in.SessionKey
	if session == "" {
		session = in.Event.SessionKey
	}
	cands := make([]*channel.Event, 0, 1+len(in.Others))
	cands = append(cands, &in.Event)
	for i := range in.Others {
		cands = append(cands, &in.Others[i])
	}
	settings := r.settingsFor(&in.Event)
	now := r.clk.Now()

	if !settings.On() {
		return r.all(ctx, session, cands, gate.IgnoredProactiveOff, "both proactive switches are off"), nil
	}
	talk := r.talkTooMuch(in, cands, now)
	if settings.AnswerQuestions == gate.ToggleOff && settings.ChatIn != gate.ChatNoLimit && talk.holds {
		// Only chat-in could pass, and talk-too-much already stops it.
		return r.all(ctx, session, cands, IgnoredTalkTooMuch, talk.reason+" (not rated)"), nil
	}

	release, err := r.acquire(ctx, session)
	if err != nil {
		return Decision{}, err
	}
	ratings, res := r.rate(ctx, session, in, cands, settings.Criteria, now)
	release()
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	cool, coolOn, err := r.cooldown(ctx, session, now)
	if err != nil {
		return Decision{}, err
	}

	decisions := make([]Decision, len(cands))
	for i, ev := range cands {
		rt, ok := ratings[i]
		if !ok {
			decisions[i] = Decision{MessageID: ev.MessageID, Code: IgnoredRouterFailed, Reason: res.problem}
		} else {
			decisions[i] = decide(rt, settings, cool, coolOn, talk)
			decisions[i].MessageID = ev.MessageID
		}
		r.logRating(ctx, session, ev, rt, ok, decisions[i], res)
	}
	out := decisions[0]
	out.Others = decisions[1:]
	if len(out.Others) == 0 {
		out.Others = nil
	}
	out.Target = target(cands, decisions)
	out.Calls, out.Usage, out.Model = res.calls, res.usage, res.model
	return out, nil
}

// all decides every candidate the same way without a rating.
func (r *ModelRouter) all(ctx context.Context, session string, cands []*channel.Event, code outcome.Code, reason string) Decision {
	var out Decision
	for i, ev := range cands {
		d := Decision{MessageID: ev.MessageID, Code: code, Reason: reason}
		r.logRating(ctx, session, ev, Rating{}, false, d, rateResult{})
		if i == 0 {
			out = d
		} else {
			out.Others = append(out.Others, d)
		}
	}
	return out
}

// decide applies the decision order to one rating: a stop (not directed,
// score 0), a directed question, the chat-in threshold, the cooldown,
// talk-too-much, then pass.
func decide(rt Rating, s gate.Proactive, coolUntil time.Time, coolOn bool, talk talkState) Decision {
	d := Decision{Directed: rt.Directed, ChatIn: rt.ChatIn}
	stop := func(code outcome.Code, reason string) Decision {
		d.Code, d.Reason = code, reason
		return d
	}
	threshold := s.ChatThreshold
	switch {
	case rt.Directed == DirectedNo && rt.ChatIn == 0:
		return stop(IgnoredRouterStop, because("not addressed to the bot and chat-in score 0", rt.ChatInReason, rt.DirectedReason))
	case s.AnswerQuestions == gate.ToggleOn && rt.Directed == DirectedYes:
		d.Reply, d.Reason = true, because("addressed to the bot", rt.DirectedReason)
		return d
	case s.ChatIn == gate.ChatOff:
		return stop(IgnoredChatScore, because(notQuestion(s)+" and chat-in is off", rt.DirectedReason))
	case rt.ChatIn < threshold:
		return stop(IgnoredChatScore, because(fmt.Sprintf("chat-in score %.2f is below %.2f", rt.ChatIn, threshold), rt.ChatInReason))
	case coolOn:
		return stop(IgnoredChatCooldown, "chat-in cooldown until "+coolUntil.UTC().Format("15:04:05 MST"))
	case s.ChatIn != gate.ChatNoLimit && talk.holds:
		return stop(IgnoredTalkTooMuch, talk.reason)
	}
	d.Reply, d.ChatInPass = true, true
	d.Reason = because(fmt.Sprintf("chat-in score %.2f (threshold %.2f)", rt.ChatIn, threshold), rt.ChatInReason)
	return d
}

func notQuestion(s gate.Proactive) string {
	if s.AnswerQuestions == gate.ToggleOff {
		return "answering questions is off"
	}
	return "not addressed to the bot"
}

// because joins a decision with the first non-empty model reason.
func because(what string, reasons ...string) string {
	for _, r := range reasons {
		if r = strings.TrimSpace(r); r != "" {
			return what + ": " + r
		}
	}
	return what
}

// target picks the reply target among the passing candidates: the most
// recent directed one, else the highest chat-in score.
func target(cands []*channel.Event, ds []Decision) string {
	best := -1
	for i, d := range ds {
		if !d.Reply {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := ds[best]
		switch {
		case (d.Directed == DirectedYes) != (b.Directed == DirectedYes):
			if d.Directed == DirectedYes {
				best = i
			}
		case d.Directed == DirectedYes:
			if !cands[i].Time.Before(cands[best].Time) {
				best = i
			}
		case d.ChatIn > b.ChatIn:
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return ds[best].MessageID
}

func (r *ModelRouter) cooldown(ctx context.Context, session string, now time.Time) (time.Time, bool, error) {
	f, ok, err := r.flags.GetFlag(ctx, session, "", gate.FlagChatCooldown)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("route: read chat cooldown: %w", err)
	}
	return f.Until, ok && f.Active(now), nil
}

// talkState is the talk-too-much measurement of a session.
type talkState struct {
	holds  bool
	reason string
}

func (r *ModelRouter) talkTooMuch(in Input, cands []*channel.Event, now time.Time) talkState {
	cutoff := now.Add(-r.talkWindow)
	botID := in.Event.BotID
	seen := make(map[string]bool, len(in.Recent)+len(cands))
	others := map[string]bool{}
	total, bot := 0, 0
	count := func(ev *channel.Event) {
		if ev.Kind == channel.KindNotice || !ev.Time.After(cutoff) {
			return
		}
		if ev.MessageID != "" {
			if seen[ev.MessageID] {
				return
			}
			seen[ev.MessageID] = true
		}
		total++
		if isSelf(ev, botID) {
			bot++
		} else {
			others[ev.Sender.ID] = true
		}
	}
	// The newest TranscriptMessages of Recent only: the pipeline used to
	// pass no more, and passes more now only for the transcript window.
	for i := max(0, len(in.Recent)-r.transcriptMessages); i < len(in.Recent); i++ {
		count(&in.Recent[i])
	}
	for _, ev := range cands {
		count(ev)
	}
	t := talkState{holds: float64(bot) > r.talkShare*float64(total) && bot >= r.talkMinBot && len(others) >= r.talkMinOthers}
	if t.holds {
		t.reason = fmt.Sprintf("the bot sent %d of the last %d messages in %s while %d others talked (talk too much)",
			bot, total, r.talkWindow, len(others))
	}
	return t
}

// acquire takes the session's turn, then a call slot.
func (r *ModelRouter) acquire(ctx context.Context, session string) (func(), error) {
	unlock, err := r.sessions.lock(ctx, session)
	if err != nil {
		return nil, err
	}
	select {
	case r.slots <- struct{}{}:
		return func() { <-r.slots; unlock() }, nil
	case <-ctx.Done():
		unlock()
		return nil, ctx.Err()
	}
}

// rateResult describes the model calls of one rating.
type rateResult struct {
	calls   int
	usage   agent.Usage
	model   string
	problem string // why candidates stayed unrated
}

// rate asks the model, once more after an unusable answer, all within the
// timeout. It returns the ratings by candidate index (possibly
// incomplete), each with MessageID set to the candidate's message id.
func (r *ModelRouter) rate(ctx context.Context, session string, in Input, cands []*channel.Event, criteria string, now time.Time) (map[int]Rating, rateResult) {
	sc := r.scopeFor(ctx, session)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := r.clk.NewTimer(r.timeout)
	defer timer.Stop()
	go func() {
		select {
		case <-timer.C():
			cancel(errTimeout)
		case <-ctx.Done():
		}
	}()

	ids := newCandidateIDs(sc, cands)
	req := r.buildRequest(sc, session, in, cands, ids, criteria, now)
	got := make(map[int]Rating, len(cands))
	var res rateResult
	for attempt := 1; ; attempt++ {
		resp, err := r.model.Generate(ctx, req)
		res.calls++
		if errors.Is(context.Cause(ctx), errTimeout) {
			res.problem = fmt.Sprintf("router timed out after %s", r.timeout)
			return got, res
		}
		if err != nil {
			res.problem = "router model failed: " + err.Error()
			return got, res
		}
		if resp == nil {
			res.problem = "router model returned no response"
			return got, res
		}
		res.usage, res.model = res.usage.Add(resp.Usage), resp.Model
		ratings, perr := ParseRatings(resp.Text)
		for _, rt := range ratings {
			if i, ok := ids.index[rt.MessageID]; ok {
				if _, dup := got[i]; !dup {
					rt.MessageID = ids.record[i]
					got[i] = rt
				}
			}
		}
		var missing, missingModel []string
		for i := range cands {
			if _, ok := got[i]; !ok {
				missing, missingModel = append(missing, ids.record[i]), append(missingModel, ids.model[i])
			}
		}
		problem := "" // as the model is told, with its ids
		switch {
		case perr != nil:
			res.problem, problem = perr.Error(), ids.toModel(sc, perr.Error())
		case len(missing) > 0:
			res.problem = "no rating for candidate " + strings.Join(missing, ", ")
			problem = "no rating for candidate " + strings.Join(missingModel, ", ")
		default:
			res.problem = ""
			return got, res
		}
		if attempt == 2 {
			res.problem = "router answer unusable twice: " + res.problem
			return got, res
		}
		req.Messages = append(req.Messages,
			agent.Message{Role: agent.RoleAssistant, Content: clip(ids.toModel(sc, resp.Text), 2000)},
			agent.Message{Role: agent.RoleUser, Content: reminder(problem, ids.model)})
	}
}

func (r *ModelRouter) logRating(ctx context.Context, session string, ev *channel.Event, rt Rating, rated bool, d Decision, res rateResult) {
	attrs := []slog.Attr{
		slog.String("session", session),
		slog.String("message_id", ev.MessageID),
		slog.Bool("rated", rated),
	}
	if rated {
		attrs = append(attrs,
			slog.String("directed", rt.Directed), slog.String("directed_reason", rt.DirectedReason),
			slog.Float64("chat_in", rt.ChatIn), slog.String("chat_in_reason", rt.ChatInReason))
	}
	result := string(d.Code)
	if d.Reply {
		result = "pass"
	}
	attrs = append(attrs, slog.String("decision", result), slog.String("reason", d.Reason), slog.Int("calls", res.calls))
	r.log.LogAttrs(ctx, slog.LevelInfo, "proactive_reply_route", attrs...)
}

// keyedMutex serialises work per key; waiting respects the context.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{}
	refs int
}

func (k *keyedMutex) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[string]*keyLock)
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; k.release(key, l) }, nil
	case <-ctx.Done():
		k.release(key, l)
		return nil, ctx.Err()
	}
}

func (k *keyedMutex) release(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(k.m, key)
	}
}
