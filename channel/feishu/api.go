package feishu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
)

// maxResponseBytes bounds an Open API JSON answer.
const maxResponseBytes = 8 << 20

// tokenRefreshMargin is how long before its expiry a tenant access token
// is replaced. The token endpoint hands out a new token once less than
// 30 minutes are left, so the margin must stay below that.
const tokenRefreshMargin = 10 * time.Minute

// ErrUnauthorized is matched (errors.Is) by errors of calls the platform
// refused because of the app's credentials: the token endpoint refused
// AppID/AppSecret, or the long-connection endpoint refused the app. Run
// returns such an error instead of retrying; a Send that gets one also
// matches channel.ErrOffline.
var ErrUnauthorized = errors.New("feishu: the platform refused the app credentials (check AppID and AppSecret)")

// Open API codes the adapter acts on [Feishu server error codes; the im
// send and reply references].
const (
	codeRateLimited      = 99991400 // request trigger frequency limit
	codeTokenInvalid     = 99991663 // tenant access token invalid
	codeTokenInvalid2    = 99991664
	codeTokenInvalid3    = 99991668 // invalid access token
	codeTokenExpired     = 99991671
	codeFieldValidation  = 99992402 // request field validation failed
	codeBotNotInGroup    = 230002
	codeChatRateLimit    = 230020 // per-chat frequency limit
	codeSendDenied       = 230035 // muted group, or blocked by the user
	codeChatDissolved    = 232009
	codeTenantRateLimit  = 11232 // create-message frequency limit
	codeWSConnLimit      = 1000040350
	codeWSInternal       = 1000040343
	codeWSSystemBusy     = 1
	codeWSForbidden      = 403
	codeWSAuthFailed     = 514
	headerRateLimitReset = "X-Ogw-Ratelimit-Reset"
)

// APIError is an unsuccessful Open API answer: a non-zero "code", or a
// non-2xx status without one. It is classified for the pipeline (see
// channel.Classify) by HTTP status and code, never by Msg:
//
//   - HTTP 429, code 99991400, 230020 or 11232: matches
//     channel.ErrRateLimited; errors.As finds a *channel.RateLimitedError
//     carrying the x-ogw-ratelimit-reset header (at least 1 s).
//   - 230002 (the bot is not in the group) and 232009 (the group was
//     dissolved): a definitive *channel.RejectedError that also matches
//     channel.ErrKicked.
//   - 230035 (no permission to send: the group is muted or the user
//     blocked the bot): a *channel.MutedError.
//   - any other 230xxx or 232xxx code, and 99992402 (field validation):
//     a definitive *channel.RejectedError; for a media message it also
//     matches channel.ErrMediaInvalid.
//   - a refused tenant token (after one refresh): ErrUnauthorized and
//     channel.ErrOffline.
//   - anything else (5xx, unknown codes): unclassified, i.e. transient.
type APIError struct {
	// Op names the call ("send", "reply", "tenant_access_token", …);
	// never a URL or a parameter.
	Op string
	// Status is the HTTP status.
	Status int
	// Code is the Open API code (0 when the body had none).
	Code int
	// Msg is the platform's text (informational only).
	Msg string
	// RetryAfter is the rate-limit reset the platform announced.
	RetryAfter time.Duration

	classes []error
}

