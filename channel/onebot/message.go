package onebot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Segment is one OneBot v11 message segment in the array format:
// {"type": "image", "data": {"file": "123.jpg"}}. All data values are
// strings on the wire; Segment's UnmarshalJSON also accepts numbers and
// booleans (written as their JSON literal) and objects or arrays (kept as
// their JSON text), because some implementations send them.
type Segment struct {
	// Type is the segment type: text, at, reply, image, face, ….
	Type string `json:"type"`
	// Data holds the segment's parameters (for text: "text").
	Data map[string]string `json:"data"`
}

// TextSegment returns a "text" segment.
func TextSegment(text string) Segment {
	return Segment{Type: "text", Data: map[string]string{"text": text}}
}

// MarshalJSON writes the segment with an object for data (never null).
func (s Segment) MarshalJSON() ([]byte, error) {
	data := s.Data
	if data == nil {
		data = map[string]string{}
	}
	return json.Marshal(struct {
		Type string            `json:"type"`
		Data map[string]string `json:"data"`
	}{s.Type, data})
}

// UnmarshalJSON reads a segment leniently (see Segment).
func (s *Segment) UnmarshalJSON(b []byte) error {
	var raw struct {
		Type string                     `json:"type"`
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("onebot: segment: %w", err)
	}
	s.Type = raw.Type
	s.Data = nil
	if len(raw.Data) > 0 {
		s.Data = make(map[string]string, len(raw.Data))
	}
	for k, v := range raw.Data {
		v = bytes.TrimSpace(v)
		switch {
		case len(v) == 0 || string(v) == "null":
			continue
		case v[0] == '"':
			var str string
			if err := json.Unmarshal(v, &str); err != nil {
				return fmt.Errorf("onebot: segment data %q: %w", k, err)
			}
			s.Data[k] = str
		default: // numbers, booleans, objects, arrays: their JSON text
			s.Data[k] = string(v)
		}
	}
	return nil
}

// Message is a OneBot message: a list of segments. Its UnmarshalJSON accepts
// both message formats of the protocol: the array format and the CQ-code
// string format (parsed with ParseCQ). It marshals as an array.
type Message []Segment

// UnmarshalJSON reads an array of segments, a CQ-code string, a single
// segment object or null.
func (m *Message) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		*m = nil
		return nil
	}
	switch b[0] {
	case 'n':
		*m = nil
		return nil
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("onebot: message string: %w", err)
		}
		*m = ParseCQ(s)
		return nil
	case '{':
		var seg Segment
		if err := json.Unmarshal(b, &seg); err != nil {
			return err
		}
		*m = Message{seg}
		return nil
	}
	var segs []Segment
	if err := json.Unmarshal(b, &segs); err != nil {
		return fmt.Errorf("onebot: message array: %w", err)
	}
	*m = segs
	return nil
}

// PlainText returns the text segments of m joined in order.
func (m Message) PlainText() string {
	var b strings.Builder
	for _, s := range m {
		if s.Type == "text" {
			b.WriteString(s.Data["text"])
		}
	}
	return b.String()
}

// CQString renders m in the CQ-code string format (see RenderCQ).
func (m Message) CQString() string { return RenderCQ(m) }

// Escaping tables of the CQ-code format: text escapes &, [ and ]; parameter
// values additionally escape the comma. Unescaping handles &amp; last, which
// a single left-to-right replacement pass does by construction.
var (
	textEscaper  = strings.NewReplacer("&", "&amp;", "[", "&#91;", "]", "&#93;")
	paramEscaper = strings.NewReplacer("&", "&amp;", "[", "&#91;", "]", "&#93;", ",", "&#44;")
	unescaper    = strings.NewReplacer("&#44;", ",", "&#91;", "[", "&#93;", "]", "&amp;", "&")
)

// EscapeText escapes plain text for the CQ-code string format:
// & → &amp;, [ → &#91;, ] → &#93;.
func EscapeText(s string) string { return textEscaper.Replace(s) }

// EscapeParam escapes a CQ-code parameter value: like EscapeText, and also
// , → &#44;.
func EscapeParam(s string) string { return paramEscaper.Replace(s) }

// Unescape reverses EscapeText and EscapeParam (&amp; is handled last, so
// "&amp;#91;" becomes "&#91;", not "[").
func Unescape(s string) string { return unescaper.Replace(s) }

