package qqbot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/personakit/persona/channel"
)

// maxResponseBytes bounds an OpenAPI answer.
const maxResponseBytes = 4 << 20

// OpenAPI business codes the adapter acts on. Sources: the docs'
// error-trace/openapi.md and send.md, botgo errs/err.go; codes marked
// [3p] were seen in answers users reported and are not in the docs.
const (
	codeMsgLimitExceed     = 22009    // msg limit exceed: sending too often (see APIError)
	codeChannelRateLimit   = 20028    // guild channel write rate limit
	codeTokenCheckFailed   = 11242    // system error, retry once
	codeTokenNotPass       = 11243    // token refused
	codeTokenExpired       = 11244    // token expired or unknown (botgo)
	codeSessionNotExist    = 304018   // the bot is not connected to the gateway
	codeAuditPushAsync     = 304023   // accepted, waiting for a human review
	codeAuditReplyAsync    = 304024   // accepted, waiting for a human review
	codeReplyExpired       = 304027   // the replied-to message is too old
	codeMediaFetchFailed   = 304082   // rich media could not be fetched, retry
	codeMediaConvertFailed = 304083   // rich media could not be converted, retry
	codeDuplicateSeq       = 40054005 // [3p] "消息被去重，请检查请求msgseq": msg_id+msg_seq seen before
	codeActiveNoPermission = 40034102 // [3p] "主动消息失败, 无权限": active messages are not allowed
	codeUnknownChannel     = 10003
	codeUnknownGuild       = 10004
	codeGroupGone          = 1100104 // the group no longer exists
	codeNotGroupMember     = 1100301 // the bot is not in the group
)

// APIError is an unsuccessful OpenAPI answer: a non-2xx status, or a 2xx
// status with a business code other than an accepted one (201/202 "async
// success" and the review notices 304023/304024 are successes; a send
// answered so is taken as delivered). It is classified for the pipeline
// (channel.Classify) from the status and code only, never from Message:
//
//   - 429, code 22009 (sending too often) and 20028 (channel write limit):
//     a *channel.RateLimitedError (Retry-After when given, else 1 s).
//     22009 "msg limit exceed" is a frequency limit to retry after a
//     backoff (from the docs' error-trace/openapi.md and
//     botgo errs/err.go), not the limit of 5 replies per message: that
//     one has no documented code (users report the text "reply msg exceed
//     limit") and Send never reaches it, counting the replies itself, so
//     22009 marks no message exhausted;
//   - 401, and codes 11243/11244 after the one retry with a fresh token:
//     ErrUnauthorized and channel.ErrOffline; code 304018 (the bot is not
//     connected to the gateway): channel.ErrOffline;
//   - codes 10003, 10004, 1100104 and 1100301 (the channel, guild or group
//     is gone, or the bot is not in it): a *channel.RejectedError that
//     also matches channel.ErrKicked;
//   - 5xx and codes 11242, 11252, 11263, 11281, 304082, 304083 (system
//     errors the docs say to retry): transient (unclassified);
//   - any other 4xx (permissions and bans 11251/11253/11254/11264/11265,
//     empty message 50006, reply to the bot's own message 50045, an
//     expired reply window 304027, active messages refused 40034102, a
//     duplicate msg_seq 40054005, ...): a definitive *channel.RejectedError
//     whose Code is the business code (or "http_<status>" without one);
//     media calls also match channel.ErrMediaInvalid.
type APIError struct {
	// Method and Path name the call (never the token).
	Method, Path string
	// Status is the HTTP status.
	Status int
	// Code is the business code (code or err_code of the body; 0 = none).
	Code int64
	// Message is the platform's text (informational only).
	Message string
	// TraceID is the X-Tps-trace-ID header (or trace_id of the body), for
	// reports to the platform.
	TraceID string
	// RetryAfter is the Retry-After header of a 429 answer.
	RetryAfter time.Duration

	classes []error
}

