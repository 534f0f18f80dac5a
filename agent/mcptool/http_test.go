package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/agent/mcptool"
	"github.com/personakit/persona/clock"
)

// openHTTP starts an HTTP MCP server and opens Sources on it with a fake
// clock.
func openHTTP(t *testing.T, srv mcptool.Server, hooks *serverHooks) (*httpServer, *mcptool.Sources, *clock.Fake) {
	t.Helper()
	hs := startHTTP(t, "", newTestServer(hooks, false))
	t.Cleanup(hooks.done) // before the server stops
	clk := clock.NewFake(t0)
	srv.URL = hs.url()
	src, err := mcptool.Open(t.Context(), []mcptool.Server{srv}, mcptool.Options{Clock: clk, Logger: quietLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, src.Close()) })
	return hs, src, clk
}

func call(t *testing.T, reg *agent.Registry, name, args string) (string, error) {
	t.Helper()
	tool, ok := reg.Lookup(name)
	require.True(t, ok, "tool %s is registered", name)
	return tool.Call(t.Context(), json.RawMessage(args))
}

func TestHTTPListRegisterCall(t *testing.T) {
	t.Parallel()
	hs, src, _ := openHTTP(t, mcptool.Server{Name: "calc", Tiers: []string{"friend"}}, nil)

	infos := map[string]mcptool.ToolInfo{}
	var names []string
	for _, ti := range src.Tools() {
		infos[ti.Name] = ti
		names = append(names, ti.Name)
	}
	want := []string{"calc_add", "calc_big", "calc_echo", "calc_fail", "calc_mapped", "calc_media", "calc_odd_schema", "calc_pid", "calc_slow"}
	require.Equal(t, want, names, "tools are named <server>_<tool>, sanitised, in the server's name order")

	add := infos["calc_add"]
	require.Equal(t, "add", add.Remote)
	require.Equal(t, "calc", add.Server)
	require.Empty(t, add.Relaxed, "a schema the registry reads is registered as sent")
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	require.NoError(t, json.Unmarshal(add.Parameters, &schema))
	require.Equal(t, "object", schema.Type)
	require.Contains(t, string(schema.Properties["a"]), `"integer"`)
	require.Contains(t, string(schema.Properties["a"]), "the first addend")
	require.ElementsMatch(t, []string{"a", "b"}, schema.Required)

	odd := infos["calc_odd_schema"]
	require.Equal(t, "odd.schema", odd.Remote)
	require.NotEmpty(t, odd.Relaxed, "the odd schema had to be rewritten")
	coerced, err := agent.ValidateArgs(odd.Parameters, json.RawMessage(`{"count":"3","name":null,"meta":{"k":"v"}}`))
	require.NoError(t, err, "the rewritten schema still validates what the registry understands")
	require.JSONEq(t, `{"count":3,"name":null,"meta":{"k":"v"}}`, string(coerced))
	_, err = agent.ValidateArgs(odd.Parameters, json.RawMessage(`{"name":"x"}`))
	require.ErrorIs(t, err, agent.ErrSchema, "required survives the rewrite")
	require.Contains(t, string(odd.Parameters), `"anyOf"`)
	require.Contains(t, string(odd.Parameters), `"prefixItems"`)
	require.Contains(t, string(odd.Parameters), `Other properties must match {\"type\":\"string\"}`)

	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))
	require.Equal(t, want, reg.Names())
	require.NoError(t, src.Register(reg), "registering into the same registry again adds nothing")
	require.Equal(t, want, reg.Names())

	tool, _ := reg.Lookup("calc_add")
	require.Equal(t, "calc_add", tool.Spec().Name)
	require.Equal(t, "Add two integers.\nReturns the sum as text.", tool.Spec().Description)
	out, err := call(t, reg, "calc_add", `{"a":2,"b":3}`)
	require.NoError(t, err)
	require.Equal(t, "5", out)

	out, err = call(t, reg, "calc_echo", `{"text":"grüß dich"}`)
	require.NoError(t, err)
	require.Equal(t, "grüß dich", out)

	out, err = call(t, reg, "calc_odd_schema", `{"count":1,"tags":["a",2]}`)
	require.NoError(t, err)
	require.JSONEq(t, `{"count":1,"tags":["a",2]}`, out)

	out, err = call(t, reg, "calc_mapped", `{"labels":{"a":"1","b":"2"}}`)
	require.NoError(t, err, "an SDK-inferred schema with a map field registers and calls")
	require.Equal(t, "2", out)

	_, err = call(t, reg, "calc_fail", `{}`)
	require.ErrorIs(t, err, mcptool.ErrToolFailed)
	require.Contains(t, err.Error(), "disk on fire")

	_, err = call(t, reg, "calc_add", `[1,2]`)
	require.ErrorContains(t, err, "arguments must be a JSON object")

	_, err = call(t, reg, "calc_add", `{"a":"two"}`)
	require.Error(t, err, "the server rejects arguments that do not match its schema")
	out, err = call(t, reg, "calc_add", `{"a":1,"b":1}`)
	require.NoError(t, err, "a rejected call leaves the session usable")
	require.Equal(t, "2", out)

	mediaTool, _ := reg.Lookup("calc_media")
	res, err := mediaTool.(agent.ResultTool).CallResult(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, "chart follows\n[image image/png, 8 bytes]\n[audio audio/wav, 2.0 KiB]\n[resource file:///notes.txt]\nhello notes\n[resource link report: file:///report.pdf]", res.Text)
	require.Equal(t, []string{"data:image/png;base64,iVBORw0KGgo="}, res.Images)

	out, err = call(t, reg, "calc_big", `{}`)
	require.NoError(t, err)
	require.True(t, utf8.ValidString(out))
	require.True(t, strings.HasPrefix(out, strings.Repeat("é", mcptool.MaxResultRunes)+"\n[… truncated: showing 20000 of 30000 characters]"))

	require.EqualValues(t, 1, hs.handshakes.Load(), "every call used the one session")
	st := src.Status()
	require.Len(t, st, 1)
	require.Equal(t, mcptool.ServerStatus{Name: "calc", Transport: "http", Connected: true, Tools: 9}, st[0])
}

func TestHTTPTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	hooks := newHooks()
	hs, src, clk := openHTTP(t, mcptool.Server{Name: "calc", CallTimeout: 30 * time.Second}, hooks)
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))

	errc := make(chan error, 1)
	go func() {
		_, err := call(t, reg, "calc_slow", `{}`)
		errc <- err
	}()
	<-hooks.slowStarted
	clk.Advance(30 * time.Second)
	err := <-errc
	require.ErrorIs(t, err, mcptool.ErrTimeout)
	require.EqualError(t, err, `mcp server "calc": tool "slow" timed out after 30s`)
	select {
	case <-hooks.slowEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never saw the call cancelled")
	}

	ctx, cancel := context.WithCancel(t.Context())
	tool, _ := reg.Lookup("calc_slow")
	go func() {
		_, err := tool.Call(ctx, nil)
		errc <- err
	}()
	<-hooks.slowStarted
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	<-hooks.slowEnded

	out, err := call(t, reg, "calc_echo", `{"text":"still here"}`)
	require.NoError(t, err)
	require.Equal(t, "still here", out)
	require.EqualValues(t, 1, hs.handshakes.Load(), "a timed-out call does not reconnect")
}

func TestHTTPServerRestart(t *testing.T) {
	t.Parallel()
	hs, src, clk := openHTTP(t, mcptool.Server{Name: "calc"}, nil)
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))
	out, err := call(t, reg, "calc_echo", `{"text":"one"}`)
	require.NoError(t, err)
	require.Equal(t, "one", out)
	addr := hs.addr

	// Restarted between calls: the old session is unknown to the new
	// server (404), so the call reconnects and runs on a new session.
	hs.stop()
	hs2 := startHTTP(t, addr, newTestServer(nil, false))
	out, err = call(t, reg, "calc_echo", `{"text":"two"}`)
	if err != nil {
		// Rarely the request goes out on a kept-alive connection that the
		// old server has just closed (EOF): it may have been received, so
		// it is not retried, and the error says so. The next call works.
		require.ErrorIs(t, err, mcptool.ErrConnectionLost)
		out, err = call(t, reg, "calc_echo", `{"text":"two"}`)
	}
	require.NoError(t, err, "a restart between calls reconnects")
	require.Equal(t, "two", out)
	require.EqualValues(t, 1, hs2.handshakes.Load())

	// Down: calls fail clearly and fast while the backoff runs. (The
	// session has lived a minute, so the first reconnect is immediate.)
	clk.Advance(time.Minute)
	hs2.stop()
	_, err = call(t, reg, "calc_echo", `{"text":"three"}`)
	if errors.Is(err, mcptool.ErrConnectionLost) {
		// The request went out on a kept-alive connection the server
		// closed: it may have run, so it is not retried.
		_, err = call(t, reg, "calc_echo", `{"text":"three"}`)
	}
	require.ErrorIs(t, err, mcptool.ErrUnavailable)
	require.ErrorContains(t, err, "connection refused")
	_, err = call(t, reg, "calc_add", `{"a":1,"b":2}`)
	require.ErrorIs(t, err, mcptool.ErrUnavailable)
	require.ErrorContains(t, err, "next attempt in 1s")
	st := src.Status()[0]
	require.False(t, st.Connected)
	require.Equal(t, clk.Now().Add(time.Second), st.NextAttempt)
	require.Contains(t, st.LastError, "connection refused")

	// Back, without the echo tool: after the backoff the tools work again
	// without registering anew, and the missing one says so.
	srv3 := newTestServer(nil, false)
	srv3.RemoveTools("echo")
	hs3 := startHTTP(t, addr, srv3)
	clk.Advance(time.Second)
	out, err = call(t, reg, "calc_add", `{"a":1,"b":2}`)
	require.NoError(t, err)
	require.Equal(t, "3", out)
	_, err = call(t, reg, "calc_echo", `{"text":"four"}`)
	require.ErrorIs(t, err, mcptool.ErrToolGone)
	require.EqualError(t, err, `tool no longer offered by server calc (tool "echo")`)
	require.EqualValues(t, 1, hs3.handshakes.Load())
	for _, ti := range src.Tools() {
		require.Equal(t, ti.Remote != "echo", ti.Offered, ti.Name)
	}
	require.True(t, src.Status()[0].Connected)
}