// RenderCQ renders segments in the CQ-code string format: text segments as
// escaped plain text, every other segment as [CQ:type,k=v,...] with escaped
// values and keys in sorted order. The result parses back with ParseCQ to
// the same segments (up to merging adjacent text segments and dropping empty
// ones).
func RenderCQ(m Message) string {
	var b strings.Builder
	for _, s := range m {
		if s.Type == "text" {
			b.WriteString(EscapeText(s.Data["text"]))
			continue
		}
		b.WriteString("[CQ:")
		b.WriteString(s.Type)
		keys := make([]string, 0, len(s.Data))
		for k := range s.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b.WriteByte(',')
			b.WriteString(k)
			b.WriteByte('=')
			b.WriteString(EscapeParam(s.Data[k]))
		}
		b.WriteByte(']')
	}
	return b.String()
}

// ParseCQ parses a message in the CQ-code string format. It never fails:
// anything that is not a well-formed CQ code (no closing bracket, an empty
// or invalid type name, an invalid parameter name) is kept as literal text.
// Adjacent text is merged and empty text dropped, so the result is always a
// valid segment list and ParseCQ(RenderCQ(ParseCQ(s))) equals ParseCQ(s).
//
// A CQ code's type runs from "[CQ:" to the first "," or "]"; its parameters
// are split on "," and each on its first "="; values are unescaped. A
// parameter without "=" has an empty value. "[CQ:text,text=...]" is read as
// a text segment.
func ParseCQ(s string) Message {
	var out Message
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			out = append(out, TextSegment(text.String()))
			text.Reset()
		}
	}
	for len(s) > 0 {
		i := strings.Index(s, "[CQ:")
		if i < 0 {
			text.WriteString(Unescape(s))
			break
		}
		text.WriteString(Unescape(s[:i]))
		s = s[i:]
		seg, n, ok := parseCode(s)
		if !ok {
			// Not a CQ code: keep "[CQ:" as literal text and go on.
			text.WriteString(s[:4])
			s = s[4:]
			continue
		}
		s = s[n:]
		if seg.Type == "text" {
			text.WriteString(seg.Data["text"])
			continue
		}
		flush()
		out = append(out, seg)
	}
	flush()
	return out
}

// parseCode parses one CQ code at the start of s (which starts with "[CQ:")
// and returns it with its length in bytes.
func parseCode(s string) (Segment, int, bool) {
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return Segment{}, 0, false
	}
	body := s[4:end]
	typ, params, _ := strings.Cut(body, ",")
	if !validName(typ, true) {
		return Segment{}, 0, false
	}
	data := map[string]string{}
	for p := range strings.SplitSeq(params, ",") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		if !validName(k, false) {
			return Segment{}, 0, false
		}
		data[k] = Unescape(v)
	}
	return Segment{Type: typ, Data: data}, end + 1, true
}

// validName reports whether s is a usable CQ type (dots allowed) or
// parameter name: non-empty ASCII letters, digits, '_' and '-'.
func validName(s string, dots bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		case c == '.' && dots:
		default:
			return false
		}
	}
	return true
}

// ValidSegments reports whether m is a valid segment list for the round trip
// ParseCQ(RenderCQ(m)) == m: no empty or adjacent text segments, text
// segments carry exactly the "text" key, and type and parameter names are
// valid CQ names. It returns a description of the first problem.
func ValidSegments(m Message) (bool, string) {
	for i, s := range m {
		if s.Type == "text" {
			if len(s.Data) != 1 || s.Data["text"] == "" {
				return false, "segment " + strconv.Itoa(i) + ": text segment must have exactly a non-empty text"
			}
			if i > 0 && m[i-1].Type == "text" {
				return false, "segment " + strconv.Itoa(i) + ": adjacent text segments"
			}
			continue
		}
		if !validName(s.Type, true) {
			return false, "segment " + strconv.Itoa(i) + ": invalid type " + strconv.Quote(s.Type)
		}
		for k := range s.Data {
			if !validName(k, false) {
				return false, "segment " + strconv.Itoa(i) + ": invalid key " + strconv.Quote(k)
			}
		}
	}
	return true, ""
}

// EqualMessages reports whether two messages have the same segments; a nil
// data map equals an empty one.
func EqualMessages(a, b Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || len(a[i].Data) != len(b[i].Data) {
			return false
		}
		for k, v := range a[i].Data {
			if w, ok := b[i].Data[k]; !ok || w != v {
				return false
			}
		}
	}
	return true
}
