package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/personakit/persona/agent"
)

// ErrExhausted is returned (wrapped) when a call finds no scripted step and
// no fallback was set with [Model.Otherwise].
var ErrExhausted = errors.New("agenttest: script exhausted")

// ModelName is the Response.Model reported by scripted replies.
const ModelName = "agenttest"

// Step is one scripted answer. Build it with [Reply], [ToolCall],
// [ToolCalls], [Echo], [Fail] or [Func]; the zero Step answers with an error.
type Step struct {
	fn func(ctx context.Context, call int, req agent.Request) (*agent.Response, error)
}

// Option adjusts the response of a [Reply], [ToolCall], [ToolCalls] or
// [Echo] step.
type Option func(*agent.Response)

// WithUsage sets the token accounting of the response.
func WithUsage(u agent.Usage) Option { return func(r *agent.Response) { r.Usage = u } }

// WithFinishReason overrides the finish reason ("stop" for text, "tool_calls"
// for tool calls).
func WithFinishReason(reason string) Option {
	return func(r *agent.Response) { r.FinishReason = reason }
}

// WithModel overrides Response.Model (default [ModelName]).
func WithModel(name string) Option { return func(r *agent.Response) { r.Model = name } }

// Reply answers with text and finish reason "stop".
func Reply(text string, opts ...Option) Step {
	return Step{fn: func(context.Context, int, agent.Request) (*agent.Response, error) {
		return respond(&agent.Response{Text: text, FinishReason: "stop"}, opts), nil
	}}
}

// ReplyWithUsage is Reply(text, WithUsage(u)).
func ReplyWithUsage(text string, u agent.Usage) Step { return Reply(text, WithUsage(u)) }

// ToolCall answers with one call of the named tool with raw JSON arguments
// ("" means "{}"; invalid JSON is passed through, to test repairs). The call
// ID is "call_<n>" where n is the 1-based number of the Generate call.
func ToolCall(name, argsJSON string, opts ...Option) Step {
	return Step{fn: func(_ context.Context, call int, _ agent.Request) (*agent.Response, error) {
		tc := agent.ToolCall{ID: "call_" + strconv.Itoa(call), Name: name, Arguments: rawArgs(argsJSON)}
		return respond(&agent.Response{ToolCalls: []agent.ToolCall{tc}, FinishReason: "tool_calls"}, opts), nil
	}}
}

// ToolCalls answers with a batch of tool calls, as a model that calls
// several tools in one step does. Calls without an ID get "call_<n>_<i>";
// empty arguments become "{}".
func ToolCalls(calls []agent.ToolCall, opts ...Option) Step {
	calls = cloneToolCalls(calls)
	return Step{fn: func(_ context.Context, call int, _ agent.Request) (*agent.Response, error) {
		out := cloneToolCalls(calls)
		for i := range out {
			if out[i].ID == "" {
				out[i].ID = "call_" + strconv.Itoa(call) + "_" + strconv.Itoa(i)
			}
			if len(out[i].Arguments) == 0 {
				out[i].Arguments = json.RawMessage("{}")
			}
		}
		return respond(&agent.Response{ToolCalls: out, FinishReason: "tool_calls"}, opts), nil
	}}
}

// Echo answers with the content of the request's last user message prefixed
// by "echo: ".
func Echo(opts ...Option) Step {
	return Step{fn: func(_ context.Context, _ int, req agent.Request) (*agent.Response, error) {
		text := ""
		for i := len(req.Messages) - 1; i >= 0; i-- {
			if req.Messages[i].Role == agent.RoleUser {
				text = req.Messages[i].Content
				break
			}
		}
		return respond(&agent.Response{Text: "echo: " + text, FinishReason: "stop"}, opts), nil
	}}
}

// Fail answers with err, e.g. an [*agent.Error] to test retry handling.
func Fail(err error) Step {
	return Step{fn: func(context.Context, int, agent.Request) (*agent.Response, error) {
		return nil, err
	}}
}

// Func answers by calling fn with the caller's context and a private copy of
// the request. fn runs without the Model's lock held, so it may block (on
// ctx, a channel, …); it is responsible for honouring ctx itself.
func Func(fn func(ctx context.Context, req agent.Request) (*agent.Response, error)) Step {
	return Step{fn: func(ctx context.Context, _ int, req agent.Request) (*agent.Response, error) {
		return fn(ctx, CloneRequest(req))
	}}
}

func respond(r *agent.Response, opts []Option) *agent.Response {
	r.Model = ModelName
	for _, o := range opts {
		o(r)
	}
	return r
}

func rawArgs(s string) json.RawMessage {
	if s == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(s)
}

// Model is a scripted [agent.Model]. Each Generate call takes the next step
// of the script for its purpose (see [Model.OnPurpose]), else the next step
// of the general script, else the fallback set with [Model.Otherwise], else
// fails with [ErrExhausted]. Every request is recorded.
//
// Methods are safe for concurrent use.
type Model struct {
	mu        sync.Mutex
	script    []Step
	byPurpose map[string][]Step
	otherwise *Step
	requests  []agent.Request
	calls     int
	keep      int // 0: all, <0: none, >0: the last keep requests
}

