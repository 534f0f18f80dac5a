package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/clock"
)

var registryName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

func TestToolName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 80)
	cases := map[string]string{
		"read_file":      "fs_read_file",
		"read.file":      "fs_read_file",
		"a/b c":          "fs_a_b_c",
		"Ünïcode-tool":   "fs__n_code-tool",
		"kebab-case_ok9": "fs_kebab-case_ok9",
	}
	for tool, want := range cases {
		require.Equal(t, want, toolName("fs", tool), tool)
	}
	a, b := toolName("fs", long+"a"), toolName("fs", long+"b")
	require.Len(t, a, maxToolName)
	require.Regexp(t, registryName, a)
	require.NotEqual(t, a, b, "long names that share a prefix stay apart")
	require.Equal(t, a, toolName("fs", long+"a"), "deterministic")
}

func TestUniqueName(t *testing.T) {
	t.Parallel()
	taken := map[string]bool{"tools_load": true}
	require.Equal(t, "tools_load_2", uniqueName("tools_load", taken), "a built-in name gets a suffix")
	taken["fs_read_file"] = true
	taken["fs_read_file_2"] = true
	require.Equal(t, "fs_read_file_3", uniqueName("fs_read_file", taken))
	full := strings.Repeat("y", maxToolName)
	taken[full] = true
	got := uniqueName(full, taken)
	require.Len(t, got, maxToolName)
	require.True(t, strings.HasSuffix(got, "_2"))
	require.Regexp(t, registryName, got)
}

func TestAddToolsNamesDeterministically(t *testing.T) {
	t.Parallel()
	s := &Sources{opt: Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, names: map[toolKey]string{}, taken: map[string]bool{}, tools: map[string]*remoteTool{}}
	for _, n := range builtinNames {
		s.taken[n] = true
	}
	obj := map[string]any{"type": "object"}
	c := &conn{src: s, cfg: Server{Name: "tools", CallTimeout: time.Second}}
	c.setListingLocked([]*mcp.Tool{
		{Name: "load", InputSchema: obj},
		{Name: "b.x", InputSchema: obj},
		{Name: "b_x", InputSchema: obj},
		{Name: "a", InputSchema: obj},
	})
	s.addToolsLocked(c)
	require.Equal(t, []string{"tools_a", "tools_b_x", "tools_b_x_2", "tools_load_2"}, s.order)
	require.Equal(t, "tools_b_x", s.names[toolKey{"tools", "b.x"}], "sorted by the server's names: b.x before b_x")
	reg := agent.NewRegistry()
	require.NoError(t, s.Register(reg))
	require.Equal(t, s.order, reg.Names())
}

func TestParametersKeepsReadableSchemas(t *testing.T) {
	t.Parallel()
	raw := `{"type":"object","properties":{"q":{"type":"string","minLength":1},"n":{"type":"integer"}},"required":["q"],"additionalProperties":false,"$schema":"https://json-schema.org/draft/2020-12/schema"}`
	var schema map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &schema))
	got, why := parameters(schema)
	require.Empty(t, why)
	require.JSONEq(t, raw, string(got))
}

func TestParametersRelaxes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, want, why string
	}{
		{"no schema", ``, `{"type":"object"}`, "no input schema"},
		{"not object type", `{"type":"string"}`, `{"type":"object"}`, `type "string", not object`},
		{"not an object", `[1,2]`, `{"type":"object"}`, "not a JSON object"},
		{"type array", `{"type":"object","properties":{"a":{"type":["string","null"]}}}`,
			`{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"null"}]}}}`, "rewrote"},
		{"type array with anyOf", `{"type":"object","properties":{"a":{"type":["string","null"],"anyOf":[{"minLength":1}]}}}`,
			`{"type":"object","properties":{"a":{"anyOf":[{"minLength":1}],"allOf":[{"anyOf":[{"type":"string"},{"type":"null"}]}]}}}`, "rewrote"},
		{"single type array", `{"type":["object"],"properties":{"n":{"type":"integer"}}}`,
			`{"type":"object","properties":{"n":{"type":"integer"}}}`, "rewrote"},
		{"boolean schemas", `{"type":"object","properties":{"any":true,"never":false}}`,
			`{"type":"object","properties":{"any":{},"never":{"not":{}}}}`, "rewrote"},
		{"tuple items", `{"type":"object","properties":{"t":{"type":"array","items":[{"type":"string"}]}}}`,
			`{"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"string"}]}}}`, "rewrote"},
		{"schema additionalProperties", `{"type":"object","properties":{"m":{"type":"object","description":"Labels.","additionalProperties":{"type":"string"}}}}`,
			`{"type":"object","properties":{"m":{"type":"object","description":"Labels. Other properties must match {\"type\":\"string\"}."}}}`, "rewrote"},
		{"empty additionalProperties", `{"type":"object","additionalProperties":{},"properties":{"x":{"type":["integer","string"]}}}`,
			`{"type":"object","additionalProperties":true,"properties":{"x":{"anyOf":[{"type":"integer"},{"type":"string"}]}}}`, "rewrote"},
		{"odd required and enum", `{"type":"object","properties":{"a":{"type":"string","required":true,"enum":"x"},"b":{"type":7}},"required":["a",3]}`,
			`{"type":"object","properties":{"a":{"type":"string","required":[]},"b":{}},"required":["a"]}`, "rewrote"},
		{"nested items", `{"type":"object","properties":{"l":{"type":"array","items":{"type":"object","properties":{"k":{"type":["string","null"]}}}}}}`,
			`{"type":"object","properties":{"l":{"type":"array","items":{"type":"object","properties":{"k":{"anyOf":[{"type":"string"},{"type":"null"}]}}}}}}`, "rewrote"},
		{"huge", `{"type":"object","description":"` + strings.Repeat("z", maxSchemaBytes) + `"}`, `{"type":"object"}`, "limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var in any
			if tc.in != "" {
				require.NoError(t, json.Unmarshal([]byte(tc.in), &in))
			}
			got, why := parameters(in)
			require.JSONEq(t, tc.want, string(got))
			require.Contains(t, why, tc.why)
			require.NoError(t, agent.NewRegistry().Register(agent.ToolFunc{ToolSpec: agent.ToolSpec{Name: "t", Parameters: got}}),
				"the result registers")
		})
	}
}

