package outbound

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"

	"golang.org/x/sync/errgroup"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outcome"
)

// Review defaults.
const (
	DefaultDedupWindow       = 2 * time.Minute
	DefaultDedupConfidence   = 0.9
	DefaultDedupTimeout      = 15 * time.Second
	DefaultAuditTimeout      = 30 * time.Second
	DefaultClosingWindow     = 3 * time.Minute
	DefaultVerdictConfidence = 0.90
	DefaultGoodbyeGrace      = 1
	DefaultStopWindow        = 10 * time.Minute
	DefaultPause             = 30 * time.Minute
	DefaultLoopHits          = 3
	DefaultLoopWindow        = 30 * time.Minute
	DefaultRefusalHits       = 4
	DefaultRefusalWindow     = 30 * time.Minute
	DefaultSafetyThreshold   = 0.10
	DefaultQualityThreshold  = 0.90
)

// Default texts of the review.
const (
	// PauseText is the line sent for a bare [[PAUSE_30M]] marker.
	PauseText = "I'll step away for a while."
	// LoopNotice is sent when the loop detector pauses a conversation.
	LoopNotice = "This conversation is going in circles, so I'll pause here for a while."
	// SafetyNotice is sent instead of a reply the account-safety check
	// stopped.
	SafetyNotice = "I'd better not reply to that here."
	// QueuedImageText is the reply when generation was empty but an image
	// job was queued.
	QueuedImageText = "Started generating the image."
)

// ReviewConfig configures the model-backed reviewer. Zero fields take the
// defaults: the Default… constants, and the default texts ([PauseText],
// [RefusalText] and the rest) for the text fields.
type ReviewConfig struct {
	// Model runs the semantic dedup (agent.PurposeDedup) and the audit
	// (agent.PurposeAudit). nil skips both (the review is then the program
	// checks only).
	Model agent.Model
	// State stores stop windows, pauses and counters. Required.
	State  StateStore
	Clock  clock.Clock
	Logger *slog.Logger

	// AuditDisabled turns the audit off for a session (per-group config);
	// nil means on everywhere.
	AuditDisabled func(sessionKey string) bool
	// NoLoopDetection turns loop detection off; NoLoopPause keeps counting
	// hits but never pauses (temporary suppression off).
	NoLoopDetection bool
	NoLoopPause     bool

	DedupWindow     time.Duration // 2 min
	DedupConfidence float64       // 0.9
	DedupTimeout    time.Duration // 15 s
	AuditTimeout    time.Duration // 30 s
	ClosingWindow   time.Duration // 3 min
	// Confidence is the minimum confidence of the closing, group-stop,
	// loop and refusal verdicts (0.90).
	Confidence       float64
	GoodbyeGrace     int           // answered goodbyes: 1 (negative = 0)
	StopWindow       time.Duration // 10 min
	Pause            time.Duration // 30 min
	LoopHits         int           // 3
	LoopWindow       time.Duration // 30 min
	RefusalHits      int           // 4
	RefusalWindow    time.Duration // 30 min
	SafetyThreshold  float64       // 0.10
	QualityThreshold float64       // proactive_reply_threshold 0.90

	// Texts; "" means the package default. An empty LoopNotice can be
	// forced with NoLoopNotice.
	PauseText     string
	RefusalText   string
	FallbackText  string
	LoopNotice    string
	NoLoopNotice  bool
	SafetyNotice  string
	QueuedImgText string
}

// ModelReviewer is the default Reviewer: the ordered checks listed in the
// package doc, with semantic dedup and the audit model. Build it with
// [NewReviewer].
type ModelReviewer struct {
	cfg ReviewConfig
	clk clock.Clock
	log *slog.Logger
}

var _ Reviewer = (*ModelReviewer)(nil)

