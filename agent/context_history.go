package agent

import (
	"slices"
	"strings"

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
	if r.al == nil || id == "" {
		return ""
	}
	s := r.al.Alias(kind, id)
	if r.regs != nil {
		*r.regs = append(*r.regs, aliasReg{kind: kind, short: len(s) == 2+aliasLen, id: id, alias: s})
	}
	return s
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

// header renders "[m_…] Name (u_…) replying to m_…: ".
func (r *renderer) header(m *ChatMessage) string {
	var sb strings.Builder
	r.writeHeader(&sb, m)
	return sb.String()
}

// writeHeader writes header(m) to sb.
func (r *renderer) writeHeader(sb *strings.Builder, m *ChatMessage) {
	if id := r.alias(AliasMessage, m.ID); id != "" {
		sb.WriteString("[")
		sb.WriteString(id)
		sb.WriteString("] ")
	}
	sb.WriteString(r.name(m.SenderID, m.SenderName))
	if q := r.alias(AliasMessage, m.ReplyTo); q != "" {
		sb.WriteString(" replying to ")
		sb.WriteString(q)
	}
	sb.WriteString(": ")
}

// body renders the message content: text with known ids aliased, mentions
// and quotes by alias, media as placeholders.
func (r *renderer) body(m *ChatMessage) string {
	if len(m.Segments) == 0 {
		return r.text(m.Text)
	}
	var sb strings.Builder
	r.writeBody(&sb, m)
	return sb.String()
}

// writeBody writes body(m) to sb.
func (r *renderer) writeBody(sb *strings.Builder, m *ChatMessage) {
	if len(m.Segments) == 0 {
		sb.WriteString(r.text(m.Text))
		return
	}
	for _, s := range m.Segments {
		switch s.Type {
		case channel.SegText:
			sb.WriteString(r.text(s.Text))
		case channel.SegMention:
			if u := r.alias(AliasUser, s.UserID); u != "" {
				sb.WriteString("@" + u + " ")
			} else {
				sb.WriteString("@someone ")
			}
		case channel.SegQuote:
			// shown in the header
		case channel.SegImage:
			sb.WriteString("[image]")
		case channel.SegVoice:
			sb.WriteString("[voice]")
		case channel.SegVideo:
			sb.WriteString("[video]")
		case channel.SegFile:
			sb.WriteString("[file")
			if s.Media != nil && s.Media.Name != "" {
				sb.WriteString(": " + r.text(s.Media.Name))
			}
			sb.WriteString("]")
		case channel.SegLink:
			if s.Text != "" {
				sb.WriteString(r.text(s.Text) + " ")
			}
			sb.WriteString(r.text(s.URL))
		case channel.SegFace:
			sb.WriteString("[emoji]")
		case channel.SegForward:
			sb.WriteString("[forwarded messages")
			if s.Text != "" {
				sb.WriteString(": " + r.text(s.Text))
			}
			sb.WriteString("]")
		}
	}
}

// line renders a user message as one transcript line: header, then body,
// in one buffer (the header registers its aliases first, as before).
func (r *renderer) line(m *ChatMessage) string {
	n := 64 + len(m.SenderName) + len(m.Text)
	for i := range m.Segments {
		n += len(m.Segments[i].Text) + len(m.Segments[i].URL)
	}
	var sb strings.Builder
	sb.Grow(n)
	r.writeHeader(&sb, m)
	r.writeBody(&sb, m)
	return sb.String()
}

// message renders a history message.
func (r *renderer) message(m *ChatMessage) Message {
	if m.FromBot {
		return Message{Role: RoleAssistant, Content: r.body(m)}
	}
	return Message{Role: RoleUser, Content: r.line(m)}
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
func (b *ContextBuilder) historyBlock(in ContextInput, r *renderer, asm *Assembled) Block {
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
	if len(msgs) == 0 {
		return blk
	}
	rendered, tokens := b.renderHistory(msgs, r)
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
