package feishu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// Message content: the "content" of a message is a JSON document encoded
// as a string, its shape depending on msg_type [doc "接收消息内容",
// "发送消息内容"].

// userIDs are the three ids of a user in an event.
type userIDs struct {
	UnionID string `json:"union_id"`
	UserID  string `json:"user_id"`
	OpenID  string `json:"open_id"`
}

// mentionID is a mention's id: an object of the three ids in events, a
// plain open_id string in the message API's answers.
type mentionID struct{ userIDs }

// UnmarshalJSON accepts both shapes.
func (m *mentionID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &m.OpenID)
	}
	if string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, &m.userIDs)
}

// mention is one entry of a message's mentions.
type mention struct {
	Key  string    `json:"key"`
	ID   mentionID `json:"id"`
	Name string    `json:"name"`
}

// parsed is the normalised content of a message.
type parsed struct {
	segs  []channel.Segment
	toMe  bool     // the bot is mentioned
	users []string // open ids of mentioned users with their names, for the name cache
	names []string
}

func (p *parsed) text(s string) {
	if s == "" {
		return
	}
	if n := len(p.segs); n > 0 && p.segs[n-1].Type == channel.SegText {
		p.segs[n-1].Text += s
		return
	}
	p.segs = append(p.segs, channel.Text(s))
}

// mentionSeg adds the mention of m; a mention without an open_id stays
// text.
func (p *parsed) mentionSeg(m mention, botID string) {
	name := strings.TrimPrefix(m.Name, "@")
	if m.ID.OpenID == "" {
		if name == "" {
			name = m.Key
		}
		p.text("@" + name)
		return
	}
	seg := channel.Mention(m.ID.OpenID)
	if name != "" {
		seg.Text = "@" + name
		p.users = append(p.users, m.ID.OpenID)
		p.names = append(p.names, name)
	}
	p.segs = append(p.segs, seg)
	if botID != "" && m.ID.OpenID == botID {
		p.toMe = true
	}
}

// mediaRefSep separates the message id from the file key in a media
// reference (Media.FileID of received media).
const mediaRefSep = "/"

// MediaRef is the Media.FileID of a received image or file: the message
// id and the platform's image_key or file_key, which the resource API
// needs together ("om_…/img_…").
func MediaRef(messageID, fileKey string) string { return messageID + mediaRefSep + fileKey }

// ParseMediaRef splits a MediaRef; ok is false for anything else (such
// as a bare image_key the bot uploaded itself).
func ParseMediaRef(ref string) (messageID, fileKey string, ok bool) {
	messageID, fileKey, ok = strings.Cut(ref, mediaRefSep)
	if !ok || messageID == "" || fileKey == "" || strings.Contains(fileKey, mediaRefSep) {
		return "", "", false
	}
	return messageID, fileKey, true
}

// errContent is wrapped by content parsing errors.
var errContent = errors.New("malformed content")

// parseContent normalises a message's content. An unknown message type
// becomes a text placeholder "[<type>]" ("[message]" for a type that is
// not a plain token); content that is not the JSON of its type is an
// error.
func parseContent(msgType, content string, mentions []mention, botID, messageID string) (parsed, error) {
	var p parsed
	if !utf8.ValidString(content) {
		return p, fmt.Errorf("%w: not UTF-8", errContent)
	}
	bad := func(err error) (parsed, error) { return parsed{}, fmt.Errorf("%w: %s: %w", errContent, msgType, err) }
	switch msgType {
	case "text":
		var c struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal([]byte(content), &c); err != nil {
			return bad(err)
		}
		if c.Text == nil {
			return bad(errors.New("no text"))
		}
		p.textWithMentions(*c.Text, mentions, botID)
	case "post":
		body, err := postBodyOf([]byte(content))
		if err != nil {
			return bad(err)
		}
		p.post(body, mentions, botID, messageID)
	case "image":
		var c struct {
			ImageKey string `json:"image_key"`
		}
		if err := json.Unmarshal([]byte(content), &c); err != nil {
			return bad(err)
		}
		if c.ImageKey == "" {
			return bad(errors.New("no image_key"))
		}
		p.segs = append(p.segs, channel.Image(channel.Media{FileID: MediaRef(messageID, c.ImageKey)}))
	case "file", "audio", "media", "sticker":
		var c struct {
			FileKey  string `json:"file_key"`
			FileName string `json:"file_name"`
			Duration int64  `json:"duration"` // milliseconds
		}
		if err := json.Unmarshal([]byte(content), &c); err != nil {
			return bad(err)
		}
		if c.FileKey == "" {
			return bad(errors.New("no file_key"))
		}
		m := &channel.Media{FileID: MediaRef(messageID, c.FileKey), Name: c.FileName}
		if c.Duration > 0 {
			m.Duration = int(min((c.Duration+999)/1000, 1<<31-1))
		}
		typ := map[string]channel.SegmentType{"file": channel.SegFile, "audio": channel.SegVoice, "media": channel.SegVideo, "sticker": channel.SegSticker}[msgType]
		p.segs = append(p.segs, channel.Segment{Type: typ, Media: m})
	default:
		p.text("[" + placeholder(msgType) + "]")
	}
	return p, nil
}

