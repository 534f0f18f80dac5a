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
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/clock"
)

// ErrUnauthorized is matched (errors.Is) by errors of calls the platform
// refused for the credentials: the token endpoint refusing the AppID and
// Secret, or an OpenAPI call still answering 401 with a fresh token. Run
// returns such an error instead of retrying; a Send that gets one also
// matches channel.ErrOffline.
var ErrUnauthorized = errors.New("qqbot: unauthorized (check AppID and Secret)")

// tokenCodeBadCredentials is the token endpoint's code for a wrong AppID
// or secret [3p: reported by users of the endpoint; not in the official
// docs]. HTTP 401 and 403 count as well.
const tokenCodeBadCredentials = 100016

// tokenSource hands out the access token, cached until shortly before it
// expires and shared by every call. The token is never logged and never
// put in an error.
type tokenSource struct {
	url    string
	appID  string
	secret string
	client *http.Client
	clk    clock.Clock
	before time.Duration
	limit  time.Duration // per-request deadline

	fetchMu sync.Mutex // one fetch at a time; others wait and reuse it
	mu      sync.Mutex
	tok     string
	exp     time.Time
	fetches int
}

// get returns a token that is valid for longer than the refresh margin,
// fetching a new one when needed.
func (ts *tokenSource) get(ctx context.Context) (string, error) {
	if tok, ok := ts.cached(); ok {
		return tok, nil
	}
	ts.fetchMu.Lock()
	defer ts.fetchMu.Unlock()
	if tok, ok := ts.cached(); ok { // another caller fetched it meanwhile
		return tok, nil
	}
	tok, ttl, err := ts.fetch(ctx)
	if err != nil {
		return "", err
	}
	ts.mu.Lock()
	ts.tok, ts.exp = tok, ts.clk.Now().Add(ttl)
	ts.fetches++
	ts.mu.Unlock()
	return tok, nil
}

func (ts *tokenSource) cached() (string, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tok != "" && ts.clk.Now().Before(ts.exp.Add(-ts.before)) {
		return ts.tok, true
	}
	return "", false
}

// invalidate drops tok from the cache (the platform refused it), unless a
// newer token already replaced it.
func (ts *tokenSource) invalidate(tok string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tok == tok {
		ts.tok, ts.exp = "", time.Time{}
	}
}

// tokenResponse is the token endpoint's answer. expires_in is a string in
// the docs' example and may be a number; both are read.
type tokenResponse struct {
	AccessToken string          `json:"access_token"`
	ExpiresIn   json.RawMessage `json:"expires_in"`
	Code        int64           `json:"code"`
	Message     string          `json:"message"`
}

// fetch asks the token endpoint. Errors name the status and code only.
func (ts *tokenSource) fetch(ctx context.Context) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, ts.limit)
	defer cancel()
	body, err := json.Marshal(map[string]string{"appId": ts.appID, "clientSecret": ts.secret})
	if err != nil {
		return "", 0, fmt.Errorf("qqbot: access token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url, bytes.NewReader(body))
	if err != nil {
		return "", 0, fmt.Errorf("qqbot: access token: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("qqbot: access token: %w", ts.scrub(err))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", 0, fmt.Errorf("qqbot: access token: reading the answer: %w", ts.scrub(err))
	}
	var tr tokenResponse
	jerr := json.Unmarshal(data, &tr)
	unauthorized := resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden ||
		(jerr == nil && tr.Code == tokenCodeBadCredentials)
	switch {
	case unauthorized:
		return "", 0, fmt.Errorf("qqbot: access token refused (HTTP %d, code %d): %w", resp.StatusCode, tr.Code, ErrUnauthorized)
	case resp.StatusCode/100 != 2:
		return "", 0, fmt.Errorf("qqbot: access token: HTTP %d (code %d)", resp.StatusCode, tr.Code)
	case jerr != nil:
		return "", 0, fmt.Errorf("qqbot: access token: malformed answer (HTTP %d, %d bytes)", resp.StatusCode, len(data))
	case tr.AccessToken == "":
		return "", 0, fmt.Errorf("qqbot: access token: no token in the answer (code %d)", tr.Code)
	case strings.ContainsAny(tr.AccessToken, " \t\r\n"):
		return "", 0, errors.New("qqbot: access token: the token contains white space")
	}
	secs, ok := expiresIn(tr.ExpiresIn)
	if !ok {
		return "", 0, errors.New("qqbot: access token: expires_in is missing or not a positive number of seconds")
	}
	return tr.AccessToken, time.Duration(secs) * time.Second, nil
}

// expiresIn reads "7200" or 7200.
func expiresIn(raw json.RawMessage) (int64, bool) {
	s := strings.TrimSpace(string(raw))
	if unq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(unq)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > 10*24*3600 {
		return 0, false
	}
	return n, true
}

// scrub makes sure neither the secret nor the current token appears in
// the text of err; the error keeps matching what it matched.
func (ts *tokenSource) scrub(err error) error {
	if err == nil {
		return nil
	}
	ts.mu.Lock()
	tok := ts.tok
	ts.mu.Unlock()
	msg := err.Error()
	out := msg
	for _, s := range []string{ts.secret, tok} {
		if s != "" {
			out = strings.ReplaceAll(out, s, "<redacted>")
		}
	}
	if out == msg {
		return err
	}
	return &redactedError{msg: out, err: err}
}

// redactedError is an error whose text had a credential in it. It has no
// Unwrap, so the original text cannot be reached; Is consults the
// original.
type redactedError struct {
	msg string
	err error
}

// Error is the text with the credentials cut out.
func (e *redactedError) Error() string { return e.msg }

// Is reports whether the original error matches target.
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }
