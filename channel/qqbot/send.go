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
	// reused: the part was sent before with this msg_id and msg_seq
	// without success (a resend of the same chunk); unsure: an earlier
	// attempt may have been delivered.
	reused, unsure bool
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
// msg_seq and resends: Outgoing.IdempotencyKey names one chunk of one
// reply (its turn, slot and content), and each message of it (the text,
// each medium) is a part recorded in the reply ledger under that key
// before its call, with the msg_id and msg_seq it got (kept in
// Config.StateDir across restarts). Sent again with the same key, a chunk
// skips the parts already delivered (their ids are returned again) and
// sends the others with their recorded msg_id and msg_seq; when an
// earlier attempt went through and its answer was lost, the platform
// refuses the copy as a duplicate (40054005) and Send reports the part
// delivered ("<msg_id>#<msg_seq>", its id being lost); guild routes take
// no msg_seq, so there a resend after a lost answer may show twice. A
// number is never given to a second part. The part records outlive the inbound messages
// they reply to (by a day after the reply window, at most 4096): when
// the replied-to message is past its window, a part that may have been
// delivered is not sent again: Send fails with RejectDeliveryUnknown (a
// definitive rejection, so it is never retried into a second copy); one
// that certainly was not is assigned anew. A media upload is made before
// a part takes a reply, so a failed upload uses up none.
//
// A 2xx answer without a message id (202 "async success", a review
// notice 304023/304024) counts as delivered and is not sent again; a 2xx
// answer with any other business code is an *APIError like a non-2xx one.
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
		id, at, err := c.sendPart(ctx, out.Chat, out.ReplyTo, next(), func(context.Context, route, string) (func(assignment) (string, any, bool), error) {
			return func(a assignment) (string, any, bool) { return c.textBody(a, text, out.Mentions) }, nil
		})
		if err != nil {
			return rc, err
		}
		rc = addReceipt(rc, id, at)
	}
	for _, m := range out.Media {
		id, at, err := c.sendPart(ctx, out.Chat, out.ReplyTo, next(), func(ctx context.Context, rt route, target string) (func(assignment) (string, any, bool), error) {
			return c.mediaBody(ctx, rt, target, m)
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

// RejectDeliveryUnknown (a channel.RejectedError.Code of Send): a chunk
// sent again whose earlier attempt may have reached the platform (its
// answer was lost) can no longer be sent with the msg_id and msg_seq of
// that attempt, the message being past its reply window. Sending it
// elsewhere could show it twice, so it is not sent; it may or may not
// have been delivered.
const RejectDeliveryUnknown = "delivery_unknown"

// partPrep prepares one message of a Send for its route and target (the
// media upload makes a call) and returns the builder of its body.
type partPrep func(ctx context.Context, rt route, target string) (func(assignment) (path string, body any, media bool), error)

// partKey names one message of a chunk in the ledger.
func partKey(chat channel.Chat, key string) string { return chat.String() + " " + key }

// sendPart sends one message of a Send under key (see Send): a part
// already delivered is not sent again; a part sent before without success
// goes out with its msg_id and msg_seq; a new part is prepared (uploaded)
// first and then given a reply assignment, so a failed upload takes none
// of the message's replies.
func (c *Channel) sendPart(ctx context.Context, chat channel.Chat, replyTo, key string, prep partPrep) (string, time.Time, error) {
	a, id, found, err := c.recorded(chat, key)
	if err != nil || id != "" {
		return id, time.Time{}, err
	}
	var build func(assignment) (string, any, bool)
	if found {
		if build, err = prep(ctx, a.route, a.target); err != nil {
			return "", time.Time{}, err
		}
	} else {
		rt, target, err := c.peekRoute(chat, replyTo)
		if err != nil {
			return "", time.Time{}, err
		}
		if build, err = prep(ctx, rt, target); err != nil {
			return "", time.Time{}, err
		}
		if a, err = c.assign(chat, replyTo, key); err != nil {
			return "", time.Time{}, err
		}
		if a.route != rt || a.target != target { // the chat's messages changed meanwhile
			if build, err = prep(ctx, a.route, a.target); err != nil {
				return "", time.Time{}, err // the part keeps its msg_seq for a resend
			}
		}
	}
	p, body, media := build(a)
	var ans sentAnswer
	err = c.call(ctx, http.MethodPost, p, body, media, &ans)
	var ae *APIError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.Code == codeDuplicateSeq && a.reused && a.unsure:
		// The platform has this msg_id+msg_seq: an earlier attempt of this
		// very part went through and its answer was lost.
		id := a.msgID + "#" + strconv.Itoa(a.seq)
		c.log.Info("qq_send_deduplicated", "chat", chat.String(), "msg_id", a.msgID, "msg_seq", a.seq,
			"effect", "an earlier attempt delivered this chunk; not sent again")
		c.recordSent(chat, a, key, id)
		return id, time.Time{}, nil
	case errors.As(err, &ae) && ae.Code == codeDuplicateSeq:
		// Nothing of ours went out with this msg_seq (the ledger lost track
		// of it): the part is not delivered and takes a new one next time.
		c.forgetPart(chat, key)
		return "", time.Time{}, err
	default:
		// A refusal, a rate limit or an offline answer delivered nothing;
		// any other failure (a transport error, a 5xx, a lost answer, a
		// call cut off by its context) may have. Either way a resend of
		// the part keeps its msg_id and msg_seq.
		c.markUnsure(chat, key, channel.Classify(err) == channel.ClassTransient)
		return "", time.Time{}, err
	}
	id = string(ans.ID)
	if id == "" {
		switch ans.Code {
		case codeAuditPushAsync, codeAuditReplyAsync:
			id = "audit:" + string(ans.Data.MessageAudit.AuditID)
			c.log.Info("qq_send_in_review", "chat", chat.String(), "audit_id", string(ans.Data.MessageAudit.AuditID))
		default:
			// A success answer without an id (202 "async success", or a
			// 2xx without a body): the platform took the message.
			id = "async:" + a.msgID + "#" + strconv.Itoa(a.seq)
			c.log.Info("qq_send_no_id", "chat", chat.String(), "msg_id", a.msgID, "msg_seq", a.seq, "code", ans.Code,
				"effect", "taken as delivered; not sent again")
		}
	}
	c.recordSent(chat, a, key, id)
	return id, ans.time(), nil
}

// recorded looks key up in the ledger: the id of a delivered part, or the
// assignment of a part sent before without success (found). A part past
// its reply window whose earlier attempt may have been delivered is
// refused (RejectDeliveryUnknown); one that certainly was not is
// forgotten and assigned anew.
func (c *Channel) recorded(chat channel.Chat, key string) (a assignment, id string, found bool, err error) {
	if key == "" {
		return assignment{}, "", false, nil
	}
	c.stMu.Lock()
	defer c.stMu.Unlock()
	pk := partKey(chat, key)
	p := c.st.Parts[pk]
	switch {
	case p == nil:
		return assignment{}, "", false, nil
	case p.ID != "":
		c.log.Info("qq_send_skipped", "chat", chat.String(), "id", p.ID, "reason", "this part of the chunk was delivered before")
		return assignment{}, p.ID, true, nil
	case p.MsgID != "" && c.clk.Now().Sub(p.RefAt) >= c.window(p.Route):
		if p.Unsure {
			return assignment{}, "", false, &channel.RejectedError{Code: RejectDeliveryUnknown,
				Reason: "an earlier attempt of this chunk replied to " + p.MsgID + ", which is past its reply window; it may have been delivered, so it is not sent again"}
		}
		delete(c.st.Parts, pk)
		c.saveLocked("expired part")
		return assignment{}, "", false, nil
	}
	return assignment{route: p.Route, target: p.Target, msgID: p.MsgID, seq: p.Seq, reused: true, unsure: p.Unsure}, "", true, nil
}

// peekRoute is the route and target assign would give a new part now.
func (c *Channel) peekRoute(chat channel.Chat, replyTo string) (route, string, error) {
	c.stMu.Lock()
	defer c.stMu.Unlock()
	r, err := c.pickLocked(chat, replyTo)
	if err != nil {
		return "", "", err
	}
	if r == nil {
		rt, target := activeRoute(chat)
		return rt, target, nil
	}
	return r.Route, r.Target, nil
}

// assign gives a new part the inbound message it replies to and its
// msg_seq (see Send), recording them with key before the call.
func (c *Channel) assign(chat channel.Chat, replyTo, key string) (assignment, error) {
	c.stMu.Lock()
	defer c.stMu.Unlock()
	r, err := c.pickLocked(chat, replyTo)
	if err != nil {
		return assignment{}, err
	}
	if r == nil {
		rt, target := activeRoute(chat)
		return assignment{route: rt, target: target}, nil
	}
	r.Next++
	a := assignment{route: r.Route, target: r.Target, msgID: r.ID, seq: seqFor(r, r.Next)}
	if key != "" {
		if c.st.Parts == nil {
			c.st.Parts = map[string]*partRec{}
		}
		c.st.Parts[partKey(chat, key)] = &partRec{Chat: chat, Route: a.route, Target: a.target, MsgID: a.msgID, Seq: a.seq,
			RefAt: r.At, At: c.clk.Now()}
	}
	c.saveLocked("reply assignment")
	return a, nil
}

// pickLocked picks the inbound message a new part replies to: ReplyTo
// when it can still take a reply, else the newest of the chat that can;
// nil with Config.ActiveMessages when none can (an active message).
// c.stMu is held.
func (c *Channel) pickLocked(chat channel.Chat, replyTo string) (*inboundRef, error) {
	now := c.clk.Now()
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
		if now.Sub(r.At) >= c.window(r.Route) {
			sawExpired = true
			continue
		}
		if r.Route.v2() && r.Next >= c.cfg.MaxReplies {
			sawLimit = true
			continue
		}
		return r, nil
	}
	if c.cfg.ActiveMessages {
		return nil, nil
	}
	switch {
	case sawLimit:
		return nil, &channel.RejectedError{Code: RejectReplyLimit,
			Reason: fmt.Sprintf("every message of %s in its reply window was replied to %d times", chat, c.cfg.MaxReplies)}
	case sawExpired:
		return nil, &channel.RejectedError{Code: RejectWindowExpired,
			Reason: fmt.Sprintf("the messages of %s are past their reply window", chat)}
	}
	return nil, &channel.RejectedError{Code: RejectNoInbound,
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

// markUnsure notes a failed attempt of key's part; unsure: it may have
// been delivered.
func (c *Channel) markUnsure(chat channel.Chat, key string, unsure bool) {
	if key == "" || !unsure {
		return
	}
	c.stMu.Lock()
	defer c.stMu.Unlock()
	if p := c.st.Parts[partKey(chat, key)]; p != nil && !p.Unsure {
		p.Unsure = true
		c.saveLocked("failed send")
	}
}

// forgetPart drops key's part record.
func (c *Channel) forgetPart(chat channel.Chat, key string) {
	if key == "" {
		return
	}
	c.stMu.Lock()
	defer c.stMu.Unlock()
	delete(c.st.Parts, partKey(chat, key))
	c.saveLocked("refused send")
}

// recordSent notes the platform id of a delivered part (an active
// message gets its record here).
func (c *Channel) recordSent(chat channel.Chat, a assignment, key, id string) {
	if key == "" {
		return
	}
	c.stMu.Lock()
	defer c.stMu.Unlock()
	pk := partKey(chat, key)
	p := c.st.Parts[pk]
	if p == nil {
		now := c.clk.Now()
		p = &partRec{Chat: chat, Route: a.route, Target: a.target, MsgID: a.msgID, Seq: a.seq, RefAt: now, At: now}
		if c.st.Parts == nil {
			c.st.Parts = map[string]*partRec{}
		}
		c.st.Parts[pk] = p
	}
	p.ID = id
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
func (c *Channel) textBody(a assignment, text string, mentions []string) (string, any, bool) {
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
		return messagePath(a), b, false
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
	return messagePath(a), b, false
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

// mediaBody prepares a media message for a route: on v2 routes the file
// is uploaded first (POST /v2/{groups|users}/{id}/files with srv_send_msg
// false) and its file_info sent with msg_type 7; guilds take an image URL.
func (c *Channel) mediaBody(ctx context.Context, rt route, target string, m channel.Media) (func(assignment) (string, any, bool), error) {
	mt := strings.ToLower(m.MIME)
	if mt == "" {
		if u, err := url.Parse(m.URL); err == nil {
			mt = mime.TypeByExtension(path.Ext(u.Path))
		}
	}
	mt, _, _ = strings.Cut(mt, ";")
	if !rt.v2() {
		if !strings.HasPrefix(mt, "image/") {
			return nil, fmt.Errorf("qqbot: guilds take images only, not %q: %w", mt, channel.ErrMediaInvalid)
		}
		return func(a assignment) (string, any, bool) {
			return messagePath(a), guildBody{Image: m.URL, MsgID: a.msgID}, true
		}, nil
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
	if rt == routeC2C {
		kind = "users"
	}
	var up struct {
		FileInfo string `json:"file_info"`
	}
	upload := map[string]any{"file_type": ft, "url": m.URL, "srv_send_msg": false}
	if err := c.call(ctx, http.MethodPost, "/v2/"+kind+"/"+url.PathEscape(target)+"/files", upload, true, &up); err != nil {
		return nil, err
	}
	if up.FileInfo == "" {
		return nil, fmt.Errorf("qqbot: media upload: no file_info in the answer: %w", channel.ErrMediaInvalid)
	}
	// content must not be empty with msg_type 7 (send.md).
	return func(a assignment) (string, any, bool) {
		return messagePath(a), v2Body{Content: " ", MsgType: msgTypeMedia, Media: &v2MediaInfo{FileInfo: up.FileInfo},
			MsgID: a.msgID, MsgSeq: a.seq}, true
	}, nil
}