// placeholder names an unsupported message type: the type itself when it
// is a plain lower-case token, else "message".
func placeholder(msgType string) string {
	if msgType == "" || len(msgType) > 32 {
		return "message"
	}
	for _, c := range msgType {
		if (c < 'a' || c > 'z') && c != '_' && (c < '0' || c > '9') {
			return "message"
		}
	}
	return msgType
}

// textWithMentions splits a text message at its mention keys (@_user_1,
// …): each key of the mentions list becomes a mention segment; "@_all"
// stays text as "@all".
func (p *parsed) textWithMentions(text string, mentions []mention, botID string) {
	keys := make([]string, 0, len(mentions))
	byKey := make(map[string]mention, len(mentions))
	for _, m := range mentions {
		if m.Key == "" {
			continue
		}
		if _, dup := byKey[m.Key]; !dup {
			keys = append(keys, m.Key)
		}
		byKey[m.Key] = m
	}
	// Longest first, so that @_user_10 is not read as @_user_1 and "0".
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	start := 0
	for i := 0; i < len(text); {
		if text[i] != '@' {
			i++
			continue
		}
		key := ""
		for _, k := range keys {
			if strings.HasPrefix(text[i:], k) {
				key = k
				break
			}
		}
		switch {
		case key != "":
			p.text(text[start:i])
			p.mentionSeg(byKey[key], botID)
			i += len(key)
			start = i
		case strings.HasPrefix(text[i:], "@_all"):
			p.text(text[start:i] + "@all")
			i += len("@_all")
			start = i
		default:
			i++
		}
	}
	p.text(text[start:])
}

// postBody is a rich-text (post) message: a title and paragraphs of
// elements.
type postBody struct {
	Title   string       `json:"title"`
	Content [][]postElem `json:"content"`
}

// postElem is one element of a post paragraph.
type postElem struct {
	Tag       string `json:"tag"`
	Text      string `json:"text,omitempty"`
	Href      string `json:"href,omitempty"`
	UserID    string `json:"user_id,omitempty"`
	UserName  string `json:"user_name,omitempty"`
	ImageKey  string `json:"image_key,omitempty"`
	FileKey   string `json:"file_key,omitempty"`
	EmojiType string `json:"emoji_type,omitempty"`
}

// postLocales is the order in which the language versions of a post are
// read when it comes wrapped in them (as sent).
var postLocales = []string{"zh_cn", "en_us", "ja_jp"}

// postBodyOf reads a post: {"title","content"} as received, or wrapped in
// language keys as sent ({"zh_cn":{…}}).
func postBodyOf(data []byte) (postBody, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return postBody{}, err
	}
	if top == nil {
		return postBody{}, errors.New("not an object")
	}
	if _, ok := top["content"]; ok {
		var b postBody
		err := json.Unmarshal(data, &b)
		return b, err
	}
	raw, ok := json.RawMessage(nil), false
	for _, l := range postLocales {
		if raw, ok = top[l]; ok {
			break
		}
	}
	if !ok {
		keys := make([]string, 0, len(top))
		for k := range top {
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			return postBody{}, errors.New("no content")
		}
		sort.Strings(keys)
		raw = top[keys[0]]
	}
	var b postBody
	err := json.Unmarshal(raw, &b)
	return b, err
}

