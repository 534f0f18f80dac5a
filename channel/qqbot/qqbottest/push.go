package qqbottest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
)

// Intent bits of the events the fake pushes.
const (
	intentDirectMessage = 1 << 12
	intentGroupAndC2C   = 1 << 25
	intentPublicGuild   = 1 << 30
)

// Incoming is a user message the platform pushes to the bot.
type Incoming struct {
	// Chat is where it is posted: a group openid (GROUP_AT_MESSAGE_CREATE),
	// "channel:<channel_id>" (AT_MESSAGE_CREATE), or a private chat whose
	// ID is From.ID (C2C_MESSAGE_CREATE, or DIRECT_MESSAGE_CREATE with DM).
	Chat channel.Chat
	From channel.Sender
	Text string
	// MentionBot puts "<@!bot user id> " before the text of a channel
	// message. Group messages always mention the bot (the platform pushes
	// only those) and arrive with the @ stripped and its space left.
	MentionBot bool
	// QuoteID makes a channel message carry message_reference (the docs
	// define it for guild messages only; a group or C2C message with one
	// is refused).
	QuoteID     string
	Attachments []Attachment
	// DM sends a private message as a guild direct message (the user's
	// direct-message guild id is made up once and kept).
	DM bool
	// GuildID is the guild of a channel message (default DefaultGuildID).
	GuildID string
	// Roles are the member's role ids in a guild (default ["1"]).
	Roles []string
	// Time is the message time (zero = the clock's now).
	Time time.Time
}

// Attachment is a file of a message, as the platform describes it.
type Attachment struct {
	ContentType   string
	Filename      string
	URL           string
	Size          int64
	Width, Height int
}

// Pushed is what Push made.
type Pushed struct {
	// ID is the message id (d.id), EventID the payload id.
	ID, EventID string
	// Type is the event type (t).
	Type string
	// Seq is the s it was delivered with (0: queued for the first
	// session, or not subscribed).
	Seq  int64
	Time time.Time
}

// Push makes the platform push a user message and returns its ids. In
// webhook mode it is posted at once, after any queued events, and the
// delivery error (the bot's refusal) is returned with it.
func (s *Server) Push(ctx context.Context, in Incoming) (Pushed, error) {
	s.mu.Lock()
	p, ev, err := s.buildLocked(in)
	if err != nil {
		s.mu.Unlock()
		return Pushed{}, err
	}
	p.Seq = s.deliverLocked(ev)
	hook := s.hookURL != ""
	s.notifyLocked()
	s.mu.Unlock()
	if hook {
		return p, s.FlushWebhook(ctx)
	}
	return p, nil
}

// PushDispatch pushes any dispatch (t, d) as the platform would, with a
// fresh event id, and returns its s (webhook: its delivery error).
func (s *Server) PushDispatch(ctx context.Context, t string, d json.RawMessage) (int64, error) {
	s.mu.Lock()
	n := s.deliverLocked(gwEvent{id: t + ":" + randomHex(16), t: t, d: append(json.RawMessage(nil), d...)})
	hook := s.hookURL != ""
	s.mu.Unlock()
	if hook {
		return n, s.FlushWebhook(ctx)
	}
	return n, nil
}

var guildEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func (s *Server) buildLocked(in Incoming) (Pushed, gwEvent, error) {
	if in.From.ID == "" || in.Chat.ID == "" || !in.Chat.Kind.Valid() {
		return Pushed{}, gwEvent{}, errors.New("qqbottest: Incoming needs a chat and a sender id")
	}
	now := in.Time
	if now.IsZero() {
		now = s.clk.Now()
	}
	ts := now.Format(time.RFC3339)
	atts := make([]map[string]any, 0, len(in.Attachments))
	for _, a := range in.Attachments {
		atts = append(atts, map[string]any{"content_type": a.ContentType, "filename": a.Filename, "url": a.URL,
			"size": a.Size, "width": a.Width, "height": a.Height})
	}
	roles := in.Roles
	if roles == nil {
		roles = []string{"1"}
	}
	var (
		t, id, route, target string
		intent               int64
		d                    map[string]any
	)
	switch {
	case in.Chat.Kind == channel.Group && strings.HasPrefix(in.Chat.ID, "channel:"):
		target = strings.TrimPrefix(in.Chat.ID, "channel:")
		guild := in.GuildID
		if guild == "" {
			guild = DefaultGuildID
		}
		s.chanSeq[target]++
		n := s.chanSeq[target]
		id = "08" + randomHex(10) + strconv.FormatInt(s.nextID+1, 16)
		s.nextID++
		content := guildEscaper.Replace(in.Text)
		d = map[string]any{"id": id, "channel_id": target, "guild_id": guild, "timestamp": ts, "attachments": atts,
			"author": map[string]any{"id": in.From.ID, "username": in.From.Name, "bot": in.From.IsBot, "avatar": "http://thirdqq.qlogo.cn/0"},
			"member": map[string]any{"roles": roles, "joined_at": "2021-04-12T16:34:42+08:00"},
			"seq":    n, "seq_in_channel": strconv.FormatInt(n, 10)}
		if in.MentionBot {
			content = "<@!" + s.cfg.BotUserID + "> " + content
			d["mentions"] = []map[string]any{{"id": s.cfg.BotUserID, "username": s.cfg.BotName, "bot": true}}
		}
		d["content"] = content
		if in.QuoteID != "" {
			d["message_reference"] = map[string]string{"message_id": in.QuoteID}
		}
		t, route, intent = "AT_MESSAGE_CREATE", "channel", intentPublicGuild
	case in.Chat.Kind == channel.Group:
		if in.QuoteID != "" {
			return Pushed{}, gwEvent{}, errors.New("qqbottest: the docs define no quote for group messages")
		}
		target = in.Chat.ID
		id = s.newIDLocked("ROBOT1.0_grp" + randomHex(6) + "_")
		d = map[string]any{"id": id, "group_openid": target, "content": " " + in.Text, "timestamp": ts, "attachments": atts,
			"author": map[string]any{"id": in.From.ID, "member_openid": in.From.ID}}
		t, route, intent = "GROUP_AT_MESSAGE_CREATE", "group", intentGroupAndC2C
	default:
		if in.Chat.ID != in.From.ID {
			return Pushed{}, gwEvent{}, fmt.Errorf("qqbottest: a private chat's id (%q) must be the sender's (%q)", in.Chat.ID, in.From.ID)
		}
		if in.QuoteID != "" && !in.DM {
			return Pushed{}, gwEvent{}, errors.New("qqbottest: the docs define no quote for C2C messages")
		}
		if guild, ok := s.dmGuild[in.From.ID]; in.DM || ok {
			if !ok {
				guild = strconv.FormatInt(7000000000000+s.nextID, 10)
				s.nextID++
				s.dmGuild[in.From.ID] = guild
				s.dmUser[guild] = in.From.ID
			}
			target = guild
			id = "09" + randomHex(10) + strconv.FormatInt(s.nextID+1, 16)
			s.nextID++
			d = map[string]any{"id": id, "guild_id": guild, "channel_id": "dm" + guild, "src_guild_id": DefaultGuildID,
				"content": guildEscaper.Replace(in.Text), "timestamp": ts, "attachments": atts,
				"author": map[string]any{"id": in.From.ID, "username": in.From.Name, "bot": in.From.IsBot},
				"member": map[string]any{"joined_at": "2021-04-12T16:34:42+08:00"}}
			if in.QuoteID != "" {
				d["message_reference"] = map[string]string{"message_id": in.QuoteID}
			}
			t, route, intent = "DIRECT_MESSAGE_CREATE", "dm", intentDirectMessage
			break
		}
		target = in.Chat.ID
		id = s.newIDLocked("ROBOT1.0_c2c" + randomHex(6) + "_")
		d = map[string]any{"id": id, "content": in.Text, "timestamp": ts, "attachments": atts,
			"author": map[string]any{"id": in.From.ID, "user_openid": in.From.ID, "union_openid": in.From.ID}}
		t, route, intent = "C2C_MESSAGE_CREATE", "c2c", intentGroupAndC2C
	}
	s.inbound[id] = &inbound{id: id, route: route, target: target, at: now, seqs: map[int]bool{}}
	ev := gwEvent{id: t + ":" + randomHex(16), t: t, d: marshal(d), intent: intent}
	return Pushed{ID: id, EventID: ev.id, Type: t, Time: now}, ev, nil
}
