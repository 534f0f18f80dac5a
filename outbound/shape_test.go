package outbound_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outbound"
)

func TestMarkdownToPlain(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"heading", "## Plan\ntext", "Plan\ntext"},
		{"bold and italics", "this is **very** *nice* and __bold__", "this is very nice and bold"},
		{"math stays", "2*3*4 = 24 and snake_case_name", "2*3*4 = 24 and snake_case_name"},
		{"link", "see [the docs](https://x.dev/a) now", "see the docs (https://x.dev/a) now"},
		{"bare link", "[https://x.dev](https://x.dev)", "https://x.dev"},
		{"image", "![a cat](https://x.dev/c.png)", "a cat (https://x.dev/c.png)"},
		{"lists kept as lines", "* one\n+ two\n- three\n1. four", "- one\n- two\n- three\n1. four"},
		{"quote and rule", "> quoted\n---\nafter", "quoted\nafter"},
		{"inline code and strike", "run `go test` ~~now~~", "run go test now"},
		{"code fence untouched", "```\n**x** # y\n```", "```\n**x** # y\n```"},
		{"CJK", "**你好**，[文档](https://x.cn)", "你好，文档 (https://x.cn)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, outbound.MarkdownToPlain(tc.in))
		})
	}
}

func TestStripProseToolCalls(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"tag", "Let me check.<tool_call>{\"name\":\"search\"}</tool_call> Done", "Let me check.Done"},
		{"json line", "ok\n{\"name\": \"web_search\", \"arguments\": {\"q\": \"x\"}}\nbye", "ok\nbye"},
		{"functions call", "functions.search(q=\"x\")\nresult", "result"},
		{"fenced", "```tool_call\nsearch(x)\n```\nhi", "hi"},
		{"plain json kept", "{\"a\": 1}", "{\"a\": 1}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, outbound.StripProseToolCalls(tc.in))
		})
	}
	require.Equal(t, "hi there", outbound.Shape("[[SILENT]]**hi** there", false))
	require.Equal(t, "**hi** there", outbound.Shape("**hi** there", true))
}

func TestSplitCodeFences(t *testing.T) {
	t.Parallel()
	var code strings.Builder
	for i := range 30 {
		code.WriteString("line := " + strings.Repeat("x", i%7) + "\n")
	}
	text := "Here is the code:\n```go\n" + code.String() + "```\nThat's it"
	for _, unit := range []channel.TextUnit{channel.Runes, channel.Bytes, channel.UTF16} {
		limit := channel.TextLimit{Unit: unit, Max: 120}
		chunks := outbound.Split(text, limit, outbound.SplitOptions{})
		require.Greater(t, len(chunks), 2)
		inner := 0
		for i, c := range chunks {
			require.LessOrEqual(t, outbound.Measure(c, unit), 120, "chunk %d", i)
			require.Zero(t, strings.Count(c, "```")%2, "fences balanced in chunk %d: %q", i, c)
			if strings.Contains(c, "line :=") {
				inner++
				require.Contains(t, c[strings.LastIndex(c, "line :="):], "```", "closed: %q", c)
			}
		}
		require.Equal(t, "Here is the code:", chunks[0])
		require.True(t, strings.HasPrefix(chunks[1], "```go\n"), "the first piece keeps the language: %q", chunks[1])
		require.True(t, strings.HasPrefix(chunks[2], "```\n"), "later pieces reopen the block: %q", chunks[2])
		require.Equal(t, strings.Count(text, "line :="), strings.Count(strings.Join(chunks, "\n"), "line :="), "no line lost")
		require.Equal(t, "That's it", chunks[len(chunks)-1][len(chunks[len(chunks)-1])-len("That's it"):])
		require.Greater(t, inner, 1)
	}
}

