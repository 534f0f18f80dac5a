package agent

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// renderer renders chat messages with aliased ids. A nil Aliaser renders no
// ids.
type renderer struct {
	al *Aliaser
	// regs, when set, records every registration (see historyCache).
	regs *[]aliasReg
}

func (r *renderer) alias(kind AliasKind, id string) string {
	if r.al == nil || id == "" || kind == AliasUser && id == MentionAll {
		return ""
	}
	s := r.al.Alias(kind, id)
	if r.regs != nil {
		*r.regs = append(*r.regs, aliasReg{kind: kind, short: len(s) == 2+aliasLen, id: id, alias: s})
	}
	return s
}

// users registers the users m names: its sender and the ones it mentions.
func (r *renderer) users(m *ChatMessage) {
	r.alias(AliasUser, m.SenderID)
	for i := range m.Segments {
		if m.Segments[i].Type == channel.SegMention {
			r.alias(AliasUser, m.Segments[i].UserID)
		}
	}
}

// text replaces known user ids typed in free text.
func (r *renderer) text(s string) string {
	if r.al == nil {
		return s
	}
	return r.al.Text(s)
}

// name renders a participant as "Name (u_…)".
func (r *renderer) name(id, name string) string {
	name = strings.TrimSpace(r.text(name))
	u := r.alias(AliasUser, id)
	switch {
	case name == "" && u == "":
		return "someone"
	case name == "":
		return u
	case u == "":
		return name
	}
	return name + " (" + u + ")"
}

// refKind is how a message's quote (ChatMessage.ReplyTo) is rendered. A
// reference is only ever to a message the same request shows: a history
// message of the window (after trimming), a same-turn candidate or the
// current message.
type refKind uint8

const (
	refNone    refKind = iota // no quote
	refShown                  // a shown message: by its alias
	refBot                    // a shown message of the bot's (its id is not shown): "you"
	refEarlier                // a message the request does not show
)

// kindOf is the refKind of a quote of m, which the request shows.
func kindOf(m *ChatMessage) refKind {
	if m.FromBot {
		return refBot
	}
	return refShown
}

// histRef resolves the quote of msgs[i] among msgs[from:i]: a history
// message may only refer to an earlier message of its window, so its
// rendering depends on nothing after it (see historyBlock).
func histRef(msgs []ChatMessage, from, i int) refKind {
	if j := histTarget(msgs, from, i); j >= 0 {
		return kindOf(&msgs[j])
	} else if msgs[i].ReplyTo != "" {
		return refEarlier
	}
	return refNone
}

// histTarget returns the index of the message msgs[i] quotes, the nearest
// before it in msgs[from:i], or -1.
func histTarget(msgs []ChatMessage, from, i int) int {
	id := msgs[i].ReplyTo
	if id == "" {
		return -1
	}
	for j := i - 1; j >= from; j-- {
		if msgs[j].ID == id {
			return j
		}
	}
	return -1
}

// header renders "[m_…] Name (u_…) replying to m_…:" (no space after the
// colon: see bodyWriter).
func (r *renderer) header(m *ChatMessage, ref refKind) string {
	var sb strings.Builder
	r.writeHeader(&sb, m, ref)
	return sb.String()
}

// writeHeader writes header(m, ref) to sb.
func (r *renderer) writeHeader(sb *strings.Builder, m *ChatMessage, ref refKind) {
	if id := r.alias(AliasMessage, m.ID); id != "" {
		sb.WriteString("[")
		sb.WriteString(id)
		sb.WriteString("] ")
	}
	sb.WriteString(r.name(m.SenderID, m.SenderName))
	switch ref {
	case refShown:
		if q := r.alias(AliasMessage, m.ReplyTo); q != "" {
			sb.WriteString(" replying to ")
			sb.WriteString(q)
		}
	case refBot:
		sb.WriteString(" replying to you")
	case refEarlier:
		sb.WriteString(" replying to an earlier message")
	}
	sb.WriteByte(':')
}

