package outbound

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// ErrDeliveryUnknown is returned by an [ExitChannel]'s Send for a chunk an
// earlier attempt was sending when it stopped, whose arrival neither the
// chat's history nor the bot's echoed messages can settle. It is not sent
// again: a duplicate is worse than a gap.
var ErrDeliveryUnknown = errors.New("outbound: delivery of an earlier attempt's chunk is unknown; not sent again")

// errIntentKept: a card the platform refused keeps its intent row (it
// could not be removed), so no retry may send it again.
var errIntentKept = errors.New("outbound: a refused card's intent could not be cleared")

// ExitConfig configures an [Exit].
type ExitConfig struct {
	// Ledger is required: every chunk goes through it.
	Ledger Ledger
	// Secrets are credential values masked in every outgoing text (with
	// the built-in patterns of MaskSecrets).
	Secrets []string
	// Delivered is called after every chunk the platform acknowledged (the
	// pipeline writes the bot's message into history here), with the
	// chunk as it went out. A merged-forward card reports each node.
	Delivered func(ctx context.Context, s Sent)
	// Echoed looks for the bot's own message with this text in the chat
	// since a time, in what the channel echoed back of the bot's sends
	// (ok=false: not there). Reconciliation asks it before it pages the
	// platform's history. nil: there is no echo to ask.
	Echoed func(ctx context.Context, sessionKey string, chat channel.Chat, since time.Time, text string) (ids []string, ok bool, err error)
	// HistoryPages bounds the pages of the chat's history reconciliation
	// reads when it looks back to the time of an unsettled attempt (50
	// pages of 100 messages).
	HistoryPages int
	Clock        clock.Clock
	Logger       *slog.Logger
}

// Sent is one chunk the platform acknowledged.
type Sent struct {
	TurnID     string
	SessionKey string
	// Slot is the chunk's ledger slot (ForwardSlot for a card's nodes,
	// with Node their index).
	Slot, Node int
	// Out is the chunk as it went out: secrets masked, mentions resolved.
	Out     channel.Outgoing
	Receipt channel.Receipt
}

// Exit is the one way out to a platform. Every chunk of every reply,
// whatever Sender sends it, leaves through a channel bound by
// [Exit.Bind]; there, and only there:
//
//   - the delivery ledger makes the chunk go out at most once: an intent
//     before the platform call, the platform ids after it; a chunk an
//     earlier attempt delivered is not sent again, and one whose attempt
//     stopped in the middle is looked for (the bot's echoed messages,
//     then the chat's history back to the attempt) and sent again only
//     when proven absent;
//   - ids the model wrote become platform mentions or names: a leading
//     [persona-at:…], @id, @alias or @Name becomes a mention, a later one
//     the person's name, and a participant's id is never typed as text;
//   - control markers are stripped and secrets masked;
//   - every delivered chunk is reported to Delivered (history).
//
// A Sender an embedder writes gets all of it by sending through
// Reply.Channel. An Exit is safe for concurrent use.
type Exit struct {
	cfg ExitConfig
	clk clock.Clock
	log *slog.Logger
}

// Default reconciliation bounds.
const (
	DefaultHistoryPages = 50
	reconcilePageSize   = 100
	// reconcileSlack reaches back before the attempt's time, for clocks
	// that disagree.
	reconcileSlack = time.Minute
)

