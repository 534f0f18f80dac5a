package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/openai"
)

// fakeAPI is an in-process Chat Completions endpoint. It records every
// request and answers with the configured status, headers and body.
type fakeAPI struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []recorded
}

type recorded struct {
	method, path, auth string
	body               map[string]any
}

type reply struct {
	status int
	header map[string]string
	body   string
	// block makes the handler wait for the client to give up.
	block bool
}

func newFakeAPI(t *testing.T, r reply) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		f.mu.Lock()
		f.requests = append(f.requests, recorded{req.Method, req.URL.Path, req.Header.Get("Authorization"), body})
		f.mu.Unlock()
		if r.block {
			select {
			case <-req.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		if _, ok := r.header["Content-Type"]; !ok {
			w.Header().Set("Content-Type", "application/json")
		}
		for k, v := range r.header {
			w.Header().Set(k, v)
		}
		status := r.status
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, r.body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) model(t *testing.T, mutate ...func(*openai.Config)) *openai.Model {
	t.Helper()
	cfg := openai.Config{BaseURL: f.srv.URL + "/v1", APIKey: "sk-test", Model: "gpt-test", HTTPClient: f.srv.Client()}
	for _, fn := range mutate {
		fn(&cfg)
	}
	m, err := openai.New(cfg)
	require.NoError(t, err)
	return m
}

func (f *fakeAPI) last(t *testing.T) recorded {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.requests, "server received no request")
	return f.requests[len(f.requests)-1]
}

func (f *fakeAPI) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

const okBody = `{
  "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "gpt-test-2024",
  "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
    "message": {"role": "assistant", "content": "hello there", "refusal": null}}],
  "usage": {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}
}`

func userRequest(text string) agent.Request {
	return agent.Request{Purpose: agent.PurposeChat, Messages: []agent.Message{{Role: agent.RoleUser, Content: text}}}
}

func TestGeneratePlainReply(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{body: okBody})
	m := api.model(t)

	resp, err := m.Generate(t.Context(), userRequest("hi"))
	require.NoError(t, err)
	require.Equal(t, &agent.Response{
		Text:         "hello there",
		FinishReason: "stop",
		Model:        "gpt-test-2024",
		Usage:        agent.Usage{InputTokens: 120, OutputTokens: 7},
	}, resp)

	got := api.last(t)
	require.Equal(t, http.MethodPost, got.method)
	require.Equal(t, "/v1/chat/completions", got.path)
	require.Equal(t, "Bearer sk-test", got.auth)
	require.Equal(t, "gpt-test", got.body["model"])
	require.Equal(t, []any{map[string]any{"role": "user", "content": "hi"}}, got.body["messages"])
	for _, absent := range []string{"tools", "tool_choice", "max_tokens", "max_completion_tokens", "temperature", "response_format"} {
		require.NotContains(t, got.body, absent)
	}
}

func TestGenerateNoAPIKeySendsNoAuthorization(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{body: okBody})
	m := api.model(t, func(c *openai.Config) { c.APIKey = "" })
	_, err := m.Generate(t.Context(), userRequest("hi"))
	require.NoError(t, err)
	require.Empty(t, api.last(t).auth)
}

