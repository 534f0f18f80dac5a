package outbound_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outbound"
)

var stripControl = strings.NewReplacer(
	outbound.MarkerSilent, "", outbound.MarkerPause, "", outbound.MarkerRefuse, "", outbound.MarkerNoImage, "",
)

// shapedNoSpace is the reference for FuzzSplit, written independently of
// the splitter: the reply after shaping (control markers stripped, split on
// the message marker, line markers turned into line breaks, each part
// trimmed and its trailing full stop removed) with all white space removed.
// The splitter may only drop white space when it cuts a part to the limit,
// so the chunks, joined and without white space, must equal this.
func shapedNoSpace(text string, keepFullStop bool) string {
	text = stripControl.Replace(text)
	var b strings.Builder
	for _, part := range strings.Split(text, outbound.MsgMarker) {
		part = strings.TrimSpace(strings.ReplaceAll(part, outbound.LineMarker, "\n"))
		if !keepFullStop && !strings.Contains(part, "```") {
			switch {
			case strings.HasSuffix(part, "。。"), strings.HasSuffix(part, ".."):
				// an ellipsis stays
			case strings.HasSuffix(part, "。"):
				part = part[:len(part)-len("。")]
			case strings.HasSuffix(part, "."):
				part = part[:len(part)-1]
			}
		}
		b.WriteString(noSpace(part))
	}
	return b.String()
}

// FuzzSplit checks the splitter's invariants for every unit:
//   - no chunk exceeds the limit (the limit is at least one rune wide in
//     every unit: 4 bytes, 2 UTF-16 units, 1 rune);
//   - every chunk is non-empty, has no leading or trailing white space and
//     is valid UTF-8 when the input is;
//   - no text is lost or changed: the chunks without white space, joined,
//     equal the shaped input without white space (shapedNoSpace); code
//     blocks cut in two get a closing and a reopening fence, so backticks
//     are left out of the comparison too.
//
// testdata/fuzz/FuzzSplit holds the inputs earlier runs failed on.
func FuzzSplit(f *testing.F) {
	seeds := []string{
		"",
		"hello.",
		"Hello there. How are you? I'm fine!",
		"one[persona-msg]two[persona-line]three[persona-msg][[SILENT]]four。",
		"[[REFUSE]][[PAUSE_30M]] ok ... [[NO_IMAGE]]",
		"今天天气很好。我们去公园散步吧！好不好？一二三四五六七八九十",
		"😀😀😀 👨‍👩‍👧 🇯🇵 emoji\n\nnext paragraph\nline",
		"```go\nfunc main() {}.\n```",
		"the value of pi is 3.14159 and e is 2.71828. https://example.com/a.b",
		"first line\r\nsecond line\r\n\r\nthird",
		"a . [persona-msg] 。 [persona-msg] .. [persona-msg]。。。",
		"\u00a0\u3000full-width space\u3000here\u2028and\u2029there\u0085",
		"[persona-[[SILENT]]msg] formed after stripping",
		"\xff\xfe invalid \xed\xa0\x80 utf8",
		strings.Repeat("word ", 200),
		strings.Repeat("字", 500),
		"intro\n```go\n" + strings.Repeat("fmt.Println(\"hello, world\")\n", 40) + "```\noutro text here.",
		"```\n" + strings.Repeat("x", 300) + "\n```",
		"a\n```python\nprint(1)\n\n\nprint(2)\n```\nb\n```\nunclosed " + strings.Repeat("y ", 100),
		"x ```not a fence``` y " + strings.Repeat("z ", 60),
	}
	for i, s := range seeds {
		f.Add(s, uint16(4+i*7), i%2 == 0)
	}
	f.Fuzz(func(t *testing.T, text string, max uint16, keepFullStop bool) {
		want := noTicks(shapedNoSpace(text, keepFullStop))
		opt := outbound.SplitOptions{KeepFullStop: keepFullStop}
		for _, unit := range []channel.TextUnit{channel.Runes, channel.Bytes, channel.UTF16} {
			limit := channel.TextLimit{Unit: unit, Max: 4 + int(max%512)}
			chunks := outbound.Split(text, limit, opt)
			for i, c := range chunks {
				if n := outbound.Measure(c, unit); n > limit.Max {
					t.Fatalf("unit %d: chunk %d is %d units over the limit %d: %q", unit, i, n, limit.Max, c)
				}
				if c == "" || strings.TrimSpace(c) != c {
					t.Fatalf("unit %d: chunk %d is empty or has white space at an edge: %q", unit, i, c)
				}
				if utf8.ValidString(text) && !utf8.ValidString(c) {
					t.Fatalf("unit %d: chunk %d is not valid UTF-8: %q", unit, i, c)
				}
			}
			// White space is removed chunk by chunk (and part by part in
			// shapedNoSpace): on invalid UTF-8, joining first could fuse
			// stray bytes on both sides of a cut into a new space rune.
			var got strings.Builder
			for _, c := range chunks {
				got.WriteString(noTicks(noSpace(c)))
			}
			if got.String() != want {
				t.Fatalf("unit %d, max %d: text changed\ninput:  %q\nchunks: %q\ngot:  %q\nwant: %q", unit, limit.Max, text, chunks, got.String(), want)
			}
		}
	})
}

// noTicks drops backticks: the splitter adds fences when it cuts a code
// block, and nothing else.
func noTicks(s string) string { return strings.ReplaceAll(s, "`", "") }
