package dingtalk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
)

// maxResponseBytes bounds an HTTP response body.
const maxResponseBytes = 1 << 20

// ErrUnauthorized is matched (errors.Is) by errors of calls DingTalk
// refused for the app's credentials: connections/open or the access token
// answered 401, or 400 or 403 that is not a rate limit, or a robot API
// kept answering 401 with a fresh token. Run returns such an error
// instead of retrying; such an error also matches channel.ErrOffline (it
// is never a channel.RejectedError, so channel.Classify gives
// channel.ClassOffline). A throttled connections/open or token call (403
// Forbidden.AccessDenied.QpsLimit…, 429) is a *channel.RateLimitedError
// and is retried.
var ErrUnauthorized = errors.New("dingtalk: unauthorized (check the client id and secret)")

// authError is a refusal of the credentials: it matches ErrUnauthorized
// and channel.ErrOffline, and errors.As still finds the *APIError, but it
// does not match the answer's other classes (a 400's RejectedError).
type authError struct{ err error }

func (e *authError) Error() string { return ErrUnauthorized.Error() + ": " + e.err.Error() }

// Unwrap returns the classes of a credentials refusal.
func (e *authError) Unwrap() []error { return []error{ErrUnauthorized, channel.ErrOffline} }

// As finds the *APIError of the refused call.
func (e *authError) As(target any) bool {
	if p, ok := target.(**APIError); ok {
		return errors.As(e.err, p)
	}
	return false
}

// credentialsRefused reports whether err, the failure of a call made with
// the client id and secret (connections/open, oauth2/accessToken), says the
// credentials are bad: 401, or 400/403 that is not a rate limit.
func credentialsRefused(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) || errors.Is(err, channel.ErrRateLimited) {
		return false
	}
	return ae.Status == http.StatusUnauthorized || ae.Status == http.StatusBadRequest || ae.Status == http.StatusForbidden
}

// errcodeBusy is the errcode of "system busy" (系统繁忙), a transient
// answer even in a 2xx.
const errcodeBusy = -1

// The throttling codes the adapter recognises (classification is by these
// codes, never by message text).
const (
	// ErrcodeSendTooFast is the session webhook's errcode for a robot
	// over its send rate ("send too fast, exceed 20 times per minute").
	ErrcodeSendTooFast = 130101
	// ErrcodeThrottled is the robot errcode for a throttled robot.
	ErrcodeThrottled = 410100
	// CodeQPSLimitPrefix starts the OpenAPI code of a call over the
	// per-app, per-API rate (HTTP 403
	// "Forbidden.AccessDenied.QpsLimitForApi" and
	// "…QpsLimitForAppkeyAndApi").
	CodeQPSLimitPrefix = "Forbidden.AccessDenied.QpsLimit"
	// gatewayThrottled is the "status" of the API gateway's throttling
	// answer ({"status":1111,"wait":5,"punish":"deny",…}).
	gatewayThrottled = 1111
)

// The OpenAPI codes that say the robot is no longer in the conversation
// (the send is then also channel.ErrKicked).
var kickedCodes = map[string]bool{
	"invalidParameter.robotCode.notExsit": true, // sic: the platform's spelling
	"bot.stopped":                         true,
}

// APIError is an unsuccessful answer of a DingTalk call. It is classified
// for the pipeline (see channel.Classify) from the HTTP status and the
// platform's code only, never from Message:
//
//   - 429, HTTP 403 with a code starting with CodeQPSLimitPrefix, the
//     gateway's throttling answer, errcode ErrcodeSendTooFast or
//     ErrcodeThrottled: a *channel.RateLimitedError (RetryAfter from the
//     Retry-After header or the gateway's wait, else 1 s for a QPS limit
//     and Config.ThrottleRetry for a robot over its send rate);
//   - 400, 403, 404 and any other non-zero errcode: a definitive
//     *channel.RejectedError (Code is the platform's code or errcode, else
//     the HTTP status); the codes of a robot removed from the conversation
//     also match channel.ErrKicked;
//   - 401 (after one retry with a fresh token): ErrUnauthorized and
//     channel.ErrOffline;
//   - errcode -1 (system busy) in a 2xx answer, 5xx and anything else:
//     unclassified, i.e. transient.
type APIError struct {
	// Op is the call that failed ("groupMessages/send", "sessionWebhook",
	// …); never a URL.
	Op string
	// Status is the HTTP status.
	Status int
	// Code is the platform's code: the OpenAPI "code", or a session
	// webhook's non-zero "errcode" as text.
	Code string
	// Message is the platform's human-readable text (informational,
	// secrets removed).
	Message string
	// RequestID is the OpenAPI request id, for DingTalk support.
	RequestID string

	classes []error
}

