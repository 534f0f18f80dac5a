package feishu_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
	"github.com/personakit/persona/clock"
)

// officialSample is the im.message.receive_v1 example of the event's
// documentation page (open.feishu.cn; the header's token and app_id are
// replaced by the fake app's).
const officialSample = `{"schema":"2.0","header":{"event_id":"5e3702a84e847582be8db7fb73283c02","event_type":"im.message.receive_v1",
 "create_time":"1608725989000","token":"rvaYgkND1GOiu5MM0E1rncYC6PLtF7JV","app_id":"cli_9f5343c580712544","tenant_key":"2ca1d211f64f6438"},
 "event":{"sender":{"sender_id":{"union_id":"on_8ed6aa67826108097d9ee143816345","user_id":"e33ggbyz","open_id":"ou_84aad35d084aa403a838cf73ee18467"},
   "sender_type":"user","tenant_key":"736588c9260f175e"},
  "message":{"message_id":"om_5ce6d572455d361153b7cb51da133945","root_id":"om_5ce6d572455d361153b7cb5xxfsdfsdfdsf",
   "parent_id":"om_5ce6d572455d361153b7cb5xxfsdfsdfdsf","create_time":"1609073151345","chat_id":"oc_5ce6d572455d361153b7xx51da133945",
   "chat_type":"group","message_type":"text","content":"{\"text\":\"test\"}",
   "mentions":[{"key":"@_user_1","id":{"union_id":"on_8ed6aa67826108097d9ee143816345","user_id":"e33ggbyz","open_id":"ou_84aad35d084aa403a838cf73ee18467"},
     "name":"Tom","tenant_key":"736588c9260f175e"}]}}}`

// sampleEvent is the official sample for srv's app, changed by fn (a
// JSON map of the body).
func sampleEvent(t *testing.T, srv *feishutest.Server, fn func(body, header, msg map[string]any)) []byte {
	t.Helper()
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(officialSample), &body))
	header := body["header"].(map[string]any)
	header["token"], header["app_id"] = srv.VerificationToken(), srv.AppID()
	msg := body["event"].(map[string]any)["message"].(map[string]any)
	if fn != nil {
		fn(body, header, msg)
	}
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return b
}

// request builds a callback request as Feishu sends it: encrypted and
// signed with key (when set) at clock time now.
func request(t *testing.T, key string, now time.Time, plain []byte) *http.Request {
	t.Helper()
	body := plain
	if key != "" {
		body, _ = json.Marshal(map[string]string{"encrypt": feishutest.Encrypt(key, plain)})
	}
	r := httptest.NewRequest(http.MethodPost, "/events", bytes.NewReader(body))
	if key != "" {
		ts := strconv.FormatInt(now.Unix(), 10)
		r.Header.Set(feishu.HeaderRequestTimestamp, ts)
		r.Header.Set(feishu.HeaderRequestNonce, "n-1")
		r.Header.Set(feishu.HeaderSignature, feishutest.Sign(ts, "n-1", key, body))
	}
	return r
}

func serve(ch http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	ch.ServeHTTP(w, r)
	return w
}

func TestWebhookURLVerification(t *testing.T) {
	t.Parallel()
	for name, key := range map[string]string{"Plain": "", "Encrypted": "verification key"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newFake(t, feishutest.Config{EncryptKey: key})
			log, buf := newLogger()
			ch := newChannel(t, srv, feishu.ModeWebhook, func(c *feishu.Config) { c.Logger = log })
			// Before Run: the console's check is answered anyway.
			require.NoError(t, srv.VerifyCallback(tctx(t)))
			waitLog(t, buf, "feishu_url_verified")

			plain := []byte(`{"challenge":"ajls384kdjx98XX","token":"` + srv.VerificationToken() + `","type":"url_verification"}`)
			r := request(t, key, time.Now(), plain)
			r.Header.Del(feishu.HeaderSignature) // the check may come unsigned
			w := serve(ch, r)
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			require.JSONEq(t, `{"challenge":"ajls384kdjx98XX"}`, w.Body.String())

			bad := []byte(`{"challenge":"x","token":"wrong","type":"url_verification"}`)
			w = serve(ch, request(t, key, time.Now(), bad))
			require.Equal(t, http.StatusForbidden, w.Code)
			require.NotContains(t, w.Body.String(), "x")
		})
	}
}

