package outbound

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

// PlatformLimits are the default per-chunk text limits, in each
// platform's own unit, keyed by platform id. Adapters declare their
// limit through channel.TextLimiter (and may lower it); this table is the
// documented default they start from.
var PlatformLimits = map[string]channel.TextLimit{
	"onebot":   {Unit: channel.Runes, Max: 900},  // account-safety sized
	"telegram": {Unit: channel.UTF16, Max: 4000}, // 4096 UTF-16 units, chunked at 4000
	"qq":       {Unit: channel.Bytes, Max: 2000}, // conservative
	"dingtalk": {Unit: channel.Runes, Max: 4000},
	"feishu":   {Unit: channel.Runes, Max: 4000},
	"wecom":    {Unit: channel.Bytes, Max: 2048}, // app text; AI-bot stream 20,480
}

// Shaping defaults.
const (
	DefaultMaxChunks       = 8
	DefaultCompressTimeout = 30 * time.Second
	DefaultCompressCalls   = 2
)

// RichTexter is an optional channel capability: a channel whose RichText
// returns true renders Markdown itself, so shaping keeps it. Every other
// channel gets plain text.
type RichTexter interface {
	RichText() bool
}

// ShapeOptions tune [Shape] and [ShapeReply].
type ShapeOptions struct {
	Split SplitOptions
	// RichText keeps Markdown (the platform renders it).
	RichText bool
	// MaxChunks triggers compression when the reply would need more chunks
	// (default 8; negative turns compression off).
	MaxChunks int
	// Compressor shortens an over-long reply (agent.PurposeCompress). nil
	// turns compression off; the reply then goes out in as many chunks as
	// it needs.
	Compressor      agent.Model
	CompressTimeout time.Duration // 30 s
	CompressCalls   int           // at most 2 calls per reply
}

// Shaped is a reply shaped into chunks.
type Shaped struct {
	Chunks []string
	// Compressions is the number of compression calls made.
	Compressions int
	Usage        []ModelUsage
}

// Shape prepares a reply's text before splitting: control markers are
// stripped, tool calls written as prose are removed, and Markdown becomes
// plain text unless rich is set. Split markers are kept.
func Shape(text string, rich bool) string {
	text = StripControl(text)
	text = StripProseToolCalls(text)
	if !rich {
		text = MarkdownToPlain(text)
	}
	return text
}

// ShapeReply shapes and splits a reply for a limit: [Shape], then [Split]
// (markers, natural boundaries, code blocks with their fences closed and
// reopened). When the reply needs more than MaxChunks chunks it is
// compressed by the model (at most CompressCalls calls of CompressTimeout
// each) and split again; a reply still too long after that goes out in all
// its chunks — nothing is truncated. A failed compression keeps the text.
func ShapeReply(ctx context.Context, text string, limit channel.TextLimit, opt ShapeOptions) Shaped {
	maxChunks := opt.MaxChunks
	if maxChunks == 0 {
		maxChunks = DefaultMaxChunks
	}
	calls := opt.CompressCalls
	if calls <= 0 {
		calls = DefaultCompressCalls
	}
	timeout := opt.CompressTimeout
	if timeout <= 0 {
		timeout = DefaultCompressTimeout
	}
	text = Shape(text, opt.RichText)
	out := Shaped{Chunks: Split(text, limit, opt.Split)}
	for maxChunks > 0 && opt.Compressor != nil && len(out.Chunks) > maxChunks && out.Compressions < calls {
		out.Compressions++
		short, u, err := compress(ctx, opt.Compressor, text, limit, maxChunks, timeout)
		if u != nil {
			out.Usage = append(out.Usage, *u)
		}
		if err != nil || strings.TrimSpace(short) == "" {
			continue
		}
		short = Shape(short, opt.RichText)
		if c := Split(short, limit, opt.Split); len(c) > 0 && len(c) <= len(out.Chunks) {
			text, out.Chunks = short, c
		}
	}
	return out
}

