package dingtalk

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

// The conversationType values of a robot message.
const (
	conversationPrivate = "1"
	conversationGroup   = "2"
)

// maxID bounds the ids a robot message carries (message, conversation,
// user and download code); longer ones make the message invalid.
const maxID = 512

// errMalformed is wrapped by every parse error of a robot message: the
// message is logged and dropped (and acknowledged, since delivering it
// again cannot make it valid).
var errMalformed = errors.New("dingtalk: malformed robot message")

// errSkipped is wrapped when a valid robot message has nothing the
// pipeline can use (an unsupported msgtype): it is logged and
// acknowledged.
var errSkipped = errors.New("dingtalk: robot message skipped")

// flexInt is an integer sent as a JSON number or a numeric string ("" and
// null are 0).
type flexInt int64

func (n *flexInt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if isNull(b) {
		*n = 0
		return nil
	}
	s := string(b)
	if b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		s = strings.TrimSpace(s)
		if s == "" {
			*n = 0
			return nil
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	*n = flexInt(v)
	return nil
}

// flexBool is a boolean sent as a JSON boolean or as "true"/"false".
type flexBool bool

func (v *flexBool) UnmarshalJSON(b []byte) error {
	switch strings.Trim(string(bytes.TrimSpace(b)), `"`) {
	case "true":
		*v = true
	case "false", "null", "":
		*v = false
	default:
		return fmt.Errorf("%s is not a boolean", b)
	}
	return nil
}

// atUser is one entry of atUsers.
type atUser struct {
	DingtalkID string `json:"dingtalkId"`
	StaffID    string `json:"staffId"`
}

// repliedMsg is the quoted message of a reply. It is not in the official
// documentation; it has been observed in text messages as
// text.isReplyMsg / text.repliedMsg and is read leniently.
type repliedMsg struct {
	MsgID      string          `json:"msgId"`
	MsgType    string          `json:"msgType"`
	SenderID   string          `json:"senderId"`
	SenderNick string          `json:"senderNick"`
	Content    json.RawMessage `json:"content"`
}

type textContent struct {
	Content    string      `json:"content"`
	IsReplyMsg flexBool    `json:"isReplyMsg"`
	RepliedMsg *repliedMsg `json:"repliedMsg"`
}

// botMessage is the data of a robot message callback (topic
// BotMessageTopic), as documented for "receive messages".
type botMessage struct {
	ConversationID            string          `json:"conversationId"`
	ConversationType          string          `json:"conversationType"`
	ConversationTitle         string          `json:"conversationTitle"`
	AtUsers                   []atUser        `json:"atUsers"`
	ChatbotCorpID             string          `json:"chatbotCorpId"`
	ChatbotUserID             string          `json:"chatbotUserId"`
	MsgID                     string          `json:"msgId"`
	SenderNick                string          `json:"senderNick"`
	IsAdmin                   flexBool        `json:"isAdmin"`
	SenderStaffID             string          `json:"senderStaffId"`
	SenderID                  string          `json:"senderId"`
	SenderCorpID              string          `json:"senderCorpId"`
	SessionWebhook            string          `json:"sessionWebhook"`
	SessionWebhookExpiredTime flexInt         `json:"sessionWebhookExpiredTime"`
	CreateAt                  flexInt         `json:"createAt"`
	IsInAtList                flexBool        `json:"isInAtList"`
	RobotCode                 string          `json:"robotCode"`
	Msgtype                   string          `json:"msgtype"`
	Text                      *textContent    `json:"text"`
	Content                   json.RawMessage `json:"content"`
}

// mediaContent is the content of picture, audio, video and file messages
// and of a richText picture item.
type mediaContent struct {
	DownloadCode        string  `json:"downloadCode"`
	PictureDownloadCode string  `json:"pictureDownloadCode"`
	Recognition         string  `json:"recognition"`
	Duration            flexInt `json:"duration"`
	VideoType           string  `json:"videoType"`
	FileName            string  `json:"fileName"`
	FileID              string  `json:"fileId"`
	SpaceID             string  `json:"spaceId"`
}

// richItem is one item of a richText message: text, or a picture.
type richItem struct {
	Text *string `json:"text"`
	Type string  `json:"type"`
	mediaContent
}

// inbound is a decoded robot message.
type inbound struct {
	ev channel.Event
	// webhook is the conversation's session webhook and its expiry
	// (zero when the message carried none).
	webhook string
	expires time.Time
	// msgtype is what the message was, for logs.
	msgtype string
}

// parseBotMessage turns the data of a robot message callback into an
// event. botID is the robot code (Event.BotID); at is the time used when
// the message has no createAt. Every error wraps errMalformed or
// errSkipped.
func parseBotMessage(data []byte, botID string, at time.Time) (inbound, error) {
	bad := func(format string, a ...any) (inbound, error) {
		return inbound{}, fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, a...))
	}
	if !utf8.Valid(data) {
		return bad("not valid UTF-8")
	}
	var m botMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return bad("%v", err)
	}
	for _, f := range []struct{ name, v string }{
		{"msgId", m.MsgID}, {"conversationId", m.ConversationID}, {"senderStaffId", m.SenderStaffID},
		{"senderId", m.SenderID}, {"chatbotUserId", m.ChatbotUserID},
	} {
		if len(f.v) > maxID || strings.ContainsFunc(f.v, isControl) {
			return bad("%s is not a usable id", f.name)
		}
	}
	if m.MsgID == "" {
		return bad("no msgId")
	}
	sender := m.SenderStaffID
	if sender == "" {
		sender = m.SenderID
	}
	if sender == "" {
		return bad("no senderStaffId or senderId")
	}

	ev := channel.Event{
		Platform:  Platform,
		BotID:     botID,
		Kind:      channel.KindMessage,
		MessageID: m.MsgID,
		Sender:    channel.Sender{ID: sender, Name: cleanName(m.SenderNick)},
		Source:    channel.SourceLive,
		Raw:       json.RawMessage(bytes.Clone(data)),
	}
	switch m.ConversationType {
	case conversationGroup:
		if m.ConversationID == "" {
			return bad("a group message without conversationId")
		}
		ev.Chat = channel.Chat{Kind: channel.Group, ID: m.ConversationID}
	case conversationPrivate:
		ev.Chat = channel.Chat{Kind: channel.Private, ID: sender}
	default:
		return bad("conversationType %q is neither %q nor %q", m.ConversationType, conversationPrivate, conversationGroup)
	}
	if m.ChatbotUserID != "" && (m.SenderID == m.ChatbotUserID || m.SenderStaffID == m.ChatbotUserID) {
		ev.Kind = channel.KindSelf // the robot's own message, if the platform ever echoes one
		ev.Sender.IsBot = true
	}
	switch {
	case m.CreateAt > 0 && m.CreateAt < 1e14:
		ev.Time = time.UnixMilli(int64(m.CreateAt))
	default:
		ev.Time = at
	}

	var segs []channel.Segment
	if m.Text != nil && bool(m.Text.IsReplyMsg) && m.Text.RepliedMsg != nil {
		if q := quoted(m.Text.RepliedMsg, m.ChatbotUserID); q != nil {
			segs = append(segs, channel.Quote(q.MessageID))
			ev.Quoted = q
		}
	}
	mentioned := map[string]bool{}
	if m.IsInAtList {
		segs = append(segs, channel.Mention(botID))
		mentioned[botID] = true
		ev.ToMe = true
	}
	for _, u := range m.AtUsers {
		if m.ChatbotUserID != "" && u.DingtalkID == m.ChatbotUserID {
			continue // the robot: isInAtList says so
		}
		id := u.StaffID
		if id == "" {
			id = u.DingtalkID
		}
		if id == "" || len(id) > maxID || strings.ContainsFunc(id, isControl) || mentioned[id] {
			continue
		}
		mentioned[id] = true
		segs = append(segs, channel.Mention(id))
	}

	content, err := contentSegments(&m)
	if err != nil {
		if errors.Is(err, errSkipped) {
			return inbound{}, err
		}
		return bad("%s: %v", m.Msgtype, err)
	}
	ev.Segments = append(segs, content...)

	in := inbound{ev: ev, msgtype: m.Msgtype}
	if m.SessionWebhook != "" && m.SessionWebhookExpiredTime > 0 && m.SessionWebhookExpiredTime < 1e14 {
		in.webhook = m.SessionWebhook
		in.expires = time.UnixMilli(int64(m.SessionWebhookExpiredTime))
	}
	return in, nil
}

