package qqbot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
)

// Local rejection codes of Send (channel.RejectedError.Code).
const (
	// RejectNoInbound: the chat has no inbound message to reply to and
	// Config.ActiveMessages is off.
	RejectNoInbound = "passive_no_inbound_message"
	// RejectWindowExpired: every inbound message of the chat is older
	// than its reply window (C2C 60 min, others 5 min).
	RejectWindowExpired = "passive_window_expired"
	// RejectReplyLimit: every inbound message of the chat still in its
	// window was replied to Config.MaxReplies times.
	RejectReplyLimit = "passive_reply_limit"
	// RejectTextTooLong: the text is over MaxTextBytes.
	RejectTextTooLong = "text_too_long"
	// RejectEmpty: no text and no media.
	RejectEmpty = "empty_message"
	// RejectBadChat: the chat id cannot be a QQ chat.
	RejectBadChat = "bad_chat"
)

// assignment is where one outgoing message goes and which inbound
// message it replies to.
type assignment struct {
	route  route
	target string
	// msgID and seq make the send a passive reply (msgID "" = an active
	// message); seq is 0 on guild routes, which take no msg_seq.
	msgID string
	seq   int
	// reused: the idempotency key had this msg_seq already and its send
	// did not succeed (a retry of the same chunk).
	reused bool
}

// Send delivers out as passive replies and returns the ids of the
// messages it produced.
//
// QQ accepts only replies (active messages ended on 2025-04-21): each
// message carries the msg_id of an inbound message of the chat, and on
// group and C2C routes a msg_seq that is new for that msg_id. Send
// replies to Outgoing.ReplyTo when that message is known and can still
// be replied to, else to the newest message of the chat that can: C2C
// messages for 60 minutes, group, guild channel and guild direct
// messages for 5, and a group or C2C message at most MaxReplies (5)
// times. When none can, Send fails with a *channel.RejectedError whose
// Code is RejectNoInbound, RejectWindowExpired or RejectReplyLimit (or,
// with Config.ActiveMessages, sends an active message instead).
//
// msg_seq: each chunk gets the next number for its msg_id, recorded with
// Outgoing.IdempotencyKey in the reply ledger before the call (kept in
// Config.StateDir across restarts). A chunk sent again with the same key
// after a send that did not succeed (a transport error, a 5xx, a lost
// answer) gets the same msg_id and msg_seq: when the platform already has
// it, it refuses the copy as a duplicate (40054005), and Send reports the
// chunk delivered ("<msg_id>#<msg_seq>", its id being lost) instead of
// sending it twice. A number is never given to a second chunk. A key whose
// send succeeded, was refused definitively, or was cut off by its context
// (the delivery ledger never sends such a chunk again) names a new chunk
// next time: the key covers a chunk's chat, slot and content, not its
// turn, so two replies may share it.
//
// Text goes out as msg_type 0 (or markdown with Config.Markdown); in
// guild channels Outgoing.Mentions are rendered as "<@id> " before the
// text, elsewhere the platform has no mentions and they are left out.
// Media (http(s) URLs only) follow the text as messages of their own:
// uploaded with POST /v2/…/files and sent as msg_type 7 in groups and
// C2C, as an image URL in guilds. If a later message of a multi-message
// send fails, the error comes with the receipt of the ones delivered.
//
// Errors: channel.ErrOffline while Run reports the channel offline (no
// call is made); the local rejections above, and RejectTextTooLong,
// RejectEmpty and RejectBadChat; otherwise the classified *APIError (see
// its doc) or a plain transient error. Each call has the CallTimeout
// deadline.
func (c *Channel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return channel.Receipt{}, err
	}
	if c.offline.Load() {
		return channel.Receipt{}, fmt.Errorf("qqbot: send: %w", channel.ErrOffline)
	}
	if err := checkChat(out.Chat); err != nil {
		return channel.Receipt{}, err
	}
	text := strings.ToValidUTF8(out.Text, "\uFFFD")
	if text == "" && len(out.Media) == 0 {
		return channel.Receipt{}, &channel.RejectedError{Code: RejectEmpty, Reason: "no text and no media"}
	}
	if len(text) > MaxTextBytes {
		return channel.Receipt{}, &channel.RejectedError{Code: RejectTextTooLong, Reason: fmt.Sprintf("%d bytes, the limit is %d", len(text), MaxTextBytes)}
	}
	for _, m := range out.Media {
		if _, ok := attachmentURL(m.URL); !ok || !strings.Contains(m.URL, "://") {
			return channel.Receipt{}, fmt.Errorf("qqbot: attachment %q has no http(s) URL (uploads and file ids are not supported): %w", m.Name, channel.ErrMediaInvalid)
		}
	}
	var rc channel.Receipt
	part := 0
	next := func() string {
		k := out.IdempotencyKey
		if k != "" && part > 0 {
			k += "#" + strconv.Itoa(part)
		}
		part++
		return k
	}
	if text != "" {
		id, at, err := c.sendPart(ctx, out.Chat, out.ReplyTo, next(), func(a assignment) (string, any, bool, error) {
			return c.textBody(a, text, out.Mentions)
		})
		if err != nil {
			return rc, err
		}
		rc = addReceipt(rc, id, at)
	}
	for _, m := range out.Media {
		id, at, err := c.sendPart(ctx, out.Chat, out.ReplyTo, next(), func(a assignment) (string, any, bool, error) {
			return c.mediaBody(ctx, a, m)
		})
		if err != nil {
			return rc, err
		}
		rc = addReceipt(rc, id, at)
	}
	return rc, nil
}

