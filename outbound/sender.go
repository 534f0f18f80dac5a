package outbound

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

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
}

// Delivery is the result of a completed send.
type Delivery struct {
	// MessageIDs are the platform ids of every chunk, in order (reused from
	// the ledger for chunks delivered by an earlier attempt).
	MessageIDs []string
	// Chunks is the number of chunks in the draft; Skipped of them were
	// already delivered (or unknown after a crash) and not sent again.
	Chunks  int
	Skipped int
	// Code and Reason come from the stored draft.
	Code   outcome.Code
	Reason string
	// FirstSend and FirstAck time the first chunk sent by this call.
	FirstSend time.Time
	FirstAck  time.Time
}

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

// SenderConfig configures the default chunked sender.
type SenderConfig struct {
	// Ledger is required: it makes every chunk go out at most once.
	Ledger Ledger
	// Clock paces chunks (nil = real).
	Clock clock.Clock
	// Split tunes the splitter.
	Split SplitOptions
	// NoPacing sends chunks back to back (tests, benchmarks).
	NoPacing bool
	// AfterSend is called after each delivered chunk (the pipeline writes
	// the bot's message into history here).
	AfterSend func(ctx context.Context, r Reply, n int, c Chunk, rc channel.Receipt)
	Logger    *slog.Logger
}

// ChunkSender is the default Sender: split, persist the draft, then send
// each chunk through the ledger, one reply per session at a time.
type ChunkSender struct {
	cfg   SenderConfig
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
	return &ChunkSender{cfg: cfg, clk: clock.OrReal(cfg.Clock), log: log, locks: map[string]*sessionLock{}}, nil
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

// Send delivers the reply. The shaped draft is persisted before the first
// chunk; a turn that already has a draft resumes it. Each chunk is written
// to the ledger as an intent before the platform call and marked sent after
// it; chunks already sent are skipped and their ids reused. A chunk left as
// an intent by a crash (outcome unknown) is treated as sent and logged
// delivery_unknown: a duplicate is worse than a gap. When the platform
// answers a chunk with an error the intent is cleared, so a retry sends it.
func (s *ChunkSender) Send(ctx context.Context, r Reply) (Delivery, error) {
	if r.Channel == nil {
		return Delivery{}, errors.New("outbound: reply has no channel")
	}
	unlock := s.lock(r.SessionKey)
	defer unlock()

	limit := channel.LimitOf(r.Channel)
	draft := Draft{TurnID: r.TurnID, SessionKey: r.SessionKey, Chat: r.Chat, Code: r.Code, Reason: r.Reason}
	for i, text := range Split(r.Text, limit, s.cfg.Split) {
		c := Chunk{Text: text}
		if i == 0 {
			c.ReplyTo, c.Mentions = r.ReplyTo, r.Mentions
		}
		draft.Chunks = append(draft.Chunks, c)
	}
	stored, err := s.cfg.Ledger.SaveDraft(ctx, draft)
	if err != nil {
		return Delivery{}, fmt.Errorf("outbound: save draft: %w", err)
	}
	draft = stored
	var slots []Slot
	if !r.FirstAttempt {
		if slots, err = s.cfg.Ledger.Slots(ctx, r.TurnID); err != nil {
			return Delivery{}, fmt.Errorf("outbound: read ledger: %w", err)
		}
	}
	bySlot := make(map[int]Slot, len(slots))
	for _, sl := range slots {
		bySlot[sl.N] = sl
	}
	platform, bot := r.Channel.Name(), ""
	if p, err := channel.ParseSessionKey(r.SessionKey); err == nil {
		platform, bot = p.Platform, p.BotID
	}
	d := Delivery{Chunks: len(draft.Chunks), Code: draft.Code, Reason: draft.Reason}
	sentThisCall := 0
	for n, c := range draft.Chunks {
		if sl, ok := bySlot[n]; ok {
			if sl.State != SlotSent {
				s.log.Warn("delivery_unknown", "turn", r.TurnID, "slot", n,
					"detail", "chunk was being sent when the previous attempt stopped; not sending it again")
			}
			d.MessageIDs = append(d.MessageIDs, sl.MessageIDs...)
			d.Skipped++
			continue
		}
		if sentThisCall > 0 && !s.cfg.NoPacing {
			if t, ok := r.Channel.(channel.Typer); ok {
				_ = t.Typing(ctx, draft.Chat)
			}
			if !clock.Sleep(s.clk, ctx.Done(), Pace(c.Text)) {
				return d, &SendError{Slot: n, Delivered: d.MessageIDs, Err: ctx.Err()}
			}
		}
		fp := Fingerprint(platform, bot, draft.Chat, n, c)
		if err := s.cfg.Ledger.MarkIntent(ctx, r.TurnID, n, fp); err != nil {
			return d, &SendError{Slot: n, Delivered: d.MessageIDs, Err: fmt.Errorf("ledger intent: %w", err)}
		}
		if d.FirstSend.IsZero() {
			d.FirstSend = s.clk.Now()
		}
		rc, err := r.Channel.Send(ctx, channel.Outgoing{
			Chat: draft.Chat, Text: c.Text, ReplyTo: c.ReplyTo, Mentions: c.Mentions, Media: c.Media, IdempotencyKey: fp,
		})
		if err != nil {
			if ctx.Err() == nil {
				// The platform answered: the chunk was not delivered.
				if cerr := s.cfg.Ledger.ClearIntent(context.WithoutCancel(ctx), r.TurnID, n); cerr != nil {
					s.log.Error("ledger clear intent failed", "turn", r.TurnID, "slot", n, "err", cerr)
				}
			}
			return d, &SendError{Slot: n, Delivered: d.MessageIDs, Err: err}
		}
		now := s.clk.Now()
		if d.FirstAck.IsZero() {
			d.FirstAck = now
		}
		if err := s.cfg.Ledger.MarkSent(context.WithoutCancel(ctx), r.TurnID, n, rc.MessageIDs, now); err != nil {
			// The chunk went out; the intent row alone already prevents a
			// second send.
			s.log.Error("ledger mark sent failed", "turn", r.TurnID, "slot", n, "err", err)
		}
		d.MessageIDs = append(d.MessageIDs, rc.MessageIDs...)
		sentThisCall++
		if s.cfg.AfterSend != nil {
			s.cfg.AfterSend(ctx, r, n, c, rc)
		}
	}
	return d, nil
}