func TestRenderAndCap(t *testing.T) {
	t.Parallel()
	res, err := render("s", "t", &mcp.CallToolResult{StructuredContent: map[string]any{"ok": true}})
	require.NoError(t, err)
	require.Equal(t, `{"ok":true}`, res.Text, "structured content stands in when there is no content")

	res, err = render("s", "t", &mcp.CallToolResult{Content: []mcp.Content{
		&mcp.ImageContent{Data: make([]byte, 3<<20), MIMEType: "image/svg+xml"},
		&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "mem://blob", MIMEType: "application/zip", Blob: make([]byte, 1500)}},
		&mcp.EmbeddedResource{},
		&mcp.ResourceLink{URI: "https://example.com/a"},
	}})
	require.NoError(t, err)
	require.Equal(t, "[image image/svg+xml, 3.0 MiB]\n[resource mem://blob, application/zip, 1.5 KiB]\n[resource]\n[resource link untitled: https://example.com/a]", res.Text)
	require.Empty(t, res.Images, "only common raster formats are handed on as pictures")

	_, err = render("s", "t", &mcp.CallToolResult{IsError: true})
	require.ErrorIs(t, err, ErrToolFailed)
	require.EqualError(t, err, `mcp server "s", tool "t": the tool reported an error: no error message`)

	_, err = render("s", "t", nil)
	require.Error(t, err)

	require.Equal(t, "héllo", capRunes("héllo", 5))
	got := capRunes("héllo wörld", 4)
	require.Equal(t, "héll\n[… truncated: showing 4 of 11 characters]", got)
	require.True(t, utf8.ValidString(got))
}

