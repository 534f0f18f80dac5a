package qqbot

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
)

var _ http.Handler = (*Channel)(nil)

// ServeHTTP is the webhook endpoint (ModeWebhook): mount it at the
// callback URL set in the QQ bot console (HTTPS on port 80, 443, 8080 or
// 8443, usually behind a reverse proxy).
//
// Every request must carry a valid Ed25519 signature of
// X-Signature-Timestamp ‖ body in X-Signature-Ed25519, made with the key
// derived from the bot secret (see the package doc). It answers, in this
// order:
//   - 404 when the Channel is in gateway mode; 405 for anything but POST;
//   - 413 when the body exceeds Config.MaxBodyBytes;
//   - 401 when the signature is missing or wrong;
//   - 400 for a body that is not a payload (no integer op);
//   - op 13 (callback URL validation): 200 with {"plain_token",
//     "signature"}, the signature over event_ts ‖ plain_token;
//   - op 1 (heartbeat): 200 {"op":11,"d":<d>};
//   - op 0 (dispatch) while Run is not active: 503 {"op":12,"d":1};
//   - op 0 whose event is unsupported or invalid (logged): 200
//     {"op":12,"d":0}, since redelivery would not change it;
//   - op 0 once sink.HandleEvent accepted the event: 200 {"op":12,"d":0};
//     refused: 503 {"op":12,"d":1}, so the platform delivers it again;
//   - any other op: logged, 200 {"op":12,"d":0}.
//
// Nothing happens before the answer but recording the message as a reply
// target; every refusal is logged, never with a credential.
func (c *Channel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Mode != ModeWebhook {
		http.Error(w, "qq webhook mode is not enabled", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	limit := c.cfg.MaxBodyBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			c.log.Warn("qq_webhook_rejected", "status", http.StatusRequestEntityTooLarge, "reason", "body over the limit", "limit", limit)
			http.Error(w, "body larger than "+strconv.FormatInt(limit, 10)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		c.log.Warn("qq_webhook_rejected", "status", http.StatusBadRequest, "reason", "reading the body", "err", err)
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	if !verifySignature(c.pub, r.Header.Get(HeaderSignature), r.Header.Get(HeaderTimestamp), body) {
		c.log.Warn("qq_webhook_rejected", "status", http.StatusUnauthorized, "reason", "missing or wrong signature", "remote", r.RemoteAddr)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	p, err := decodePayload(body)
	if err != nil {
		c.log.Warn("qq_webhook_rejected", "status", http.StatusBadRequest, "reason", err.Error(), "bytes", len(body))
		http.Error(w, "malformed payload", http.StatusBadRequest)
		return
	}
	switch p.Op {
	case opCallbackVerify:
		var v qqValidation
		if p.D == nil || json.Unmarshal(p.D, &v) != nil || v.PlainToken == "" || v.EventTS == "" {
			c.log.Warn("qq_webhook_rejected", "status", http.StatusBadRequest, "reason", "validation without plain_token or event_ts")
			http.Error(w, "malformed validation", http.StatusBadRequest)
			return
		}
		c.log.Info("qq_webhook_validated")
		writeJSON(w, http.StatusOK, map[string]string{"plain_token": v.PlainToken, "signature": validationSignature(c.key, v.EventTS, v.PlainToken)})
	case opHeartbeat:
		var seq int64
		if n, ok := jsonInt(p.D); ok && n >= 0 {
			seq = n
		}
		writeJSON(w, http.StatusOK, map[string]int64{"op": opHeartbeatAck, "d": seq})
	case opDispatch:
		c.webhookDispatch(w, r, p)
	default:
		c.log.Warn("qq_webhook_dropped", "reason", "unknown op "+strconv.Itoa(p.Op))
		writeAck(w, true)
	}
}

func (c *Channel) webhookDispatch(w http.ResponseWriter, r *http.Request, p payload) {
	sinkp := c.active.Load()
	if sinkp == nil {
		c.log.Warn("qq_webhook_rejected", "status", http.StatusServiceUnavailable, "reason", "Run is not active")
		writeAck(w, false)
		return
	}
	d := normalize(c.identity(), p.T, p.ID, p.D, c.clk.Now())
	if d.skip != "" {
		if d.invalid {
			c.log.Warn("qq_event_invalid", "event_id", truncate(p.ID, 80), "reason", d.skip,
				"effect", "acknowledged and dropped: redelivery cannot make it valid")
		} else {
			c.log.Debug("qq_event_skipped", "event_id", truncate(p.ID, 80), "reason", d.skip)
		}
		writeAck(w, true)
		return
	}
	c.rememberInbound(d.ref, false) // repliable as soon as the pipeline has it
	if err := (*sinkp).HandleEvent(r.Context(), d.ev); err != nil {
		c.log.Warn("qq_event_nacked", "chat", d.ev.Chat.String(), "message_id", d.ev.MessageID, "err", err,
			"effect", "answered 503; the platform delivers it again")
		writeAck(w, false)
		return
	}
	if d.ref != nil {
		c.stMu.Lock()
		c.saveLocked("reply target")
		c.stMu.Unlock()
	}
	writeAck(w, true)
}

// writeAck answers a dispatch: {"op":12,"d":0} with 200, or d 1 (retry)
// with 503.
func writeAck(w http.ResponseWriter, ok bool) {
	if ok {
		writeJSON(w, http.StatusOK, map[string]int{"op": opCallbackAck, "d": 0})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]int{"op": opCallbackAck, "d": 1})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}