// body renders the message content: text with known ids aliased, mentions
// and quotes by alias, media as placeholders; bot marks the bot's own
// messages, whose mentions are written as the model is told to write them.
func (r *renderer) body(m *ChatMessage, bot bool) string {
	if len(m.Segments) == 0 {
		return strings.TrimSpace(r.text(m.Text))
	}
	var w bodyWriter
	r.writeBody(&w, m, bot)
	return w.sb.String()
}

// writeBody writes body(m, bot) to w.
func (r *renderer) writeBody(w *bodyWriter, m *ChatMessage, bot bool) {
	if len(m.Segments) == 0 {
		w.text(r.text(m.Text))
		return
	}
	for i := range m.Segments {
		s := &m.Segments[i]
		switch s.Type {
		case channel.SegText:
			w.text(r.text(s.Text))
		case channel.SegMention:
			w.mention(r.mention(s.UserID, bot))
		case channel.SegQuote:
			// shown in the header
		case channel.SegImage, channel.SegSticker, channel.SegVoice, channel.SegVideo, channel.SegFile:
			w.placeholder(r.text(MediaLabel(s)))
		case channel.SegLink:
			if s.Text != "" {
				w.text(r.text(s.Text))
				w.text(" ")
			}
			w.text(r.text(s.URL))
		case channel.SegFace:
			w.placeholder("[emoji]")
		case channel.SegForward:
			if s.Text != "" {
				w.placeholder("[forwarded messages: " + r.text(s.Text) + "]")
			} else {
				w.placeholder("[forwarded messages]")
			}
		}
	}
}

// mention renders a mention of id: "@everyone" for MentionAll, the alias
// ("[persona-at:u_…]" in the bot's own messages, the form the model is told
// to write), or "@someone" without one.
func (r *renderer) mention(id string, bot bool) string {
	if id == MentionAll {
		return "@everyone"
	}
	u := r.alias(AliasUser, id)
	switch {
	case u == "":
		return "@someone"
	case bot:
		return "[persona-at:" + u + "]"
	}
	return "@" + u
}

// line renders a user message as one transcript line: header, then body,
// in one buffer (the header registers its aliases first).
func (r *renderer) line(m *ChatMessage, ref refKind) string {
	n := 64 + len(m.SenderName) + len(m.Text)
	for i := range m.Segments {
		n += len(m.Segments[i].Text) + len(m.Segments[i].URL)
	}
	var w bodyWriter
	w.sb.Grow(n)
	r.writeHeader(&w.sb, m, ref)
	w.start, w.first = w.sb.Len(), " "
	r.writeBody(&w, m, false)
	return w.sb.String()
}

// message renders a history message. The bot's own messages start with the
// quote marker the model is told to write ([persona-reply:m_…]) when they
// quoted a message the request shows.
func (r *renderer) message(m *ChatMessage, ref refKind) Message {
	if !m.FromBot {
		return Message{Role: RoleUser, Content: r.line(m, ref)}
	}
	q := ""
	if ref == refShown {
		q = r.alias(AliasMessage, m.ReplyTo)
	}
	if q == "" {
		return Message{Role: RoleAssistant, Content: r.body(m, true)}
	}
	var w bodyWriter
	w.sb.Grow(len("[persona-reply:]") + len(q) + len(m.Text) + 16)
	w.sb.WriteString("[persona-reply:")
	w.sb.WriteString(q)
	w.sb.WriteByte(']')
	w.start = w.sb.Len()
	r.writeBody(&w, m, true)
	return Message{Role: RoleAssistant, Content: w.sb.String()}
}

