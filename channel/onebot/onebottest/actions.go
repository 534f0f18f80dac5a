package onebottest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/onebot"
)

// result is an action's answer before it is put in the envelope.
type result struct {
	status  string
	retcode int64
	data    any
	msg     string
	stalled bool
}

func (r result) envelope() map[string]any {
	env := map[string]any{"status": r.status, "retcode": r.retcode, "data": r.data}
	if r.msg != "" {
		env["msg"] = r.msg
		env["wording"] = r.msg
	}
	return env
}

func okResult(data any) result { return result{status: "ok", data: data} }

func failResult(retcode int64, msg string) result {
	return result{status: "failed", retcode: retcode, msg: msg}
}

// do runs one API request: it records it, applies stalls and injected
// failures and the _async / _rate_limited suffixes, then the action.
func (s *Server) do(ctx context.Context, action string, p params, via string) result {
	base, async := action, false
	for _, suffix := range []string{"_async", "_rate_limited"} {
		if b, ok := strings.CutSuffix(action, suffix); ok {
			base, async = b, true
		}
	}
	s.mu.Lock()
	s.calls = append(s.calls, Call{Action: action, Params: maps.Clone(map[string]any(p)), Via: via})
	s.notifyLocked()
	if s.stalls[base] || s.stalls[action] {
		s.mu.Unlock()
		return result{stalled: true}
	}
	for i, f := range s.fails {
		if strings.HasPrefix(base, f.prefix) {
			s.fails = slices.Delete(s.fails, i, i+1)
			s.mu.Unlock()
			return failResult(f.retcode, f.msg)
		}
	}
	s.mu.Unlock()
	res := s.act(ctx, base, p)
	if async && res.status == "ok" {
		return result{status: "async", retcode: 1}
	}
	return res
}

func (s *Server) act(ctx context.Context, action string, p params) result {
	switch action {
	case "get_login_info":
		return okResult(map[string]any{"user_id": s.cfg.SelfID, "nickname": s.cfg.Nickname})
	case "get_status":
		s.mu.Lock()
		online := !s.offline
		s.mu.Unlock()
		return okResult(map[string]any{"online": online, "good": true, "app_initialized": true, "app_enabled": true, "app_good": true})
	case "get_version_info":
		return okResult(map[string]any{"app_name": "onebottest", "app_version": "1.0.0", "protocol_version": "v11"})
	case "send_private_msg":
		return s.sendMsg(ctx, action, false, p)
	case "send_group_msg":
		return s.sendMsg(ctx, action, true, p)
	case "send_msg":
		switch p.str("message_type") {
		case "group":
			return s.sendMsg(ctx, action, true, p)
		case "private":
			return s.sendMsg(ctx, action, false, p)
		}
		_, isGroup := p.int64("group_id")
		return s.sendMsg(ctx, action, isGroup, p)
	case "delete_msg":
		return s.deleteMsg(p)
	case "get_msg":
		id, ok := p.int64("message_id")
		if !ok {
			return failResult(1400, "message_id required")
		}
		r, found := s.Message(int32(id))
		if !found || r.Recalled {
			return failResult(RetcodeFailed, "message not found")
		}
		return okResult(s.messageEvent(r))
	case "get_group_member_info":
		return s.memberInfo(p)
	case "get_group_list":
		return s.groupList()
	case "get_friend_list":
		return s.friendList()
	case "get_group_msg_history":
		return s.history(p, true)
	case "get_friend_msg_history":
		if s.cfg.Dialect == onebot.DialectGoCQHTTP {
			return failResult(1404, "unknown action")
		}
		return s.history(p, false)
	case "send_group_forward_msg":
		return s.sendForward(action, true, p)
	case "send_private_forward_msg":
		return s.sendForward(action, false, p)
	case "get_image", "get_record", "get_file":
		return s.getMedia(action, p)
	case "set_friend_add_request":
		return s.answerFriendRequest(p)
	case "set_input_status":
		uid, ok := p.int64("user_id")
		if !ok {
			return failResult(1400, "user_id required")
		}
		s.mu.Lock()
		s.typing = append(s.typing, uid)
		s.notifyLocked()
		s.mu.Unlock()
		return okResult(nil)
	}
	return failResult(1404, "unknown action")
}