// Error describes the failure; it never contains a credential.
func (e *APIError) Error() string {
	s := fmt.Sprintf("qqbot: %s %s: HTTP %d", e.Method, e.Path, e.Status)
	if e.Code != 0 {
		s += " code " + strconv.FormatInt(e.Code, 10)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.TraceID != "" {
		s += " (trace " + e.TraceID + ")"
	}
	return s
}

// Unwrap returns the classified errors (see the type doc).
func (e *APIError) Unwrap() []error { return e.classes }

// classify fills e.classes from Status and Code.
func (e *APIError) classify(media bool) {
	rejected := func() *channel.RejectedError {
		code := "http_" + strconv.Itoa(e.Status)
		if e.Code != 0 {
			code = strconv.FormatInt(e.Code, 10)
		}
		reason := e.Message
		if reason == "" {
			reason = http.StatusText(e.Status)
		}
		return &channel.RejectedError{Code: code, Reason: reason}
	}
	switch e.Code {
	case codeMsgLimitExceed, codeChannelRateLimit:
		e.classes = []error{&channel.RateLimitedError{RetryAfter: max(e.RetryAfter, time.Second)}}
		return
	case codeTokenNotPass, codeTokenExpired:
		e.classes = []error{ErrUnauthorized, channel.ErrOffline}
		return
	case codeSessionNotExist:
		e.classes = []error{channel.ErrOffline}
		return
	case codeUnknownChannel, codeUnknownGuild, codeGroupGone, codeNotGroupMember:
		e.classes = []error{rejected(), channel.ErrKicked}
		return
	case codeTokenCheckFailed, 11252, 11263, 11281, codeMediaFetchFailed, codeMediaConvertFailed:
		return // transient
	}
	switch {
	case e.Status == http.StatusTooManyRequests:
		e.classes = []error{&channel.RateLimitedError{RetryAfter: max(e.RetryAfter, time.Second)}}
	case e.Status == http.StatusUnauthorized:
		e.classes = []error{ErrUnauthorized, channel.ErrOffline}
	case e.Status >= 500:
		// transient
	case e.Status >= 400, e.Code != 0:
		e.classes = []error{rejected()}
		if media {
			e.classes = append(e.classes, channel.ErrMediaInvalid)
		}
	}
}

// refreshCode reports whether the answer asks for a new token (401,
// 11243, 11244): the call is retried once with one.
func (e *APIError) refreshCode() bool {
	return e.Status == http.StatusUnauthorized || e.Code == codeTokenNotPass || e.Code == codeTokenExpired
}

// apiBody is the error part of an OpenAPI answer.
type apiBody struct {
	Code    int64  `json:"code"`
	ErrCode int64  `json:"err_code"`
	Message string `json:"message"`
	TraceID string `json:"trace_id"`
}

// call makes one OpenAPI call with the access token and decodes a 2xx
// result into out (when non-nil). An answer asking for a new token (401,
// 11243, 11244) is retried once with a fresh one. media marks calls whose
// 4xx answers also match channel.ErrMediaInvalid. The call has the
// CallTimeout deadline; errors contain no credential.
func (c *Channel) call(ctx context.Context, method, path string, body any, media bool, out any) error {
	for attempt := 0; ; attempt++ {
		tok, err := c.tokens.get(ctx)
		if err != nil {
			if errors.Is(err, ErrUnauthorized) {
				return fmt.Errorf("%w: %w", err, channel.ErrOffline)
			}
			return err
		}
		err = c.callWith(ctx, tok, method, path, body, media, out)
		var ae *APIError
		if attempt == 0 && errors.As(err, &ae) && ae.refreshCode() {
			c.log.Info("qq_token_refused", "method", method, "path", path, "status", ae.Status, "code", ae.Code,
				"effect", "retrying once with a new access token")
			c.tokens.invalidate(tok)
			continue
		}
		return err
	}
}

func (c *Channel) callWith(ctx context.Context, tok, method, path string, body any, media bool, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("qqbot: %s %s: encoding the body: %w", method, path, err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.APIBase+path, rd)
	if err != nil {
		return fmt.Errorf("qqbot: %s %s: %w", method, path, c.tokens.scrub(err))
	}
	req.Header.Set("Authorization", "QQBot "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("qqbot: %s %s: %w", method, path, c.tokens.scrub(err))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("qqbot: %s %s: reading the answer: %w", method, path, c.tokens.scrub(err))
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("qqbot: %s %s: answer larger than %d bytes", method, path, maxResponseBytes)
	}
	var eb apiBody
	_ = json.Unmarshal(data, &eb) // absent or malformed: no code
	code := eb.Code
	if code == 0 {
		code = eb.ErrCode
	}
	trace := resp.Header.Get("X-Tps-trace-ID")
	if trace == "" {
		trace = eb.TraceID
	}
	if resp.StatusCode/100 != 2 || (code != 0 && !acceptedWithCode(resp.StatusCode, code)) {
		ae := &APIError{Method: method, Path: path, Status: resp.StatusCode, Code: code, Message: truncate(eb.Message, 200), TraceID: truncate(trace, 80)}
		if resp.StatusCode == http.StatusTooManyRequests {
			ae.RetryAfter = retryAfterHeader(resp.Header)
		}
		ae.classify(media)
		return ae
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("qqbot: %s %s: malformed answer (HTTP %d): %w", method, path, resp.StatusCode, err)
	}
	return nil
}

// acceptedWithCode reports whether a 2xx answer carrying a business code
// is a success: 201/202 (the docs' error-trace/openapi.md:
// "async success") and the review notices 304023/304024 (accepted,
// waiting for a human review). Any other 2xx answer with a code is an
// *APIError classified like a non-2xx one.
func acceptedWithCode(status int, code int64) bool {
	return status == http.StatusCreated || status == http.StatusAccepted ||
		code == codeAuditPushAsync || code == codeAuditReplyAsync
}

// retryAfterHeader reads a Retry-After in seconds (default 1 s, at most an
// hour).
func retryAfterHeader(h http.Header) time.Duration {
	secs, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || secs <= 0 {
		return time.Second
	}
	return time.Duration(min(secs, 3600)) * time.Second
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
