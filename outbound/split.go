package outbound

import (
	"regexp"
	"strings"
	"unicode"
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
// chunk exceeds the limit in its unit (unless the limit is narrower than a
// single rune, which then goes out alone).
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
			// Trim again: "ok ." loses its stop and then its space.
			part = strings.TrimSpace(trimFullStop(part))
		}
		if part == "" {
			continue
		}
		out = append(out, splitPart(part, limit)...)
	}
	return out
}

// splitPart cuts one message part to the limit. A part with fenced code
// blocks is cut around them: prose at natural boundaries, code between
// lines, each piece of a block closed with a fence and the next one
// reopened ("```"), and the pieces packed back together while they fit.
// When the limit is too narrow for fences the part is split as prose.
func splitPart(s string, limit channel.TextLimit) []string {
	if limit.Max <= 0 || Measure(s, limit.Unit) <= limit.Max {
		return []string{s}
	}
	if !strings.Contains(s, "```") {
		return splitToLimit(s, limit)
	}
	segs := fenceSegments(s)
	hasCode := false
	for _, sg := range segs {
		hasCode = hasCode || sg.code
	}
	if !hasCode {
		return splitToLimit(s, limit)
	}
	var pieces []string
	for _, sg := range segs {
		if sg.code {
			pieces = append(pieces, splitCode(sg.text, limit)...)
			continue
		}
		if t := strings.TrimSpace(sg.text); t != "" {
			pieces = append(pieces, splitToLimit(t, limit)...)
		}
	}
	// Pack neighbours back together while they fit.
	var out []string
	for _, p := range pieces {
		if n := len(out); n > 0 && Measure(out[n-1], limit.Unit)+1+Measure(p, limit.Unit) <= limit.Max {
			out[n-1] += "\n" + p
			continue
		}
		out = append(out, p)
	}
	return out
}

// segment is prose or one fenced code block (fence lines included).
type segment struct {
	text string
	code bool
}

// fenceSegments cuts s into prose and fenced code blocks. An unclosed fence
// runs to the end of s.
func fenceSegments(s string) []segment {
	var segs []segment
	var cur strings.Builder
	inCode := false
	flush := func(code bool) {
		if cur.Len() > 0 {
			segs = append(segs, segment{text: strings.TrimSuffix(cur.String(), "\n"), code: code})
			cur.Reset()
		}
	}
	for line := range strings.SplitSeq(s, "\n") {
		switch {
		case isFence(line) && !inCode:
			flush(false)
			inCode = true
			cur.WriteString(line + "\n")
		case isFence(line) && inCode:
			cur.WriteString(line + "\n")
			flush(true)
			inCode = false
		default:
			cur.WriteString(line + "\n")
		}
	}
	flush(inCode)
	return segs
}

// codeFence closes a code piece and reopens the next one.
const codeFence = "```"

// splitCode cuts one fenced block into pieces that fit the limit, each a
// complete block: the first keeps the opening fence line (with its
// language), later ones reopen with a bare fence, and every piece is
// closed. Lines are kept whole unless one alone is too long.
func splitCode(block string, limit channel.TextLimit) []string {
	if Measure(block, limit.Unit) <= limit.Max {
		return []string{block}
	}
	lines := strings.Split(block, "\n")
	open := strings.TrimSpace(lines[0])
	body := lines[1:]
	if n := len(body); n > 0 && strings.TrimSpace(body[n-1]) == codeFence {
		body = body[:n-1]
	}
	budget := func(first bool) int {
		o := codeFence
		if first {
			o = open
		}
		return limit.Max - Measure(o+"\n\n"+codeFence, limit.Unit)
	}
	if budget(true) < 4 || budget(false) < 4 {
		// Too narrow for fences: split as prose.
		return splitToLimit(block, limit)
	}
	var bodies []string
	var cur []string
	curLen := 0
	flush := func() {
		if t := strings.Join(cur, "\n"); strings.TrimSpace(t) != "" {
			bodies = append(bodies, t)
		}
		cur, curLen = nil, 0
	}
	for _, ln := range body {
		b := budget(len(bodies) == 0)
		n := Measure(ln, limit.Unit)
		switch {
		case n > b:
			flush()
			for ln != "" {
				cut := fitPrefix(ln, channel.TextLimit{Unit: limit.Unit, Max: budget(len(bodies) == 0)})
				bodies = append(bodies, ln[:cut])
				ln = ln[cut:]
			}
		case len(cur) > 0 && curLen+1+n > b:
			flush()
			cur, curLen = []string{ln}, n
		case len(cur) > 0:
			cur, curLen = append(cur, ln), curLen+1+n
		default:
			cur, curLen = []string{ln}, n
		}
	}
	flush()
	out := make([]string, 0, len(bodies))
	for i, b := range bodies {
		o := codeFence
		if i == 0 {
			o = open
		}
		out = append(out, o+"\n"+b+"\n"+codeFence)
	}
	if len(out) == 0 {
		return splitToLimit(block, limit)
	}
	return out
}