func TestWebhookOfficialSample(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	ch := newChannel(t, srv, feishu.ModeWebhook, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)

	w := serve(ch, request(t, "", time.Now(), sampleEvent(t, srv, nil)))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.JSONEq(t, `{"msg":"success"}`, w.Body.String())
	ev := sink.waitEvents(t, 1)[0]
	require.NoError(t, ev.Validate())
	require.Equal(t, channel.Event{
		Platform:  feishu.Platform,
		BotID:     srv.BotID(),
		Kind:      channel.KindMessage,
		Chat:      channel.Chat{Kind: channel.Group, ID: "oc_5ce6d572455d361153b7xx51da133945"},
		MessageID: "om_5ce6d572455d361153b7cb51da133945",
		Time:      time.UnixMilli(1609073151345),
		Sender:    channel.Sender{ID: "ou_84aad35d084aa403a838cf73ee18467"},
		Segments:  []channel.Segment{channel.Quote("om_5ce6d572455d361153b7cb5xxfsdfsdfdsf"), channel.Text("test")},
		Source:    channel.SourceLive,
		Raw:       ev.Raw,
	}, ev)
	require.Contains(t, string(ev.Raw), `"event_id":"5e3702a84e847582be8db7fb73283c02"`)
	require.Equal(t, "feishu/"+srv.BotID()+"/group:oc_5ce6d572455d361153b7xx51da133945/om_5ce6d572455d361153b7cb51da133945", ev.Key())
}

