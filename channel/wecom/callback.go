package wecom

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
)

// ServeHTTP is the callback URL of ModeApp and ModeAIBot (404 in
// ModeAIBotWS). Mount it at the URL configured in the admin console, or
// let the reference bot serve it.
//
// GET is the URL verification: msg_signature, timestamp, nonce and echostr
// are checked and echostr is decrypted; the answer is its plaintext.
//
// POST is a message or event. It answers, in this order:
//   - 503 while Run is not active (WeCom retries);
//   - 413 when the body exceeds Config.MaxBodyBytes;
//   - 400 without msg_signature, timestamp or nonce, or when the body has
//     no ciphertext (XML <Encrypt> or JSON "encrypt");
//   - 401 when the signature does not match, or the timestamp is further
//     than Config.ReplayWindow from the clock (a replay);
//   - 403 when the ciphertext does not decrypt: bad base64, truncated,
//     bad padding, a malformed plaintext or the wrong receiver id;
//   - 400 when the plaintext is not valid UTF-8 or not well-formed XML or
//     JSON;
//   - 200 (empty) for what yields no event: an event type, an unknown
//     message type, a message with a missing or invalid field (logged as a
//     warning; redelivery would not make it valid);
//   - for a message: 503 when Sink.HandleEvent refused it (WeCom retries),
//     else 200 — empty for an app, the encrypted passive stream answer for
//     an AI bot; an AI bot's stream refresh gets the stream's current
//     content.
//
// Nothing reaches the sink before the checks pass; every refusal is
// logged without the body.
func (c *Channel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.crypt == nil {
		http.Error(w, "wecom callbacks are not used in mode "+string(c.cfg.Mode), http.StatusNotFound)
		return
	}
	switch r.Method {
	case http.MethodGet:
		c.serveVerify(w, r)
	case http.MethodPost:
		c.serveCallback(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// reject logs a refused callback and answers it.
func (c *Channel) reject(w http.ResponseWriter, r *http.Request, status int, reason string, err error) {
	args := []any{"status", status, "reason", reason, "remote", r.RemoteAddr}
	if err != nil {
		args = append(args, "err", err)
	}
	c.log.Warn("wecom_callback_rejected", args...)
	http.Error(w, http.StatusText(status), status)
}

// cryptoStatus maps a Crypter error to its answer.
func cryptoStatus(err error) (int, string) {
	switch {
	case errors.Is(err, ErrSignature):
		return http.StatusUnauthorized, "signature mismatch"
	case errors.Is(err, ErrReceiver):
		return http.StatusForbidden, "wrong receiver id"
	default:
		return http.StatusForbidden, "ciphertext does not decrypt"
	}
}

// fresh checks a callback timestamp against the replay window.
func (c *Channel) fresh(ts string) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec <= 0 {
		return errors.New("timestamp is not a positive number of seconds")
	}
	d := c.clk.Now().Sub(time.Unix(sec, 0))
	if d > c.cfg.ReplayWindow || d < -c.cfg.ReplayWindow {
		return fmt.Errorf("timestamp is %s away from the clock, beyond the replay window of %s", d.Round(time.Second), c.cfg.ReplayWindow)
	}
	return nil
}

// serveVerify answers the URL verification.
func (c *Channel) serveVerify(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sig, ts, nonce, echo := q.Get("msg_signature"), q.Get("timestamp"), q.Get("nonce"), q.Get("echostr")
	if sig == "" || ts == "" || nonce == "" || echo == "" {
		c.reject(w, r, http.StatusBadRequest, "verification without msg_signature, timestamp, nonce or echostr", nil)
		return
	}
	if err := c.crypt.Verify(sig, ts, nonce, echo); err != nil {
		c.reject(w, r, http.StatusUnauthorized, "verification signature mismatch", nil)
		return
	}
	if err := c.fresh(ts); err != nil {
		c.reject(w, r, http.StatusUnauthorized, "verification replayed", err)
		return
	}
	plain, err := c.crypt.Decrypt(echo)
	if err != nil {
		status, reason := cryptoStatus(err)
		c.reject(w, r, status, "verification: "+reason, err)
		return
	}
	c.log.Info("wecom_url_verified")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(plain)
}

// serveCallback checks, decrypts and dispatches a POSTed callback.
func (c *Channel) serveCallback(w http.ResponseWriter, r *http.Request) {
	run := c.sink.Load()
	if run == nil {
		c.reject(w, r, http.StatusServiceUnavailable, "Run is not active", nil)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			c.reject(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", c.cfg.MaxBodyBytes), nil)
			return
		}
		c.reject(w, r, http.StatusBadRequest, "reading the body", err)
		return
	}
	q := r.URL.Query()
	sig, ts, nonce := q.Get("msg_signature"), q.Get("timestamp"), q.Get("nonce")
	if sig == "" || ts == "" || nonce == "" {
		c.reject(w, r, http.StatusBadRequest, "no msg_signature, timestamp or nonce", nil)
		return
	}
	enc, err := envelopeCiphertext(body)
	if err != nil {
		c.reject(w, r, http.StatusBadRequest, "malformed envelope", err)
		return
	}
	if err := c.crypt.Verify(sig, ts, nonce, enc); err != nil {
		c.reject(w, r, http.StatusUnauthorized, "signature mismatch", nil)
		return
	}
	if err := c.fresh(ts); err != nil {
		c.reject(w, r, http.StatusUnauthorized, "replayed callback", err)
		return
	}
	plain, err := c.crypt.Decrypt(enc)
	if err != nil {
		status, reason := cryptoStatus(err)
		c.reject(w, r, status, reason, err)
		return
	}
	if !utf8.Valid(plain) {
		c.reject(w, r, http.StatusBadRequest, "plaintext is not valid UTF-8", nil)
		return
	}
	if c.cfg.Mode == ModeApp {
		c.serveApp(w, r, run.sink, plain)
		return
	}
	c.serveAIBot(w, r, run.sink, plain)
}

// envelopeCiphertext returns the ciphertext of a callback body: the
// <Encrypt> of an XML envelope, or "encrypt" of a JSON one.
func envelopeCiphertext(body []byte) (string, error) {
	b := bytes.TrimSpace(body)
	var enc string
	switch {
	case len(b) == 0:
		return "", errors.New("empty body")
	case b[0] == '<':
		var x struct {
			XMLName xml.Name `xml:"xml"`
			Encrypt string   `xml:"Encrypt"`
		}
		if err := xml.Unmarshal(b, &x); err != nil {
			return "", fmt.Errorf("XML envelope: %w", err)
		}
		enc = x.Encrypt
	case b[0] == '{':
		var j struct {
			Encrypt string `json:"encrypt"`
		}
		if err := json.Unmarshal(b, &j); err != nil {
			return "", fmt.Errorf("JSON envelope: %w", err)
		}
		enc = j.Encrypt
	default:
		return "", errors.New("neither XML nor JSON")
	}
	if enc == "" {
		return "", errors.New("no ciphertext")
	}
	return enc, nil
}
