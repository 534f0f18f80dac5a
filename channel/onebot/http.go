package onebot

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/personakit/persona/channel"
)

// Sign returns the X-Signature header value OneBot sends with an HTTP POST
// event: "sha1=" and the hex HMAC-SHA1 of the raw body keyed with secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write(body)
	return "sha1=" + hex.EncodeToString(m.Sum(nil))
}

// VerifySignature reports whether header is the X-Signature of body under
// secret (constant-time; the hex may be upper or lower case).
func VerifySignature(secret string, body []byte, header string) bool {
	got, ok := strings.CutPrefix(strings.TrimSpace(header), "sha1=")
	if !ok {
		return false
	}
	sig, err := hex.DecodeString(got)
	if err != nil {
		return false
	}
	m := hmac.New(sha1.New, []byte(secret))
	m.Write(body)
	return hmac.Equal(sig, m.Sum(nil))
}

// serveEvents is the HTTP POST event receiver (ModeHTTP). It answers 204
// once the event is handled (for a message or notice: once
// sink.HandleEvent returned nil) and 503 when the sink refused it, so the
// implementation may retry; 400 for a body that is not a JSON event, 401/403
// for a missing/wrong signature, 413 for a body over ReadLimit. Unknown
// events and invalid ones (an id out of range, another account) are logged
// and answered 204 (retrying cannot help).
func (c *Channel) serveEvents(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "onebot: POST events here", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.cfg.ReadLimit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			c.log.Error("body_too_large", "remote", r.RemoteAddr, "limit", c.cfg.ReadLimit)
			http.Error(w, "onebot: event body too large", http.StatusRequestEntityTooLarge)
			return
		}
		c.log.Warn("read_failed", "remote", r.RemoteAddr, "err", err)
		http.Error(w, "onebot: reading the body failed", http.StatusBadRequest)
		return
	}
	if c.cfg.Secret != "" {
		sig := r.Header.Get("X-Signature")
		switch {
		case sig == "":
			c.log.Warn("bad_signature", "remote", r.RemoteAddr, "reason", "no X-Signature")
			http.Error(w, "onebot: X-Signature required", http.StatusUnauthorized)
			return
		case !VerifySignature(c.cfg.Secret, body, sig):
			c.log.Warn("bad_signature", "remote", r.RemoteAddr, "reason", "X-Signature does not match the body")
			http.Error(w, "onebot: bad X-Signature", http.StatusForbidden)
			return
		}
	}
	if id := strings.TrimSpace(r.Header.Get("X-Self-ID")); id != "" {
		if n, err := strconv.ParseInt(id, 10, 64); err == nil {
			id = strconv.FormatInt(n, 10)
		}
		if known := c.self(); known != "" && known != id {
			c.log.Warn("self_id_mismatch", "remote", r.RemoteAddr, "x_self_id", id, "bot_id", known)
			http.Error(w, "onebot: this endpoint serves another account", http.StatusForbidden)
			return
		}
	}
	c.mu.Lock()
	sink := c.sink
	if !c.running || sink == nil {
		c.mu.Unlock()
		http.Error(w, "onebot: the adapter is not running", http.StatusServiceUnavailable)
		return
	}
	c.wg.Add(1) // Run waits for events in flight before it returns
	c.mu.Unlock()
	defer c.wg.Done()
	ev, err := c.decodeEvent(body, channel.SourceLive)
	switch {
	case errors.Is(err, errMalformed):
		c.log.Warn("malformed_event", "via", "http", "remote", r.RemoteAddr, "bytes", len(body), "err", err)
		http.Error(w, "onebot: the body is not a JSON event", http.StatusBadRequest)
		return
	case errors.Is(err, errIgnored):
		w.WriteHeader(http.StatusNoContent)
		return
	case err != nil: // acknowledged: redelivering it cannot make it valid
		c.log.Warn("invalid_event", "via", "http", "remote", r.RemoteAddr, "err", err)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err := sink.HandleEvent(r.Context(), ev); err != nil {
		if errors.Is(err, channel.ErrInvalidEvent) {
			c.log.Error("event_rejected", "key", ev.Key(), "err", err)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		c.log.Warn("event_nacked", "via", "http", "key", ev.Key(), "err", err)
		http.Error(w, "onebot: the event could not be stored; retry", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// runHTTP bootstraps against the HTTP API (get_login_info, get_status) with
// backoff, and again after a call found the API unreachable, until ctx
// ends.
func (c *Channel) runHTTP(ctx context.Context) {
	attempt := 0
	down := c.httpDownCh()
	for ctx.Err() == nil {
		select { // a failure signalled before this bootstrap is stale
		case <-down:
		default:
		}
		err := c.bootstrapHTTP(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			attempt = 0
			select {
			case <-ctx.Done():
				return
			case <-down:
			}
		} else {
			c.log.Warn("bootstrap_failed", "url", c.cfg.URL, "err", err)
		}
		attempt++
		if !c.pause(ctx, c.backoff(attempt), slog.LevelInfo, "reconnect_scheduled", "attempt", attempt) {
			return
		}
	}
}

func (c *Channel) httpDownCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.httpDown
}

func (c *Channel) bootstrapHTTP(ctx context.Context) error {
	if err := c.loadLoginInfo(ctx); err != nil {
		return err
	}
	c.loadStatus(ctx)
	c.mu.Lock()
	c.up = true
	c.bootstrap = true
	c.mu.Unlock()
	c.report("connected")
	return nil
}

// httpUnreachable marks the HTTP API down and wakes the bootstrap loop.
func (c *Channel) httpUnreachable(err error) {
	c.mu.Lock()
	wasUp := c.up
	c.up = false
	down := c.httpDown
	c.mu.Unlock()
	if wasUp {
		c.log.Warn("api_unreachable", "url", c.cfg.URL, "err", err)
		c.report("HTTP API unreachable")
	}
	if down != nil {
		select {
		case down <- struct{}{}:
		default:
		}
	}
}

// httpCall POSTs one action to the HTTP API.
func (c *Channel) httpCall(ctx context.Context, action string, params any, timeout time.Duration) (response, error) {
	if params == nil {
		params = map[string]any{}
	}
	body, err := json.Marshal(params)
	if err != nil {
		return response{}, fmt.Errorf("onebot: %s: %w", action, err)
	}
	ctx, cancel := c.withTimeout(ctx, timeout)
	defer cancel()
	u := strings.TrimRight(c.cfg.URL, "/") + "/" + action
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return response{}, fmt.Errorf("onebot: %s: %w", action, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.cfg.AccessToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.AccessToken)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, ErrTimeout):
			c.log.Warn("call_timeout", "action", action, "timeout", timeout)
			return response{}, fmt.Errorf("onebot: %s: %w", action, ErrTimeout)
		case ctx.Err() != nil:
			return response{}, fmt.Errorf("onebot: %s: %w", action, cause)
		case errors.Is(err, syscall.ECONNREFUSED):
			c.httpUnreachable(err)
			return response{}, fmt.Errorf("onebot: %s: %w: %w", action, channel.ErrOffline, err)
		}
		return response{}, fmt.Errorf("onebot: %s: %w", action, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.ReadLimit+1))
	if err != nil {
		return response{}, fmt.Errorf("onebot: %s: reading the response: %w", action, err)
	}
	if int64(len(b)) > c.cfg.ReadLimit {
		c.log.Error("body_too_large", "action", action, "limit", c.cfg.ReadLimit)
		return response{}, fmt.Errorf("onebot: %s: response over the %d-byte read limit", action, c.cfg.ReadLimit)
	}
	if resp.StatusCode != http.StatusOK {
		e := &APIError{Action: action, HTTPStatus: resp.StatusCode, Retcode: -1}
		switch resp.StatusCode {
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusNotAcceptable:
			e.Retcode = 1000 + int64(resp.StatusCode)
		}
		var r response
		if json.Unmarshal(b, &r) == nil {
			e.Msg = firstNonEmpty(string(r.Wording), string(r.Msg), string(r.Message))
		}
		c.log.Warn("api_failed", "action", action, "http_status", resp.StatusCode)
		return response{}, classify(e)
	}
	var r response
	if err := json.Unmarshal(b, &r); err != nil {
		return response{}, fmt.Errorf("onebot: %s: malformed response: %w", action, err)
	}
	return r, nil
}