func compress(ctx context.Context, m agent.Model, text string, limit channel.TextLimit, maxChunks int, timeout time.Duration) (string, *ModelUsage, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	unit := map[channel.TextUnit]string{channel.Runes: "characters", channel.Bytes: "bytes", channel.UTF16: "UTF-16 units"}[limit.Unit]
	resp, err := m.Generate(cctx, agent.Request{Purpose: agent.PurposeCompress, Messages: []agent.Message{
		{Role: agent.RoleSystem, Content: fmt.Sprintf("Shorten the chat reply below so it fits in at most %d messages of %d %s each. "+
			"Keep its meaning, voice and any code; keep the %s separators between messages. Answer with the shortened reply only.",
			maxChunks, limit.Max, unit, MsgMarker)},
		{Role: agent.RoleUser, Content: text},
	}})
	if err != nil {
		return "", nil, err
	}
	if resp == nil {
		return "", nil, errUnparsable
	}
	return resp.Text, &ModelUsage{Purpose: agent.PurposeCompress, Model: resp.Model, Usage: resp.Usage}, nil
}

var (
	proseToolTag  = regexp.MustCompile(`(?s)<(tool_call|tool_use|function_call|function_calls|invoke)\b[^>]*>.*?</(tool_call|tool_use|function_call|function_calls|invoke)>\s*`)
	proseToolJSON = regexp.MustCompile(`(?m)^[ \t]*\{[ \t]*"(name|tool|function|tool_name)"[ \t]*:[^\n]*"(arguments|parameters|args|input)"[ \t]*:[^\n]*\}[ \t]*\n?`)
	proseToolFunc = regexp.MustCompile(`(?m)^[ \t]*(functions|tools)\.[A-Za-z_][A-Za-z0-9_]*\(.*\)[ \t]*\n?`)
	proseToolCode = regexp.MustCompile("(?s)```(tool_call|tool_code|function_call)\\b.*?```\\s*")
)

// StripProseToolCalls removes tool calls the model wrote as text instead of
// calling the tool: <tool_call>…</tool_call>-style tags, ```tool_call
// blocks, JSON call objects alone on a line, and functions.name(…) lines.
func StripProseToolCalls(text string) string { return stripProseToolCalls(text, true) }

// stripProseToolCalls is StripProseToolCalls; without checks it runs every
// expression. With them an expression runs only when the text holds a byte
// every match of it needs. Removing a match only deletes bytes, so a byte
// absent before is absent after.
func stripProseToolCalls(text string, checks bool) string {
	var has byteSet
	if checks {
		has = bytesOf(text)
	}
	if !checks || has.any('<') {
		text = proseToolTag.ReplaceAllString(text, "")
	}
	if !checks || has.any('`') {
		text = proseToolCode.ReplaceAllString(text, "")
	}
	if !checks || has.any('{') {
		text = proseToolJSON.ReplaceAllString(text, "")
	}
	if !checks || has.all('.', '(') {
		text = proseToolFunc.ReplaceAllString(text, "")
	}
	return text
}

// byteSet records which ASCII bytes a text holds.
type byteSet [2]uint64

// bytesOf returns the set of ASCII bytes in s.
func bytesOf(s string) byteSet {
	var b byteSet
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 128 {
			b[c>>6] |= 1 << (c & 63)
		}
	}
	return b
}

func (b byteSet) has(c byte) bool { return b[c>>6]&(1<<(c&63)) != 0 }

// any reports whether the set holds one of cs.
func (b byteSet) any(cs ...byte) bool {
	for _, c := range cs {
		if b.has(c) {
			return true
		}
	}
	return false
}

// all reports whether the set holds every one of cs.
func (b byteSet) all(cs ...byte) bool {
	for _, c := range cs {
		if !b.has(c) {
			return false
		}
	}
	return true
}

