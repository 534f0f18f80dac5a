package qqbot

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// ChannelChatPrefix starts the chat id of a guild text channel
// ("channel:<channel_id>"); QQ group chats use the bare group_openid.
const ChannelChatPrefix = "channel:"

// maxIDBytes bounds every id taken from a payload.
const maxIDBytes = 256

// identity is who the bot is, for normalisation: BotID is the AppID
// (Event.BotID); UserID is the bot's user id in guilds (READY's user.id or
// GET /users/@me), which guild mentions and the bot's own guild messages
// carry ("" until known).
type identity struct {
	BotID  string
	UserID string
}

// decoded is what normalize made of one dispatch.
type decoded struct {
	ev  channel.Event
	ref *inboundRef // the reply target it offers (KindMessage only)
	// skip says why there is no event ("" = there is one); invalid marks
	// a payload that is broken rather than unsupported.
	skip    string
	invalid bool
}

// normalize turns a message dispatch into an event. now is the receive
// time, used when the payload's timestamp is missing or unreadable.
func normalize(who identity, t, eventID string, d json.RawMessage, now time.Time) decoded {
	switch t {
	case eventGroupAt, eventC2C, eventChannelAt, eventDirectMessage:
	default:
		return decoded{skip: "unsupported event type " + quoteType(t)}
	}
	if d == nil {
		return decoded{skip: t + " without d", invalid: true}
	}
	var m qqMessage
	if err := json.Unmarshal(d, &m); err != nil {
		return decoded{skip: fmt.Sprintf("%s: d is not a message: %v", t, err), invalid: true}
	}
	bad := func(format string, a ...any) decoded {
		return decoded{skip: t + ": " + fmt.Sprintf(format, a...), invalid: true}
	}
	id := string(m.ID)
	if !validID(id) {
		return bad("message id %q is missing or malformed", truncate(id, 80))
	}
	if m.Author == nil {
		return bad("no author")
	}
	at := messageTime(m.Timestamp, now)
	ev := channel.Event{
		Platform:  Platform,
		BotID:     who.BotID,
		Kind:      channel.KindMessage,
		MessageID: id,
		Time:      at,
		Source:    channel.SourceLive,
		Raw:       append(json.RawMessage(nil), d...),
	}
	ref := &inboundRef{ID: id, At: at}
	switch t {
	case eventGroupAt:
		group, member := string(m.GroupOpenID), firstNonEmpty(string(m.Author.MemberOpenID), string(m.Author.ID))
		if !validID(group) || !validID(member) {
			return bad("group_openid or author.member_openid is missing or malformed")
		}
		ev.Chat = channel.Chat{Kind: channel.Group, ID: group}
		ev.Sender = channel.Sender{ID: member, IsBot: m.Author.Bot}
		// The platform strips the @ of the bot and leaves its space.
		ev.Segments = append([]channel.Segment{channel.Mention(who.BotID)}, plainSegments(strings.TrimPrefix(m.Content, " "))...)
		ev.ToMe = true
		ref.Route, ref.Target = routeGroup, group
	case eventC2C:
		user := firstNonEmpty(string(m.Author.UserOpenID), string(m.Author.ID))
		if !validID(user) {
			return bad("author.user_openid is missing or malformed")
		}
		ev.Chat = channel.Chat{Kind: channel.Private, ID: user}
		ev.Sender = channel.Sender{ID: user, IsBot: m.Author.Bot}
		ev.Segments = plainSegments(m.Content)
		ev.ToMe = true
		ref.Route, ref.Target = routeC2C, user
	case eventChannelAt:
		ch, author := string(m.ChannelID), string(m.Author.ID)
		if !validID(ch) || !validID(author) {
			return bad("channel_id or author.id is missing or malformed")
		}
		ev.Chat = channel.Chat{Kind: channel.Group, ID: ChannelChatPrefix + ch}
		ev.Sender = guildSender(&m)
		segs, toMe := guildSegments(m.Content, who)
		ev.Segments, ev.ToMe = segs, toMe
		ev.Seq = int64(m.SeqInChannel)
		if ev.Seq == 0 {
			ev.Seq = int64(m.Seq)
		}
		if who.UserID != "" && author == who.UserID {
			ev.Kind, ev.ToMe = channel.KindSelf, false
		}
		ref.Route, ref.Target = routeChannel, ch
	case eventDirectMessage:
		guild, author := string(m.GuildID), string(m.Author.ID)
		if !validID(guild) || !validID(author) {
			return bad("guild_id or author.id is missing or malformed")
		}
		if who.UserID != "" && author == who.UserID {
			// The peer of the bot's own direct message is not in it.
			return decoded{skip: t + ": the bot's own direct message"}
		}
		ev.Chat = channel.Chat{Kind: channel.Private, ID: author}
		ev.Sender = guildSender(&m)
		ev.Sender.Role = ""
		segs, _ := guildSegments(m.Content, who)
		ev.Segments, ev.ToMe = segs, true
		ref.Route, ref.Target = routeDM, guild
	}
	if m.MessageReference != nil && validID(string(m.MessageReference.MessageID)) {
		ev.Segments = append([]channel.Segment{channel.Quote(string(m.MessageReference.MessageID))}, ev.Segments...)
	}
	ev.Segments = append(ev.Segments, attachmentSegments(m.Attachments)...)
	if err := ev.Validate(); err != nil {
		return bad("%v", err)
	}
	ref.Chat = ev.Chat
	out := decoded{ev: ev}
	if ev.Kind == channel.KindMessage {
		out.ref = ref
	}
	return out
}

