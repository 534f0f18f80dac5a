package agenttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
)

func user(text string) agent.Request {
	return agent.Request{Purpose: agent.PurposeChat, Messages: []agent.Message{{Role: agent.RoleUser, Content: text}}}
}

func TestSteps(t *testing.T) {
	t.Parallel()
	boom := &agent.Error{Kind: agent.KindServer, Status: 503, Message: "overloaded"}
	usage := agent.Usage{InputTokens: 100, CachedInputTokens: 64, OutputTokens: 5}
	tests := []struct {
		name    string
		step    agenttest.Step
		req     agent.Request
		want    *agent.Response
		wantErr error
	}{
		{
			name: "reply",
			step: agenttest.Reply("hi"),
			want: &agent.Response{Text: "hi", FinishReason: "stop", Model: agenttest.ModelName},
		},
		{
			name: "reply with usage option",
			step: agenttest.Reply("hi", agenttest.WithUsage(usage), agenttest.WithModel("m2"), agenttest.WithFinishReason("length")),
			want: &agent.Response{Text: "hi", FinishReason: "length", Model: "m2", Usage: usage},
		},
		{
			name: "reply with usage constructor",
			step: agenttest.ReplyWithUsage("hi", usage),
			want: &agent.Response{Text: "hi", FinishReason: "stop", Model: agenttest.ModelName, Usage: usage},
		},
		{
			name: "tool call",
			step: agenttest.ToolCall("web_search", `{"q":"go"}`),
			want: &agent.Response{FinishReason: "tool_calls", Model: agenttest.ModelName, ToolCalls: []agent.ToolCall{
				{ID: "call_1", Name: "web_search", Arguments: json.RawMessage(`{"q":"go"}`)},
			}},
		},
		{
			name: "tool call without arguments",
			step: agenttest.ToolCall("agent_finalize", ""),
			want: &agent.Response{FinishReason: "tool_calls", Model: agenttest.ModelName, ToolCalls: []agent.ToolCall{
				{ID: "call_1", Name: "agent_finalize", Arguments: json.RawMessage(`{}`)},
			}},
		},
		{
			name: "tool call batch",
			step: agenttest.ToolCalls([]agent.ToolCall{{Name: "a"}, {ID: "x", Name: "b", Arguments: json.RawMessage(`{"k":1}`)}}),
			want: &agent.Response{FinishReason: "tool_calls", Model: agenttest.ModelName, ToolCalls: []agent.ToolCall{
				{ID: "call_1_0", Name: "a", Arguments: json.RawMessage(`{}`)},
				{ID: "x", Name: "b", Arguments: json.RawMessage(`{"k":1}`)},
			}},
		},
		{
			name: "echo",
			step: agenttest.Echo(),
			req: agent.Request{Messages: []agent.Message{
				{Role: agent.RoleSystem, Content: "persona"},
				{Role: agent.RoleUser, Content: "first"},
				{Role: agent.RoleAssistant, Content: "answer"},
				{Role: agent.RoleUser, Content: "second"},
				{Role: agent.RoleSystem, Content: "clock"},
			}},
			want: &agent.Response{Text: "echo: second", FinishReason: "stop", Model: agenttest.ModelName},
		},
		{
			name: "echo without user message",
			step: agenttest.Echo(),
			req:  agent.Request{Messages: []agent.Message{{Role: agent.RoleSystem, Content: "x"}}},
			want: &agent.Response{Text: "echo: ", FinishReason: "stop", Model: agenttest.ModelName},
		},
		{
			name:    "fail",
			step:    agenttest.Fail(boom),
			wantErr: boom,
		},
		{
			name: "func",
			step: agenttest.Func(func(_ context.Context, req agent.Request) (*agent.Response, error) {
				return &agent.Response{Text: req.Purpose + ":" + req.Messages[0].Content}, nil
			}),
			want: &agent.Response{Text: "chat:hello"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := tt.req
			if req.Messages == nil {
				req = user("hello")
			}
			resp, err := agenttest.New(tt.step).Generate(t.Context(), req)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.Nil(t, resp)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, resp)
		})
	}
}

