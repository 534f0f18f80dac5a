package qqbottest

import (
	"context"
	"net/http"
	"strings"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
)

var _ chantest.PlatformDriver = (*Server)(nil)

// Emit pushes a user message as chantest describes it (see Incoming for
// how chats map to event types) and returns its message id. In webhook
// mode the delivery error, if any, is returned with the id. It
// implements chantest.PlatformDriver.
func (s *Server) Emit(ctx context.Context, in chantest.Inbound) (string, error) {
	p, err := s.Push(ctx, Incoming{Chat: in.Chat, From: in.From, Text: in.Text, MentionBot: in.MentionBot, QuoteID: in.QuoteID})
	return p.ID, err
}

var guildUnescaper = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

// Received lists the bot's successful sends as chantest deliveries: the
// text (guild content unescaped, with its leading "<@id> " mentions taken
// out into Mentions), the replied-to msg_id as ReplyTo, and the id. It
// implements chantest.PlatformDriver.
func (s *Server) Received(context.Context) ([]chantest.Delivered, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]chantest.Delivered, 0, len(s.sent))
	for _, m := range s.sent {
		d := chantest.Delivered{Chat: m.Chat, Text: m.Content, ReplyTo: m.MsgID, MessageID: m.ID}
		if m.Route == "channel" || m.Route == "dm" {
			text := m.Content
			for strings.HasPrefix(text, "<@") {
				end := strings.IndexByte(text, '>')
				if end < 0 {
					break
				}
				d.Mentions = append(d.Mentions, strings.TrimPrefix(text[2:end], "!"))
				text = strings.TrimPrefix(text[end+1:], " ")
			}
			d.Text = guildUnescaper.Replace(text)
		}
		out = append(out, d)
	}
	return out, nil
}

// RejectNextSend makes the next send fail with 400 and code 11253 (the
// bot lacks the permission), a definitive rejection. It implements
// chantest.PlatformDriver.
func (s *Server) RejectNextSend(context.Context) error {
	s.FailNextSend(Failure{Status: http.StatusBadRequest, Code: CodeNoPermission, Message: "check app privilege not pass"})
	return nil
}

// DMGuild returns the direct-message guild id of a user who sent a guild
// direct message ("" if none).
func (s *Server) DMGuild(userID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dmGuild[userID]
}

// ChatOf is how the adapter names the chat of a route and target.
func (s *Server) ChatOf(route, target string) channel.Chat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chatOfLocked(route, target)
}
