package outbound

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outcome"
)

// Reply is a reviewed reply to deliver.
type Reply struct {
	// TurnID keys the ledger (the queue item id).
	TurnID     string
	SessionKey string
	Channel    channel.Channel
	Chat       channel.Chat
	// Text is the reviewed reply (split by the sender). Ignored when the
	// turn already has a stored draft: a resumed turn sends its draft.
	Text string
	// ReplyTo is quoted by the first chunk only.
	ReplyTo string
	// Mentions are mentioned by the first chunk only.
	Mentions []string
	// Code and Reason are stored with the draft and returned in Delivery.
	Code   outcome.Code
	Reason string
	// FirstAttempt says no earlier attempt of this turn can have written a
	// draft or ledger rows (the queue item's first claim), so the sender
	// skips reading them.
	FirstAttempt bool

	// CurrentMessageID is the message being answered: a model-written
	// [persona-reply:<id>] marker is honoured for it (or for an id
	// KnownMessage accepts). "" falls back to ReplyTo.
	CurrentMessageID string
	// KnownMessage reports whether id is a message in the chat's history
	// (nil: none is).
	KnownMessage func(id string) bool
	// TriggerRecalled: the message being answered was recalled, so the
	// first chunk does not quote it.
	TriggerRecalled bool
	// TargetsOther: the reply addresses another participant; the first
	// chunk then carries neither ReplyTo nor Mentions (model-written
	// markers still apply).
	TargetsOther bool
	// Media are attached to the last chunk.
	Media []channel.Media
	// Typing keeps the channel's typing indicator on (channel.Typer) from
	// the start of the send until it returns: keepalive every 5 s, safety
	// TTL 2 min. The caller decides which turns show typing.
	Typing bool
	// Guard is the send-time guard, run once before the first chunk (never
	// after any chunk of the turn went out): chat unavailable, sender
	// suppressed, superseded or merged — the caller decides. A non-empty
	// code stops the reply: nothing is sent and Delivery.Stopped is set.
	Guard func(ctx context.Context) (code outcome.Code, reason string)
	// Kind labels the message for hooks and logs ("reply", "say",
	// "notice", "push"); informational.
	Kind string
}

// Delivery is the result of a completed send.
type Delivery struct {
	// MessageIDs are the platform ids of every chunk, in order (reused from
	// the ledger for chunks delivered by an earlier attempt).
	MessageIDs []string
	// Chunks is the number of chunks in the draft; Skipped of them were
	// already delivered (or unknown after a crash) and not sent again;
	// Unknown of those were being sent when an earlier attempt stopped and
	// nothing could settle whether they arrived.
	Chunks  int
	Skipped int
	Unknown int
	// Code and Reason come from the stored draft.
	Code   outcome.Code
	Reason string
	// FirstSend and FirstAck time the first chunk sent by this call.
	FirstSend time.Time
	FirstAck  time.Time

	// Stopped: a step before the platform call ended the reply (send
	// policy, BeforeSend hook, send-time guard, merged-forward safety
	// check, lane drop cooldown). Code and Reason then say which; the
	// caller records them as the outcome. MessageIDs lists anything an
	// earlier attempt delivered.
	Stopped bool
	// Forwarded: the reply went out as one merged-forward card.
	Forwarded bool
	// Compressions counts the compression calls made while shaping; Usage
	// lists their tokens.
	Compressions int
	Usage        []ModelUsage
}

// SnoozeError says the send must wait until Until without charging an
// attempt: the chat's send lane is backing off. It unwraps to a
// *channel.RateLimitedError with RetryAfter = Until − now, so a caller that
// snoozes rate-limited items handles it unchanged.
type SnoozeError struct {
	Lane  Lane
	Until time.Time
	Err   error
}

func (e *SnoozeError) Error() string {
	return fmt.Sprintf("outbound: %s lane backing off until %s", e.Lane, e.Until.UTC().Format(time.RFC3339))
}

// Unwrap returns the rate-limit error.
func (e *SnoozeError) Unwrap() error { return e.Err }

