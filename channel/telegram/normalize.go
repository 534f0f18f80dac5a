package telegram

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/personakit/persona/channel"
)

// botInfo is what normalisation needs to know about the bot (from getMe).
type botInfo struct {
	id       int64
	idStr    string
	username string
}

func newBotInfo(u tgUser) botInfo {
	return botInfo{id: u.ID, idStr: strconv.FormatInt(u.ID, 10), username: u.Username}
}

// decoded is one update after normalisation.
type decoded struct {
	updateID int64
	// events are delivered in order; all must be accepted before the
	// update counts as handled.
	events []channel.Event
	// skip, when set, says why the update yields no event (it is still
	// acknowledged: redelivering it would not change that).
	skip string
	// invalid marks a skip for a broken update (a field of the wrong type,
	// an id out of the Bot API's range) rather than an unsupported one; it
	// is logged as a warning (telegram_update_invalid).
	invalid bool
	// users seen in the update (for rendering mentions later).
	users []tgUser
}

// errMalformed marks an update that is not even a JSON object with an
// update_id.
var errMalformed = errors.New("telegram: malformed update")

// decodeUpdate parses and normalises one Update. It fails only when the
// update_id cannot be read or is negative; any other problem is a skip
// with a reason (marked invalid for a malformed update or an id out of
// range, see invalidIDs).
func (b botInfo) decodeUpdate(raw []byte, now time.Time) (decoded, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return decoded{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	idRaw, ok := fields["update_id"]
	if !ok || string(idRaw) == "null" {
		return decoded{}, fmt.Errorf("%w: no update_id", errMalformed)
	}
	var d decoded
	if err := json.Unmarshal(idRaw, &d.updateID); err != nil {
		return decoded{}, fmt.Errorf("%w: update_id: %w", errMalformed, err)
	}
	if !validUpdateID(d.updateID) {
		return decoded{}, fmt.Errorf("%w: update_id %d out of range", errMalformed, d.updateID)
	}
	var u tgUpdate
	if err := json.Unmarshal(raw, &u); err != nil {
		d.skip, d.invalid = "malformed update: "+err.Error(), true
		return d, nil
	}
	for _, m := range []*tgMessage{u.Message, u.EditedMessage} {
		if m == nil {
			continue
		}
		if why := invalidIDs(m); why != "" {
			d.skip, d.invalid = "invalid id: "+why, true
			return d, nil
		}
	}
	rawCopy := json.RawMessage(slices.Clone(raw))
	switch {
	case u.Message != nil:
		d.events, d.skip = b.message(u.Message, rawCopy, now)
		d.users = usersOf(u.Message)
	case u.EditedMessage != nil:
		d.events, d.skip = b.edit(u.EditedMessage, rawCopy, now)
		d.users = usersOf(u.EditedMessage)
	default:
		kinds := make([]string, 0, len(fields))
		for k := range fields {
			if k != "update_id" {
				kinds = append(kinds, k)
			}
		}
		slices.Sort(kinds)
		d.skip = "unsupported update type " + strings.Join(kinds, ",")
		if len(kinds) == 0 {
			d.skip = "update without content"
		}
	}
	return d, nil
}

// message normalises a new message.
func (b botInfo) message(m *tgMessage, raw json.RawMessage, now time.Time) ([]channel.Event, string) {
	chat, skip := chatOf(m)
	if skip != "" {
		return nil, skip
	}
	if m.MessageID == 0 {
		return nil, "message_id 0 (scheduled message)"
	}
	when := unixOr(m.Date, now)
	sender := senderOf(m)

	if len(m.NewChatMembers) > 0 {
		evs := make([]channel.Event, 0, len(m.NewChatMembers))
		for _, u := range m.NewChatMembers {
			evs = append(evs, channel.Event{
				Platform: Platform, BotID: b.idStr, Kind: channel.KindNotice, Chat: chat,
				Time: when, Sender: sender, Source: channel.SourceLive, Raw: raw,
				Notice: &channel.Notice{
					Type: channel.NoticeGroupIncrease, Operator: sender.ID,
					UserID: strconv.FormatInt(u.ID, 10),
				},
			})
		}
		return evs, ""
	}

	segs, toMe := b.content(m)
	var quoted *channel.Quoted
	if r := m.ReplyToMessage; r != nil && r.MessageID != 0 && (!m.IsTopicMessage || r.ForumTopicCreated == nil) {
		id := strconv.FormatInt(r.MessageID, 10)
		rsegs, _ := b.content(r)
		quoted = &channel.Quoted{
			MessageID: id,
			Sender:    senderOf(r),
			Text:      textOf(rsegs),
			Segments:  rsegs,
			FromBot:   r.From != nil && r.From.ID == b.id,
		}
		segs = append([]channel.Segment{channel.Quote(id)}, segs...)
	}
	if len(segs) == 0 {
		return nil, "message without supported content"
	}
	kind := channel.KindMessage
	if m.From != nil && m.From.ID == b.id {
		kind = channel.KindSelf
	}
	return []channel.Event{{
		Platform:  Platform,
		BotID:     b.idStr,
		Kind:      kind,
		Chat:      chat,
		MessageID: strconv.FormatInt(m.MessageID, 10),
		Time:      when,
		Sender:    sender,
		Segments:  segs,
		Quoted:    quoted,
		ToMe:      toMe,
		Source:    channel.SourceLive,
		Raw:       raw,
	}}, ""
}

// edit normalises an edited message into a message_edited notice carrying
// the new content. It has no MessageID of its own (the edited message's id
// is Notice.TargetMessageID), so its dedupe key is the content hash, which
// includes the edit time.
func (b botInfo) edit(m *tgMessage, raw json.RawMessage, now time.Time) ([]channel.Event, string) {
	chat, skip := chatOf(m)
	if skip != "" {
		return nil, skip
	}
	if m.MessageID == 0 {
		return nil, "edited message_id 0"
	}
	when := unixOr(m.EditDate, unixOr(m.Date, now))
	sender := senderOf(m)
	segs, _ := b.content(m)
	return []channel.Event{{
		Platform: Platform,
		BotID:    b.idStr,
		Kind:     channel.KindNotice,
		Chat:     chat,
		Time:     when,
		Sender:   sender,
		Segments: segs,
		Source:   channel.SourceLive,
		Raw:      raw,
		Notice: &channel.Notice{
			Type:            channel.NoticeMessageEdited,
			Operator:        sender.ID,
			UserID:          sender.ID,
			TargetMessageID: strconv.FormatInt(m.MessageID, 10),
		},
	}}, ""
}

// chatOf maps a Telegram chat to a channel.Chat. Channels are not
// supported. A chat without a type (as in some documentation samples) is
// private when its id is positive and a group when negative.
func chatOf(m *tgMessage) (channel.Chat, string) {
	c := m.Chat
	if c == nil {
		return channel.Chat{}, "message without chat"
	}
	if c.ID == 0 {
		return channel.Chat{}, "chat id 0"
	}
	id := strconv.FormatInt(c.ID, 10)
	switch c.Type {
	case "private":
		return channel.Chat{Kind: channel.Private, ID: id}, ""
	case "group", "supergroup":
		return channel.Chat{Kind: channel.Group, ID: id}, ""
	case "":
		if c.ID > 0 {
			return channel.Chat{Kind: channel.Private, ID: id}, ""
		}
		return channel.Chat{Kind: channel.Group, ID: id}, ""
	}
	return channel.Chat{}, "unsupported chat type " + strconv.Quote(c.Type)
}

// senderOf returns who sent m: sender_chat for anonymous admins and linked
// channels (an anonymous admin of the group itself gets Role admin), else
// from, else (private chats) the chat's peer.
func senderOf(m *tgMessage) channel.Sender {
	switch {
	case m.SenderChat != nil && m.SenderChat.ID != 0:
		s := channel.Sender{ID: strconv.FormatInt(m.SenderChat.ID, 10), Name: chatName(m.SenderChat)}
		if m.Chat != nil && m.SenderChat.ID == m.Chat.ID {
			s.Role = channel.RoleAdmin
		}
		return s
	case m.From != nil:
		return channel.Sender{ID: strconv.FormatInt(m.From.ID, 10), Name: userName(m.From), IsBot: m.From.IsBot}
	case m.Chat != nil && m.Chat.ID > 0:
		return channel.Sender{ID: strconv.FormatInt(m.Chat.ID, 10), Name: chatName(m.Chat)}
	}
	return channel.Sender{}
}

func userName(u *tgUser) string {
	n := strings.TrimSpace(u.FirstName + " " + u.LastName)
	if n == "" {
		n = u.Username
	}
	return n
}

func chatName(c *tgChat) string {
	if c.Title != "" {
		return c.Title
	}
	if n := strings.TrimSpace(c.FirstName + " " + c.LastName); n != "" {
		return n
	}
	return c.Username
}

// usersOf lists the users named in m (sender, replied-to sender, text
// mentions, new members).
func usersOf(m *tgMessage) []tgUser {
	var us []tgUser
	add := func(u *tgUser) {
		if u != nil && u.ID != 0 {
			us = append(us, *u)
		}
	}
	for mm := m; mm != nil; mm = mm.ReplyToMessage {
		add(mm.From)
		for _, e := range mm.Entities {
			add(e.User)
		}
		for _, e := range mm.CaptionEntities {
			add(e.User)
		}
		for i := range mm.NewChatMembers {
			add(&mm.NewChatMembers[i])
		}
		if mm != m {
			break // reply_to_message is not nested further
		}
	}
	return us
}

// content returns the segments of a message's own content (no quote): its
// media, then its text or caption with mentions resolved. Media carry the
// file_id (never a URL: a download URL contains the token).
func (b botInfo) content(m *tgMessage) ([]channel.Segment, bool) {
	var segs []channel.Segment
	add := func(t channel.SegmentType, md channel.Media) {
		md.Album = m.MediaGroupID
		segs = append(segs, channel.Segment{Type: t, Media: &md})
	}
	if p, ok := largestPhoto(m.Photo); ok {
		add(channel.SegImage, channel.Media{FileID: p.FileID, MIME: "image/jpeg", Size: p.FileSize})
	}
	// file adds a voice clip, video or file; name says whether it keeps
	// its file name (a music file falls back to its title).
	file := func(t channel.SegmentType, f *tgFile, defMIME string, name bool) {
		if f == nil || f.FileID == "" {
			return
		}
		md := channel.Media{FileID: f.FileID, MIME: cmp.Or(f.MimeType, defMIME), Size: f.FileSize, Duration: max(f.Duration, 0)}
		if name {
			md.Name = cmp.Or(f.FileName, f.Title)
		}
		add(t, md)
	}
	file(channel.SegVoice, m.Voice, "audio/ogg", false)
	file(channel.SegVideo, m.VideoNote, "video/mp4", false)
	file(channel.SegVideo, m.Video, "video/mp4", false)
	if m.Animation != nil {
		// An animation comes with a document twin of the same file.
		file(channel.SegVideo, m.Animation, "video/mp4", false)
	} else {
		file(channel.SegFile, m.Document, "application/octet-stream", true)
	}
	file(channel.SegFile, m.Audio, "audio/mpeg", true)
	if s := m.Sticker; s != nil && s.FileID != "" {
		mime := "image/webp"
		switch {
		case s.IsVideo:
			mime = "video/webm"
		case s.IsAnimated:
			mime = "application/x-tgsticker"
		}
		add(channel.SegSticker, channel.Media{FileID: s.FileID, MIME: mime, Size: s.FileSize, Name: s.Emoji})
	}
	text, ents := m.Text, m.Entities
	if text == "" {
		text, ents = m.Caption, m.CaptionEntities
	}
	ts, toMe := b.textSegments(text, ents)
	return append(segs, ts...), toMe
}

func largestPhoto(ps []tgPhotoSize) (tgPhotoSize, bool) {
	var best tgPhotoSize
	found := false
	for _, p := range ps {
		if p.FileID == "" {
			continue
		}
		if !found || p.Width*p.Height > best.Width*best.Height ||
			(p.Width*p.Height == best.Width*best.Height && p.FileSize >= best.FileSize) {
			best, found = p, true
		}
	}
	return best, found
}

// textSegments splits text at the entities that matter for addressing,
// whose offsets and lengths are in UTF-16 code units:
//
//   - mention "@<bot username>" (case-insensitive): a mention segment of
//     the bot id, and toMe;
//   - text_mention: a mention segment of entity.user.id (toMe when that
//     is the bot);
//   - bot_command "/cmd@<bot username>": the command stays text, preceded
//     by a mention segment of the bot id, and toMe.
//
// Mention segments keep the original span in Text. Other entities
// (mentions of other usernames, formatting, links) stay plain text.
// Entities that are out of range, overlap an earlier one or cut a
// surrogate pair are ignored. Concatenating the Text of all segments gives
// back the original text.
func (b botInfo) textSegments(text string, ents []tgEntity) ([]channel.Segment, bool) {
	if text == "" {
		return nil, false
	}
	var rel []tgEntity
	for _, e := range ents {
		switch e.Type {
		case "mention", "text_mention", "bot_command":
			rel = append(rel, e)
		}
	}
	if len(rel) == 0 {
		return []channel.Segment{channel.Text(text)}, false
	}
	slices.SortStableFunc(rel, func(a, b tgEntity) int { return cmp.Compare(a.Offset, b.Offset) })

	units := utf16.Encode([]rune(text))
	var (
		segs    []channel.Segment
		pending strings.Builder
		toMe    bool
		cursor  int
	)
	flush := func() {
		if pending.Len() > 0 {
			segs = append(segs, channel.Text(pending.String()))
			pending.Reset()
		}
	}
	isBot := func(name string) bool { return b.username != "" && strings.EqualFold(name, b.username) }
	for _, e := range rel {
		start, end := e.Offset, e.Offset+e.Length
		if e.Length <= 0 || start < cursor || end > len(units) || end < start ||
			cutsPair(units, start) || cutsPair(units, end) {
			continue
		}
		pending.WriteString(string(utf16.Decode(units[cursor:start])))
		span := string(utf16.Decode(units[start:end]))
		cursor = end
		switch e.Type {
		case "mention":
			if isBot(strings.TrimPrefix(span, "@")) && strings.HasPrefix(span, "@") {
				flush()
				segs = append(segs, channel.Segment{Type: channel.SegMention, UserID: b.idStr, Text: span})
				toMe = true
				continue
			}
		case "text_mention":
			if e.User != nil && e.User.ID != 0 {
				flush()
				segs = append(segs, channel.Segment{Type: channel.SegMention, UserID: strconv.FormatInt(e.User.ID, 10), Text: span})
				toMe = toMe || e.User.ID == b.id
				continue
			}
		case "bot_command":
			if _, name, ok := strings.Cut(span, "@"); ok && isBot(name) {
				flush()
				segs = append(segs, channel.Mention(b.idStr))
				toMe = true
			}
		}
		pending.WriteString(span)
	}
	pending.WriteString(string(utf16.Decode(units[cursor:])))
	flush()
	return segs, toMe
}

// cutsPair reports whether a UTF-16 boundary at i falls inside a surrogate
// pair.
func cutsPair(units []uint16, i int) bool {
	return i > 0 && i < len(units) && utf16.IsSurrogate(rune(units[i])) &&
		units[i] >= 0xDC00 && units[i-1] >= 0xD800 && units[i-1] < 0xDC00
}

// textOf joins the text segments.
func textOf(segs []channel.Segment) string {
	var sb strings.Builder
	for _, s := range segs {
		if s.Type == channel.SegText {
			sb.WriteString(s.Text)
		}
	}
	return sb.String()
}

// utf16Len is the length of s in UTF-16 code units (the Bot API's unit for
// text limits and entity offsets).
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

func unixOr(sec int64, def time.Time) time.Time {
	if sec > 0 {
		return time.Unix(sec, 0)
	}
	return def
}
