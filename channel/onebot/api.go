package onebot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/personakit/persona/channel"
)

// APIError is a OneBot API call that the implementation answered with a
// failure: status "failed" with a retcode, or (ModeHTTP) a non-200 HTTP
// status. Send and the capabilities wrap it together with the channel
// classification, so both errors.As(err, &apiErr) and channel.Classify(err)
// work.
type APIError struct {
	// Action is the API action, e.g. "send_group_msg".
	Action string
	// Status is the envelope status ("failed"), or "" for an HTTP failure.
	Status string
	// Retcode is the OneBot retcode (HTTP statuses are mapped as the
	// WebSocket transport does: 400 → 1400, 401 → 1401, 403 → 1403,
	// 404 → 1404).
	Retcode int64
	// HTTPStatus is the HTTP status of a ModeHTTP call (0 over WebSocket).
	HTTPStatus int
	// Msg is the implementation's msg, wording or message text (for logs
	// only; classification never reads it).
	Msg string
}

// Error describes the failed call with its retcode and the
// implementation's message.
func (e *APIError) Error() string {
	s := fmt.Sprintf("onebot: %s failed: retcode %d", e.Action, e.Retcode)
	if e.HTTPStatus != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.HTTPStatus)
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// definitiveRetcode reports whether a retcode means the same call can never
// succeed: bad parameters (1400), unknown action (1404), and the
// configuration failures 1401/1403 and 406-style content errors.
func definitiveRetcode(rc int64) bool {
	switch rc {
	case 1400, 1401, 1403, 1404, 1406:
		return true
	}
	return false
}

// classify wraps an APIError with the channel classification: definitive
// retcodes become a *channel.RejectedError; everything else stays a plain
// (retryable) error.
func classify(e *APIError) error {
	if definitiveRetcode(e.Retcode) {
		return fmt.Errorf("%w: %w", e, &channel.RejectedError{Code: strconv.FormatInt(e.Retcode, 10), Reason: rejectReason(e)})
	}
	return e
}

func rejectReason(e *APIError) string {
	if e.Msg != "" {
		return e.Action + ": " + e.Msg
	}
	switch e.Retcode {
	case 1400:
		return e.Action + ": bad request"
	case 1404:
		return e.Action + ": unsupported action"
	case 1401, 1403:
		return e.Action + ": access token refused"
	}
	return e.Action + ": failed"
}

// Call makes one OneBot API call over the current transport with the
// default call timeout (10 s) and returns its data. A failed status comes
// back as an *APIError, classified as channel.ErrRejected for retcodes
// 1400/1404 (and 1401/1403); no connection is channel.ErrOffline; a missing
// response is ErrTimeout or ErrConnectionLost. Use it for actions the
// adapter does not wrap, e.g. set_group_ban.
func (c *Channel) Call(ctx context.Context, action string, params any) (json.RawMessage, error) {
	return c.call(ctx, action, params, c.cfg.CallTimeout)
}

func (c *Channel) call(ctx context.Context, action string, params any, timeout time.Duration) (json.RawMessage, error) {
	var (
		r   response
		err error
	)
	if c.cfg.Mode == ModeHTTP {
		r, err = c.httpCall(ctx, action, params, timeout)
	} else {
		r, err = c.wsCall(ctx, action, params, timeout)
	}
	if err != nil {
		return nil, err
	}
	switch r.Status {
	case "ok", "async":
		return r.Data, nil
	case "":
		if r.Retcode.OK && (r.Retcode.V == 0 || r.Retcode.V == 1) {
			return r.Data, nil
		}
	}
	rc := r.Retcode.V
	if !r.Retcode.OK {
		rc = -1
	}
	e := &APIError{Action: action, Status: r.Status, Retcode: rc, Msg: firstNonEmpty(string(r.Wording), string(r.Msg), string(r.Message))}
	c.log.Warn("api_failed", "action", action, "retcode", rc, "msg", e.Msg)
	return nil, classify(e)
}