var _ agent.Model = (*Model)(nil)

// New returns a Model that answers with steps in order.
func New(steps ...Step) *Model {
	return &Model{script: slices.Clone(steps)}
}

// Add appends steps to the general script and returns m.
func (m *Model) Add(steps ...Step) *Model {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.script = append(m.script, steps...)
	return m
}

// OnPurpose appends steps to the script for requests with the given purpose
// (e.g. [agent.PurposeRouter]); such requests use it before the general
// script. It returns m.
func (m *Model) OnPurpose(purpose string, steps ...Step) *Model {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byPurpose == nil {
		m.byPurpose = make(map[string][]Step)
	}
	m.byPurpose[purpose] = append(m.byPurpose[purpose], steps...)
	return m
}

// Otherwise sets the step used for every call once the scripts are used up
// (instead of failing with [ErrExhausted]), e.g. Otherwise(Reply("ok")) for
// benchmarks. It returns m.
func (m *Model) Otherwise(step Step) *Model {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.otherwise = &step
	return m
}

// KeepLast bounds the recorded requests to the most recent n (n < 0 records
// none; 0, the default, keeps all), for long benchmarks. Calls still counts
// every call. It returns m.
func (m *Model) KeepLast(n int) *Model {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keep = n
	m.trim()
	return m
}

// Generate answers req with the next step. A request whose ctx is already
// done is recorded but consumes no step and returns ctx.Err().
func (m *Model) Generate(ctx context.Context, req agent.Request) (*agent.Response, error) {
	m.mu.Lock()
	m.calls++
	call := m.calls
	if m.keep >= 0 {
		m.requests = append(m.requests, CloneRequest(req))
		m.trim()
	}
	if err := ctx.Err(); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	step, ok := m.pop(req.Purpose)
	m.mu.Unlock()

	if !ok {
		return nil, fmt.Errorf("%w (call %d, purpose %q)", ErrExhausted, call, req.Purpose)
	}
	if step.fn == nil {
		return nil, fmt.Errorf("agenttest: zero Step (call %d)", call)
	}
	return step.fn(ctx, call, req) // only Func hands req on, as a copy
}

// pop takes the next step for purpose; m.mu must be held.
func (m *Model) pop(purpose string) (Step, bool) {
	if q := m.byPurpose[purpose]; len(q) > 0 {
		m.byPurpose[purpose] = q[1:]
		return q[0], true
	}
	if len(m.script) > 0 {
		s := m.script[0]
		m.script = m.script[1:]
		return s, true
	}
	if m.otherwise != nil {
		return *m.otherwise, true
	}
	return Step{}, false
}

// trim drops old requests beyond the KeepLast bound; m.mu must be held.
func (m *Model) trim() {
	switch {
	case m.keep < 0:
		m.requests = nil
	case m.keep > 0 && len(m.requests) > 2*m.keep:
		// Amortised: copy down only when the slice has doubled.
		m.requests = append(m.requests[:0:0], m.requests[len(m.requests)-m.keep:]...)
	}
}

// Requests returns copies of the recorded requests, oldest first.
func (m *Model) Requests() []agent.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	reqs := m.requests
	if m.keep > 0 && len(reqs) > m.keep {
		reqs = reqs[len(reqs)-m.keep:]
	}
	out := make([]agent.Request, len(reqs))
	for i, r := range reqs {
		out[i] = CloneRequest(r)
	}
	return out
}

// Calls returns the number of Generate calls so far.
func (m *Model) Calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

// Last returns a copy of the most recent recorded request, or the zero
// Request when none was recorded.
func (m *Model) Last() agent.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.requests) == 0 {
		return agent.Request{}
	}
	return CloneRequest(m.requests[len(m.requests)-1])
}

// Pending returns the number of scripted steps not yet used (general and
// per-purpose scripts; the Otherwise fallback is not counted). Tests use it
// to check that a script was consumed completely.
func (m *Model) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.script)
	for _, q := range m.byPurpose {
		n += len(q)
	}
	return n
}

// CloneRequest returns a deep copy of req: no slice, byte slice or pointer
// is shared with the original.
func CloneRequest(req agent.Request) agent.Request {
	out := req
	if req.Messages != nil {
		out.Messages = make([]agent.Message, len(req.Messages))
		for i, msg := range req.Messages {
			msg.Parts = slices.Clone(msg.Parts)
			msg.ToolCalls = cloneToolCalls(msg.ToolCalls)
			out.Messages[i] = msg
		}
	}
	if req.Tools != nil {
		out.Tools = make([]agent.ToolSpec, len(req.Tools))
		for i, t := range req.Tools {
			t.Parameters = slices.Clone(t.Parameters)
			out.Tools[i] = t
		}
	}
	if req.Temperature != nil {
		t := *req.Temperature
		out.Temperature = &t
	}
	return out
}

func cloneToolCalls(calls []agent.ToolCall) []agent.ToolCall {
	if calls == nil {
		return nil
	}
	out := make([]agent.ToolCall, len(calls))
	for i, tc := range calls {
		tc.Arguments = slices.Clone(tc.Arguments)
		out[i] = tc
	}
	return out
}
