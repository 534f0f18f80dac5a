package wecom

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
)

// aibotMessage is the decrypted JSON of an AI-bot callback, or the body of
// a long-connection callback frame: a message (text, image, mixed, voice,
// file), a stream refresh or an event.
type aibotMessage struct {
	MsgID       string          `json:"msgid"`
	AIBotID     string          `json:"aibotid"`
	ChatID      string          `json:"chatid"`
	ChatType    string          `json:"chattype"`
	From        aibotFrom       `json:"from"`
	CreateTime  flexInt         `json:"create_time"`
	ResponseURL string          `json:"response_url"`
	MsgType     string          `json:"msgtype"`
	Text        *aibotText      `json:"text"`
	Image       *aibotMedia     `json:"image"`
	Mixed       *aibotMixed     `json:"mixed"`
	Voice       *aibotText      `json:"voice"`
	File        *aibotMedia     `json:"file"`
	Quote       *aibotQuote     `json:"quote"`
	Stream      *aibotStreamRef `json:"stream"`
	Event       *aibotEvent     `json:"event"`
	EventType   string          `json:"event_type"`
}

type aibotFrom struct {
	UserID string `json:"userid"`
}

type aibotText struct {
	Content string `json:"content"`
}

type aibotMedia struct {
	URL    string `json:"url"`
	AESKey string `json:"aeskey"`
}

type aibotItem struct {
	MsgType string      `json:"msgtype"`
	Text    *aibotText  `json:"text"`
	Image   *aibotMedia `json:"image"`
}

type aibotMixed struct {
	Items []aibotItem `json:"msg_item"`
}

type aibotQuote struct {
	MsgType string      `json:"msgtype"`
	Text    *aibotText  `json:"text"`
	Image   *aibotMedia `json:"image"`
	Mixed   *aibotMixed `json:"mixed"`
	Voice   *aibotText  `json:"voice"`
	File    *aibotMedia `json:"file"`
}

type aibotStreamRef struct {
	ID string `json:"id"`
}

type aibotEvent struct {
	EventType    string `json:"eventtype"`
	EventTypeAlt string `json:"event_type"`
}

// eventType returns the event's type, wherever the frame put it.
func (m *aibotMessage) eventType() string {
	switch {
	case m.Event != nil && m.Event.EventType != "":
		return m.Event.EventType
	case m.Event != nil && m.Event.EventTypeAlt != "":
		return m.Event.EventTypeAlt
	}
	return m.EventType
}

// flexInt is a JSON integer that may also arrive as a string of digits.
type flexInt int64

// UnmarshalJSON accepts 123, "123" and null.
func (f *flexInt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s == "" {
			return nil
		}
		b = []byte(s)
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("not an integer: %q", b)
	}
	*f = flexInt(n)
	return nil
}

// decodeAIBotMessage parses an AI-bot message JSON.
func decodeAIBotMessage(plain []byte) (*aibotMessage, error) {
	var m aibotMessage
	if err := json.Unmarshal(plain, &m); err != nil {
		return nil, fmt.Errorf("wecom: AI-bot message JSON: %w", err)
	}
	return &m, nil
}

// aibotChat returns the chat of an AI-bot callback.
func aibotChat(m *aibotMessage) (channel.Chat, error) {
	switch m.ChatType {
	case "group":
		if !validID(m.ChatID) {
			return channel.Chat{}, fmt.Errorf("group callback with chatid %q", m.ChatID)
		}
		return channel.Chat{Kind: channel.Group, ID: m.ChatID}, nil
	case "single", "":
		if !validID(m.From.UserID) {
			return channel.Chat{}, fmt.Errorf("single-chat callback with userid %q", m.From.UserID)
		}
		return channel.Chat{Kind: channel.Private, ID: m.From.UserID}, nil
	}
	return channel.Chat{}, fmt.Errorf("chattype %q", m.ChatType)
}