// SendError wraps a failed chunk with the delivery so far.
type SendError struct {
	Slot int
	// Delivered are the chunks (message ids) delivered before the failure.
	Delivered []string
	Err       error
}

func (e *SendError) Error() string { return fmt.Sprintf("outbound: chunk %d: %v", e.Slot, e.Err) }

// Unwrap returns the channel error.
func (e *SendError) Unwrap() error { return e.Err }

// Sender delivers replies.
type Sender interface {
	Send(ctx context.Context, r Reply) (Delivery, error)
}

// SenderFunc adapts a function to a Sender.
type SenderFunc func(ctx context.Context, r Reply) (Delivery, error)

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, r Reply) (Delivery, error) { return f(ctx, r) }

// Pacing defaults: from the second chunk, wait max(PaceMin, PacePerRune ×
// runes of the next chunk), capped at PaceMax.
const (
	PaceMin     = 300 * time.Millisecond
	PacePerRune = 100 * time.Millisecond
	PaceMax     = 6 * time.Second
)

// Pace returns the wait before sending a chunk of text that is not the first.
func Pace(text string) time.Duration {
	d := time.Duration(utf8.RuneCountInString(text)) * PacePerRune
	return min(PaceMax, max(PaceMin, d))
}

// Send-stage defaults.
const (
	DefaultMediaAttempts    = 3
	DefaultMediaRetryStep   = 700 * time.Millisecond
	DefaultRateLimitInline  = PaceMax
	DefaultForwardMinChars  = 900
	DefaultForwardMinChunks = 5
	DefaultTypingKeepalive  = 5 * time.Second
	DefaultTypingTTL        = 2 * time.Minute
)

// ForwardSlot is the ledger slot of a merged-forward card: the card stands
// for every chunk of the draft. It is a slot number no chunk reaches (a
// reply has at most a few dozen chunks), so a Ledger that numbers slots
// from 0 — and keeps its own rows, such as a turn's draft, below 0 —
// stores it like any chunk.
const ForwardSlot = 1 << 20

// ForwardConfig configures merged-forward cards, used where the
// channel implements channel.ForwardSender.
type ForwardConfig struct {
	// Off never sends a card (persona styles that must look like a group
	// member).
	Off bool
	// MinChars and MinChunks are the threshold: a reply of at least
	// MinChars runes in all (900) or MinChunks chunks (5) goes out as a
	// card.
	MinChars  int
	MinChunks int
	// Name is the author name shown on the card's nodes.
	Name string
	// Check is the card text's own account-safety check. ok=false stops
	// the reply (DroppedForwardUnsafe, nothing sent); an error falls back
	// to ordinary chunks. nil skips the check.
	Check func(ctx context.Context, text string) (ok bool, err error)
}

// SenderConfig configures the default chunked sender. Zero fields take the
// defaults (the Default… constants).
type SenderConfig struct {
	// Ledger is required: it makes every chunk go out at most once.
	Ledger Ledger
	// Clock paces chunks and times retries (nil = real).
	Clock clock.Clock
	// Split tunes the splitter.
	Split SplitOptions
	// NoPacing sends chunks back to back (tests, benchmarks).
	NoPacing bool
	// AfterSend is called after each delivered chunk (the pipeline writes
	// the bot's message into history here). For a merged-forward card it
	// is called once per chunk with the card's receipt.
	AfterSend func(ctx context.Context, r Reply, n int, c Chunk, rc channel.Receipt)
	Logger    *slog.Logger

	// Compressor shortens replies that would need more than MaxChunks
	// chunks (see ShapeReply); nil never compresses.
	Compressor      agent.Model
	MaxChunks       int
	CompressTimeout time.Duration
	CompressCalls   int

	// Secrets are credential values masked in every outgoing text (with
	// the built-in token, key and cookie patterns).
	Secrets []string
	// Policy is the send policy; the zero value allows everything.
	Policy SendPolicy
	// Hooks run in order on every new reply; an error cancels it.
	Hooks []BeforeSend
	// Forward configures merged-forward cards.
	Forward ForwardConfig
	// State, when set, records the time of the bot's last message per
	// session (StateLastBotMessage) for the review's closing check.
	State StateStore
	// Lanes, when set, backs off failing group chats (text and media lanes)
	// and drops sends in a lane's cooldown.
	Lanes *Lanes
	// RenewMedia renews locally served media share links (to at least 10
	// minutes ahead) before every attempt of a chunk with media.
	RenewMedia func(ctx context.Context, media []channel.Media) ([]channel.Media, error)

	MediaAttempts   int           // 3 attempts in all on media-validation rejections
	MediaRetryStep  time.Duration // 700 ms × attempt
	RateLimitInline time.Duration // rate-limit waits up to 6 s happen inline
	TypingKeepalive time.Duration // 5 s
	TypingTTL       time.Duration // 2 min
}

