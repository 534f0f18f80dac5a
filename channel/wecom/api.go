package wecom

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
)

// maxResponseBytes bounds a JSON API answer.
const maxResponseBytes = 1 << 20

// ErrUnauthorized is matched (errors.Is) by errors of calls WeCom refused
// for the credentials: gettoken with a wrong corp id or secret, or an AI
// bot's subscription refused. Run returns such an error instead of
// retrying; a Send that gets one also matches channel.ErrOffline.
var ErrUnauthorized = errors.New("wecom: credentials refused (check the corp id, agent id and secret, or the bot id and secret)")

// WeCom error codes the adapter classifies (errcode of an answer).
const (
	codeBusy            = -1     // system busy: transient
	codeInvalidSecret   = 40001  // gettoken: wrong secret
	codeInvalidMediaID  = 40007  // media/get and media sends
	codeInvalidCorpID   = 40013  // gettoken: wrong corp id
	codeInvalidToken    = 40014  // the access token is not valid
	codeTokenExpired    = 42001  // the access token expired
	codeInvalidAgent    = 40056  // the agent id is not the app's
	codeSecretRevoked   = 40091  // the secret was reset
	codeFreqLimit       = 45009  // API frequency limit
	codeConcurrency     = 45033  // too many concurrent calls
	codeIPNotAllowed    = 60020  // the caller's IP is not a trusted IP of the app
	codeNoRecipient     = 81013  // every recipient is invalid (not in the app's range)
	codeInvalidReqID    = 846605 // AI bot: req_id unknown or no longer answerable
	codeStreamExpired   = 846608 // AI bot: the stream can no longer be updated
	defaultRateLimitFor = time.Minute
)

// APIError is an unsuccessful WeCom answer: errcode != 0 in a JSON answer
// or an acknowledgement frame. It is classified for the pipeline (see
// channel.Classify) from the errcode only, never from the message:
//
//   - 45009 (frequency limit): matches channel.ErrRateLimited with
//     RetryAfter one minute; 45033 (concurrency limit): two seconds;
//   - -1 (system busy): unclassified, i.e. transient;
//   - 40001, 40013, 40056, 40091 (credentials): ErrUnauthorized and
//     channel.ErrOffline; 40014 and 42001 (access token) too, once the
//     call was retried with a fresh token and failed again;
//   - 81013 (no recipient in the app's range): a definitive
//     *channel.RejectedError that also matches channel.ErrKicked;
//   - 40007 (invalid media id) on a send: *channel.RejectedError and
//     channel.ErrMediaInvalid;
//   - any other errcode: a definitive *channel.RejectedError whose Code is
//     the errcode (60020 means the server's IP is not among the app's
//     trusted IPs).
type APIError struct {
	// Op is the call that failed ("message/send", "gettoken",
	// "aibot_send_msg", …); never a URL, which would hold a token.
	Op string
	// Code is the errcode.
	Code int
	// Message is errmsg (informational).
	Message string

	classes []error
}

