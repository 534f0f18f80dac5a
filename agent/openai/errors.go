package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	oai "github.com/openai/openai-go/v3"

	"github.com/personakit/persona/agent"
)

const (
	// maxErrorBody bounds how much of an unparseable error body is quoted.
	maxErrorBody = 300
	// maxRetryAfter caps absurd provider wait hints.
	maxRetryAfter = 24 * time.Hour
)

// classify turns an SDK or transport error into an *agent.Error. ctx is the
// per-call context; resp is the HTTP response, when one arrived.
func classify(ctx context.Context, err error, resp *http.Response) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return contextError(ctxErr, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return contextError(err, err)
	}

	var status int
	var header http.Header
	var pe providerError
	var apiErr *oai.Error
	switch {
	case errors.As(err, &apiErr):
		status = apiErr.StatusCode
		pe = providerError{Message: apiErr.Message, Code: apiErr.Code, Type: apiErr.Type}
		if apiErr.Response != nil {
			header = apiErr.Response.Header
		}
		if pe.Message == "" && apiErr.Response != nil {
			pe = parseErrorBody(apiErr.Response)
		}
	case resp != nil && resp.StatusCode >= 400:
		// The error body did not parse as an OpenAI error object.
		status, header = resp.StatusCode, resp.Header
		pe = parseErrorBody(resp)
	}
	if status >= 400 {
		return httpError(status, header, pe, err)
	}

	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return &agent.Error{Kind: agent.KindTimeout, Message: "request timed out: " + err.Error(), Err: err}
	}
	if resp != nil {
		// A 2xx/3xx whose body was not a chat completion.
		return &agent.Error{Kind: agent.KindServer, Status: resp.StatusCode, Message: "malformed response: " + err.Error(), Err: err}
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &agent.Error{Kind: agent.KindServer, Message: "connection failed: " + err.Error(), Err: err}
	}
	return &agent.Error{Kind: agent.KindUnknown, Message: err.Error(), Err: err}
}

// contextError reports a done context: a deadline is a timeout, a
// cancellation stays unclassified (the caller is going away).
func contextError(ctxErr, err error) *agent.Error {
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		return &agent.Error{Kind: agent.KindTimeout, Message: "request timed out", Err: ctxErr}
	}
	return &agent.Error{Kind: agent.KindUnknown, Message: "request canceled", Err: ctxErr}
}

// providerError is the interesting part of an error body.
type providerError struct {
	Message string
	Code    string
	Type    string
}

// httpError classifies an HTTP error status with the provider's error code.
func httpError(status int, header http.Header, pe providerError, err error) *agent.Error {
	e := &agent.Error{Status: status, Message: pe.Message, Err: err}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	if pe.Code != "" && !isNumber(pe.Code) && !strings.Contains(e.Message, pe.Code) {
		e.Message += " (code " + pe.Code + ")"
	}
	switch {
	case status == http.StatusTooManyRequests:
		e.Kind = agent.KindRateLimited
		e.RetryAfter = retryAfter(header, time.Now())
	case status >= 500:
		e.Kind = agent.KindServer
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = agent.KindAuth
	case status == http.StatusRequestTimeout:
		e.Kind = agent.KindTimeout
	case status == http.StatusConflict:
		// OpenAI documents 409 as a transient conflict worth retrying.
		e.Kind = agent.KindServer
	case isContextOverflow(pe):
		e.Kind = agent.KindContextOverflow
	case isContentPolicy(pe):
		e.Kind = agent.KindContentPolicy
	default:
		e.Kind = agent.KindInvalidRequest
	}
	return e
}

func isContextOverflow(pe providerError) bool {
	if pe.Code == "context_length_exceeded" || pe.Type == "context_length_exceeded" {
		return true
	}
	msg := strings.ToLower(pe.Message)
	return strings.Contains(msg, "maximum context length") || strings.Contains(msg, "context_length_exceeded")
}

func isContentPolicy(pe providerError) bool {
	switch pe.Code {
	case "content_filter", "content_policy_violation", "content_policy":
		return true
	}
	if pe.Type == "content_policy_violation" || pe.Type == "content_filter" {
		return true
	}
	msg := strings.ToLower(pe.Message)
	return strings.Contains(msg, "content policy") || strings.Contains(msg, "content management policy")
}

// parseErrorBody extracts an error from a body the SDK could not parse:
// {"error":{"message":…}}, {"error":"…"}, {"message":…} or plain text.
func parseErrorBody(resp *http.Response) providerError {
	if resp == nil || resp.Body == nil {
		return providerError{}
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var envelope struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(body, &envelope) == nil {
		var obj struct {
			Message string          `json:"message"`
			Code    json.RawMessage `json:"code"`
			Type    string          `json:"type"`
		}
		var s string
		switch {
		case json.Unmarshal(envelope.Error, &obj) == nil && obj.Message != "":
			return providerError{Message: obj.Message, Code: rawString(obj.Code), Type: obj.Type}
		case json.Unmarshal(envelope.Error, &s) == nil && s != "":
			return providerError{Message: s, Code: rawString(envelope.Code)}
		case envelope.Message != "":
			return providerError{Message: envelope.Message, Code: rawString(envelope.Code)}
		}
	}
	text := strings.TrimSpace(string(body))
	if len(text) > maxErrorBody {
		cut := maxErrorBody
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	return providerError{Message: text}
}

// rawString renders a JSON string or number code as text.
func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// retryAfter reads the provider's wait hint: retry-after-ms (OpenAI), then
// Retry-After in seconds or as an HTTP date. Zero when absent or unparseable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return capRetryAfter(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return capRetryAfter(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

func capRetryAfter(ns float64) time.Duration {
	if !(ns > 0) { // also NaN
		return 0
	}
	if ns >= float64(maxRetryAfter) {
		return maxRetryAfter
	}
	return time.Duration(ns)
}

// isNumber reports whether s is a bare number (some servers echo the HTTP
// status as the error code, which adds nothing to the message).
func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}