func TestGenerateRequestShape(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{body: okBody})
	m := api.model(t, func(c *openai.Config) {
		c.PurposeModels = map[string]string{agent.PurposeRouter: "small-model"}
	})
	temp := 0.25
	req := agent.Request{
		Purpose: agent.PurposeRouter,
		Messages: []agent.Message{
			{Role: agent.RoleSystem, Content: "You are Mika.", CacheBreakpoint: true},
			{Role: agent.RoleUser, Name: "u_abc", Content: "look at this", Parts: []agent.Part{
				{ImageURL: "https://example.com/cat.png", Detail: "high"},
				{ImageURL: "data:image/png;base64,AAAA"},
			}},
			{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{
				{ID: "call_1", Name: "web_search", Arguments: json.RawMessage(`{"q":"cats"}`)},
			}},
			{Role: agent.RoleTool, ToolCallID: "call_1", Content: "cats are great"},
			{Role: agent.RoleAssistant, Content: "Cats!"},
		},
		Tools: []agent.ToolSpec{
			{Name: "web_search", Description: "Search the web.", Parameters: json.RawMessage(
				`{"type":"object","properties":{"q":{"type":"string","maxLength":200}},"required":["q"]}`)},
			{Name: "agent_finalize", Description: "Finish."},
		},
		ToolChoice:  "agent_finalize",
		MaxTokens:   256,
		Temperature: &temp,
		JSON:        true,
	}
	_, err := m.Generate(t.Context(), req)
	require.NoError(t, err)

	want := map[string]any{
		"model": "small-model",
		"messages": []any{
			map[string]any{"role": "system", "content": "You are Mika."},
			map[string]any{"role": "user", "name": "u_abc", "content": []any{
				map[string]any{"type": "text", "text": "look at this"},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/cat.png", "detail": "high"}},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AAAA"}},
			}},
			map[string]any{"role": "assistant", "tool_calls": []any{
				map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "web_search", "arguments": `{"q":"cats"}`}},
			}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "cats are great"},
			map[string]any{"role": "assistant", "content": "Cats!"},
		},
		"tools": []any{
			map[string]any{"type": "function", "function": map[string]any{
				"name": "web_search", "description": "Search the web.",
				"parameters": map[string]any{
					"type":       "object",
					"properties": map[string]any{"q": map[string]any{"type": "string", "maxLength": float64(200)}},
					"required":   []any{"q"},
				},
			}},
			map[string]any{"type": "function", "function": map[string]any{"name": "agent_finalize", "description": "Finish."}},
		},
		"tool_choice":     map[string]any{"type": "function", "function": map[string]any{"name": "agent_finalize"}},
		"max_tokens":      float64(256),
		"temperature":     0.25,
		"response_format": map[string]any{"type": "json_object"},
	}
	require.Equal(t, want, api.last(t).body)
}

func TestGenerateToolChoiceAndMaxTokensVariants(t *testing.T) {
	t.Parallel()
	tools := []agent.ToolSpec{{Name: "say", Description: "Say something."}}
	tests := []struct {
		name            string
		choice          string
		maxCompletion   bool
		wantChoice      any // nil = absent
		wantTokensField string
	}{
		{name: "auto", choice: "", wantTokensField: "max_tokens"},
		{name: "none", choice: "none", wantChoice: "none", wantTokensField: "max_tokens"},
		{name: "forced", choice: "say", wantChoice: map[string]any{"type": "function", "function": map[string]any{"name": "say"}}, wantTokensField: "max_tokens"},
		{name: "max_completion_tokens", choice: "", maxCompletion: true, wantTokensField: "max_completion_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, reply{body: okBody})
			m := api.model(t, func(c *openai.Config) { c.MaxCompletionTokens = tt.maxCompletion })
			req := userRequest("hi")
			req.Tools, req.ToolChoice, req.MaxTokens = tools, tt.choice, 64
			_, err := m.Generate(t.Context(), req)
			require.NoError(t, err)
			body := api.last(t).body
			if tt.wantChoice == nil {
				require.NotContains(t, body, "tool_choice")
			} else {
				require.Equal(t, tt.wantChoice, body["tool_choice"])
			}
			require.Equal(t, float64(64), body[tt.wantTokensField])
			require.Equal(t, "gpt-test", body["model"], "purposes without an entry use Config.Model")
		})
	}
}

