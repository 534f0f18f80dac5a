package mcptool

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/personakit/persona/agent"
)

// Limits of what a result hands to the model.
const (
	maxDescriptionRunes = 4000
	maxImages           = 4
	maxImageBytes       = 5 << 20
)

// JSON-RPC codes the SDK uses for transport states rather than answers.
const (
	codeRejected      = -32005 // the transport did not deliver the request
	codeClientClosing = -32003
	codeServerClosing = -32004
)

var errCallTimeout = errors.New("call timeout")

// remoteTool is one MCP tool as an agent tool. It holds no session: each
// call looks up the server's live session, so a reconnect needs no new
// registration.
type remoteTool struct {
	c       *conn
	name    string
	remote  string
	spec    agent.ToolSpec
	purpose string
	relaxed string
}

var _ agent.ResultTool = (*remoteTool)(nil)

func newRemoteTool(c *conn, name string, t *mcp.Tool) *remoteTool {
	params, relaxed := parameters(t.InputSchema)
	desc := capRunes(strings.TrimSpace(t.Description), maxDescriptionRunes)
	purpose := desc
	if purpose == "" {
		purpose = t.Title
	}
	if purpose == "" && t.Annotations != nil {
		purpose = t.Annotations.Title
	}
	if strings.TrimSpace(purpose) == "" {
		purpose = fmt.Sprintf("Tool %s of the MCP server %s.", t.Name, c.cfg.Name)
	}
	if desc == "" {
		desc = purpose
	}
	return &remoteTool{
		c:       c,
		name:    name,
		remote:  t.Name,
		spec:    agent.ToolSpec{Name: name, Description: desc, Parameters: params},
		purpose: purpose,
		relaxed: relaxed,
	}
}

// Spec describes the tool with the server's description and schema.
func (t *remoteTool) Spec() agent.ToolSpec { return t.spec }

// Call runs the tool on the server and returns its text.
func (t *remoteTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	res, err := t.CallResult(ctx, args)
	return res.Text, err
}

// CallResult runs the tool on the server; pictures it returns are handed
// on as data: URLs besides their summary in the text.
func (t *remoteTool) CallResult(ctx context.Context, args json.RawMessage) (agent.ToolResult, error) {
	return t.c.call(ctx, t.remote, args)
}

// call runs one tool call on the live session, bounded by CallTimeout, ctx
// and Close. A broken session is retired and reconnected; the call is
// retried once on a new session only when the request certainly did not
// reach the server, so a tool never runs twice for one call.
func (c *conn) call(ctx context.Context, tool string, args json.RawMessage) (agent.ToolResult, error) {
	arguments, err := callArgs(args)
	if err != nil {
		return agent.ToolResult{}, fmt.Errorf("mcp server %q, tool %q: %w", c.cfg.Name, tool, err)
	}
	if !c.src.beginCall() {
		return agent.ToolResult{}, fmt.Errorf("mcp server %q, tool %q: %w", c.cfg.Name, tool, ErrClosed)
	}
	defer c.src.calls.Done()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.src.life, func() { cancel(ErrClosed) })
	defer stop()
	ctx, cancelTimeout := withTimeout(ctx, c.clk(), c.cfg.CallTimeout, errCallTimeout)
	defer cancelTimeout()

	for try := 0; ; try++ {
		sess, err := c.get(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return agent.ToolResult{}, c.ctxErr(ctx, tool)
			}
			return agent.ToolResult{}, err
		}
		if !c.offers(tool) {
			return agent.ToolResult{}, fmt.Errorf("%w %s (tool %q)", ErrToolGone, c.cfg.Name, tool)
		}
		res, err := sess.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: arguments})
		if err == nil {
			return render(c.cfg.Name, tool, res)
		}
		if ctx.Err() != nil {
			return agent.ToolResult{}, c.ctxErr(ctx, tool)
		}
		broken, unsent := classify(err)
		if !broken {
			return agent.ToolResult{}, fmt.Errorf("mcp server %q, tool %q: %w", c.cfg.Name, tool, err)
		}
		c.lost(sess, err)
		if unsent && try == 0 {
			continue
		}
		return agent.ToolResult{}, fmt.Errorf("mcp server %q: %w during the call to %q (reconnecting): %w", c.cfg.Name, ErrConnectionLost, tool, err)
	}
}

func (c *conn) ctxErr(ctx context.Context, tool string) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errCallTimeout):
		return fmt.Errorf("mcp server %q: tool %q %w after %s", c.cfg.Name, tool, ErrTimeout, c.cfg.CallTimeout)
	case errors.Is(cause, ErrClosed):
		return fmt.Errorf("mcp server %q, tool %q: %w", c.cfg.Name, tool, ErrClosed)
	default:
		return fmt.Errorf("mcp server %q, tool %q: %w", c.cfg.Name, tool, ctx.Err())
	}
}

