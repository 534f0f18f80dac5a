package outbound_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outbound"
)

var noLimit = channel.TextLimit{}

func runes(max int) channel.TextLimit { return channel.TextLimit{Unit: channel.Runes, Max: max} }

func TestStripControl(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"hello", "hello"},
		{"[[SILENT]]", ""},
		{"a[[PAUSE_30M]]b[[REFUSE]]c[[NO_IMAGE]]d", "abcd"},
		{"[[SILENT]][[SILENT]]", ""},
		{"[[silent]] stays", "[[silent]] stays"},
		{"[[OTHER]] stays", "[[OTHER]] stays"},
		{"[SILENT] stays", "[SILENT] stays"},
		{"[[[[SILENT]]SILENT]]", "[[SILENT]]"}, // one pass, like the splitter
		{"[persona-msg] is not a control marker", "[persona-msg] is not a control marker"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, outbound.StripControl(tt.in), "%q", tt.in)
	}
}

func TestMeasure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		s                   string
		runes, bytes, utf16 int
	}{
		{name: "empty", s: "", runes: 0, bytes: 0, utf16: 0},
		{name: "ascii", s: "hello", runes: 5, bytes: 5, utf16: 5},
		{name: "latin-1", s: "héllo", runes: 5, bytes: 6, utf16: 5},
		{name: "CJK", s: "你好", runes: 2, bytes: 6, utf16: 2},
		{name: "BMP symbol", s: "★", runes: 1, bytes: 3, utf16: 1},
		{name: "emoji (non-BMP)", s: "😀", runes: 1, bytes: 4, utf16: 2},
		{name: "emoji with skin tone", s: "👍🏽", runes: 2, bytes: 8, utf16: 4},
		{name: "ZWJ family", s: "👨‍👩‍👧", runes: 5, bytes: 18, utf16: 8},
		{name: "flag", s: "🇯🇵", runes: 2, bytes: 8, utf16: 4},
		{name: "mixed", s: "hi 你好 😀!", runes: 8, bytes: 15, utf16: 9},
		{name: "newline", s: "a\nb", runes: 3, bytes: 3, utf16: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.runes, outbound.Measure(tt.s, channel.Runes), "runes")
			require.Equal(t, tt.bytes, outbound.Measure(tt.s, channel.Bytes), "bytes")
			require.Equal(t, tt.utf16, outbound.Measure(tt.s, channel.UTF16), "utf16")
			require.Equal(t, tt.runes, outbound.Measure(tt.s, channel.TextUnit(99)), "unknown unit counts runes")
		})
	}
}

func TestSplitShaping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		opt  outbound.SplitOptions
		want []string
	}{
		{name: "empty", in: "", want: nil},
		{name: "blank", in: " \n\t ", want: nil},
		{name: "single", in: "hello", want: []string{"hello"}},
		{name: "trimmed", in: "  hello \n", want: []string{"hello"}},
		{name: "message marker", in: "one[persona-msg]two[persona-msg]three", want: []string{"one", "two", "three"}},
		{name: "spaces around message markers", in: "one [persona-msg]\n two \n[persona-msg] three", want: []string{"one", "two", "three"}},
		{name: "line marker", in: "line one[persona-line]line two", want: []string{"line one\nline two"}},
		{name: "line marker at the edges", in: "[persona-line]x[persona-line]", want: []string{"x"}},
		{name: "both markers", in: "a[persona-line]b[persona-msg]c[persona-line]d", want: []string{"a\nb", "c\nd"}},
		{name: "control markers stripped", in: "[[PAUSE_30M]]ok then[[NO_IMAGE]]", want: []string{"ok then"}},
		{name: "control marker only", in: "[[SILENT]]", want: nil},
		{name: "control marker in its own chunk", in: "hi[persona-msg][[REFUSE]][persona-msg]there", want: []string{"hi", "there"}},
		{name: "empty chunks dropped", in: "[persona-msg][persona-msg] a [persona-msg] \n [persona-msg]", want: []string{"a"}},
		{name: "unknown control-like text kept", in: "[[WAVE]] hi", want: []string{"[[WAVE]] hi"}},

		// Trailing full stops.
		{name: "full stop removed", in: "Hello there.", want: []string{"Hello there"}},
		{name: "CJK full stop removed", in: "你好。", want: []string{"你好"}},
		{name: "full stop per chunk", in: "One.[persona-msg]Two。[persona-msg]Three", want: []string{"One", "Two", "Three"}},
		{name: "full stop before trailing space", in: "Hello.  \n", want: []string{"Hello"}},
		{name: "space before the full stop", in: "ok .", want: []string{"ok"}},
		{name: "inner full stops kept", in: "a. b. c.", want: []string{"a. b. c"}},
		{name: "ellipsis kept", in: "Wait...", want: []string{"Wait..."}},
		{name: "two dots kept", in: "hm..", want: []string{"hm.."}},
		{name: "CJK ellipsis kept", in: "嗯。。。", want: []string{"嗯。。。"}},
		{name: "unicode ellipsis kept", in: "well…", want: []string{"well…"}},
		{name: "question kept", in: "Really?", want: []string{"Really?"}},
		{name: "exclamation kept", in: "Wow!", want: []string{"Wow!"}},
		{name: "CJK question kept", in: "真的？", want: []string{"真的？"}},
		{name: "full stop only", in: "hi[persona-msg].[persona-msg]。", want: []string{"hi"}},
		{name: "only one stop removed", in: "x.[persona-line].", want: []string{"x."}},
		{name: "code fence keeps its stop", in: "Run:\n```sh\nmake.\n```\nThen wait.", want: []string{"Run:\n```sh\nmake.\n```\nThen wait."}},
		{name: "inline fence keeps its stop", in: "use ```x``` here.", want: []string{"use ```x``` here."}},
		{name: "fence in another chunk does not matter", in: "```\ncode\n```[persona-msg]Done.", want: []string{"```\ncode\n```", "Done"}},
		{name: "keep full stop option", in: "One.[persona-msg]二。", opt: outbound.SplitOptions{KeepFullStop: true}, want: []string{"One.", "二。"}},

		// Custom markers.
		{
			name: "custom markers",
			in:   "a<br>b||c[persona-msg]d",
			opt:  outbound.SplitOptions{MsgMarker: "||", LineMarker: "<br>"},
			want: []string{"a\nb", "c[persona-msg]d"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, outbound.Split(tt.in, noLimit, tt.opt))
		})
	}
}