func TestGenerateToolCalls(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{body: `{
	  "id": "chatcmpl-2", "object": "chat.completion", "created": 1700000000, "model": "gpt-test",
	  "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": null,
	    "message": {"role": "assistant", "content": null, "tool_calls": [
	      {"id": "call_a", "type": "function", "function": {"name": "web_search", "arguments": "{\"q\":\"weather\"}"}},
	      {"id": "call_b", "type": "function", "function": {"name": "agent_finalize", "arguments": ""}}
	    ]}}],
	  "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}
	}`})
	resp, err := api.model(t).Generate(t.Context(), userRequest("weather?"))
	require.NoError(t, err)
	require.Empty(t, resp.Text)
	require.Equal(t, "tool_calls", resp.FinishReason)
	require.Equal(t, []agent.ToolCall{
		{ID: "call_a", Name: "web_search", Arguments: json.RawMessage(`{"q":"weather"}`)},
		{ID: "call_b", Name: "agent_finalize", Arguments: json.RawMessage(`{}`)},
	}, resp.ToolCalls)
}

func TestGenerateCachedTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		usage string
		want  agent.Usage
	}{
		{
			name:  "prompt_tokens_details",
			usage: `{"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306, "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0}}`,
			want:  agent.Usage{InputTokens: 2006, CachedInputTokens: 1920, OutputTokens: 300},
		},
		{
			name:  "prompt_cache_hit_tokens",
			usage: `{"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010, "prompt_cache_hit_tokens": 768, "prompt_cache_miss_tokens": 232}`,
			want:  agent.Usage{InputTokens: 1000, CachedInputTokens: 768, OutputTokens: 10},
		},
		{
			name:  "no usage",
			usage: `null`,
			want:  agent.Usage{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, reply{body: `{"id":"x","object":"chat.completion","created":1,"model":"m",
			  "choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok"}}],
			  "usage":` + tt.usage + `}`})
			resp, err := api.model(t).Generate(t.Context(), userRequest("hi"))
			require.NoError(t, err)
			require.Equal(t, tt.want, resp.Usage)
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		reply         reply
		wantKind      agent.ErrorKind
		wantStatus    int
		wantMessage   string // substring of agent.Error.Message
		wantRetry     time.Duration
		wantTransient bool
	}{
		{
			name: "429 retry-after seconds",
			reply: reply{status: 429, header: map[string]string{"Retry-After": "7"},
				body: `{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
			wantKind: agent.KindRateLimited, wantStatus: 429, wantMessage: "Rate limit reached", wantRetry: 7 * time.Second, wantTransient: true,
		},
		{
			name: "429 retry-after-ms wins",
			reply: reply{status: 429, header: map[string]string{"Retry-After": "2", "Retry-After-Ms": "1500"},
				body: `{"error":{"message":"slow down","type":"requests","code":null}}`},
			wantKind: agent.KindRateLimited, wantStatus: 429, wantMessage: "slow down", wantRetry: 1500 * time.Millisecond, wantTransient: true,
		},
		{
			name:     "429 without hint",
			reply:    reply{status: 429, body: `{"error":{"message":"busy"}}`},
			wantKind: agent.KindRateLimited, wantStatus: 429, wantMessage: "busy", wantTransient: true,
		},
		{
			name:     "500",
			reply:    reply{status: 500, body: `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`},
			wantKind: agent.KindServer, wantStatus: 500, wantMessage: "server had an error", wantTransient: true,
		},
		{
			name:     "502 html body",
			reply:    reply{status: 502, header: map[string]string{"Content-Type": "text/html"}, body: `<html><body>Bad Gateway</body></html>`},
			wantKind: agent.KindServer, wantStatus: 502, wantMessage: "Bad Gateway", wantTransient: true,
		},
		{
			name: "400 context_length_exceeded",
			reply: reply{status: 400, body: `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
				"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`},
			wantKind: agent.KindContextOverflow, wantStatus: 400, wantMessage: "maximum context length is 128000",
		},
		{
			name:     "400 context overflow by message only",
			reply:    reply{status: 400, body: `{"object":"error","message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","code":400}`},
			wantKind: agent.KindContextOverflow, wantStatus: 400, wantMessage: "maximum context length is 8192",
		},
		{
			name: "400 content_filter",
			reply: reply{status: 400, body: `{"error":{"message":"The response was filtered due to the prompt triggering content management policy.",
				"type":null,"param":"prompt","code":"content_filter"}}`},
			wantKind: agent.KindContentPolicy, wantStatus: 400, wantMessage: "content management policy",
		},
		{
			name:     "400 content_policy_violation",
			reply:    reply{status: 400, body: `{"error":{"message":"Your request was rejected by our safety system.","type":"invalid_request_error","code":"content_policy_violation"}}`},
			wantKind: agent.KindContentPolicy, wantStatus: 400, wantMessage: "safety system",
		},
		{
			name:     "400 other",
			reply:    reply{status: 400, body: `{"error":{"message":"Invalid value for 'tool_choice'.","type":"invalid_request_error","param":"tool_choice","code":"invalid_value"}}`},
			wantKind: agent.KindInvalidRequest, wantStatus: 400, wantMessage: "Invalid value for 'tool_choice'",
		},
		{
			name:     "404 model not found",
			reply:    reply{status: 404, body: `{"error":{"message":"The model 'nope' does not exist","type":"invalid_request_error","code":"model_not_found"}}`},
			wantKind: agent.KindInvalidRequest, wantStatus: 404, wantMessage: "does not exist",
		},
		{
			name:     "401",
			reply:    reply{status: 401, body: `{"error":{"message":"Incorrect API key provided: sk-test.","type":"invalid_request_error","code":"invalid_api_key"}}`},
			wantKind: agent.KindAuth, wantStatus: 401, wantMessage: "Incorrect API key",
		},
		{
			name:     "403 plain text",
			reply:    reply{status: 403, header: map[string]string{"Content-Type": "text/plain"}, body: "forbidden by proxy"},
			wantKind: agent.KindAuth, wantStatus: 403, wantMessage: "forbidden by proxy",
		},
		{
			name:     "200 garbage body",
			reply:    reply{body: `{"choices": [this is not json`},
			wantKind: agent.KindServer, wantStatus: 200, wantMessage: "malformed response", wantTransient: true,
		},
		{
			name:     "200 non-JSON content type",
			reply:    reply{header: map[string]string{"Content-Type": "text/html"}, body: `<html>login page</html>`},
			wantKind: agent.KindServer, wantStatus: 200, wantMessage: "malformed response", wantTransient: true,
		},
		{
			name:     "200 empty body",
			reply:    reply{body: ``},
			wantKind: agent.KindServer, wantStatus: 200, wantMessage: "malformed response", wantTransient: true,
		},
		{
			name:     "empty choices",
			reply:    reply{body: `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[]}`},
			wantKind: agent.KindServer, wantStatus: 200, wantMessage: "no choices", wantTransient: true,
		},
		{
			name: "finish_reason content_filter",
			reply: reply{body: `{"id":"x","object":"chat.completion","created":1,"model":"m",
			  "choices":[{"index":0,"finish_reason":"content_filter","message":{"role":"assistant","content":""}}]}`},
			wantKind: agent.KindContentPolicy, wantStatus: 200, wantMessage: "content_filter",
		},
		{
			name: "refusal",
			reply: reply{body: `{"id":"x","object":"chat.completion","created":1,"model":"m",
			  "choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":null,"refusal":"I can't help with that."}}]}`},
			wantKind: agent.KindContentPolicy, wantStatus: 200, wantMessage: "I can't help with that.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tt.reply)
			resp, err := api.model(t).Generate(t.Context(), userRequest("hi"))
			require.Nil(t, resp)
			var me *agent.Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, tt.wantKind, me.Kind, "error: %v", err)
			require.Equal(t, tt.wantStatus, me.Status)
			require.Contains(t, me.Message, tt.wantMessage)
			require.Equal(t, tt.wantRetry, me.RetryAfter)
			require.Equal(t, tt.wantTransient, agent.Transient(err))
			require.Equal(t, 1, api.count(), "the SDK must not retry")
		})
	}
}