// callArgs checks that args is a JSON object (empty means {}).
func callArgs(args json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 {
		return json.RawMessage("{}"), nil
	}
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, errors.New("arguments must be a JSON object")
	}
	return json.RawMessage(trimmed), nil
}

// classify tells whether a call error means the session is broken, and
// whether the request then certainly did not reach the server (so that
// retrying it on a new session cannot run the tool twice). A JSON-RPC
// error answered by the server (unknown tool, invalid params) leaves the
// session as it is; an HTTP failure (refused, reset, a 5xx or 429 status)
// retires it, since the server may have restarted without its sessions.
func classify(err error) (broken, unsent bool) {
	if errors.Is(err, mcp.ErrSessionMissing) {
		return true, true // the server answered 404: it does not know the session
	}
	if errors.Is(err, mcp.ErrConnectionClosed) {
		return true, false
	}
	rejected, answered := false, false
	for _, code := range wireCodes(err) {
		switch code {
		case codeRejected:
			rejected = true
		case codeClientClosing, codeServerClosing:
		default:
			answered = true
		}
	}
	switch {
	case answered:
		return false, false
	case rejected:
		// The HTTP request failed. Only a failed dial proves the server
		// never saw it; an EOF or a 5xx may come after the tool ran.
		var op *net.OpError
		return true, errors.As(err, &op) && op.Op == "dial"
	default:
		return true, false // the stream broke (EOF, undecodable output)
	}
}

// wireCodes collects the JSON-RPC error codes anywhere in err's tree.
func wireCodes(err error) []int64 {
	var codes []int64
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if w, ok := e.(*jsonrpc.Error); ok { //nolint:errorlint // walking the tree by hand
			codes = append(codes, w.Code)
		}
		switch u := e.(type) { //nolint:errorlint // walking the tree by hand
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return codes
}

// render turns a tool result into the observation: text parts joined by
// newlines, other content summarised in brackets, structured content as
// JSON when there is nothing else, all capped at MaxResultRunes. An
// isError result becomes an error carrying the server's text.
func render(server, tool string, res *mcp.CallToolResult) (agent.ToolResult, error) {
	var out agent.ToolResult
	if res == nil {
		return out, fmt.Errorf("mcp server %q, tool %q: empty result", server, tool)
	}
	parts := make([]string, 0, len(res.Content))
	for _, item := range res.Content {
		switch x := item.(type) {
		case *mcp.TextContent:
			parts = append(parts, x.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %s]", orUnknown(x.MIMEType), byteSize(len(x.Data))))
			if url, ok := imageURL(x); ok && len(out.Images) < maxImages {
				out.Images = append(out.Images, url)
			}
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %s]", orUnknown(x.MIMEType), byteSize(len(x.Data))))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link %s: %s]", firstNonEmpty(x.Title, x.Name, "untitled"), x.URI))
		case *mcp.EmbeddedResource:
			parts = append(parts, embedded(x.Resource))
		case nil:
		default:
			parts = append(parts, fmt.Sprintf("[unsupported content %T]", item))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	text := capRunes(strings.Join(parts, "\n"), MaxResultRunes)
	if res.IsError {
		if strings.TrimSpace(text) == "" {
			text = "no error message"
		}
		return agent.ToolResult{}, fmt.Errorf("mcp server %q, tool %q: %w: %s", server, tool, ErrToolFailed, text)
	}
	out.Text = text
	return out, nil
}

func embedded(r *mcp.ResourceContents) string {
	switch {
	case r == nil:
		return "[resource]"
	case r.Text != "":
		return fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text)
	default:
		return fmt.Sprintf("[resource %s, %s, %s]", r.URI, orUnknown(r.MIMEType), byteSize(len(r.Blob)))
	}
}

func imageURL(x *mcp.ImageContent) (string, bool) {
	switch x.MIMEType {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
	default:
		return "", false
	}
	if len(x.Data) == 0 || len(x.Data) > maxImageBytes {
		return "", false
	}
	return "data:" + x.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(x.Data), true
}

// capRunes cuts s to max runes and says so at the end.
func capRunes(s string, limit int) string {
	n := utf8.RuneCountInString(s)
	if n <= limit {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == limit {
			break
		}
		count++
	}
	return s[:i] + fmt.Sprintf("\n[… truncated: showing %d of %d characters]", limit, n)
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "of unknown type"
	}
	return s
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}
