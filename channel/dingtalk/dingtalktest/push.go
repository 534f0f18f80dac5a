package dingtalktest

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// User is a DingTalk user as robot callbacks describe them.
type User struct {
	// StaffID is the user id within the organisation (senderStaffId);
	// empty for a user the organisation does not know.
	StaffID string
	// DingtalkID is the senderId ("$:LWCP_v1:$…"); default derived from
	// StaffID.
	DingtalkID string
	Nick       string
	// CorpID defaults to the server's; Admin is isAdmin.
	CorpID string
	Admin  bool
}

// dingtalkID returns the user's dingtalk id.
func (u User) dingtalkID() string {
	if u.DingtalkID != "" {
		return u.DingtalkID
	}
	return "$:LWCP_v1:$" + hex.EncodeToString([]byte(u.StaffID))
}

// Media describes the content of a picture, audio, video or file
// message, or a richText picture.
type Media struct {
	DownloadCode        string
	PictureDownloadCode string
	// Recognition is an audio message's speech recognition.
	Recognition string
	// Duration (seconds) and VideoType describe a video.
	Duration  int
	VideoType string
	// FileName, FileID and SpaceID describe a file.
	FileName, FileID, SpaceID string
}

// RichItem is one item of a richText message: Text, or a Picture.
type RichItem struct {
	Text    string
	Picture *Media
}

// Incoming is a robot message the fake pushes.
type Incoming struct {
	// Group selects a group conversation (ConversationID required);
	// otherwise the one-to-one chat of From with the robot.
	Group          bool
	ConversationID string
	// Title is the group's conversationTitle (default "Group <id>").
	Title string
	From  User
	// MsgType defaults from the content: text, picture, richText, audio,
	// video or file.
	MsgType string
	Text    string
	// MentionBot @-mentions the robot: isInAtList, the robot in atUsers,
	// and (as DingTalk does) a space where the "@name" was removed from
	// the text. AtUsers are other mentioned users.
	MentionBot bool
	AtUsers    []User
	// ReplyTo quotes a message by msgId (text.isReplyMsg and
	// text.repliedMsg, as DingTalk sends them for a reply).
	ReplyTo  string
	Picture  *Media
	RichText []RichItem
	Audio    *Media
	Video    *Media
	File     *Media
	// Content, when set, is the raw content object of another msgtype.
	Content json.RawMessage
	// MsgID defaults to a fresh id; At to the clock's now.
	MsgID string
	At    time.Time
	// NoWebhook leaves out sessionWebhook and its expiry.
	NoWebhook bool
}

// Pushed is what Push sent.
type Pushed struct {
	// MsgID is the message's msgId; FrameID the frame's messageId.
	MsgID   string
	FrameID string
	// ConversationID is the conversation; Webhook its session webhook
	// and Expires the webhook's expiry.
	ConversationID string
	Webhook        string
	Expires        time.Time
	// Data is the callback data as sent.
	Data []byte
}

// Push sends a robot message callback on the newest stream connection,
// as DingTalk does for a message to the robot, and returns what it sent.
// It creates (or renews) the conversation's session webhook. The message
// is not delivered again if the client refuses it: DingTalk's robot
// messages are fire-and-forget.
func (s *Server) Push(ctx context.Context, in Incoming) (Pushed, error) {
	data, p, err := s.build(in)
	if err != nil {
		return Pushed{}, err
	}
	p.FrameID, err = s.PushFrame(ctx, Frame{Type: "CALLBACK", Headers: map[string]string{
		"topic": BotMessageTopic, "appId": "fake-app-" + s.cfg.ClientID}, Data: string(data)})
	return p, err
}

// PushCallback sends a robot message callback with the given data as is
// (for malformed and unusual payloads) and returns the frame's messageId.
func (s *Server) PushCallback(ctx context.Context, data string) (string, error) {
	return s.PushFrame(ctx, Frame{Type: "CALLBACK", Headers: map[string]string{"topic": BotMessageTopic}, Data: data})
}