func (s *Server) sendMsg(ctx context.Context, action string, isGroup bool, p params) result {
	m, raw, err := p.message("message")
	if err != nil {
		return failResult(1400, "message: "+err.Error())
	}
	if len(m) == 0 {
		return failResult(1400, "empty message")
	}
	r := &Record{UserID: s.cfg.SelfID, Nickname: s.cfg.Nickname, Message: m, Self: true}
	sent := Sent{Action: action, Message: m, Raw: raw}
	s.mu.Lock()
	if s.offline {
		s.mu.Unlock()
		return failResult(RetcodeFailed, "account offline")
	}
	if fail, ok := s.sendLocked(isGroup, p, r, sent); !ok {
		s.mu.Unlock()
		return fail
	}
	rec, report := *r, s.cfg.ReportSelf
	s.mu.Unlock()
	if report {
		if err := s.PushEvent(ctx, s.messageEvent(rec)); err != nil {
			s.log.Debug("self_report_failed", "err", err)
		}
	}
	return okResult(map[string]any{"message_id": rec.ID})
}

func (s *Server) deleteMsg(p params) result {
	id, ok := p.int64("message_id")
	if !ok {
		return failResult(1400, "message_id required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, found := s.msgs[int32(id)]
	if !found || r.Recalled {
		return failResult(RetcodeFailed, "message not found")
	}
	r.Recalled = true
	s.notifyLocked()
	return okResult(nil)
}

func (s *Server) memberInfo(p params) result {
	gid, ok1 := p.int64("group_id")
	uid, ok2 := p.int64("user_id")
	if !ok1 || !ok2 {
		return failResult(1400, "group_id and user_id required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[gid]
	if g == nil || s.kicked[gid] {
		return failResult(RetcodeFailed, "group not found")
	}
	m, found := g.members[uid]
	if !found {
		return failResult(RetcodeFailed, "member not found")
	}
	d := map[string]any{
		"group_id": gid, "user_id": uid, "nickname": m.Nickname, "card": m.Card,
		"sex": "unknown", "age": 0, "area": "", "join_time": 0, "last_sent_time": 0,
		"role": cmpOr(m.Role, "member"), "unfriendly": false, "title": "", "title_expire_time": 0,
		"card_changeable": false,
	}
	if m.Level != "" {
		d["level"] = m.Level
	}
	return okResult(d)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (s *Server) groupList() result {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(maps.Keys(s.groups))
	list := []map[string]any{}
	for _, id := range ids {
		if s.kicked[id] {
			continue
		}
		g := s.groups[id]
		list = append(list, map[string]any{"group_id": id, "group_name": g.name, "member_count": len(g.members), "max_member_count": 500})
	}
	return okResult(list)
}

func (s *Server) friendList() result {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := []map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(s.friends)) {
		list = append(list, map[string]any{"user_id": id, "nickname": s.friends[id], "remark": ""})
	}
	return okResult(list)
}

// history answers get_group_msg_history / get_friend_msg_history in the
// configured dialect, oldest first (newest first with reverseOrder).
func (s *Server) history(p params, isGroup bool) result {
	var k chatKey
	if isGroup {
		gid, ok := p.int64("group_id")
		if !ok {
			return failResult(1400, "group_id required")
		}
		k.group = gid
	} else {
		uid, ok := p.int64("user_id")
		if !ok {
			return failResult(1400, "user_id required")
		}
		k.peer = uid
	}
	s.mu.Lock()
	var list []Record
	for _, r := range s.byChat[k] {
		if !r.Recalled {
			list = append(list, *r)
		}
	}
	s.mu.Unlock()

	count := int64(20)
	if n, ok := p.int64("count"); ok && n > 0 {
		count = min(n, 1000)
	}
	var anchor int64 // a seq; 0 = latest
	switch s.cfg.Dialect {
	case onebot.DialectGoCQHTTP:
		count = 19
		anchor, _ = p.int64("message_seq")
	case onebot.DialectLagrange:
		if id, ok := p.int64("message_id"); ok && id != 0 {
			i := slices.IndexFunc(list, func(r Record) bool { return int64(r.ID) == id })
			if i < 0 {
				return failResult(RetcodeFailed, "message not found")
			}
			anchor = list[i].Seq
		}
	default:
		anchor, _ = p.int64("message_seq")
	}
	if anchor > 0 {
		end := 0
		for end < len(list) && list[end].Seq <= anchor {
			end++
		}
		list = list[:end]
	}
	if int64(len(list)) > count {
		list = list[int64(len(list))-count:]
	}
	if p.bool("reverseOrder") || p.bool("reverse_order") {
		slices.Reverse(list)
	}
	msgs := make([]map[string]any, 0, len(list))
	for _, r := range list {
		msgs = append(msgs, s.messageEvent(r))
	}
	return okResult(map[string]any{"messages": msgs})
}

func (s *Server) sendForward(action string, isGroup bool, p params) result {
	b, err := json.Marshal(p["messages"])
	if err != nil {
		return failResult(1400, "messages: "+err.Error())
	}
	var raw []struct {
		Type string                     `json:"type"`
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) == 0 {
		return failResult(1400, "messages must be a non-empty node array")
	}
	nodes := make([]Node, 0, len(raw))
	for _, n := range raw {
		if n.Type != "node" {
			return failResult(1400, "messages may only hold node segments")
		}
		str := func(keys ...string) string {
			for _, k := range keys {
				v := bytes.TrimSpace(n.Data[k])
				if len(v) == 0 || string(v) == "null" {
					continue
				}
				var s string
				if json.Unmarshal(v, &s) == nil {
					return s
				}
				return string(v)
			}
			return ""
		}
		node := Node{ID: str("id"), Name: str("name", "nickname"), UserID: str("uin", "user_id")}
		if c := n.Data["content"]; len(c) > 0 {
			if err := json.Unmarshal(c, &node.Content); err != nil {
				return failResult(1400, "node content: "+err.Error())
			}
		}
		if node.ID == "" && len(node.Content) == 0 {
			return failResult(1400, "a custom node needs content")
		}
		nodes = append(nodes, node)
	}
	s.mu.Lock()
	if s.offline {
		s.mu.Unlock()
		return failResult(RetcodeFailed, "account offline")
	}
	s.nforward++
	fid := "fwd-" + strconv.FormatInt(s.nforward, 10)
	r := &Record{UserID: s.cfg.SelfID, Nickname: s.cfg.Nickname, Self: true,
		Message: onebot.Message{{Type: "forward", Data: map[string]string{"id": fid}}}}
	sent := Sent{Action: action, Message: r.Message, Forward: nodes}
	if fail, ok := s.sendLocked(isGroup, p, r, sent); !ok {
		s.mu.Unlock()
		return fail
	}
	s.mu.Unlock()
	return okResult(map[string]any{"message_id": r.ID, "forward_id": fid})
}

// sendLocked delivers the bot's message r to the chat the action's
// parameters name (group_id for a group action, else user_id): it stores r
// and records sent with the message's id and time. It answers like the
// implementations when the target is missing or the bot is no longer a
// member of the group, and then changes nothing. s.mu is held.
func (s *Server) sendLocked(isGroup bool, p params, r *Record, sent Sent) (result, bool) {
	if isGroup {
		gid, ok := p.int64("group_id")
		if !ok {
			return failResult(1400, "group_id required"), false
		}
		if s.kicked[gid] {
			return failResult(RetcodeFailed, "not a member of the group"), false
		}
		r.GroupID, sent.GroupID = gid, gid
	} else {
		uid, ok := p.int64("user_id")
		if !ok {
			return failResult(1400, "user_id required"), false
		}
		r.PeerID, sent.UserID = uid, uid
	}
	s.storeLocked(r)
	sent.MessageID, sent.Time = r.ID, r.Time
	s.sent = append(s.sent, sent)
	s.notifyLocked()
	return result{}, true
}

// messageEvent renders a record as a message event (or a message_sent
// event for the bot's own messages); history items and get_msg data use
// the same shape.
func (s *Server) messageEvent(r Record) map[string]any {
	var msg any = r.Message
	switch {
	case s.cfg.Format == onebot.FormatString:
		msg = onebot.RenderCQ(r.Message)
	case r.Message == nil:
		msg = onebot.Message{}
	}
	sender := map[string]any{"user_id": r.UserID, "nickname": r.Nickname, "sex": "unknown", "age": 0}
	ev := map[string]any{
		"time": r.Time.Unix(), "self_id": s.cfg.SelfID, "post_type": "message",
		"message_id": r.ID, "real_id": r.ID, "message_seq": r.Seq, "user_id": r.UserID,
		"message": msg, "raw_message": onebot.RenderCQ(r.Message), "font": 0,
		"message_format": string(s.cfg.Format), "sender": sender,
	}
	if r.Self {
		ev["post_type"] = "message_sent"
	}
	if r.GroupID != 0 {
		ev["message_type"], ev["sub_type"], ev["group_id"] = "group", "normal", r.GroupID
		sender["card"], sender["role"], sender["area"], sender["title"] = r.Card, cmpOr(r.Role, "member"), "", ""
		if r.Level != "" {
			sender["level"] = r.Level
		}
	} else {
		ev["message_type"], ev["sub_type"] = "private", "friend"
		ev["target_id"] = r.PeerID
	}
	return ev
}

func (s *Server) metaEvent(typ string, extra map[string]any) map[string]any {
	ev := map[string]any{"time": s.clk.Now().Unix(), "self_id": s.cfg.SelfID, "post_type": "meta_event", "meta_event_type": typ}
	maps.Copy(ev, extra)
	return ev
}

// Heartbeat pushes a heartbeat meta event with the account status
// (online unless SetOffline(true), good) and the configured interval.
func (s *Server) Heartbeat(ctx context.Context) error {
	s.mu.Lock()
	online := !s.offline
	s.mu.Unlock()
	return s.PushEvent(ctx, s.metaEvent("heartbeat", map[string]any{
		"status":   map[string]any{"online": online, "good": true, "app_initialized": true, "app_enabled": true, "app_good": true},
		"interval": s.cfg.HeartbeatInterval.Milliseconds(),
	}))
}

// Incoming is a message a user posts on the fake platform.
type Incoming struct {
	// GroupID is the group; 0 makes a private message to the bot.
	GroupID int64
	// UserID is the sender.
	UserID int64
	// Nickname is the sender's nickname (default "user <id>").
	Nickname string
	// Card is the sender's group card ("" = none).
	Card string
	// Role is owner, admin or member (default member in groups).
	Role string
	// Level is the member level as text ("" = not reported).
	Level string
	// Message is the message content.
	Message onebot.Message
	// Time is the send time (zero = the clock's now).
	Time time.Time
	// Lost stores the message without pushing it (for backfill tests).
	Lost bool
}

// EmitMessage stores a user's message (assigning id and seq) and pushes it
// to the adapter, unless in.Lost, the fake is down or losing pushes. It
// returns the stored record and the HTTP POST error, if any.
func (s *Server) EmitMessage(ctx context.Context, in Incoming) (Record, error) {
	if in.UserID == 0 {
		return Record{}, errors.New("onebottest: EmitMessage needs a UserID")
	}
	r := &Record{
		GroupID: in.GroupID, UserID: in.UserID, Nickname: cmpOr(in.Nickname, "user "+strconv.FormatInt(in.UserID, 10)),
		Card: in.Card, Role: in.Role, Level: in.Level, Message: slices.Clone(in.Message), Time: in.Time,
	}
	s.mu.Lock()
	if in.GroupID != 0 {
		r.Role = cmpOr(r.Role, "member")
		g := s.groupLocked(in.GroupID)
		if _, set := g.members[in.UserID]; !set {
			g.members[in.UserID] = Member{UserID: in.UserID, Nickname: r.Nickname, Card: r.Card, Role: r.Role, Level: r.Level}
		}
	} else {
		r.PeerID = in.UserID
		if _, ok := s.friends[in.UserID]; !ok {
			s.friends[in.UserID] = r.Nickname
		}
	}
	s.storeLocked(r)
	rec := *r
	s.mu.Unlock()
	if in.Lost {
		return rec, nil
	}
	return rec, s.PushEvent(ctx, s.messageEvent(rec))
}

// Recall marks a stored message recalled and pushes the group_recall or
// friend_recall notice (operator: its sender).
func (s *Server) Recall(ctx context.Context, id int32) error {
	s.mu.Lock()
	r, ok := s.msgs[id]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("onebottest: no message %d", id)
	}
	r.Recalled = true
	rec := *r
	s.notifyLocked()
	s.mu.Unlock()
	ev := map[string]any{"time": s.clk.Now().Unix(), "self_id": s.cfg.SelfID, "post_type": "notice", "message_id": rec.ID, "user_id": rec.UserID}
	if rec.GroupID != 0 {
		ev["notice_type"], ev["group_id"], ev["operator_id"] = "group_recall", rec.GroupID, rec.UserID
	} else {
		ev["notice_type"] = "friend_recall"
	}
	return s.PushEvent(ctx, ev)
}

// Emit implements chantest.PlatformDriver: it posts in as a user message
// (reply segment for QuoteID, at segment of the bot for MentionBot, then
// the text) and returns its message id.
func (s *Server) Emit(ctx context.Context, in chantest.Inbound) (string, error) {
	uid, err := strconv.ParseInt(in.From.ID, 10, 64)
	if err != nil {
		return "", fmt.Errorf("onebottest: sender id %q is not a QQ number", in.From.ID)
	}
	inc := Incoming{UserID: uid, Nickname: in.From.Name, Role: string(in.From.Role)}
	if in.From.LevelKnown {
		inc.Level = strconv.Itoa(in.From.Level)
	}
	switch in.Chat.Kind {
	case channel.Group:
		if inc.GroupID, err = strconv.ParseInt(in.Chat.ID, 10, 64); err != nil {
			return "", fmt.Errorf("onebottest: group id %q is not a number", in.Chat.ID)
		}
	case channel.Private:
		if in.Chat.ID != in.From.ID {
			return "", fmt.Errorf("onebottest: a private chat's id (%s) must be the sender's (%s)", in.Chat.ID, in.From.ID)
		}
	default:
		return "", fmt.Errorf("onebottest: chat kind %q", in.Chat.Kind)
	}
	if in.QuoteID != "" {
		inc.Message = append(inc.Message, onebot.Segment{Type: "reply", Data: map[string]string{"id": in.QuoteID}})
	}
	if in.MentionBot {
		inc.Message = append(inc.Message, onebot.Segment{Type: "at", Data: map[string]string{"qq": s.BotID()}})
	}
	if in.Text != "" {
		inc.Message = append(inc.Message, onebot.TextSegment(in.Text))
	}
	rec, err := s.EmitMessage(ctx, inc)
	if rec.ID == 0 {
		return "", err
	}
	return strconv.FormatInt(int64(rec.ID), 10), err
}

// Received implements chantest.PlatformDriver: the bot's sends as
// delivered messages (text = the text segments, ReplyTo = the reply
// segment, Mentions = the at segments).
func (s *Server) Received(context.Context) ([]chantest.Delivered, error) {
	sent := s.Sent()
	out := make([]chantest.Delivered, 0, len(sent))
	for _, m := range sent {
		d := chantest.Delivered{Text: m.Message.PlainText(), MessageID: strconv.FormatInt(int64(m.MessageID), 10)}
		if m.GroupID != 0 {
			d.Chat = channel.Chat{Kind: channel.Group, ID: strconv.FormatInt(m.GroupID, 10)}
		} else {
			d.Chat = channel.Chat{Kind: channel.Private, ID: strconv.FormatInt(m.UserID, 10)}
		}
		for _, seg := range m.Message {
			switch seg.Type {
			case "reply":
				if d.ReplyTo == "" {
					d.ReplyTo = seg.Data["id"]
				}
			case "at":
				d.Mentions = append(d.Mentions, seg.Data["qq"])
			}
		}
		out = append(out, d)
	}
	return out, nil
}

var _ chantest.PlatformDriver = (*Server)(nil)
