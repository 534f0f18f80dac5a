package outbound

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// shapePieces build texts near every Markdown rule and prose tool call:
// their literals, line starts, fences, and text around them.
var shapePieces = []string{
	"\n", "\n\n", "```", "```go\n", "```tool_call\n", "# ", "### ", " #", "> ", ">", "* ", "+ ", "- ", "---", "***",
	"___", " - - -", "**", "__", "*", "_", "~~", "`", "![", "[", "]", "](", "(", ")", "http://a.example/x", " \"t\"",
	"<", ">", "<https://b.example>", "<tool_call>", "</tool_call>", "<invoke name=\"x\">", "</invoke>", "{", "}",
	"{\"name\": \"f\", \"arguments\": {}}", "\"tool\":", "\"args\":", "functions.", "tools.", "search(", "q", "word ",
	"snake_case", "well-known", "日本語", " ", "\t", "!", "ok.", "[text](http://a.example/x)", "[a](b \"t\")",
	"![alt](http://i.example/p.png)", "*em*", "**bold**", "__b__", "~~s~~", "`c`", "functions.f(1)\n",
}

// The pre-checks never change what Markdown stripping and prose tool call
// removal do: with and without them every text comes out the same.
func TestShapePreChecks(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	changed := 0
	for range 30000 {
		text := randomText(r, shapePieces)
		want := markdownToPlain(text, false)
		require.Equal(t, want, markdownToPlain(text, true), "markdown %q", text)
		stripped := stripProseToolCalls(text, false)
		require.Equal(t, stripped, stripProseToolCalls(text, true), "tool calls %q", text)
		if want != text || stripped != text {
			changed++
		}
	}
	require.Greater(t, changed, 10000, "the texts exercise the rules")
}

func FuzzShapePreChecks(f *testing.F) {
	for _, p := range shapePieces {
		f.Add(p + "x" + p)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if markdownToPlain(text, false) != markdownToPlain(text, true) {
			t.Fatalf("pre-checks changed the Markdown stripping of %q", text)
		}
		if stripProseToolCalls(text, false) != stripProseToolCalls(text, true) {
			t.Fatalf("pre-checks changed the tool call removal of %q", text)
		}
	})
}

// oneLine's shortcut returns exactly what joining the fields gives.
func TestOneLineShortcut(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 9))
	pieces := []string{"a", "word", " ", "  ", "\t", "\n", "\u00a0", "\u3000", "日本", "\xff", ".", "\u2028", "x y"}
	short := 0
	for range 20000 {
		s := randomText(r, pieces)
		require.Equal(t, strings.Join(strings.Fields(s), " "), oneLine(s), "%q", s)
		if isOneLine(s) {
			short++
		}
	}
	require.Greater(t, short, 1000, "the shortcut is taken")
	for _, s := range []string{"", " ", "a", "a b", " a", "a ", "a  b", "a\u00a0b"} {
		require.Equal(t, strings.Join(strings.Fields(s), " "), oneLine(s), "%q", s)
	}
}
