package qqbottest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Delivery is one webhook POST attempt.
type Delivery struct {
	EventID string
	// Status is the HTTP status of the answer (0 when the request failed).
	Status int
	// Ack is d of the {"op":12,"d":…} answer (-1 when the answer had none).
	Ack int
	Err string
}

// ErrNotAcknowledged is wrapped by the error of a webhook delivery the
// bot did not acknowledge (non-2xx, or {"op":12,"d":1}); the event stays
// queued.
var ErrNotAcknowledged = errors.New("qqbottest: webhook delivery not acknowledged")

// SetWebhook makes the platform post events to url (signed, as the
// platform does) instead of the gateway; "" goes back to the gateway.
func (s *Server) SetWebhook(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hookURL = url
}

// Deliveries lists the webhook POST attempts.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// PendingWebhook is how many events wait for a successful delivery.
func (s *Server) PendingWebhook() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hookQueue)
}

// Sign returns the X-Signature-Ed25519 value the platform sends for body
// at timestamp: hex of the Ed25519 signature over timestamp ‖ body.
func (s *Server) Sign(timestamp string, body []byte) string {
	msg := append([]byte(timestamp), body...)
	return hex.EncodeToString(ed25519.Sign(s.key, msg))
}

// FlushWebhook posts the queued events in order, stopping at the first
// one the bot does not acknowledge (its error is returned).
func (s *Server) FlushWebhook(ctx context.Context) error {
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	for {
		s.mu.Lock()
		if len(s.hookQueue) == 0 || s.hookURL == "" {
			s.mu.Unlock()
			return nil
		}
		ev, url := s.hookQueue[0], s.hookURL
		s.mu.Unlock()
		body := marshal(map[string]any{"op": 0, "id": ev.id, "s": ev.seq, "t": ev.t, "d": ev.d})
		d, err := s.post(ctx, url, body)
		d.EventID = ev.id
		s.mu.Lock()
		s.deliveries = append(s.deliveries, d)
		if err == nil && len(s.hookQueue) > 0 && s.hookQueue[0].id == ev.id {
			s.hookQueue = s.hookQueue[1:]
		}
		s.notifyLocked()
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// post sends one signed body and reads the acknowledgement.
func (s *Server) post(ctx context.Context, url string, body []byte) (Delivery, error) {
	resp, err := s.PostWebhook(ctx, url, body, nil)
	if err != nil {
		return Delivery{Ack: -1, Err: err.Error()}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	d := Delivery{Status: resp.StatusCode, Ack: -1}
	var ack struct {
		Op int `json:"op"`
		D  int `json:"d"`
	}
	if json.Unmarshal(data, &ack) == nil && ack.Op == 12 {
		d.Ack = ack.D
	}
	if resp.StatusCode/100 != 2 || d.Ack > 0 {
		d.Err = fmt.Sprintf("HTTP %d, ack %d", resp.StatusCode, d.Ack)
		return d, fmt.Errorf("%w: %s", ErrNotAcknowledged, d.Err)
	}
	return d, nil
}

// PostWebhook posts body to url the way the platform does: signed with
// the bot's key at the clock's current Unix time, with X-Bot-Appid,
// X-Signature-Method and User-Agent QQBot-Callback. header, when not nil,
// overrides or removes (empty value) headers after signing, for tests of
// bad requests. The caller closes the response body.
func (s *Server) PostWebhook(ctx context.Context, url string, body []byte, header map[string]string) (*http.Response, error) {
	ts := strconv.FormatInt(s.clk.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "QQBot-Callback")
	req.Header.Set("X-Bot-Appid", s.cfg.AppID)
	req.Header.Set("X-Signature-Method", "Ed25519")
	req.Header.Set("X-Signature-Timestamp", ts)
	req.Header.Set("X-Signature-Ed25519", s.Sign(ts, body))
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return s.hc.Do(req)
}

// ValidateWebhook performs the callback-URL validation (op 13) against
// url and checks the answer's signature over event_ts ‖ plain_token with
// the bot's public key.
func (s *Server) ValidateWebhook(ctx context.Context, url string) error {
	plain := randomHex(10)
	ts := strconv.FormatInt(s.clk.Now().Unix(), 10)
	body := marshal(map[string]any{"op": 13, "d": map[string]string{"plain_token": plain, "event_ts": ts}})
	resp, err := s.PostWebhook(ctx, url, body, nil)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var ans struct {
		PlainToken string `json:"plain_token"`
		Signature  string `json:"signature"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &ans) != nil {
		return fmt.Errorf("qqbottest: validation answered HTTP %d: %q", resp.StatusCode, data)
	}
	sig, err := hex.DecodeString(ans.Signature)
	if ans.PlainToken != plain || err != nil || !ed25519.Verify(s.key.Public().(ed25519.PublicKey), []byte(ts+plain), sig) {
		return fmt.Errorf("qqbottest: validation answer %q does not verify", data)
	}
	return nil
}