// NewReviewer returns the model-backed reviewer.
func NewReviewer(cfg ReviewConfig) (*ModelReviewer, error) {
	if cfg.State == nil {
		return nil, errors.New("outbound: ReviewConfig.State is required")
	}
	d := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	f := func(v *float64, def float64) {
		if *v <= 0 {
			*v = def
		}
	}
	n := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	d(&cfg.DedupWindow, DefaultDedupWindow)
	d(&cfg.DedupTimeout, DefaultDedupTimeout)
	d(&cfg.AuditTimeout, DefaultAuditTimeout)
	d(&cfg.ClosingWindow, DefaultClosingWindow)
	d(&cfg.StopWindow, DefaultStopWindow)
	d(&cfg.Pause, DefaultPause)
	d(&cfg.LoopWindow, DefaultLoopWindow)
	d(&cfg.RefusalWindow, DefaultRefusalWindow)
	f(&cfg.DedupConfidence, DefaultDedupConfidence)
	f(&cfg.Confidence, DefaultVerdictConfidence)
	f(&cfg.SafetyThreshold, DefaultSafetyThreshold)
	f(&cfg.QualityThreshold, DefaultQualityThreshold)
	n(&cfg.LoopHits, DefaultLoopHits)
	n(&cfg.RefusalHits, DefaultRefusalHits)
	if cfg.GoodbyeGrace == 0 {
		cfg.GoodbyeGrace = DefaultGoodbyeGrace
	} else if cfg.GoodbyeGrace < 0 {
		cfg.GoodbyeGrace = 0
	}
	cfg.PauseText = cmp.Or(cfg.PauseText, PauseText)
	cfg.RefusalText = cmp.Or(cfg.RefusalText, RefusalText)
	cfg.FallbackText = cmp.Or(cfg.FallbackText, FallbackText)
	cfg.LoopNotice = cmp.Or(cfg.LoopNotice, LoopNotice)
	if cfg.NoLoopNotice {
		cfg.LoopNotice = ""
	}
	cfg.SafetyNotice = cmp.Or(cfg.SafetyNotice, SafetyNotice)
	cfg.QueuedImgText = cmp.Or(cfg.QueuedImgText, QueuedImageText)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ModelReviewer{cfg: cfg, clk: clock.OrReal(cfg.Clock), log: log}, nil
}

// review carries one Review call's working state.
type review struct {
	p       Proposal
	now     time.Time
	replied outcome.Code
	v       Verdict // accumulates Usage, PauseUntil, StopWindowUntil
	mu      sync.Mutex
}

func (rv *review) addUsage(u ModelUsage) {
	rv.mu.Lock()
	rv.v.Usage = append(rv.v.Usage, u)
	rv.mu.Unlock()
}

// finish returns the verdict with the accumulated fields.
func (rv *review) finish(v Verdict) Verdict {
	v.Usage = rv.v.Usage
	v.PauseUntil = rv.v.PauseUntil
	v.StopWindowUntil = rv.v.StopWindowUntil
	v.Rewritten = rv.v.Rewritten
	return v
}

// Review runs the ordered checks (see the package doc). It returns an
// error only when the state store fails; a failing model never is an
// error (dedup passes, the audit verdict "failed" applies).
func (r *ModelReviewer) Review(ctx context.Context, p Proposal) (Verdict, error) {
	rv := &review{p: p, now: r.clk.Now(), replied: outcome.Replied}
	if !p.Direct {
		rv.replied = outcome.RepliedProactive
	}
	raw := p.Text
	body := bodyOf(raw)
	has := func(m string) bool { return strings.Contains(raw, m) }

	// 1. Dependency images the model says it cannot see.
	if has(MarkerNoImage) && p.HasImages && !p.FromDescriptions && !p.SideEffect {
		return rv.finish(Verdict{Regenerate: true, Reason: "the model could not see the attached images; regenerate from their descriptions"}), nil
	}
	// 2. Model-chosen silence.
	if has(MarkerSilent) && body == "" {
		if p.SideEffect || p.FactualResult || p.QueuedImage {
			return rv.finish(r.emptyFallback(rv, "silence refused: the turn had a side effect or a result to report")), nil
		}
		return rv.finish(Verdict{Code: IgnoredModelSilent, Reason: "the model chose to stay silent"}), nil
	}
	// 4 (pause first: a pause applies whatever happens to the text).
	if has(MarkerPause) && !p.Owner {
		if err := r.pause(ctx, rv, "pause marker"); err != nil {
			return Verdict{}, err
		}
	}
	// 3. Empty or refusal.
	switch {
	case has(MarkerRefuse) && !p.Direct:
		return rv.finish(Verdict{Code: IgnoredNoNaturalReply, Reason: "unprompted reply was a refusal"}), nil
	case body == "" && !p.Direct:
		return rv.finish(Verdict{Code: IgnoredNoNaturalReply, Reason: "unprompted reply was empty"}), nil
	case has(MarkerRefuse) && body == "":
		return rv.finish(Verdict{Send: true, Text: r.cfg.RefusalText, Code: rv.replied, Reason: "refusal marker; fixed refusal text sent"}), nil
	case has(MarkerPause) && body == "":
		return rv.finish(Verdict{Send: true, Text: r.cfg.PauseText, Code: rv.replied, Reason: "pause marker; pausing after one line"}), nil
	case body == "":
		return rv.finish(r.emptyFallback(rv, "generation was empty")), nil
	}
	text := StripControl(raw)
	// 5. Not what say already said.
	if len(p.Said) > 0 {
		rest, all := dropSaid(text, p.Said)
		if all {
			return rv.finish(Verdict{Code: outcome.Replied, Reason: "already said with say this turn"}), nil
		}
		text = rest
	}
	// 6–7. Dedup and audit in parallel.
	v, done, err := r.dedupAndAudit(ctx, rv, text)
	if err != nil || done {
		return rv.finish(v), err
	}
	// 9. A group stop in the last 10 minutes stops unprompted replies (a
	// window this very review opened does not stop this reply).
	if !p.Direct && p.Event.Chat.Kind == channel.Group && rv.v.StopWindowUntil.IsZero() {
		if _, active, err := activeState(ctx, r.cfg.State, p.SessionKey, "", StateStopWindow, rv.now); err != nil {
			return Verdict{}, fmt.Errorf("outbound: read stop window: %w", err)
		} else if active {
			return rv.finish(Verdict{Code: CodeStopRequested(), Reason: "a group stop was requested in the last 10 minutes"}), nil
		}
	}
	return rv.finish(v), nil
}