func TestGenerateTimeout(t *testing.T) {
	t.Parallel()
	const short = 50 * time.Millisecond
	tests := []struct {
		name   string
		mutate func(*openai.Config)
		ctx    func(context.Context) (context.Context, context.CancelFunc)
	}{
		{name: "Config.Timeout", mutate: func(c *openai.Config) { c.Timeout = short }},
		{name: "caller deadline", ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, short) // shorter than the default 120 s: it wins
		}},
		{name: "http.Client.Timeout", mutate: func(c *openai.Config) { c.HTTPClient = &http.Client{Timeout: short} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, reply{block: true})
			var mutate []func(*openai.Config)
			if tt.mutate != nil {
				mutate = append(mutate, tt.mutate)
			}
			m := api.model(t, mutate...)
			ctx := t.Context()
			if tt.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = tt.ctx(ctx)
				defer cancel()
			}

			_, err := m.Generate(ctx, userRequest("hi"))
			var me *agent.Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, agent.KindTimeout, me.Kind, "error: %v", err)
			require.True(t, agent.Transient(err))
		})
	}
}

func TestGenerateCanceledContext(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{body: okBody})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err := api.model(t).Generate(ctx, userRequest("hi"))
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, api.count())
}

func TestGenerateConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close()
	m, err := openai.New(openai.Config{BaseURL: base, Model: "m"})
	require.NoError(t, err)

	_, err = m.Generate(t.Context(), userRequest("hi"))
	var me *agent.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, agent.KindServer, me.Kind)
	require.Zero(t, me.Status)
	require.True(t, agent.Transient(err))
}

func TestGenerateRejectsUnencodableRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  agent.Request
		want string
	}{
		{name: "no messages", req: agent.Request{}, want: "no messages"},
		{name: "unknown role", req: agent.Request{Messages: []agent.Message{{Role: "narrator", Content: "x"}}}, want: `unknown role "narrator"`},
		{name: "tool result without id", req: agent.Request{Messages: []agent.Message{{Role: agent.RoleTool, Content: "x"}}}, want: "tool_call_id"},
		{name: "image on system message", req: agent.Request{Messages: []agent.Message{{Role: agent.RoleSystem, Parts: []agent.Part{{ImageURL: "https://x/y.png"}}}}}, want: "only supported on user messages"},
		{name: "image without url", req: agent.Request{Messages: []agent.Message{{Role: agent.RoleUser, Parts: []agent.Part{{Detail: "low"}}}}}, want: "no image URL"},
		{
			name: "schema not an object",
			req: agent.Request{
				Messages: []agent.Message{{Role: agent.RoleUser, Content: "x"}},
				Tools:    []agent.ToolSpec{{Name: "t", Parameters: json.RawMessage(`[1,2]`)}},
			},
			want: "parameters must be a JSON object",
		},
		{
			name: "tool without name",
			req: agent.Request{
				Messages: []agent.Message{{Role: agent.RoleUser, Content: "x"}},
				Tools:    []agent.ToolSpec{{Description: "nameless"}},
			},
			want: "tool without a name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, reply{body: okBody})
			_, err := api.model(t).Generate(t.Context(), tt.req)
			var me *agent.Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, agent.KindInvalidRequest, me.Kind)
			require.Contains(t, me.Message, tt.want)
			require.False(t, agent.Transient(err))
			require.Zero(t, api.count(), "nothing may be sent")
		})
	}
}

