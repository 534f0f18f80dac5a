package telegramtest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/clock"
)

// ---- updates ------------------------------------------------------------

// allowedLocked reports whether an update type may be created under the
// current allowed_updates.
func (s *Server) allowedLocked(typ string) bool {
	switch {
	case s.allowed == nil:
		return true
	case len(s.allowed) == 0:
		return typ != "chat_member" && typ != "message_reaction" && typ != "message_reaction_count"
	}
	return slices.Contains(s.allowed, typ)
}

// enqueueLocked queues an update object (its update_id is assigned here).
func (s *Server) enqueueLocked(typ string, obj map[string]any) int64 {
	id := s.nextUpdate
	s.nextUpdate++
	obj["update_id"] = id
	raw, err := json.Marshal(obj)
	if err != nil {
		panic("telegramtest: marshal update: " + err.Error())
	}
	s.queue = append(s.queue, queued{id: id, typ: typ, raw: raw})
	s.notifyLocked()
	return id
}

// afterPush delivers to the webhook when one is set.
func (s *Server) afterPush(ctx context.Context) error {
	url, _ := s.Webhook()
	if url == "" {
		return nil
	}
	return s.FlushWebhook(ctx)
}

// Incoming describes a user message for Push.
type Incoming struct {
	// Chat is where the message is posted: ID and Type ("private",
	// "group", "supergroup") are required; a private chat's ID is the
	// sender's id.
	Chat Chat
	// From is the sender (defaults to the peer for a private chat).
	From User
	Text string
	// Entities are extra entities of Text (offsets relative to Text; they
	// are shifted when MentionBot adds a prefix).
	Entities []MessageEntity
	// MentionBot prefixes Text (or Caption when Text is empty) with
	// "@<bot username> " and a mention entity.
	MentionBot bool
	// ReplyTo is the id of a message of the same chat to reply to; the
	// update then carries it as reply_to_message.
	ReplyTo int64
	// Photo, Voice, Document, Audio, Video, VideoNote, Animation and
	// Sticker attach media (register their content with AddFile to make
	// it downloadable); Caption and CaptionEntities go with them. A
	// Sticker without a Type is "regular".
	Photo           []PhotoSize
	Voice           *File
	Document        *File
	Audio           *File
	Video           *File
	VideoNote       *File
	Animation       *File
	Sticker         *Sticker
	Caption         string
	CaptionEntities []MessageEntity
	// MediaGroupID puts the message in an album (media_group_id): an
	// album is one message per picture, the caption on one of them.
	MediaGroupID string
	// Date is the send time (zero = the clock's now).
	Date time.Time
}

// Push posts a user message: it is stored in its chat and queued as a
// message update, then delivered to the webhook when one is set (a
// delivery error is returned, with the message; the update stays queued
// for the next delivery). Otherwise a held getUpdates returns it.
func (s *Server) Push(ctx context.Context, in Incoming) (Message, error) {
	s.mu.Lock()
	m, err := s.pushLocked(in)
	s.mu.Unlock()
	if err != nil {
		return Message{}, err
	}
	return m, s.afterPush(ctx)
}

