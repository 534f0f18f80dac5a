package memory

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/clock"
)

// Summary defaults.
const (
	DefaultEpoch          = 50
	DefaultKeepRecent     = 50
	DefaultSummaryVersion = 1
	DefaultSummaryTimeout = 30 * time.Second
	DefaultSummaryChars   = 4000
	DefaultEpochsPerCall  = 4
	DefaultMessageRunes   = 400
)

// SummaryConfig configures a Summarizer; zero fields mean the defaults.
// Nothing in it but Version invalidates a checkpoint: a config reload never
// triggers a recomputation.
type SummaryConfig struct {
	// Epoch is the number of messages folded at once (50): the checkpoint
	// advances in whole epochs so the prompt prefix stays stable between
	// advances.
	Epoch int
	// KeepRecent is the number of newest messages never folded (50). A
	// checkpoint advances once KeepRecent + Epoch messages follow it.
	KeepRecent int
	// EpochsPerCall bounds the epochs folded by one model call (4).
	EpochsPerCall int
	// Version is the summary version (1); bump it to recompute the
	// current checkpoint with a new prompt or model.
	Version int
	// Timeout bounds the model call (30 s); MaxChars the summary (4,000).
	Timeout  time.Duration
	MaxChars int
	// MessageRunes bounds one message in the summary prompt (400).
	MessageRunes int
	// Scopes gives each session's agent.Scope: the summary prompt shows
	// every person as "Name (u_…)" in the session's aliases, scrubs known
	// ids typed in text (the previous summary included), and the model
	// call carries the Scope (agent.WithScope). The answer's aliases are
	// turned back into ids before the summary is saved. Nil renders
	// through the Summarizer's own Scope with a random secret (see
	// ExtractConfig.Scopes).
	Scopes agent.ScopeSource
	// Clock (nil = clock.Real) and Logger (nil = discard).
	Clock  clock.Clock
	Logger *slog.Logger
}

