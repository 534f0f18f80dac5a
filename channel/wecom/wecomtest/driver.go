package wecomtest

import (
	"context"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
)

var _ chantest.PlatformDriver = (*Server)(nil)

// Emit pushes a user message as chantest describes it and returns its
// message id. A group message reaches an AI bot only as an @-message, so
// it is always written after "@<BotName> " (MentionBot changes nothing);
// a quote carries the quoted message's content, as WeCom's do. Apps get
// private messages only. With callbacks the delivery error, if no
// attempt was accepted, is returned with the id. It implements
// chantest.PlatformDriver.
func (s *Server) Emit(ctx context.Context, in chantest.Inbound) (string, error) {
	m, err := s.Push(ctx, Incoming{Chat: in.Chat, From: in.From.ID, Text: in.Text, MentionBot: in.MentionBot, QuoteID: in.QuoteID})
	return m.ID, err
}

// Received lists the bot's messages as chantest deliveries: text (a
// stream's latest content), the message an AI-bot answer belongs to as
// ReplyTo, and the platform's id where there is one. It implements
// chantest.PlatformDriver.
func (s *Server) Received(context.Context) ([]chantest.Delivered, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]chantest.Delivered, 0, len(s.sent))
	for _, x := range s.sent {
		out = append(out, chantest.Delivered{Chat: x.Chat, Text: x.Text, ReplyTo: x.ReplyTo, MessageID: x.MessageID})
	}
	return out, nil
}

// KnowChat records that a chat has talked to the bot before (an AI bot
// may write on its own only to such chats).
func (s *Server) KnowChat(chat channel.Chat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chats[chat] = true
}
