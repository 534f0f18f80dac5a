package feishu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// Event types.
const (
	// EventMessageReceive is the event of a message sent to the bot (a
	// private message, or a group message the bot may read).
	EventMessageReceive = "im.message.receive_v1"
	// typeURLVerification is the request URL check of the console.
	typeURLVerification = "url_verification"
)

// callbackBody is a callback or long-connection payload: a schema 2.0
// event, a URL verification, a legacy schema 1.0 event, or an encrypted
// body.
type callbackBody struct {
	Schema    string          `json:"schema"`
	Header    *eventHeader    `json:"header"`
	Event     json.RawMessage `json:"event"`
	Type      string          `json:"type"`
	Challenge string          `json:"challenge"`
	Token     string          `json:"token"`
	Encrypt   *string         `json:"encrypt"`
}

// eventHeader is the header of a schema 2.0 event.
type eventHeader struct {
	EventID    string `json:"event_id"`
	EventType  string `json:"event_type"`
	CreateTime string `json:"create_time"`
	Token      string `json:"token"`
	AppID      string `json:"app_id"`
	TenantKey  string `json:"tenant_key"`
}

// token is the verification token the body carries, wherever its schema
// puts it.
func (b *callbackBody) token() string {
	if b.Header != nil {
		return b.Header.Token
	}
	return b.Token
}

// messageEvent is the event of im.message.receive_v1.
type messageEvent struct {
	Sender struct {
		SenderID   userIDs `json:"sender_id"`
		SenderType string  `json:"sender_type"`
		TenantKey  string  `json:"tenant_key"`
	} `json:"sender"`
	Message struct {
		MessageID   string    `json:"message_id"`
		RootID      string    `json:"root_id"`
		ParentID    string    `json:"parent_id"`
		CreateTime  msTime    `json:"create_time"`
		ChatID      string    `json:"chat_id"`
		ThreadID    string    `json:"thread_id"`
		ChatType    string    `json:"chat_type"`
		MessageType string    `json:"message_type"`
		Content     string    `json:"content"`
		Mentions    []mention `json:"mentions"`
	} `json:"message"`
}

// msTime is a millisecond timestamp sent as a string ("1609073151345")
// or, leniently, a number.
type msTime struct{ time.Time }

// UnmarshalJSON reads the string or number; an empty string is the zero
// time.
func (t *msTime) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(bytes.TrimSpace(b), `"`))
	if s == "" || s == "null" {
		t.Time = time.Time{}
		return nil
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 || ms > 1<<47 {
		return fmt.Errorf("bad millisecond timestamp %q", s)
	}
	t.Time = time.UnixMilli(ms)
	return nil
}

// decoded is what an event payload yields.
type decoded struct {
	eventID   string
	eventType string
	events    []channel.Event
	// skip says why the payload yields no event; invalid marks a payload
	// that is well-formed JSON but unusable (redelivery cannot fix it).
	skip    string
	invalid bool
	// names are user names learnt from mentions (open id → name).
	users, names []string
	// p2pUser and p2pChat are the peer and the chat_id of a private
	// chat, for the history API.
	p2pUser, p2pChat string
}

// errMalformed is wrapped by decodeEvent's errors: the payload is not a
// JSON object of the event envelope.
var errMalformed = errors.New("feishu: malformed event payload")

// decodeEvent normalises a (decrypted) schema 2.0 event payload. botID is
// the bot's open_id, appID the app's id (events of another app are
// invalid), now the receive time (used when the message has none). A
// payload that is not JSON is an error; an unsupported event type or an
// invalid message is a skip.
func decodeEvent(body *callbackBody, raw []byte, botID, appID string, now time.Time) (decoded, error) {
	var d decoded
	switch {
	case body.Header == nil && body.Type == "event_callback":
		d.skip = "schema 1.0 event (subscribe to the 2.0 version of the event)"
		return d, nil
	case body.Header == nil:
		return d, fmt.Errorf("%w: no header", errMalformed)
	}
	h := body.Header
	d.eventID, d.eventType = h.EventID, h.EventType
	if h.AppID != "" && appID != "" && h.AppID != appID {
		d.skip, d.invalid = fmt.Sprintf("event of app %q, not %q", h.AppID, appID), true
		return d, nil
	}
	if h.EventType != EventMessageReceive {
		d.skip = "unsupported event type " + strconv.Quote(h.EventType)
		return d, nil
	}
	var me messageEvent
	if err := json.Unmarshal(body.Event, &me); err != nil {
		d.skip, d.invalid = "im.message.receive_v1 event: "+err.Error(), true
		return d, nil
	}
	ev, p, why := normalizeMessage(&me, botID, now)
	if why != "" {
		d.skip, d.invalid = why, true
		return d, nil
	}
	ev.Raw = json.RawMessage(bytes.Clone(raw))
	d.events = []channel.Event{ev}
	d.users, d.names = p.users, p.names
	if ev.Chat.Kind == channel.Private && validID(me.Message.ChatID) {
		d.p2pUser, d.p2pChat = ev.Chat.ID, me.Message.ChatID
	}
	return d, nil
}

