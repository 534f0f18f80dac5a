package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
)

// Identity of the simulated bot and channel.
const (
	botID    = "bot"
	platform = "groupsim"
)

// maxLine bounds one input line.
const maxLine = 1 << 20

// logLine is one input line as written.
type logLine struct {
	ID       string   `json:"id"`
	At       string   `json:"at"`
	Chat     string   `json:"chat"`
	From     string   `json:"from"`
	Name     string   `json:"name"`
	Text     string   `json:"text"`
	Mentions []string `json:"mentions"`
	ReplyTo  string   `json:"reply_to"`
	Role     string   `json:"role"`
	Level    *int     `json:"level"`
	Media    []string `json:"media"`
}

// message is one parsed input line and the event it becomes.
type message struct {
	line  int // 1-based line number in the input
	id    string
	self  bool // a line from the bot: history only
	event channel.Event
	// replyTo is the line's reply_to; unresolved is set when it names no
	// earlier line of the chat.
	replyTo    string
	unresolved bool
}

// readLog parses and validates the whole log. Blank lines are skipped.
func readLog(r io.Reader) ([]message, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	var out []message
	byID := map[string]message{}
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		m, err := parseLine(raw, byID)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		m.line = n
		out = append(out, m)
		byID[m.id] = m
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", n+1, maxLine)
		}
		return nil, fmt.Errorf("read input: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("the input has no messages")
	}
	return out, nil
}

// parseLine turns one JSON line into a message. earlier holds the messages
// of the lines before it, by id.
func parseLine(raw []byte, earlier map[string]message) (message, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var l logLine
	if err := dec.Decode(&l); err != nil {
		return message{}, fmt.Errorf("malformed JSON: %w", err)
	}
	if dec.More() {
		return message{}, errors.New("malformed JSON: more than one value on the line")
	}
	switch {
	case strings.TrimSpace(l.ID) == "":
		return message{}, errors.New(`missing "id"`)
	case earlier[l.ID].id != "":
		return message{}, fmt.Errorf("duplicate id %q (first on line %d)", l.ID, earlier[l.ID].line)
	case l.At == "":
		return message{}, fmt.Errorf("message %s: missing \"at\"", l.ID)
	case l.Chat == "":
		return message{}, fmt.Errorf("message %s: missing \"chat\"", l.ID)
	case strings.TrimSpace(l.From) == "":
		return message{}, fmt.Errorf("message %s: missing \"from\"", l.ID)
	case strings.TrimSpace(l.Text) == "" && len(l.Media) == 0:
		return message{}, fmt.Errorf("message %s: no \"text\" and no \"media\"", l.ID)
	}
	at, err := time.Parse(time.RFC3339Nano, l.At)
	if err != nil {
		return message{}, fmt.Errorf("message %s: \"at\" %q is not an RFC 3339 time such as 2026-11-30T10:00:07Z", l.ID, l.At)
	}
	chat, err := parseChat(l.Chat)
	if err != nil {
		return message{}, fmt.Errorf("message %s: %w", l.ID, err)
	}
	self := l.From == botID
	if chat.Kind == channel.Private && !self && l.From != chat.ID {
		return message{}, fmt.Errorf("message %s: in %s the sender must be %q (a private chat's id is the peer's user id), not %q",
			l.ID, l.Chat, chat.ID, l.From)
	}
	sender := channel.Sender{ID: l.From, Name: l.Name, IsBot: self}
	switch r := channel.Role(l.Role); r {
	case "", channel.RoleOwner, channel.RoleAdmin, channel.RoleMember:
		sender.Role = r
	default:
		return message{}, fmt.Errorf("message %s: unknown role %q (want owner, admin or member)", l.ID, l.Role)
	}
	if l.Level != nil {
		sender.Level, sender.LevelKnown = *l.Level, true
	}
	ev := channel.Event{Platform: platform, BotID: botID, Kind: channel.KindMessage, Chat: chat,
		MessageID: l.ID, Time: at, Sender: sender, Source: channel.SourceLive}
	if self {
		ev.Kind = channel.KindSelf
	}
	m := message{id: l.ID, self: self, replyTo: l.ReplyTo}
	if l.ReplyTo != "" {
		ev.Segments = append(ev.Segments, channel.Quote(l.ReplyTo))
		if q, ok := earlier[l.ReplyTo]; ok && q.event.Chat == chat {
			ev.Quoted = &channel.Quoted{MessageID: q.id, Sender: q.event.Sender, Text: q.event.Text(),
				FromBot: q.self}
		} else {
			m.unresolved = true
		}
	}
	for _, id := range l.Mentions {
		if strings.TrimSpace(id) == "" {
			return message{}, fmt.Errorf("message %s: empty id in \"mentions\"", l.ID)
		}
		ev.Segments = append(ev.Segments, channel.Mention(id))
		if id == botID {
			ev.ToMe = true
		}
	}
	if l.Text != "" {
		ev.Segments = append(ev.Segments, channel.Text(l.Text))
	}
	for i, kind := range l.Media {
		t := channel.SegmentType(kind)
		switch t {
		case channel.SegImage, channel.SegVideo, channel.SegVoice, channel.SegFile:
		default:
			return message{}, fmt.Errorf("message %s: unknown media %q (want image, video, voice or file)", l.ID, kind)
		}
		ev.Segments = append(ev.Segments, channel.Segment{Type: t,
			Media: &channel.Media{FileID: fmt.Sprintf("%s-%d", l.ID, i+1)}})
	}
	m.event = ev
	return m, nil
}

// parseChat parses "group:<id>" or "private:<id>".
func parseChat(s string) (channel.Chat, error) {
	kind, id, ok := strings.Cut(s, ":")
	if !ok || id == "" {
		return channel.Chat{}, fmt.Errorf("chat %q is not group:<id> or private:<id>", s)
	}
	switch c := channel.ChatKind(kind); c {
	case channel.Group, channel.Private:
		if strings.Contains(id, ":") {
			return channel.Chat{}, fmt.Errorf("chat %q: the id must not contain ':'", s)
		}
		return channel.Chat{Kind: c, ID: id}, nil
	}
	return channel.Chat{}, fmt.Errorf("unknown chat kind %q in %q (want group:<id> or private:<id>)", kind, s)
}