// parseID parses a OneBot id given as text: a QQ number (group or user
// id: a positive 64-bit integer) or, when message is set, a message id (a
// nonzero 32-bit integer). Anything else is a definitive rejection.
func parseID(kind, s string, message bool) (int64, error) {
	if _, ok := idText(s, message); !ok {
		want := "a positive QQ number"
		if message {
			want = "a nonzero 32-bit OneBot message id"
		}
		return 0, &channel.RejectedError{Code: "invalid_id", Reason: fmt.Sprintf("%s %q is not %s", kind, s, want)}
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n, nil
}

// chatTarget returns the action suffix and id parameter of a chat.
func chatTarget(chat channel.Chat) (kind string, param string, id int64, err error) {
	switch chat.Kind {
	case channel.Group:
		id, err = parseID("group id", chat.ID, false)
		return "group", "group_id", id, err
	case channel.Private:
		id, err = parseID("user id", chat.ID, false)
		return "private", "user_id", id, err
	}
	return "", "", 0, &channel.RejectedError{Code: "invalid_chat", Reason: fmt.Sprintf("chat kind %q is neither group nor private", chat.Kind)}
}

func (c *Channel) offlineErr(op string) error {
	c.mu.Lock()
	up, online := c.up, c.online
	c.mu.Unlock()
	why := "not connected"
	if up && !online {
		why = "account offline"
	}
	return fmt.Errorf("onebot: %s: %w (%s)", op, channel.ErrOffline, why)
}

// Send delivers one message with send_group_msg or send_private_msg:
// ReplyTo becomes a leading reply segment, Mentions at segments, Media
// image/record/video/file segments, in the configured message format. It
// returns the platform message id, or an error classified for the pipeline:
// channel.ErrOffline (fail fast: not connected, or the account is offline
// or not good), channel.ErrKicked (the group is absent from the bot's group
// list, refreshed at most once per GroupListTTL), *channel.MutedError (a
// group_ban of the bot is in force), *channel.RejectedError (retcode
// 1400/1404, or an invalid chat or message), or a plain retryable error
// (other retcodes, ErrTimeout, ErrConnectionLost). Classification uses
// retcodes and state, never message text.
func (c *Channel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	kind, param, id, err := chatTarget(out.Chat)
	if err != nil {
		return channel.Receipt{}, err
	}
	msg, err := OutgoingMessage(out)
	if err != nil {
		return channel.Receipt{}, &channel.RejectedError{Code: "invalid_message", Reason: err.Error()}
	}
	if !c.effectivelyOnline() {
		return channel.Receipt{}, c.offlineErr("send")
	}
	action := "send_" + kind + "_msg"
	params := map[string]any{param: id, "message": c.messageValue(msg)}
	data, err := c.call(ctx, action, params, c.cfg.CallTimeout)
	if err != nil {
		return channel.Receipt{}, c.classifySend(ctx, out.Chat, err)
	}
	var d struct {
		MessageID wireID `json:"message_id"`
	}
	_ = json.Unmarshal(data, &d)
	mid, err := d.MessageID.msg("message_id")
	if err != nil {
		c.log.Warn("invalid_receipt", "action", action, "err", err)
		return channel.Receipt{}, fmt.Errorf("onebot: %s: the response has an invalid message_id: %w", action, err)
	}
	if mid == "" {
		return channel.Receipt{}, fmt.Errorf("onebot: %s: the response has no message_id", action)
	}
	now := c.clk.Now()
	segs, _ := toSegments(msg, c.self())
	c.quotes.put(out.Chat, channel.Quoted{
		MessageID: mid,
		Sender:    channel.Sender{ID: c.self()},
		Text:      out.Text,
		Segments:  segs,
		FromBot:   true,
	})
	return channel.Receipt{MessageIDs: []string{mid}, Time: now}, nil
}

// messageValue renders a message in the configured format.
func (c *Channel) messageValue(m Message) any {
	if c.cfg.MessageFormat == FormatString {
		return RenderCQ(m)
	}
	return m
}

// classifySend refines a failed send to a group whose retcode is not
// already definitive: muted while a ban of the bot is in force, kicked when
// the group is absent from the group list.
func (c *Channel) classifySend(ctx context.Context, chat channel.Chat, err error) error {
	var apiErr *APIError
	if !errors.As(err, &apiErr) || chat.Kind != channel.Group || definitiveRetcode(apiErr.Retcode) {
		return err
	}
	now := c.clk.Now()
	c.mu.Lock()
	until, muted := c.muted[chat.ID]
	if muted && !until.IsZero() && !until.After(now) {
		delete(c.muted, chat.ID)
		muted = false
	}
	c.mu.Unlock()
	if muted {
		return fmt.Errorf("%w: %w", apiErr, &channel.MutedError{Until: until})
	}
	if in, known := c.inGroup(ctx, chat.ID); known && !in {
		return fmt.Errorf("%w: %w (group %s is not in the bot's group list)", apiErr, channel.ErrKicked, chat.ID)
	}
	return err
}

// inGroup reports whether the bot is in a group according to the cached
// group list, refreshing the cache when it is older than GroupListTTL.
// known is false when the list could not be fetched.
func (c *Channel) inGroup(ctx context.Context, gid string) (in, known bool) {
	now := c.clk.Now()
	c.mu.Lock()
	fresh := !c.groups.fetched.IsZero() && now.Sub(c.groups.fetched) < c.cfg.GroupListTTL
	left := c.groups.left[gid]
	c.mu.Unlock()
	if left {
		return false, true
	}
	if !fresh {
		if _, err := c.groupList(ctx); err != nil {
			c.log.Warn("group_list_failed", "err", err)
			return false, false
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups.ids[gid] && !c.groups.left[gid], true
}

// groupList fetches get_group_list and refreshes the cache.
func (c *Channel) groupList(ctx context.Context) ([]string, error) {
	data, err := c.call(ctx, "get_group_list", nil, c.cfg.CallTimeout)
	if err != nil {
		return nil, err
	}
	var list []struct {
		GroupID wireID `json:"group_id"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("onebot: get_group_list: %w", err)
	}
	ids := make([]string, 0, len(list))
	set := make(map[string]bool, len(list))
	for _, g := range list {
		gid, err := g.GroupID.qq("group_id", false)
		if err != nil {
			c.log.Warn("invalid_list_item", "action", "get_group_list", "err", err)
			continue
		}
		if gid != "" && !set[gid] {
			set[gid] = true
			ids = append(ids, gid)
		}
	}
	c.mu.Lock()
	c.groups.ids = set
	c.groups.fetched = c.clk.Now()
	for gid := range c.groups.left {
		if set[gid] {
			delete(c.groups.left, gid)
		}
	}
	c.mu.Unlock()
	return ids, nil
}

// ListChats returns the bot's groups (get_group_list) followed by its
// friends (get_friend_list) as private chats, excluding the bot itself. An
// implementation without get_friend_list (retcode 1404) yields groups only.
func (c *Channel) ListChats(ctx context.Context) ([]channel.Chat, error) {
	ids, err := c.groupList(ctx)
	if err != nil {
		return nil, err
	}
	chats := make([]channel.Chat, 0, len(ids))
	for _, id := range ids {
		chats = append(chats, channel.Chat{Kind: channel.Group, ID: id})
	}
	data, err := c.call(ctx, "get_friend_list", nil, c.cfg.CallTimeout)
	if err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.Retcode == 1404 {
			return chats, nil
		}
		return nil, err
	}
	var friends []struct {
		UserID wireID `json:"user_id"`
	}
	if err := json.Unmarshal(data, &friends); err != nil {
		return nil, fmt.Errorf("onebot: get_friend_list: %w", err)
	}
	self := c.self()
	seen := map[string]bool{}
	for _, f := range friends {
		id, err := f.UserID.qq("user_id", false)
		if err != nil {
			c.log.Warn("invalid_list_item", "action", "get_friend_list", "err", err)
			continue
		}
		if id == "" || id == self || seen[id] {
			continue
		}
		seen[id] = true
		chats = append(chats, channel.Chat{Kind: channel.Private, ID: id})
	}
	return chats, nil
}

// LookupMember returns a group member (get_group_member_info, no_cache
// false): Name is the card, else the nickname; Level is known when the
// implementation reports one.
func (c *Channel) LookupMember(ctx context.Context, chat channel.Chat, userID string) (channel.Member, error) {
	if chat.Kind != channel.Group {
		return channel.Member{}, &channel.RejectedError{Code: "invalid_chat", Reason: "member lookup needs a group chat"}
	}
	gid, err := parseID("group id", chat.ID, false)
	if err != nil {
		return channel.Member{}, err
	}
	uid, err := parseID("user id", userID, false)
	if err != nil {
		return channel.Member{}, err
	}
	data, err := c.call(ctx, "get_group_member_info", map[string]any{"group_id": gid, "user_id": uid, "no_cache": false}, c.cfg.CallTimeout)
	if err != nil {
		return channel.Member{}, err
	}
	var m struct {
		UserID   wireID        `json:"user_id"`
		Nickname lenientString `json:"nickname"`
		Card     lenientString `json:"card"`
		Role     lenientString `json:"role"`
		Level    optInt        `json:"level"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return channel.Member{}, fmt.Errorf("onebot: get_group_member_info: %w", err)
	}
	got, err := m.UserID.qq("user_id", false)
	if err != nil {
		return channel.Member{}, fmt.Errorf("onebot: get_group_member_info: %w", err)
	}
	out := channel.Member{UserID: firstNonEmpty(got, userID), Name: string(m.Card), Role: toRole(string(m.Role))}
	if out.Name == "" {
		out.Name = string(m.Nickname)
	}
	if m.Level.OK {
		out.Level, out.LevelKnown = int(m.Level.V), true
	}
	return out, nil
}

// Recall deletes a message (delete_msg). OneBot message ids are unique per
// account, so chat is not sent.
func (c *Channel) Recall(ctx context.Context, chat channel.Chat, messageID string) error {
	id, err := parseID("message id", messageID, true)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, "delete_msg", map[string]any{"message_id": id}, c.cfg.CallTimeout)
	return err
}

// AnswerFriendRequest accepts (accept true) or refuses a friend request
// (channel.RequestResponder): it calls set_friend_add_request with the
// notice's flag and approve = accept, and no remark (an accepted friend
// keeps the name they chose). n must be a channel.NoticeFriendRequest
// notice with a flag, as the adapter delivers them; otherwise it returns a
// *channel.RejectedError without calling. A failed answer (the flag is
// unknown or expired, the request was already answered) comes back as an
// *APIError, classified like every call (see Call): no connection is
// channel.ErrOffline, a missing response ErrTimeout or ErrConnectionLost.
func (c *Channel) AnswerFriendRequest(ctx context.Context, n channel.Notice, accept bool) error {
	switch {
	case n.Type != channel.NoticeFriendRequest:
		return &channel.RejectedError{Code: "invalid_notice",
			Reason: fmt.Sprintf("notice type %q is not %q", n.Type, channel.NoticeFriendRequest)}
	case n.Flag == "":
		return &channel.RejectedError{Code: "invalid_flag", Reason: "the friend request notice has no flag"}
	}
	_, err := c.call(ctx, "set_friend_add_request", map[string]any{"flag": n.Flag, "approve": accept}, c.cfg.CallTimeout)
	if err != nil {
		return fmt.Errorf("onebot: answer the friend request of %s: %w", cmp.Or(n.UserID, "an unknown user"), err)
	}
	c.log.Info("friend_request_answered", "user_id", n.UserID, "accept", accept)
	return nil
}

// GetMessage fetches one message by id (get_msg) and normalises it (Source
// backfill). Implementations that omit group_id from get_msg data make it
// fail for group messages.
func (c *Channel) GetMessage(ctx context.Context, messageID string) (channel.Event, error) {
	id, err := parseID("message id", messageID, true)
	if err != nil {
		return channel.Event{}, err
	}
	data, err := c.call(ctx, "get_msg", map[string]any{"message_id": id}, c.cfg.CallTimeout)
	if err != nil {
		return channel.Event{}, err
	}
	var w wireEvent
	if err := json.Unmarshal(data, &w); err != nil {
		return channel.Event{}, fmt.Errorf("onebot: get_msg: %w", err)
	}
	if w.MessageType == "group" && !w.GroupID.present() {
		return channel.Event{}, fmt.Errorf("onebot: get_msg %s: the implementation gave no group_id", messageID)
	}
	if !w.MessageID.present() {
		w.MessageID = wireID(messageID)
	}
	ev, err := c.messageEvent(&w, data, channel.SourceBackfill)
	if err != nil {
		return channel.Event{}, fmt.Errorf("onebot: get_msg %s: %w", messageID, err)
	}
	return ev, nil
}

// SendForward sends a merged-forward card (send_group_forward_msg or
// send_private_forward_msg) of custom nodes. Each node carries both the
// go-cqhttp keys (name, uin) and the v11 keys (nickname, user_id); a node
// without UserID is attributed to the bot.
func (c *Channel) SendForward(ctx context.Context, chat channel.Chat, nodes []channel.ForwardNode) (channel.Receipt, error) {
	kind, param, id, err := chatTarget(chat)
	if err != nil {
		return channel.Receipt{}, err
	}
	if len(nodes) == 0 {
		return channel.Receipt{}, &channel.RejectedError{Code: "invalid_message", Reason: "a forward card needs at least one node"}
	}
	if !c.effectivelyOnline() {
		return channel.Receipt{}, c.offlineErr("send forward")
	}
	c.mu.Lock()
	self, nick := c.selfID, c.nickname
	c.mu.Unlock()
	msgs := make([]map[string]any, 0, len(nodes))
	for _, n := range nodes {
		uid, name := firstNonEmpty(n.UserID, self), n.Name
		if name == "" {
			name = nick
		}
		msgs = append(msgs, map[string]any{"type": "node", "data": map[string]any{
			"name": name, "uin": uid, "nickname": name, "user_id": uid,
			"content": Message{TextSegment(n.Text)},
		}})
	}
	action := "send_" + kind + "_forward_msg"
	data, err := c.call(ctx, action, map[string]any{param: id, "messages": msgs}, c.cfg.CallTimeout)
	if err != nil {
		return channel.Receipt{}, c.classifySend(ctx, chat, err)
	}
	var d struct {
		MessageID wireID `json:"message_id"`
		ForwardID string `json:"forward_id"`
	}
	_ = json.Unmarshal(data, &d)
	mid, err := d.MessageID.msg("message_id")
	if err != nil {
		c.log.Warn("invalid_receipt", "action", action, "err", err)
		return channel.Receipt{}, fmt.Errorf("onebot: %s: the response has an invalid message_id: %w", action, err)
	}
	mid = firstNonEmpty(mid, d.ForwardID)
	if mid == "" {
		return channel.Receipt{}, fmt.Errorf("onebot: %s: the response has no message_id", action)
	}
	return channel.Receipt{MessageIDs: []string{mid}, Time: c.clk.Now()}, nil
}

// Typing shows the typing indicator in a private chat with NapCat's
// set_input_status (event_type 1). Group chats have no indicator in QQ, and
// implementations without the action (retcode 1404) are remembered; both
// return nil without a call.
func (c *Channel) Typing(ctx context.Context, chat channel.Chat) error {
	if chat.Kind != channel.Private {
		return nil
	}
	c.mu.Lock()
	unsupported := c.noTyping
	c.mu.Unlock()
	if unsupported {
		return nil
	}
	uid, err := parseID("user id", chat.ID, false)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, "set_input_status", map[string]any{"user_id": uid, "event_type": 1}, c.cfg.CallTimeout)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Retcode == 1404 {
		c.mu.Lock()
		c.noTyping = true
		c.mu.Unlock()
		c.log.Info("typing_unsupported")
		return nil
	}
	return err
}

// FetchHistory returns one page of a chat's history, newest first
// (get_group_msg_history / get_friend_msg_history with the configured
// dialect's parameters, 15 s per call). The cursor is the page boundary:
// the oldest message's message_seq (NapCat, go-cqhttp) or message_id
// (Lagrange); the next page holds only older messages. go-cqhttp's fixed
// 19-message pages are fetched repeatedly to fill Limit. Events have Source
// backfill; the bot's own messages come back as KindSelf.
func (c *Channel) FetchHistory(ctx context.Context, q channel.HistoryQuery) (channel.HistoryPage, error) {
	kind, param, id, err := chatTarget(q.Chat)
	if err != nil {
		return channel.HistoryPage{}, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	action := "get_" + map[string]string{"group": "group", "private": "friend"}[kind] + "_msg_history"
	var (
		out    []histItem
		seen   = map[string]bool{}
		cursor = q.Cursor
	)
	for round := 0; round < 16 && len(out) < limit; round++ {
		params := map[string]any{param: id}
		want := limit - len(out) + 1 // the anchor is included
		anchor := int64(0)
		if cursor != "" {
			anchor, err = strconv.ParseInt(cursor, 10, 64)
			if err != nil {
				return channel.HistoryPage{}, &channel.RejectedError{Code: "invalid_cursor", Reason: fmt.Sprintf("history cursor %q", cursor)}
			}
		}
		switch c.cfg.HistoryDialect {
		case DialectGoCQHTTP:
			if cursor != "" {
				params["message_seq"] = anchor
			}
		case DialectLagrange:
			if cursor != "" {
				params["message_id"] = anchor
			}
			params["count"] = want
		default:
			params["message_seq"] = anchor
			params["count"] = want
			params["reverseOrder"] = false
			params["reverse_order"] = false
		}
		data, err := c.call(ctx, action, params, c.cfg.HistoryTimeout)
		if err != nil {
			return channel.HistoryPage{}, err
		}
		items, err := c.historyItems(data, q.Chat)
		if err != nil {
			return channel.HistoryPage{}, fmt.Errorf("onebot: %s: %w", action, err)
		}
		added := 0
		for _, it := range items {
			if cursor != "" && it.before(cursor, c.cfg.HistoryDialect) {
				continue // the anchor itself or newer
			}
			if seen[it.ev.MessageID] {
				continue
			}
			seen[it.ev.MessageID] = true
			out = append(out, it)
			added++
		}
		if added == 0 {
			cursor = ""
			break
		}
		sortNewestFirst(out)
		cursor = out[len(out)-1].cursor(c.cfg.HistoryDialect)
		if c.cfg.HistoryDialect != DialectGoCQHTTP {
			break // one call fills the page
		}
	}
	sortNewestFirst(out)
	if len(out) > limit {
		out = out[:limit]
	}
	page := channel.HistoryPage{}
	for _, it := range out {
		page.Events = append(page.Events, it.ev)
	}
	if len(out) > 0 && cursor != "" {
		page.Next = out[len(out)-1].cursor(c.cfg.HistoryDialect)
	}
	return page, nil
}

// histItem is one history message with what its cursor needs.
type histItem struct {
	ev  channel.Event
	seq int64
	pos int // position in the response (chronological)
}

func (it histItem) cursor(d Dialect) string {
	if d != DialectLagrange && it.seq > 0 {
		return strconv.FormatInt(it.seq, 10)
	}
	return it.ev.MessageID
}

// before reports whether an item is at or after the anchor cursor (so it
// belongs to a newer page).
func (it histItem) before(cursor string, d Dialect) bool {
	if d != DialectLagrange && it.seq > 0 {
		anchor, _ := strconv.ParseInt(cursor, 10, 64)
		return it.seq >= anchor
	}
	return it.ev.MessageID == cursor
}

func sortNewestFirst(items []histItem) {
	slices.SortStableFunc(items, func(a, b histItem) int {
		switch {
		case a.seq > 0 && b.seq > 0 && a.seq != b.seq:
			return cmp.Compare(b.seq, a.seq)
		case !a.ev.Time.Equal(b.ev.Time):
			return b.ev.Time.Compare(a.ev.Time)
		}
		return cmp.Compare(b.pos, a.pos)
	})
}

// historyItems decodes data.messages of a history response.
func (c *Channel) historyItems(data json.RawMessage, chat channel.Chat) ([]histItem, error) {
	var d struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if len(data) > 0 && string(data) != "null" {
		if err := json.Unmarshal(data, &d); err != nil {
			return nil, err
		}
	}
	items := make([]histItem, 0, len(d.Messages))
	for i, raw := range d.Messages {
		var w wireEvent
		if err := json.Unmarshal(raw, &w); err != nil {
			c.log.Warn("malformed_history_item", "chat", chat.String(), "err", err)
			continue
		}
		if w.PostType == "" {
			w.PostType = "message"
		}
		if chat.Kind == channel.Group && !w.GroupID.present() {
			w.GroupID = wireID(chat.ID)
			w.MessageType = "group"
		}
		if chat.Kind == channel.Private && w.MessageType == "" {
			w.MessageType = "private"
		}
		if chat.Kind == channel.Private && !w.TargetID.present() {
			w.TargetID = wireID(chat.ID)
		}
		ev, err := c.messageEvent(&w, raw, channel.SourceBackfill)
		if err != nil {
			c.log.Warn("invalid_history_item", "chat", chat.String(), "err", err)
			continue
		}
		if ev.Chat != chat {
			continue
		}
		it := histItem{ev: ev, pos: i}
		it.seq, _ = w.MessageSeq.seq("message_seq") // checked by messageEvent
		items = append(items, it)
	}
	return items, nil
}
