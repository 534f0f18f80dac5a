package onebot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
)

// errIgnored marks a well-formed payload that produces no event (a meta
// event, a group request, an unsupported notice).
var errIgnored = errors.New("onebot: ignored")

// errInvalidRequest is wrapped by the error of a friend request event that
// lacks a field the answer needs or has one of the wrong JSON type. Like
// an invalid id, it is logged (invalid_event) and dropped.
var errInvalidRequest = errors.New("onebot: invalid request event")

// parseEvent decodes a pushed event, handles meta events, logs what it
// skips, and returns the event to deliver, if any.
func (c *Channel) parseEvent(raw []byte, via string) (channel.Event, bool) {
	ev, err := c.decodeEvent(raw, channel.SourceLive)
	switch {
	case err == nil:
		return ev, true
	case errors.Is(err, errIgnored):
	case errors.Is(err, errMalformed):
		c.log.Warn("malformed_event", "via", via, "bytes", len(raw), "err", err)
	default:
		c.log.Warn("invalid_event", "via", via, "err", err)
	}
	return channel.Event{}, false
}

// errMalformed marks a payload that is not a JSON event object.
var errMalformed = errors.New("onebot: malformed event")

// decodeEvent turns a pushed payload into an event. Meta events update the
// channel state and return errIgnored.
func (c *Channel) decodeEvent(raw []byte, src channel.Source) (channel.Event, error) {
	var w wireEvent
	if err := json.Unmarshal(raw, &w); err != nil {
		return channel.Event{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	// A meta event may come before the login, with self_id 0.
	selfID, err := w.SelfID.qq("self_id", w.PostType == "meta_event")
	if err != nil {
		return channel.Event{}, err
	}
	if selfID != "" && !c.learnSelfID(selfID) {
		return channel.Event{}, fmt.Errorf("event for account %s, expected %s", selfID, c.self())
	}
	switch w.PostType {
	case "message", "message_sent":
		return c.messageEvent(&w, raw, src)
	case "notice":
		return c.noticeEvent(&w, raw)
	case "meta_event":
		c.handleMeta(&w)
		return channel.Event{}, errIgnored
	case "request":
		return c.requestEvent(&w, raw)
	}
	c.log.Warn("unknown_event", "post_type", w.PostType, "bytes", len(raw))
	return channel.Event{}, errIgnored
}

// eventTime converts a OneBot time (unix seconds; milliseconds tolerated).
func (c *Channel) eventTime(t optInt) time.Time {
	switch {
	case !t.OK || t.V <= 0:
		return c.clk.Now()
	case t.V > 1e12:
		return time.UnixMilli(t.V)
	}
	return time.Unix(t.V, 0)
}

func cloneRaw(raw []byte) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	return json.RawMessage(bytes.Clone(raw))
}

// messageEvent normalises a message (or message_sent) event or history item.
// Its ids must be in the protocol's range (errInvalidID otherwise): a
// nonzero int32 message_id, positive QQ numbers for self_id, user_id
// (sender.user_id when absent), a group message's group_id and the bot's
// own private message's target_id; a private message's group_id may be 0
// (none); message_seq is a non-negative integer.
func (c *Channel) messageEvent(w *wireEvent, raw []byte, src channel.Source) (channel.Event, error) {
	var r ids
	self := r.qq(w.SelfID, "self_id", false)
	msgID := r.msg(w.MessageID, "message_id")
	userID := r.qq(w.UserID, "user_id", false)
	senderID := r.qq(w.Sender.UserID, "sender.user_id", false)
	groupID := r.qq(w.GroupID, "group_id", w.MessageType != "group")
	targetID := r.qq(w.TargetID, "target_id", false)
	seq := r.seq(w.MessageSeq, "message_seq")
	if r.err != nil {
		return channel.Event{}, r.err
	}
	if msgID == "" {
		return channel.Event{}, fmt.Errorf("%w: message without message_id", errInvalidID)
	}
	if self == "" {
		self = c.self()
	}
	ev := channel.Event{
		Platform:  c.cfg.Platform,
		BotID:     self,
		Kind:      channel.KindMessage,
		MessageID: msgID,
		Time:      c.eventTime(w.Time),
		Source:    src,
		Raw:       cloneRaw(raw),
	}
	if userID == "" {
		userID = senderID
	}
	if w.PostType == "message_sent" || (userID != "" && userID == self) {
		ev.Kind = channel.KindSelf
	}
	msgType := w.MessageType
	if msgType == "" {
		msgType = "private"
		if groupID != "" {
			msgType = "group"
		}
	}
	switch msgType {
	case "group":
		if groupID == "" {
			return channel.Event{}, fmt.Errorf("%w: group message %s without group_id", errInvalidID, ev.MessageID)
		}
		ev.Chat = channel.Chat{Kind: channel.Group, ID: groupID}
		ev.Seq = seq
	case "private":
		peer := userID
		if ev.Kind == channel.KindSelf {
			peer = targetID
			if peer == "" {
				return channel.Event{}, fmt.Errorf("the bot's own private message %s has no target_id", ev.MessageID)
			}
		}
		ev.Chat = channel.Chat{Kind: channel.Private, ID: peer}
	default:
		return channel.Event{}, fmt.Errorf("unknown message_type %q", w.MessageType)
	}
	ev.Sender = channel.Sender{
		ID:   userID,
		Name: string(w.Sender.Card),
		Role: toRole(string(w.Sender.Role)),
	}
	if ev.Sender.Name == "" {
		ev.Sender.Name = string(w.Sender.Nickname)
	}
	if w.Anonymous != nil && w.Anonymous.Name != "" {
		ev.Sender.Name = string(w.Anonymous.Name)
	}
	if w.Sender.Level.OK {
		ev.Sender.Level, ev.Sender.LevelKnown = int(w.Sender.Level.V), true
	}

	var msg Message
	if len(w.Message) > 0 {
		if err := json.Unmarshal(w.Message, &msg); err != nil {
			return channel.Event{}, fmt.Errorf("message %s: %w", ev.MessageID, err)
		}
	}
	if len(msg) == 0 && w.RawMessage != "" {
		msg = ParseCQ(string(w.RawMessage))
	}
	ev.Segments, ev.ToMe = toSegments(msg, self)
	if id := ev.QuoteID(); id != "" {
		if q, ok := c.quotes.get(ev.Chat, id); ok {
			ev.Quoted = &q
		}
	}
	if err := ev.Validate(); err != nil {
		return channel.Event{}, err
	}
	c.quotes.put(ev.Chat, channel.Quoted{
		MessageID: ev.MessageID,
		Sender:    ev.Sender,
		Text:      ev.Text(),
		Segments:  ev.Segments,
		FromBot:   ev.Kind == channel.KindSelf,
	})
	return ev, nil
}

func toRole(r string) channel.Role {
	switch r {
	case "owner":
		return channel.RoleOwner
	case "admin":
		return channel.RoleAdmin
	case "member":
		return channel.RoleMember
	}
	return ""
}

// noticeEvent normalises the notices the pipeline knows (recalls, pokes,
// group joins, friend adds) and tracks the ones that change what the bot
// may do (removed from a group, muted).
func (c *Channel) noticeEvent(w *wireEvent, raw []byte) (channel.Event, error) {
	self, _ := w.SelfID.qq("self_id", false) // checked by decodeEvent
	if self == "" {
		self = c.self()
	}
	ev := channel.Event{
		Platform: c.cfg.Platform,
		BotID:    self,
		Kind:     channel.KindNotice,
		Time:     c.eventTime(w.Time),
		Source:   channel.SourceLive,
		Raw:      cloneRaw(raw),
	}
	// Ids are read only for the notices the adapter uses; the user_id of
	// group_ban and every operator_id may be 0 (the whole group; none).
	var (
		r                     ids
		gid, user, op, target string
		msgID                 string
	)
	switch w.NoticeType {
	case "group_recall", "friend_recall", "notify", "group_increase", "friend_add", "group_decrease", "group_ban":
		if w.NoticeType == "notify" && w.SubType != "poke" {
			break
		}
		gid = r.qq(w.GroupID, "group_id", w.NoticeType == "notify" || w.NoticeType == "friend_recall" || w.NoticeType == "friend_add")
		user = r.qq(w.UserID, "user_id", w.NoticeType == "group_ban")
		op = r.qq(w.OperatorID, "operator_id", true)
		target = r.qq(w.TargetID, "target_id", false)
		msgID = r.msg(w.MessageID, "message_id")
		if r.err != nil {
			return channel.Event{}, r.err
		}
	}
	group := channel.Chat{Kind: channel.Group, ID: gid}
	switch w.NoticeType {
	case "group_recall":
		ev.Chat = group
		ev.Sender = channel.Sender{ID: firstNonEmpty(op, user)}
		ev.Notice = &channel.Notice{Type: channel.NoticeGroupRecall, Operator: firstNonEmpty(op, user), UserID: user, TargetMessageID: msgID}
	case "friend_recall":
		ev.Chat = channel.Chat{Kind: channel.Private, ID: user}
		ev.Sender = channel.Sender{ID: user}
		ev.Notice = &channel.Notice{Type: channel.NoticeFriendRecall, Operator: user, UserID: user, TargetMessageID: msgID}
	case "notify":
		if w.SubType != "poke" {
			c.log.Debug("notice_ignored", "notice_type", w.NoticeType, "sub_type", w.SubType)
			return channel.Event{}, errIgnored
		}
		if gid != "" {
			ev.Chat = group
		} else {
			peer := user
			if peer == self {
				peer = target
			}
			ev.Chat = channel.Chat{Kind: channel.Private, ID: peer}
		}
		ev.Sender = channel.Sender{ID: user}
		ev.ToMe = target != "" && target == self
		ev.Notice = &channel.Notice{Type: channel.NoticePoke, Operator: user, UserID: target}
	case "group_increase":
		ev.Chat = group
		ev.Sender = channel.Sender{ID: user}
		ev.Notice = &channel.Notice{Type: channel.NoticeGroupIncrease, Operator: op, UserID: user}
	case "friend_add":
		ev.Chat = channel.Chat{Kind: channel.Private, ID: user}
		ev.Sender = channel.Sender{ID: user}
		ev.Notice = &channel.Notice{Type: channel.NoticeFriendAdd, UserID: user}
	case "group_decrease":
		if w.SubType == "kick_me" || (user != "" && user == self) {
			c.leftGroup(gid)
		}
		return channel.Event{}, errIgnored
	case "group_ban":
		if user == self || user == "" {
			c.setMuted(gid, w.SubType == "ban", ev.Time, w.Duration)
		}
		return channel.Event{}, errIgnored
	default:
		c.log.Debug("notice_ignored", "notice_type", w.NoticeType, "sub_type", w.SubType)
		return channel.Event{}, errIgnored
	}
	if err := ev.Validate(); err != nil {
		return channel.Event{}, err
	}
	return ev, nil
}

// requestEvent normalises a friend request (request_type "friend": user_id,
// comment, flag) into a channel.NoticeFriendRequest notice in the private
// chat with the requester, sent by the requester. The flag is what
// AnswerFriendRequest quotes; it must be a non-empty JSON string, user_id a
// positive QQ number, and comment, when given, a string: anything else is
// an errInvalidRequest or errInvalidID error. The event has no message id:
// its dedupe key is the hash of its content, which includes the payload's
// time, so a redelivered request keeps its key. Group join requests and
// invitations (request_type "group") and unknown request types produce no
// event: they are logged (request_ignored, at debug level) and dropped.
func (c *Channel) requestEvent(w *wireEvent, raw []byte) (channel.Event, error) {
	if w.RequestType != "friend" {
		c.log.Debug("request_ignored", "request_type", w.RequestType, "sub_type", w.SubType,
			"reason", "only friend requests are supported")
		return channel.Event{}, errIgnored
	}
	var r ids
	user := r.qq(w.UserID, "user_id", false)
	if r.err != nil {
		return channel.Event{}, r.err
	}
	if user == "" {
		return channel.Event{}, fmt.Errorf("%w: friend request without user_id", errInvalidRequest)
	}
	flag, err := w.Flag.str("flag")
	if err != nil {
		return channel.Event{}, err
	}
	if flag == "" {
		return channel.Event{}, fmt.Errorf("%w: friend request from %s without a flag", errInvalidRequest, user)
	}
	comment, err := w.Comment.str("comment")
	if err != nil {
		return channel.Event{}, err
	}
	self, _ := w.SelfID.qq("self_id", false) // checked by decodeEvent
	if self == "" {
		self = c.self()
	}
	ev := channel.Event{
		Platform: c.cfg.Platform,
		BotID:    self,
		Kind:     channel.KindNotice,
		Chat:     channel.Chat{Kind: channel.Private, ID: user},
		Time:     c.eventTime(w.Time),
		Sender:   channel.Sender{ID: user},
		Notice: &channel.Notice{Type: channel.NoticeFriendRequest, Operator: user, UserID: user,
			Flag: flag, Comment: comment},
		Source: channel.SourceLive,
		Raw:    cloneRaw(raw),
	}
	if err := ev.Validate(); err != nil {
		return channel.Event{}, err
	}
	return ev, nil
}

func firstNonEmpty(a ...string) string {
	for _, s := range a {
		if s != "" && s != "0" {
			return s
		}
	}
	return ""
}

// leftGroup records that the bot is no longer in a group.
func (c *Channel) leftGroup(gid string) {
	if gid == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups.left == nil {
		c.groups.left = map[string]bool{}
	}
	c.groups.left[gid] = true
	c.log.Info("removed_from_group", "group_id", gid)
}

// setMuted records a mute of the bot (or of the whole group) or its lift.
func (c *Channel) setMuted(gid string, ban bool, at time.Time, dur optInt) {
	if gid == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ban {
		delete(c.muted, gid)
		return
	}
	var until time.Time
	if dur.OK && dur.V > 0 {
		until = at.Add(time.Duration(dur.V) * time.Second)
	}
	c.muted[gid] = until
}

// handleMeta applies heartbeats and lifecycle events to the state.
func (c *Channel) handleMeta(w *wireEvent) {
	switch w.MetaEventType {
	case "heartbeat":
		c.heartbeat(w.Status, w.Interval)
	case "lifecycle":
		c.log.Info("lifecycle", "sub_type", w.SubType)
		switch w.SubType {
		case "disable":
			c.setOnline(false, "lifecycle disable")
		case "enable":
			c.setOnline(true, "lifecycle enable")
		}
	default:
		c.log.Debug("meta_ignored", "meta_event_type", w.MetaEventType)
	}
}

func (c *Channel) setOnline(online bool, reason string) {
	c.mu.Lock()
	c.online = online
	c.mu.Unlock()
	c.report(reason)
}

// heartbeat records a heartbeat's status and re-arms the watchdog: no
// heartbeat for twice the announced interval makes the account count as
// offline (and, in ModeHTTP, the transport as down).
func (c *Channel) heartbeat(st *wireStatus, interval optInt) {
	c.mu.Lock()
	if st != nil {
		c.online = st.effective()
	}
	if c.cfg.Mode == ModeHTTP && c.bootstrap {
		c.up = true
	}
	c.stopWatchdogLocked()
	var stop chan struct{}
	var gen uint64
	if interval.OK && interval.V > 0 && c.runCtx != nil {
		stop = make(chan struct{})
		c.hbStop = stop
		gen = c.hbGen
	}
	ctx := c.runCtx
	c.mu.Unlock()

	reason := "heartbeat: account online"
	if st != nil && !st.effective() {
		reason = "heartbeat: account offline or not good"
	}
	c.report(reason)
	if stop == nil {
		c.log.Debug("heartbeat", "online", st.effective())
		return
	}
	wait := 2 * time.Duration(interval.V) * time.Millisecond
	t := c.clk.NewTimer(wait)
	c.log.Debug("heartbeat", "online", st.effective(), "watchdog", wait)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
		c.mu.Lock()
		if c.hbGen != gen || c.hbStop != stop {
			c.mu.Unlock()
			return
		}
		c.hbStop = nil
		c.online = false
		if c.cfg.Mode == ModeHTTP {
			c.up = false
		}
		c.mu.Unlock()
		c.log.Warn("heartbeat_missed", "waited", wait)
		c.report("heartbeat missed")
	}()
}