// bodyWriter writes a message body from its pieces (text segments,
// mentions, placeholders) with clean spacing: text reads as written, except
// that the body has no leading or trailing whitespace, the whitespace where
// two pieces meet is written once (one space next to a mention, unless it
// holds a line break), and a mention is set apart from an adjacent word by
// one space.
type bodyWriter struct {
	// sb holds what was written (a header may come before the body).
	sb strings.Builder
	// start is sb.Len() where the body starts; first is written before its
	// first piece (the space after a header's colon).
	start int
	first string
	// pending is whitespace held back after the last piece: it is written
	// only when another piece follows.
	pending string
	// last is the last rune written; afterMention is set after a mention.
	last         rune
	afterMention bool
}

// wordRune reports whether c belongs to a word that a mention must not touch.
func wordRune(c rune) bool { return c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c) }

// joinSpace is the whitespace where a piece ending in a and one starting
// with b meet: one of them, a line break preferred, else a single space.
func joinSpace(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	case strings.ContainsRune(a, '\n'):
		return a
	case strings.ContainsRune(b, '\n'):
		return b
	}
	return " "
}

// gap writes what goes before the next piece: lead is the piece's leading
// whitespace; mention says the piece is a mention; word that it starts
// with a word rune.
func (w *bodyWriter) gap(lead string, mention, word bool) {
	if w.sb.Len() == w.start {
		w.sb.WriteString(w.first)
		w.pending = ""
		return
	}
	ws := joinSpace(w.pending, lead)
	w.pending = ""
	switch {
	case ws == "":
		if mention && (w.afterMention || wordRune(w.last)) || w.afterMention && word {
			w.sb.WriteByte(' ')
		}
	case (mention || w.afterMention) && !strings.ContainsRune(ws, '\n'):
		w.sb.WriteByte(' ')
	default:
		w.sb.WriteString(ws)
	}
}

// text writes a piece of text as written; its trailing whitespace is held
// back.
func (w *bodyWriter) text(s string) {
	core := strings.TrimLeftFunc(s, unicode.IsSpace)
	lead := s[:len(s)-len(core)]
	if core == "" {
		w.pending = joinSpace(w.pending, lead)
		return
	}
	body := strings.TrimRightFunc(core, unicode.IsSpace)
	c, _ := utf8.DecodeRuneInString(body)
	w.gap(lead, false, wordRune(c))
	w.sb.WriteString(body)
	w.last, _ = utf8.DecodeLastRuneInString(body)
	w.pending, w.afterMention = core[len(body):], false
}

// mention writes a mention.
func (w *bodyWriter) mention(s string) {
	w.gap("", true, false)
	w.sb.WriteString(s)
	w.last, _ = utf8.DecodeLastRuneInString(s)
	w.afterMention = true
}

// placeholder writes a media placeholder ("[image]"): as text, but set
// apart from a mention before it.
func (w *bodyWriter) placeholder(s string) {
	w.gap("", false, true)
	w.sb.WriteString(s)
	w.last, _ = utf8.DecodeLastRuneInString(s)
	// Text after it is set apart too ("[image] look", not "[image]look").
	w.afterMention = true
}

// historyTurn is one unit of history: consecutive messages of one user
// (within the grouping window) and the bot messages that follow them.
type historyTurn struct {
	start, end int // message indexes [start, end)
	tokens     int
}

// groupTurns splits msgs into turns. A boundary between two messages
// depends only on the pair: a bot message joins the turn before it; a user
// message continues the turn only when the previous message is from the
// same user and at most window earlier.
func (b *ContextBuilder) groupTurns(msgs []ChatMessage, tokens []int) []historyTurn {
	turns := make([]historyTurn, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		cont := false
		if i > 0 {
			p := &msgs[i-1]
			switch {
			case m.FromBot:
				cont = true
			case p.FromBot:
				cont = false
			default:
				cont = p.SenderID == m.SenderID && (m.SenderID != "" || p.SenderName == m.SenderName) &&
					!m.Time.Before(p.Time) && m.Time.Sub(p.Time) <= b.cfg.TurnGrouping
			}
		}
		if cont && len(turns) > 0 {
			t := &turns[len(turns)-1]
			t.end = i + 1
			t.tokens += tokens[i]
			continue
		}
		turns = append(turns, historyTurn{start: i, end: i + 1, tokens: tokens[i]})
	}
	return turns
}