func TestHTTPConcurrentCallsShareOneSession(t *testing.T) {
	t.Parallel()
	hs, src, _ := openHTTP(t, mcptool.Server{Name: "calc"}, nil)
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 6 {
				out, err := call(t, reg, "calc_add", fmt.Sprintf(`{"a":%d,"b":%d}`, g, i))
				if err != nil {
					errs <- err
					return
				}
				if out != fmt.Sprint(g+i) {
					errs <- fmt.Errorf("add(%d,%d) = %q", g, i, out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, hs.handshakes.Load())
}

func TestHTTPToolListChanged(t *testing.T) {
	t.Parallel()
	hs, src, _ := openHTTP(t, mcptool.Server{Name: "calc"}, nil)
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))

	hs.mcp.RemoveTools("echo")
	require.Eventually(t, func() bool {
		_, err := call(t, reg, "calc_echo", `{"text":"x"}`)
		return err != nil && strings.Contains(err.Error(), "tool no longer offered by server calc")
	}, 10*time.Second, 5*time.Millisecond)

	hs.mcp.AddTool(&mcp.Tool{Name: "late", Description: "Added later.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("late answer"), nil
		})
	require.Eventually(t, func() bool {
		_, ok := reg.Lookup("calc_late")
		return ok
	}, 10*time.Second, 5*time.Millisecond, "a tool that appears is registered into the registry")
	out, err := call(t, reg, "calc_late", `{}`)
	require.NoError(t, err)
	require.Equal(t, "late answer", out)
	require.EqualValues(t, 1, hs.handshakes.Load())
}

func TestIncludeAllowlist(t *testing.T) {
	t.Parallel()
	_, src, _ := openHTTP(t, mcptool.Server{Name: "calc", Include: []string{"add", "echo", "missing"}}, nil)
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))
	require.Equal(t, []string{"calc_add", "calc_echo"}, reg.Names())
}

func TestLenientOpenRegistersLater(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	servers := []mcptool.Server{
		{Name: "late", URL: "http://" + addr + "/mcp"},
		{Name: "gone", URL: "http://" + addr + "/other"},
	}

	_, err = mcptool.Open(t.Context(), servers, mcptool.Options{Logger: quietLogger()})
	require.Error(t, err, "strict Open fails when a server fails")
	require.ErrorContains(t, err, `mcp server "late": MCP handshake:`)
	require.ErrorContains(t, err, `mcp server "gone": MCP handshake:`)
	require.Equal(t, 2, strings.Count(err.Error(), "connection refused"), "one error per server")

	clk := clock.NewFake(t0)
	src, err := mcptool.Open(t.Context(), servers[:1], mcptool.Options{Clock: clk, Logger: quietLogger(), Lenient: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, src.Close()) })
	st := src.Status()[0]
	require.False(t, st.Connected)
	require.Contains(t, st.LastError, "connection refused")
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))
	require.Empty(t, reg.Names())

	startHTTP(t, addr, newTestServer(nil, false))
	waitPending(t, clk, 1) // the background retry waits out its backoff
	clk.Advance(time.Second)
	require.Eventually(t, func() bool {
		_, ok := reg.Lookup("late_echo")
		return ok
	}, 10*time.Second, 5*time.Millisecond)
	out, err := call(t, reg, "late_echo", `{"text":"hi"}`)
	require.NoError(t, err)
	require.Equal(t, "hi", out)
	require.True(t, src.Status()[0].Connected)
}