// NewExit returns an Exit.
func NewExit(cfg ExitConfig) (*Exit, error) {
	if cfg.Ledger == nil {
		return nil, errors.New("outbound: ExitConfig.Ledger is required")
	}
	if cfg.HistoryPages <= 0 {
		cfg.HistoryPages = DefaultHistoryPages
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Exit{cfg: cfg, clk: clock.OrReal(cfg.Clock), log: log}, nil
}

// Bind returns the channel one reply (one turn, or one say line) leaves
// through: ch wrapped so that every Send goes through the Exit under the
// ledger id turnID. Chunks take the slots 0, 1, … in the order they are
// sent (a chunk the platform refused keeps its slot for the next try).
// fresh says no earlier attempt can have written ledger rows for turnID
// (the queue item's first claim), so none are read.
//
// The result implements channel.ForwardSender only when ch does; other
// capabilities are found through it with channel.As.
func (e *Exit) Bind(ch channel.Channel, turnID, sessionKey string, fresh bool) *ExitChannel {
	c := &ExitChannel{e: e, ch: ch, turn: turnID, session: sessionKey, fresh: fresh}
	if fs, ok := channel.As[channel.ForwardSender](ch); ok {
		c.fwd = fs
	}
	return c
}

// ExitChannel is a channel bound to an Exit for one reply. Its Send sends
// the next slot; [ExitChannel.SendSlot] names the slot. Only the Exit's
// own methods reach the platform: Run is not supported.
type ExitChannel struct {
	e       *Exit
	ch      channel.Channel
	fwd     channel.ForwardSender
	turn    string
	session string
	fresh   bool

	mu     sync.Mutex
	next   int
	slots  map[int]Slot
	loaded bool
	staged *Draft
}

// ExitChannel is a channel.Wrapper.
var (
	_ channel.Channel = (*ExitChannel)(nil)
	_ channel.Wrapper = (*ExitChannel)(nil)
)

// Name returns the wrapped channel's name.
func (c *ExitChannel) Name() string { return c.ch.Name() }

// Unwrap returns the wrapped channel (for capabilities; sending through
// it directly bypasses the ledger).
func (c *ExitChannel) Unwrap() channel.Channel { return c.ch }

// TurnID returns the ledger id the channel sends under.
func (c *ExitChannel) TurnID() string { return c.turn }

// Run is not supported: a bound channel only sends.
func (c *ExitChannel) Run(context.Context, channel.Sink) error {
	return errors.New("outbound: an exit channel only sends")
}

// CanForward reports whether the wrapped channel sends merged-forward
// cards.
func (c *ExitChannel) CanForward() bool { return c.fwd != nil }

// Stage hands over the turn's draft, not stored yet: it is stored with the
// first chunk's intent in one write (DraftIntentLedger) or before it.
func (c *ExitChannel) Stage(d Draft) {
	c.mu.Lock()
	c.staged = &d
	c.mu.Unlock()
}

// Slots returns the turn's ledger rows by slot (read once).
func (c *ExitChannel) Slots(ctx context.Context) (map[int]Slot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slotsLocked(ctx)
}

func (c *ExitChannel) slotsLocked(ctx context.Context) (map[int]Slot, error) {
	if c.loaded {
		return c.slots, nil
	}
	c.slots = map[int]Slot{}
	if !c.fresh {
		rows, err := c.e.cfg.Ledger.Slots(ctx, c.turn)
		if err != nil {
			return nil, fmt.Errorf("outbound: read ledger: %w", err)
		}
		for _, s := range rows {
			c.slots[s.N] = s
		}
	}
	c.loaded = true
	return c.slots, nil
}

// Send sends out as the next chunk of the reply (see SendSlot). A chunk
// whose fate an earlier attempt left unknown returns ErrDeliveryUnknown
// and counts as sent.
func (c *ExitChannel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	c.mu.Lock()
	n := c.next
	c.mu.Unlock()
	res, err := c.SendSlot(ctx, n, out)
	if err != nil {
		return channel.Receipt{}, err
	}
	if res.Unknown {
		return res.Receipt, ErrDeliveryUnknown
	}
	return res.Receipt, nil
}

// SlotResult is the result of SendSlot.
type SlotResult struct {
	Receipt channel.Receipt
	// Skipped: an earlier attempt delivered the chunk (Receipt holds its
	// ids) or left its fate unknown (Unknown); nothing was sent now.
	Skipped bool
	Unknown bool
	// Out is the chunk as it went out (zero when skipped).
	Out channel.Outgoing
}

// SendSlot sends out as chunk n of the reply, through the ledger: a slot
// already sent is skipped with its ids; a slot an earlier attempt left as
// an intent is reconciled (found: marked sent and skipped; proven absent:
// sent; otherwise skipped as unknown); a new slot is recorded as an
// intent, sent, and marked sent with the platform's ids. A platform error
// clears the intent (the chunk was not delivered) and is returned as it
// is; after a cancelled call the intent stays (its fate is unknown).
func (c *ExitChannel) SendSlot(ctx context.Context, n int, out channel.Outgoing) (SlotResult, error) {
	e := c.e
	platform, bot := c.ch.Name(), ""
	if p, err := channel.ParseSessionKey(c.session); err == nil {
		platform, bot = p.Platform, p.BotID
	}
	if out.Chat.ID == "" {
		if p, err := channel.ParseSessionKey(c.session); err == nil {
			out.Chat = p.Chat
		}
	}
	fp := Fingerprint(platform, bot, out.Chat, n, Chunk{Text: out.Text, ReplyTo: out.ReplyTo, Mentions: out.Mentions, Media: out.Media})

	c.mu.Lock()
	slots, err := c.slotsLocked(ctx)
	if err != nil {
		c.mu.Unlock()
		return SlotResult{}, err
	}
	sl, had := slots[n]
	staged := c.staged
	c.mu.Unlock()

	final := finalizeOut(ctx, out, e.cfg.Secrets)
	if had {
		switch {
		case sl.State == SlotSent:
			c.advance(n)
			return SlotResult{Receipt: channel.Receipt{MessageIDs: sl.MessageIDs, Time: sl.SentAt}, Skipped: true}, nil
		case sl.Fingerprint != fp:
			e.log.Warn("delivery_unknown", "turn", c.turn, "slot", n,
				"detail", "a different chunk was being sent in this slot when the previous attempt stopped; not sending this one")
			c.advance(n)
			return SlotResult{Skipped: true, Unknown: true}, nil
		}
		ids, found, settled := c.reconcile(ctx, n, sl, final)
		switch {
		case found:
			c.advance(n)
			return SlotResult{Receipt: channel.Receipt{MessageIDs: ids}, Skipped: true}, nil
		case !settled:
			c.advance(n)
			return SlotResult{Skipped: true, Unknown: true}, nil
		}
		if err := e.cfg.Ledger.ClearIntent(context.WithoutCancel(ctx), c.turn, n); err != nil {
			return SlotResult{}, fmt.Errorf("outbound: ledger clear intent: %w", err)
		}
		c.forget(n)
	}

	// The intent (with the draft, when one is staged).
	wrote := false
	if staged != nil {
		if dl, ok := e.cfg.Ledger.(DraftIntentLedger); ok && n == 0 {
			_, intent, err := dl.SaveDraftIntent(ctx, *staged, fp)
			if err != nil {
				return SlotResult{}, fmt.Errorf("outbound: save draft: %w", err)
			}
			wrote = intent
		} else if _, err := e.cfg.Ledger.SaveDraft(ctx, *staged); err != nil {
			return SlotResult{}, fmt.Errorf("outbound: save draft: %w", err)
		}
		c.mu.Lock()
		c.staged = nil
		c.mu.Unlock()
	}
	if !wrote {
		if err := e.cfg.Ledger.MarkIntent(ctx, c.turn, n, fp); err != nil {
			return SlotResult{}, fmt.Errorf("outbound: ledger intent: %w", err)
		}
	}
	final.IdempotencyKey = chunkKey(c.turn, n, fp)
	rc, err := c.ch.Send(ctx, final)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, channel.ErrUnconfirmed) {
			// The platform answered: the chunk was not delivered.
			if cerr := e.cfg.Ledger.ClearIntent(context.WithoutCancel(ctx), c.turn, n); cerr != nil {
				e.log.Error("ledger clear intent failed", "turn", c.turn, "slot", n, "err", cerr)
			}
		}
		return SlotResult{}, err
	}
	c.sent(ctx, n, -1, final, rc)
	c.advance(n)
	return SlotResult{Receipt: rc, Out: final}, nil
}