// emptyFallback is what replaces an empty reply: the queued-image line
// when an image job was queued, silence when say already spoke this turn
// or the reply was unprompted, else the fallback line.
func (r *ModelReviewer) emptyFallback(rv *review, why string) Verdict {
	switch {
	case rv.p.QueuedImage:
		return Verdict{Send: true, Text: r.cfg.QueuedImgText, Code: outcome.RepliedFallback, Reason: why + "; image job queued"}
	case len(rv.p.Said) > 0:
		return Verdict{Code: outcome.Replied, Reason: why + "; say already spoke this turn"}
	case !rv.p.Direct:
		return Verdict{Code: IgnoredNoNaturalReply, Reason: why}
	}
	return Verdict{Send: true, Text: r.cfg.FallbackText, Code: outcome.RepliedFallback, Reason: why + "; fallback line sent"}
}

// pause pauses replies to the sender for cfg.Pause.
func (r *ModelReviewer) pause(ctx context.Context, rv *review, reason string) error {
	until := rv.now.Add(r.cfg.Pause)
	err := extendState(ctx, r.cfg.State, State{SessionKey: rv.p.SessionKey, Subject: rv.p.Event.Sender.ID,
		Name: StatePause, Until: until, Value: reason}, rv.now)
	if err != nil {
		return fmt.Errorf("outbound: store pause: %w", err)
	}
	rv.v.PauseUntil = until
	return nil
}

// bodyOf is the visible text: control and split markers removed, trimmed.
func bodyOf(raw string) string {
	return strings.TrimSpace(dropMarkers.Replace(StripControl(raw)))
}

// dropMarkers removes the message and line markers (a Replacer is safe for
// concurrent use and costs a trie to build).
var dropMarkers = strings.NewReplacer(MsgMarker, "", LineMarker, "")

// dropSaid removes the message parts identical to a say line; all reports
// that nothing is left.
func dropSaid(text string, said []string) (string, bool) {
	seen := map[string]bool{}
	for _, s := range said {
		seen[normalize(s)] = true
	}
	var keep []string
	for part := range strings.SplitSeq(text, MsgMarker) {
		if n := normalize(strings.ReplaceAll(part, LineMarker, "\n")); n != "" && !seen[n] {
			keep = append(keep, part)
		}
	}
	if len(keep) == 0 {
		return "", true
	}
	return strings.Join(keep, MsgMarker), false
}

// normalize folds white space and case and drops a trailing full stop.
func normalize(s string) string {
	s = strings.ToLower(strings.Join(strings.Fields(s), " "))
	return strings.TrimRight(s, ".。!！ ")
}

