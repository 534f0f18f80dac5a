package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/clock"
)

var loopT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// recorder is a tool that records its arguments and answers "ok <args>".
type recorder struct {
	mu   sync.Mutex
	args []string
	fn   func(ctx context.Context, args json.RawMessage) (string, error)
}

func (rc *recorder) tool(name, schema string) agent.Tool {
	return agent.ToolFunc{
		ToolSpec: agent.ToolSpec{Name: name, Description: "Test tool " + name + ".\nMore text.", Parameters: json.RawMessage(schema)},
		F: func(ctx context.Context, args json.RawMessage) (string, error) {
			rc.mu.Lock()
			rc.args = append(rc.args, string(args))
			fn := rc.fn
			rc.mu.Unlock()
			if fn != nil {
				return fn(ctx, args)
			}
			return "ok " + string(args), nil
		},
	}
}

func (rc *recorder) calls() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.args...)
}

const anySchema = `{"type":"object","properties":{"q":{"type":"string"},"n":{"type":"integer"}}}`

type fixture struct {
	loop *agent.Loop
	clk  *clock.Fake
	reg  *agent.Registry
	rec  *recorder
}

// newFixture registers web_search (core), lookup (core), notes (deferred),
// secret_admin (deferred, owner tier), install_ext (core, extension) and
// self_state (core, introspection).
func newFixture(t *testing.T, cfg agent.LoopConfig) *fixture {
	t.Helper()
	f := &fixture{clk: clock.NewFake(loopT0), reg: agent.NewRegistry(), rec: &recorder{}}
	require.NoError(t, f.reg.Register(f.rec.tool("web_search", anySchema), agent.Core()))
	require.NoError(t, f.reg.Register(f.rec.tool("lookup", anySchema), agent.Core()))
	require.NoError(t, f.reg.Register(f.rec.tool("notes", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`), agent.Deferred(), agent.Purpose("Read the notebook")))
	require.NoError(t, f.reg.Register(f.rec.tool("secret_admin", anySchema), agent.Tiers("owner")))
	require.NoError(t, f.reg.Register(f.rec.tool("install_ext", anySchema), agent.Core(), agent.ChangesExtensions()))
	require.NoError(t, f.reg.Register(f.rec.tool("self_state", anySchema), agent.Core(), agent.Introspection()))
	cfg.Registry = f.reg
	cfg.Clock = f.clk
	l, err := agent.NewLoop(cfg)
	require.NoError(t, err)
	f.loop = l
	return f
}

func (f *fixture) input(m agent.Model) agent.LoopInput {
	return agent.LoopInput{
		RunInput: agent.RunInput{Model: m, Request: agent.Request{Messages: []agent.Message{
			{Role: agent.RoleSystem, Content: "You are Mika.", CacheBreakpoint: true},
			{Role: agent.RoleUser, Content: "[current] ann: hi"},
		}}},
		SessionKey: "g1",
		Deadline:   f.clk.Now().Add(3 * time.Minute),
	}
}

func finalize(text string) agenttest.Step {
	b, _ := json.Marshal(map[string]any{"text": text})
	return agenttest.ToolCall(agent.ToolFinalize, string(b))
}

// distinct calls name with arguments that differ on every call.
func distinct(name string) agenttest.Step {
	return agenttest.Func(func(_ context.Context, req agent.Request) (*agent.Response, error) {
		n := len(req.Messages)
		return &agent.Response{ToolCalls: []agent.ToolCall{{ID: fmt.Sprintf("d%d", n), Name: name, Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}}}, nil
	})
}

// toolResults returns the contents of the tool messages of req.
func toolResults(req agent.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == agent.RoleTool {
			out = append(out, m.Content)
		}
	}
	return out
}

func toolNames(req agent.Request) []string {
	var out []string
	for _, s := range req.Tools {
		out = append(out, s.Name)
	}
	return out
}

func TestLoopFinishReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      agent.LoopConfig
		steps    []agenttest.Step
		evidence bool
		want     agent.FinishReason
		wantText string
		wantFall string
	}{
		{name: "final", steps: []agenttest.Step{finalize("hello there")}, want: agent.FinishFinal, wantText: "hello there"},
		{name: "plain text", steps: []agenttest.Step{agenttest.Reply("hi ann")}, want: agent.FinishPlainText, wantText: "hi ann"},
		{name: "forced steps", cfg: agent.LoopConfig{Steps: 2},
			steps: []agenttest.Step{distinct("lookup"), distinct("lookup"), finalize("done")},
			want:  agent.FinishForcedSteps, wantText: "done"},
		{name: "forced repairs", steps: []agenttest.Step{
			agenttest.ToolCall("nope", "{}"), agenttest.ToolCall("nope2", "{}"), agenttest.ToolCall("nope3", "{}"), agenttest.ToolCall("nope4", "{}"),
			finalize("sorry")}, want: agent.FinishForcedRepairs, wantText: "sorry"},
		{name: "forced reserve", steps: []agenttest.Step{
			agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
				<-ctx.Done() // the test advances the clock below
				return nil, ctx.Err()
			}),
			finalize("quick answer")}, want: agent.FinishForcedReserve, wantText: "quick answer"},
		{name: "forced evidence", evidence: true, steps: []agenttest.Step{
			finalize("prices went up"), finalize("prices went up"), finalize("no sources, sorry")},
			want: agent.FinishForcedEvidence, wantText: "no sources, sorry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.cfg)
			steps := tt.steps
			if tt.want == agent.FinishForcedReserve {
				// The first call advances past the planning deadline and then
				// waits for its context.
				steps[0] = agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
					f.clk.Advance(2*time.Minute + 41*time.Second)
					<-ctx.Done()
					return nil, ctx.Err()
				})
			}
			m := agenttest.New(steps...)
			in := f.input(m)
			in.EvidenceRequired = tt.evidence
			res, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Finish)
			require.Equal(t, tt.wantText, res.Text)
			require.Equal(t, tt.wantFall, res.Fallback)
			require.Equal(t, 0, m.Pending())
			require.Equal(t, m.Calls(), res.Calls)
			if tt.want.Forced() {
				last := m.Last()
				require.Equal(t, []string{agent.ToolFinalize}, toolNames(last), "only agent_finalize is offered")
				require.Equal(t, agent.ToolFinalize, last.ToolChoice)
			}
		})
	}
}

func TestLoopStepLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       agent.LoopConfig
		owner     bool
		wantSteps int
	}{
		{name: "default 20", wantSteps: 20},
		{name: "owner 32", owner: true, wantSteps: 32},
		{name: "configured 5", cfg: agent.LoopConfig{Steps: 5}, wantSteps: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.cfg)
			m := agenttest.New().OnPurpose(agent.PurposeChat).Otherwise(distinct("lookup"))
			// The forced finish call gets a finalize: route by tool choice.
			mm := agent.ModelFunc(func(ctx context.Context, req agent.Request) (*agent.Response, error) {
				if req.ToolChoice == agent.ToolFinalize {
					return &agent.Response{ToolCalls: []agent.ToolCall{{ID: "f", Name: agent.ToolFinalize, Arguments: json.RawMessage(`{"text":"out of steps"}`)}}}, nil
				}
				return m.Generate(ctx, req)
			})
			in := f.input(mm)
			in.Owner = tt.owner
			res, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			require.Equal(t, agent.FinishForcedSteps, res.Finish)
			require.Equal(t, tt.wantSteps, res.Steps)
			require.Len(t, f.rec.calls(), tt.wantSteps)
			require.Equal(t, "out of steps", res.Text)
		})
	}
}

func TestLoopReplyLength(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 25000)
	for _, tt := range []struct {
		name  string
		owner bool
		want  int
	}{{"others 8000", false, 8000}, {"owner 20000", true, 20000}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, agent.LoopConfig{})
			in := f.input(agenttest.New(finalize(long)))
			in.Owner = tt.owner
			res, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			require.Len(t, res.Text, tt.want)
		})
	}
}

func TestLoopOneCallPerStep(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agent.LoopConfig{})
	m := agenttest.New(
		agenttest.ToolCalls([]agent.ToolCall{
			{ID: "a", Name: "lookup", Arguments: json.RawMessage(`{"q":"one"}`)},
			{ID: "b", Name: "lookup", Arguments: json.RawMessage(`{"q":"two"}`)},
			{Name: "web_search", Arguments: json.RawMessage(`{"q":"three"}`)},
		}),
		finalize("done"),
	)
	res, err := f.loop.RunLoop(t.Context(), f.input(m))
	require.NoError(t, err)
	require.Equal(t, agent.FinishFinal, res.Finish)
	require.Equal(t, []string{`{"q":"one"}`}, f.rec.calls(), "only the first call of the batch runs")
	require.Equal(t, 1, res.Steps)
	req := m.Requests()[1]
	var ids []string
	for _, msg := range req.Messages {
		if msg.Role == agent.RoleTool {
			ids = append(ids, msg.ToolCallID)
		}
	}
	require.Len(t, ids, 3, "every call of the batch gets a result")
	require.Equal(t, []string{"a", "b"}, ids[:2])
	results := toolResults(req)
	require.Contains(t, results[0], `ok {"q":"one"}`)
	require.Contains(t, results[0], "[budget: 19 steps left")
	require.Contains(t, results[1], "not executed")
	require.Contains(t, results[2], "not executed")
}

func TestLoopPreExecutionChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		owner       bool
		disabled    []string
		steps       []agenttest.Step
		wantObs     string // in the last tool result before finishing
		wantRepairs int
		wantSteps   int
		wantCalls   []string
	}{
		{name: "deferred tool not loaded", steps: []agenttest.Step{agenttest.ToolCall("notes", `{"n":1}`)},
			wantObs: "load it with tools_load first", wantRepairs: 1},
		{name: "deferred tool through tools_load and tools_execute", steps: []agenttest.Step{
			agenttest.ToolCall(agent.ToolsLoad, `{"names":["notes"]}`),
			agenttest.ToolCall(agent.ToolsExecute, `{"name":"notes","arguments":{"n":"7"}}`)},
			wantObs: `ok {"n":7}`, wantSteps: 1, wantCalls: []string{`{"n":7}`}},
		{name: "schema failure", steps: []agenttest.Step{
			agenttest.ToolCall(agent.ToolsLoad, `{"names":["notes"]}`),
			agenttest.ToolCall(agent.ToolsExecute, `{"name":"notes","arguments":{}}`)},
			wantObs: "arguments.n is required", wantRepairs: 1},
		{name: "unknown tool", steps: []agenttest.Step{agenttest.ToolCall("teleport", `{}`)},
			wantObs: `tool "teleport" does not exist`, wantRepairs: 1},
		{name: "denied tool answers no permission", steps: []agenttest.Step{agenttest.ToolCall("secret_admin", `{}`)},
			wantObs: "no permission", wantRepairs: 1},
		{name: "denied tool in tools_load", steps: []agenttest.Step{agenttest.ToolCall(agent.ToolsLoad, `{"names":["secret_admin","ghost"]}`)},
			wantObs: "secret_admin: no permission.\nghost: does not exist."},
		{name: "owner may call tiered tool", owner: true, steps: []agenttest.Step{
			agenttest.ToolCall(agent.ToolsLoad, `{"names":["secret_admin"]}`),
			agenttest.ToolCall("secret_admin", `{"q":"x"}`)},
			wantObs: `ok {"q":"x"}`, wantSteps: 1, wantCalls: []string{`{"q":"x"}`}},
		{name: "switched-off tool answers no permission", disabled: []string{"lookup"}, steps: []agenttest.Step{agenttest.ToolCall("lookup", `{}`)},
			wantObs: "no permission", wantRepairs: 1},
		{name: "lossless coercion", steps: []agenttest.Step{agenttest.ToolCall("lookup", `{"n":"3","q":42}`)},
			wantObs: `ok {"n":3,"q":"42"}`, wantSteps: 1, wantCalls: []string{`{"n":3,"q":"42"}`}},
		{name: "lossy coercion refused", steps: []agenttest.Step{agenttest.ToolCall("lookup", `{"n":"3.5"}`)},
			wantObs: "arguments.n must be an integer", wantRepairs: 1},
		{name: "identical repeat skipped", steps: []agenttest.Step{
			agenttest.ToolCall("lookup", `{"q":"a","n":1}`), agenttest.ToolCall("lookup", `{"n":1, "q":"a"}`)},
			wantObs: "skipped: identical to the previous call", wantRepairs: 1, wantSteps: 1, wantCalls: []string{`{"n":1,"q":"a"}`}},
		{name: "web_search quota 3", steps: []agenttest.Step{distinct("web_search"), distinct("web_search"), distinct("web_search"), distinct("web_search")},
			wantObs: "quota: web_search may be used 3 times", wantRepairs: 1, wantSteps: 3, wantCalls: []string{`{"n":3}`, `{"n":5}`, `{"n":7}`}},
		{name: "tools_load quota 4 without steps", steps: []agenttest.Step{
			agenttest.ToolCall(agent.ToolsLoad, `{"names":["notes"]}`), agenttest.ToolCall(agent.ToolsLoad, `{"names":["secret_admin"]}`),
			agenttest.ToolCall(agent.ToolsLoad, `{"names":["a"]}`), agenttest.ToolCall(agent.ToolsLoad, `{"names":["b"]}`),
			agenttest.ToolCall(agent.ToolsLoad, `{"names":["c"]}`)},
			wantObs: "quota: tools_load may be used 4 times", wantRepairs: 1, wantSteps: 0},
		{name: "introspection quota 6 without steps", steps: []agenttest.Step{
			distinct("self_state"), distinct("self_state"), distinct("self_state"), distinct("self_state"),
			distinct("self_state"), distinct("self_state"), distinct("self_state")},
			wantObs: "quota: introspection tools may be used 6 times", wantRepairs: 1, wantSteps: 0, wantCalls: []string{`{"n":3}`, `{"n":5}`, `{"n":7}`, `{"n":9}`, `{"n":11}`, `{"n":13}`}},
		{name: "malformed call without name", steps: []agenttest.Step{agenttest.ToolCall("  ", `{}`)},
			wantObs: "a tool call needs a tool name", wantRepairs: 1},
		{name: "garbage JSON arguments", steps: []agenttest.Step{agenttest.ToolCall("lookup", `{"q": nope`)},
			wantObs: "arguments are not valid JSON", wantRepairs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, agent.LoopConfig{})
			m := agenttest.New(append(tt.steps, finalize("done"))...)
			in := f.input(m)
			in.Owner = tt.owner
			in.Disabled = tt.disabled
			res, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			require.Equal(t, agent.FinishFinal, res.Finish)
			results := toolResults(m.Last())
			require.Contains(t, results[len(results)-1], tt.wantObs)
			require.Equal(t, tt.wantRepairs, res.Repairs)
			require.Equal(t, tt.wantSteps, res.Steps)
			if tt.wantCalls != nil || tt.wantSteps == 0 {
				require.Equal(t, tt.wantCalls, f.rec.calls())
			}
		})
	}
}

var confirmCodeRE = regexp.MustCompile(`code (\d{6})`)

func TestLoopConfirmationCode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agent.LoopConfig{})
	run := func(owner bool, message string) (*agent.LoopResult, string) {
		m := agenttest.New(agenttest.ToolCall("install_ext", `{"q":"weather"}`), finalize("ok"))
		in := f.input(m)
		in.Owner, in.Message = owner, message
		res, err := f.loop.RunLoop(t.Context(), in)
		require.NoError(t, err)
		results := toolResults(m.Last())
		return res, results[len(results)-1]
	}
	res, obs := run(true, "install the weather extension")
	require.Contains(t, obs, "confirmation needed")
	require.Equal(t, 1, res.Repairs)
	require.Empty(t, f.rec.calls())
	code := confirmCodeRE.FindStringSubmatch(obs)[1]

	_, obs = run(false, "sure, "+code)
	require.Contains(t, obs, "confirmation needed", "a non-owner's message does not confirm")
	require.Equal(t, code, confirmCodeRE.FindStringSubmatch(obs)[1], "the pending code is handed out again")

	res, obs = run(true, "confirm "+code)
	require.Contains(t, obs, `ok {"q":"weather"}`)
	require.Equal(t, 0, res.Repairs)
	require.Len(t, f.rec.calls(), 1)

	_, obs = run(true, "confirm "+code)
	require.Contains(t, obs, "confirmation needed", "the code is one-time")
	code2 := confirmCodeRE.FindStringSubmatch(obs)[1]
	f.clk.Advance(10*time.Minute + time.Second)
	_, obs = run(true, "confirm "+code2)
	require.Contains(t, obs, "confirmation needed", "the code expired after 10 minutes")
	require.Len(t, f.rec.calls(), 1)
}

func TestLoopToolTimeouts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		deadline time.Duration
		advance  time.Duration
		wantObs  string
		want     agent.FinishReason
	}{
		{name: "60 s per tool", deadline: 10 * time.Minute, advance: 61 * time.Second, wantObs: "lookup timed out after 1m0s", want: agent.FinishFinal},
		{name: "bounded by the planning deadline", deadline: time.Minute, advance: 41 * time.Second, wantObs: "lookup timed out after 40s", want: agent.FinishForcedReserve},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, agent.LoopConfig{})
			f.rec.fn = func(ctx context.Context, _ json.RawMessage) (string, error) {
				f.clk.Advance(tt.advance)
				<-ctx.Done()
				return "", ctx.Err()
			}
			m := agenttest.New(agenttest.ToolCall("lookup", `{}`), finalize("done"))
			in := f.input(m)
			in.Deadline = f.clk.Now().Add(tt.deadline)
			res, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Finish)
			results := toolResults(m.Last())
			require.Contains(t, results[0], tt.wantObs)
		})
	}
}

func TestLoopFinishReserve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      agent.LoopConfig
		deadline time.Duration
		elapsed  time.Duration
		want     agent.FinishReason
	}{
		// 180 s: reserve 20 s, planning until 160 s.
		{name: "configured reserve kept", deadline: 180 * time.Second, elapsed: 159 * time.Second, want: agent.FinishFinal},
		{name: "configured reserve reached", deadline: 180 * time.Second, elapsed: 160 * time.Second, want: agent.FinishForcedReserve},
		// 30 s: reserve = ⅓ = 10 s, planning until 20 s.
		{name: "third of remaining time", deadline: 30 * time.Second, elapsed: 20 * time.Second, want: agent.FinishForcedReserve},
		{name: "third of remaining time not reached", deadline: 30 * time.Second, elapsed: 19 * time.Second, want: agent.FinishFinal},
		{name: "configured 5 s", cfg: agent.LoopConfig{FinishReserve: 5 * time.Second}, deadline: 180 * time.Second, elapsed: 175 * time.Second, want: agent.FinishForcedReserve},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tt.cfg)
			m := agenttest.New(
				agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) {
					f.clk.Advance(tt.elapsed)
					return &agent.Response{ToolCalls: []agent.ToolCall{{ID: "x", Name: "lookup", Arguments: json.RawMessage(`{}`)}}}, nil
				}),
				finalize("done"))
			in := f.input(m)
			in.Deadline = f.clk.Now().Add(tt.deadline)
			res, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Finish)
			require.Equal(t, "done", res.Text)
		})
	}
}

func TestLoopDeadlineFromContext(t *testing.T) {
	t.Parallel()
	// Real clock, ctx deadline 300 ms: reserve 100 ms; a model that never
	// answers is abandoned at the planning deadline, the forced finish at
	// the request deadline; the run returns the fallback line in time.
	l, err := agent.NewLoop(agent.LoopConfig{})
	require.NoError(t, err)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	m := agent.ModelFunc(func(context.Context, agent.Request) (*agent.Response, error) {
		<-release // ignores its context
		return nil, errors.New("late")
	})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := l.RunLoop(ctx, agent.LoopInput{RunInput: agent.RunInput{Model: m}})
	require.NoError(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, agent.FinishForcedReserve, res.Finish)
	require.Equal(t, agent.DefaultFallbackText, res.Text)
	require.Equal(t, agent.FallbackLine, res.Fallback)
}

func TestLoopRobustness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		step agenttest.Step
		want agent.FinishReason
		// finish checks repair each kind once; the second failure forces
		finishCheck bool
	}{
		{name: "malformed calls", step: agenttest.ToolCall("", ``), want: agent.FinishForcedRepairs},
		{name: "unknown tools", step: distinct("does_not_exist"), want: agent.FinishForcedRepairs},
		{name: "prose tool calls", step: agenttest.Reply(`<tool_call>{"name":"web_search","arguments":{"q":"x"}}</tool_call>`), want: agent.FinishForcedRepairs, finishCheck: true},
		{name: "prose call by name", step: agenttest.Reply(`web_search({"q": "weather"})`), want: agent.FinishForcedRepairs, finishCheck: true},
		{name: "garbage JSON arguments", step: agenttest.ToolCall("lookup", `{{{`), want: agent.FinishForcedRepairs},
		{name: "garbage finalize arguments", step: agenttest.ToolCall(agent.ToolFinalize, `[1,2`), want: agent.FinishForcedRepairs},
		{name: "finalize not an object", step: agenttest.ToolCall(agent.ToolFinalize, `"hello"`), want: agent.FinishForcedRepairs},
		{name: "empty replies", step: agenttest.Reply("   "), want: agent.FinishForcedRepairs, finishCheck: true},
		{name: "tools_execute garbage", step: agenttest.ToolCall(agent.ToolsExecute, `{"name":42}`), want: agent.FinishForcedRepairs},
		{name: "tools_execute of finalize", step: agenttest.ToolCall(agent.ToolsExecute, `{"name":"agent_finalize"}`), want: agent.FinishForcedRepairs},
		{name: "panicking model", step: agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) { panic("boom") }), want: ""},
		{name: "nil response", step: agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) { return nil, nil }), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, agent.LoopConfig{})
			m := agenttest.New().Otherwise(tt.step)
			res, err := f.loop.RunLoop(t.Context(), f.input(m))
			if tt.want == "" {
				require.Error(t, err, "a broken model goes back to the reply flow")
				require.True(t, agent.Transient(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Finish)
			require.Equal(t, agent.DefaultFallbackText, res.Text)
			require.Equal(t, agent.FallbackLine, res.Fallback)
			if tt.finishCheck {
				require.Equal(t, 2, res.Repairs)
				require.Equal(t, 3, m.Calls(), "the check repaired once, failed again, then the forced finish")
				return
			}
			require.Equal(t, 3, res.Repairs)
			require.Equal(t, 5, m.Calls(), "4 planning calls (3 repaired) and the forced finish")
		})
	}
}

func TestLoopHangingModelAndTools(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agent.LoopConfig{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.rec.fn = func(context.Context, json.RawMessage) (string, error) {
		f.clk.Advance(61 * time.Second)
		<-release // ignores its context
		return "late", nil
	}
	calls := 0
	m := agent.ModelFunc(func(context.Context, agent.Request) (*agent.Response, error) {
		calls++
		if calls == 1 {
			return &agent.Response{ToolCalls: []agent.ToolCall{{ID: "1", Name: "lookup", Arguments: json.RawMessage(`{}`)}}}, nil
		}
		f.clk.Advance(5 * time.Minute)
		<-release // ignores its context
		return nil, errors.New("late")
	})
	res, err := f.loop.RunLoop(t.Context(), f.input(m))
	require.NoError(t, err)
	require.Equal(t, agent.FinishForcedReserve, res.Finish)
	require.Equal(t, agent.DefaultFallbackText, res.Text)
}

func TestLoopModelErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agent.LoopConfig{})
	boom := &agent.Error{Kind: agent.KindContentPolicy, Message: "refused"}
	_, err := f.loop.RunLoop(t.Context(), f.input(agenttest.New(agenttest.Fail(boom))))
	require.ErrorIs(t, err, boom)
	require.False(t, agent.Transient(err))

	_, err = f.loop.RunLoop(t.Context(), agent.LoopInput{})
	require.ErrorIs(t, err, agent.ErrNoModel)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = f.loop.RunLoop(ctx, f.input(agenttest.New(finalize("x"))))
	require.ErrorIs(t, err, context.Canceled)
}

func TestLoopFinishChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		image     bool
		evidence  bool
		history   string
		steps     []agenttest.Step
		wantText  string
		wantFin   agent.FinishReason
		wantNote  string
		silent    bool
		wantRepai int
	}{
		{name: "silent without image job", steps: []agenttest.Step{agenttest.ToolCall(agent.ToolFinalize, `{"silent":true}`)},
			wantText: agent.MarkerSilent, wantFin: agent.FinishFinal, silent: true},
		{name: "silent marker as text", steps: []agenttest.Step{agenttest.Reply(agent.MarkerSilent)},
			wantText: agent.MarkerSilent, wantFin: agent.FinishPlainText, silent: true},
		{name: "silence refused with image job", image: true, steps: []agenttest.Step{
			agenttest.ToolCall(agent.ToolFinalize, `{"silent":true}`), finalize("drawing it now")},
			wantText: "drawing it now", wantFin: agent.FinishFinal, wantNote: "image job is queued", wantRepai: 1},
		{name: "real line breaks", steps: []agenttest.Step{finalize("one\ntwo"), finalize("one[persona-line]two")},
			wantText: "one[persona-line]two", wantFin: agent.FinishFinal, wantNote: "real line breaks", wantRepai: 1},
		{name: "evidence required", evidence: true, steps: []agenttest.Step{
			finalize("it's 3 dollars"), agenttest.ToolCall("web_search", `{"q":"price"}`), finalize("it's 3 dollars")},
			wantText: "it's 3 dollars", wantFin: agent.FinishFinal, wantNote: "needs sources", wantRepai: 1},
		{name: "time-sensitive finalize", steps: []agenttest.Step{
			agenttest.ToolCall(agent.ToolFinalize, `{"text":"released today","time_sensitive":true}`),
			agenttest.ToolCall("web_search", `{"q":"release"}`),
			agenttest.ToolCall(agent.ToolFinalize, `{"text":"released today","time_sensitive":true}`)},
			wantText: "released today", wantFin: agent.FinishFinal, wantNote: "needs sources", wantRepai: 1},
		{name: "unfetched link", steps: []agenttest.Step{finalize("see https://example.com/a"), finalize("see the docs")},
			wantText: "see the docs", wantFin: agent.FinishFinal, wantNote: "https://example.com/a was neither fetched", wantRepai: 1},
		{name: "link seen in the conversation", history: "look at https://example.com/a", steps: []agenttest.Step{finalize("see https://example.com/a.")},
			wantText: "see https://example.com/a.", wantFin: agent.FinishFinal},
		{name: "leaked tool name", steps: []agenttest.Step{finalize("I used web_search"), finalize("I looked it up")},
			wantText: "I looked it up", wantFin: agent.FinishFinal, wantNote: "internal protocol text", wantRepai: 1},
		{name: "leaked marker syntax", steps: []agenttest.Step{finalize("hi [persona-foo]"), finalize("hi")},
			wantText: "hi", wantFin: agent.FinishFinal, wantNote: "internal protocol text", wantRepai: 1},
		{name: "leaked schema key", steps: []agenttest.Step{agenttest.Reply(`{"arguments": {"q": 1}}`), finalize("hi")},
			wantText: "hi", wantFin: agent.FinishFinal, wantNote: "internal protocol text", wantRepai: 1},
		{name: "empty text", steps: []agenttest.Step{finalize(""), finalize("hello")},
			wantText: "hello", wantFin: agent.FinishFinal, wantNote: "reply is empty", wantRepai: 1},
		{name: "same check twice forces finish", steps: []agenttest.Step{finalize("a\nb"), finalize("a\nb"), finalize("a\n\nb\nc")},
			wantText: "a[persona-msg]b[persona-line]c", wantFin: agent.FinishForcedRepairs, wantNote: "real line breaks", wantRepai: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, agent.LoopConfig{})
			f.rec.fn = func(ctx context.Context, _ json.RawMessage) (string, error) {
				agent.ReportEvidence(ctx, agent.Evidence{URL: "https://news.example/p", Title: "Price"})
				return "found", nil
			}
			m := agenttest.New(tt.steps...)
			in := f.input(m)
			in.EvidenceRequired = tt.evidence
			in.ImageQueued = func() bool { return tt.image }
			if tt.history != "" {
				in.Request.Messages = append([]agent.Message{{Role: agent.RoleUser, Content: tt.history}}, in.Request.Messages...)
			}
			res, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			require.Equal(t, tt.wantFin, res.Finish)
			require.Equal(t, tt.wantText, res.Text)
			require.Equal(t, tt.silent, res.Silent)
			require.Equal(t, tt.wantRepai, res.Repairs)
			require.Equal(t, 0, m.Pending())
			if tt.wantNote != "" {
				var all []string
				for _, msg := range m.Last().Messages {
					all = append(all, msg.Content)
				}
				require.Contains(t, strings.Join(all, "\n"), tt.wantNote)
			}
		})
	}
}

func TestLoopEmptyGenerationFallbacks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		image    bool
		say      bool
		steps    []agenttest.Step
		evidence bool
		wantText string
		wantFall string
		silent   bool
	}{
		{name: "pause marker", steps: []agenttest.Step{agenttest.Reply(agent.MarkerPause)},
			wantText: agent.DefaultPauseText + agent.MarkerPause, wantFall: agent.FallbackPause},
		{name: "refuse marker", steps: []agenttest.Step{finalize(agent.MarkerRefuse)},
			wantText: agent.DefaultRefusalText + agent.MarkerRefuse, wantFall: agent.FallbackRefusal},
		{name: "queued image job", image: true, steps: []agenttest.Step{finalize("")},
			wantText: agent.DefaultQueuedImageText, wantFall: agent.FallbackQueuedImage},
		{name: "already spoke with say", say: true, steps: []agenttest.Step{
			agenttest.ToolCall(agent.ToolSay, `{"text":"on it!"}`), finalize("")},
			wantText: agent.MarkerSilent, wantFall: agent.FallbackSaid, silent: true},
		{name: "fallback line", steps: []agenttest.Step{finalize(""), finalize(""), agenttest.Fail(errors.New("down"))},
			wantText: agent.DefaultFallbackText, wantFall: agent.FallbackLine},
		{name: "evidence digest after a failed forced finish", evidence: true, steps: []agenttest.Step{
			agenttest.ToolCall("web_search", `{"q":"x"}`), finalize(""), finalize(""), agenttest.ToolCall(agent.ToolFinalize, `garbage`)},
			wantText: "Here's what I found:[persona-line]Price — https://news.example/p (up 3%)", wantFall: agent.FallbackDigest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, agent.LoopConfig{})
			f.rec.fn = func(ctx context.Context, _ json.RawMessage) (string, error) {
				agent.ReportEvidence(ctx, agent.Evidence{URL: "https://news.example/p", Title: "Price", Excerpt: "up 3%"})
				return "found", nil
			}
			m := agenttest.New(tt.steps...)
			in := f.input(m)
			in.ImageQueued = func() bool { return tt.image }
			if tt.say {
				in.Say = func(context.Context, string) error { return nil }
			}
			res, err := f.loop.RunLoop(t.Context(), in)
			require.NoError(t, err)
			require.Equal(t, tt.wantText, res.Text)
			require.Equal(t, tt.wantFall, res.Fallback)
			require.Equal(t, tt.silent, res.Silent)
		})
	}
}

func TestLoopSay(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agent.LoopConfig{})
	var sent []string
	m := agenttest.New(
		agenttest.ToolCall(agent.ToolSay, `{"text":"let me check"}`),
		agenttest.ToolCall("lookup", `{}`),
		agenttest.ToolCall(agent.ToolSay, `{"text":"let me check"}`),
		finalize("it's fine"))
	in := f.input(m)
	in.Say = func(_ context.Context, text string) error { sent = append(sent, text); return nil }
	res, err := f.loop.RunLoop(t.Context(), in)
	require.NoError(t, err)
	require.Equal(t, []string{"let me check"}, sent, "say sends once")
	require.Equal(t, []string{"let me check"}, res.Said)
	results := toolResults(m.Last())
	require.Contains(t, results[0], "sent")
	require.Contains(t, results[2], "already said")

	// Without a callback say is an observation, not a failure.
	m = agenttest.New(agenttest.ToolCall(agent.ToolSay, `{"text":"hi"}`), finalize("x"))
	res, err = f.loop.RunLoop(t.Context(), f.input(m))
	require.NoError(t, err)
	require.Equal(t, 0, res.Repairs)
	require.Contains(t, toolResults(m.Last())[0], "not available")
}

type evidenceTool struct{}

func (evidenceTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: "browser_render", Description: "Render a page."}
}

func (evidenceTool) Call(context.Context, json.RawMessage) (string, error) { return "", nil }

func (evidenceTool) CallResult(ctx context.Context, _ json.RawMessage) (agent.ToolResult, error) {
	agent.ReportEvidence(ctx, agent.Evidence{URL: "https://b.example/2", Title: "B"})
	return agent.ToolResult{Text: "page text", Evidence: []agent.Evidence{{URL: "https://a.example/1", Title: "A", Excerpt: "token=supersecretvalue"}}}, nil
}

func TestLoopToolResults(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agent.LoopConfig{Secrets: []string{"hunter2-value"}, ToolOutputChars: 100})
	require.NoError(t, f.reg.Register(evidenceTool{}, agent.Core()))
	n := 0
	f.rec.fn = func(context.Context, json.RawMessage) (string, error) {
		n++
		if n == 1 {
			return "partial", errors.New("backend down")
		}
		return "pw hunter2-value key sk-abcdefghijklmnopqrstuvwx " + strings.Repeat("x", 200), nil
	}
	m := agenttest.New(
		agenttest.ToolCall("lookup", `{"q":"1"}`),
		agenttest.ToolCall("lookup", `{"q":"2"}`),
		agenttest.ToolCall("browser_render", `{}`),
		finalize("see https://a.example/1 and https://b.example/2"))
	res, err := f.loop.RunLoop(t.Context(), f.input(m))
	require.NoError(t, err)
	require.Equal(t, agent.FinishFinal, res.Finish, "links from the evidence ledger are allowed")
	results := toolResults(m.Last())
	require.Contains(t, results[0], "error: backend down\npartial", "tool errors are observations")
	require.NotContains(t, results[1], "hunter2-value")
	require.NotContains(t, results[1], "sk-abcdef")
	require.Contains(t, results[1], "pw [redacted] key [redacted]")
	require.Contains(t, results[1], "…[truncated")
	require.Len(t, res.Evidence, 2)
	require.Equal(t, "browser_render", res.Evidence[0].Tool)
	require.Equal(t, "token=[redacted]", res.Evidence[1].Excerpt)
	require.Len(t, res.ToolCalls, 3)
	require.Equal(t, 3, res.Steps)
}

func TestLoopRunner(t *testing.T) {
	t.Parallel()
	l, err := agent.NewLoop(agent.LoopConfig{})
	require.NoError(t, err)
	var r agent.Runner = l
	m := agenttest.New(agenttest.ToolCall(agent.ToolFinalize, `{"text":"hi"}`, agenttest.WithUsage(agent.Usage{InputTokens: 10})))
	res, err := r.Run(t.Context(), agent.RunInput{Model: m, Request: agent.Request{Messages: []agent.Message{{Role: agent.RoleUser, Content: "hey"}}}})
	require.NoError(t, err)
	require.Equal(t, &agent.Result{Text: "hi", Usage: agent.Usage{InputTokens: 10}, Model: agenttest.ModelName, Calls: 1}, res)
	req := m.Last()
	require.Equal(t, agent.PurposeChat, req.Purpose)
	require.Equal(t, []string{agent.ToolFinalize, agent.ToolSay, agent.ToolsLoad, agent.ToolsExecute}, toolNames(req))
	require.Equal(t, agent.RoleSystem, req.Messages[0].Role, "the protocol block goes before the current message")
	require.Contains(t, req.Messages[0].Content, "Tool protocol")
}

func TestLoopCatalogAndPermissions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agent.LoopConfig{})
	for _, owner := range []bool{false, true} {
		m := agenttest.New(finalize("x"))
		in := f.input(m)
		in.Owner = owner
		_, err := f.loop.RunLoop(t.Context(), in)
		require.NoError(t, err)
		req := m.Last()
		block := req.Messages[1].Content
		require.Contains(t, block, "- notes: Read the notebook")
		require.Equal(t, owner, strings.Contains(block, "- secret_admin: Test tool secret_admin."), "denied tools are trimmed from the catalog")
		require.Equal(t, []string{agent.ToolFinalize, agent.ToolSay, agent.ToolsLoad, agent.ToolsExecute, "web_search", "lookup", "install_ext", "self_state"}, toolNames(req))
		require.Equal(t, "[current] ann: hi", req.Messages[2].Content)
	}
}

func TestLoopTiers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agent.LoopConfig{})
	m := agenttest.New(agenttest.ToolCall(agent.ToolsLoad, `{"names":["secret_admin"]}`), agenttest.ToolCall(agent.ToolsExecute, `{"name":"secret_admin","arguments":{"q":"z"}}`), finalize("x"))
	in := f.input(m)
	in.Tiers = []string{"owner"}
	_, err := f.loop.RunLoop(t.Context(), in)
	require.NoError(t, err)
	require.Equal(t, []string{`{"q":"z"}`}, f.rec.calls())
}

type screenshotTool struct{ images []string }

func (screenshotTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: "browser_render", Description: "Render a page."}
}

func (screenshotTool) Call(context.Context, json.RawMessage) (string, error) { return "", nil }

func (s screenshotTool) CallResult(context.Context, json.RawMessage) (agent.ToolResult, error) {
	return agent.ToolResult{Text: "page text", Images: s.images}, nil
}

// TestLoopToolImages: a tool's pictures follow its result as a user
// message with image parts when the loop may pass them on (at most
// MaxToolImages, data URLs only), and are dropped otherwise.
func TestLoopToolImages(t *testing.T) {
	t.Parallel()
	shots := []string{"data:image/png;base64,AAAA", "https://evil.example/x.png", "data:image/jpeg;base64,BBBB", "data:image/png;base64,CCCC"}
	for _, on := range []bool{true, false} {
		f := newFixture(t, agent.LoopConfig{ToolImages: on})
		require.NoError(t, f.reg.Register(screenshotTool{images: shots}, agent.Core()))
		m := agenttest.New(agenttest.ToolCall("browser_render", `{}`), finalize("done"))
		_, err := f.loop.RunLoop(t.Context(), f.input(m))
		require.NoError(t, err)
		msgs := m.Last().Messages
		var parts []agent.Part
		toolAt, picsAt := -1, -1
		for i, msg := range msgs {
			if msg.Role == agent.RoleTool && toolAt < 0 {
				toolAt = i
			}
			if len(msg.Parts) > 0 {
				picsAt, parts = i, msg.Parts
			}
		}
		require.GreaterOrEqual(t, toolAt, 0)
		if !on {
			require.Empty(t, parts, "a model that takes no images gets none")
			continue
		}
		require.Greater(t, picsAt, toolAt, "the pictures follow the tool's answer")
		require.Equal(t, agent.RoleUser, msgs[picsAt].Role)
		require.Len(t, parts, agent.MaxToolImages)
		require.Equal(t, shots[0], parts[0].ImageURL)
		require.Equal(t, shots[2], parts[1].ImageURL, "only data: URLs, never a URL the model would fetch")
	}
}