// sent does the bookkeeping of a delivered chunk: the ledger and the
// Delivered callback, side by side (a group-committing store takes both
// writes in one transaction).
func (c *ExitChannel) sent(ctx context.Context, n, node int, out channel.Outgoing, rc channel.Receipt) {
	e := c.e
	now := e.clk.Now()
	bctx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	if node <= 0 {
		wg.Go(func() {
			if err := e.cfg.Ledger.MarkSent(bctx, c.turn, n, rc.MessageIDs, now); err != nil {
				// The chunk went out; the intent row alone already prevents
				// a second send.
				e.log.Error("ledger mark sent failed", "turn", c.turn, "slot", n, "err", err)
			}
		})
	}
	if e.cfg.Delivered != nil {
		e.cfg.Delivered(bctx, Sent{TurnID: c.turn, SessionKey: c.session, Slot: n, Node: max(node, 0), Out: out, Receipt: rc})
	}
	wg.Wait()
	c.mu.Lock()
	if c.slots != nil {
		c.slots[n] = Slot{TurnID: c.turn, N: n, State: SlotSent, MessageIDs: rc.MessageIDs, SentAt: now}
	}
	c.mu.Unlock()
}

func (c *ExitChannel) advance(n int) {
	c.mu.Lock()
	c.next = max(c.next, n+1)
	c.mu.Unlock()
}