// dedupResult is the parsed dedup answer.
type dedupResult struct {
	Verdict    string  `json:"verdict"`
	Confidence float64 `json:"confidence"`
	Text       string  `json:"text"`
}

// dedupAndAudit runs steps 6–8. done=true means v is final.
func (r *ModelReviewer) dedupAndAudit(ctx context.Context, rv *review, text string) (Verdict, bool, error) {
	p := rv.p
	var recent []BotReply
	for _, b := range p.Recent {
		if !b.At.IsZero() && rv.now.Sub(b.At) <= r.cfg.DedupWindow && rv.now.Sub(b.At) >= -time.Minute {
			recent = append(recent, b)
		}
	}
	doDedup := r.cfg.Model != nil && len(recent) > 0 && !p.Plugin
	items, err := r.auditItems(ctx, rv)
	if err != nil {
		return Verdict{}, true, err
	}
	doAudit := r.cfg.Model != nil && len(items) > 0

	var (
		dd       dedupResult
		dedupOK  bool
		audit    auditResult
		auditErr error
	)
	g, gctx := errgroup.WithContext(ctx)
	if doDedup {
		g.Go(func() error {
			dd, dedupOK = r.dedup(gctx, rv, text, recent)
			return nil
		})
	}
	if doAudit {
		g.Go(func() error {
			audit, auditErr = r.audit(gctx, rv, text, items)
			return nil
		})
	}
	_ = g.Wait()
	if err := ctx.Err(); err != nil {
		return Verdict{}, true, err
	}

	// 7. Semantic dedup.
	if dedupOK && dd.Confidence >= r.cfg.DedupConfidence {
		switch strings.ToLower(dd.Verdict) {
		case "drop":
			if !p.Direct {
				return Verdict{Code: IgnoredDuplicateReply, Reason: "repeats a reply sent in the last 2 minutes"}, true, nil
			}
			r.log.Debug("dedup drop ignored for a direct reply", "session", p.SessionKey)
		case "rewrite":
			if nt := strings.TrimSpace(StripControl(dd.Text)); nt != "" && nt != text {
				text = nt
				rv.v.Rewritten = true
				if doAudit {
					audit, auditErr = r.audit(ctx, rv, text, items)
				}
			}
		}
	}
	send := Verdict{Send: true, Text: text, Code: rv.replied, Reason: "reply sent"}
	if rv.v.Rewritten {
		send.Reason = "reply sent (rewritten by semantic dedup)"
	}
	if !doAudit {
		return send, false, nil
	}
	// 8. The audit verdict.
	v, done, err := r.applyAudit(ctx, rv, audit, auditErr, items)
	if err != nil || done {
		return v, true, err
	}
	return send, false, nil
}

// auditItem names one audit judgement.
type auditItem string

const (
	itemClosing   auditItem = "closing"
	itemGroupStop auditItem = "group_stop"
	itemLoop      auditItem = "loop"
	itemSafety    auditItem = "safety"
	itemQuality   auditItem = "quality"
	itemRefusal   auditItem = "refusal"
)

// auditItems returns what the audit judges for this proposal; none means
// the call is skipped. The refusal judgement rides along but never causes
// a call by itself.
func (r *ModelReviewer) auditItems(ctx context.Context, rv *review) ([]auditItem, error) {
	p := rv.p
	if r.cfg.AuditDisabled != nil && r.cfg.AuditDisabled(p.SessionKey) {
		return nil, nil
	}
	var items []auditItem
	switch p.Event.Chat.Kind {
	case channel.Private:
		last, err := r.lastBotMessage(ctx, rv)
		if err != nil {
			return nil, err
		}
		if !last.IsZero() && rv.now.Sub(last) <= r.cfg.ClosingWindow {
			items = append(items, itemClosing)
		}
	case channel.Group:
		if p.MentionsBot || p.Direct {
			items = append(items, itemGroupStop)
		}
	}
	if !r.cfg.NoLoopDetection && !p.Owner && len(p.Recent) > 0 && rv.now.Sub(p.Recent[len(p.Recent)-1].At) <= r.cfg.LoopWindow {
		items = append(items, itemLoop)
	}
	if p.AccountRisk {
		items = append(items, itemSafety)
	}
	if !p.Direct {
		items = append(items, itemQuality)
	}
	if len(items) == 0 {
		return nil, nil
	}
	return append(items, itemRefusal), nil
}