func TestScriptOrderAndExhaustion(t *testing.T) {
	t.Parallel()
	m := agenttest.New(agenttest.Reply("one"), agenttest.ToolCall("say", `{}`))
	m.Add(agenttest.Reply("three"))
	require.Equal(t, 3, m.Pending())

	r1, err := m.Generate(t.Context(), user("a"))
	require.NoError(t, err)
	require.Equal(t, "one", r1.Text)

	r2, err := m.Generate(t.Context(), user("b"))
	require.NoError(t, err)
	require.Equal(t, "call_2", r2.ToolCalls[0].ID, "IDs follow the call number")

	r3, err := m.Generate(t.Context(), user("c"))
	require.NoError(t, err)
	require.Equal(t, "three", r3.Text)
	require.Zero(t, m.Pending())

	_, err = m.Generate(t.Context(), user("d"))
	require.ErrorIs(t, err, agenttest.ErrExhausted)
	require.ErrorContains(t, err, "agenttest: script exhausted")
	require.Equal(t, 4, m.Calls())
}

func TestOtherwise(t *testing.T) {
	t.Parallel()
	m := agenttest.New(agenttest.Reply("scripted")).Otherwise(agenttest.Echo())
	want := []string{"scripted", "echo: b", "echo: c"}
	for i, in := range []string{"a", "b", "c"} {
		resp, err := m.Generate(t.Context(), user(in))
		require.NoError(t, err)
		require.Equal(t, want[i], resp.Text)
	}
}

func TestOnPurpose(t *testing.T) {
	t.Parallel()
	m := agenttest.New(agenttest.Reply("chat 1"), agenttest.Reply("chat 2")).
		OnPurpose(agent.PurposeRouter, agenttest.Reply(`{"reply":true}`))
	m.OnPurpose(agent.PurposeAudit, agenttest.Reply("audit ok"))
	require.Equal(t, 4, m.Pending())

	tests := []struct {
		purpose string
		want    string
	}{
		{agent.PurposeChat, "chat 1"},
		{agent.PurposeRouter, `{"reply":true}`},
		{agent.PurposeRouter, "chat 2"}, // its own script is used up: falls back to the general one
		{agent.PurposeAudit, "audit ok"},
	}
	for _, tt := range tests {
		req := user("x")
		req.Purpose = tt.purpose
		resp, err := m.Generate(t.Context(), req)
		require.NoError(t, err, tt.purpose)
		require.Equal(t, tt.want, resp.Text, tt.purpose)
	}
	require.Zero(t, m.Pending())
}

func TestRecordsDeepCopies(t *testing.T) {
	t.Parallel()
	m := agenttest.New().Otherwise(agenttest.Reply("ok"))
	require.Equal(t, agent.Request{}, m.Last(), "no calls yet")

	temp := 0.7
	req := agent.Request{
		Purpose: agent.PurposeChat,
		Messages: []agent.Message{
			{Role: agent.RoleUser, Content: "look", Parts: []agent.Part{{ImageURL: "https://x/1.png", Detail: "low"}}},
			{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: "c1", Name: "t", Arguments: json.RawMessage(`{"a":1}`)}}},
		},
		Tools:       []agent.ToolSpec{{Name: "t", Parameters: json.RawMessage(`{"type":"object"}`)}},
		ToolChoice:  "t",
		MaxTokens:   10,
		Temperature: &temp,
		JSON:        true,
	}
	_, err := m.Generate(t.Context(), req)
	require.NoError(t, err)
	snapshot := agenttest.CloneRequest(req)

	// Mutate everything the caller owns.
	req.Messages[0].Content = "changed"
	req.Messages[0].Parts[0].ImageURL = "changed"
	req.Messages[1].ToolCalls[0].Arguments[2] = 'X'
	req.Tools[0].Parameters[2] = 'X'
	temp = 2

	require.Equal(t, snapshot, m.Last())
	require.Equal(t, []agent.Request{snapshot}, m.Requests())

	// And what the test gets back is a copy too.
	got := m.Requests()
	got[0].Messages[0].Parts[0].Detail = "mutated"
	require.Equal(t, "low", m.Last().Messages[0].Parts[0].Detail)
}