// Error describes the failure; it never contains a token or secret.
func (e *APIError) Error() string {
	s := fmt.Sprintf("wecom: %s: errcode %d", e.Op, e.Code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the classified errors so errors.Is and errors.As see
// through an APIError.
func (e *APIError) Unwrap() []error { return e.classes }

// newAPIError builds and classifies an APIError. media says the call sent
// an attachment.
func newAPIError(op string, code int, msg string, media bool) *APIError {
	e := &APIError{Op: op, Code: code, Message: msg}
	reject := func() *channel.RejectedError {
		reason := msg
		if reason == "" {
			reason = op + " refused"
		}
		return &channel.RejectedError{Code: strconv.Itoa(code), Reason: reason}
	}
	switch code {
	case codeBusy:
	case codeFreqLimit:
		e.classes = []error{&channel.RateLimitedError{RetryAfter: defaultRateLimitFor}}
	case codeConcurrency:
		e.classes = []error{&channel.RateLimitedError{RetryAfter: 2 * time.Second}}
	case codeInvalidSecret, codeInvalidCorpID, codeInvalidAgent, codeSecretRevoked, codeInvalidToken, codeTokenExpired:
		e.classes = []error{ErrUnauthorized, channel.ErrOffline}
	case codeNoRecipient:
		e.classes = []error{reject(), channel.ErrKicked}
	case codeInvalidMediaID:
		e.classes = []error{reject()}
		if media {
			e.classes = append(e.classes, channel.ErrMediaInvalid)
		}
	default:
		e.classes = []error{reject()}
	}
	return e
}

// credentialCode reports whether code says the credentials (corp id,
// secret, agent id, or an AI bot's id and secret) are refused.
func credentialCode(code int) bool {
	switch code {
	case codeInvalidSecret, codeInvalidCorpID, codeInvalidAgent, codeSecretRevoked:
		return true
	}
	return false
}

// tokenRefreshed reports whether code says the access token must be
// fetched again.
func tokenRefreshed(code int) bool { return code == codeInvalidToken || code == codeTokenExpired }

// apiEnvelope is the common part of every JSON answer.
type apiEnvelope struct {
	ErrCode *int   `json:"errcode"`
	ErrMsg  string `json:"errmsg"`
}

// sendFailure wraps a transport error of a call whose request may have
// reached WeCom (the connection broke after it was written, or the
// deadline passed while waiting for the answer): the outcome is unknown.
type sendFailure struct {
	err       error
	maybeSent bool
}

func (e *sendFailure) Error() string { return e.err.Error() }
func (e *sendFailure) Unwrap() error { return e.err }

// maybeSent reports whether err says a request may have been delivered
// although no answer arrived.
func maybeSent(err error) bool {
	var sf *sendFailure
	return errors.As(err, &sf) && sf.maybeSent
}

// transportFailure wraps the redacted form of a transport error, judging
// from the raw one whether the request may have been sent: a failed dial
// or name lookup sent nothing; anything later may have.
func (c *Channel) transportFailure(raw error) error {
	var op *net.OpError
	sent := !errors.As(raw, &op) || op.Op != "dial"
	var dns *net.DNSError
	if errors.As(raw, &dns) {
		sent = false
	}
	return &sendFailure{err: c.redact(raw), maybeSent: sent}
}

// callJSON makes one API call: method to APIBase+path with query (which
// may hold an access token or the secret) and a JSON body (nil for GET),
// decoding a successful answer into out (when non-nil). An errcode != 0
// is an *APIError. Errors never contain the query.
func (c *Channel) callJSON(ctx context.Context, op, method, path string, query url.Values, body, out any, media bool) error {
	u := c.cfg.APIBase + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return c.callURL(ctx, op, method, u, body, out, media)
}

// callURL is callJSON for a full URL (an AI bot's response_url, checked
// by the caller).
func (c *Channel) callURL(ctx context.Context, op, method, u string, body, out any, media bool) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("wecom: %s: encoding the request: %w", op, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("wecom: %s: %w", op, c.redact(err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("wecom: %s: %w", op, c.transportFailure(err))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("wecom: %s: reading the answer: %w", op, &sendFailure{err: c.redact(err), maybeSent: true})
	}
	return c.decodeAnswer(op, resp.StatusCode, data, out, media)
}

// decodeAnswer checks an API answer body and decodes it into out.
func (c *Channel) decodeAnswer(op string, status int, data []byte, out any, media bool) error {
	if len(data) > maxResponseBytes {
		return fmt.Errorf("wecom: %s: answer larger than %d bytes", op, maxResponseBytes)
	}
	var env apiEnvelope
	if err := json.Unmarshal(data, &env); err != nil || env.ErrCode == nil && status/100 != 2 {
		if status/100 != 2 {
			// A front end's error page: transient (429 included, without
			// a code to say for how long).
			if status == http.StatusTooManyRequests {
				return fmt.Errorf("wecom: %s: HTTP %d: %w", op, status, &channel.RateLimitedError{RetryAfter: time.Second})
			}
			return fmt.Errorf("wecom: %s: HTTP %d without an API answer", op, status)
		}
		return fmt.Errorf("wecom: %s: malformed answer (HTTP %d)", op, status)
	}
	if env.ErrCode != nil && *env.ErrCode != 0 {
		return newAPIError(op, *env.ErrCode, env.ErrMsg, media)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("wecom: %s: malformed answer: %w", op, err)
		}
	}
	return nil
}

// redact removes secrets from a transport error: net/http puts the
// request URL (with access_token or corpsecret) into *url.Error, and a
// transport may repeat it in the error it wraps.
func (c *Channel) redact(err error) error {
	if err == nil {
		return nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		cp := *ue
		if u, perr := url.Parse(ue.URL); perr == nil {
			u.RawQuery = ""
			cp.URL = u.String()
		} else {
			cp.URL = "<redacted>"
		}
		err = &cp
	}
	msg := err.Error()
	clean := msg
	for _, s := range c.secrets() {
		if s != "" {
			clean = strings.ReplaceAll(clean, s, "<redacted>")
			clean = strings.ReplaceAll(clean, url.QueryEscape(s), "<redacted>")
		}
	}
	if clean != msg || strings.Contains(clean, "access_token=") || strings.Contains(clean, "corpsecret=") {
		return &redactedError{msg: redactQuery(clean), err: err}
	}
	return err
}

// redactQuery cuts the values of access_token and corpsecret parameters
// out of a text.
func redactQuery(s string) string {
	for _, k := range []string{"access_token=", "corpsecret="} {
		for i := 0; ; {
			j := strings.Index(s[i:], k)
			if j < 0 {
				break
			}
			start := i + j + len(k)
			end := start
			for end < len(s) && !strings.ContainsRune("&\" ,;)\n", rune(s[end])) {
				end++
			}
			s = s[:start] + "<redacted>" + s[end:]
			i = start + len("<redacted>")
		}
	}
	return s
}

// secrets lists the values that must never appear in logs or errors.
func (c *Channel) secrets() []string {
	out := []string{c.cfg.Secret, c.cfg.EncodingAESKey, c.cfg.Token}
	if c.tokens != nil {
		out = append(out, c.tokens.current()...)
	}
	return out
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

// tokenSource caches the app's access token: fetched with gettoken,
// reused until refreshBefore its expiry, fetched once for all concurrent
// callers, and dropped when WeCom says it is no longer valid.
type tokenSource struct {
	c *Channel

	mu       sync.Mutex
	token    string
	expires  time.Time
	old      []string      // recently replaced tokens (still redacted)
	inflight chan struct{} // closed when the running fetch ends
	lastErr  error
}

// refreshBefore is how long before its expiry a token is replaced.
func refreshBefore(lifetime time.Duration) time.Duration {
	return min(5*time.Minute, lifetime/5)
}

// get returns a valid token, fetching one when there is none or it is
// about to expire.
func (s *tokenSource) get(ctx context.Context) (string, error) {
	for {
		s.mu.Lock()
		now := s.c.clk.Now()
		if s.token != "" && now.Before(s.expires) {
			t := s.token
			s.mu.Unlock()
			return t, nil
		}
		if s.inflight == nil {
			done := make(chan struct{})
			s.inflight = done
			s.mu.Unlock()
			t, exp, err := s.fetch(ctx)
			s.mu.Lock()
			if err == nil {
				if s.token != "" {
					s.old = append(s.old, s.token)
					if len(s.old) > 4 {
						s.old = s.old[1:]
					}
				}
				s.token, s.expires = t, exp
			}
			s.lastErr = err
			s.inflight = nil
			close(done)
			s.mu.Unlock()
			return t, err
		}
		wait := s.inflight
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// fetch calls gettoken. The returned expiry is already moved forward by
// the refresh margin.
func (s *tokenSource) fetch(ctx context.Context) (string, time.Time, error) {
	c := s.c
	var out struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	q := url.Values{"corpid": {c.cfg.CorpID}, "corpsecret": {c.cfg.Secret}}
	if err := c.callJSON(ctx, "gettoken", http.MethodGet, "/cgi-bin/gettoken", q, nil, &out, false); err != nil {
		return "", time.Time{}, err
	}
	if out.AccessToken == "" || strings.ContainsAny(out.AccessToken, " \t\r\n&#?") {
		return "", time.Time{}, errors.New("wecom: gettoken: the answer has no usable access_token")
	}
	life := time.Duration(out.ExpiresIn) * time.Second
	if life <= 0 || life > 24*time.Hour {
		life = 2 * time.Hour
	}
	exp := c.clk.Now().Add(life - refreshBefore(life))
	c.log.Info("wecom_token_refreshed", "valid_for", life, "refresh_at", exp)
	return out.AccessToken, exp, nil
}

// invalidate drops token when it is still the cached one, so that the
// next get fetches a new one.
func (s *tokenSource) invalidate(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == token {
		s.old = append(s.old, s.token)
		s.token, s.expires = "", time.Time{}
	}
}

// refreshAt is when the cached token should be replaced (zero: none
// cached).
func (s *tokenSource) refreshAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == "" {
		return time.Time{}
	}
	return s.expires
}

// current lists the cached and recently replaced tokens, for redaction.
func (s *tokenSource) current() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{s.token}, s.old...)
}

// appCall makes an API call with the access token, fetching it first and
// once more when WeCom says it expired (40014, 42001).
func (c *Channel) appCall(ctx context.Context, op, path string, body, out any, media bool) error {
	for attempt := 0; ; attempt++ {
		tok, err := c.tokens.get(ctx)
		if err != nil {
			return err
		}
		err = c.callJSON(ctx, op, http.MethodPost, path, url.Values{"access_token": {tok}}, body, out, media)
		var ae *APIError
		if attempt == 0 && errors.As(err, &ae) && tokenRefreshed(ae.Code) {
			c.log.Info("wecom_token_rejected", "op", op, "errcode", ae.Code, "effect", "fetching a new token and retrying once")
			c.tokens.invalidate(tok)
			continue
		}
		return err
	}
}