func (s *Server) pushLocked(in Incoming) (Message, error) {
	if in.Chat.ID == 0 {
		return Message{}, errors.New("telegramtest: Push without a chat id")
	}
	if !s.allowedLocked("message") {
		return Message{}, ErrUpdateFiltered
	}
	if in.Chat.Type == "" {
		in.Chat.Type = s.chatLocked(in.Chat.ID).chat.Type
	}
	if in.From.ID == 0 {
		if in.Chat.Type != ChatPrivate {
			return Message{}, errors.New("telegramtest: Push to a group without From")
		}
		in.From = User{ID: in.Chat.ID, FirstName: in.Chat.FirstName}
	}
	if in.From.FirstName == "" {
		in.From.FirstName = "User " + strconv.FormatInt(in.From.ID, 10)
	}
	if in.Chat.Type == ChatPrivate && in.Chat.FirstName == "" {
		in.Chat.FirstName, in.Chat.LastName, in.Chat.Username = in.From.FirstName, in.From.LastName, in.From.Username
	}
	if in.Chat.Type != ChatPrivate && in.Chat.Title == "" {
		in.Chat.Title = "Group " + strconv.FormatInt(in.Chat.ID, 10)
	}
	cs := s.registerChatLocked(in.Chat)
	s.users[in.From.ID] = in.From
	if cs.chat.Type != ChatPrivate {
		if _, ok := cs.members[in.From.ID]; !ok {
			cs.members[in.From.ID] = "member"
		}
	}

	text, ents := in.Text, slices.Clone(in.Entities)
	caption, capEnts := in.Caption, slices.Clone(in.CaptionEntities)
	if in.MentionBot {
		if text != "" || caption == "" {
			text, ents = s.mentionPrefix(text, ents)
		} else {
			caption, capEnts = s.mentionPrefix(caption, capEnts)
		}
	}
	from := in.From
	m := Message{
		From: &from, Chat: cs.chat, Date: s.dateOf(in.Date),
		Text: text, Entities: ents, Caption: caption, CaptionEntities: capEnts,
		Photo: slices.Clone(in.Photo), Voice: in.Voice, Document: in.Document,
		Audio: in.Audio, Video: in.Video, VideoNote: in.VideoNote, Animation: in.Animation, MediaGroupID: in.MediaGroupID,
	}
	if in.Sticker != nil {
		st := *in.Sticker
		st.Type = cmp.Or(st.Type, "regular")
		m.Sticker = &st
	}
	if in.ReplyTo != 0 {
		target, ok := cs.msgs[in.ReplyTo]
		if !ok {
			return Message{}, fmt.Errorf("telegramtest: no message %d in chat %d to reply to", in.ReplyTo, in.Chat.ID)
		}
		target.ReplyToMessage = nil // not nested further
		m.ReplyToMessage = &target
	}
	cs.next++
	m.MessageID = cs.next
	cs.msgs[m.MessageID] = m
	s.enqueueLocked("message", map[string]any{"message": m})
	return m, nil
}

func (s *Server) mentionPrefix(text string, ents []MessageEntity) (string, []MessageEntity) {
	at := "@" + s.bot.Username
	prefix := at + " "
	shift := UTF16Len(prefix)
	out := []MessageEntity{{Type: "mention", Offset: 0, Length: UTF16Len(at)}}
	for _, e := range ents {
		e.Offset += shift
		out = append(out, e)
	}
	return prefix + text, out
}

func (s *Server) dateOf(t time.Time) int64 {
	if t.IsZero() {
		t = s.clk.Now()
	}
	return t.Unix()
}

// PushEdit edits a stored message's text and queues an edited_message
// update.
func (s *Server) PushEdit(ctx context.Context, chatID, messageID int64, text string) (Message, error) {
	s.mu.Lock()
	cs, ok := s.chats[chatID]
	var m Message
	if ok {
		m, ok = cs.msgs[messageID]
	}
	switch {
	case !ok:
		s.mu.Unlock()
		return Message{}, fmt.Errorf("telegramtest: no message %d in chat %d", messageID, chatID)
	case !s.allowedLocked("edited_message"):
		s.mu.Unlock()
		return Message{}, ErrUpdateFiltered
	}
	m.Text, m.Entities = text, nil
	m.EditDate = s.dateOf(time.Time{})
	cs.msgs[messageID] = m
	s.enqueueLocked("edited_message", map[string]any{"edited_message": m})
	s.mu.Unlock()
	return m, s.afterPush(ctx)
}

// PushRaw queues an arbitrary update given as a JSON object (its
// update_id is assigned by the server, replacing any given). It bypasses
// allowed_updates and the chat store: use it for unknown update types and
// malformed content. Numbers are passed on as written (1e30 stays 1e30, a
// 64-bit id keeps every digit).
func (s *Server) PushRaw(ctx context.Context, obj []byte) (int64, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || !json.Valid(obj) || m == nil {
		if err == nil {
			err = errors.New("not a single JSON object")
		}
		return 0, fmt.Errorf("telegramtest: PushRaw needs a JSON object: %w", err)
	}
	typ := ""
	for k := range m {
		if k != "update_id" {
			typ = k
		}
	}
	s.mu.Lock()
	id := s.enqueueLocked(typ, m)
	s.mu.Unlock()
	return id, s.afterPush(ctx)
}

// confirmLocked applies a getUpdates offset.
func (s *Server) confirmLocked(offset int64) {
	switch {
	case offset > 0:
		i := 0
		for i < len(s.queue) && s.queue[i].id < offset {
			i++
		}
		s.queue = slices.Delete(s.queue, 0, i)
		s.confirmed = max(s.confirmed, offset)
	case offset < 0:
		if keep := int(-offset); keep < len(s.queue) {
			s.confirmed = max(s.confirmed, s.queue[len(s.queue)-keep].id)
			s.queue = slices.Delete(s.queue, 0, len(s.queue)-keep)
		}
	}
}

