package telegram

import (
	"fmt"
	"math"
	"strconv"
)

// Id ranges of the Bot API. A message_id is a positive 32-bit integer (0
// marks a scheduled message that cannot be used yet). User and chat ids
// have at most 52 significant bits (the Bot API's own guarantee, so that a
// double holds them): users and private chats are positive, groups,
// supergroups and channels negative (supergroups and channels -100…).
// update_id is non-negative.
const (
	maxMessageID = math.MaxInt32
	maxPeerID    = 1<<52 - 1
)

func validMessageID(id int64) bool { return id > 0 && id <= maxMessageID }

func validUserID(id int64) bool { return id > 0 && id <= maxPeerID }

func validChatID(id int64) bool { return id != 0 && id >= -maxPeerID && id <= maxPeerID }

func validUpdateID(id int64) bool { return id >= 0 && id <= maxPeerID }

// chatIDProblem says what is wrong with a chat's id, or "": it must be in
// range and its sign must match the type (positive for a private chat,
// negative for the others; a chat without a type takes its kind from the
// sign).
func chatIDProblem(c *tgChat) string {
	switch {
	case !validChatID(c.ID):
		return "not a nonzero chat id of at most 52 bits"
	case c.Type == "private" && c.ID < 0:
		return "a private chat's id is positive"
	case (c.Type == "group" || c.Type == "supergroup" || c.Type == "channel") && c.ID > 0:
		return "a " + c.Type + "'s id is negative"
	}
	return ""
}

// invalidIDs checks every id of a message the adapter reads (the message
// and the one it replies to: message ids, chat, sender, sender chat, users
// of text mentions and new members) and says which one is out of the Bot
// API's range, or returns "". message_id 0 is left to the caller (a
// scheduled message, or a reply whose target is unknown).
func invalidIDs(m *tgMessage) string {
	for mm, prefix := m, ""; mm != nil; mm, prefix = mm.ReplyToMessage, "reply_to_message." {
		if why := messageIDProblem(mm, prefix); why != "" {
			return why
		}
		if prefix != "" {
			break // reply_to_message is not nested further
		}
	}
	return ""
}

func messageIDProblem(m *tgMessage, prefix string) string {
	if m.MessageID != 0 && !validMessageID(m.MessageID) {
		return idProblem(prefix+"message_id", m.MessageID, "not a positive 32-bit message id")
	}
	if m.Chat != nil {
		if why := chatIDProblem(m.Chat); why != "" {
			return idProblem(prefix+"chat.id", m.Chat.ID, why)
		}
	}
	if m.SenderChat != nil {
		if why := chatIDProblem(m.SenderChat); why != "" {
			return idProblem(prefix+"sender_chat.id", m.SenderChat.ID, why)
		}
	}
	user := func(field string, u *tgUser) string {
		if u != nil && !validUserID(u.ID) {
			return idProblem(prefix+field, u.ID, "not a positive user id of at most 52 bits")
		}
		return ""
	}
	if why := user("from.id", m.From); why != "" {
		return why
	}
	for i, e := range m.Entities {
		if why := user(fmt.Sprintf("entities[%d].user.id", i), e.User); why != "" {
			return why
		}
	}
	for i, e := range m.CaptionEntities {
		if why := user(fmt.Sprintf("caption_entities[%d].user.id", i), e.User); why != "" {
			return why
		}
	}
	for i := range m.NewChatMembers {
		if why := user(fmt.Sprintf("new_chat_members[%d].id", i), &m.NewChatMembers[i]); why != "" {
			return why
		}
	}
	return ""
}

func idProblem(field string, id int64, why string) string {
	return field + " " + strconv.FormatInt(id, 10) + ": " + why
}

// checkSent checks the message_id of a sent message before it goes into a
// receipt.
func (c *Channel) checkSent(method string, m sentMessage) error {
	if validMessageID(m.MessageID) {
		return nil
	}
	c.log.Warn("telegram_invalid_receipt", "method", method, "message_id", m.MessageID)
	return fmt.Errorf("telegram: %s: the result has %s", method, idProblem("message_id", m.MessageID, "not a positive 32-bit message id"))
}
