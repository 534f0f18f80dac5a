package feishutest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// atTag is a mention in a sent text message: <at user_id="ou_…">Name</at>.
var atTag = regexp.MustCompile(`<at user_id="([^"]*)">([^<]*)</at>`)

// postElement is an element of a post paragraph, sent or stored.
type postElement struct {
	Tag      string `json:"tag"`
	Text     string `json:"text,omitempty"`
	Href     string `json:"href,omitempty"`
	UserID   string `json:"user_id,omitempty"`
	UserName string `json:"user_name,omitempty"`
	ImageKey string `json:"image_key,omitempty"`
}

// post is a post's body in one language.
type post struct {
	Title   string          `json:"title"`
	Content [][]postElement `json:"content"`
}

// parseSendLocked validates the content of a sent message and returns it
// as the platform stores it (mentions as @_user_N keys). code != 0 is
// the error answer.
func (s *Server) parseSendLocked(msgType, content string) (stored string, mentions []Mention, code int, msg string) {
	mention := func(id, name string) string {
		key := fmt.Sprintf("@_user_%d", len(mentions)+1)
		mentions = append(mentions, Mention{Key: key, OpenID: id, Name: cmp.Or(name, s.users[id].Name, id)})
		return key
	}
	switch msgType {
	case "text":
		if len(content) > maxTextBody {
			return "", nil, CodeContentTooLong, "The length of the message content reaches its limit."
		}
		var c struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal([]byte(content), &c); err != nil || c.Text == nil {
			return "", nil, CodeInvalidParam, "invalid content: a text message needs {\"text\": string}"
		}
		text := atTag.ReplaceAllStringFunc(*c.Text, func(tag string) string {
			m := atTag.FindStringSubmatch(tag)
			if m[1] == "all" {
				return "@_all"
			}
			return mention(m[1], m[2])
		})
		b, _ := json.Marshal(map[string]string{"text": text})
		return string(b), mentions, 0, ""
	case "post":
		if len(content) > maxPostBody {
			return "", nil, CodeContentTooLong, "The length of the message content reaches its limit."
		}
		var langs map[string]post
		if err := json.Unmarshal([]byte(content), &langs); err != nil || len(langs) == 0 {
			return "", nil, CodeInvalidParam, "invalid content: a post needs {\"zh_cn\": {\"title\", \"content\"}}"
		}
		keys := make([]string, 0, len(langs))
		for k := range langs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		p := langs[keys[0]]
		if v, ok := langs["zh_cn"]; ok {
			p = v
		}
		if len(p.Content) == 0 {
			return "", nil, CodeInvalidParam, "invalid content: a post without paragraphs"
		}
		for _, para := range p.Content {
			for i, e := range para {
				switch e.Tag {
				case "text", "a", "img", "media", "emotion", "code_block", "hr", "md":
				case "at":
					if e.UserID != "all" {
						para[i].UserName = cmp.Or(e.UserName, s.users[e.UserID].Name, e.UserID)
						para[i].UserID = mention(e.UserID, para[i].UserName)
					}
				default:
					return "", nil, CodeInvalidParam, fmt.Sprintf("invalid content: unknown post tag %q", e.Tag)
				}
			}
		}
		b, _ := json.Marshal(p)
		return string(b), mentions, 0, ""
	case "image":
		var c struct {
			ImageKey string `json:"image_key"`
		}
		if err := json.Unmarshal([]byte(content), &c); err != nil || !s.images[c.ImageKey] {
			return "", nil, CodeInvalidParam, "invalid content: unknown image_key"
		}
		return content, nil, 0, ""
	}
	return "", nil, CodeFieldValidation, fmt.Sprintf("field validation failed: the fake supports msg_type text, post and image, not %q", msgType)
}

// renderLocked shows a stored message as text (mentions as "@Name") and
// lists its mentioned open_ids.
func (s *Server) renderLocked(m *Message) (string, []string) {
	byKey := map[string]Mention{}
	var ids []string
	for _, mm := range m.Mentions {
		byKey[mm.Key] = mm
		ids = append(ids, mm.OpenID)
	}
	switch m.MsgType {
	case "text":
		var c struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal([]byte(m.Content), &c)
		text := c.Text
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
		for _, k := range keys {
			text = strings.ReplaceAll(text, k, "@"+byKey[k].Name)
		}
		return text, ids
	case "post":
		var p post
		_ = json.Unmarshal([]byte(m.Content), &p)
		var b strings.Builder
		if p.Title != "" {
			b.WriteString(p.Title + "\n")
		}
		for i, para := range p.Content {
			if i > 0 {
				b.WriteByte('\n')
			}
			for _, e := range para {
				switch e.Tag {
				case "text", "a", "code_block", "md":
					b.WriteString(e.Text)
				case "at":
					b.WriteString("@" + cmp.Or(byKey[e.UserID].Name, e.UserName))
				case "img":
					b.WriteString("[image]")
				}
			}
		}
		return b.String(), ids
	}
	return "", ids
}
