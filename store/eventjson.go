package store

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
)

// The transcript stores every event as its JSON encoding. encoding/json
// reaches each field through reflection, which cost 3–5 % of the CPU in
// the queue and ignored-message benchmarks; appendEventJSON writes the same
// bytes directly. TestEventJSONMatchesMarshal and FuzzEventJSON hold it to
// Marshal's output byte for byte, and TestEventJSONKnowsEveryField fails
// when a field is added to one of the event types and not here.

// appendEventJSON appends json.Marshal(ev) to dst. ok is false (and dst
// must be discarded) when ev holds something it leaves to Marshal: a time
// Marshal refuses, or a raw payload that is not valid JSON.
func appendEventJSON(dst []byte, ev *channel.Event) (_ []byte, ok bool) {
	dst = append(dst, `{"platform":`...)
	dst = appendJSONString(dst, ev.Platform)
	if ev.Profile != "" {
		dst = append(dst, `,"profile":`...)
		dst = appendJSONString(dst, ev.Profile)
	}
	dst = append(dst, `,"bot_id":`...)
	dst = appendJSONString(dst, ev.BotID)
	dst = append(dst, `,"kind":`...)
	dst = appendJSONString(dst, string(ev.Kind))
	dst = append(dst, `,"chat":{"kind":`...)
	dst = appendJSONString(dst, string(ev.Chat.Kind))
	dst = append(dst, `,"id":`...)
	dst = appendJSONString(dst, ev.Chat.ID)
	dst = append(dst, '}')
	if ev.SessionKey != "" {
		dst = append(dst, `,"session_key":`...)
		dst = appendJSONString(dst, ev.SessionKey)
	}
	dst = append(dst, `,"message_id":`...)
	dst = appendJSONString(dst, ev.MessageID)
	if ev.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendInt(dst, ev.Seq, 10)
	}
	dst = append(dst, `,"time":`...)
	if dst, ok = appendJSONTime(dst, ev.Time); !ok {
		return dst, false
	}
	dst = append(dst, `,"sender":`...)
	dst = appendSenderJSON(dst, &ev.Sender)
	if len(ev.Segments) > 0 {
		dst = append(dst, `,"segments":`...)
		dst = appendSegmentsJSON(dst, ev.Segments)
	}
	if q := ev.Quoted; q != nil {
		dst = append(dst, `,"quoted":{"message_id":`...)
		dst = appendJSONString(dst, q.MessageID)
		dst = append(dst, `,"sender":`...)
		dst = appendSenderJSON(dst, &q.Sender)
		if q.Text != "" {
			dst = append(dst, `,"text":`...)
			dst = appendJSONString(dst, q.Text)
		}
		if len(q.Segments) > 0 {
			dst = append(dst, `,"segments":`...)
			dst = appendSegmentsJSON(dst, q.Segments)
		}
		if q.FromBot {
			dst = append(dst, `,"from_bot":true`...)
		}
		dst = append(dst, '}')
	}
	if ev.ToMe {
		dst = append(dst, `,"to_me":true`...)
	}
	if n := ev.Notice; n != nil {
		dst = append(dst, `,"notice":{"type":`...)
		dst = appendJSONString(dst, n.Type)
		dst = appendOptString(dst, `,"operator":`, n.Operator)
		dst = appendOptString(dst, `,"user_id":`, n.UserID)
		dst = appendOptString(dst, `,"target_message_id":`, n.TargetMessageID)
		dst = appendOptString(dst, `,"flag":`, n.Flag)
		dst = appendOptString(dst, `,"comment":`, n.Comment)
		dst = append(dst, '}')
	}
	dst = appendOptString(dst, `,"source":`, string(ev.Source))
	if len(ev.Raw) > 0 {
		dst = append(dst, `,"raw":`...)
		// Marshal compacts a raw message and escapes HTML in it.
		var compact bytes.Buffer
		if err := json.Compact(&compact, ev.Raw); err != nil {
			return dst, false
		}
		out := bytes.NewBuffer(dst) // HTMLEscape appends to dst
		json.HTMLEscape(out, compact.Bytes())
		dst = out.Bytes()
	}
	return append(dst, '}'), true
}

