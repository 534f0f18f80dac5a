package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
)

func TestSingleCall(t *testing.T) {
	t.Parallel()
	usage := agent.Usage{InputTokens: 120, CachedInputTokens: 100, OutputTokens: 7}
	tests := []struct {
		name        string
		purpose     string
		wantPurpose string
	}{
		{name: "default purpose", purpose: "", wantPurpose: agent.PurposeChat},
		{name: "given purpose kept", purpose: agent.PurposeVision, wantPurpose: agent.PurposeVision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			var got agent.Request
			m := agent.ModelFunc(func(ctx context.Context, req agent.Request) (*agent.Response, error) {
				calls++
				got = req
				require.NoError(t, ctx.Err())
				return &agent.Response{Text: "hello[persona-msg]there", Model: "m-1", Usage: usage, FinishReason: "stop"}, nil
			})
			req := agent.Request{Purpose: tt.purpose, Messages: []agent.Message{{Role: agent.RoleUser, Content: "hi"}}, MaxTokens: 50}
			res, err := agent.SingleCall.Run(t.Context(), agent.RunInput{Model: m, Request: req})
			require.NoError(t, err)
			require.Equal(t, 1, calls)
			require.Equal(t, tt.wantPurpose, got.Purpose)
			require.Equal(t, req.Messages, got.Messages, "the request is passed as given")
			require.Equal(t, 50, got.MaxTokens)
			require.Equal(t, tt.purpose, req.Purpose, "the caller's request is not modified")
			require.Equal(t, &agent.Result{Text: "hello[persona-msg]there", Usage: usage, Model: "m-1", Calls: 1}, res)
		})
	}
}

func TestSingleCallErrors(t *testing.T) {
	t.Parallel()

	t.Run("no model", func(t *testing.T) {
		t.Parallel()
		res, err := agent.SingleCall.Run(t.Context(), agent.RunInput{})
		require.ErrorIs(t, err, agent.ErrNoModel)
		require.Nil(t, res)
	})

	t.Run("model error passed through", func(t *testing.T) {
		t.Parallel()
		want := &agent.Error{Kind: agent.KindRateLimited, Status: 429, RetryAfter: time.Second}
		m := agent.ModelFunc(func(context.Context, agent.Request) (*agent.Response, error) { return nil, want })
		res, err := agent.SingleCall.Run(t.Context(), agent.RunInput{Model: m})
		require.Nil(t, res)
		var me *agent.Error
		require.ErrorAs(t, err, &me)
		require.Same(t, want, me)
		require.True(t, agent.Transient(err))
	})

	t.Run("nil response", func(t *testing.T) {
		t.Parallel()
		m := agent.ModelFunc(func(context.Context, agent.Request) (*agent.Response, error) { return nil, nil })
		res, err := agent.SingleCall.Run(t.Context(), agent.RunInput{Model: m})
		require.Nil(t, res)
		var me *agent.Error
		require.ErrorAs(t, err, &me)
		require.Equal(t, agent.KindServer, me.Kind)
		require.True(t, agent.Transient(err), "a missing response may work next time")
	})

	t.Run("context passed to the model", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		m := agent.ModelFunc(func(ctx context.Context, _ agent.Request) (*agent.Response, error) { return nil, ctx.Err() })
		_, err := agent.SingleCall.Run(ctx, agent.RunInput{Model: m})
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestRunnerFunc(t *testing.T) {
	t.Parallel()
	var r agent.Runner = agent.RunnerFunc(func(_ context.Context, in agent.RunInput) (*agent.Result, error) {
		if in.Owner {
			return &agent.Result{Text: "owner"}, nil
		}
		return nil, agent.ErrNoModel
	})
	res, err := r.Run(t.Context(), agent.RunInput{Owner: true})
	require.NoError(t, err)
	require.Equal(t, "owner", res.Text)
	_, err = r.Run(t.Context(), agent.RunInput{})
	require.ErrorIs(t, err, agent.ErrNoModel)
}

func TestTransient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil, want: false},
		{name: "plain error", err: errors.New("boom"), want: true},
		{name: "network error", err: &net.OpError{Op: "dial", Err: errors.New("refused")}, want: true},
		{name: "deadline", err: context.DeadlineExceeded, want: true},
		{name: "unknown", err: &agent.Error{Kind: agent.KindUnknown}, want: true},
		{name: "timeout", err: &agent.Error{Kind: agent.KindTimeout}, want: true},
		{name: "rate limited", err: &agent.Error{Kind: agent.KindRateLimited, Status: 429}, want: true},
		{name: "server", err: &agent.Error{Kind: agent.KindServer, Status: 503}, want: true},
		{name: "invalid request", err: &agent.Error{Kind: agent.KindInvalidRequest, Status: 400}, want: false},
		{name: "auth", err: &agent.Error{Kind: agent.KindAuth, Status: 401}, want: false},
		{name: "content policy", err: &agent.Error{Kind: agent.KindContentPolicy}, want: false},
		{name: "context overflow", err: &agent.Error{Kind: agent.KindContextOverflow}, want: false},
		{name: "out-of-range kind", err: &agent.Error{Kind: agent.ErrorKind(42)}, want: true},
		{name: "wrapped definitive", err: fmt.Errorf("turn: %w", &agent.Error{Kind: agent.KindAuth}), want: false},
		{name: "wrapped transient", err: fmt.Errorf("turn: %w", &agent.Error{Kind: agent.KindServer}), want: true},
		{name: "joined definitive", err: errors.Join(errors.New("x"), &agent.Error{Kind: agent.KindContentPolicy}), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, agent.Transient(tt.err))
		})
	}
}