// Error describes the failure; it never contains a secret.
func (e *APIError) Error() string {
	s := fmt.Sprintf("dingtalk: %s: HTTP %d", e.Op, e.Status)
	if e.Code != "" {
		s += " code " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RequestID != "" {
		s += " (request " + e.RequestID + ")"
	}
	return s
}

// Unwrap returns the classified errors, so errors.Is and errors.As see
// through an APIError.
func (e *APIError) Unwrap() []error { return e.classes }

// apiBody is the error body of the OpenAPI and of the session webhook.
type apiBody struct {
	Code      string  `json:"code"`
	Message   string  `json:"message"`
	RequestID string  `json:"requestid"`
	ErrCode   flexInt `json:"errcode"`
	ErrMsg    string  `json:"errmsg"`
	// The API gateway's throttling answer.
	Status flexInt `json:"status"`
	Wait   flexInt `json:"wait"`
}

// classify builds the APIError of an answer. throttle is the RetryAfter
// of a robot over its send rate.
func classify(op string, status int, h http.Header, body []byte, throttle time.Duration) *APIError {
	var b apiBody
	_ = json.Unmarshal(body, &b) // a body that is not JSON leaves the fields empty
	e := &APIError{Op: op, Status: status, Code: b.Code, Message: b.Message, RequestID: b.RequestID}
	if b.ErrCode != 0 {
		e.Code = strconv.FormatInt(int64(b.ErrCode), 10)
		e.Message = b.ErrMsg
	}
	reason := e.Message
	if reason == "" {
		reason = http.StatusText(status)
	}
	code := e.Code
	if code == "" {
		code = strconv.Itoa(status)
	}
	rate := func(d time.Duration) { e.classes = []error{&channel.RateLimitedError{RetryAfter: d}} }
	switch {
	case status == http.StatusTooManyRequests:
		rate(retryAfter(h, time.Second))
	case status == http.StatusForbidden && strings.HasPrefix(b.Code, CodeQPSLimitPrefix):
		rate(retryAfter(h, time.Second))
	case b.Status == gatewayThrottled && b.Wait > 0:
		rate(time.Duration(min(int64(b.Wait), 3600)) * time.Second)
	case b.ErrCode == ErrcodeSendTooFast || b.ErrCode == ErrcodeThrottled:
		rate(throttle)
	case status/100 == 2 && b.ErrCode == errcodeBusy:
		// transient: the pipeline retries
	case status == http.StatusUnauthorized:
		e.classes = []error{ErrUnauthorized, channel.ErrOffline}
	case status == http.StatusBadRequest, status == http.StatusForbidden, status == http.StatusNotFound,
		status/100 == 2 && b.ErrCode != 0:
		e.classes = []error{&channel.RejectedError{Code: code, Reason: reason}}
		if kickedCodes[b.Code] {
			e.classes = append(e.classes, channel.ErrKicked)
		}
	}
	return e
}

// retryAfter reads a Retry-After in seconds (def when absent or bad).
func retryAfter(h http.Header, def time.Duration) time.Duration {
	if h == nil {
		return def
	}
	secs, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || secs <= 0 {
		return def
	}
	return time.Duration(min(secs, 3600)) * time.Second
}

// call is one HTTP call.
type call struct {
	op     string
	url    string
	token  string // the x-acs-dingtalk-access-token header, when set
	body   any
	result any // decoded from a 2xx answer, when non-nil
	// sent: a 2xx answer means the message went out, so an answer whose
	// body cannot be read is logged, not an error (the message would
	// otherwise be sent again).
	sent bool
}

// do makes the call with the CallTimeout deadline. A non-2xx answer, or a
// 2xx one with a non-zero errcode, is an *APIError; network errors have
// secrets removed.
func (c *Channel) do(ctx context.Context, k call) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	body, err := json.Marshal(k.body)
	if err != nil {
		return fmt.Errorf("dingtalk: %s: encoding the request: %w", k.op, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("dingtalk: %s: %w", k.op, c.redact(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if k.token != "" {
		req.Header.Set("x-acs-dingtalk-access-token", k.token)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("dingtalk: %s: %w", k.op, c.redact(err))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("dingtalk: %s: reading the answer: %w", k.op, c.redact(err))
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("dingtalk: %s: answer larger than %d bytes", k.op, maxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		return c.cleanAPIError(classify(k.op, resp.StatusCode, resp.Header, data, c.cfg.ThrottleRetry))
	}
	var head apiBody
	if json.Unmarshal(data, &head) == nil && (head.ErrCode != 0 || head.Status == gatewayThrottled) {
		return c.cleanAPIError(classify(k.op, resp.StatusCode, resp.Header, data, c.cfg.ThrottleRetry))
	}
	if k.result != nil {
		if err := json.Unmarshal(data, k.result); err != nil {
			if k.sent {
				c.log.Warn("dingtalk_answer_malformed", "op", k.op, "status", resp.StatusCode, "bytes", len(data),
					"effect", "taken as sent: HTTP "+strconv.Itoa(resp.StatusCode))
				return nil
			}
			return fmt.Errorf("dingtalk: %s: malformed answer (HTTP %d): %w", k.op, resp.StatusCode, err)
		}
	}
	return nil
}

// cleanAPIError removes secrets from the platform's texts.
func (c *Channel) cleanAPIError(e *APIError) *APIError {
	e.Message = c.secrets.scrub(e.Message)
	e.Code = c.secrets.scrub(e.Code)
	e.RequestID = c.secrets.scrub(e.RequestID)
	return e
}

// secretSet remembers the secrets that must never reach a log line or an
// error: the client secret, recent access tokens, connection tickets and
// session webhook URLs (whose query is a credential).
type secretSet struct {
	mu sync.Mutex
	// pinned (the client secret) and current (the access token in use)
	// are never evicted.
	pinned  []string
	current string
	list    []string // the most recent others, at most maxSecrets
}

// maxSecrets bounds the rolling list of remembered secrets; the pinned
// ones and the current access token are kept besides.
const maxSecrets = 256

// minSecret: shorter values are not credentials and would redact noise.
const minSecret = 4

// pin remembers a secret for good (the client secret).
func (s *secretSet) pin(v string) {
	if len(v) < minSecret {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.pinned, v) {
		s.pinned = append(s.pinned, v)
	}
}

// setCurrent remembers the access token in use; it is kept regardless of
// the cap, and the one it replaces joins the rolling list.
func (s *secretSet) setCurrent(v string) {
	if len(v) < minSecret {
		return
	}
	s.mu.Lock()
	old := s.current
	s.current = v
	s.mu.Unlock()
	if old != "" && old != v {
		s.add(old)
	}
}

// add remembers a secret in the rolling list (the oldest is forgotten
// beyond maxSecrets).
func (s *secretSet) add(v string) {
	if len(v) < minSecret {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.list, v) {
		return
	}
	s.list = append(s.list, v)
	if len(s.list) > maxSecrets {
		s.list = append(s.list[:0], s.list[len(s.list)-maxSecrets:]...)
	}
}

// addURL remembers a URL whose query is a credential: the URL, its query
// and every query value.
func (s *secretSet) addURL(raw string) {
	s.add(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return
	}
	s.add(u.RawQuery)
	for _, vs := range u.Query() {
		for _, v := range vs {
			s.add(v)
		}
	}
}

// scrub replaces every remembered secret in text.
func (s *secretSet) scrub(text string) string {
	if text == "" {
		return text
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The pinned and current secrets first: a rolling one may be part of
	// them.
	for _, l := range [][]string{s.pinned, {s.current}, s.list} {
		for _, x := range l {
			if x != "" && strings.Contains(text, x) {
				text = strings.ReplaceAll(text, x, "<redacted>")
			}
		}
	}
	return text
}

// redact removes secrets from an error: *url.Error carries the request
// URL (a session webhook's query, a ticket), and a transport may repeat
// it in the error it wraps; such an error is replaced by one with the
// secrets cut out of its text that still matches (errors.Is) what the
// original matched.
func (c *Channel) redact(err error) error {
	if err == nil {
		return nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		cp := *ue
		cp.URL = safeURL(ue.URL)
		err = &redactedError{msg: cp.Error(), err: err}
	}
	if msg := c.secrets.scrub(err.Error()); msg != err.Error() {
		return &redactedError{msg: msg, err: err}
	}
	return err
}

// safeURL keeps a URL's scheme, host and path (no query, no user).
func safeURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<url>"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// redactedError is an error whose text had a secret in it. It has no
// Unwrap, so the original text cannot be reached; Is consults the
// original.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

// Is reports whether the original error matches target.
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// tokenCache holds the app's access token.
type tokenCache struct {
	mu      sync.Mutex
	token   string
	expires time.Time // when it must no longer be used (refresh margin applied)
}

// accessToken returns a valid access token, fetching one when none is
// cached or the cached one is about to expire. Concurrent callers share
// one fetch.
func (c *Channel) accessToken(ctx context.Context) (string, error) {
	c.tok.mu.Lock()
	defer c.tok.mu.Unlock()
	now := c.cfg.Clock.Now()
	if c.tok.token != "" && now.Before(c.tok.expires) {
		return c.tok.token, nil
	}
	var res struct {
		AccessToken string  `json:"accessToken"`
		ExpireIn    flexInt `json:"expireIn"`
	}
	err := c.do(ctx, call{op: "oauth2/accessToken", url: c.cfg.APIBase + "/v1.0/oauth2/accessToken",
		body: map[string]string{"appKey": c.cfg.ClientID, "appSecret": c.cfg.ClientSecret}, result: &res})
	if err != nil {
		if credentialsRefused(err) {
			return "", &authError{err: err}
		}
		return "", err
	}
	if res.AccessToken == "" || strings.ContainsAny(res.AccessToken, " \t\r\n") {
		return "", errors.New("dingtalk: oauth2/accessToken: the answer has no usable accessToken")
	}
	c.secrets.setCurrent(res.AccessToken)
	life := time.Duration(res.ExpireIn) * time.Second
	if life <= 0 || life > 24*time.Hour {
		life = 2 * time.Hour // the documented lifetime
	}
	margin := c.cfg.TokenRefresh
	if margin*2 > life {
		margin = life / 2
	}
	c.tok.token, c.tok.expires = res.AccessToken, now.Add(life-margin)
	c.log.Debug("dingtalk_token_fetched", "valid_for", life-margin)
	return res.AccessToken, nil
}

// dropToken forgets tok (a robot API refused it), so the next call
// fetches a new one.
func (c *Channel) dropToken(tok string) {
	c.tok.mu.Lock()
	defer c.tok.mu.Unlock()
	if c.tok.token == tok {
		c.tok.token = ""
	}
}

// apiCall makes an OpenAPI call with the access token, fetching a new
// token and trying once more when the first is refused (401).
func (c *Channel) apiCall(ctx context.Context, k call) error {
	for try := 0; ; try++ {
		tok, err := c.accessToken(ctx)
		if err != nil {
			return err
		}
		k.token = tok
		err = c.do(ctx, k)
		var ae *APIError
		if try == 0 && errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			c.dropToken(tok)
			c.log.Info("dingtalk_token_refused", "op", k.op, "effect", "fetching a new access token")
			continue
		}
		return err
	}
}
