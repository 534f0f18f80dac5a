package channel

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ChatKind says whether a chat is a group or a private (one-to-one) chat.
type ChatKind string

// The two chat kinds.
const (
	Group   ChatKind = "group"
	Private ChatKind = "private"
)

// Valid reports whether k is Group or Private.
func (k ChatKind) Valid() bool { return k == Group || k == Private }

// Chat identifies a conversation on one platform. For a private chat, ID is
// the peer's user id.
type Chat struct {
	Kind ChatKind `json:"kind"`
	ID   string   `json:"id"`
}

// String renders the chat as "group:123" or "private:42".
func (c Chat) String() string { return string(c.Kind) + ":" + c.ID }

// EventKind tells a message from a notice and from the bot's own echo.
type EventKind string

// The event kinds.
const (
	// KindMessage is an ordinary chat message from someone else.
	KindMessage EventKind = "message"
	// KindNotice is a platform notice (recall, poke, join, friend add, edit).
	KindNotice EventKind = "notice"
	// KindSelf is the bot's own message echoed back by the platform.
	KindSelf EventKind = "self"
)

// Source says how an event reached the pipeline.
type Source string

// The event sources.
const (
	SourceLive     Source = "live"
	SourceBackfill Source = "backfill"
	SourceGap      Source = "gap"
	SourceJournal  Source = "journal"
	// SourceSchedule marks the event of a scheduled turn: made by the
	// pipeline when a schedule falls due, not received from the platform.
	SourceSchedule Source = "schedule"
)

// Role is the sender's role in a group.
type Role string

// The sender roles. An empty role means unknown (or a private chat).
const (
	RoleOwner  Role = "owner"
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
)

// Sender describes who sent a message.
type Sender struct {
	ID string `json:"id"`
	// Name is the group card if set, else the nickname.
	Name string `json:"name,omitempty"`
	Role Role   `json:"role,omitempty"`
	// Level is the platform member level; meaningful only when LevelKnown.
	Level      int  `json:"level,omitempty"`
	LevelKnown bool `json:"level_known,omitempty"`
	// IsBot is set when the platform flags the account as a bot.
	IsBot bool `json:"is_bot,omitempty"`
}

// SegmentType names the kind of a message segment.
type SegmentType string

// The segment types.
const (
	SegText    SegmentType = "text"
	SegMention SegmentType = "mention"
	SegQuote   SegmentType = "quote"
	SegImage   SegmentType = "image"
	SegVoice   SegmentType = "voice"
	SegVideo   SegmentType = "video"
	SegFile    SegmentType = "file"
	SegLink    SegmentType = "link"
	SegFace    SegmentType = "face"
	SegForward SegmentType = "forward"
	// SegSticker is a sticker: an image the platform marks as a sticker
	// (OneBot "mface" and images with sub_type 1, Telegram stickers). It
	// carries Media like an image, is shown to a model in a few words, and
	// is never on its own a reason to join a group conversation.
	SegSticker SegmentType = "sticker"
)

// IsMedia reports whether segments of this type carry a Media reference.
func (t SegmentType) IsMedia() bool {
	switch t {
	case SegImage, SegVoice, SegVideo, SegFile, SegSticker:
		return true
	}
	return false
}

// IsVisual reports whether segments of this type are pictures a vision
// model can look at (images and stickers).
func (t SegmentType) IsVisual() bool { return t == SegImage || t == SegSticker }

// Media is a reference to an image, voice clip, video or file.
type Media struct {
	URL    string `json:"url,omitempty"`
	FileID string `json:"file_id,omitempty"`
	Name   string `json:"name,omitempty"`
	MIME   string `json:"mime,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// SHA256 is filled once the content has been downloaded and cached.
	SHA256 string `json:"sha256,omitempty"`
	// Duration is the length of a voice clip or video in seconds, when the
	// platform says (0 = unknown).
	Duration int `json:"duration,omitempty"`
	// Description is a short description of an image or sticker, written
	// by a vision model once and stored with the message, so history shows
	// it as text instead of sending the picture again.
	Description string `json:"description,omitempty"`
	// Transcript is the text of a voice clip (speech to text), filled in
	// by the pipeline before the gates run; a single space when the clip
	// held no speech.
	Transcript string `json:"transcript,omitempty"`
	// Album groups media the sender sent together as one album (Telegram's
	// media_group_id): each arrives as its own message, and the pipeline
	// answers the album once, with the caption.
	Album string `json:"album,omitempty"`
}

// Segment is one ordered part of a message. Which fields are set depends on
// Type: Text for text (and the summary of a forward), UserID for mention,
// MessageID for quote and forward, Media for image/voice/video/file, URL (and
// optionally Text as title) for link, FaceID for face.
type Segment struct {
	Type      SegmentType `json:"type"`
	Text      string      `json:"text,omitempty"`
	UserID    string      `json:"user_id,omitempty"`
	MessageID string      `json:"message_id,omitempty"`
	Media     *Media      `json:"media,omitempty"`
	URL       string      `json:"url,omitempty"`
	FaceID    string      `json:"face_id,omitempty"`
}

// Text returns a text segment.
func Text(s string) Segment { return Segment{Type: SegText, Text: s} }

// Mention returns a mention segment for the given user id.
func Mention(userID string) Segment { return Segment{Type: SegMention, UserID: userID} }

// Quote returns a quote (reply) segment for the given message id.
func Quote(messageID string) Segment { return Segment{Type: SegQuote, MessageID: messageID} }

// Image returns an image segment.
func Image(m Media) Segment { return Segment{Type: SegImage, Media: &m} }

// Quoted is the resolved message a quote segment points at, when the adapter
// could resolve it.
type Quoted struct {
	MessageID string    `json:"message_id"`
	Sender    Sender    `json:"sender"`
	Text      string    `json:"text,omitempty"`
	Segments  []Segment `json:"segments,omitempty"`
	// FromBot is set when the quoted message was sent by this bot.
	FromBot bool `json:"from_bot,omitempty"`
}

// Notice types reported by adapters in Notice.Type.
const (
	NoticeGroupRecall   = "group_recall"
	NoticeFriendRecall  = "friend_recall"
	NoticePoke          = "poke"
	NoticeGroupIncrease = "group_increase"
	NoticeFriendAdd     = "friend_add"
	NoticeMessageEdited = "message_edited"
	// NoticeFriendRequest is someone asking to befriend the bot; Notice.Flag
	// is what [RequestResponder] answers it with.
	NoticeFriendRequest = "friend_request"
)

// Notice carries the details of a KindNotice event.
type Notice struct {
	Type     string `json:"type"`
	Operator string `json:"operator,omitempty"`
	// UserID is the user the notice is about (the poked, joined or added user).
	UserID          string `json:"user_id,omitempty"`
	TargetMessageID string `json:"target_message_id,omitempty"`
	// Flag is the platform's handle of a request (a friend request) that
	// the answer must quote.
	Flag string `json:"flag,omitempty"`
	// Comment is the text a requester attached to a request.
	Comment string `json:"comment,omitempty"`
}

// Event is one normalised platform event: a message, a notice or the bot's
// own echoed message.
type Event struct {
	// Platform is the adapter's platform id ("onebot", "telegram", ...).
	Platform string `json:"platform"`
	// Profile names the bot binding when one process hosts several; the
	// pipeline fills it in.
	Profile string `json:"profile,omitempty"`
	// BotID is the bot's own account id on the platform (the "self id").
	BotID string    `json:"bot_id"`
	Kind  EventKind `json:"kind"`
	Chat  Chat      `json:"chat"`
	// SessionKey is stamped by the pipeline (see SessionKey).
	SessionKey string `json:"session_key,omitempty"`
	// MessageID is the platform message id as a string (OneBot ids may be
	// negative).
	MessageID string `json:"message_id"`
	// Seq is the per-chat sequence number where the platform has one; 0 = none.
	Seq int64 `json:"seq,omitempty"`
	// Time is the platform send time, or the adapter's receive time.
	Time     time.Time `json:"time"`
	Sender   Sender    `json:"sender"`
	Segments []Segment `json:"segments,omitempty"`
	Quoted   *Quoted   `json:"quoted,omitempty"`
	// ToMe is the platform's own assertion that the bot was addressed.
	ToMe   bool    `json:"to_me,omitempty"`
	Notice *Notice `json:"notice,omitempty"`
	Source Source  `json:"source,omitempty"`
	// Raw is the original payload, for debugging only; never shown to a model.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// Text returns the plain text authored in this message: the text segments
// joined in order. Quoted and forwarded text is not included.
func (e *Event) Text() string {
	var b strings.Builder
	for _, s := range e.Segments {
		if s.Type == SegText {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

// TextAndSpeech returns what the sender said: the text segments and the
// transcripts of voice clips (once the pipeline made them), in order,
// separated by a space where a transcript meets text. It is the text that
// memory, search and the direct-trigger names read.
func (e *Event) TextAndSpeech() string {
	var b strings.Builder
	for _, s := range e.Segments {
		switch {
		case s.Type == SegText:
			b.WriteString(s.Text)
		case s.Type == SegVoice && s.Media != nil && strings.TrimSpace(s.Media.Transcript) != "":
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strings.TrimSpace(s.Media.Transcript))
			b.WriteByte(' ')
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// Has reports whether the event has at least one segment of type t.
func (e *Event) Has(t SegmentType) bool {
	for _, s := range e.Segments {
		if s.Type == t {
			return true
		}
	}
	return false
}

// Mentions reports whether the event mentions the given user id.
func (e *Event) Mentions(userID string) bool {
	for _, s := range e.Segments {
		if s.Type == SegMention && s.UserID == userID {
			return true
		}
	}
	return false
}

// QuoteID returns the id of the quoted message, or "".
func (e *Event) QuoteID() string {
	for _, s := range e.Segments {
		if s.Type == SegQuote {
			return s.MessageID
		}
	}
	if e.Quoted != nil {
		return e.Quoted.MessageID
	}
	return ""
}

// MediaOnly reports whether the message has media (image, video, file,
// voice) and no text.
func (e *Event) MediaOnly() bool {
	media := false
	for _, s := range e.Segments {
		switch {
		case s.Type == SegText && strings.TrimSpace(s.Text) != "":
			return false
		case s.Type.IsMedia():
			media = true
		}
	}
	return media
}

// ErrInvalidEvent is wrapped by every error Validate returns.
var ErrInvalidEvent = errors.New("channel: invalid event")

// Validate checks that the event has the fields every stage relies on. Events
// that fail are rejected by the pipeline, never stored half-formed.
func (e *Event) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidEvent, fmt.Sprintf(format, a...))
	}
	switch {
	case e.Platform == "":
		return bad("no platform")
	case strings.Contains(e.Platform, ":"):
		return bad("platform %q contains ':'", e.Platform)
	case e.BotID == "":
		return bad("no bot id")
	case strings.Contains(e.BotID, ":"):
		return bad("bot id %q contains ':'", e.BotID)
	case strings.Contains(e.Profile, ":"):
		return bad("profile %q contains ':'", e.Profile)
	case !e.Chat.Kind.Valid():
		return bad("chat kind %q is neither group nor private", e.Chat.Kind)
	case e.Chat.ID == "":
		return bad("no chat id")
	}
	switch e.Kind {
	case KindMessage, KindSelf:
		if e.MessageID == "" {
			return bad("no message id")
		}
	case KindNotice:
		if e.Notice == nil || e.Notice.Type == "" {
			return bad("notice without a type")
		}
	default:
		return bad("unknown event kind %q", e.Kind)
	}
	if e.Time.IsZero() {
		return bad("no time")
	}
	return nil
}

// Clone returns a deep copy of e: segments, media, the quoted message, the
// notice and the raw payload are copied, so the copy can be kept or
// changed without affecting e.
func (e Event) Clone() Event {
	c := e
	c.Segments = cloneSegments(e.Segments)
	if e.Quoted != nil {
		q := *e.Quoted
		q.Segments = cloneSegments(e.Quoted.Segments)
		c.Quoted = &q
	}
	if e.Notice != nil {
		n := *e.Notice
		c.Notice = &n
	}
	if e.Raw != nil {
		c.Raw = append(json.RawMessage(nil), e.Raw...)
	}
	return c
}

func cloneSegments(in []Segment) []Segment {
	if in == nil {
		return nil
	}
	out := make([]Segment, len(in))
	copy(out, in)
	for i := range out {
		if out[i].Media != nil {
			m := *out[i].Media
			out[i].Media = &m
		}
	}
	return out
}