// lastBotMessage is the newest of the state store's record, the
// proposal's LastBotMessage and its recent replies.
func (r *ModelReviewer) lastBotMessage(ctx context.Context, rv *review) (time.Time, error) {
	last, err := lastBotMessage(ctx, r.cfg.State, rv.p.SessionKey)
	if err != nil {
		return time.Time{}, fmt.Errorf("outbound: read last bot message: %w", err)
	}
	if rv.p.LastBotMessage.After(last) {
		last = rv.p.LastBotMessage
	}
	for _, b := range rv.p.Recent {
		if b.At.After(last) {
			last = b.At
		}
	}
	return last, nil
}

// auditResult is the audit model's JSON answer. Pointers tell a missing
// judgement from a zero one.
type auditResult struct {
	Closing *struct {
		Kind       string  `json:"kind"`
		Confidence float64 `json:"confidence"`
	} `json:"closing"`
	GroupStop *struct {
		Requested  bool    `json:"requested"`
		Confidence float64 `json:"confidence"`
	} `json:"group_stop"`
	Loop *struct {
		Hit        bool    `json:"hit"`
		Confidence float64 `json:"confidence"`
	} `json:"loop"`
	Safety *struct {
		Score *float64 `json:"score"`
	} `json:"safety"`
	Quality *struct {
		OK             bool     `json:"ok"`
		Problems       []string `json:"problems"`
		SendConfidence float64  `json:"send_confidence"`
	} `json:"quality"`
	Refusal *struct {
		IsRefusal  bool    `json:"is_refusal"`
		Confidence float64 `json:"confidence"`
	} `json:"refusal"`
}

// errUnparsable marks an audit or dedup answer that is not the JSON asked
// for.
var errUnparsable = errors.New("outbound: unparsable model answer")

// parseJSON decodes the first JSON object in text (models sometimes wrap it
// in a code fence or prose).
func parseJSON(text string, v any) error {
	i, j := strings.Index(text, "{"), strings.LastIndex(text, "}")
	if i < 0 || j < i {
		return errUnparsable
	}
	if err := json.Unmarshal([]byte(text[i:j+1]), v); err != nil {
		return fmt.Errorf("%w: %w", errUnparsable, err)
	}
	return nil
}

func (r *ModelReviewer) call(ctx context.Context, rv *review, purpose string, timeout time.Duration, system, user string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := r.cfg.Model.Generate(cctx, agent.Request{Purpose: purpose, JSON: true, Messages: []agent.Message{
		{Role: agent.RoleSystem, Content: system},
		{Role: agent.RoleUser, Content: user},
	}})
	if err != nil {
		return "", err
	}
	if resp == nil {
		return "", errUnparsable
	}
	rv.addUsage(ModelUsage{Purpose: purpose, Model: resp.Model, Usage: resp.Usage})
	return resp.Text, nil
}

const dedupSystem = `You compare a chat bot's draft reply with the replies it sent in the last minutes.
Answer with one JSON object: {"verdict":"keep|drop|rewrite","confidence":0..1,"text":"rewritten reply when verdict is rewrite"}.
drop: the draft says the same as an earlier reply. rewrite: keep only what is new. keep: otherwise.`

// dedup runs the semantic dedup; ok=false means it passes (error,
// timeout, unparsable).
func (r *ModelReviewer) dedup(ctx context.Context, rv *review, text string, recent []BotReply) (dedupResult, bool) {
	var b strings.Builder
	b.WriteString("Earlier replies:\n")
	for _, x := range recent {
		var at [len(time.TimeOnly)]byte
		b.WriteString("- [")
		b.Write(x.At.UTC().AppendFormat(at[:0], time.TimeOnly))
		b.WriteString("] ")
		b.WriteString(oneLine(x.Text))
		b.WriteByte('\n')
	}
	b.WriteString("\nDraft reply:\n")
	b.WriteString(text)
	out, err := r.call(ctx, rv, agent.PurposeDedup, r.cfg.DedupTimeout, dedupSystem, b.String())
	var res dedupResult
	if err == nil {
		err = parseJSON(out, &res)
	}
	if err != nil {
		r.log.Info("semantic dedup skipped", "session", rv.p.SessionKey, "err", err)
		return dedupResult{}, false
	}
	return res, true
}