func (c *ExitChannel) forget(n int) {
	c.mu.Lock()
	delete(c.slots, n)
	c.mu.Unlock()
}

// SendForward sends a merged-forward card through the ledger (slot
// ForwardSlot): a card an earlier attempt sent is not sent again, and one
// whose fate is unknown returns ErrDeliveryUnknown. Each node is reported
// to Delivered. It fails when the wrapped channel sends no cards.
func (c *ExitChannel) SendForward(ctx context.Context, chat channel.Chat, nodes []channel.ForwardNode) (channel.Receipt, error) {
	if c.fwd == nil {
		return channel.Receipt{}, fmt.Errorf("outbound: %s cannot send merged-forward cards", c.ch.Name())
	}
	e := c.e
	c.mu.Lock()
	slots, err := c.slotsLocked(ctx)
	if err != nil {
		c.mu.Unlock()
		return channel.Receipt{}, err
	}
	sl, had := slots[ForwardSlot]
	c.mu.Unlock()
	if had {
		if sl.State == SlotSent {
			return channel.Receipt{MessageIDs: sl.MessageIDs, Time: sl.SentAt}, nil
		}
		e.log.Warn("delivery_unknown", "turn", c.turn, "slot", ForwardSlot, "detail", "merged-forward card outcome unknown; not sending it again")
		return channel.Receipt{}, ErrDeliveryUnknown
	}
	platform, bot := c.ch.Name(), ""
	if p, err := channel.ParseSessionKey(c.session); err == nil {
		platform, bot = p.Platform, p.BotID
	}
	final := make([]channel.ForwardNode, len(nodes))
	texts := make([]string, len(nodes))
	for i, nd := range nodes {
		texts[i] = nd.Text
		o := finalizeOut(ctx, channel.Outgoing{Chat: chat, Text: nd.Text}, e.cfg.Secrets)
		nd.Text = o.Text
		final[i] = nd
	}
	fp := Fingerprint(platform, bot, chat, ForwardSlot, Chunk{Text: strings.Join(texts, "\x00")})
	if err := e.cfg.Ledger.MarkIntent(ctx, c.turn, ForwardSlot, fp); err != nil {
		return channel.Receipt{}, fmt.Errorf("outbound: ledger intent: %w", err)
	}
	rc, err := c.fwd.SendForward(ctx, chat, final)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, channel.ErrUnconfirmed) {
			if cerr := e.cfg.Ledger.ClearIntent(context.WithoutCancel(ctx), c.turn, ForwardSlot); cerr != nil {
				// The card's outcome is now ambiguous to a retry; stay safe.
				e.log.Error("ledger clear intent failed", "turn", c.turn, "slot", ForwardSlot, "err", cerr)
				return channel.Receipt{}, fmt.Errorf("%w: %w (clearing its intent: %w)", errIntentKept, err, cerr)
			}
		}
		return channel.Receipt{}, err
	}
	now := e.clk.Now()
	if err := e.cfg.Ledger.MarkSent(context.WithoutCancel(ctx), c.turn, ForwardSlot, rc.MessageIDs, now); err != nil {
		e.log.Error("ledger mark sent failed", "turn", c.turn, "slot", ForwardSlot, "err", err)
	}
	c.mu.Lock()
	if c.slots != nil {
		c.slots[ForwardSlot] = Slot{TurnID: c.turn, N: ForwardSlot, State: SlotSent, MessageIDs: rc.MessageIDs, SentAt: now}
	}
	c.mu.Unlock()
	if e.cfg.Delivered != nil {
		for i, nd := range final {
			e.cfg.Delivered(context.WithoutCancel(ctx), Sent{TurnID: c.turn, SessionKey: c.session, Slot: ForwardSlot, Node: i,
				Out: channel.Outgoing{Chat: chat, Text: nd.Text}, Receipt: rc})
		}
	}
	return rc, nil
}