// contentSegments converts the message body by msgtype.
func contentSegments(m *botMessage) ([]channel.Segment, error) {
	switch m.Msgtype {
	case "text":
		if m.Text == nil || m.Text.Content == "" {
			return nil, errors.New("no text.content")
		}
		return []channel.Segment{channel.Text(m.Text.Content)}, nil
	case "picture":
		var c mediaContent
		if err := decodeContent(m.Content, &c); err != nil {
			return nil, err
		}
		code := c.code()
		if code == "" {
			return nil, errors.New("no downloadCode")
		}
		return []channel.Segment{channel.Image(channel.Media{FileID: code})}, nil
	case "richText":
		var c struct {
			RichText []richItem `json:"richText"`
		}
		if err := decodeContent(m.Content, &c); err != nil {
			return nil, err
		}
		var segs []channel.Segment
		for _, it := range c.RichText {
			switch {
			case it.Text != nil && *it.Text != "":
				segs = append(segs, channel.Text(*it.Text))
			case it.Type == "picture" || it.code() != "":
				if code := it.code(); code != "" {
					segs = append(segs, channel.Image(channel.Media{FileID: code}))
				}
			}
		}
		if len(segs) == 0 {
			return nil, errors.New("a richText without text or pictures")
		}
		return segs, nil
	case "audio":
		var c mediaContent
		if err := decodeContent(m.Content, &c); err != nil {
			return nil, err
		}
		if c.code() == "" {
			return nil, errors.New("no downloadCode")
		}
		md := channel.Media{FileID: c.code()}
		if r := strings.TrimSpace(c.Recognition); r != "" {
			md.Transcript = r // DingTalk's own speech recognition
		}
		return []channel.Segment{{Type: channel.SegVoice, Media: &md}}, nil
	case "video":
		var c mediaContent
		if err := decodeContent(m.Content, &c); err != nil {
			return nil, err
		}
		if c.code() == "" {
			return nil, errors.New("no downloadCode")
		}
		md := channel.Media{FileID: c.code()}
		if c.Duration > 0 && c.Duration < 1e6 {
			md.Duration = int(c.Duration) // seconds
		}
		if t := strings.ToLower(strings.TrimSpace(c.VideoType)); t != "" && isToken(t) {
			md.MIME = "video/" + t
		}
		return []channel.Segment{{Type: channel.SegVideo, Media: &md}}, nil
	case "file":
		var c mediaContent
		if err := decodeContent(m.Content, &c); err != nil {
			return nil, err
		}
		if c.code() == "" {
			return nil, errors.New("no downloadCode")
		}
		md := channel.Media{FileID: c.code(), Name: cleanName(c.FileName)}
		return []channel.Segment{{Type: channel.SegFile, Media: &md}}, nil
	}
	return nil, fmt.Errorf("%w: msgtype %q is not supported", errSkipped, m.Msgtype)
}