// audit makes the single audit call.
func (r *ModelReviewer) audit(ctx context.Context, rv *review, text string, items []auditItem) (auditResult, error) {
	var sys strings.Builder
	sys.WriteString("You review a chat bot's reply before it is sent. Answer with one JSON object with exactly these keys:\n")
	for _, it := range items {
		switch it {
		case itemClosing:
			sys.WriteString(`"closing": {"kind": "none|goodbye|stop", "confidence": 0..1} — is the user ending the private conversation or asking the bot to stop replying?` + "\n")
		case itemGroupStop:
			sys.WriteString(`"group_stop": {"requested": bool, "confidence": 0..1} — does the message ask the bot to stop talking in this group?` + "\n")
		case itemLoop:
			sys.WriteString(`"loop": {"hit": bool, "confidence": 0..1} — is this exchange going in circles without content?`)
			if rv.p.PeerIsBot {
				sys.WriteString(" The other side is a bot: a dense exchange without purpose counts too.")
			}
			sys.WriteString("\n")
		case itemSafety:
			sys.WriteString(`"safety": {"score": 0..1} — how safe is sending this reply for the bot's account (0 = certain ban)?` + "\n")
		case itemQuality:
			sys.WriteString(`"quality": {"ok": bool, "problems": ["contradiction"|"off_topic"|"truncated"|"harmful_advice"], "send_confidence": 0..1} — is this unprompted reply worth sending?` + "\n")
		case itemRefusal:
			sys.WriteString(`"refusal": {"is_refusal": bool, "confidence": 0..1} — is the reply a refusal?` + "\n")
		}
	}
	var u strings.Builder
	if len(rv.p.Transcript) > 0 {
		u.WriteString("Conversation:\n")
		for _, l := range rv.p.Transcript {
			who := l.Speaker
			if l.FromBot {
				who = "bot"
			}
			u.WriteString(cmp.Or(who, "someone"))
			u.WriteString(": ")
			u.WriteString(oneLine(l.Text))
			u.WriteByte('\n')
		}
		u.WriteString("\n")
	}
	u.WriteString("Message: ")
	u.WriteString(oneLine(rv.p.Event.Text()))
	u.WriteString("\n\nReply: ")
	u.WriteString(text)
	out, err := r.call(ctx, rv, agent.PurposeAudit, r.cfg.AuditTimeout, sys.String(), u.String())
	if err != nil {
		return auditResult{}, err
	}
	var res auditResult
	if err := parseJSON(out, &res); err != nil {
		return auditResult{}, err
	}
	return res, nil
}