func appendSenderJSON(dst []byte, s *channel.Sender) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, s.ID)
	dst = appendOptString(dst, `,"name":`, s.Name)
	dst = appendOptString(dst, `,"role":`, string(s.Role))
	if s.Level != 0 {
		dst = append(dst, `,"level":`...)
		dst = strconv.AppendInt(dst, int64(s.Level), 10)
	}
	if s.LevelKnown {
		dst = append(dst, `,"level_known":true`...)
	}
	if s.IsBot {
		dst = append(dst, `,"is_bot":true`...)
	}
	return append(dst, '}')
}

// appendJSONArray appends the JSON array of xs, each element written by
// each.
func appendJSONArray[T any](dst []byte, xs []T, each func([]byte, *T) []byte) []byte {
	dst = append(dst, '[')
	for i := range xs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = each(dst, &xs[i])
	}
	return append(dst, ']')
}

func appendSegmentsJSON(dst []byte, segs []channel.Segment) []byte {
	return appendJSONArray(dst, segs, appendSegmentJSON)
}

func appendSegmentJSON(dst []byte, s *channel.Segment) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendJSONString(dst, string(s.Type))
	dst = appendOptString(dst, `,"text":`, s.Text)
	dst = appendOptString(dst, `,"user_id":`, s.UserID)
	dst = appendOptString(dst, `,"message_id":`, s.MessageID)
	if m := s.Media; m != nil {
		dst = append(dst, `,"media":{`...)
		n := len(dst)
		dst = appendOptString(dst, `,"url":`, m.URL)
		dst = appendOptString(dst, `,"file_id":`, m.FileID)
		dst = appendOptString(dst, `,"name":`, m.Name)
		dst = appendOptString(dst, `,"mime":`, m.MIME)
		if m.Size != 0 {
			dst = append(dst, `,"size":`...)
			dst = strconv.AppendInt(dst, m.Size, 10)
		}
		dst = appendOptString(dst, `,"sha256":`, m.SHA256)
		if m.Duration != 0 {
			dst = append(dst, `,"duration":`...)
			dst = strconv.AppendInt(dst, int64(m.Duration), 10)
		}
		dst = appendOptString(dst, `,"description":`, m.Description)
		dst = appendOptString(dst, `,"transcript":`, m.Transcript)
		dst = appendOptString(dst, `,"album":`, m.Album)
		if len(dst) > n {
			// Drop the comma the first field put after "{".
			dst = append(dst[:n], dst[n+1:]...)
		}
		dst = append(dst, '}')
	}
	dst = appendOptString(dst, `,"url":`, s.URL)
	dst = appendOptString(dst, `,"face_id":`, s.FaceID)
	return append(dst, '}')
}

// appendOptString appends key and s unless s is empty (omitempty).
func appendOptString(dst []byte, key, s string) []byte {
	if s == "" {
		return dst
	}
	return appendJSONString(append(dst, key...), s)
}

// appendJSONTime appends t as time.Time's MarshalJSON does; ok is false
// for the times it refuses (a year outside 0–9999, or a zone offset with
// seconds).
func appendJSONTime(dst []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return dst, false
	}
	if _, off := t.Zone(); off%60 != 0 {
		return dst, false
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), true
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way encoding/json writes
// it: quotes and backslashes escaped; \b, \f, \n, \r and \t by name, other
// control bytes as \u00XX; <, > and & as \u003c, \u003e and \u0026; each
// invalid UTF-8 byte as \ufffd; U+2028 and U+2029 as \u2028 and \u2029.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendTokensJSON appends json.Marshal(ts) for a non-empty ts: the
// outcome's token usage, written on every completion.
func appendTokensJSON(dst []byte, ts []inbound.Tokens) []byte {
	return appendJSONArray(dst, ts, func(dst []byte, t *inbound.Tokens) []byte {
		dst = append(dst, `{"purpose":`...)
		dst = appendJSONString(dst, t.Purpose)
		dst = appendOptString(dst, `,"model":`, t.Model)
		dst = append(dst, `,"input":`...)
		dst = strconv.AppendInt(dst, int64(t.Input), 10)
		dst = append(dst, `,"cached_input":`...)
		dst = strconv.AppendInt(dst, int64(t.CachedInput), 10)
		dst = append(dst, `,"output":`...)
		dst = strconv.AppendInt(dst, int64(t.Output), 10)
		return append(dst, '}')
	})
}

// appendStringsJSON appends json.Marshal(ss) for a non-empty ss.
func appendStringsJSON(dst []byte, ss []string) []byte {
	return appendJSONArray(dst, ss, func(dst []byte, s *string) []byte { return appendJSONString(dst, *s) })
}
