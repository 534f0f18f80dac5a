package wecom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/personakit/persona/channel"
)

// streamReply is the plaintext of a passive stream answer.
type streamReply struct {
	MsgType string           `json:"msgtype"`
	Stream  streamReplyState `json:"stream"`
}

type streamReplyState struct {
	ID      string `json:"id"`
	Finish  bool   `json:"finish"`
	Content string `json:"content"`
}

// passiveReply is the encrypted JSON answer to an AI-bot callback.
type passiveReply struct {
	Encrypt      string `json:"encrypt"`
	MsgSignature string `json:"msgsignature"`
	Timestamp    string `json:"timestamp"`
	Nonce        string `json:"nonce"`
}

// serveAIBot handles a decrypted AI-bot callback (ModeAIBot).
func (c *Channel) serveAIBot(w http.ResponseWriter, r *http.Request, sink channel.Sink, plain []byte) {
	m, err := decodeAIBotMessage(plain)
	if err != nil {
		c.reject(w, r, http.StatusBadRequest, "malformed message", err)
		return
	}
	switch m.MsgType {
	case "stream":
		c.serveStreamPoll(w, r, m)
		return
	case "event":
		c.log.Info("wecom_callback_skipped", "reason", "event "+strconv.Quote(m.eventType()))
		w.WriteHeader(http.StatusOK)
		return
	}
	ev, skip := c.aibotEvent(m, plain)
	if skip != "" {
		c.log.Warn("wecom_message_invalid", "msg_id", m.MsgID, "reason", skip,
			"effect", "acknowledged and dropped: redelivery cannot make it valid")
		w.WriteHeader(http.StatusOK)
		return
	}
	responseURL := m.ResponseURL
	if responseURL != "" {
		if err := c.checkResponseURL(responseURL); err != nil {
			c.log.Warn("wecom_response_url_ignored", "msg_id", m.MsgID, "err", err)
			responseURL = ""
		}
	}
	// The stream exists before the sink has the event: a reply may be
	// sent as soon as the event is stored.
	st := c.streams.open(ev.MessageID, ev.Chat, responseURL, c.clk.Now())
	err = sink.HandleEvent(r.Context(), ev)
	c.streams.release(st, err == nil)
	if err != nil {
		c.log.Warn("wecom_event_nacked", "chat", ev.Chat.String(), "message_id", ev.MessageID, "err", err,
			"effect", "answered 503; WeCom retries")
		http.Error(w, "not accepted, retry later", http.StatusServiceUnavailable)
		return
	}
	content, finished := c.streams.poll(st.ID, ev.Chat, c.clk.Now())
	c.writeStream(w, r, st.ID, content, finished)
}

// serveStreamPoll answers a stream refresh with the stream's content.
func (c *Channel) serveStreamPoll(w http.ResponseWriter, r *http.Request, m *aibotMessage) {
	if m.Stream == nil || m.Stream.ID == "" {
		c.log.Warn("wecom_message_invalid", "reason", "stream refresh without stream.id", "effect", "acknowledged and dropped")
		w.WriteHeader(http.StatusOK)
		return
	}
	chat, err := aibotChat(m)
	if err == nil {
		_, err = c.aibotBotID(m)
	}
	if err != nil {
		c.log.Warn("wecom_message_invalid", "reason", "stream refresh: "+err.Error(), "effect", "acknowledged and dropped")
		w.WriteHeader(http.StatusOK)
		return
	}
	content, finished := c.streams.poll(m.Stream.ID, chat, c.clk.Now())
	c.log.Debug("wecom_stream_polled", "stream", m.Stream.ID, "bytes", len(content), "finished", finished)
	c.writeStream(w, r, m.Stream.ID, content, finished)
}