// code is the download code of a media item: downloadCode, else
// pictureDownloadCode. A code that is not a usable id counts as none.
func (c *mediaContent) code() string {
	code := c.DownloadCode
	if code == "" {
		code = c.PictureDownloadCode
	}
	if len(code) > maxID || strings.ContainsFunc(code, isControl) {
		return ""
	}
	return code
}

// decodeContent reads the content object (leniently also a JSON string
// holding one).
func decodeContent(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return errors.New("no content")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		raw = json.RawMessage(s)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("content: %w", err)
	}
	return nil
}

// quoted reads a reply's quoted message; nil when it has no usable id.
func quoted(r *repliedMsg, botUserID string) *channel.Quoted {
	if r.MsgID == "" || len(r.MsgID) > maxID || strings.ContainsFunc(r.MsgID, isControl) {
		return nil
	}
	q := &channel.Quoted{MessageID: r.MsgID, Sender: channel.Sender{ID: r.SenderID, Name: cleanName(r.SenderNick)}}
	if len(q.Sender.ID) > maxID || strings.ContainsFunc(q.Sender.ID, isControl) {
		q.Sender.ID = ""
	}
	q.FromBot = botUserID != "" && r.SenderID == botUserID
	var c struct {
		Text     string `json:"text"`
		RichText []struct {
			Text    string `json:"text"`
			Content string `json:"content"`
			MsgType string `json:"msgType"`
			Type    string `json:"type"`
		} `json:"richText"`
	}
	if decodeContent(r.Content, &c) == nil {
		var b strings.Builder
		b.WriteString(c.Text)
		for _, it := range c.RichText {
			switch {
			case it.Text != "":
				b.WriteString(it.Text)
			case (it.MsgType == "text" || it.Type == "text") && it.Content != "":
				b.WriteString(it.Content)
			}
		}
		q.Text = b.String()
		if q.Text != "" {
			q.Segments = []channel.Segment{channel.Text(q.Text)}
		}
	} else if s := ""; json.Unmarshal(r.Content, &s) == nil {
		q.Text = s // content as plain text
	}
	return q
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// cleanName drops control characters from a display name.
func cleanName(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return -1
		}
		return r
	}, s)
}

// isToken reports whether s is a short run of letters, digits, '.', '+'
// or '-' (a media subtype).
func isToken(s string) bool {
	if len(s) > 32 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '+' || r == '-'
		if !ok {
			return false
		}
	}
	return true
}