// TestWebhookRejectsBadRequests: every refusal answers the documented
// status, is logged with its reason, and hands nothing to the sink.
func TestWebhookRejectsBadRequests(t *testing.T) {
	t.Parallel()
	const key = "bad request key"
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	keyed := newFake(t, feishutest.Config{EncryptKey: key, Clock: clk})
	plain := newFake(t, feishutest.Config{Clock: clk})
	type setup struct {
		srv *feishutest.Server
		ch  *feishu.Channel
		buf interface{ String() string }
	}
	start := func(srv *feishutest.Server, mode feishu.Mode) setup {
		log, buf := newLogger()
		ch := newChannel(t, srv, mode, func(c *feishu.Config) {
			c.Logger, c.Clock, c.MaxBodyBytes = log, clk, 4096
			if mode == feishu.ModeWebSocket {
				c.VerificationToken = srv.VerificationToken()
			}
		})
		if mode == feishu.ModeWebhook {
			sink := newRecSink()
			run(t, ch, sink)
			sink.waitOnline(t, true)
		}
		return setup{srv, ch, buf}
	}
	k, p := start(keyed, feishu.ModeWebhook), start(plain, feishu.ModeWebhook)
	now := clk.Now()
	good := func(s setup) []byte { return sampleEvent(t, s.srv, nil) }
	withHeader := func(r *http.Request, name, value string) *http.Request {
		r.Header.Set(name, value)
		return r
	}
	resign := func(r *http.Request, body []byte) *http.Request {
		r.Body, r.ContentLength = http.NoBody, 0
		nr := httptest.NewRequest(http.MethodPost, "/events", bytes.NewReader(body))
		ts, nonce := r.Header.Get(feishu.HeaderRequestTimestamp), r.Header.Get(feishu.HeaderRequestNonce)
		nr.Header.Set(feishu.HeaderRequestTimestamp, ts)
		nr.Header.Set(feishu.HeaderRequestNonce, nonce)
		nr.Header.Set(feishu.HeaderSignature, feishutest.Sign(ts, nonce, key, body))
		return nr
	}
	encrypted := func(plain string) []byte {
		b, _ := json.Marshal(map[string]string{"encrypt": plain})
		return b
	}
	goodEnc := feishutest.Encrypt(key, good(k))
	tests := []struct {
		name   string
		s      setup
		r      *http.Request
		status int
		reason string
	}{
		{"wrong signature", k, withHeader(request(t, key, now, good(k)), feishu.HeaderSignature, strings.Repeat("0", 64)), 401, "wrong signature"},
		{"replayed timestamp", k, request(t, key, now.Add(-5*time.Minute-time.Second), good(k)), 401, "replay window"},
		{"timestamp from the future", k, request(t, key, now.Add(5*time.Minute+time.Second), good(k)), 401, "replay window"},
		{"timestamp not a number", k, withHeader(request(t, key, now, good(k)), feishu.HeaderRequestTimestamp, "yesterday"), 401, "replay window"},
		{"bad padding", k, resign(request(t, key, now, nil), encrypted(feishutest.EncryptWithIV("another key", make([]byte, 16), good(k)))), 401, "cannot decrypt"},
		{"truncated ciphertext", k, resign(request(t, key, now, nil), encrypted(goodEnc[:len(goodEnc)-8])), 401, "cannot decrypt"},
		{"not base64", k, resign(request(t, key, now, nil), encrypted("%%%%")), 401, "cannot decrypt"},
		{"unencrypted body", k, resign(request(t, key, now, nil), good(k)), 401, "unencrypted callback"},
		{"unsigned event", k, func() *http.Request {
			r := request(t, key, now, good(k))
			r.Header.Del(feishu.HeaderSignature)
			return r
		}(), 401, "without a signature"},
		{"wrong token, encrypted", k, request(t, key, now, sampleEvent(t, k.srv, func(_, h, _ map[string]any) { h["token"] = "nope" })), 403, "wrong verification token"},
		{"malformed JSON, signed", k, resign(request(t, key, now, nil), []byte(`{"encrypt":`)), 400, "malformed JSON"},
		{"malformed decrypted body", k, request(t, key, now, []byte(`not json`)), 400, "malformed decrypted body"},
		{"oversize", k, request(t, key, now, bytes.Repeat([]byte("x"), 5000)), 413, "body larger"},
		{"GET", k, httptest.NewRequest(http.MethodGet, "/events", nil), 405, ""},
		{"wrong token", p, request(t, "", now, sampleEvent(t, p.srv, func(_, h, _ map[string]any) { h["token"] = "nope" })), 403, "wrong verification token"},
		{"no token", p, request(t, "", now, sampleEvent(t, p.srv, func(_, h, _ map[string]any) { delete(h, "token") })), 403, "wrong verification token"},
		{"encrypted without a key", p, request(t, "", now, encrypted(goodEnc)), 401, "no EncryptKey configured"},
		{"malformed JSON", p, request(t, "", now, []byte(`{"schema":"2.0",`)), 400, "malformed JSON"},
		{"array body", p, request(t, "", now, []byte(`[1,2]`)), 400, "malformed JSON"},
		{"invalid UTF-8", p, request(t, "", now, bytes.Replace(good(p), []byte("Tom"), []byte("T\xffm"), 1)), 400, "not UTF-8"},
		{"no header", p, request(t, "", now, []byte(`{"schema":"2.0","token":"`+p.srv.VerificationToken()+`"}`)), 400, "malformed event"},
		{"header without event", p, request(t, "", now, []byte(`{"schema":"2.0","header":{"token":"`+p.srv.VerificationToken()+`"},"event":null}`)), 200, ""},
		{"websocket-mode handler", start(plain, feishu.ModeWebSocket), request(t, "", now, good(p)), 404, ""},
	}
	for _, tc := range tests {
		w := serve(tc.s.ch, tc.r)
		require.Equal(t, tc.status, w.Code, "%s: %s", tc.name, w.Body.String())
		if tc.reason != "" {
			require.Contains(t, tc.s.buf.String(), tc.reason, tc.name)
			require.Contains(t, tc.s.buf.String(), "feishu_callback_rejected", tc.name)
		}
		require.NotContains(t, w.Body.String(), key, tc.name)
	}
	for _, s := range []setup{k, p} {
		require.NotContains(t, s.buf.String(), key, "the encrypt key is never logged")
		require.NotContains(t, s.buf.String(), s.srv.AppSecret(), "the app secret is never logged")
	}
	// Nothing of it reached a sink: the sinks saw no event at all (the
	// only deliveries were refused before the sink, and "header without
	// event" is an unsupported event type).
	require.Contains(t, p.buf.String(), "feishu_event_skipped")
	require.NotContains(t, k.buf.String(), "feishu_event_nacked")
}

