package telegramtest

import (
	"encoding/json"
	"strings"
	"unicode/utf16"
)

// The Bot API types the fake speaks, with their official JSON field names.
// Optional fields are omitted when zero, as the Bot API does.

// User is a Telegram user or bot.
type User struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name,omitempty"`
	Username  string `json:"username,omitempty"`
}

// Chat is a private chat, group, supergroup or channel.
type Chat struct {
	ID        int64  `json:"id"`
	Type      string `json:"type"`
	Title     string `json:"title,omitempty"`
	Username  string `json:"username,omitempty"`
	FirstName string `json:"first_name,omitempty"`
	LastName  string `json:"last_name,omitempty"`
}

// Chat types.
const (
	ChatPrivate    = "private"
	ChatGroup      = "group"
	ChatSupergroup = "supergroup"
	ChatChannel    = "channel"
)

// MessageEntity marks a span of a text or caption. Offset and Length are
// in UTF-16 code units.
type MessageEntity struct {
	Type   string `json:"type"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
	URL    string `json:"url,omitempty"`
	User   *User  `json:"user,omitempty"`
}

// PhotoSize is one size of a photo.
type PhotoSize struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// File is the common shape of Voice, Audio, Document, Video, VideoNote
// and Animation (the fields the fake fills in).
type File struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	FileName     string `json:"file_name,omitempty"`
	Title        string `json:"title,omitempty"`
	MimeType     string `json:"mime_type,omitempty"`
	FileSize     int64  `json:"file_size,omitempty"`
	Duration     int    `json:"duration,omitempty"`
	Width        int    `json:"width,omitempty"`
	Height       int    `json:"height,omitempty"`
}

// Sticker is a sticker: a WebP image, an animated (TGS) sticker when
// IsAnimated, or a WebM video when IsVideo.
type Sticker struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	// Type is "regular", "mask" or "custom_emoji" (default "regular").
	Type       string `json:"type"`
	Width      int    `json:"width"`
	Height     int    `json:"height"`
	IsAnimated bool   `json:"is_animated"`
	IsVideo    bool   `json:"is_video"`
	Emoji      string `json:"emoji,omitempty"`
	SetName    string `json:"set_name,omitempty"`
	FileSize   int64  `json:"file_size,omitempty"`
}

// FileInfo is the File object getFile returns. FilePath is the path to
// download from <URL>/file/bot<token>/<FilePath>.
type FileInfo struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	FileSize     int64  `json:"file_size,omitempty"`
	FilePath     string `json:"file_path,omitempty"`
}

// Message is a chat message.
type Message struct {
	MessageID       int64           `json:"message_id"`
	From            *User           `json:"from,omitempty"`
	SenderChat      *Chat           `json:"sender_chat,omitempty"`
	Date            int64           `json:"date"`
	Chat            Chat            `json:"chat"`
	ReplyToMessage  *Message        `json:"reply_to_message,omitempty"`
	EditDate        int64           `json:"edit_date,omitempty"`
	Text            string          `json:"text,omitempty"`
	Entities        []MessageEntity `json:"entities,omitempty"`
	Caption         string          `json:"caption,omitempty"`
	CaptionEntities []MessageEntity `json:"caption_entities,omitempty"`
	Photo           []PhotoSize     `json:"photo,omitempty"`
	Voice           *File           `json:"voice,omitempty"`
	Audio           *File           `json:"audio,omitempty"`
	Document        *File           `json:"document,omitempty"`
	Video           *File           `json:"video,omitempty"`
	VideoNote       *File           `json:"video_note,omitempty"`
	Animation       *File           `json:"animation,omitempty"`
	Sticker         *Sticker        `json:"sticker,omitempty"`
	NewChatMembers  []User          `json:"new_chat_members,omitempty"`
	MediaGroupID    string          `json:"media_group_id,omitempty"`
}

// Update is one incoming update. The fake produces message and
// edited_message updates; any other kind can be pushed with PushRaw.
type Update struct {
	UpdateID      int64    `json:"update_id"`
	Message       *Message `json:"message,omitempty"`
	EditedMessage *Message `json:"edited_message,omitempty"`
}

// ReplyParameters is the reply_parameters object of the send methods.
type ReplyParameters struct {
	MessageID                int64           `json:"message_id"`
	ChatID                   json.RawMessage `json:"chat_id,omitempty"`
	AllowSendingWithoutReply bool            `json:"allow_sending_without_reply,omitempty"`
}

// ResponseParameters are the parameters of an error answer.
type ResponseParameters struct {
	MigrateToChatID int64 `json:"migrate_to_chat_id,omitempty"`
	RetryAfter      int   `json:"retry_after,omitempty"`
}

// UTF16Len is the length of s in UTF-16 code units, the unit of entity
// offsets and of the Bot API text limits.
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// Entity returns an entity of type typ over the first occurrence of sub
// in text, with its offset and length in UTF-16 code units. It panics
// when sub does not occur in text (a test bug).
func Entity(typ, text, sub string) MessageEntity {
	i := strings.Index(text, sub)
	if i < 0 || sub == "" {
		panic("telegramtest: " + quote(sub) + " does not occur in " + quote(text))
	}
	return MessageEntity{Type: typ, Offset: UTF16Len(text[:i]), Length: UTF16Len(sub)}
}

// TextMention returns a text_mention entity of u over the first
// occurrence of sub in text.
func TextMention(text, sub string, u User) MessageEntity {
	e := Entity("text_mention", text, sub)
	e.User = &u
	return e
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func utf16Units(s string) []uint16 { return utf16.Encode([]rune(s)) }

func utf16String(u []uint16) string { return string(utf16.Decode(u)) }