// ChunkSender is the default Sender and the single exit for outgoing
// messages: mask secrets, strip control markers, resolve quote and mention
// markers, send policy, BeforeSend hooks, shaping, the send-time guard,
// then each chunk through the ledger (or one merged-forward card), one
// reply per session at a time.
type ChunkSender struct {
	cfg   SenderConfig
	exit  *Exit
	clk   clock.Clock
	log   *slog.Logger
	mu    sync.Mutex
	locks map[string]*sessionLock
}

type sessionLock struct {
	mu   sync.Mutex
	refs int
}

// NewSender returns the default chunked sender.
func NewSender(cfg SenderConfig) (*ChunkSender, error) {
	if cfg.Ledger == nil {
		return nil, errors.New("outbound: SenderConfig.Ledger is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.MediaAttempts <= 0 {
		cfg.MediaAttempts = DefaultMediaAttempts
	}
	if cfg.MediaRetryStep <= 0 {
		cfg.MediaRetryStep = DefaultMediaRetryStep
	}
	if cfg.RateLimitInline <= 0 {
		cfg.RateLimitInline = DefaultRateLimitInline
	}
	if cfg.Forward.MinChars <= 0 {
		cfg.Forward.MinChars = DefaultForwardMinChars
	}
	if cfg.Forward.MinChunks <= 0 {
		cfg.Forward.MinChunks = DefaultForwardMinChunks
	}
	if cfg.TypingKeepalive <= 0 {
		cfg.TypingKeepalive = DefaultTypingKeepalive
	}
	if cfg.TypingTTL <= 0 {
		cfg.TypingTTL = DefaultTypingTTL
	}
	exit, err := NewExit(ExitConfig{Ledger: cfg.Ledger, Secrets: cfg.Secrets, Clock: cfg.Clock, Logger: log})
	if err != nil {
		return nil, err
	}
	return &ChunkSender{cfg: cfg, exit: exit, clk: clock.OrReal(cfg.Clock), log: log, locks: map[string]*sessionLock{}}, nil
}

func (s *ChunkSender) lock(key string) func() {
	s.mu.Lock()
	l := s.locks[key]
	if l == nil {
		l = &sessionLock{}
		s.locks[key] = l
	}
	l.refs++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, key)
		}
		s.mu.Unlock()
	}
}