// aibotBotID checks the callback's aibotid against the configured or
// learned bot id and returns the id events carry.
func (c *Channel) aibotBotID(m *aibotMessage) (string, error) {
	known := c.BotID()
	switch {
	case m.AIBotID == "" && known == "":
		return "", fmt.Errorf("no aibotid and no Config.BotID")
	case m.AIBotID == "":
		return known, nil
	case !validID(m.AIBotID) || strings.ContainsAny(m.AIBotID, ":/"):
		return "", fmt.Errorf("aibotid %q cannot be a bot id", m.AIBotID)
	case known != "" && m.AIBotID != known:
		return "", fmt.Errorf("aibotid %q is not this bot (%s)", m.AIBotID, known)
	}
	if known == "" {
		id := m.AIBotID
		if c.botID.CompareAndSwap(nil, &id) {
			c.log.Info("wecom_bot_learned", "bot_id", id)
		} else if c.BotID() != id {
			return "", fmt.Errorf("aibotid %q is not this bot (%s)", m.AIBotID, c.BotID())
		}
	}
	return m.AIBotID, nil
}

// aibotEvent turns an AI-bot message (msgtype text, image, mixed, voice or
// file) into an event. It records the message for quote resolution and
// the media keys it carries. skip is why there is no event.
func (c *Channel) aibotEvent(m *aibotMessage, plain []byte) (ev channel.Event, skip string) {
	bot, err := c.aibotBotID(m)
	if err != nil {
		return ev, err.Error()
	}
	chat, err := aibotChat(m)
	if err != nil {
		return ev, err.Error()
	}
	if !validID(m.MsgID) {
		return ev, fmt.Sprintf("msgid %q is not a message id", m.MsgID)
	}
	if !validID(m.From.UserID) {
		return ev, fmt.Sprintf("from.userid %q is not a user id", m.From.UserID)
	}
	now := c.clk.Now()
	group := chat.Kind == channel.Group
	var segs []channel.Segment
	var raw strings.Builder // the text as shown, for quote resolution
	addText := func(s string) {
		raw.WriteString(s)
		if group {
			segs = append(segs, c.mentionBot(s, bot)...)
		} else if s != "" {
			segs = append(segs, channel.Text(s))
		}
	}
	addMedia := func(t channel.SegmentType, md *aibotMedia) bool {
		if md == nil || md.URL == "" {
			return false
		}
		c.keys.put(md.URL, md.AESKey, now)
		segs = append(segs, channel.Segment{Type: t, Media: &channel.Media{URL: md.URL}})
		return true
	}
	switch m.MsgType {
	case "text":
		if m.Text == nil || m.Text.Content == "" {
			return ev, "text message without text.content"
		}
		addText(m.Text.Content)
	case "image":
		if !addMedia(channel.SegImage, m.Image) {
			return ev, "image message without image.url"
		}
	case "file":
		if !addMedia(channel.SegFile, m.File) {
			return ev, "file message without file.url"
		}
	case "voice":
		if m.Voice == nil {
			return ev, "voice message without voice"
		}
		tr := m.Voice.Content
		if strings.TrimSpace(tr) == "" {
			tr = " " // nothing was said (and there is no clip to transcribe)
		}
		segs = append(segs, channel.Segment{Type: channel.SegVoice, Media: &channel.Media{Transcript: tr}})
		raw.WriteString(m.Voice.Content)
	case "mixed":
		if m.Mixed == nil || len(m.Mixed.Items) == 0 {
			return ev, "mixed message without msg_item"
		}
		for _, it := range m.Mixed.Items {
			switch {
			case it.MsgType == "text" && it.Text != nil:
				addText(it.Text.Content)
			case it.MsgType == "image":
				addMedia(channel.SegImage, it.Image)
			}
		}
		if len(segs) == 0 {
			return ev, "mixed message without a text or image item"
		}
	default:
		return ev, "message type " + strconv.Quote(m.MsgType)
	}
	if group && !hasMention(segs, bot) {
		// A group callback is always an @-message of the bot.
		segs = append([]channel.Segment{channel.Mention(bot)}, segs...)
	}
	ev = channel.Event{
		Platform:  Platform,
		BotID:     bot,
		Kind:      channel.KindMessage,
		Chat:      chat,
		MessageID: m.MsgID,
		Time:      now,
		Sender:    channel.Sender{ID: m.From.UserID},
		Segments:  segs,
		ToMe:      true,
		Source:    channel.SourceLive,
		Raw:       json.RawMessage(bytes.Clone(plain)),
	}
	if t := int64(m.CreateTime); t > 0 && t < 1<<40 {
		ev.Time = time.Unix(t, 0)
	}
	if m.Quote != nil {
		c.attachQuote(&ev, m.Quote, bot, now)
	}
	if err := ev.Validate(); err != nil {
		return channel.Event{}, err.Error()
	}
	c.recent.add(chat, recentMessage{id: ev.MessageID, text: raw.String(), alt: ev.Text(), sender: ev.Sender})
	return ev, ""
}

