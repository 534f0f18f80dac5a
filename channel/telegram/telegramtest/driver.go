package telegramtest

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
)

var _ chantest.PlatformDriver = (*Server)(nil)

// ChatOf converts a channel.Chat to a Telegram chat: private chats keep
// their id; group ids starting with -100 are supergroups, other groups
// basic groups. It fails for non-numeric ids.
func ChatOf(c channel.Chat) (Chat, error) {
	id, err := strconv.ParseInt(c.ID, 10, 64)
	if err != nil || id == 0 {
		return Chat{}, fmt.Errorf("telegramtest: chat id %q is not a Telegram chat id", c.ID)
	}
	switch c.Kind {
	case channel.Private:
		return Chat{ID: id, Type: ChatPrivate}, nil
	case channel.Group:
		if strings.HasPrefix(c.ID, "-100") {
			return Chat{ID: id, Type: ChatSupergroup, Title: "Group " + c.ID}, nil
		}
		return Chat{ID: id, Type: ChatGroup, Title: "Group " + c.ID}, nil
	}
	return Chat{}, fmt.Errorf("telegramtest: chat kind %q", c.Kind)
}

// Emit pushes a user message as chantest describes it (a mention of the
// bot becomes an "@<bot username> " prefix with a mention entity; a quote
// becomes reply_to_message) and returns its message_id. In webhook mode
// the delivery error, if any, is returned with the id. It implements
// chantest.PlatformDriver.
func (s *Server) Emit(ctx context.Context, in chantest.Inbound) (string, error) {
	chat, err := ChatOf(in.Chat)
	if err != nil {
		return "", err
	}
	uid, err := strconv.ParseInt(in.From.ID, 10, 64)
	if err != nil || uid <= 0 {
		return "", fmt.Errorf("telegramtest: sender id %q is not a Telegram user id", in.From.ID)
	}
	inc := Incoming{
		Chat:       chat,
		From:       User{ID: uid, IsBot: in.From.IsBot, FirstName: cmp.Or(in.From.Name, "User "+in.From.ID)},
		Text:       in.Text,
		MentionBot: in.MentionBot,
	}
	if in.QuoteID != "" {
		if inc.ReplyTo, err = strconv.ParseInt(in.QuoteID, 10, 64); err != nil {
			return "", fmt.Errorf("telegramtest: quote id %q is not a message id", in.QuoteID)
		}
	}
	s.mu.Lock()
	m, err := s.pushLocked(inc)
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(m.MessageID, 10), s.afterPush(ctx)
}

// Received lists the bot's successful sends as chantest deliveries: text
// (or caption), reply target, mentioned user ids (text_mention entities,
// and mention entities of usernames the server knows) and message id. It
// implements chantest.PlatformDriver.
func (s *Server) Received(context.Context) ([]chantest.Delivered, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]chantest.Delivered, 0, len(s.sent))
	for _, m := range s.sent {
		kind := channel.Group
		if m.Chat.Type == ChatPrivate {
			kind = channel.Private
		}
		d := chantest.Delivered{
			Chat:      channel.Chat{Kind: kind, ID: strconv.FormatInt(m.Chat.ID, 10)},
			Text:      m.Text,
			MessageID: strconv.FormatInt(m.MessageID, 10),
		}
		if m.ReplyTo != 0 {
			d.ReplyTo = strconv.FormatInt(m.ReplyTo, 10)
		}
		for _, e := range m.Entities {
			switch {
			case e.Type == "text_mention" && e.User != nil:
				d.Mentions = append(d.Mentions, strconv.FormatInt(e.User.ID, 10))
			case e.Type == "mention":
				if id, ok := s.userByMentionLocked(m.Text, e); ok {
					d.Mentions = append(d.Mentions, strconv.FormatInt(id, 10))
				}
			}
		}
		out = append(out, d)
	}
	return out, nil
}

func (s *Server) userByMentionLocked(text string, e MessageEntity) (int64, bool) {
	units := utf16Units(text)
	if e.Offset < 0 || e.Offset+e.Length > len(units) {
		return 0, false
	}
	name := strings.TrimPrefix(utf16String(units[e.Offset:e.Offset+e.Length]), "@")
	for id, u := range s.users {
		if u.Username != "" && strings.EqualFold(u.Username, name) {
			return id, true
		}
	}
	return 0, false
}