func TestErrorKindString(t *testing.T) {
	t.Parallel()
	want := map[agent.ErrorKind]string{
		agent.KindUnknown:         "unknown",
		agent.KindTimeout:         "timeout",
		agent.KindRateLimited:     "rate_limited",
		agent.KindServer:          "server",
		agent.KindInvalidRequest:  "invalid_request",
		agent.KindAuth:            "auth",
		agent.KindContentPolicy:   "content_policy",
		agent.KindContextOverflow: "context_overflow",
		agent.ErrorKind(8):        "kind(8)",
		agent.ErrorKind(-1):       "kind(-1)",
	}
	for k, s := range want {
		require.Equal(t, s, k.String())
	}
}

func TestErrorErrorAndUnwrap(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection reset")
	tests := []struct {
		name string
		err  *agent.Error
		want string
	}{
		{name: "kind only", err: &agent.Error{Kind: agent.KindTimeout}, want: "agent: model timeout"},
		{name: "status", err: &agent.Error{Kind: agent.KindServer, Status: 502}, want: "agent: model server (HTTP 502)"},
		{name: "message", err: &agent.Error{Kind: agent.KindAuth, Message: "bad key"}, want: "agent: model auth: bad key"},
		{name: "status and message", err: &agent.Error{Kind: agent.KindRateLimited, Status: 429, Message: "slow down", Err: cause}, want: "agent: model rate_limited (HTTP 429): slow down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.err.Error())
		})
	}

	e := &agent.Error{Kind: agent.KindServer, Err: cause}
	require.Same(t, cause, errors.Unwrap(e))
	require.ErrorIs(t, e, cause)
	require.ErrorIs(t, fmt.Errorf("wrapped: %w", e), cause)
	require.Nil(t, (&agent.Error{}).Unwrap())

	var me *agent.Error
	require.ErrorAs(t, fmt.Errorf("wrapped: %w", e), &me)
	require.Same(t, e, me)
}

func TestUsageAdd(t *testing.T) {
	t.Parallel()
	a := agent.Usage{InputTokens: 100, CachedInputTokens: 80, OutputTokens: 10}
	b := agent.Usage{InputTokens: 50, CachedInputTokens: 0, OutputTokens: 5}
	require.Equal(t, agent.Usage{InputTokens: 150, CachedInputTokens: 80, OutputTokens: 15}, a.Add(b))
	require.Equal(t, a.Add(b), b.Add(a), "commutative")
	require.Equal(t, a, a.Add(agent.Usage{}), "zero is neutral")
	require.Equal(t, agent.Usage{InputTokens: 100, CachedInputTokens: 80, OutputTokens: 10}, a, "Add does not modify its receiver")

	var sum agent.Usage
	for range 3 {
		sum = sum.Add(a)
	}
	require.Equal(t, agent.Usage{InputTokens: 300, CachedInputTokens: 240, OutputTokens: 30}, sum)
}

func TestModelFunc(t *testing.T) {
	t.Parallel()
	var m agent.Model = agent.ModelFunc(func(_ context.Context, req agent.Request) (*agent.Response, error) {
		return &agent.Response{Text: req.Purpose}, nil
	})
	resp, err := m.Generate(t.Context(), agent.Request{Purpose: agent.PurposeRouter})
	require.NoError(t, err)
	require.Equal(t, "proactive_reply_router", resp.Text)
}