// hasMention reports whether segs mention id.
func hasMention(segs []channel.Segment, id string) bool {
	for _, s := range segs {
		if s.Type == channel.SegMention && s.UserID == id {
			return true
		}
	}
	return false
}

// mentionBot splits a group text at "@<BotName>": each occurrence becomes
// a mention segment of the bot (keeping the span as its text), and the
// one space (or U+2005, which clients put after a mention) that follows
// it is dropped. Without a configured BotName the text stays as it is.
func (c *Channel) mentionBot(s, bot string) []channel.Segment {
	var out []channel.Segment
	name := c.cfg.BotName
	for name != "" {
		i := strings.Index(s, "@"+name)
		if i < 0 {
			break
		}
		if i > 0 {
			out = append(out, channel.Text(s[:i]))
		}
		out = append(out, channel.Segment{Type: channel.SegMention, UserID: bot, Text: "@" + name})
		s = s[i+1+len(name):]
		switch {
		case strings.HasPrefix(s, " "):
			s = s[1:]
		case strings.HasPrefix(s, "\u2005"):
			s = s[len("\u2005"):]
		}
	}
	if s != "" {
		out = append(out, channel.Text(s))
	}
	return out
}

// attachQuote adds what the message quotes: the quoted content as
// Event.Quoted, and a quote segment with its message id when a recent
// message of the chat has exactly that text (AI-bot quotes carry the
// content, not the id).
func (c *Channel) attachQuote(ev *channel.Event, q *aibotQuote, bot string, now time.Time) {
	var segs []channel.Segment
	var text strings.Builder
	addMedia := func(t channel.SegmentType, md *aibotMedia) {
		if md != nil && md.URL != "" {
			c.keys.put(md.URL, md.AESKey, now)
			segs = append(segs, channel.Segment{Type: t, Media: &channel.Media{URL: md.URL}})
		}
	}
	addText := func(s string) {
		if s != "" {
			text.WriteString(s)
			segs = append(segs, channel.Text(s))
		}
	}
	switch q.MsgType {
	case "text":
		if q.Text != nil {
			addText(q.Text.Content)
		}
	case "image":
		addMedia(channel.SegImage, q.Image)
	case "file":
		addMedia(channel.SegFile, q.File)
	case "voice":
		if q.Voice != nil {
			text.WriteString(q.Voice.Content)
			segs = append(segs, channel.Segment{Type: channel.SegVoice, Media: &channel.Media{Transcript: q.Voice.Content}})
		}
	case "mixed":
		if q.Mixed != nil {
			for _, it := range q.Mixed.Items {
				switch {
				case it.MsgType == "text" && it.Text != nil:
					addText(it.Text.Content)
				case it.MsgType == "image":
					addMedia(channel.SegImage, it.Image)
				}
			}
		}
	}
	if len(segs) == 0 {
		return
	}
	quoted := &channel.Quoted{Text: text.String(), Segments: segs}
	if m, ok := c.recent.find(ev.Chat, text.String()); ok {
		quoted.MessageID, quoted.Sender, quoted.FromBot = m.id, m.sender, m.fromBot
		if m.fromBot {
			quoted.Sender = channel.Sender{ID: bot}
		}
		ev.Segments = append([]channel.Segment{channel.Quote(m.id)}, ev.Segments...)
	}
	ev.Quoted = quoted
}