func TestLoopRunsMCPTool(t *testing.T) {
	t.Parallel()
	_, src, clk := openHTTP(t, mcptool.Server{Name: "calc", Tiers: []string{"friend"}}, nil)
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))
	loop, err := agent.NewLoop(agent.LoopConfig{Registry: reg, Clock: clk})
	require.NoError(t, err)

	run := func(tiers ...string) agent.Request {
		m := agenttest.New(
			agenttest.ToolCall(agent.ToolsLoad, `{"names":["calc_add"]}`),
			agenttest.ToolCall(agent.ToolsExecute, `{"name":"calc_add","arguments":{"a":"20","b":22}}`),
			agenttest.ToolCall(agent.ToolFinalize, `{"text":"done"}`),
		)
		_, err := loop.RunLoop(t.Context(), agent.LoopInput{
			RunInput: agent.RunInput{Model: m, Request: agent.Request{Messages: []agent.Message{
				{Role: agent.RoleSystem, Content: "You are a bot."},
				{Role: agent.RoleUser, Content: "add 20 and 22"},
			}}},
			Tiers:    tiers,
			Deadline: clk.Now().Add(3 * time.Minute),
		})
		require.NoError(t, err)
		return m.Last()
	}
	var results []string
	req := run("friend")
	for _, msg := range req.Messages {
		if msg.Role == agent.RoleTool {
			results = append(results, msg.Content)
		}
	}
	require.Len(t, results, 2)
	require.Contains(t, results[0], "calc_add: Add two integers.")
	require.True(t, strings.HasPrefix(results[1], "42"), "the loop coerced \"20\" and the server added: %q", results[1])
	require.Contains(t, req.Messages[1].Content, "- calc_add: Add two integers.", "deferred: listed in the catalog")

	req = run("stranger")
	require.NotContains(t, req.Messages[1].Content, "calc_add", "the server's tiers hide its tools from other callers")
	var denied bool
	for _, msg := range req.Messages {
		denied = denied || (msg.Role == agent.RoleTool && strings.Contains(msg.Content, "no permission"))
	}
	require.True(t, denied)
}

func TestHTTPHeaders(t *testing.T) {
	t.Parallel()
	srv := newTestServer(nil, false)
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})

	_, err := mcptool.Open(t.Context(), []mcptool.Server{{Name: "auth", URL: ts.URL}}, mcptool.Options{Logger: quietLogger()})
	require.ErrorContains(t, err, `mcp server "auth": MCP handshake:`)
	require.ErrorContains(t, err, "Unauthorized")

	src, err := mcptool.Open(t.Context(), []mcptool.Server{{Name: "auth", URL: ts.URL, Headers: map[string]string{"Authorization": "Bearer s3cret"}}},
		mcptool.Options{Logger: quietLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, src.Close()) })
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))
	out, err := call(t, reg, "auth_echo", `{"text":"let me in"}`)
	require.NoError(t, err)
	require.Equal(t, "let me in", out)
}

func TestCloseAbortsCallsInFlight(t *testing.T) {
	t.Parallel()
	hooks := newHooks()
	_, src, _ := openHTTP(t, mcptool.Server{Name: "calc"}, hooks)
	reg := agent.NewRegistry()
	require.NoError(t, src.Register(reg))
	errc := make(chan error, 1)
	go func() {
		_, err := call(t, reg, "calc_slow", `{}`)
		errc <- err
	}()
	<-hooks.slowStarted
	closed := make(chan error, 1)
	go func() { closed <- src.Close() }()
	require.ErrorIs(t, <-errc, mcptool.ErrClosed, "the call ends as Close begins")
	// The server may not have heard of the cancellation (it is sent on a
	// best-effort basis) and holds the session's deletion until its
	// handler returns; let the handler go so Close need not wait out the
	// SDK's 5 s deletion timeout.
	hooks.done()
	require.NoError(t, <-closed)
	require.ErrorIs(t, src.Register(agent.NewRegistry()), mcptool.ErrClosed)
}

func TestRegisterReportsTakenNames(t *testing.T) {
	t.Parallel()
	_, src, _ := openHTTP(t, mcptool.Server{Name: "calc", Include: []string{"add", "echo"}}, nil)
	reg := agent.NewRegistry()
	require.NoError(t, reg.Register(agent.ToolFunc{ToolSpec: agent.ToolSpec{Name: "calc_echo"}, F: nil}))
	err := src.Register(reg)
	require.ErrorIs(t, err, agent.ErrToolDuplicate)
	require.ErrorContains(t, err, `mcp server "calc", tool "echo"`)
	require.Equal(t, []string{"calc_echo", "calc_add"}, reg.Names(), "the other tools are registered")
}