func trimFullStop(s string) string {
	if strings.Contains(s, "```") {
		return s
	}
	switch {
	case strings.HasSuffix(s, "。") && !strings.HasSuffix(s, "。。"):
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
	// fitPrefix reads at most one limit's worth of s, so the loop stays
	// linear in len(s) (re-measuring the whole rest on every round made
	// long replies with a small limit quadratic).
	for cut := fitPrefix(s, limit); cut < len(s); cut = fitPrefix(s, limit) {
		if b := naturalBreak(s, cut); b > 0 {
			cut = b
		}
		// Any Unicode space (also the "\r" of a CRLF) is dropped at a cut,
		// so no chunk starts or ends with one or is blank.
		if h := strings.TrimRightFunc(s[:cut], unicode.IsSpace); h != "" {
			out = append(out, h)
		}
		s = strings.TrimLeftFunc(s[cut:], unicode.IsSpace)
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// fitPrefix returns the byte length of the longest rune-aligned prefix of s
// that fits the limit (at least one rune). It steps by the bytes actually
// decoded, so an invalid byte (decoded as a 1-byte U+FFFD) cannot push the
// cut past the end of s.
func fitPrefix(s string, limit channel.TextLimit) int {
	size := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		var w int
		switch limit.Unit {
		case channel.Bytes:
			w = n
		case channel.UTF16:
			w = utf16.RuneLen(r)
		default:
			w = 1
		}
		if size+w > limit.Max {
			if i == 0 {
				return n
			}
			return i
		}
		size += w
		i += n
	}
	return len(s)
}

// naturalBreak returns the end of the best boundary in head = s[:cut],
// searching only its second half so chunks stay reasonably full; 0 means
// none. An ASCII sentence mark counts only when followed by a space (or the
// end of s), so "3.14", "v1.2" and URLs are not cut at their dots.
//
// A separator right after head (s[cut] is a space or a line break) counts
// too: cutting there keeps the chunk full. The returned end may then stop
// before the separator; the splitter trims it either way.
func naturalBreak(s string, cut int) int {
	head := s[:cut]
	half := len(head) / 2
	for _, sep := range []string{"\n\n", "\n"} {
		if i := strings.LastIndex(s[:min(cut+len(sep), len(s))], sep); i > half {
			return i
		}
	}
	best := 0
	for i, r := range head {
		if i < half {
			continue
		}
		switch r {
		case '。', '！', '？', '；':
			best = i + utf8.RuneLen(r)
		case '.', '!', '?', ';':
			if next := i + 1; next == len(s) || isSpaceAt(s, next) {
				best = next
			}
		}
	}
	if best > 0 {
		return best
	}
	if i := strings.LastIndexAny(s[:min(cut+1, len(s))], " \t"); i > half {
		return i
	}
	return 0
}

func isSpaceAt(s string, i int) bool {
	r, _ := utf8.DecodeRuneInString(s[i:])
	return unicode.IsSpace(r)
}