// writeStream answers with the encrypted stream state.
func (c *Channel) writeStream(w http.ResponseWriter, r *http.Request, id, content string, finished bool) {
	plain, err := json.Marshal(streamReply{MsgType: "stream", Stream: streamReplyState{ID: id, Finish: finished, Content: content}})
	if err != nil {
		c.reject(w, r, http.StatusInternalServerError, "encoding the answer", err)
		return
	}
	ts := strconv.FormatInt(c.clk.Now().Unix(), 10)
	nonce := randomNonce()
	enc, sig, err := c.crypt.Seal(plain, ts, nonce)
	if err != nil {
		c.reject(w, r, http.StatusInternalServerError, "encrypting the answer", err)
		return
	}
	body, _ := json.Marshal(passiveReply{Encrypt: enc, MsgSignature: sig, Timestamp: ts, Nonce: nonce})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(body)
}

// randomNonce returns a nonce of 10 digits.
func randomNonce() string {
	h := randomID(8)
	n, _ := strconv.ParseUint(h, 16, 64)
	return fmt.Sprintf("%010d", n%10_000_000_000)
}

// checkResponseURL accepts a response_url only on APIBase's scheme and
// host: it arrives in a message, and the adapter never posts to an
// address a message could choose.
func (c *Channel) checkResponseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("response_url is not a URL")
	}
	base, _ := url.Parse(c.cfg.APIBase)
	if u.Scheme != base.Scheme || !strings.EqualFold(u.Host, base.Host) || u.User != nil {
		return fmt.Errorf("response_url on %s://%s, not on the API host", u.Scheme, u.Host)
	}
	return nil
}

// sendCallback delivers a chunk in ModeAIBot: appended to a stream that
// WeCom's polls show, or posted to a response_url.
func (c *Channel) sendCallback(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	if len(out.Media) > 0 {
		return channel.Receipt{}, fmt.Errorf("wecom: an AI bot's passive answers carry text only: %w", channel.ErrMediaInvalid)
	}
	if e, ok := c.sent.attempt(out.IdempotencyKey); ok {
		c.log.Warn("wecom_delivery_assumed", "chat", out.Chat.String(),
			"detail", "an earlier post of this chunk to a response_url got no answer; not sending it again")
		return channel.Receipt{MessageIDs: []string{e.reqID}}, nil
	}
	for attempt := 0; attempt < 2; attempt++ {
		now := c.clk.Now()
		rt := c.streams.target(out, now)
		if rt.st != nil {
			i, err := c.streams.appendChunk(rt.st, out.IdempotencyKey, out.Text, now)
			if errors.Is(err, errStreamFinished) {
				continue // finished meanwhile: route again
			}
			return channel.Receipt{MessageIDs: []string{rt.st.chunkID(i)}, Time: now}, nil
		}
		if rt.url != nil {
			return c.postResponseURL(ctx, rt.url, out)
		}
		break
	}
	return channel.Receipt{}, &channel.RejectedError{Code: "no_reply_path",
		Reason: fmt.Sprintf("no open stream and no unused response_url in %s (an AI bot in callback mode only answers messages)", out.Chat)}
}

// postResponseURL sends a chunk as a markdown message through st's
// response_url (usable once).
func (c *Channel) postResponseURL(ctx context.Context, st *stream, out channel.Outgoing) (channel.Receipt, error) {
	raw, ok := c.streams.takeURL(st)
	if !ok {
		return channel.Receipt{}, &channel.RejectedError{Code: "no_reply_path", Reason: "the response_url was used meanwhile"}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return channel.Receipt{}, &channel.RejectedError{Code: "bad_response_url", Reason: "response_url is not a URL"}
	}
	id := "response-" + st.ID
	body := map[string]any{"msgtype": "markdown", "markdown": map[string]string{"content": out.Text}}
	err = c.callURL(ctx, "aibot/response", http.MethodPost, u.String(), body, nil, false)
	if err != nil {
		if maybeSent(err) {
			c.sent.unsure(out.IdempotencyKey, sentEntry{kind: "response_url", reqID: id, chat: out.Chat})
		}
		return channel.Receipt{}, err
	}
	return channel.Receipt{MessageIDs: []string{id}, Time: c.clk.Now()}, nil
}
