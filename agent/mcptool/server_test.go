package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent/mcptool"
	"github.com/personakit/persona/clock"
)

// serverEnv makes the test binary act as a stdio MCP server in the given
// mode instead of running the tests.
const serverEnv = "MCPTOOL_TEST_SERVER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(serverEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

// runChild is the stdio server: "ok" serves the test tools, "garbage"
// writes a non-JSON line to stdout, "silent" never answers.
func runChild(mode string) int {
	switch mode {
	case "ok":
		srv := newTestServer(nil, true)
		if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "server:", err)
			return 1
		}
		return 0
	case "garbage":
		fmt.Fprintln(os.Stderr, "garbage server starting")
		fmt.Fprintln(os.Stdout, "Welcome! This is not JSON-RPC.")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "silent":
		fmt.Fprintln(os.Stderr, "silent server: reading nothing, answering nothing")
		time.Sleep(time.Hour)
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	return 2
}

// serverHooks let an in-process test see what the slow tool does.
type serverHooks struct {
	slowStarted chan struct{}
	slowEnded   chan struct{}
	release     chan struct{} // closed by done: ends slow calls still running
	once        sync.Once
}

func newHooks() *serverHooks {
	return &serverHooks{slowStarted: make(chan struct{}, 16), slowEnded: make(chan struct{}, 16), release: make(chan struct{})}
}

// done ends the slow calls the server still runs (a cancellation the
// client sent on a best-effort basis may not have arrived), so the server
// can stop.
func (h *serverHooks) done() {
	if h != nil {
		h.once.Do(func() { close(h.release) })
	}
}

// oddSchema uses keywords and shapes the agent registry cannot parse.
const oddSchema = `{
 "type": "object",
 "properties": {
  "name": {"type": ["string", "null"], "description": "who"},
  "tags": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
  "meta": {"type": "object", "additionalProperties": {"type": "string"}},
  "anything": true,
  "count": {"type": "integer", "minimum": 0}
 },
 "required": ["count"],
 "$defs": {"x": {"type": 7}}
}`

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// tinyPNG is the 8-byte PNG signature: enough to be summarised as an image.
var tinyPNG = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}

// newTestServer builds the MCP server used over both transports.
func newTestServer(h *serverHooks, stdio bool) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "testsrv", Version: "1.0.0"}, nil)
	type addIn struct {
		A int `json:"a" jsonschema:"the first addend"`
		B int `json:"b" jsonschema:"the second addend"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers.\nReturns the sum as text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
			return text(strconv.Itoa(in.A + in.B)), nil, nil
		})
	type echoIn struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo the text back."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Block until the call is cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if h == nil {
				<-ctx.Done()
				return nil, nil, ctx.Err()
			}
			h.slowStarted <- struct{}{}
			select {
			case <-ctx.Done():
				h.slowEnded <- struct{}{}
				return nil, nil, ctx.Err()
			case <-h.release:
				return nil, nil, errors.New("released")
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("disk on fire")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "The server's process id."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(strconv.Itoa(os.Getpid())), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "big", Description: "A result longer than the cap."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(strings.Repeat("é", 30000)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "media", Description: "Mixed content."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "chart follows"},
				&mcp.ImageContent{Data: tinyPNG, MIMEType: "image/png"},
				&mcp.AudioContent{Data: make([]byte, 2048), MIMEType: "audio/wav"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///notes.txt", MIMEType: "text/plain", Text: "hello notes"}},
				&mcp.ResourceLink{URI: "file:///report.pdf", Name: "report"},
			}}, nil, nil
		})
	type mappedIn struct {
		Labels map[string]string `json:"labels"`
		Limit  *int              `json:"limit,omitempty"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "mapped", Description: "Count labels."},
		func(_ context.Context, _ *mcp.CallToolRequest, in mappedIn) (*mcp.CallToolResult, any, error) {
			return text(strconv.Itoa(len(in.Labels))), nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "odd.schema", Description: "Echo raw arguments.", InputSchema: json.RawMessage(oddSchema)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(string(req.Params.Arguments)), nil
		})
	if stdio {
		type envIn struct {
			Name string `json:"name"`
		}
		mcp.AddTool(s, &mcp.Tool{Name: "getenv", Description: "An environment variable of the server."},
			func(_ context.Context, _ *mcp.CallToolRequest, in envIn) (*mcp.CallToolResult, any, error) {
				return text(in.Name + "=" + os.Getenv(in.Name)), nil, nil
			})
		mcp.AddTool(s, &mcp.Tool{Name: "cwd", Description: "The server's working directory."},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				wd, err := os.Getwd()
				return text(wd), nil, err
			})
		mcp.AddTool(s, &mcp.Tool{Name: "huge", Description: "A result over the SDK's 16 MiB frame limit."},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return text(strings.Repeat("x", 17<<20)), nil, nil
			})
		mcp.AddTool(s, &mcp.Tool{Name: "garble", Description: "Write garbage to stdout, then hang."},
			func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				fmt.Fprintln(os.Stdout, "<<< not json >>>")
				<-ctx.Done()
				return nil, nil, ctx.Err()
			})
	}
	return s
}

// httpServer is a streamable HTTP MCP server on a loopback address that a
// test can stop and start again on the same address.
type httpServer struct {
	t          testing.TB
	addr       string
	ts         *httptest.Server
	mcp        *mcp.Server
	handshakes atomic.Int32 // MCP handshakes (initialize requests) served
}

func startHTTP(t testing.TB, addr string, srv *mcp.Server) *httpServer {
	t.Helper()
	h := &httpServer{t: t, mcp: srv}
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			// Every client handshake ends with initialize here: the
			// stateful handler turns server/discover away.
			if method == "initialize" {
				h.handshakes.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.mcp }, nil)
	ts := httptest.NewUnstartedServer(handler)
	if addr != "" {
		l, err := net.Listen("tcp", addr)
		require.NoError(t, err)
		_ = ts.Listener.Close()
		ts.Listener = l
	}
	ts.Start()
	h.ts = ts
	h.addr = ts.Listener.Addr().String()
	t.Cleanup(h.stop)
	return h
}

func (h *httpServer) url() string { return "http://" + h.addr + "/mcp" }

// stop closes the listener and every connection at once, as a crash would.
func (h *httpServer) stop() {
	if h.ts == nil {
		return
	}
	_ = h.ts.Config.Close()
	done := make(chan struct{})
	go func() {
		h.ts.Close() // waits for the handlers to return
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		h.t.Error("the test HTTP server did not stop: a handler is stuck")
	}
	h.ts = nil
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// quietLogger discards everything below errors.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
}

// waitPending waits until the fake clock has at least n timers armed.
func waitPending(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return clk.Pending() >= n }, 10*time.Second, time.Millisecond)
}

// childServer configures the test binary as a stdio server.
func childServer(t *testing.T, name, mode string) mcptool.Server {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return mcptool.Server{
		Name:    name,
		Command: exe,
		Env:     []string{serverEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"},
	}
}
