package dingtalktest

import (
	"cmp"
	"context"
	"strings"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
)

var _ chantest.PlatformDriver = (*Server)(nil)

// Emit pushes a user message as chantest describes it: a group chat's id
// is the conversationId, a private chat's id the sender's staff id; a
// mention of the bot is isInAtList (with the leading space DingTalk
// leaves), a quote is text.repliedMsg. It returns the msgId. It
// implements chantest.PlatformDriver.
func (s *Server) Emit(ctx context.Context, in chantest.Inbound) (string, error) {
	inc := Incoming{
		Group:      in.Chat.Kind == channel.Group,
		From:       User{StaffID: in.From.ID, Nick: cmp.Or(in.From.Name, "User "+in.From.ID)},
		Text:       in.Text,
		MentionBot: in.MentionBot,
		ReplyTo:    in.QuoteID,
	}
	if inc.Group {
		inc.ConversationID = in.Chat.ID
	}
	p, err := s.Push(ctx, inc)
	if err != nil {
		return "", err
	}
	return p.MsgID, nil
}

// Received lists the robot's sends as chantest deliveries: the chat (a
// group's conversationId, a private chat's user id), the text, the
// mentioned users (the webhook's at lists) and the robot API's
// processQueryKey as MessageID. DingTalk robots cannot quote a message;
// a markdown message that opens with a blockquote of a message the fake
// knows is reported as a reply to it (ReplyTo), with the blockquote left
// out of Text: the quote is recognised as a reader would, by the quoted
// sender's nick (optional, "Nick: ") and the start of the message's first
// line (a trailing "…" marks a cut). It implements
// chantest.PlatformDriver.
func (s *Server) Received(context.Context) ([]chantest.Delivered, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]chantest.Delivered, 0, len(s.sent))
	for _, m := range s.sent {
		d := chantest.Delivered{Text: m.Text, MessageID: m.ProcessQueryKey}
		if m.Group {
			d.Chat = channel.Chat{Kind: channel.Group, ID: m.ConversationID}
		} else {
			d.Chat = channel.Chat{Kind: channel.Private, ID: m.Peer}
		}
		if m.Markdown() {
			if q, rest, ok := splitQuote(m.Text); ok {
				d.Text = rest
				d.ReplyTo = s.findQuotedLocked(m.ConversationID, q)
			}
		}
		d.Mentions = append(append([]string(nil), m.AtUserIDs...), m.AtDingtalkIDs...)
		out = append(out, d)
	}
	return out, nil
}

// splitQuote splits a markdown text that opens with a blockquote into the
// quote's text and the rest.
func splitQuote(text string) (quote, rest string, ok bool) {
	if !strings.HasPrefix(text, ">") {
		return "", text, false
	}
	lines := strings.Split(text, "\n")
	var q []string
	i := 0
	for ; i < len(lines) && strings.HasPrefix(lines[i], ">"); i++ {
		q = append(q, strings.TrimSpace(strings.TrimPrefix(lines[i], ">")))
	}
	for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
		i++
	}
	return strings.Join(q, " "), strings.Join(lines[i:], "\n"), true
}

// findQuotedLocked finds the newest message of a conversation a
// blockquote shows; "" when none.
func (s *Server) findQuotedLocked(conv, q string) string {
	var best *storedMessage
	for _, m := range s.messages {
		if m.conv != conv || !quotes(q, m, s.cfg.BotName) {
			continue
		}
		if best == nil || m.at.After(best.at) || (m.at.Equal(best.at) && m.seq > best.seq) {
			best = m
		}
	}
	if best == nil {
		return ""
	}
	return best.id
}

// quotes reports whether the blockquote text q shows m.
func quotes(q string, m *storedMessage, botName string) bool {
	nick := m.from.Nick
	if m.bot {
		nick = botName
	}
	if nick != "" {
		q = strings.TrimPrefix(q, nick+": ")
	}
	cut := strings.HasSuffix(q, "…")
	q = strings.TrimSpace(strings.TrimSuffix(q, "…"))
	first := ""
	for l := range strings.SplitSeq(m.text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			first = l
			break
		}
	}
	if q == "" || first == "" {
		return false
	}
	if cut {
		return strings.HasPrefix(first, q)
	}
	return first == q
}