// validID checks a platform id: non-empty, printable ASCII without
// separators, at most 128 bytes.
func validID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '/' || c == ':' || c == '%' {
			return false
		}
	}
	return true
}

// normalizeMessage turns a received message into an event. why says what
// makes it invalid.
func normalizeMessage(me *messageEvent, botID string, now time.Time) (channel.Event, parsed, string) {
	m := &me.Message
	sender := me.Sender.SenderID.OpenID
	switch {
	case !validID(m.MessageID):
		return channel.Event{}, parsed{}, "message_id missing or malformed"
	case !validID(sender):
		return channel.Event{}, parsed{}, "sender open_id missing or malformed"
	case m.ParentID != "" && !validID(m.ParentID):
		return channel.Event{}, parsed{}, "parent_id malformed"
	}
	ev := channel.Event{
		Platform:  Platform,
		BotID:     botID,
		Kind:      channel.KindMessage,
		MessageID: m.MessageID,
		Time:      m.CreateTime.Time,
		Sender:    channel.Sender{ID: sender, IsBot: me.Sender.SenderType == "app"},
		Source:    channel.SourceLive,
	}
	if ev.Time.IsZero() {
		ev.Time = now
	}
	switch m.ChatType {
	case "p2p":
		ev.Chat = channel.Chat{Kind: channel.Private, ID: sender}
	case "group", "topic_group":
		if !validID(m.ChatID) {
			return channel.Event{}, parsed{}, "chat_id missing or malformed"
		}
		ev.Chat = channel.Chat{Kind: channel.Group, ID: m.ChatID}
	default:
		return channel.Event{}, parsed{}, fmt.Sprintf("unknown chat_type %q", m.ChatType)
	}
	if sender == botID {
		ev.Kind = channel.KindSelf
	}
	p, err := parseContent(m.MessageType, m.Content, m.Mentions, botID, m.MessageID)
	if err != nil {
		return channel.Event{}, parsed{}, err.Error()
	}
	ev.ToMe = p.toMe
	ev.Segments = p.segs
	if m.ParentID != "" {
		ev.Segments = append([]channel.Segment{channel.Quote(m.ParentID)}, ev.Segments...)
	}
	return ev, p, ""
}

// historyItem is a message as the message API lists it.
type historyItem struct {
	MessageID  string `json:"message_id"`
	RootID     string `json:"root_id"`
	ParentID   string `json:"parent_id"`
	MsgType    string `json:"msg_type"`
	CreateTime msTime `json:"create_time"`
	Deleted    bool   `json:"deleted"`
	ChatID     string `json:"chat_id"`
	Sender     struct {
		ID         string `json:"id"`
		IDType     string `json:"id_type"`
		SenderType string `json:"sender_type"`
	} `json:"sender"`
	Body struct {
		Content string `json:"content"`
	} `json:"body"`
	Mentions []mention `json:"mentions"`
}

// normalizeHistory turns a listed message into an event of chat: the
// app's own messages (sender_type "app" with the app's id) are KindSelf.
// ok is false for a message that cannot be normalised (deleted, ids
// missing, content malformed).
func normalizeHistory(it *historyItem, chat channel.Chat, botID, appID string) (channel.Event, bool) {
	if it.Deleted || !validID(it.MessageID) || !validID(it.Sender.ID) || it.CreateTime.IsZero() {
		return channel.Event{}, false
	}
	ev := channel.Event{
		Platform:  Platform,
		BotID:     botID,
		Kind:      channel.KindMessage,
		Chat:      chat,
		MessageID: it.MessageID,
		Time:      it.CreateTime.Time,
		Sender:    channel.Sender{ID: it.Sender.ID, IsBot: it.Sender.SenderType == "app"},
		Source:    channel.SourceBackfill,
	}
	if it.Sender.SenderType == "app" && it.Sender.ID == appID {
		ev.Kind, ev.Sender.ID = channel.KindSelf, botID
	}
	p, err := parseContent(it.MsgType, it.Body.Content, it.Mentions, botID, it.MessageID)
	if err != nil {
		return channel.Event{}, false
	}
	ev.ToMe = p.toMe
	ev.Segments = p.segs
	if it.ParentID != "" && validID(it.ParentID) {
		ev.Segments = append([]channel.Segment{channel.Quote(it.ParentID)}, ev.Segments...)
	}
	return ev, true
}

// plainText is the text of segments as a quote shows it: text and
// mention names.
func plainText(segs []channel.Segment) string {
	var b strings.Builder
	for _, s := range segs {
		switch s.Type {
		case channel.SegText:
			b.WriteString(s.Text)
		case channel.SegMention:
			b.WriteString(s.Text)
		}
	}
	s := b.String()
	if !utf8.ValidString(s) {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