// Error describes the failure; it never contains a credential.
func (e *APIError) Error() string {
	s := fmt.Sprintf("feishu: %s: HTTP %d", e.Op, e.Status)
	if e.Code != 0 {
		s += fmt.Sprintf(", code %d", e.Code)
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Unwrap returns the classified errors (see the type doc).
func (e *APIError) Unwrap() []error { return e.classes }

// newAPIError builds and classifies an APIError. media marks a call that
// sent an attachment.
func newAPIError(op string, status, code int, msg string, retryAfter time.Duration, media bool) *APIError {
	e := &APIError{Op: op, Status: status, Code: code, Msg: msg, RetryAfter: retryAfter}
	reason := msg
	if reason == "" {
		reason = http.StatusText(status)
	}
	rejected := &channel.RejectedError{Code: strconv.Itoa(code), Reason: reason}
	switch {
	case status == http.StatusTooManyRequests || code == codeRateLimited || code == codeChatRateLimit || code == codeTenantRateLimit:
		if retryAfter < time.Second {
			retryAfter = time.Second
		}
		e.RetryAfter = retryAfter
		e.classes = []error{&channel.RateLimitedError{RetryAfter: retryAfter}}
	case isTokenCode(code):
		e.classes = []error{ErrUnauthorized, channel.ErrOffline}
	case code == codeBotNotInGroup || code == codeChatDissolved:
		e.classes = []error{rejected, channel.ErrKicked}
	case code == codeSendDenied:
		e.classes = []error{&channel.MutedError{}}
	case code/1000 == 230 || code/1000 == 232 || code == codeFieldValidation:
		e.classes = []error{rejected}
		if media {
			e.classes = append(e.classes, channel.ErrMediaInvalid)
		}
	}
	return e
}

func isTokenCode(code int) bool {
	switch code {
	case codeTokenInvalid, codeTokenInvalid2, codeTokenInvalid3, codeTokenExpired:
		return true
	}
	return false
}

// envelope is the Open API answer: {"code":0,"msg":"success","data":{…}}.
type envelope struct {
	Code *int            `json:"code"`
	Msg  string          `json:"msg"`
	Data json.RawMessage `json:"data"`
	// raw is the whole answer, for the calls that put fields beside
	// "data" (bot info).
	raw []byte
}

// request is one Open API call.
type request struct {
	op      string // for errors and logs
	method  string
	path    string // under BaseURL, starting with /open-apis/
	query   url.Values
	body    any
	media   bool          // the call sends an attachment (error classification)
	noAuth  bool          // no tenant token (the token call itself)
	timeout time.Duration // overrides CallTimeout
}

// call performs req with the tenant token and decodes the answer's data
// into out (when non-nil). A refused token is replaced once and the call
// repeated. The call has the CallTimeout deadline; errors never contain
// a credential.
func (c *Channel) call(ctx context.Context, req request, out any) (*envelope, error) {
	for attempt := 0; ; attempt++ {
		tok := ""
		if !req.noAuth {
			var err error
			if tok, err = c.tokens.get(ctx); err != nil {
				return nil, err
			}
		}
		env, err := c.roundTrip(ctx, req, tok)
		var ae *APIError
		if attempt == 0 && !req.noAuth && errors.As(err, &ae) && isTokenCode(ae.Code) {
			c.log.Info("feishu_token_refused", "op", req.op, "code", ae.Code, "effect", "fetching a new tenant access token")
			c.tokens.invalidate(tok)
			continue
		}
		if err != nil {
			return nil, err
		}
		if out != nil && len(env.Data) > 0 && string(env.Data) != "null" {
			if err := json.Unmarshal(env.Data, out); err != nil {
				return nil, fmt.Errorf("feishu: %s: malformed data: %w", req.op, err)
			}
		}
		return env, nil
	}
}

// roundTrip makes one HTTP exchange and checks the envelope.
func (c *Channel) roundTrip(ctx context.Context, req request, tok string) (*envelope, error) {
	timeout := c.cfg.CallTimeout
	if req.timeout > 0 {
		timeout = req.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if req.body != nil {
		b, err := json.Marshal(req.body)
		if err != nil {
			return nil, fmt.Errorf("feishu: %s: encoding the request: %w", req.op, err)
		}
		body = bytes.NewReader(b)
	}
	u := c.cfg.BaseURL + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("feishu: %s: %w", req.op, err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	if tok != "" {
		hr.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.cfg.HTTPClient.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("feishu: %s: %w", req.op, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("feishu: %s: reading the answer: %w", req.op, err)
	}
	if len(data) > maxResponseBytes {
		return nil, fmt.Errorf("feishu: %s: answer larger than %d bytes", req.op, maxResponseBytes)
	}
	return c.checkAnswer(req, resp, data)
}

// checkAnswer decodes the envelope and turns a failure into an APIError.
func (c *Channel) checkAnswer(req request, resp *http.Response, data []byte) (*envelope, error) {
	retry := rateLimitReset(resp.Header)
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil || env.Code == nil {
		if resp.StatusCode/100 != 2 {
			return nil, newAPIError(req.op, resp.StatusCode, 0, "HTTP "+resp.Status+" without an Open API body", retry, req.media)
		}
		return nil, fmt.Errorf("feishu: %s: malformed answer (HTTP %d)", req.op, resp.StatusCode)
	}
	if *env.Code != 0 || resp.StatusCode/100 != 2 {
		return nil, newAPIError(req.op, resp.StatusCode, *env.Code, env.Msg, retry, req.media)
	}
	env.raw = data
	return &env, nil
}

// rateLimitReset reads x-ogw-ratelimit-reset (seconds, possibly
// fractional), capped at an hour; 0 when absent or malformed.
func rateLimitReset(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get(headerRateLimitReset))
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f <= 0 {
		return 0
	}
	return time.Duration(min(f, 3600) * float64(time.Second))
}

// tokenSource caches the tenant access token and refreshes it before it
// expires; one fetch at a time.
type tokenSource struct {
	c    *Channel
	sem  chan struct{} // a lock that honours contexts
	tok  string
	good time.Time // refresh after this
}

func newTokenSource(c *Channel) *tokenSource {
	return &tokenSource{c: c, sem: make(chan struct{}, 1)}
}

// get returns a valid tenant access token, fetching one when none is
// cached or the cached one is close to its expiry.
func (t *tokenSource) get(ctx context.Context) (string, error) {
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-t.sem }()
	now := t.c.clk.Now()
	if t.tok != "" && now.Before(t.good) {
		return t.tok, nil
	}
	var resp struct {
		Code   *int   `json:"code"`
		Msg    string `json:"msg"`
		Token  string `json:"tenant_access_token"`
		Expire int64  `json:"expire"`
	}
	req := request{op: "tenant_access_token", method: http.MethodPost, path: "/open-apis/auth/v3/tenant_access_token/internal",
		body: map[string]string{"app_id": t.c.cfg.AppID, "app_secret": t.c.cfg.AppSecret}, noAuth: true}
	if err := t.c.rawCall(ctx, req, &resp); err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status/100 == 4 && ae.Status != http.StatusTooManyRequests && ae.Code != codeRateLimited {
			// The platform refused the credentials themselves.
			ae.classes = []error{ErrUnauthorized, channel.ErrOffline}
		}
		return "", err
	}
	if resp.Code == nil || *resp.Code != 0 || resp.Token == "" || resp.Expire <= 0 {
		code := 0
		if resp.Code != nil {
			code = *resp.Code
		}
		e := newAPIError(req.op, http.StatusOK, code, resp.Msg, 0, false)
		if code != 0 && code != codeRateLimited {
			e.classes = []error{ErrUnauthorized, channel.ErrOffline}
		}
		return "", e
	}
	life := time.Duration(resp.Expire) * time.Second
	wait := life - tokenRefreshMargin
	if life <= 2*tokenRefreshMargin {
		wait = life / 2
	}
	t.tok, t.good = resp.Token, now.Add(wait)
	t.c.log.Debug("feishu_token_refreshed", "expires_in", life.String()) // never the token
	return t.tok, nil
}

// invalidate drops tok if it is still the cached token.
func (t *tokenSource) invalidate(tok string) {
	select {
	case t.sem <- struct{}{}:
	default:
		return // a fetch is under way: it replaces the token anyway
	}
	defer func() { <-t.sem }()
	if t.tok == tok {
		t.tok = ""
	}
}

// rawCall is one exchange whose answer is the whole body (the token
// endpoint puts its fields at the top level, not under "data").
func (c *Channel) rawCall(ctx context.Context, req request, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	b, err := json.Marshal(req.body)
	if err != nil {
		return fmt.Errorf("feishu: %s: encoding the request: %w", req.op, err)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, c.cfg.BaseURL+req.path, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("feishu: %s: %w", req.op, err)
	}
	hr.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := c.cfg.HTTPClient.Do(hr)
	if err != nil {
		return fmt.Errorf("feishu: %s: %w", req.op, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("feishu: %s: reading the answer: %w", req.op, err)
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("feishu: %s: answer larger than %d bytes", req.op, maxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		var env envelope
		code, msg := 0, ""
		if json.Unmarshal(data, &env) == nil && env.Code != nil {
			code, msg = *env.Code, env.Msg
		}
		return newAPIError(req.op, resp.StatusCode, code, msg, rateLimitReset(resp.Header), false)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("feishu: %s: malformed answer: %w", req.op, err)
	}
	return nil
}