func addReceipt(rc channel.Receipt, id string, at time.Time) channel.Receipt {
	rc.MessageIDs = append(rc.MessageIDs, id)
	if rc.Time.IsZero() {
		rc.Time = at
	}
	return rc
}

// checkChat refuses chat ids that cannot be a QQ chat.
func checkChat(chat channel.Chat) error {
	id := chat.ID
	if chat.Kind == channel.Group {
		id = strings.TrimPrefix(id, ChannelChatPrefix)
	}
	if !chat.Kind.Valid() || !validID(id) {
		return &channel.RejectedError{Code: RejectBadChat, Reason: fmt.Sprintf("invalid chat %q", chat.String())}
	}
	return nil
}

// sentAnswer is the answer of a send: {"id","timestamp"} (v2, timestamp
// a number) or a guild Message (timestamp RFC 3339). A 2xx answer without
// an id may carry a review notice (304023/304024).
type sentAnswer struct {
	ID        flexString      `json:"id"`
	Timestamp json.RawMessage `json:"timestamp"`
	Code      int64           `json:"code"`
	Data      struct {
		MessageAudit struct {
			AuditID flexString `json:"audit_id"`
		} `json:"message_audit"`
	} `json:"data"`
}

func (a sentAnswer) time() time.Time {
	if n, ok := jsonInt(a.Timestamp); ok && n > 0 {
		return time.Unix(n, 0)
	}
	var s string
	if json.Unmarshal(a.Timestamp, &s) == nil {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
			return time.Unix(n, 0)
		}
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// sendPart sends one message of a Send: it takes a reply assignment for
// key, builds the body with build (which may make calls of its own: the
// media upload) and posts it.
func (c *Channel) sendPart(ctx context.Context, chat channel.Chat, replyTo, key string,
	build func(assignment) (path string, body any, media bool, err error)) (string, time.Time, error) {
	a, err := c.assign(chat, replyTo, key)
	if err != nil {
		return "", time.Time{}, err
	}
	p, body, media, err := build(a)
	if err != nil {
		return "", time.Time{}, err
	}
	var ans sentAnswer
	err = c.call(ctx, http.MethodPost, p, body, media, &ans)
	var ae *APIError
	switch {
	case err == nil:
	case a.reused && errors.As(err, &ae) && ae.Code == codeDuplicateSeq:
		// The platform has this msg_id+msg_seq: an earlier attempt of this
		// very chunk went through and its answer was lost.
		id := a.msgID + "#" + strconv.Itoa(a.seq)
		c.log.Info("qq_send_deduplicated", "chat", chat.String(), "msg_id", a.msgID, "msg_seq", a.seq,
			"effect", "an earlier attempt delivered this chunk; not sent again")
		c.recordSent(chat, a.msgID, key, id)
		return id, time.Time{}, nil
	default:
		// A definitive refusal was certainly not delivered, and a call
		// cut off by its context is never sent again by the delivery
		// ledger: either way a later chunk with this key is a new one.
		// Otherwise the pipeline may retry this very chunk.
		c.markFailed(chat, a.msgID, key, ctx.Err() == nil && !channel.Classify(err).Definitive())
		return "", time.Time{}, err
	}
	id := string(ans.ID)
	if id == "" {
		switch ans.Code {
		case codeAuditPushAsync, codeAuditReplyAsync:
			id = "audit:" + string(ans.Data.MessageAudit.AuditID)
			c.log.Info("qq_send_in_review", "chat", chat.String(), "audit_id", string(ans.Data.MessageAudit.AuditID))
		default:
			return "", time.Time{}, fmt.Errorf("qqbot: POST %s: the answer has no message id (code %d)", p, ans.Code)
		}
	}
	c.recordSent(chat, a.msgID, key, id)
	return id, ans.time(), nil
}

// assign picks the inbound message a send replies to and its msg_seq
// (see Send), recording the msg_seq with key before the call.
func (c *Channel) assign(chat channel.Chat, replyTo, key string) (assignment, error) {
	c.stMu.Lock()
	defer c.stMu.Unlock()
	now := c.clk.Now()
	expired := func(r *inboundRef) bool { return now.Sub(r.At) >= c.window(r.Route) }
	if key != "" {
		// A chunk whose send with this key did not succeed is sent again
		// with the same msg_id and msg_seq. A key whose send succeeded is a
		// new chunk that happens to look the same (the key covers the
		// chunk's chat, slot and content, not its turn).
		for _, r := range c.st.Inbound {
			s, ok := r.Keys[key]
			if r.Chat != chat || !ok || !r.Retry[key] {
				continue
			}
			if expired(r) {
				return assignment{}, &channel.RejectedError{Code: RejectWindowExpired,
					Reason: "an earlier attempt of this chunk replied to " + r.ID + ", which is past its reply window; it may have been delivered"}
			}
			return assignment{route: r.Route, target: r.Target, msgID: r.ID, seq: seqFor(r, s), reused: true}, nil
		}
	}
	var cands []*inboundRef
	for _, r := range c.st.Inbound {
		if r.Chat == chat {
			cands = append(cands, r)
		}
	}
	slices.SortStableFunc(cands, func(a, b *inboundRef) int {
		switch {
		case a.ID == replyTo && b.ID != replyTo:
			return -1
		case b.ID == replyTo && a.ID != replyTo:
			return 1
		}
		return b.At.Compare(a.At)
	})
	var sawExpired, sawLimit bool
	for _, r := range cands {
		if expired(r) {
			sawExpired = true
			continue
		}
		if r.Route.v2() && r.Next >= c.cfg.MaxReplies {
			sawLimit = true
			continue
		}
		r.Next++
		if key != "" {
			c.forgetKeyLocked(chat, key)
			if len(r.Keys) < maxKeysPerRef {
				if r.Keys == nil {
					r.Keys = map[string]int{}
				}
				r.Keys[key] = r.Next
			}
		}
		c.saveLocked("reply assignment")
		return assignment{route: r.Route, target: r.Target, msgID: r.ID, seq: seqFor(r, r.Next)}, nil
	}
	if c.cfg.ActiveMessages {
		rt, target := activeRoute(chat)
		return assignment{route: rt, target: target}, nil
	}
	switch {
	case sawLimit:
		return assignment{}, &channel.RejectedError{Code: RejectReplyLimit,
			Reason: fmt.Sprintf("every message of %s in its reply window was replied to %d times", chat, c.cfg.MaxReplies)}
	case sawExpired:
		return assignment{}, &channel.RejectedError{Code: RejectWindowExpired,
			Reason: fmt.Sprintf("the messages of %s are past their reply window", chat)}
	}
	return assignment{}, &channel.RejectedError{Code: RejectNoInbound,
		Reason: fmt.Sprintf("no message of %s to reply to (QQ bots can only reply)", chat)}
}

func seqFor(r *inboundRef, s int) int {
	if r.Route.v2() {
		return s
	}
	return 0
}

// activeRoute is the route of an active message (a guild direct message
// needs its session's guild id, known only from an inbound message, so a
// private chat is a C2C chat here).
func activeRoute(chat channel.Chat) (route, string) {
	if chat.Kind == channel.Group {
		if id, ok := strings.CutPrefix(chat.ID, ChannelChatPrefix); ok {
			return routeChannel, id
		}
		return routeGroup, chat.ID
	}
	return routeC2C, chat.ID
}

// forgetKeyLocked drops key from every inbound message of chat (it is
// about to name a new chunk); c.stMu is held.
func (c *Channel) forgetKeyLocked(chat channel.Chat, key string) {
	for _, r := range c.st.Inbound {
		if r.Chat == chat {
			delete(r.Keys, key)
			delete(r.Retry, key)
			delete(r.Sent, key)
		}
	}
}

// markFailed records a failed send of key: retry keeps its msg_seq for
// the same chunk sent again; otherwise the key is freed (its msg_seq is
// not used again).
func (c *Channel) markFailed(chat channel.Chat, msgID, key string, retry bool) {
	if key == "" || msgID == "" {
		return
	}
	c.stMu.Lock()
	defer c.stMu.Unlock()
	r := c.st.find(chat, msgID)
	if r == nil {
		return
	}
	if _, ok := r.Keys[key]; !ok {
		return
	}
	if retry {
		if r.Retry == nil {
			r.Retry = map[string]bool{}
		}
		r.Retry[key] = true
	} else {
		delete(r.Keys, key)
		delete(r.Retry, key)
	}
	c.saveLocked("failed send")
}

// recordSent notes the platform id of a delivered chunk.
func (c *Channel) recordSent(chat channel.Chat, msgID, key, id string) {
	if key == "" || msgID == "" {
		return
	}
	c.stMu.Lock()
	defer c.stMu.Unlock()
	r := c.st.find(chat, msgID)
	if r == nil {
		return
	}
	if _, ok := r.Keys[key]; !ok {
		return
	}
	if r.Sent == nil {
		r.Sent = map[string]string{}
	}
	r.Sent[key] = id
	delete(r.Retry, key)
	c.saveLocked("receipt")
}

// messagePath is the endpoint a route posts messages to.
func messagePath(a assignment) string {
	t := url.PathEscape(a.target)
	switch a.route {
	case routeGroup:
		return "/v2/groups/" + t + "/messages"
	case routeC2C:
		return "/v2/users/" + t + "/messages"
	case routeChannel:
		return "/channels/" + t + "/messages"
	default:
		return "/dms/" + t + "/messages"
	}
}

// v2Body is the body of a group or C2C message.
type v2Body struct {
	Content  string       `json:"content,omitempty"`
	MsgType  int          `json:"msg_type"`
	Markdown *markdown    `json:"markdown,omitempty"`
	Media    *v2MediaInfo `json:"media,omitempty"`
	MsgID    string       `json:"msg_id,omitempty"`
	MsgSeq   int          `json:"msg_seq,omitempty"`
}

// guildBody is the body of a guild channel or direct message.
type guildBody struct {
	Content  string    `json:"content,omitempty"`
	Markdown *markdown `json:"markdown,omitempty"`
	Image    string    `json:"image,omitempty"`
	MsgID    string    `json:"msg_id,omitempty"`
}

type markdown struct {
	Content string `json:"content"`
}

type v2MediaInfo struct {
	FileInfo string `json:"file_info"`
}

// The msg_type values.
const (
	msgTypeText     = 0
	msgTypeMarkdown = 2
	msgTypeMedia    = 7
)

// textBody builds a text message.
func (c *Channel) textBody(a assignment, text string, mentions []string) (string, any, bool, error) {
	if a.route.v2() {
		b := v2Body{MsgID: a.msgID, MsgSeq: a.seq}
		if c.cfg.Markdown {
			b.MsgType, b.Markdown = msgTypeMarkdown, &markdown{Content: text}
		} else {
			b.MsgType, b.Content = msgTypeText, text
		}
		if len(mentions) > 0 {
			c.log.Debug("qq_mentions_dropped", "count", len(mentions), "reason", "groups and C2C chats have no mentions")
		}
		return messagePath(a), b, false, nil
	}
	var sb strings.Builder
	if a.route == routeChannel {
		for _, m := range mentions {
			if digits(m) {
				sb.WriteString("<@" + m + "> ")
			}
		}
	}
	sb.WriteString(escapeGuild(text))
	b := guildBody{MsgID: a.msgID}
	if c.cfg.Markdown {
		b.Markdown = &markdown{Content: sb.String()}
	} else {
		b.Content = sb.String()
	}
	return messagePath(a), b, false, nil
}

var guildEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func escapeGuild(s string) string { return guildEscaper.Replace(s) }

// Rich-media file types of POST /v2/…/files.
const (
	fileImage = 1
	fileVideo = 2
	fileVoice = 3
	fileOther = 4
)

// mediaBody builds a media message: on v2 routes the file is uploaded
// first (POST /v2/{groups|users}/{id}/files with srv_send_msg false) and
// its file_info sent with msg_type 7; guilds take an image URL.
func (c *Channel) mediaBody(ctx context.Context, a assignment, m channel.Media) (string, any, bool, error) {
	mt := strings.ToLower(m.MIME)
	if mt == "" {
		if u, err := url.Parse(m.URL); err == nil {
			mt = mime.TypeByExtension(path.Ext(u.Path))
		}
	}
	mt, _, _ = strings.Cut(mt, ";")
	if !a.route.v2() {
		if !strings.HasPrefix(mt, "image/") {
			return "", nil, false, fmt.Errorf("qqbot: guilds take images only, not %q: %w", mt, channel.ErrMediaInvalid)
		}
		return messagePath(a), guildBody{Image: m.URL, MsgID: a.msgID}, true, nil
	}
	ft := fileOther
	switch {
	case strings.HasPrefix(mt, "image/"):
		ft = fileImage
	case strings.HasPrefix(mt, "video/"):
		ft = fileVideo
	case strings.HasPrefix(mt, "audio/"):
		ft = fileVoice
	}
	kind := "groups"
	if a.route == routeC2C {
		kind = "users"
	}
	var up struct {
		FileInfo string `json:"file_info"`
	}
	upload := map[string]any{"file_type": ft, "url": m.URL, "srv_send_msg": false}
	if err := c.call(ctx, http.MethodPost, "/v2/"+kind+"/"+url.PathEscape(a.target)+"/files", upload, true, &up); err != nil {
		return "", nil, false, err
	}
	if up.FileInfo == "" {
		return "", nil, false, fmt.Errorf("qqbot: media upload: no file_info in the answer: %w", channel.ErrMediaInvalid)
	}
	// content must not be empty with msg_type 7 (send.md).
	return messagePath(a), v2Body{Content: " ", MsgType: msgTypeMedia, Media: &v2MediaInfo{FileInfo: up.FileInfo},
		MsgID: a.msgID, MsgSeq: a.seq}, true, nil
}
