package feishutest

import (
	"context"
	"errors"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
)

var _ chantest.PlatformDriver = (*Server)(nil)

// Emit pushes a user's message as chantest describes it: a group message
// to the group's chat_id, a private message into the user's private chat
// with the bot; a mention of the bot becomes "@_user_1 " before the text,
// a quote the message's parent_id. It returns the message_id, and the
// error of the first delivery (wrapping ErrNotAcknowledged when the bot
// refused it). It implements chantest.PlatformDriver.
func (s *Server) Emit(ctx context.Context, in chantest.Inbound) (string, error) {
	inc := Incoming{
		From:       User{OpenID: in.From.ID, Name: in.From.Name},
		Text:       in.Text,
		MentionBot: in.MentionBot,
		ParentID:   in.QuoteID,
	}
	switch in.Chat.Kind {
	case channel.Group:
		inc.ChatID = in.Chat.ID
	case channel.Private:
		if in.Chat.ID != in.From.ID {
			return "", errors.New("feishutest: a private chat's id is the sender's open_id")
		}
	default:
		return "", errors.New("feishutest: unknown chat kind")
	}
	p, err := s.Push(ctx, inc)
	return p.MessageID, err
}

// Received lists the bot's successful sends as chantest deliveries: the
// chat as the adapter names it, the rendered text, the reply target, the
// mentioned open_ids and the message_id. It implements
// chantest.PlatformDriver.
func (s *Server) Received(context.Context) ([]chantest.Delivered, error) {
	sent := s.Sent()
	out := make([]chantest.Delivered, 0, len(sent))
	for _, m := range sent {
		out = append(out, chantest.Delivered{Chat: m.Chat, Text: m.Text, ReplyTo: m.ParentID, Mentions: m.Mentions, MessageID: m.MessageID})
	}
	return out, nil
}

// RejectNextSend makes the next send answer 230001 (invalid request
// parameter), a definitive rejection. It implements
// chantest.PlatformDriver.
func (s *Server) RejectNextSend(context.Context) error {
	s.FailNextSend(Failure{Status: 400, Code: CodeInvalidParam, Msg: "Your request contains an invalid request parameter."})
	return nil
}