// historyBlock chooses the history window and renders it. The window
// starts at the anchor (the previous turn's window start) and, when the
// history exceeds its budget, advances by whole epochs — at least half the
// history budget at a time — so the prefix changes rarely instead of
// sliding by one turn per request.
//
// A history message's quote is resolved among the messages of the window
// before it (histRef): its rendering depends only on the window's start and
// the messages up to it, never on later messages or on the trimming of
// other blocks, so it is the same turn after turn while the window stays.
// The messages are rendered (and cached) from the anchor; when the window
// moves, the quotes of messages it left behind are rendered again — the
// prefix changes there anyway. The budget trim, which drops the oldest
// turns, does the same (fixRefs).
func (b *ContextBuilder) historyBlock(in *ContextInput, r *renderer, asm *Assembled, th *threads) Block {
	blk := Block{Name: BlockHistory, Layer: LayerHistory, Priority: PriorityHistory, TrimOldest: true}
	msgs := in.History
	if in.HistoryAnchor != "" {
		for i := range msgs {
			if msgs[i].ID == in.HistoryAnchor {
				msgs = msgs[i:]
				break
			}
		}
	}
	th.hist = msgs
	if len(msgs) == 0 {
		r.alias(AliasUser, in.BotID)
		return blk
	}
	rendered, tokens := b.renderHistory(msgs, in.BotID, r)
	if b.cfg.Edit != nil {
		// Edit may change the units' messages in place; those may be the
		// cache's.
		rendered = slices.Clone(rendered)
	}
	turns := b.groupTurns(msgs, tokens)
	first := selectWindow(turns, b.budget.History)
	asm.DroppedTurns = first
	asm.HistoryTurns = len(turns) - first
	asm.HistoryAnchor = msgs[turns[first].start].ID
	asm.EpochAdvanced = in.HistoryAnchor != "" && asm.HistoryAnchor != in.HistoryAnchor
	blk.Units = make([]Unit, 0, len(turns)-first)
	for _, t := range turns[first:] {
		blk.Units = append(blk.Units, Unit{Messages: rendered[t.start:t.end:t.end], Tokens: t.tokens})
	}
	th.units, th.turns = blk.Units, turns[first:]
	b.moveWindow(blk.Units, th.turns, th, turns[first].start, r)
	return blk
}

// selectWindow returns the index of the first turn kept. While the turns
// exceed budget it drops epochs from the front: each epoch is the smallest
// run of oldest turns holding at least half the budget. The newest turn is
// always kept (the budget trim may still drop it).
func selectWindow(turns []historyTurn, budget int) int {
	total := 0
	for _, t := range turns {
		total += t.tokens
	}
	first := 0
	epoch := max(budget/2, 1)
	for total > budget && first < len(turns)-1 {
		dropped := 0
		for dropped < epoch && first < len(turns)-1 {
			dropped += turns[first].tokens
			total -= turns[first].tokens
			first++
		}
	}
	return first
}

// threads keeps what one build needs to resolve quotes (refKind) against
// the messages the request shows, and to render them again when trimming
// takes a quoted message out.
type threads struct {
	// hist is the history since the anchor; hist[from:] is shown (the
	// window, then what the budget trim left of it).
	hist []ChatMessage
	from int
	// units are the history block's units as built, turns[i] the turn of
	// units[i].
	units []Unit
	turns []historyTurn
	// cands are the candidates shown; candUnits their units as built and
	// candRefs how each one's quote was rendered.
	cands     []ChatMessage
	candUnits []Unit
	candRefs  []refKind
	// curID and curBot are the current message's id and FromBot, curUnit
	// its unit and curRef how its quote was rendered.
	curID   string
	curBot  bool
	curUnit *Unit
	curRef  refKind
}