// TestWebhookUnsignedNoOracle: with an Encrypt Key, an unsigned request
// is decrypted only to answer the URL verification; every other outcome
// of the decryption (an event, bad padding, a plaintext that is not JSON
// or not UTF-8, other JSON, a wrong token) gets the very same answer, so
// that trying IV bytes recovers nothing of the plaintext (a padding
// oracle), and the sink sees nothing.
func TestWebhookUnsignedNoOracle(t *testing.T) {
	t.Parallel()
	const key = "oracle key"
	srv := newFake(t, feishutest.Config{EncryptKey: key})
	log, buf := newLogger()
	ch := newChannel(t, srv, feishu.ModeWebhook, func(c *feishu.Config) { c.Logger = log })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)

	unsigned := func(encrypted string) *http.Request {
		body, err := json.Marshal(map[string]string{"encrypt": encrypted})
		require.NoError(t, err)
		r := httptest.NewRequest(http.MethodPost, "/events", bytes.NewReader(body))
		r.Header.Set(feishu.HeaderRequestTimestamp, strconv.FormatInt(time.Now().Unix(), 10))
		r.Header.Set(feishu.HeaderRequestNonce, "n-1")
		return r
	}
	// badPadding is a valid ciphertext whose last plaintext byte (the pad
	// length, 1 to 16) is flipped to one above 32.
	badPadding := func(plain []byte) string {
		raw, err := base64.StdEncoding.DecodeString(feishutest.Encrypt(key, plain))
		require.NoError(t, err)
		raw[len(raw)-aes.BlockSize-1] ^= 0xff
		return base64.StdEncoding.EncodeToString(raw)
	}
	event := sampleEvent(t, srv, nil)
	cases := map[string]string{
		"event":                     feishutest.Encrypt(key, event),
		"corrupted padding":         badPadding(event),
		"valid padding, not JSON":   feishutest.Encrypt(key, []byte("not json at all")),
		"not UTF-8":                 feishutest.Encrypt(key, []byte(`{"type":"url_verification","challenge":"`+"\xff"+`","token":"x"}`)),
		"other JSON":                feishutest.Encrypt(key, []byte(`{"schema":"2.0","type":"event_callback"}`)),
		"nested encrypt":            feishutest.Encrypt(key, []byte(`{"encrypt":"abc"}`)),
		"verification, wrong token": feishutest.Encrypt(key, []byte(`{"challenge":"c1","token":"wrong","type":"url_verification"}`)),
		"truncated":                 feishutest.Encrypt(key, event)[:24],
		"verification, another key": feishutest.Encrypt("another key", []byte(`{"challenge":"c2","token":"`+srv.VerificationToken()+`","type":"url_verification"}`)),
	}
	ref := serve(ch, unsigned(cases["event"]))
	require.Equal(t, http.StatusUnauthorized, ref.Code)
	for name, enc := range cases {
		w := serve(ch, unsigned(enc))
		require.Equal(t, ref.Code, w.Code, name)
		require.Equal(t, ref.Body.Bytes(), w.Body.Bytes(), name)
		require.Equal(t, ref.Header(), w.Header(), name)
	}
	// The scratch attack: all 256 values of the last IV byte of a
	// one-block ciphertext (exactly one of which has valid padding) get
	// one answer.
	raw, err := base64.StdEncoding.DecodeString(feishutest.Encrypt(key, []byte("0123456789abcdef"[:13])))
	require.NoError(t, err)
	raw = raw[:2*aes.BlockSize]
	for b := range 256 {
		raw[aes.BlockSize-1] = byte(b)
		w := serve(ch, unsigned(base64.StdEncoding.EncodeToString(raw)))
		require.Equal(t, ref.Code, w.Code, "IV byte %d", b)
		require.Equal(t, ref.Body.Bytes(), w.Body.Bytes(), "IV byte %d", b)
	}
	// The reasons are told in the log only.
	for _, reason := range []string{"event callback without a signature", "cannot decrypt", "malformed decrypted body", "body is not UTF-8", "wrong verification token in the URL verification"} {
		require.True(t, strings.Contains(buf.String(), reason), "log lacks %q", reason)
	}
	require.Empty(t, sink.Events())
	require.Empty(t, sink.Refused())

	// A proper unsigned URL verification is still answered.
	w := serve(ch, unsigned(feishutest.Encrypt(key, []byte(`{"challenge":"ajls384kdjx98XX","token":"`+srv.VerificationToken()+`","type":"url_verification"}`))))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.JSONEq(t, `{"challenge":"ajls384kdjx98XX"}`, w.Body.String())
	// And a signed request still gets its specific answer.
	w = serve(ch, request(t, key, time.Now(), []byte("not json")))
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Empty(t, sink.Events())
}