// stopWatchdogLocked stops the heartbeat watchdog. c.mu must be held.
func (c *Channel) stopWatchdogLocked() {
	c.hbGen++
	if c.hbStop != nil {
		close(c.hbStop)
		c.hbStop = nil
	}
}

// toSegments converts wire segments to the normalised model and reports
// whether the bot was @-mentioned. An at segment whose qq is neither "all"
// nor a QQ number, and a reply segment whose id is not a message id, are
// dropped: their ids would be out of the protocol's range. image segments
// marked as stickers (sub_type 1, go-cqhttp's subType 1) and mface segments
// (NapCat's market faces: url, and summary as the name) become
// channel.SegSticker; record, video and file become voice, video and file.
func toSegments(m Message, selfID string) ([]channel.Segment, bool) {
	var out []channel.Segment
	toMe := false
	for _, s := range m {
		d := s.Data
		switch s.Type {
		case "text":
			if t := d["text"]; t != "" {
				if n := len(out); n > 0 && out[n-1].Type == channel.SegText {
					out[n-1].Text += t
				} else {
					out = append(out, channel.Text(t))
				}
			}
		case "at":
			qq := d["qq"]
			if _, ok := idText(qq, false); !ok && qq != "all" {
				continue
			}
			if qq == selfID {
				toMe = true
			}
			out = append(out, channel.Mention(qq))
		case "reply":
			if id, ok := idText(d["id"], true); ok {
				out = append(out, channel.Quote(id))
			}
		case "face":
			out = append(out, channel.Segment{Type: channel.SegFace, FaceID: d["id"]})
		case "image":
			t := channel.SegImage
			if d["sub_type"] == "1" || d["subType"] == "1" {
				t = channel.SegSticker
			}
			out = append(out, channel.Segment{Type: t, Media: toMedia(d)})
		case "mface":
			out = append(out, channel.Segment{Type: channel.SegSticker, Media: &channel.Media{URL: d["url"], Name: d["summary"]}})
		case "record":
			out = append(out, channel.Segment{Type: channel.SegVoice, Media: toMedia(d)})
		case "video":
			out = append(out, channel.Segment{Type: channel.SegVideo, Media: toMedia(d)})
		case "file":
			out = append(out, channel.Segment{Type: channel.SegFile, Media: toMedia(d)})
		case "forward":
			if id := d["id"]; id != "" {
				out = append(out, channel.Segment{Type: channel.SegForward, MessageID: id})
			}
		case "share":
			if u := d["url"]; u != "" {
				out = append(out, channel.Segment{Type: channel.SegLink, URL: u, Text: d["title"]})
			}
		}
	}
	return out, toMe
}