var (
	mdHeading   = regexp.MustCompile(`^[ \t]{0,3}#{1,6}[ \t]+(.*?)[ \t#]*$`)
	mdRule      = regexp.MustCompile(`^[ \t]{0,3}([-*_][ \t]*){3,}$`)
	mdBullet    = regexp.MustCompile(`^([ \t]*)[*+][ \t]+`)
	mdQuote     = regexp.MustCompile(`^[ \t]{0,3}>[ \t]?`)
	mdImage     = regexp.MustCompile(`!\[([^\]]*)\]\(([^)\s]+)(?:[ \t]+"[^"]*")?\)`)
	mdLink      = regexp.MustCompile(`\[([^\]]+)\]\(([^)\s]+)(?:[ \t]+"[^"]*")?\)`)
	mdBold      = regexp.MustCompile(`(\*\*|__)([^\s*_](?:[^*]*?[^\s*_])?)(\*\*|__)`)
	mdItalic    = regexp.MustCompile(`(^|[^\w*])\*([^\s*](?:[^*\n]*?[^\s*])?)\*([^\w*]|$)`)
	mdStrike    = regexp.MustCompile(`~~([^~\n]+)~~`)
	mdCode      = regexp.MustCompile("`([^`\n]+)`")
	mdAutoLinks = regexp.MustCompile(`<(https?://[^>\s]+)>`)
)

// MarkdownToPlain converts Markdown to plain text for platforms without
// rich text: headings lose their #, bold/italic/strike markers go, links
// become "text (url)" (a link whose text is its url stays the url), images
// "alt (url)", "*"/"+" bullets become "-" (lists stay one item per line),
// block quotes lose their ">", rules disappear and inline code loses its
// backticks. Fenced code blocks are kept as they are.
func MarkdownToPlain(text string) string { return markdownToPlain(text, true) }

// mdBytes are the bytes some Markdown rule needs: a text without any of
// them is plain already.
const mdBytes = "#>*+-_[<~`"

// markdownToPlain is MarkdownToPlain; without checks it runs every
// expression on every line. With them an expression runs only when the
// line holds the bytes every match of it needs. The rules only remove
// bytes, keep substrings of the line, or add ' ', '(', ')' and (the bullet
// rule, after the rule check) '-', none of which a later rule needs, so
// the bytes of the original line decide for all of them.
func markdownToPlain(text string, checks bool) string {
	if checks && !strings.ContainsAny(text, mdBytes) {
		return text
	}
	lines := strings.Split(text, "\n")
	inFence := false
	out := lines[:0]
	for _, ln := range lines {
		if isFence(ln) {
			inFence = !inFence
			out = append(out, ln)
			continue
		}
		if inFence {
			out = append(out, ln)
			continue
		}
		has := byteSet{^uint64(0), ^uint64(0)}
		if checks {
			has = bytesOf(ln)
		}
		if has.any('-', '*', '_') && mdRule.MatchString(ln) && strings.TrimSpace(ln) != "" {
			continue
		}
		if has.has('#') {
			if m := mdHeading.FindStringSubmatch(ln); m != nil {
				ln = m[1]
			}
		}
		if has.has('>') {
			ln = mdQuote.ReplaceAllString(ln, "")
		}
		if has.any('*', '+') {
			ln = mdBullet.ReplaceAllString(ln, "$1- ")
		}
		if has.all('!', '[', ']', '(', ')') {
			ln = mdImage.ReplaceAllStringFunc(ln, func(s string) string {
				m := mdImage.FindStringSubmatch(s)
				return linkText(m[1], m[2])
			})
		}
		if has.all('[', ']', '(', ')') {
			ln = mdLink.ReplaceAllStringFunc(ln, func(s string) string {
				m := mdLink.FindStringSubmatch(s)
				return linkText(m[1], m[2])
			})
		}
		if has.all('<', '>') {
			ln = mdAutoLinks.ReplaceAllString(ln, "$1")
		}
		if has.any('*', '_') {
			ln = mdBold.ReplaceAllString(ln, "$2")
		}
		if has.has('*') {
			ln = mdItalic.ReplaceAllString(ln, "$1$2$3")
		}
		if has.has('~') {
			ln = mdStrike.ReplaceAllString(ln, "$1")
		}
		if has.has('`') {
			ln = mdCode.ReplaceAllString(ln, "$1")
		}
		out = append(out, ln)
	}
	return strings.Join(out, "\n")
}

func linkText(text, url string) string {
	text = strings.TrimSpace(text)
	if text == "" || text == url {
		return url
	}
	return text + " (" + url + ")"
}

// isFence reports whether a line opens or closes a fenced code block.
func isFence(line string) bool {
	return strings.HasPrefix(strings.TrimLeft(line, " \t"), "```")
}