// build makes the callback data and registers the message and the
// conversation's session.
func (s *Server) build(in Incoming) ([]byte, Pushed, error) {
	if in.Group && in.ConversationID == "" {
		return nil, Pushed{}, errors.New("dingtalktest: a group message needs a ConversationID")
	}
	if in.From.StaffID == "" && in.From.DingtalkID == "" {
		return nil, Pushed{}, errors.New("dingtalktest: the sender needs a StaffID or a DingtalkID")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	at := in.At
	if at.IsZero() {
		at = now
	}
	conv := in.ConversationID
	if !in.Group {
		conv = privateConv(cmp.Or(in.From.StaffID, in.From.dingtalkID()))
	}
	c := s.ensureConvLocked(conv, in.Group, cmp.Or(in.From.StaffID, in.From.dingtalkID()))
	if in.Title != "" {
		c.title = in.Title
	}
	msgID := in.MsgID
	if msgID == "" {
		s.nextMsg++
		msgID = fmt.Sprintf("msg%s%04dQ==", randHex(8), s.nextMsg)
	}

	d := map[string]any{
		"conversationId":   conv,
		"chatbotCorpId":    s.cfg.CorpID,
		"chatbotUserId":    s.ChatbotUserID(),
		"msgId":            msgID,
		"senderNick":       in.From.Nick,
		"isAdmin":          in.From.Admin,
		"senderId":         in.From.dingtalkID(),
		"senderCorpId":     cmp.Or(in.From.CorpID, s.cfg.CorpID),
		"createAt":         at.UnixMilli(),
		"conversationType": "1",
		"robotCode":        s.cfg.RobotCode,
	}
	if in.From.StaffID != "" {
		d["senderStaffId"] = in.From.StaffID
	}
	if in.Group {
		d["conversationType"] = "2"
		d["conversationTitle"] = c.title
		d["isInAtList"] = in.MentionBot
		var at []map[string]string
		if in.MentionBot {
			at = append(at, map[string]string{"dingtalkId": s.ChatbotUserID()})
		}
		for _, u := range in.AtUsers {
			e := map[string]string{"dingtalkId": u.dingtalkID()}
			if u.StaffID != "" {
				e["staffId"] = u.StaffID
			}
			at = append(at, e)
		}
		if at != nil {
			d["atUsers"] = at
		}
	}
	p := Pushed{MsgID: msgID, ConversationID: conv}
	if !in.NoWebhook {
		tok := s.convSession[conv]
		if ss := s.sessions[tok]; tok == "" || ss == nil || !now.Before(ss.expires) {
			tok = randHex(16)
			s.convSession[conv] = tok
		}
		exp := at.Add(s.cfg.SessionTTL)
		s.sessions[tok] = &session{conv: conv, expires: exp}
		p.Webhook = s.hs.URL + "/robot/sendBySession?session=" + tok
		p.Expires = exp
		d["sessionWebhook"] = p.Webhook
		d["sessionWebhookExpiredTime"] = exp.UnixMilli()
	}

	msgType := in.MsgType
	text := in.Text
	switch {
	case in.Content != nil:
		d["content"] = in.Content
	case in.Picture != nil:
		msgType = cmp.Or(msgType, "picture")
		d["content"] = mediaJSON(in.Picture)
	case in.RichText != nil:
		msgType = cmp.Or(msgType, "richText")
		var items []map[string]any
		for _, it := range in.RichText {
			if it.Picture != nil {
				m := mediaJSON(it.Picture)
				m["type"] = "picture"
				items = append(items, m)
				continue
			}
			items = append(items, map[string]any{"text": it.Text})
			text += it.Text
		}
		d["content"] = map[string]any{"richText": items}
	case in.Audio != nil:
		msgType = cmp.Or(msgType, "audio")
		d["content"] = mediaJSON(in.Audio)
	case in.Video != nil:
		msgType = cmp.Or(msgType, "video")
		d["content"] = mediaJSON(in.Video)
	case in.File != nil:
		msgType = cmp.Or(msgType, "file")
		d["content"] = mediaJSON(in.File)
	default:
		msgType = cmp.Or(msgType, "text")
		content := in.Text
		if in.MentionBot && in.Group {
			content = " " + content // where DingTalk removed the robot's @name
		}
		t := map[string]any{"content": content}
		if in.ReplyTo != "" {
			t["isReplyMsg"] = true
			t["repliedMsg"] = s.repliedLocked(in.ReplyTo)
		}
		d["text"] = t
	}
	d["msgtype"] = msgType
	data, err := json.Marshal(d)
	if err != nil {
		return nil, Pushed{}, err
	}
	p.Data = data
	s.nextMsg++
	s.messages[msgID] = &storedMessage{id: msgID, conv: conv, from: in.From, text: text, at: at, seq: s.nextMsg}
	return data, p, nil
}

// repliedLocked is the repliedMsg of a reply to msgID.
func (s *Server) repliedLocked(msgID string) map[string]any {
	r := map[string]any{"msgId": msgID, "msgType": "text"}
	if m := s.messages[msgID]; m != nil {
		r["senderId"] = m.from.dingtalkID()
		r["senderNick"] = m.from.Nick
		if m.bot {
			r["senderId"] = s.ChatbotUserID()
			r["senderNick"] = s.cfg.BotName
		}
		r["createdAt"] = m.at.UnixMilli()
		r["content"] = map[string]string{"text": m.text}
	}
	return r
}

func mediaJSON(m *Media) map[string]any {
	out := map[string]any{}
	set := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	set("downloadCode", m.DownloadCode)
	set("pictureDownloadCode", m.PictureDownloadCode)
	set("recognition", m.Recognition)
	set("videoType", m.VideoType)
	set("fileName", m.FileName)
	set("fileId", m.FileID)
	set("spaceId", m.SpaceID)
	if m.Duration > 0 {
		out["duration"] = strconv.Itoa(m.Duration)
	}
	return out
}