func isRemote(s string) bool {
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// toMedia reads the media reference of an image, record, video or file
// segment: url (else a remote file) as URL, file_id (else a file that is
// not a URL) as FileID, name or file_name (else the file's name) as Name,
// file_size or size as Size. MIME stays empty: OneBot v11 declares none.
func toMedia(d map[string]string) *channel.Media {
	file := d["file"]
	m := &channel.Media{URL: d["url"], FileID: d["file_id"], Name: firstNonEmpty(d["name"], d["file_name"])}
	if isRemote(file) {
		if m.URL == "" {
			m.URL = file
		}
	} else if m.FileID == "" {
		m.FileID = file
	}
	if m.Name == "" && file != "" && !isRemote(file) && !strings.HasPrefix(file, "base64://") {
		m.Name = file
	}
	for _, k := range []string{"file_size", "size"} {
		if n, err := strconv.ParseInt(d[k], 10, 64); err == nil && n > 0 {
			m.Size = n
			break
		}
	}
	return m
}

// mediaSegment renders an outgoing attachment by its MIME type: image/*
// as image, audio/* as record, video/* as video, anything else as file.
func mediaSegment(m channel.Media) (Segment, error) {
	file := m.URL
	if file == "" {
		file = m.FileID
	}
	if file == "" {
		return Segment{}, errors.New("attachment has neither URL nor FileID")
	}
	typ := "file"
	switch {
	case strings.HasPrefix(m.MIME, "image/"):
		typ = "image"
	case strings.HasPrefix(m.MIME, "audio/"):
		typ = "record"
	case strings.HasPrefix(m.MIME, "video/"):
		typ = "video"
	}
	d := map[string]string{"file": file}
	if typ == "file" && m.Name != "" {
		d["name"] = m.Name
	}
	return Segment{Type: typ, Data: d}, nil
}

// OutgoingMessage renders an outgoing message as OneBot segments: a reply
// segment for ReplyTo first, then one at segment per mention (and a space
// before the text), the text, then the attachments (image, record, video or
// file by MIME type). ReplyTo must be a OneBot message id (a nonzero 32-bit
// integer) and each mention a QQ number or "all".
func OutgoingMessage(out channel.Outgoing) (Message, error) {
	var m Message
	if out.ReplyTo != "" {
		if _, ok := idText(out.ReplyTo, true); !ok {
			return nil, fmt.Errorf("reply target %q is not a OneBot message id", out.ReplyTo)
		}
		m = append(m, Segment{Type: "reply", Data: map[string]string{"id": out.ReplyTo}})
	}
	for _, id := range out.Mentions {
		if id == "" {
			continue
		}
		if _, ok := idText(id, false); !ok && id != "all" {
			return nil, fmt.Errorf("mention %q is not a QQ number", id)
		}
		m = append(m, Segment{Type: "at", Data: map[string]string{"qq": id}})
	}
	if out.Text != "" {
		text := out.Text
		if len(out.Mentions) > 0 && !strings.HasPrefix(text, " ") && !strings.HasPrefix(text, "\n") {
			text = " " + text
		}
		m = append(m, TextSegment(text))
	}
	for _, med := range out.Media {
		s, err := mediaSegment(med)
		if err != nil {
			return nil, err
		}
		m = append(m, s)
	}
	if len(m) == 0 || (out.Text == "" && len(out.Media) == 0) {
		return nil, errors.New("nothing to send: no text and no attachments")
	}
	return m, nil
}
