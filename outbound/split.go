package outbound

import (
	"regexp"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// Default markers. The model separates chat messages with MsgMarker and
// breaks lines inside one with LineMarker; control markers steer the review.
const (
	MsgMarker     = "[persona-msg]"
	LineMarker    = "[persona-line]"
	MarkerSilent  = "[[SILENT]]"
	MarkerPause   = "[[PAUSE_30M]]"
	MarkerRefuse  = "[[REFUSE]]"
	MarkerNoImage = "[[NO_IMAGE]]"
)

var controlMarker = regexp.MustCompile(`\[\[(SILENT|PAUSE_30M|REFUSE|NO_IMAGE)\]\]`)

// StripControl removes every control marker from text.
func StripControl(text string) string { return controlMarker.ReplaceAllString(text, "") }

// Measure returns the length of s in the given unit.
func Measure(s string, unit channel.TextUnit) int {
	switch unit {
	case channel.Bytes:
		return len(s)
	case channel.UTF16:
		n := 0
		for _, r := range s {
			n += utf16.RuneLen(r)
		}
		return n
	default:
		return utf8.RuneCountInString(s)
	}
}

// SplitOptions tune Split. The zero value uses the default markers and
// removes trailing full stops.
type SplitOptions struct {
	// MsgMarker and LineMarker override the defaults.
	MsgMarker  string
	LineMarker string
	// KeepFullStop keeps a chunk's trailing "." or "。".
	KeepFullStop bool
}

// Split shapes a reply into chunks: it splits on the message marker, turns
// line markers into line breaks, strips control markers, drops empty chunks,
// removes a trailing full stop (not an ellipsis, never after code), and
// splits any chunk over the limit at the most natural boundary that fits
// (paragraph, line, sentence end, whitespace), falling back to a hard split
// between runes. Only whitespace at a cut is dropped, never text, and no
// chunk exceeds the limit in its unit.
func Split(text string, limit channel.TextLimit, opt SplitOptions) []string {
	msg, line := opt.MsgMarker, opt.LineMarker
	if msg == "" {
		msg = MsgMarker
	}
	if line == "" {
		line = LineMarker
	}
	text = StripControl(text)
	var out []string
	for _, part := range strings.Split(text, msg) {
		part = strings.TrimSpace(strings.ReplaceAll(part, line, "\n"))
		if !opt.KeepFullStop {
			part = trimFullStop(part)
		}
		if part == "" {
			continue
		}
		out = append(out, splitToLimit(part, limit)...)
	}
	return out
}

func trimFullStop(s string) string {
	if strings.Contains(s, "```") {
		return s
	}
	switch {
	case strings.HasSuffix(s, "。"):
		return strings.TrimSuffix(s, "。")
	case strings.HasSuffix(s, ".") && !strings.HasSuffix(s, ".."):
		return strings.TrimSuffix(s, ".")
	}
	return s
}

// splitToLimit cuts s into pieces that each fit the limit.
func splitToLimit(s string, limit channel.TextLimit) []string {
	if limit.Max <= 0 || Measure(s, limit.Unit) <= limit.Max {
		return []string{s}
	}
	var out []string
	for Measure(s, limit.Unit) > limit.Max {
		cut := fitPrefix(s, limit)
		head := s[:cut]
		if b := naturalBreak(head); b > 0 {
			cut = b
			head = s[:cut]
		}
		if h := strings.TrimRight(head, " \n\t"); h != "" {
			out = append(out, h)
		}
		s = strings.TrimLeft(s[cut:], " \n\t")
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// fitPrefix returns the byte length of the longest rune-aligned prefix of s
// that fits the limit (at least one rune).
func fitPrefix(s string, limit channel.TextLimit) int {
	n, size := 0, 0
	for i, r := range s {
		var w int
		switch limit.Unit {
		case channel.Bytes:
			w = utf8.RuneLen(r)
		case channel.UTF16:
			w = utf16.RuneLen(r)
		default:
			w = 1
		}
		if size+w > limit.Max {
			if i == 0 {
				return utf8.RuneLen(r)
			}
			return i
		}
		size += w
		n = i + utf8.RuneLen(r)
	}
	return n
}

// naturalBreak returns the end of the best boundary in head, searching only
// its second half so chunks stay reasonably full; 0 means none.
func naturalBreak(head string) int {
	half := len(head) / 2
	for _, sep := range []string{"\n\n", "\n"} {
		if i := strings.LastIndex(head, sep); i > half {
			return i + len(sep)
		}
	}
	best := 0
	for i, r := range head {
		if i < half {
			continue
		}
		switch r {
		case '。', '！', '？', '.', '!', '?', '；', ';':
			best = i + utf8.RuneLen(r)
		}
	}
	if best > 0 {
		return best
	}
	if i := strings.LastIndexAny(head, " \t"); i > half {
		return i + 1
	}
	return 0
}