// TestWebhookReplayWindow: the 5-minute window on the injected clock, at
// its edges.
func TestWebhookReplayWindow(t *testing.T) {
	t.Parallel()
	const key = "window key"
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	srv := newFake(t, feishutest.Config{EncryptKey: key, Clock: clk})
	ch := newChannel(t, srv, feishu.ModeWebhook, func(c *feishu.Config) { c.Clock = clk })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	for i, off := range []time.Duration{-5 * time.Minute, 5 * time.Minute, 0} {
		body := sampleEvent(t, srv, func(_, _, m map[string]any) { m["message_id"] = "om_window_" + strconv.Itoa(i) })
		w := serve(ch, request(t, key, clk.Now().Add(off), body))
		require.Equal(t, http.StatusOK, w.Code, "offset %s", off)
	}
	require.Len(t, sink.waitEvents(t, 3), 3)
	clk.Advance(time.Second)
	w := serve(ch, request(t, key, clk.Now().Add(-5*time.Minute-time.Second), sampleEvent(t, srv, nil)))
	require.Equal(t, http.StatusUnauthorized, w.Code)
}

// TestWebhookSkipsAndInvalidEvents: events that yield no message are
// acknowledged (200) and logged; nothing reaches the sink.
func TestWebhookSkipsAndInvalidEvents(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, feishu.ModeWebhook, func(c *feishu.Config) { c.Logger = log })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	tests := []struct {
		name string
		fn   func(body, header, msg map[string]any)
		log  string
	}{
		{"unknown event type", func(_, h, _ map[string]any) { h["event_type"] = "im.message.message_read_v1" }, "unsupported event type"},
		{"another app", func(_, h, _ map[string]any) { h["app_id"] = "cli_someone_else" }, "event of app"},
		{"no message id", func(_, _, m map[string]any) { delete(m, "message_id") }, "message_id missing"},
		{"message id with a slash", func(_, _, m map[string]any) { m["message_id"] = "om_a/b" }, "message_id missing or malformed"},
		{"no sender", func(b, _, _ map[string]any) { delete(b["event"].(map[string]any), "sender") }, "sender open_id missing"},
		{"unknown chat type", func(_, _, m map[string]any) { m["chat_type"] = "channel" }, "unknown chat_type"},
		{"content not JSON", func(_, _, m map[string]any) { m["content"] = "{text" }, "malformed content"},
		{"text without text", func(_, _, m map[string]any) { m["content"] = `{"image_key":"img_1"}` }, "no text"},
		{"message id a number", func(_, _, m map[string]any) { m["message_id"] = 12 }, "receive_v1 event"},
		{"create_time garbage", func(_, _, m map[string]any) { m["create_time"] = "soon" }, "bad millisecond timestamp"},
		{"group without chat id", func(_, _, m map[string]any) { delete(m, "chat_id") }, "chat_id missing"},
	}
	for _, tc := range tests {
		w := serve(ch, request(t, "", time.Now(), sampleEvent(t, srv, tc.fn)))
		require.Equal(t, http.StatusOK, w.Code, tc.name)
		require.Contains(t, buf.String(), tc.log, tc.name)
	}
	legacy := []byte(`{"uuid":"x","token":"` + srv.VerificationToken() + `","ts":"1","type":"event_callback","event":{"type":"message"}}`)
	require.Equal(t, http.StatusOK, serve(ch, request(t, "", time.Now(), legacy)).Code)
	require.Contains(t, buf.String(), "schema 1.0")
	require.Empty(t, sink.Received())
}