// selfCurrent is find's self for the current message.
const selfCurrent = -1

// find resolves a quote of id by candidate self (or selfCurrent) among the
// shown messages.
func (t *threads) find(id string, self int) refKind {
	if id == "" {
		return refNone
	}
	for j := len(t.hist) - 1; j >= t.from; j-- {
		if t.hist[j].ID == id {
			return kindOf(&t.hist[j])
		}
	}
	for i := range t.cands {
		if i != self && t.cands[i].ID == id {
			return kindOf(&t.cands[i])
		}
	}
	if self != selfCurrent && t.curID == id {
		if t.curBot {
			return refBot
		}
		return refShown
	}
	return refEarlier
}

// moveWindow makes hist[from:] the shown history: the messages of units
// (of turns) that quote one before from are rendered again (refEarlier).
// The units' messages may be shared with the history cache: a changed unit
// gets its own.
func (b *ContextBuilder) moveWindow(units []Unit, turns []historyTurn, t *threads, from int, r *renderer) bool {
	if from <= t.from {
		return false
	}
	changed := false
	for ui := range units {
		u := &units[ui]
		own := false
		for mi := range u.Messages {
			k := turns[ui].start + mi
			if j := histTarget(t.hist, t.from, k); j < 0 || j >= from {
				continue
			}
			if !own {
				u.Messages, own = slices.Clone(u.Messages), true
			}
			u.Messages[mi], _ = b.renderMessage(r, &t.hist[k], refEarlier, nil)
		}
		if own {
			u.Tokens, changed = b.unitTokens(u), true
		}
	}
	t.from = from
	return changed
}

// ownSuffix reports whether units are the last len(units) of built (an
// empty units is).
func ownSuffix(units, built []Unit) bool {
	n := len(units)
	return n == 0 || n <= len(built) && &units[0] == &built[len(built)-n]
}

// fixRefs renders again the quotes of the shown messages whose quoted
// message the budget trim (or Edit) took out of the request, and reports
// whether it changed a unit. Quotes only ever go from shown to not shown,
// so it changes each message at most once.
func (b *ContextBuilder) fixRefs(blocks []Block, in *ContextInput, r *renderer, t *threads, asm *Assembled) bool {
	var hist, cands, cur *Block
	for i := range blocks {
		switch blocks[i].Name {
		case BlockHistory:
			hist = &blocks[i]
		case BlockCandidates:
			cands = &blocks[i]
		case BlockCurrent:
			cur = &blocks[i]
		}
	}
	changed := false
	switch {
	case hist != nil && ownSuffix(hist.Units, t.units):
		if n := len(hist.Units); n > 0 {
			off := len(t.units) - n
			changed = b.moveWindow(hist.Units, t.turns[off:], t, t.turns[off].start, r)
		} else {
			t.from = len(t.hist)
		}
	default: // no history of ours is shown
		t.from = len(t.hist)
	}
	n := 0
	if cands != nil && len(cands.Units) <= len(t.candUnits) && (len(cands.Units) == 0 || &cands.Units[0] == &t.candUnits[0]) {
		n = len(cands.Units)
	}
	t.cands = t.cands[:n]
	for i := range n {
		c := &t.cands[i]
		if k := t.find(c.ReplyTo, i); k != t.candRefs[i] {
			u := &cands.Units[i]
			u.Text, t.candRefs[i] = r.line(c, k), k
			u.Tokens, changed = b.unitTokens(u), true
		}
	}
	if cur != nil && len(cur.Units) == 1 && &cur.Units[0] == t.curUnit {
		if k := t.find(in.Current.ReplyTo, selfCurrent); k != t.curRef {
			u := t.curUnit
			u.Text, t.curRef = b.currentLine(in, r, k, asm), k
			u.Tokens, changed = b.unitTokens(u), true
		}
	}
	return changed
}
