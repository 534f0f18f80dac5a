package telegram

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// ServeHTTP is the webhook endpoint (ModeWebhook). Mount it on your HTTPS
// server at the path of WebhookConfig.URL, or set WebhookConfig.Addr to
// let Run serve it.
//
// It answers, in this order:
//   - 404 when the Channel is in polling mode;
//   - 405 for anything but POST;
//   - 401 when X-Telegram-Bot-Api-Secret-Token does not match
//     WebhookConfig.SecretToken (compared in constant time);
//   - 503 while Run is not active (Telegram retries later);
//   - 413 when the body exceeds WebhookConfig.MaxBodyBytes;
//   - 400 for a body that is not an Update (no update_id that is a
//     non-negative integer);
//   - 200 for an update that yields no event (unsupported type, channel
//     post, service message) and for an invalid one (a field of the wrong
//     type, an id out of the Bot API's range; logged as a warning,
//     telegram_update_invalid): redelivering it would not change that;
//   - 200 once sink.HandleEvent accepted every event of the update, else
//     503 so that Telegram delivers it again.
//
// Nothing else happens before the answer; every rejection is logged.
func (c *Channel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Mode != ModeWebhook {
		http.Error(w, "telegram webhook mode is not enabled", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !c.secretOK(r.Header.Get(SecretTokenHeader)) {
		c.log.Warn("telegram_webhook_rejected", "status", http.StatusUnauthorized, "reason", "missing or wrong secret token", "remote", r.RemoteAddr)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	run := c.active.Load()
	if run == nil {
		c.log.Warn("telegram_webhook_rejected", "status", http.StatusServiceUnavailable, "reason", "Run is not active")
		http.Error(w, "not running", http.StatusServiceUnavailable)
		return
	}
	limit := c.cfg.Webhook.MaxBodyBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			c.log.Warn("telegram_webhook_rejected", "status", http.StatusRequestEntityTooLarge, "reason", "body over the limit", "limit", limit)
			http.Error(w, "update body larger than "+strconv.FormatInt(limit, 10)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		c.log.Warn("telegram_webhook_rejected", "status", http.StatusBadRequest, "reason", "reading body", "err", err)
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	d, err := run.bot.decodeUpdate(body, c.clk.Now())
	if err != nil {
		c.log.Warn("telegram_webhook_rejected", "status", http.StatusBadRequest, "reason", "malformed update", "err", err)
		http.Error(w, "malformed update: "+err.Error(), http.StatusBadRequest)
		return
	}
	c.logSkip(d)
	c.rememberUsers(d.users)
	for _, ev := range d.events {
		if err := run.sink.HandleEvent(r.Context(), ev); err != nil {
			c.log.Warn("telegram_event_nacked", "update_id", d.updateID, "chat", ev.Chat.String(),
				"message_id", ev.MessageID, "err", err, "effect", "answered 503; Telegram redelivers")
			http.Error(w, "not accepted, retry later", http.StatusServiceUnavailable)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// secretOK compares the header with the configured secret in constant
// time (hashing first, so the length is not revealed either).
func (c *Channel) secretOK(got string) bool {
	want := sha256.Sum256([]byte(c.cfg.Webhook.SecretToken))
	have := sha256.Sum256([]byte(got))
	return got != "" && subtle.ConstantTimeCompare(want[:], have[:]) == 1
}

// logSkip logs why an update yields no event: a warning for an invalid
// update, which is acknowledged and dropped, info for an unsupported one.
func (c *Channel) logSkip(d decoded) {
	switch {
	case d.skip == "":
	case d.invalid:
		c.log.Warn("telegram_update_invalid", "update_id", d.updateID, "reason", d.skip,
			"effect", "acknowledged and dropped: redelivery cannot make it valid")
	default:
		c.log.Info("telegram_update_skipped", "update_id", d.updateID, "reason", d.skip)
	}
}