func TestClassify(t *testing.T) {
	t.Parallel()
	rejected := &jsonrpc.Error{Code: codeRejected, Message: "rejected by transport"}
	cases := []struct {
		name           string
		err            error
		broken, unsent bool
	}{
		{"server answered", fmt.Errorf("calling %q: %w", "tools/call", &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "bad"}), false, false},
		{"connection refused", fmt.Errorf("sending: %w: %w", rejected, &url.Error{Op: "Post", URL: "http://h/mcp", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}), true, true},
		{"reset after sending", fmt.Errorf("sending: %w: %w", rejected, &url.Error{Op: "Post", URL: "http://h/mcp", Err: io.EOF}), true, false},
		{"503", fmt.Errorf("%w: sending: Service Unavailable", rejected), true, false},
		{"error body and rejected", fmt.Errorf("sending: %w: %w: Bad Request", &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest}, rejected), false, false},
		{"session missing", fmt.Errorf("failed: %w", mcp.ErrSessionMissing), true, true},
		{"connection closed", fmt.Errorf("%w: calling: client is closing", mcp.ErrConnectionClosed), true, false},
		{"stream broke", fmt.Errorf("calling %q: %w", "tools/call", io.EOF), true, false},
		{"joined", errors.Join(errors.New("x"), rejected, &net.OpError{Op: "dial"}), true, true},
	}
	for _, tc := range cases {
		broken, unsent := classify(tc.err)
		require.Equal(t, tc.broken, broken, tc.name)
		require.Equal(t, tc.unsent, unsent, tc.name)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		srv  Server
		want string
	}{
		{Server{Name: "", Command: "x"}, `name ""`},
		{Server{Name: "9lives", Command: "x"}, `name "9lives"`},
		{Server{Name: "has space", Command: "x"}, "must be a letter"},
		{Server{Name: strings.Repeat("a", 33), Command: "x"}, "up to 31"},
		{Server{Name: "both", Command: "x", URL: "http://h"}, "not both"},
		{Server{Name: "neither"}, "set Command (stdio) or URL (HTTP)"},
		{Server{Name: "ftp", URL: "ftp://host/x"}, `scheme "ftp"`},
		{Server{Name: "nohost", URL: "http:///path"}, "has no host"},
		{Server{Name: "parse", URL: "http://[::1"}, "URL:"},
		{Server{Name: "hdr", URL: "http://h", Headers: map[string]string{"Bad Header": "v"}}, "header name"},
		{Server{Name: "crlf", URL: "http://h", Headers: map[string]string{"X-A": "a\r\nX-B: b"}}, "line break"},
		{Server{Name: "cmdhdr", Command: "x", Headers: map[string]string{"A": "b"}}, "URL servers only"},
		{Server{Name: "urlargs", URL: "http://h", Args: []string{"a"}}, "Command servers only"},
		{Server{Name: "env", Command: "x", Env: []string{"NOEQUALS"}}, "KEY=VALUE"},
		{Server{Name: "neg", Command: "x", CallTimeout: -time.Second}, "negative timeout"},
		{Server{Name: "inc", Command: "x", Include: []string{""}}, "empty name in Include"},
		{Server{Name: "tier", Command: "x", Tiers: []string{" "}}, "empty tier"},
	}
	for _, tc := range cases {
		_, err := Open(context.Background(), []Server{tc.srv}, Options{})
		require.ErrorIs(t, err, ErrConfig, tc.want)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := Open(context.Background(), []Server{{Name: "Dup", Command: "x"}, {Name: "dup", URL: "http://h"}}, Options{})
	require.ErrorContains(t, err, `server "dup": name used twice`)
	_, err = Open(context.Background(), nil, Options{BackoffMin: time.Minute, BackoffMax: time.Second})
	require.ErrorIs(t, err, ErrConfig)

	got, err := Server{Name: "ok", Command: "x"}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, DefaultCallTimeout, got.CallTimeout)
	require.Equal(t, DefaultStartTimeout, got.StartTimeout)
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	var got []time.Duration
	for n := range 9 {
		got = append(got, o.backoff(n))
	}
	s := time.Second
	require.Equal(t, []time.Duration{0, s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 60 * s, 60 * s}, got)
}

func TestStderrTail(t *testing.T) {
	t.Parallel()
	tail := newStderrTail(slog.New(slog.NewTextHandler(io.Discard, nil)))
	for i := range 300 {
		fmt.Fprintf(tail, "line %d\n", i)
	}
	_, _ = tail.Write([]byte("partial"))
	last := tail.last()
	require.LessOrEqual(t, len(last), 500)
	require.True(t, strings.HasSuffix(last, "line 299\npartial"))
	require.True(t, strings.HasPrefix(last, "line "), "starts at a line boundary: %q", last)
	require.Equal(t, stderrMaxLines, tail.logged)
	require.Empty(t, (*stderrTail)(nil).last())
}

func TestWithTimeoutFakeAndReal(t *testing.T) {
	t.Parallel()
	cause := errors.New("too slow")
	clk := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := withTimeout(context.Background(), clk, time.Minute, cause)
	defer cancel()
	require.Equal(t, 1, clk.Pending())
	clk.Advance(time.Minute)
	<-ctx.Done()
	require.ErrorIs(t, context.Cause(ctx), cause)

	ctx2, cancel2 := withTimeout(context.Background(), clk, time.Minute, cause)
	cancel2()
	require.Equal(t, 0, clk.Pending(), "cancel stops the timer at once")
	require.ErrorIs(t, ctx2.Err(), context.Canceled)

	ctx3, cancel3 := withTimeout(context.Background(), clock.Real, time.Millisecond, cause)
	defer cancel3()
	<-ctx3.Done()
	require.ErrorIs(t, context.Cause(ctx3), cause)
}

func TestCappedBody(t *testing.T) {
	t.Parallel()
	small := &cappedBody{rc: io.NopCloser(strings.NewReader("abc")), left: 3}
	b, err := io.ReadAll(small)
	require.NoError(t, err)
	require.Equal(t, "abc", string(b))
	big := &cappedBody{rc: io.NopCloser(strings.NewReader("abcd")), left: 3}
	_, err = io.ReadAll(big)
	require.ErrorIs(t, err, errBodyTooLarge)
}