func TestSplitUnitsAndSizes(t *testing.T) {
	t.Parallel()
	emoji := strings.Repeat("😀", 10) // 20 UTF-16 units, 40 bytes, 10 runes
	tests := []struct {
		name   string
		text   string
		limit  channel.TextLimit
		chunks int
	}{
		{"emoji at a UTF-16 limit", emoji, channel.TextLimit{Unit: channel.UTF16, Max: 5}, 5},
		{"emoji exactly fitting", emoji, channel.TextLimit{Unit: channel.UTF16, Max: 20}, 1},
		{"emoji in bytes", emoji, channel.TextLimit{Unit: channel.Bytes, Max: 9}, 5},
		{"CJK sentences", strings.Repeat("今天天气很好。", 20), channel.TextLimit{Unit: channel.Runes, Max: 30}, 5},
		{"20,000 characters", strings.Repeat("A fairly ordinary sentence here. ", 607), channel.TextLimit{Unit: channel.Runes, Max: 900}, 23},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chunks := outbound.Split(tc.text, tc.limit, outbound.SplitOptions{KeepFullStop: true})
			require.Len(t, chunks, tc.chunks)
			for _, c := range chunks {
				require.LessOrEqual(t, outbound.Measure(c, tc.limit.Unit), tc.limit.Max)
				require.NotContains(t, c, "\uFFFD", "no surrogate pair or rune is cut")
			}
			require.Equal(t, noSpace(tc.text), noSpace(strings.Join(chunks, "")))
		})
	}
}

func TestShapeReplyCompression(t *testing.T) {
	t.Parallel()
	limit := channel.TextLimit{Unit: channel.Runes, Max: 20}
	long := strings.Repeat("word ", 60) // 15 chunks of 20 runes
	tests := []struct {
		name      string
		steps     []agenttest.Step
		wantCalls int
		chunks    int
	}{
		{"first call shortens enough", []agenttest.Step{agenttest.Reply("short reply")}, 1, 1},
		{"second call", []agenttest.Step{agenttest.Reply(strings.Repeat("word ", 45)), agenttest.Reply("ok now")}, 2, 1},
		{"at most two calls, then everything is sent", []agenttest.Step{agenttest.Reply(strings.Repeat("word ", 50)), agenttest.Reply(strings.Repeat("word ", 40))}, 2, 10},
		{"failures keep the text", []agenttest.Step{agenttest.Fail(context.DeadlineExceeded), agenttest.Reply("")}, 2, 15},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := agenttest.New().OnPurpose(agent.PurposeCompress, tc.steps...).Otherwise(agenttest.Reply("never"))
			sh := outbound.ShapeReply(t.Context(), long, limit, outbound.ShapeOptions{Compressor: m})
			require.Equal(t, tc.wantCalls, m.Calls())
			require.Equal(t, tc.wantCalls, sh.Compressions)
			require.Len(t, sh.Chunks, tc.chunks)
			for _, c := range sh.Chunks {
				require.LessOrEqual(t, outbound.Measure(c, limit.Unit), limit.Max, "the hard split holds")
			}
			require.Equal(t, agent.PurposeCompress, m.Last().Purpose)
		})
	}
	// Under the limit: no call.
	m := agenttest.New()
	sh := outbound.ShapeReply(t.Context(), "short", limit, outbound.ShapeOptions{Compressor: m})
	require.Equal(t, []string{"short"}, sh.Chunks)
	require.Zero(t, m.Calls())
	require.Equal(t, channel.TextLimit{Unit: channel.UTF16, Max: 4000}, outbound.PlatformLimits["telegram"])
}

// BenchmarkShape shapes a plain chat reply, as most replies are, and a
// Markdown one:
//
//	go test ./outbound -run xxx -bench Shape -benchmem
func BenchmarkShape(b *testing.B) {
	for _, bc := range []struct{ name, text string }{
		{"plain", "sure thing, I'll look at it tomorrow morning and get back to you."},
		{"markdown", "## Plan\n- **bus** at 07:30, see [map](https://example.com/map)\n- bring `snacks` and ~~umbrella~~ rain jacket"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = outbound.Shape(bc.text, false)
			}
		})
	}
}