func TestFuncGetsPrivateCopy(t *testing.T) {
	t.Parallel()
	m := agenttest.New(agenttest.Func(func(_ context.Context, req agent.Request) (*agent.Response, error) {
		req.Messages[0].Content = "tampered"
		return &agent.Response{Text: "ok"}, nil
	}))
	_, err := m.Generate(t.Context(), user("original"))
	require.NoError(t, err)
	require.Equal(t, "original", m.Last().Messages[0].Content)
}

func TestContextCancellation(t *testing.T) {
	t.Parallel()
	m := agenttest.New(agenttest.Reply("kept"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	resp, err := m.Generate(ctx, user("a"))
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, resp)
	require.Equal(t, 1, m.Calls(), "the call is recorded")
	require.Equal(t, 1, m.Pending(), "but consumes no step")

	resp, err = m.Generate(t.Context(), user("b"))
	require.NoError(t, err)
	require.Equal(t, "kept", resp.Text)
}

func TestFuncCanBlockOnContext(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	m := agenttest.New(agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		close(started)
		<-ctx.Done()
		return nil, &agent.Error{Kind: agent.KindTimeout, Err: ctx.Err()}
	}))
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := m.Generate(ctx, user("slow"))
		errc <- err
	}()
	<-started
	// The blocked step must not hold the lock.
	require.Equal(t, 1, m.Calls())
	cancel()
	err := <-errc
	require.ErrorIs(t, err, context.Canceled)
	var me *agent.Error
	require.True(t, errors.As(err, &me))
	require.Equal(t, agent.KindTimeout, me.Kind)
}

func TestKeepLast(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		keep      int
		wantTexts []string
	}{
		{name: "all", keep: 0, wantTexts: []string{"0", "1", "2", "3", "4", "5", "6"}},
		{name: "last two", keep: 2, wantTexts: []string{"5", "6"}},
		{name: "none", keep: -1, wantTexts: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := agenttest.New().Otherwise(agenttest.Reply("ok")).KeepLast(tt.keep)
			for i := range 7 {
				_, err := m.Generate(t.Context(), user(string(rune('0'+i))))
				require.NoError(t, err)
			}
			require.Equal(t, 7, m.Calls())
			texts := []string{}
			for _, r := range m.Requests() {
				texts = append(texts, r.Messages[0].Content)
			}
			require.Equal(t, tt.wantTexts, texts)
			if len(tt.wantTexts) > 0 {
				require.Equal(t, "6", m.Last().Messages[0].Content)
			}
		})
	}
}

func TestZeroStep(t *testing.T) {
	t.Parallel()
	_, err := agenttest.New(agenttest.Step{}).Generate(t.Context(), user("x"))
	require.ErrorContains(t, err, "zero Step")
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	const n = 64
	steps := make([]agenttest.Step, n/2)
	for i := range steps {
		steps[i] = agenttest.Reply("scripted")
	}
	m := agenttest.New(steps...).Otherwise(agenttest.Echo())
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for range n {
		wg.Go(func() {
			resp, err := m.Generate(context.Background(), user("x"))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			counts[resp.Text]++
			mu.Unlock()
			_ = m.Requests()
			_ = m.Last()
		})
	}
	wg.Wait()
	require.Equal(t, map[string]int{"scripted": n / 2, "echo: x": n / 2}, counts)
	require.Equal(t, n, m.Calls())
	require.Len(t, m.Requests(), n)
}

func TestResponsesAreFresh(t *testing.T) {
	t.Parallel()
	m := agenttest.New().Otherwise(agenttest.ToolCall("t", `{"a":1}`))
	r1, err := m.Generate(t.Context(), user("x"))
	require.NoError(t, err)
	r1.ToolCalls[0].Arguments[1] = 'X'
	r2, err := m.Generate(t.Context(), user("x"))
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(r2.ToolCalls[0].Arguments))
}

func BenchmarkGenerate(b *testing.B) {
	m := agenttest.New().Otherwise(agenttest.Reply("ok")).KeepLast(100)
	req := agent.Request{Purpose: agent.PurposeChat, Messages: make([]agent.Message, 40)}
	for i := range req.Messages {
		req.Messages[i] = agent.Message{Role: agent.RoleUser, Content: "history line"}
	}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Generate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