// reconcile settles a slot an earlier attempt left as an intent. found:
// the chunk is in the chat (the slot is marked sent with its id). settled
// without found: the chunk is proven absent (every message since the
// attempt was looked at). Not settled: nothing can tell.
func (c *ExitChannel) reconcile(ctx context.Context, n int, sl Slot, out channel.Outgoing) (ids []string, found, settled bool) {
	e := c.e
	text := strings.TrimSpace(out.Text)
	since := sl.IntentAt.Add(-reconcileSlack)
	if sl.IntentAt.IsZero() {
		since = time.Time{}
	}
	mark := func(ids []string, at time.Time, how string) {
		if err := e.cfg.Ledger.MarkSent(context.WithoutCancel(ctx), c.turn, n, ids, at); err != nil {
			e.log.Error("ledger mark sent failed", "turn", c.turn, "slot", n, "err", err)
		}
		e.log.Info("delivery_reconciled", "turn", c.turn, "slot", n, "message_ids", ids, "found_in", how)
	}
	if text == "" {
		e.log.Warn("delivery_unknown", "turn", c.turn, "slot", n, "detail", "a media chunk was being sent when the previous attempt stopped; not sending it again")
		return nil, false, false
	}
	if e.cfg.Echoed != nil {
		got, ok, err := e.cfg.Echoed(ctx, c.session, out.Chat, since, text)
		switch {
		case err != nil:
			e.log.Info("reconciliation: echo lookup failed", "turn", c.turn, "err", err)
		case ok:
			mark(got, e.clk.Now(), "echo")
			return got, true, true
		}
	}
	hf, ok := channel.As[channel.HistoryFetcher](c.ch)
	if !ok {
		e.log.Warn("delivery_unknown", "turn", c.turn, "slot", n,
			"detail", "chunk was being sent when the previous attempt stopped and the channel keeps no history to check; not sending it again")
		return nil, false, false
	}
	cursor := ""
	for page := 0; page < e.cfg.HistoryPages; page++ {
		p, err := hf.FetchHistory(ctx, channel.HistoryQuery{Chat: out.Chat, Cursor: cursor, Limit: reconcilePageSize})
		if err != nil {
			e.log.Warn("delivery_unknown", "turn", c.turn, "slot", n, "err", err,
				"detail", "the chat's history could not be read to settle a chunk of the previous attempt; not sending it again")
			return nil, false, false
		}
		older := false
		for _, ev := range p.Events {
			if ev.Kind == channel.KindSelf && ev.MessageID != "" && strings.TrimSpace(ev.Text()) == text &&
				(since.IsZero() || !ev.Time.Before(since)) {
				mark([]string{ev.MessageID}, ev.Time, "history")
				return []string{ev.MessageID}, true, true
			}
			if !since.IsZero() && ev.Time.Before(since) {
				older = true
			}
		}
		if older || p.Next == "" {
			e.log.Info("delivery_not_found", "turn", c.turn, "slot", n, "pages", page+1,
				"detail", "every message since the previous attempt was looked at and the chunk is not there; sending it again")
			return nil, false, true
		}
		cursor = p.Next
	}
	e.log.Warn("delivery_unknown", "turn", c.turn, "slot", n, "pages", e.cfg.HistoryPages,
		"detail", "the chat's history since the previous attempt is longer than reconciliation reads; not sending it again")
	return nil, false, false
}

// finalizeOut turns a chunk into what the platform gets: mention forms the
// model wrote resolved (see ResolveMentions, with the session Scope ctx
// carries), control markers stripped and secrets masked.
func finalizeOut(ctx context.Context, out channel.Outgoing, secrets []string) channel.Outgoing {
	text, mentions := ResolveMentions(out.Text, out.Mentions, agent.ScopeFrom(ctx))
	if t := StripControl(text); t != text {
		text = tidySpaces(t)
	}
	out.Text = MaskSecrets(text, secrets)
	out.Mentions = mentions
	return out
}