// Fingerprint identifies one chunk of one turn: SHA-256 over platform, bot,
// chat, slot, text, quote, mentions and media references.
func Fingerprint(platform, bot string, chat channel.Chat, slot int, c Chunk) string {
	h := sha256.New()
	w := func(s string) { h.Write([]byte(strconv.Itoa(len(s)) + ":" + s)) }
	w(platform)
	w(bot)
	w(chat.String())
	w(strconv.Itoa(slot))
	w(c.Text)
	w(c.ReplyTo)
	for _, m := range c.Mentions {
		w("@" + m)
	}
	for _, m := range c.Media {
		w("media:" + m.URL + "|" + m.FileID + "|" + m.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// stopped is the Delivery of a reply a pre-send step ended.
func stopped(code outcome.Code, reason string) Delivery {
	return Delivery{Stopped: true, Code: code, Reason: reason}
}

// buildDraft runs the exit steps on a new reply and shapes it. A non-nil
// *Delivery means a step stopped it.
func (s *ChunkSender) buildDraft(ctx context.Context, r Reply) (Draft, *Delivery, Shaped) {
	platform := r.Channel.Name()
	text := StripControl(MaskSecrets(r.Text, s.cfg.Secrets))
	current := r.CurrentMessageID
	if current == "" {
		current = r.ReplyTo
	}
	text, markReply := ResolveMarkers(text, current, r.KnownMessage)
	if ok, rule := s.cfg.Policy.Allowed(platform, r.Chat, r.SessionKey); !ok {
		d := stopped(IgnoredSendPolicy, fmt.Sprintf("send policy denies %s (rule %d)", r.Chat, rule))
		return Draft{}, &d, Shaped{}
	}
	replyTo, mentions := r.ReplyTo, slices.Clone(r.Mentions)
	if r.TargetsOther {
		replyTo, mentions = "", nil
	}
	if r.TriggerRecalled && replyTo == current {
		replyTo = ""
	}
	if markReply != "" && (!r.TriggerRecalled || markReply != current) {
		replyTo = markReply
	}
	m := &Message{TurnID: r.TurnID, SessionKey: r.SessionKey, Platform: platform, Chat: r.Chat,
		Text: text, ReplyTo: replyTo, Mentions: mentions}
	for _, h := range s.cfg.Hooks {
		if err := h(ctx, m); err != nil {
			d := stopped(IgnoredCancelledByHook, "cancelled by a BeforeSend hook: "+err.Error())
			return Draft{}, &d, Shaped{}
		}
	}
	text = StripControl(MaskSecrets(m.Text, s.cfg.Secrets))
	rich := false
	// Looked for through wrappers: r.Channel is the exit bound to the
	// platform's channel.
	if rt, ok := channel.As[RichTexter](r.Channel); ok {
		rich = rt.RichText()
	}
	sh := ShapeReply(ctx, text, channel.LimitOf(r.Channel), ShapeOptions{Split: s.cfg.Split, RichText: rich,
		MaxChunks: s.cfg.MaxChunks, Compressor: s.cfg.Compressor, CompressTimeout: s.cfg.CompressTimeout,
		CompressCalls: s.cfg.CompressCalls})
	draft := Draft{TurnID: r.TurnID, SessionKey: r.SessionKey, Chat: r.Chat, Code: r.Code, Reason: r.Reason}
	for i, t := range sh.Chunks {
		c := Chunk{Text: t}
		if i == 0 {
			c.ReplyTo, c.Mentions = m.ReplyTo, m.Mentions
		}
		draft.Chunks = append(draft.Chunks, c)
	}
	if len(r.Media) > 0 {
		if len(draft.Chunks) == 0 {
			draft.Chunks = append(draft.Chunks, Chunk{ReplyTo: m.ReplyTo, Mentions: m.Mentions})
		}
		draft.Chunks[len(draft.Chunks)-1].Media = slices.Clone(r.Media)
	}
	return draft, nil, sh
}

// Send delivers the reply. A new reply passes the exit steps (secrets
// masked, control markers stripped, markers resolved, send policy, hooks),
// is shaped and persisted as the turn's draft before the first chunk; a
// turn that already has a draft resumes it. The send-time guard runs before
// the first chunk only. Every chunk leaves through an [ExitChannel]: the
// one the caller passed as Reply.Channel (the pipeline binds one to its
// Exit), or one the sender binds to an Exit over its own Ledger, Secrets
// and AfterSend. There the ledger makes each chunk go out at most once;
// chunks an earlier attempt delivered are skipped and their ids reused,
// and one it left unsettled is looked for and sent again only when proven
// absent (Delivery.Unknown counts the ones nothing could settle).
//
// Errors: a *SendError wrapping the channel error (classify it with
// channel.Classify: offline → snooze the turn, rate limited → snooze until
// RetryAfter, definitive → dropped_send_rejected, else retry); a
// *SnoozeError (wrapped) when the chat's lane is backing off.
func (s *ChunkSender) Send(ctx context.Context, r Reply) (Delivery, error) {
	if r.Channel == nil {
		return Delivery{}, errors.New("outbound: reply has no channel")
	}
	unlock := s.lock(r.SessionKey)
	defer unlock()

	lane := LaneText
	if len(r.Media) > 0 {
		lane = LaneMedia
	}
	useLane := s.cfg.Lanes != nil && r.Chat.Kind == channel.Group
	if useLane {
		st, err := s.cfg.Lanes.Check(ctx, r.SessionKey, lane)
		if err != nil {
			return Delivery{}, fmt.Errorf("outbound: read lane: %w", err)
		}
		if st.Drop {
			return stopped(DroppedOutboundDelivery, fmt.Sprintf("%s lane in drop cooldown until %s", lane, st.Until.UTC().Format(time.RFC3339))), nil
		}
		if st.Wait {
			return Delivery{}, s.snooze(lane, st.Until)
		}
	}
	xc := s.bind(r)

	var (
		draft   Draft
		resumed bool
		sh      Shaped
		err     error
	)
	if !r.FirstAttempt {
		if draft, resumed, err = s.cfg.Ledger.LoadDraft(ctx, r.TurnID); err != nil {
			return Delivery{}, fmt.Errorf("outbound: load draft: %w", err)
		}
	}
	if !resumed {
		var stop *Delivery
		if draft, stop, sh = s.buildDraft(ctx, r); stop != nil {
			return *stop, nil
		}
	}
	slots, err := xc.Slots(ctx)
	if err != nil {
		return Delivery{}, err
	}
	if len(slots) == 0 && r.Guard != nil {
		if code, reason := r.Guard(ctx); code != "" {
			return stopped(code, reason), nil
		}
	}
	// Typing starts before the draft (and maybe the first intent) is
	// stored, so that the indicator call is not inside the window where a
	// crash leaves the first chunk's fate unknown.
	typer, canType := channel.As[channel.Typer](r.Channel)
	if r.Typing && canType && len(draft.Chunks) > 0 {
		tc := StartTyping(ctx, s.clk, typer, draft.Chat, s.cfg.TypingKeepalive, s.cfg.TypingTTL)
		defer tc.Stop()
	}
	if !resumed {
		if len(slots) == 0 && len(draft.Chunks) > 0 && !s.mayForward(xc, draft) {
			// Stored with the first chunk's intent, in one write where the
			// ledger can.
			xc.Stage(draft)
		} else {
			stored, err := s.cfg.Ledger.SaveDraft(ctx, draft)
			if err != nil {
				return Delivery{}, fmt.Errorf("outbound: save draft: %w", err)
			}
			draft = stored
		}
	}
	d := Delivery{Chunks: len(draft.Chunks), Code: draft.Code, Reason: draft.Reason, Compressions: sh.Compressions, Usage: sh.Usage}

	// A merged-forward card stands for every chunk.
	if fd, done, err := s.forward(ctx, r, xc, draft, slots, &d); done || err != nil {
		if err == nil {
			s.delivered(ctx, r, useLane, lane, fd)
		}
		return fd, err
	}

	sentThisCall := 0
	for n, c := range draft.Chunks {
		sl, had := slots[n]
		if sentThisCall > 0 && !s.cfg.NoPacing && (!had || sl.State != SlotSent) {
			if canType {
				_ = typer.Typing(ctx, draft.Chat)
			}
			if !clock.Sleep(s.clk, ctx.Done(), Pace(c.Text)) {
				return d, &SendError{Slot: n, Delivered: d.MessageIDs, Err: ctx.Err()}
			}
		}
		start := s.clk.Now()
		res, err := s.attempt(ctx, xc, n, channel.Outgoing{
			Chat: draft.Chat, Text: c.Text, ReplyTo: c.ReplyTo, Mentions: c.Mentions, Media: c.Media,
		})
		if err != nil {
			// A send whose fate is unknown (a relayed send whose holder
			// died) says nothing about the platform: no lane backoff.
			if ctx.Err() == nil && useLane && channel.Classify(err) == channel.ClassTransient &&
				!errors.Is(err, channel.ErrUnconfirmed) {
				return s.laneFailure(ctx, r, lane, n, d, err)
			}
			return d, &SendError{Slot: n, Delivered: d.MessageIDs, Err: err}
		}
		d.MessageIDs = append(d.MessageIDs, res.Receipt.MessageIDs...)
		if res.Skipped {
			d.Skipped++
			if res.Unknown {
				d.Unknown++
			}
			continue
		}
		if d.FirstSend.IsZero() {
			d.FirstSend, d.FirstAck = start, s.clk.Now()
		}
		sentThisCall++
	}
	s.delivered(ctx, r, useLane, lane, d)
	return d, nil
}

// bind returns the exit channel the reply's chunks leave through: the one
// the caller bound (Reply.Channel), else one bound to the sender's own
// exit, which reports delivered chunks to AfterSend.
func (s *ChunkSender) bind(r Reply) *ExitChannel {
	if xc, ok := r.Channel.(*ExitChannel); ok {
		return xc
	}
	e := *s.exit
	if s.cfg.AfterSend != nil {
		e.cfg.Delivered = func(ctx context.Context, sent Sent) {
			s.cfg.AfterSend(ctx, r, max(sent.Slot, 0)+sent.Node, Chunk{Text: sent.Out.Text, ReplyTo: sent.Out.ReplyTo,
				Mentions: sent.Out.Mentions, Media: sent.Out.Media}, sent.Receipt)
		}
	}
	return e.Bind(r.Channel, r.TurnID, r.SessionKey, r.FirstAttempt)
}

// delivered does the bookkeeping of a completed send.
func (s *ChunkSender) delivered(ctx context.Context, r Reply, useLane bool, lane Lane, d Delivery) {
	if d.FirstAck.IsZero() {
		return // nothing sent by this call
	}
	bctx := context.WithoutCancel(ctx)
	if useLane {
		if err := s.cfg.Lanes.Succeed(bctx, r.SessionKey, lane); err != nil {
			s.log.Error("lane reset failed", "session", r.SessionKey, "lane", lane, "err", err)
		}
	}
	if s.cfg.State != nil {
		if err := RecordBotMessage(bctx, s.cfg.State, r.SessionKey, d.FirstAck); err != nil {
			s.log.Error("record last bot message failed", "session", r.SessionKey, "err", err)
		}
	}
}

func (s *ChunkSender) snooze(lane Lane, until time.Time) error {
	wait := max(until.Sub(s.clk.Now()), time.Second)
	return &SnoozeError{Lane: lane, Until: until, Err: &channel.RateLimitedError{RetryAfter: wait}}
}

// laneFailure records a transient group send failure on the lane.
func (s *ChunkSender) laneFailure(ctx context.Context, r Reply, lane Lane, n int, d Delivery, cause error) (Delivery, error) {
	st, err := s.cfg.Lanes.Fail(context.WithoutCancel(ctx), r.SessionKey, lane)
	if err != nil {
		s.log.Error("lane failure not recorded", "session", r.SessionKey, "lane", lane, "err", err)
		return d, &SendError{Slot: n, Delivered: d.MessageIDs, Err: cause}
	}
	if st.Drop {
		d.Stopped, d.Code = true, DroppedOutboundDelivery
		d.Reason = fmt.Sprintf("%s lane failing for 30 min; dropped (%v)", lane, cause)
		return d, nil
	}
	return d, &SendError{Slot: n, Delivered: d.MessageIDs, Err: fmt.Errorf("%w (cause: %w)", s.snooze(lane, st.Until), cause)}
}

// attempt sends chunk n through the exit: media-validation rejections
// retry after 700 ms × attempt up to MediaAttempts attempts in all; a rate
// limit of at most RateLimitInline is waited out once; every other error
// returns.
func (s *ChunkSender) attempt(ctx context.Context, xc *ExitChannel, n int, out channel.Outgoing) (SlotResult, error) {
	waited := false
	for attempt := 1; ; attempt++ {
		if s.cfg.RenewMedia != nil && len(out.Media) > 0 {
			m, err := s.cfg.RenewMedia(ctx, slices.Clone(out.Media))
			if err != nil {
				return SlotResult{}, fmt.Errorf("renew media links: %w", err)
			}
			out.Media = m
		}
		res, err := xc.SendSlot(ctx, n, out)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return res, err
		}
		var rl *channel.RateLimitedError
		switch {
		case channel.Classify(err) == channel.ClassMediaInvalid && attempt < s.cfg.MediaAttempts:
			s.log.Info("media rejected; retrying", "attempt", attempt, "err", err)
			if !clock.Sleep(s.clk, ctx.Done(), time.Duration(attempt)*s.cfg.MediaRetryStep) {
				return res, ctx.Err()
			}
		case !waited && errors.As(err, &rl) && rl.RetryAfter > 0 && rl.RetryAfter <= s.cfg.RateLimitInline:
			waited = true
			if !clock.Sleep(s.clk, ctx.Done(), rl.RetryAfter) {
				return res, ctx.Err()
			}
		default:
			return res, err
		}
	}
}

// mayForward reports whether forward could send the new draft as a
// merged-forward card (its checks that need no I/O).
func (s *ChunkSender) mayForward(xc *ExitChannel, draft Draft) bool {
	return xc.CanForward() && !s.cfg.Forward.Off && len(draft.Chunks) >= 2
}

// forward sends the draft as one merged-forward card when the channel can
// and the reply is over the threshold. done=true means fd is the result.
func (s *ChunkSender) forward(ctx context.Context, r Reply, xc *ExitChannel, draft Draft, slots map[int]Slot, d *Delivery) (fd Delivery, done bool, err error) {
	if sl, had := slots[ForwardSlot]; had {
		// An earlier attempt sent (or was sending) the card.
		out := *d
		out.Forwarded, out.MessageIDs, out.Skipped = true, sl.MessageIDs, len(draft.Chunks)
		if sl.State != SlotSent {
			s.log.Warn("delivery_unknown", "turn", r.TurnID, "slot", ForwardSlot, "detail", "merged-forward card outcome unknown; not sending it again")
			out.Unknown = len(draft.Chunks)
		}
		return out, true, nil
	}
	if !xc.CanForward() || s.cfg.Forward.Off || len(slots) > 0 || len(draft.Chunks) < 2 {
		return Delivery{}, false, nil
	}
	total := 0
	var nodes []channel.ForwardNode
	var texts []string
	bot := ""
	if p, err := channel.ParseSessionKey(r.SessionKey); err == nil {
		bot = p.BotID
	}
	for _, c := range draft.Chunks {
		if len(c.Media) > 0 {
			return Delivery{}, false, nil // cards carry text only
		}
		total += utf8.RuneCountInString(c.Text)
		texts = append(texts, c.Text)
		nodes = append(nodes, channel.ForwardNode{Name: s.cfg.Forward.Name, UserID: bot, Text: c.Text})
	}
	if total < s.cfg.Forward.MinChars && len(draft.Chunks) < s.cfg.Forward.MinChunks {
		return Delivery{}, false, nil
	}
	if chk := s.cfg.Forward.Check; chk != nil {
		safe, err := chk(ctx, strings.Join(texts, "\n\n"))
		switch {
		case err != nil && ctx.Err() != nil:
			return *d, true, err
		case err != nil:
			s.log.Info("forward safety check failed; sending chunks", "turn", r.TurnID, "err", err)
			return Delivery{}, false, nil
		case !safe:
			out := stopped(DroppedForwardUnsafe, "merged-forward text stopped by its account-safety check")
			return out, true, nil
		}
	}
	d.FirstSend = s.clk.Now()
	rc, err := xc.SendForward(ctx, draft.Chat, nodes)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, ErrDeliveryUnknown) || errors.Is(err, errIntentKept) {
			return *d, true, &SendError{Slot: ForwardSlot, Err: err}
		}
		if channel.Classify(err).Definitive() || channel.Classify(err) == channel.ClassOffline {
			return *d, true, &SendError{Slot: ForwardSlot, Err: err}
		}
		s.log.Info("merged-forward card failed; sending chunks", "turn", r.TurnID, "err", err)
		d.FirstSend = time.Time{}
		return Delivery{}, false, nil
	}
	d.FirstAck = s.clk.Now()
	out := *d
	out.Forwarded, out.MessageIDs = true, slices.Clone(rc.MessageIDs)
	return out, true, nil
}