func (c *SummaryConfig) defaults() {
	c.Epoch = cmp.Or(c.Epoch, DefaultEpoch)
	c.KeepRecent = cmp.Or(c.KeepRecent, DefaultKeepRecent)
	c.EpochsPerCall = cmp.Or(c.EpochsPerCall, DefaultEpochsPerCall)
	c.Version = cmp.Or(c.Version, DefaultSummaryVersion)
	c.Timeout = cmp.Or(c.Timeout, DefaultSummaryTimeout)
	c.MaxChars = cmp.Or(c.MaxChars, DefaultSummaryChars)
	c.MessageRunes = cmp.Or(c.MessageRunes, DefaultMessageRunes)
	c.Clock = clock.OrReal(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Summarizer maintains the summary checkpoints of sessions (layer 2 in
// the package doc).
type Summarizer struct {
	store SummaryStore
	model agent.Model
	cfg   SummaryConfig
	own   *agent.Scope // when cfg.Scopes is nil or gives none
}

// NewSummarizer returns a Summarizer.
func NewSummarizer(store SummaryStore, model agent.Model, cfg SummaryConfig) (*Summarizer, error) {
	if store == nil || model == nil {
		return nil, errors.New("memory: NewSummarizer needs a store and a model")
	}
	cfg.defaults()
	own, err := ownScope()
	if err != nil {
		return nil, err
	}
	return &Summarizer{store: store, model: model, cfg: cfg, own: own}, nil
}

// Checkpoint returns the current checkpoint of the session, the one that
// goes before the cache breakpoint; ok is false when there is none yet.
// Messages after its Watermark are the stable history.
func (s *Summarizer) Checkpoint(ctx context.Context, sessionKey string) (sum Summary, ok bool, err error) {
	sum, err = s.store.LatestSummary(ctx, sessionKey)
	if errors.Is(err, ErrNotFound) {
		return Summary{}, false, nil
	}
	return sum, err == nil, err
}

// Refresh brings the session's checkpoint up to date and reports whether
// it changed. First it re-verifies the current checkpoint: when its folded
// input changed (a message in its epoch was recalled, edited or arrived
// late) or it was computed with another Version, that epoch is summarised
// again. Then, when at least KeepRecent + Epoch messages follow the
// watermark, it folds the oldest whole epochs (at most EpochsPerCall) into
// a new checkpoint. Call it after a reply, off the reply path; a failed
// model call leaves the old checkpoint in place.
func (s *Summarizer) Refresh(ctx context.Context, sessionKey string) (Summary, bool, error) {
	cur, ok, err := s.Checkpoint(ctx, sessionKey)
	if err != nil {
		return Summary{}, false, err
	}
	changed := false
	if ok {
		base, err := s.baseText(ctx, sessionKey, cur.Epoch)
		if err != nil {
			return cur, false, err
		}
		window, err := s.window(ctx, sessionKey, cur.From, cur.Watermark, cur.Messages+s.cfg.Epoch)
		if err != nil {
			return cur, false, err
		}
		if h := s.hash(base, window); h != cur.InputHash || cur.Version != s.cfg.Version {
			text, err := s.summarise(ctx, sessionKey, base, window)
			if err != nil {
				return cur, false, err
			}
			cur.Text, cur.Messages, cur.Version, cur.InputHash = text, len(window), s.cfg.Version, h
			if err := s.store.SaveSummary(ctx, cur); err != nil {
				return cur, false, err
			}
			s.cfg.Logger.Info("memory: summary recomputed", "session", sessionKey, "epoch", cur.Epoch)
			changed = true
		}
	}
	n, err := s.store.CountAfter(ctx, sessionKey, cur.Watermark)
	if err != nil {
		return cur, changed, err
	}
	if n < s.cfg.KeepRecent+s.cfg.Epoch {
		return cur, changed, nil
	}
	epochs := min((n-s.cfg.KeepRecent)/s.cfg.Epoch, s.cfg.EpochsPerCall)
	window, err := s.store.MessagesAfter(ctx, sessionKey, cur.Watermark, epochs*s.cfg.Epoch)
	if err != nil {
		return cur, changed, err
	}
	if len(window) == 0 {
		return cur, changed, nil
	}
	base := cur.Text
	text, err := s.summarise(ctx, sessionKey, base, window)
	if err != nil {
		return cur, changed, err
	}
	last := window[len(window)-1]
	next := Summary{
		SessionKey: sessionKey, Epoch: cur.Epoch + 1, Text: text, From: cur.Watermark,
		Watermark: Watermark{Time: last.Time, Key: last.Key}, Messages: len(window),
		Version: s.cfg.Version, InputHash: s.hash(base, window),
	}
	if err := s.store.SaveSummary(ctx, next); err != nil {
		return cur, changed, err
	}
	s.cfg.Logger.Info("memory: summary advanced", "session", sessionKey, "epoch", next.Epoch, "messages", len(window))
	return next, true, nil
}

// baseText is the text of the epoch before epoch n ("" for the first).
func (s *Summarizer) baseText(ctx context.Context, sessionKey string, n int) (string, error) {
	if n <= 1 {
		return "", nil
	}
	prev, err := s.store.SummaryAt(ctx, sessionKey, n-1)
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	return prev.Text, err
}

// window reads the messages in (from, to].
func (s *Summarizer) window(ctx context.Context, sessionKey string, from, to Watermark, limit int) ([]Message, error) {
	msgs, err := s.store.MessagesAfter(ctx, sessionKey, from, limit)
	if err != nil {
		return nil, err
	}
	out := msgs[:0]
	for _, m := range msgs {
		if m.Time.After(to.Time) || (m.Time.Equal(to.Time) && m.Key > to.Key) {
			break
		}
		out = append(out, m)
	}
	return out, nil
}

// hash identifies a checkpoint's input: version, base text and the folded
// messages (key, sender, direction, text, recalled).
func (s *Summarizer) hash(base string, window []Message) string {
	h := sha256.New()
	w := func(v string) { h.Write([]byte(strconv.Itoa(len(v)) + ":" + v)) }
	w(strconv.Itoa(s.cfg.Version))
	w(base)
	for _, m := range window {
		w(m.Key)
		w(m.SenderID)
		w(string(m.Direction))
		w(strconv.FormatBool(m.Recalled))
		if !m.Recalled {
			w(m.Text)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

const summarySystem = `You keep the running summary of a chat. Merge the PREVIOUS SUMMARY with the NEW MESSAGES into one summary with three short sections: Topics, Conclusions, Open items. People are shown as Name (u_…), u_… being their alias: refer to them the same way. Keep facts people stated, drop small talk. Write in the language of the chat. At most %d characters. Answer with the summary only.`

// summarise asks the model for the new summary text. The prompt is
// rendered through the session's Scope and the answer restored to ids.
func (s *Summarizer) summarise(ctx context.Context, sessionKey, base string, window []Message) (string, error) {
	sc, err := sessionScope(ctx, s.cfg.Scopes, s.own, sessionKey)
	if err != nil {
		return "", err
	}
	r := newRenderer(sc, sessionKey)
	for i := range window {
		r.message(&window[i]) // a recalled message's id may be typed in another
	}
	var b strings.Builder
	b.WriteString("PREVIOUS SUMMARY:\n")
	b.WriteString(cmp.Or(r.text(base), "(none)"))
	b.WriteString("\n\nNEW MESSAGES:\n")
	for i := range window {
		m := &window[i]
		if m.Recalled {
			continue
		}
		fmt.Fprintf(&b, "[%s] %s: %s\n", m.Time.UTC().Format("01-02 15:04"), r.person(m.SenderID, m.SenderName, m.Direction == Out),
			cutRunes(flatten(r.text(m.Text)), s.cfg.MessageRunes))
	}
	cctx, cancel := context.WithTimeout(agent.WithScope(ctx, sc), s.cfg.Timeout)
	defer cancel()
	resp, err := s.model.Generate(cctx, agent.Request{
		Purpose: agent.PurposeSummary,
		Messages: []agent.Message{
			{Role: agent.RoleSystem, Content: fmt.Sprintf(summarySystem, s.cfg.MaxChars)},
			{Role: agent.RoleUser, Content: b.String()},
		},
	})
	if err != nil {
		return "", fmt.Errorf("memory: summary: %w", err)
	}
	text := strings.TrimSpace(r.restore(resp.Text))
	if text == "" {
		return "", errors.New("memory: summary: empty answer")
	}
	return cutRunes(text, s.cfg.MaxChars), nil
}

func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

// RecentAfter returns up to limit of the session's newest history entries
// that come after the checkpoint's watermark, oldest first: the stable
// history that follows the summary in the prompt.
func RecentAfter(ctx context.Context, h History, sessionKey string, wm Watermark, limit int) ([]Entry, error) {
	entries, err := h.Recent(ctx, sessionKey, limit)
	if err != nil {
		return entries, err
	}
	return After(entries, wm), nil
}

// After keeps the entries (oldest first, as History.Recent returns them)
// that come after the watermark; a zero watermark keeps them all. It reuses
// the backing array of entries.
func After(entries []Entry, wm Watermark) []Entry {
	if wm.IsZero() {
		return entries
	}
	out := entries[:0]
	for i := range entries {
		if wm.Precedes(&entries[i]) {
			out = append(out, entries[i])
		}
	}
	return out
}