// post normalises a post: the title on a line of its own, paragraphs
// separated by newlines; text, links (the text, then a link segment),
// mentions, images, videos, emoji and code blocks.
func (p *parsed) post(b postBody, mentions []mention, botID, messageID string) {
	byKey := make(map[string]mention, len(mentions))
	for _, m := range mentions {
		byKey[m.Key] = m
	}
	if b.Title != "" {
		p.text(b.Title + "\n")
	}
	for i, para := range b.Content {
		if i > 0 {
			p.text("\n")
		}
		for _, e := range para {
			switch e.Tag {
			case "text", "md", "code_block":
				p.text(e.Text)
			case "a":
				label := e.Text
				if label == "" {
					label = e.Href
				}
				p.text(label)
				if e.Href != "" {
					p.segs = append(p.segs, channel.Segment{Type: channel.SegLink, URL: e.Href, Text: e.Text})
				}
			case "at":
				m, ok := byKey[e.UserID]
				switch {
				case ok:
				case e.UserID == "all" || e.UserID == "@_all":
					p.text("@all")
					continue
				default:
					m = mention{ID: mentionID{userIDs{OpenID: e.UserID}}, Name: e.UserName}
					if !strings.HasPrefix(e.UserID, "ou_") {
						m.ID.OpenID = "" // a key without its mention, or another kind of id
					}
				}
				if m.Name == "" {
					m.Name = e.UserName
				}
				p.mentionSeg(m, botID)
			case "img":
				if e.ImageKey != "" {
					p.segs = append(p.segs, channel.Image(channel.Media{FileID: MediaRef(messageID, e.ImageKey)}))
				}
			case "media":
				if e.FileKey != "" {
					p.segs = append(p.segs, channel.Segment{Type: channel.SegVideo, Media: &channel.Media{FileID: MediaRef(messageID, e.FileKey)}})
				}
			case "emotion":
				if e.EmojiType != "" {
					p.segs = append(p.segs, channel.Segment{Type: channel.SegFace, FaceID: e.EmojiType})
				}
			case "hr":
				p.text("\n")
			}
		}
	}
}

// Outbound content.

// needsPost reports whether text must go out as a post: the text message
// type reads <at …> and style tags in its text, a post's text elements
// are literal.
func needsPost(text string) bool { return strings.Contains(text, "<") }

// textContent renders a text message: mentions as <at
// user_id="…">Name</at> before the text, with the name when name knows
// it (Feishu shows the user's current name either way).
func textContent(text string, mentions []string, name func(id string) string) string {
	var b strings.Builder
	for _, id := range mentions {
		n := name(id)
		if strings.ContainsAny(n, "<>&\"") {
			n = ""
		}
		b.WriteString(`<at user_id="`)
		b.WriteString(id)
		b.WriteString(`">`)
		b.WriteString(n)
		b.WriteString(`</at> `)
	}
	b.WriteString(text)
	c, _ := json.Marshal(struct {
		Text string `json:"text"`
	}{b.String()})
	return string(c)
}

// postContent renders a post: one paragraph per line of text, literal
// text elements, mentions as at elements at the start.
func postContent(text string, mentions []string) string {
	type elem struct {
		Tag    string  `json:"tag"`
		Text   *string `json:"text,omitempty"`
		UserID string  `json:"user_id,omitempty"`
	}
	type body struct {
		Title   string   `json:"title"`
		Content [][]elem `json:"content"`
	}
	lines := strings.Split(text, "\n")
	paras := make([][]elem, 0, len(lines))
	space := " "
	for i, line := range lines {
		var para []elem
		if i == 0 {
			for _, id := range mentions {
				para = append(para, elem{Tag: "at", UserID: id}, elem{Tag: "text", Text: &space})
			}
		}
		para = append(para, elem{Tag: "text", Text: &line})
		paras = append(paras, para)
	}
	c, _ := json.Marshal(map[string]body{"zh_cn": {Content: paras}})
	return string(c)
}

// validMentionID reports whether id can go into an at element: an
// open_id without quotes or markup.
func validMentionID(id string) bool {
	return id != "" && !strings.ContainsAny(id, "\"<>&\\ \t\r\n")
}