func TestGenerateConcurrent(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{body: okBody})
	m := api.model(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			_, err := m.Generate(t.Context(), userRequest("hi"))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 16, api.count())
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     openai.Config
		wantErr string // "" = valid
	}{
		{name: "minimal", cfg: openai.Config{Model: "gpt-4o-mini"}},
		{name: "local base url", cfg: openai.Config{Model: "llama3", BaseURL: "http://localhost:11434/v1"}},
		{name: "https base url", cfg: openai.Config{Model: "m", BaseURL: "https://proxy.example.com/openai/v1/", Timeout: time.Second}},
		{name: "missing model", cfg: openai.Config{BaseURL: "http://localhost"}, wantErr: "Config.Model is required"},
		{name: "blank model", cfg: openai.Config{Model: "  "}, wantErr: "Config.Model is required"},
		{name: "ftp scheme", cfg: openai.Config{Model: "m", BaseURL: "ftp://example.com"}, wantErr: "must be an http or https URL"},
		{name: "no scheme", cfg: openai.Config{Model: "m", BaseURL: "localhost:8080/v1"}, wantErr: "must be an http or https URL"},
		{name: "unparseable", cfg: openai.Config{Model: "m", BaseURL: "http://[::1"}, wantErr: "does not parse"},
		{name: "no host", cfg: openai.Config{Model: "m", BaseURL: "http:///v1"}, wantErr: "has no host"},
		{name: "negative timeout", cfg: openai.Config{Model: "m", Timeout: -time.Second}, wantErr: "Timeout must not be negative"},
		{name: "empty purpose model", cfg: openai.Config{Model: "m", PurposeModels: map[string]string{"router": ""}}, wantErr: `PurposeModels["router"] is empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := openai.New(tt.cfg)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NotNil(t, m)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.Nil(t, m)
		})
	}
}

func TestNewCopiesPurposeModels(t *testing.T) {
	t.Parallel()
	pm := map[string]string{agent.PurposeRouter: "small"}
	m, err := openai.New(openai.Config{Model: "big", PurposeModels: pm})
	require.NoError(t, err)
	pm[agent.PurposeRouter] = "changed"
	require.Equal(t, "small", m.ModelFor(agent.PurposeRouter))
	require.Equal(t, "big", m.ModelFor(agent.PurposeChat))
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		env    map[string]string
		want   openai.Config
		wantOK bool
	}{
		{name: "nothing set", env: map[string]string{"PERSONA_MODEL": "ignored"}},
		{
			name:   "persona key",
			env:    map[string]string{"PERSONA_MODEL_API_KEY": "sk-p", "OPENAI_API_KEY": "sk-o"},
			want:   openai.Config{APIKey: "sk-p", Model: "gpt-4o-mini"},
			wantOK: true,
		},
		{
			name:   "openai key fallback",
			env:    map[string]string{"OPENAI_API_KEY": "sk-o", "PERSONA_MODEL": "gpt-4.1"},
			want:   openai.Config{APIKey: "sk-o", Model: "gpt-4.1"},
			wantOK: true,
		},
		{
			name:   "base url only",
			env:    map[string]string{"PERSONA_MODEL_BASE_URL": "http://localhost:11434/v1", "PERSONA_MODEL": "qwen2.5"},
			want:   openai.Config{BaseURL: "http://localhost:11434/v1", Model: "qwen2.5"},
			wantOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, ok := openai.FromEnv(func(k string) string { return tt.env[k] })
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, cfg)
		})
	}
}

func TestErrorKindsAreAgentErrors(t *testing.T) {
	t.Parallel()
	// A classified error must stay inspectable through wrapping.
	api := newFakeAPI(t, reply{status: 401, body: `{"error":{"message":"bad key"}}`})
	_, err := api.model(t).Generate(t.Context(), userRequest("hi"))
	wrapped := errors.Join(errors.New("turn failed"), err)
	var me *agent.Error
	require.ErrorAs(t, wrapped, &me)
	require.Equal(t, agent.KindAuth, me.Kind)
	require.False(t, agent.Transient(wrapped))
}
