package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Role is the author of a prompt message.
type Role string

// The message roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Model purposes used when calling a Model; Models route them to a model
// group and Usage is reported per purpose.
const (
	PurposeChat     = "chat"
	PurposeVision   = "vision"
	PurposeRouter   = "proactive_reply_router"
	PurposeAudit    = "audit"
	PurposeSummary  = "summary"
	PurposeClassify = "classifier"
	PurposeDedup    = "dedup"
	PurposeCompress = "compression"
	PurposeMemory   = "memory"
)

// Part is one non-text piece of a user message (an image).
type Part struct {
	// ImageURL is an http(s) or data: URL.
	ImageURL string `json:"image_url,omitempty"`
	// Detail is the vision detail hint ("low", "high", "auto").
	Detail string `json:"detail,omitempty"`
}

// ToolCall is one tool invocation requested by the model.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Message is one prompt message.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// Name optionally names the author (a participant alias).
	Name  string `json:"name,omitempty"`
	Parts []Part `json:"parts,omitempty"`
	// ToolCalls are set on assistant messages that called tools.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is set on tool-result messages.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// CacheBreakpoint marks the last message of the stable prefix; providers
	// with explicit cache control put their marker here.
	CacheBreakpoint bool `json:"cache_breakpoint,omitempty"`
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is a JSON Schema object.
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// Request is one model call.
type Request struct {
	// Purpose names why the call is made (PurposeChat, PurposeRouter, ...).
	Purpose  string
	Messages []Message
	Tools    []ToolSpec
	// ToolChoice forces a tool by name; "" lets the model choose, "none"
	// forbids tools.
	ToolChoice string
	// MaxTokens caps the output (0 = provider default).
	MaxTokens   int
	Temperature *float64
	// JSON asks for a JSON object response where the provider supports it.
	JSON bool
}

// Usage is the token accounting of one response.
type Usage struct {
	InputTokens       int
	CachedInputTokens int
	OutputTokens      int
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.InputTokens + v.InputTokens, u.CachedInputTokens + v.CachedInputTokens, u.OutputTokens + v.OutputTokens}
}

// Response is a model's answer.
type Response struct {
	Text         string
	ToolCalls    []ToolCall
	FinishReason string
	Model        string
	Usage        Usage
}

// Model is anything that answers a Request.
type Model interface {
	Generate(ctx context.Context, req Request) (*Response, error)
}

// ModelFunc adapts a function to a Model.
type ModelFunc func(ctx context.Context, req Request) (*Response, error)

// Generate calls f.
func (f ModelFunc) Generate(ctx context.Context, req Request) (*Response, error) { return f(ctx, req) }

// ErrorKind classifies model errors.
type ErrorKind int

// The model error kinds.
const (
	// KindUnknown is an unclassified failure; treated as transient.
	KindUnknown ErrorKind = iota
	// KindTimeout: the call ran out of time.
	KindTimeout
	// KindRateLimited: HTTP 429.
	KindRateLimited
	// KindServer: HTTP 5xx or a broken connection.
	KindServer
	// KindInvalidRequest: HTTP 400/404/422 and the like; retrying cannot help.
	KindInvalidRequest
	// KindAuth: HTTP 401/403.
	KindAuth
	// KindContentPolicy: the provider refused the content.
	KindContentPolicy
	// KindContextOverflow: the prompt exceeded the context window.
	KindContextOverflow
)

var kindNames = [...]string{"unknown", "timeout", "rate_limited", "server", "invalid_request", "auth", "content_policy", "context_overflow"}

// String names the kind.
func (k ErrorKind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is a classified model failure.
type Error struct {
	Kind ErrorKind
	// Status is the HTTP status, when there was one.
	Status int
	// RetryAfter is the provider's hint for rate limits.
	RetryAfter time.Duration
	Message    string
	Err        error
}

func (e *Error) Error() string {
	s := "agent: model " + e.Kind.String()
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Transient reports whether a failed call may succeed when retried later.
// Unclassified errors, timeouts, rate limits and server errors are transient;
// invalid requests, auth, content policy and context overflow are not.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var me *Error
	if errors.As(err, &me) {
		switch me.Kind {
		case KindInvalidRequest, KindAuth, KindContentPolicy, KindContextOverflow:
			return false
		}
	}
	return true
}