func (s *Server) getUpdates(w http.ResponseWriter, r *http.Request, p params) {
	offset, _, err1 := p.int("offset")
	limit, hasLimit, err2 := p.int("limit")
	timeout, _, err3 := p.int("timeout")
	var allowed []string
	hasAllowed, err4 := p.decode("allowed_updates", &allowed)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		badRequest(w, err.Error())
		return
	}
	if !hasLimit || limit > 100 || limit < 1 {
		limit = 100
	}
	timeout = max(timeout, 0)

	s.mu.Lock()
	if s.hookURL != "" {
		s.mu.Unlock()
		writeError(w, Failure{Code: http.StatusConflict, Description: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"})
		return
	}
	if hasAllowed {
		s.allowed = append([]string{}, allowed...)
	}
	s.confirmLocked(offset)
	if s.poll != nil {
		close(s.poll.term) // the older request ends with 409
	}
	me := &pollWaiter{term: make(chan struct{})}
	s.poll = me
	var timer clock.Timer
	expired := timeout == 0
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if s.offline {
			s.dropPollLocked(me)
			s.mu.Unlock()
			s.serveOffline(w)
			return
		}
		n := min(int(limit), len(s.queue))
		if n > 0 || expired || s.closed {
			ups := make([]json.RawMessage, n)
			for i := range n {
				ups[i] = s.queue[i].raw
			}
			s.dropPollLocked(me)
			s.mu.Unlock()
			writeOK(w, ups)
			return
		}
		changed, wake := s.changed, s.wake
		s.mu.Unlock()
		if timer == nil {
			timer = s.clk.NewTimer(time.Duration(timeout) * time.Second)
		}
		select {
		case <-changed:
		case <-wake:
			expired = true
		case <-timer.C():
			expired = true
		case <-me.term:
			writeError(w, Failure{Code: http.StatusConflict})
			return
		case <-r.Context().Done():
			s.mu.Lock()
			s.dropPollLocked(me)
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
	}
}

func (s *Server) dropPollLocked(me *pollWaiter) {
	if s.poll == me {
		s.poll = nil
	}
}

// ---- webhook ------------------------------------------------------------

// FlushWebhook delivers the queued updates to the webhook in order, one
// POST each with the secret header, like Telegram: an update leaves the
// queue only when answered 2xx; the first failure stops the flush and is
// returned. It does nothing while offline or without a webhook.
func (s *Server) FlushWebhook(ctx context.Context) error {
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	for {
		s.mu.Lock()
		if s.hookURL == "" || s.offline || s.closed || len(s.queue) == 0 {
			s.mu.Unlock()
			return nil
		}
		u, url, secret := s.queue[0], s.hookURL, s.hookSecret
		s.mu.Unlock()

		status, body, err := postWebhook(ctx, s.hc, url, secret, u.raw)
		d := Delivery{UpdateID: u.id, Status: status}
		if err == nil && status/100 != 2 {
			err = fmt.Errorf("telegramtest: webhook answered %d for update %d: %s", status, u.id, strings.TrimSpace(body))
		}
		if err != nil {
			d.Err = err.Error()
		}
		s.mu.Lock()
		s.deliveries = append(s.deliveries, d)
		if err == nil && len(s.queue) > 0 && s.queue[0].id == u.id {
			s.queue = s.queue[1:]
		}
		s.notifyLocked()
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// PostWebhook posts body to a webhook URL as Telegram does: POST,
// Content-Type application/json and, when secret is not empty, the
// X-Telegram-Bot-Api-Secret-Token header. It returns the answer's status
// and body.
func PostWebhook(ctx context.Context, url, secret string, body []byte) (status int, respBody string, err error) {
	return postWebhook(ctx, webhookClient, url, secret, body)
}

// webhookClient has a transport of its own: an httptest.Server's Close
// closes http.DefaultTransport's idle connections, which broke posts that
// were about to use one when tests ran in parallel.
var webhookClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

func postWebhook(ctx context.Context, hc *http.Client, url, secret string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for sb.Len() < 64<<10 {
		n, rerr := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if rerr != nil {
			break
		}
	}
	return resp.StatusCode, sb.String(), nil
}

func (s *Server) setWebhook(w http.ResponseWriter, p params) {
	url, _ := p.str("url")
	secret, hasSecret := p.str("secret_token")
	if hasSecret && !validSecret(secret) {
		badRequest(w, "secret token contains unallowed characters")
		return
	}
	var allowed []string
	hasAllowed, err := p.decode("allowed_updates", &allowed)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	s.mu.Lock()
	s.hookURL, s.hookSecret = url, secret
	if hasAllowed {
		s.allowed = append([]string{}, allowed...)
	}
	if p.bool("drop_pending_updates") {
		s.queue = nil
	}
	if s.poll != nil {
		close(s.poll.term)
		s.poll = nil
	}
	s.notifyLocked()
	s.mu.Unlock()
	desc := "Webhook was set"
	if url == "" {
		desc = "Webhook was deleted"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": true, "description": desc})
}

func (s *Server) deleteWebhook(w http.ResponseWriter, p params) {
	s.mu.Lock()
	s.hookURL, s.hookSecret = "", ""
	if p.bool("drop_pending_updates") {
		s.queue = nil
	}
	s.notifyLocked()
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": true, "description": "Webhook was deleted"})
}

func validSecret(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' && r != '-' {
			return false
		}
	}
	return true
}

// ---- sending ------------------------------------------------------------

// chatParam resolves chat_id to a known or guessed chat. It fails for
// ids that are not numeric.
func (s *Server) chatParamLocked(p params) (*chatState, string) {
	v, ok := p.str("chat_id")
	if !ok || v == "" {
		return nil, "chat_id is empty"
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id == 0 {
		return nil, "chat not found"
	}
	return s.chatLocked(id), ""
}

func kickedError(cs *chatState) Failure {
	if cs.chat.Type == ChatPrivate {
		return Failure{Code: http.StatusForbidden, Description: "Forbidden: bot was blocked by the user"}
	}
	return Failure{Code: http.StatusForbidden, Description: "Forbidden: bot was kicked from the group chat"}
}

// replyLocked resolves reply_parameters (or the older reply_to_message_id).
func (s *Server) replyLocked(cs *chatState, p params) (*Message, int64, string) {
	var rp ReplyParameters
	has, err := p.decode("reply_parameters", &rp)
	if err != nil {
		return nil, 0, err.Error()
	}
	if !has {
		id, _, err := p.int("reply_to_message_id")
		if err != nil {
			return nil, 0, err.Error()
		}
		rp = ReplyParameters{MessageID: id, AllowSendingWithoutReply: p.bool("allow_sending_without_reply")}
	}
	if rp.MessageID == 0 {
		return nil, 0, ""
	}
	target, ok := cs.msgs[rp.MessageID]
	if !ok {
		if rp.AllowSendingWithoutReply {
			return nil, 0, ""
		}
		return nil, 0, "message to be replied not found"
	}
	target.ReplyToMessage = nil
	return &target, rp.MessageID, ""
}

// entitiesOK checks entity bounds against text (UTF-16 units).
func entitiesOK(text string, ents []MessageEntity) bool {
	n := UTF16Len(text)
	for _, e := range ents {
		if e.Offset < 0 || e.Length <= 0 || e.Offset+e.Length > n || e.Type == "" {
			return false
		}
		if e.Type == "text_mention" && (e.User == nil || e.User.ID == 0) {
			return false
		}
	}
	return true
}

// targetLocked resolves the chat and the optional reply target of a send,
// answering the request with the error when one of them is bad.
func (s *Server) targetLocked(w http.ResponseWriter, p params) (cs *chatState, reply *Message, replyID int64, ok bool) {
	cs, bad := s.chatParamLocked(p)
	if bad != "" {
		badRequest(w, bad)
		return nil, nil, 0, false
	}
	if cs.kicked {
		writeError(w, kickedError(cs))
		return nil, nil, 0, false
	}
	reply, replyID, bad = s.replyLocked(cs, p)
	if bad != "" {
		badRequest(w, bad)
		return nil, nil, 0, false
	}
	return cs, reply, replyID, true
}

func (s *Server) sendMessage(w http.ResponseWriter, p params) {
	text, _ := p.str("text")
	var ents []MessageEntity
	if _, err := p.decode("entities", &ents); err != nil {
		badRequest(w, "can't parse entities: "+err.Error())
		return
	}
	switch {
	case text == "":
		badRequest(w, "message text is empty")
		return
	case UTF16Len(text) > MaxTextUTF16:
		badRequest(w, "message is too long")
		return
	case !entitiesOK(text, ents):
		badRequest(w, "can't parse entities: entity out of range or incomplete")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, reply, replyID, ok := s.targetLocked(w, p)
	if !ok {
		return
	}
	bot := s.bot
	m := Message{From: &bot, Chat: cs.chat, Date: s.dateOf(time.Time{}), Text: text, Entities: ents, ReplyToMessage: reply}
	s.deliverLocked(w, cs, m, SentMessage{Method: "sendMessage", Text: text, Entities: ents, ReplyTo: replyID})
}

// deliverLocked numbers the bot's message m in its chat, keeps it, records
// it as sent (sent gets the chat, message id and date) and answers the
// request with it. s.mu is held.
func (s *Server) deliverLocked(w http.ResponseWriter, cs *chatState, m Message, sent SentMessage) {
	cs.next++
	m.MessageID = cs.next
	cs.msgs[m.MessageID] = m
	sent.Chat, sent.MessageID, sent.Date = cs.chat, m.MessageID, time.Unix(m.Date, 0)
	s.sent = append(s.sent, sent)
	s.notifyLocked()
	writeOK(w, m)
}

func (s *Server) sendMedia(w http.ResponseWriter, method string, p params) {
	field := mediaField[method]
	ref, _ := p.str(field)
	caption, _ := p.str("caption")
	var ents []MessageEntity
	if _, err := p.decode("caption_entities", &ents); err != nil {
		badRequest(w, "can't parse caption entities: "+err.Error())
		return
	}
	switch {
	case ref == "":
		badRequest(w, "there is no "+field+" in the request")
		return
	case UTF16Len(caption) > MaxCaptionUTF16:
		badRequest(w, "message caption is too long")
		return
	case !entitiesOK(caption, ents):
		badRequest(w, "can't parse entities: entity out of range or incomplete")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, reply, replyID, ok := s.targetLocked(w, p)
	if !ok {
		return
	}
	fileID := ref
	if strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://") || strings.HasPrefix(ref, "upload:") {
		s.nextFile++
		fileID = "fake-file-" + strconv.Itoa(s.nextFile)
	}
	bot := s.bot
	m := Message{From: &bot, Chat: cs.chat, Date: s.dateOf(time.Time{}), Caption: caption, CaptionEntities: ents, ReplyToMessage: reply}
	f := &File{FileID: fileID, FileUniqueID: "u-" + fileID}
	switch field {
	case "photo":
		m.Photo = []PhotoSize{
			{FileID: fileID + "-s", FileUniqueID: "u-" + fileID + "-s", Width: 90, Height: 60},
			{FileID: fileID, FileUniqueID: "u-" + fileID, Width: 1280, Height: 853},
		}
	case "voice":
		f.MimeType = "audio/ogg"
		m.Voice = f
	case "audio":
		m.Audio = f
	case "video":
		m.Video = f
	case "animation":
		m.Animation = f
	default:
		m.Document = f
	}
	s.deliverLocked(w, cs, m, SentMessage{Method: method, Text: caption, Entities: ents, ReplyTo: replyID, Media: ref})
}

var chatActions = []string{
	"typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
	"upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note",
}

func (s *Server) sendChatAction(w http.ResponseWriter, p params) {
	action, _ := p.str("action")
	if !slices.Contains(chatActions, action) {
		badRequest(w, "wrong parameter action in request")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, bad := s.chatParamLocked(p)
	if bad != "" {
		badRequest(w, bad)
		return
	}
	if cs.kicked {
		writeError(w, kickedError(cs))
		return
	}
	s.actions = append(s.actions, ChatAction{ChatID: cs.chat.ID, Action: action, At: s.clk.Now()})
	s.notifyLocked()
	writeOK(w, true)
}

func (s *Server) deleteMessage(w http.ResponseWriter, p params) {
	id, _, err := p.int("message_id")
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, bad := s.chatParamLocked(p)
	if bad != "" {
		badRequest(w, bad)
		return
	}
	if _, ok := cs.msgs[id]; !ok {
		badRequest(w, "message to delete not found")
		return
	}
	delete(cs.msgs, id)
	s.notifyLocked()
	writeOK(w, true)
}

func (s *Server) getChatMember(w http.ResponseWriter, p params) {
	uid, _, err := p.int("user_id")
	if err != nil || uid == 0 {
		badRequest(w, "invalid user_id specified")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, bad := s.chatParamLocked(p)
	if bad != "" {
		badRequest(w, bad)
		return
	}
	type member struct {
		Status string `json:"status"`
		User   User   `json:"user"`
	}
	switch {
	case uid == s.bot.ID:
		writeOK(w, member{Status: "member", User: s.bot})
		return
	case cs.chat.Type == ChatPrivate && cs.chat.ID == uid:
		u, ok := s.users[uid]
		if !ok {
			u = User{ID: uid, FirstName: cs.chat.FirstName, LastName: cs.chat.LastName, Username: cs.chat.Username}
		}
		writeOK(w, member{Status: "member", User: u})
		return
	}
	status, ok := cs.members[uid]
	if !ok {
		badRequest(w, "user not found")
		return
	}
	writeOK(w, member{Status: status, User: s.users[uid]})
}