func TestSplitUnderTheLimitIsOneChunk(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("x", 10)
	for _, unit := range []channel.TextUnit{channel.Runes, channel.Bytes, channel.UTF16} {
		require.Equal(t, []string{text}, outbound.Split(text, channel.TextLimit{Unit: unit, Max: 10}, outbound.SplitOptions{}))
	}
	// Max <= 0 means no limit.
	long := strings.Repeat("y", 5000)
	require.Equal(t, []string{long}, outbound.Split(long, channel.TextLimit{Unit: channel.Bytes, Max: 0}, outbound.SplitOptions{}))
	require.Equal(t, []string{long}, outbound.Split(long, channel.TextLimit{Unit: channel.Bytes, Max: -5}, outbound.SplitOptions{}))
}

func TestSplitOverLimitAtNaturalBoundaries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		limit channel.TextLimit
		want  []string
	}{
		{
			name:  "paragraph before line",
			in:    "First paragraph here.\nstill first\n\nSecond paragraph text",
			limit: runes(45),
			want:  []string{"First paragraph here.\nstill first", "Second paragraph text"},
		},
		{
			name:  "line",
			in:    "line number one\nline number two\nline three",
			limit: runes(35),
			want:  []string{"line number one\nline number two", "line three"},
		},
		{
			name:  "sentence",
			in:    "This is one sentence. This is another one. And more",
			limit: runes(45),
			want:  []string{"This is one sentence. This is another one.", "And more"},
		},
		{
			name:  "question and exclamation are sentence ends",
			in:    "Are you sure about that? Yes! I am quite sure",
			limit: runes(30),
			want:  []string{"Are you sure about that? Yes!", "I am quite sure"},
		},
		{
			name:  "CJK sentence",
			in:    "今天天气很好。我们去公园散步吧！好不好",
			limit: runes(16),
			want:  []string{"今天天气很好。我们去公园散步吧！", "好不好"},
		},
		{
			name:  "whitespace",
			in:    "alpha beta gamma delta epsilon zeta",
			limit: runes(20),
			want:  []string{"alpha beta gamma", "delta epsilon zeta"},
		},
		{
			name:  "dot inside a number is not a sentence end",
			in:    "the value of pi is 3.14159 and e is 2.71828 ok",
			limit: runes(30),
			want:  []string{"the value of pi is 3.14159 and", "e is 2.71828 ok"},
		},
		{
			name:  "dot inside a URL is not a sentence end",
			in:    "see https://example.com/a.b.c/index.html for details",
			limit: runes(45),
			want:  []string{"see https://example.com/a.b.c/index.html for", "details"},
		},
		{
			name:  "CRLF line ends leave no carriage return",
			in:    "first line here\r\nsecond line here\r\nthird",
			limit: runes(36),
			want:  []string{"first line here\r\nsecond line here", "third"},
		},
		{
			name:  "hard split without any boundary",
			in:    "abcdefghijklmnopqrstuvwxyz",
			limit: runes(10),
			want:  []string{"abcdefghij", "klmnopqrst", "uvwxyz"},
		},
		{
			name:  "hard split of CJK without spaces",
			in:    "一二三四五六七八九十一二三四五六七八九十一二三",
			limit: runes(10),
			want:  []string{"一二三四五六七八九十", "一二三四五六七八九十", "一二三"},
		},
		{
			name:  "CJK in bytes",
			in:    "一二三四五六七八九十",
			limit: channel.TextLimit{Unit: channel.Bytes, Max: 10},
			want:  []string{"一二三", "四五六", "七八九", "十"},
		},
		{
			name:  "emoji in UTF-16 units",
			in:    "😀😀😀😀😀",
			limit: channel.TextLimit{Unit: channel.UTF16, Max: 5},
			want:  []string{"😀😀", "😀😀", "😀"},
		},
		{
			name:  "emoji in bytes never cut inside a rune",
			in:    "ab😀cd😀",
			limit: channel.TextLimit{Unit: channel.Bytes, Max: 5},
			want:  []string{"ab", "😀c", "d😀"},
		},
		{
			name:  "rune wider than the limit goes out alone",
			in:    "😀😀",
			limit: channel.TextLimit{Unit: channel.Bytes, Max: 3},
			want:  []string{"😀", "😀"},
		},
		{
			name:  "each message chunk is split on its own",
			in:    "short[persona-msg]a much longer message that needs a split",
			limit: runes(30),
			want:  []string{"short", "a much longer message that", "needs a split"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := outbound.Split(tt.in, tt.limit, outbound.SplitOptions{KeepFullStop: true})
			require.Equal(t, tt.want, got)
		})
	}
}