// applyAudit applies the audit verdicts in their fixed order: failure,
// private closing or stop, group stop, loops, account safety, quality,
// refusals.
func (r *ModelReviewer) applyAudit(ctx context.Context, rv *review, a auditResult, auditErr error, items []auditItem) (Verdict, bool, error) {
	p := rv.p
	conf := r.cfg.Confidence
	has := func(it auditItem) bool {
		for _, x := range items {
			if x == it {
				return true
			}
		}
		return false
	}
	// 1. Failure.
	if auditErr == nil && has(itemQuality) && a.Quality == nil {
		auditErr = fmt.Errorf("%w: no quality judgement", errUnparsable)
	}
	if auditErr != nil {
		r.log.Warn("audit failed", "session", p.SessionKey, "err", auditErr)
		if !p.Direct {
			return Verdict{Code: IgnoredAuditUnavailable, Reason: "audit unavailable: " + auditErr.Error()}, true, nil
		}
		return Verdict{}, false, nil
	}
	user := p.Event.Sender.ID
	// 2. Private closing / stop.
	if has(itemClosing) && a.Closing != nil && a.Closing.Confidence >= conf {
		switch strings.ToLower(a.Closing.Kind) {
		case "stop":
			if !p.Owner {
				if err := r.pause(ctx, rv, "stop requested"); err != nil {
					return Verdict{}, true, err
				}
			}
			return Verdict{Code: CodeStopRequested(), Reason: "the user asked the bot to stop replying"}, true, nil
		case "goodbye":
			n, err := countHit(ctx, r.cfg.State, p.SessionKey, user, StateGoodbyes, rv.now, DefaultPause)
			if err != nil {
				return Verdict{}, true, fmt.Errorf("outbound: count goodbyes: %w", err)
			}
			if n > r.cfg.GoodbyeGrace {
				return Verdict{Code: IgnoredConversationClosed, Reason: "the conversation was closed with a goodbye"}, true, nil
			}
		}
	}
	// 3. Group stop: opens the window, this reply still goes out.
	if has(itemGroupStop) && a.GroupStop != nil && a.GroupStop.Requested && a.GroupStop.Confidence >= conf {
		until := rv.now.Add(r.cfg.StopWindow)
		if err := extendState(ctx, r.cfg.State, State{SessionKey: p.SessionKey, Name: StateStopWindow, Until: until,
			Value: "group stop requested"}, rv.now); err != nil {
			return Verdict{}, true, fmt.Errorf("outbound: open stop window: %w", err)
		}
		rv.v.StopWindowUntil = until
	}
	// 4. Loops.
	if has(itemLoop) && a.Loop != nil && a.Loop.Hit && a.Loop.Confidence >= conf {
		n, err := countHit(ctx, r.cfg.State, p.SessionKey, user, StateLoopHits, rv.now, r.cfg.LoopWindow)
		if err != nil {
			return Verdict{}, true, fmt.Errorf("outbound: count loop hits: %w", err)
		}
		if n >= r.cfg.LoopHits && !r.cfg.NoLoopPause && !p.Owner {
			if err := r.pause(ctx, rv, "reply loop"); err != nil {
				return Verdict{}, true, err
			}
			if err := resetHits(ctx, r.cfg.State, p.SessionKey, user, StateLoopHits, rv.now); err != nil {
				return Verdict{}, true, fmt.Errorf("outbound: reset loop hits: %w", err)
			}
			v := Verdict{Code: IgnoredAIReplyLoop, Reason: fmt.Sprintf("reply loop: %d hits in %s; paused", n, r.cfg.LoopWindow)}
			if r.cfg.LoopNotice != "" {
				v.Send, v.Text = true, r.cfg.LoopNotice
			}
			return v, true, nil
		}
	}
	// 5. Account safety.
	if has(itemSafety) && a.Safety != nil && a.Safety.Score != nil && *a.Safety.Score < r.cfg.SafetyThreshold {
		return Verdict{Send: true, Text: r.cfg.SafetyNotice, Code: RepliedSafetyNotice,
			Reason: fmt.Sprintf("account-safety score %.2f below %.2f; neutral notice sent", *a.Safety.Score, r.cfg.SafetyThreshold)}, true, nil
	}
	// 6. Quality, unprompted only.
	if has(itemQuality) && !p.Direct {
		q := a.Quality
		if !q.OK || len(q.Problems) > 0 || q.SendConfidence < r.cfg.QualityThreshold {
			reason := fmt.Sprintf("quality gate: send confidence %.2f", q.SendConfidence)
			if len(q.Problems) > 0 {
				reason += "; problems: " + strings.Join(q.Problems, ", ")
			}
			return Verdict{Code: IgnoredProactiveReplyQuality, Reason: reason}, true, nil
		}
	}
	// 7. Pass; count refusals.
	if a.Refusal != nil && a.Refusal.IsRefusal && a.Refusal.Confidence >= conf && !p.Owner {
		n, err := countHit(ctx, r.cfg.State, p.SessionKey, user, StateRefusals, rv.now, r.cfg.RefusalWindow)
		if err != nil {
			return Verdict{}, true, fmt.Errorf("outbound: count refusals: %w", err)
		}
		if n >= r.cfg.RefusalHits {
			if err := r.pause(ctx, rv, "repeated refusals"); err != nil {
				return Verdict{}, true, err
			}
			if err := resetHits(ctx, r.cfg.State, p.SessionKey, user, StateRefusals, rv.now); err != nil {
				return Verdict{}, true, fmt.Errorf("outbound: reset refusals: %w", err)
			}
		}
	}
	return Verdict{}, false, nil
}

func oneLine(s string) string {
	if isOneLine(s) {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// isOneLine reports whether oneLine(s) is s: no space but single ' '
// between words, none at either end.
func isOneLine(s string) bool {
	prevSpace := true // at the start, a space would be leading
	for _, r := range s {
		switch {
		case r == ' ':
			if prevSpace {
				return false
			}
			prevSpace = true
		case unicode.IsSpace(r):
			return false
		default:
			prevSpace = false
		}
	}
	return !prevSpace || s == ""
}