// ResolveMentions turns the ways a reply refers to participants into
// platform mentions or names, using the session's Scope (nil: only
// [persona-at:…] markers are known). A leading run of mentions —
// [persona-at:X], @id, @alias or @Name of a participant — becomes
// mentions (added to the given ones, without duplicates); a later one
// becomes "@Name" (the person's display name), or a mention too when the
// name is unknown; a participant's id or alias written on its own becomes
// the name ("someone" when unknown). A mention of everyone is never made from model text. Spacing is
// tidied where something was taken out.
func ResolveMentions(text string, mentions []string, sc *agent.Scope) (string, []string) {
	out := slices.Clone(mentions)
	// Mentions the caller gave may hold aliases.
	for i, m := range out {
		if sc != nil {
			if k, id, ok := sc.Lookup(m); ok && k == agent.AliasUser {
				out[i] = id
			}
		}
	}
	addMention := func(id string) {
		if id != "" && id != agent.MentionAll && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	userOf := func(tok string) (string, bool) {
		if tok == "" || tok == agent.MentionAll {
			return "", false
		}
		if sc == nil {
			return "", false
		}
		if k, id, ok := sc.Lookup(tok); ok {
			return id, k == agent.AliasUser
		}
		if sc.IsUser(tok) {
			return tok, true
		}
		return "", false
	}
	nameOf := func(id string) string {
		if sc == nil {
			return ""
		}
		return sc.DisplayName(id)
	}

	var b strings.Builder
	b.Grow(len(text))
	leading := true
	changed := false
	i := 0
	for i < len(text) {
		// [persona-at:X]
		if strings.HasPrefix(text[i:], "[persona-at:") {
			if j := strings.IndexByte(text[i:], ']'); j > 0 {
				x := strings.TrimSpace(text[i+len("[persona-at:") : i+j])
				id, ok := userOf(x)
				if !ok && sc == nil && x != "" && x != agent.MentionAll {
					id, ok = x, true // no scope: the marker's id as it is
				}
				if !ok && sc != nil {
					if u, nn := sc.MatchName(x); u != "" && nn == len(x) {
						id, ok = u, true
					}
				}
				changed = true
				if ok {
					if nm := nameOf(id); !leading && nm != "" {
						b.WriteString("@" + nm)
					} else {
						addMention(id)
					}
				}
				i += j + 1
				continue
			}
		}
		if strings.HasPrefix(text[i:], "[persona-reply:") {
			if j := strings.IndexByte(text[i:], ']'); j > 0 {
				// A quote marker is the sender's business (ResolveMarkers);
				// here it would only be typed as text.
				changed = true
				i += j + 1
				continue
			}
		}
		c := text[i]
		if at := atSign(text[i:]); at > 0 {
			rest := text[i+at:]
			// @id or @alias
			j := 0
			for j < len(rest) && (isWordByteASCII(rest[j]) || (j == 0 && rest[j] == '-')) {
				j++
			}
			if j > 0 {
				if id, ok := userOf(rest[:j]); ok {
					changed = true
					if nm := nameOf(id); !leading && nm != "" {
						b.WriteString("@" + nm)
					} else {
						addMention(id)
					}
					i += at + j
					continue
				}
			}
			// @Name
			if sc != nil {
				if id, nn := sc.MatchName(rest); id != "" && nn > 0 && (nn == len(rest) || !isWordByteASCII(rest[nn])) {
					if leading {
						changed = true
						addMention(id)
						i += at + nn
						continue
					}
					b.WriteString(text[i : i+at+nn])
					i += at + nn
					leading = false
					continue
				}
			}
		}
		if isWordByteASCII(c) && (i == 0 || !isWordByteASCII(text[i-1])) {
			j := i
			for j < len(text) && isWordByteASCII(text[j]) {
				j++
			}
			tok := text[i:j]
			dash := i > 0 && text[i-1] == '-'
			if sc != nil && !dash && (len(tok) >= agent.MinScrubLen || strings.Contains(tok, "_")) {
				if id, ok := userOf(tok); ok {
					changed = true
					nm := nameOf(id)
					if nm == "" {
						nm = "someone"
					}
					b.WriteString(nm)
					i = j
					leading = false
					continue
				}
			}
			b.WriteString(tok)
			i = j
			leading = false
			continue
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			leading = false
		}
		b.WriteByte(c)
		i++
	}
	if !changed {
		return text, out
	}
	return tidySpaces(b.String()), out
}

// atSign returns the length of the at sign that starts s ('@' or the
// full-width '＠'), 0 if none.
func atSign(s string) int {
	switch {
	case strings.HasPrefix(s, "@"):
		return 1
	case strings.HasPrefix(s, "＠"):
		return len("＠")
	}
	return 0
}

func isWordByteASCII(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// tidySpaces collapses runs of spaces inside lines, removes spaces before
// punctuation that removal left, and trims each line's ends.
func tidySpaces(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		var b strings.Builder
		space := false
		for _, r := range strings.TrimSpace(l) {
			if r == ' ' || r == '\t' {
				space = true
				continue
			}
			if space && !strings.ContainsRune(",.!?;:，。！？；：、", r) {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(r)
		}
		lines[i] = b.String()
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// chunkKey is the channel.Outgoing.IdempotencyKey of a chunk: the same for
// every attempt of slot n of the turn, different for any other slot or
// turn (the ledger fingerprint alone is the same for two turns that say
// the same words in the same chat, and a platform that deduplicates by the
// key would then swallow the second).
func chunkKey(turn string, n int, fp string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s|%d|%s", len(turn), turn, n, fp)
	return hex.EncodeToString(h.Sum(nil))
}