func TestSplitLongReply(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := 0; utf8.RuneCountInString(b.String()) < 20000; i++ {
		switch i % 4 {
		case 0:
			b.WriteString("The quick brown fox jumps over the lazy dog. ")
		case 1:
			b.WriteString("敏捷的棕色狐狸跳过了懒狗。")
		case 2:
			b.WriteString("Emoji 😀 time! ")
		case 3:
			b.WriteString("\n\n")
		}
	}
	text := []rune(b.String())[:20000]
	in := string(text)
	require.Equal(t, 20000, utf8.RuneCountInString(in))

	for _, limit := range []channel.TextLimit{
		{Unit: channel.Runes, Max: 900},
		{Unit: channel.Runes, Max: 2000},
		{Unit: channel.UTF16, Max: 4000},
		{Unit: channel.Bytes, Max: 2000},
	} {
		chunks := outbound.Split(in, limit, outbound.SplitOptions{KeepFullStop: true})
		require.Greater(t, len(chunks), 1)
		for i, c := range chunks {
			n := outbound.Measure(c, limit.Unit)
			require.LessOrEqual(t, n, limit.Max, "chunk %d over the limit %+v", i, limit)
			if i < len(chunks)-1 {
				require.Greater(t, n, limit.Max/2-10, "chunk %d of %d is far from full (%d units) for %+v", i, len(chunks), n, limit)
			}
			require.True(t, utf8.ValidString(c))
			require.Equal(t, strings.TrimSpace(c), c)
		}
		require.Equal(t, noSpace(in), noSpace(strings.Join(chunks, "")), "text lost or changed for %+v", limit)
	}
}

// TestSplitManySmallChunks splits a long reply into thousands of chunks;
// the splitter is linear, so this takes milliseconds (it took seconds while
// every round re-measured the whole rest of the text).
func TestSplitManySmallChunks(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("ab cd 你好😀 ", 20000)
	for _, unit := range []channel.TextUnit{channel.Runes, channel.Bytes, channel.UTF16} {
		chunks := outbound.Split(in, channel.TextLimit{Unit: unit, Max: 8}, outbound.SplitOptions{})
		require.Greater(t, len(chunks), 20000)
		for i, c := range chunks {
			if n := outbound.Measure(c, unit); n > 8 {
				t.Fatalf("unit %d: chunk %d is %d units: %q", unit, i, n, c)
			}
		}
		require.Equal(t, noSpace(in), noSpace(strings.Join(chunks, "")))
	}
}

func TestSplitInvalidUTF8DoesNotPanic(t *testing.T) {
	t.Parallel()
	in := "\xff\xfe\xfd\xfc abc \xff"
	for _, unit := range []channel.TextUnit{channel.Runes, channel.Bytes, channel.UTF16} {
		chunks := outbound.Split(in, channel.TextLimit{Unit: unit, Max: 1}, outbound.SplitOptions{})
		require.Equal(t, noSpace(in), noSpace(strings.Join(chunks, "")))
		for _, c := range chunks {
			require.LessOrEqual(t, outbound.Measure(c, unit), 1)
		}
	}
}

// noSpace returns s without its Unicode white space, keeping every other
// byte as it is (also invalid ones).
func noSpace(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
