package feishu

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// ServeHTTP is the event callback endpoint (ModeWebhook): mount it at the
// request URL configured in the developer console (Events & Callbacks →
// Event Configuration), behind an HTTPS front end.
//
// It answers, in this order:
//   - 404 when the Channel is in long-connection mode;
//   - 405 for anything but POST;
//   - 413 when the body exceeds Config.MaxBodyBytes;
//   - 401 when an Encrypt Key is configured and a signed request has a
//     X-Lark-Request-Timestamp outside Config.ReplayWindow (5 min by
//     default, either way) or a wrong X-Lark-Signature; when the body is
//     not encrypted or cannot be decrypted (not base64, truncated, bad
//     padding); when an encrypted body arrives while no Encrypt Key is
//     configured; and, with an Encrypt Key, for every unsigned request
//     but a URL verification with the right token (as the SDKs allow):
//     whatever the decrypted body (undecryptable, not JSON, not UTF-8, an
//     event, a wrong token), the answer is the same 401 with the same
//     body, so that it reveals nothing of the plaintext (the reason is
//     logged only);
//   - 400 for a body that is not a JSON callback;
//   - 403 when the verification token (of the URL verification or the
//     event header) is not Config.VerificationToken;
//   - 200 with {"challenge": …} for the URL verification (also while Run
//     is not active);
//   - 503 while Run is not active (Feishu retries later);
//   - 200 for an event that yields no message (another event type, a
//     legacy schema 1.0 event, an invalid message: logged; redelivery
//     would not change it);
//   - 200 once Sink.HandleEvent accepted the message, else 500 so that
//     Feishu delivers it again (after 15 s, 5 min, 1 h and 6 h).
//
// Nothing else happens before the answer; every refusal is logged. The
// same event delivered twice (a retry) becomes the same Event, whose key
// is built from the message id, so the pipeline enqueues it once.
func (c *Channel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Mode != ModeWebhook {
		http.Error(w, "feishu webhook mode is not enabled", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	reject := func(status int, reason string, attrs ...any) {
		c.log.Warn("feishu_callback_rejected", append([]any{"status", status, "reason", reason, "remote", r.RemoteAddr}, attrs...)...)
		text := http.StatusText(status)
		if status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge {
			text = reason
		}
		http.Error(w, text, status)
	}
	limit := c.cfg.MaxBodyBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			reject(http.StatusRequestEntityTooLarge, "body larger than "+strconv.FormatInt(limit, 10)+" bytes")
			return
		}
		reject(http.StatusBadRequest, "cannot read the body", "err", err)
		return
	}
	key := c.cfg.EncryptKey
	signed := r.Header.Get(HeaderSignature) != ""
	if key != "" && signed {
		ts := r.Header.Get(HeaderRequestTimestamp)
		if !c.fresh(ts) {
			reject(http.StatusUnauthorized, "timestamp outside the replay window", "timestamp", ts, "window", c.cfg.ReplayWindow.String())
			return
		}
		want := Signature(ts, r.Header.Get(HeaderRequestNonce), key, body)
		if !signatureOK(strings.ToLower(r.Header.Get(HeaderSignature)), want) {
			reject(http.StatusUnauthorized, "wrong signature")
			return
		}
	}
	var cb callbackBody
	if err := json.Unmarshal(body, &cb); err != nil {
		reject(http.StatusBadRequest, "malformed JSON body")
		return
	}
	// An unsigned request (with an Encrypt Key configured) is decrypted
	// only so that the URL verification can be answered: every refusal
	// from the decryption on is the same 401 with the same body, whatever
	// its reason (logged only), so that the answers are no padding or
	// format oracle on the ciphertext.
	unsigned := key != "" && !signed
	refuse := func(status int, reason string, attrs ...any) {
		if unsigned {
			status = http.StatusUnauthorized
			attrs = append(attrs, "signed", false)
		}
		reject(status, reason, attrs...)
	}
	plain := body
	switch {
	case cb.Encrypt != nil && key == "":
		reject(http.StatusUnauthorized, "encrypted callback but no EncryptKey configured",
			"hint", "set the Encrypt Key of the event subscription in the adapter's config")
		return
	case cb.Encrypt != nil:
		if plain, err = Decrypt(*cb.Encrypt, key); err != nil {
			refuse(http.StatusUnauthorized, "cannot decrypt", "err", err)
			return
		}
		cb = callbackBody{}
		if err := json.Unmarshal(plain, &cb); err != nil || cb.Encrypt != nil {
			refuse(http.StatusBadRequest, "malformed decrypted body")
			return
		}
	case key != "":
		reject(http.StatusUnauthorized, "unencrypted callback while an EncryptKey is configured")
		return
	}
	if !utf8.Valid(plain) {
		refuse(http.StatusBadRequest, "body is not UTF-8")
		return
	}
	if cb.Type == typeURLVerification {
		if !c.tokenOK(cb.Token) {
			refuse(http.StatusForbidden, "wrong verification token in the URL verification")
			return
		}
		c.log.Info("feishu_url_verified", "remote", r.RemoteAddr)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"challenge": cb.Challenge})
		return
	}
	if unsigned {
		refuse(http.StatusUnauthorized, "event callback without a signature")
		return
	}
	if !c.tokenOK(cb.token()) {
		reject(http.StatusForbidden, "wrong verification token")
		return
	}
	run := c.active.Load()
	if run == nil {
		reject(http.StatusServiceUnavailable, "Run is not active")
		return
	}
	d, err := decodeEvent(&cb, plain, run.botID, c.cfg.AppID, c.clk.Now())
	if err != nil {
		reject(http.StatusBadRequest, "malformed event", "err", err)
		return
	}
	if err := c.deliver(r.Context(), run.sink, d); err != nil {
		http.Error(w, "not accepted, retry later", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"msg":"success"}`)
}

// deliver hands a decoded payload's events to the sink (after learning
// from it and logging why it has none). The error is the sink's: the
// caller NACKs.
func (c *Channel) deliver(ctx context.Context, sink channel.Sink, d decoded) error {
	switch {
	case d.skip == "":
	case d.invalid:
		c.log.Warn("feishu_event_invalid", "event_id", d.eventID, "event_type", d.eventType, "reason", d.skip,
			"effect", "acknowledged and dropped: redelivery cannot make it valid")
	default:
		c.log.Info("feishu_event_skipped", "event_id", d.eventID, "event_type", d.eventType, "reason", d.skip)
	}
	for i := range d.events {
		c.enrich(&d.events[i])
	}
	c.learn(d)
	for _, ev := range d.events {
		if err := sink.HandleEvent(ctx, ev); err != nil {
			c.log.Warn("feishu_event_nacked", "event_id", d.eventID, "chat", ev.Chat.String(), "message_id", ev.MessageID,
				"err", err, "effect", "not acknowledged; Feishu delivers it again")
			return err
		}
	}
	return nil
}

// fresh reports whether a callback timestamp (Unix seconds) is within
// the replay window of the clock.
func (c *Channel) fresh(ts string) bool {
	sec, err := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
	if err != nil || sec <= 0 || sec > 1<<40 {
		return false
	}
	d := c.clk.Now().Sub(time.Unix(sec, 0))
	return d <= c.cfg.ReplayWindow && d >= -c.cfg.ReplayWindow
}

// tokenOK compares a verification token with the configured one in
// constant time (hashing first, so the length is not revealed either).
// Without a configured token (long-connection mode) every token passes.
func (c *Channel) tokenOK(got string) bool {
	if c.cfg.VerificationToken == "" {
		return true
	}
	want := sha256.Sum256([]byte(c.cfg.VerificationToken))
	have := sha256.Sum256([]byte(got))
	return got != "" && subtle.ConstantTimeCompare(want[:], have[:]) == 1
}