func quoteType(t string) string {
	if t == "" {
		return `""`
	}
	return fmt.Sprintf("%q", truncate(t, maxEventTypeBytes))
}

// validID accepts a non-empty id of printable ASCII without white space,
// '/', '?', '#' or '%' (ids go into URL paths) of at most maxIDBytes.
func validID(s string) bool {
	if s == "" || len(s) > maxIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b <= ' ' || b >= 0x7f || b == '/' || b == '?' || b == '#' || b == '%' || b == '\\' {
			return false
		}
	}
	return true
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// messageTime reads an RFC 3339 timestamp, never later than now.
func messageTime(ts string, now time.Time) time.Time {
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(ts))
	if err != nil || t.After(now) || t.Year() < 2000 {
		return now
	}
	return t
}

// plainSegments is the text of a group or C2C message: one text segment,
// or none for an empty text.
func plainSegments(s string) []channel.Segment {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if s == "" {
		return nil
	}
	return []channel.Segment{channel.Text(s)}
}

// guildSender is the author of a guild message: Name the member's nick
// or the username, Role from the default role ids (4 owner, 2 admin, 5
// channel admin, else member).
func guildSender(m *qqMessage) channel.Sender {
	s := channel.Sender{ID: string(m.Author.ID), Name: strings.ToValidUTF8(m.Author.Username, ""), IsBot: m.Author.Bot}
	if m.Member == nil {
		return s
	}
	if n := strings.ToValidUTF8(m.Member.Nick, ""); n != "" {
		s.Name = n
	}
	s.Role = channel.RoleMember
	for _, r := range m.Member.Roles {
		switch r {
		case "4":
			s.Role = channel.RoleOwner
		case "2", "5":
			if s.Role != channel.RoleOwner {
				s.Role = channel.RoleAdmin
			}
		}
	}
	return s
}

// guildSegments parses guild content: "<@id>" and "<@!id>" become mention
// segments (of the bot id for the bot's user id, which also sets toMe),
// other text is unescaped (&amp; &lt; &gt;).
func guildSegments(content string, who identity) (segs []channel.Segment, toMe bool) {
	content = strings.ToValidUTF8(content, "\uFFFD")
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			segs = append(segs, channel.Text(unescapeGuild(text.String())))
			text.Reset()
		}
	}
	for len(content) > 0 {
		i := strings.Index(content, "<@")
		if i < 0 {
			text.WriteString(content)
			break
		}
		text.WriteString(content[:i])
		rest := content[i+2:]
		end := strings.IndexByte(rest, '>')
		id := ""
		if end >= 0 {
			id = strings.TrimPrefix(rest[:end], "!")
		}
		if end < 0 || !digits(id) {
			text.WriteString("<@")
			content = rest
			continue
		}
		flush()
		if who.UserID != "" && id == who.UserID {
			segs = append(segs, channel.Segment{Type: channel.SegMention, UserID: who.BotID, Text: content[i : i+2+end+1]})
			toMe = true
		} else {
			segs = append(segs, channel.Segment{Type: channel.SegMention, UserID: id, Text: content[i : i+2+end+1]})
		}
		content = rest[end+1:]
	}
	flush()
	// The text after a mention of the bot starts with the space that
	// followed it; a message that is only "<@!bot> hi" reads as "hi".
	if len(segs) > 1 && segs[0].Type == channel.SegMention && segs[1].Type == channel.SegText {
		segs[1].Text = strings.TrimPrefix(segs[1].Text, " ")
		if segs[1].Text == "" {
			segs = append(segs[:1], segs[2:]...)
		}
	}
	return segs, toMe
}

func digits(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

var guildUnescaper = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

func unescapeGuild(s string) string { return guildUnescaper.Replace(s) }

// attachmentSegments turns attachments into media segments: image/* an
// image, "voice" a voice clip, video/* a video, anything else a file.
// The URL gets https:// when the platform leaves the scheme out; an
// attachment without a usable URL is dropped.
func attachmentSegments(as []qqAttachment) []channel.Segment {
	var segs []channel.Segment
	for _, a := range as {
		u, ok := attachmentURL(a.URL)
		if !ok {
			continue
		}
		ct := strings.ToLower(strings.TrimSpace(a.ContentType))
		m := channel.Media{URL: u, Size: int64(a.Size), Name: strings.ToValidUTF8(truncate(a.Filename, 255), "")}
		var typ channel.SegmentType
		switch {
		case strings.HasPrefix(ct, "image/"):
			typ, m.MIME = channel.SegImage, ct
		case ct == "voice" || strings.HasPrefix(ct, "audio/"):
			typ = channel.SegVoice
			if ct != "voice" {
				m.MIME = ct
			}
		case strings.HasPrefix(ct, "video/"):
			typ, m.MIME = channel.SegVideo, ct
		default:
			typ = channel.SegFile
		}
		if !utf8.ValidString(m.MIME) || len(m.MIME) > 100 {
			m.MIME = ""
		}
		segs = append(segs, channel.Segment{Type: typ, Media: &m})
	}
	return segs
}

// attachmentURL returns an absolute http(s) URL for an attachment's url
// ("gchat.qpic.cn/…" gets https://), or false.
func attachmentURL(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 4096 || !utf8.ValidString(s) {
		return "", false
	}
	if strings.HasPrefix(s, "//") {
		s = "https:" + s
	} else if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", false
	}
	return u.String(), true
}