// TestWebhookNackAndDuplicates: a refused event is answered 500 and
// delivered again; a delivery whose answer was lost arrives twice; every
// copy is the same Event (same Key), so the idempotent enqueue keeps one.
func TestWebhookNackAndDuplicates(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{EncryptKey: "dup key"})
	srv.AddUser(alice)
	ch := newChannel(t, srv, feishu.ModeWebhook, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)

	sink.FailNext(1)
	p1, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "refused once"})
	require.ErrorIs(t, err, feishutest.ErrNotAcknowledged)
	srv.LoseNextAck()
	p2, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "answer lost"})
	require.ErrorIs(t, err, feishutest.ErrNotAcknowledged)
	require.Eventually(t, func() bool { return srv.Pending() == 0 }, waitTimeout, time.Millisecond)

	keys := map[string][]string{}
	for _, ev := range sink.Received() {
		keys[ev.MessageID] = append(keys[ev.MessageID], ev.Key())
	}
	require.Len(t, keys[p1.MessageID], 2, "refused, then delivered again")
	require.Len(t, keys[p2.MessageID], 2, "accepted, the answer lost, delivered again")
	for _, ks := range keys {
		require.Equal(t, ks[0], ks[1], "a redelivery is the same event")
	}
	var statuses []int
	for _, d := range srv.Deliveries() {
		statuses = append(statuses, d.Status)
	}
	require.Equal(t, []int{500, 200, 200, 200}, statuses)
}

// TestWebhookAnswersOnlyAfterHandleEvent: while the sink is storing the
// event, Feishu has no answer; it gets 200 right after.
func TestWebhookAnswersOnlyAfterHandleEvent(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	ch := newChannel(t, srv, feishu.ModeWebhook, nil)
	sink := newRecSink()
	entered, release := make(chan struct{}), make(chan struct{})
	sink.SetHandler(func(ctx context.Context, ev channel.Event) error {
		close(entered)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	done := make(chan error, 1)
	go func() {
		_, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "slow store"})
		done <- err
	}()
	<-entered
	require.Empty(t, srv.Deliveries(), "no answer while HandleEvent runs")
	close(release)
	require.NoError(t, <-done)
	d := srv.Deliveries()
	require.Len(t, d, 1)
	require.Equal(t, http.StatusOK, d[0].Status)
}

// TestWebhookNotRunning: events are refused with 503 while Run is not
// active, and delivered once it is.
func TestWebhookNotRunning(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	ch := newChannel(t, srv, feishu.ModeWebhook, nil)
	ctx := tctx(t)
	_, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "early"})
	require.ErrorIs(t, err, feishutest.ErrNotAcknowledged)
	require.Equal(t, http.StatusServiceUnavailable, srv.Deliveries()[0].Status)
	sink := newRecSink()
	run(t, ch, sink)
	require.Equal(t, "early", sink.waitEvents(t, 1)[0].Text(), "the retry finds Run active")
}
