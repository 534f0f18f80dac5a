package onebot_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
)

// emitAndWait posts a group message from the fake and waits for it.
func emitAndWait(t *testing.T, r rig, s *sink, txt string) channel.Event {
	t.Helper()
	rec, err := r.fake.EmitMessage(tctx(t), onebottest.Incoming{GroupID: 100200300, UserID: 4242, Message: onebot.Message{text(txt)}})
	require.NoError(t, err)
	return s.waitMessage(t, itoa(int64(rec.ID)))
}

// TestBadFramesWebSocket: malformed JSON, non-object frames, unknown
// events and unmatched responses are logged and skipped; the connection
// survives (no reconnect) and the next message is delivered.
func TestBadFramesWebSocket(t *testing.T) {
	t.Parallel()
	for _, tr := range transports[:2] {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			r := tr.build(t, onebottest.Config{}, onebot.Config{})
			s := r.run(t)
			ctx := tctx(t)
			for _, f := range []string{
				`{not json`, `[1,2,3]`, `"a string"`, `42`, `null`, ``, "\xff\xfe",
				`{"post_type":"weird","self_id":10001000,"time":1}`,
				`{"status":"ok","retcode":0,"data":null,"echo":"nobody-waits"}`,
				`{"post_type":"message","message_type":"group","message_id":1,"group_id":{"x":1},"user_id":1,"self_id":10001000,"time":1}`,
				`{"post_type":"message","message_type":"group","message_id":2,"group_id":1,"user_id":1,"self_id":10001000,"time":1,"message":42}`,
				`{"post_type":"message","message_type":"group","message_id":3,"group_id":1,"user_id":1,"self_id":99,"time":1,"message":"other account"}`,
			} {
				require.NoError(t, r.fake.PushRaw(ctx, []byte(f)))
			}
			ev := emitAndWait(t, r, s, "still here")
			require.Equal(t, "still here", ev.Text())
			require.GreaterOrEqual(t, len(r.logs.all("malformed_frame")), 5)
			require.Len(t, r.logs.all("unknown_event"), 1)
			require.Len(t, r.logs.all("invalid_event"), 3)
			require.Empty(t, r.logs.all("disconnected"), "the connection survives bad frames")
			evs := s.Events()
			require.Len(t, evs, 1, "no bad frame became an event")
		})
	}
}

// TestOversizeFrame: a frame over ReadLimit closes the connection (1009)
// with a clear log line; the client reconnects and delivery resumes.
func TestOversizeFrame(t *testing.T) {
	t.Parallel()
	for _, tr := range transports[:2] {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			r := tr.build(t, onebottest.Config{}, onebot.Config{ReadLimit: 4096})
			s := r.run(t)
			n := s.stateCount()
			big := `{"post_type":"message","message_type":"group","message_id":1,"group_id":100200300,"user_id":1,"self_id":10001000,"time":1,"message":"` + strings.Repeat("x", 10000) + `"}`
			require.NoError(t, r.fake.PushRaw(tctx(t), []byte(big)))
			recs := r.logs.wait(t, "frame_too_large", 1)
			require.EqualValues(t, 4096, recs[0].attrs["limit"])
			s.waitState(t, "disconnected", n, func(st channel.State) bool { return !st.Connected })
			s.waitState(t, "reconnected", n, isUp)
			require.NoError(t, r.fake.WaitConnected(tctx(t)))
			ev := emitAndWait(t, r, s, "after the big one")
			require.Equal(t, "after the big one", ev.Text())
		})
	}
}

func dialStatus(t *testing.T, url string, hdr http.Header) int {
	t.Helper()
	ws, resp, err := websocket.Dial(tctx(t), url, &websocket.DialOptions{HTTPHeader: hdr})
	if err == nil {
		_ = ws.CloseNow()
		return http.StatusSwitchingProtocols
	}
	require.NotNil(t, resp, "dial error without a response: %v", err)
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	return resp.StatusCode
}

// TestReverseHandshake: the reverse WebSocket endpoint checks the token,
// X-Self-ID and X-Client-Role, and refuses a second client for the account.
func TestReverseHandshake(t *testing.T) {
	t.Parallel()
	r := reverseRig(t, onebottest.Config{AccessToken: "right"}, onebot.Config{AccessToken: "right"})
	// Before Run: the endpoint is not serving yet; mount a second server
	// on the same Channel to check 503.
	mounted := httptest.NewServer(r.ch)
	t.Cleanup(mounted.Close)
	url := "ws" + strings.TrimPrefix(mounted.URL, "http")
	good := func() http.Header {
		return http.Header{"Authorization": {"Bearer right"}, "X-Self-Id": {"10001000"}, "X-Client-Role": {"Universal"}}
	}
	require.Equal(t, http.StatusServiceUnavailable, dialStatus(t, url, good()))

	r.run(t)
	with := func(k, v string) http.Header {
		h := good()
		if v == "" {
			h.Del(k)
		} else {
			h.Set(k, v)
		}
		return h
	}
	require.Equal(t, http.StatusUnauthorized, dialStatus(t, url, with("Authorization", "")))
	require.Equal(t, http.StatusForbidden, dialStatus(t, url, with("Authorization", "Bearer wrong")))
	require.Equal(t, http.StatusForbidden, dialStatus(t, url, with("Authorization", "Basic cmlnaHQ=")))
	require.Equal(t, http.StatusBadRequest, dialStatus(t, url, with("X-Self-Id", "")))
	require.Equal(t, http.StatusBadRequest, dialStatus(t, url, with("X-Self-Id", "abc")))
	require.Equal(t, http.StatusBadRequest, dialStatus(t, url, with("X-Client-Role", "Event")))
	require.Equal(t, http.StatusForbidden, dialStatus(t, url, with("X-Self-Id", "20002000")))
	require.Len(t, r.logs.all("auth_failed"), 3)

	// The fake is connected: a second client for the account is refused.
	require.Equal(t, http.StatusConflict, dialStatus(t, url, good()))
	require.Equal(t, http.StatusConflict, dialStatus(t, url+"?access_token=right", with("Authorization", "")))
	recs := r.logs.all("duplicate_client_conflict")
	require.Len(t, recs, 2)
	require.Equal(t, "10001000", recs[0].attrs["x_self_id"])

	// A plain HTTP request is not a handshake.
	resp, err := http.Get(mounted.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, 1, r.fake.Conns(), "the first client keeps its connection")
}

// TestForwardWrongToken: a refused token is logged as auth_failed and
// retried with backoff; Run still stops promptly.
func TestForwardWrongToken(t *testing.T) {
	t.Parallel()
	r := forwardRig(t, onebottest.Config{AccessToken: "right"}, onebot.Config{AccessToken: "wrong"})
	s := newSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.ch.Run(ctx, s) }()
	recs := r.logs.wait(t, "auth_failed", 2)
	require.EqualValues(t, http.StatusForbidden, recs[0].attrs["status"])
	require.NotEmpty(t, r.logs.all("reconnect_scheduled"))
	cancel()
	require.NoError(t, <-done)
	sts := s.States()
	for _, st := range sts {
		require.False(t, st.Connected, "never connected with a wrong token: %+v", st)
	}
}

// TestHTTPReceiverBadInput: the HTTP POST receiver answers bad requests
// with clear statuses and logs them.
func TestHTTPReceiverBadInput(t *testing.T) {
	t.Parallel()
	r := httpRig(t, onebottest.Config{Secret: "s3"}, onebot.Config{Secret: "s3", ReadLimit: 2048})
	s := r.run(t)
	sig := func(b string) map[string]string {
		return map[string]string{"X-Signature": onebot.Sign("s3", []byte(b))}
	}
	msg := `{"time":1,"self_id":10001000,"post_type":"message","message_type":"private","message_id":77,"user_id":4242,"message":"hi"}`

	require.Equal(t, http.StatusUnauthorized, post(t, r.url, msg, nil))
	require.Equal(t, http.StatusForbidden, post(t, r.url, msg, map[string]string{"X-Signature": onebot.Sign("wrong", []byte(msg))}))
	require.Equal(t, http.StatusForbidden, post(t, r.url, msg, map[string]string{"X-Signature": "sha1=nothex"}))
	require.Len(t, r.logs.all("bad_signature"), 3)

	require.Equal(t, http.StatusBadRequest, post(t, r.url, `{not json`, sig(`{not json`)))
	require.Equal(t, http.StatusBadRequest, post(t, r.url, `[1]`, sig(`[1]`)))
	require.Len(t, r.logs.all("malformed_event"), 2)

	big := `{"x":"` + strings.Repeat("y", 4096) + `"}`
	require.Equal(t, http.StatusRequestEntityTooLarge, post(t, r.url, big, sig(big)))
	require.Len(t, r.logs.all("body_too_large"), 1)

	unknown := `{"time":1,"self_id":10001000,"post_type":"wat"}`
	require.Equal(t, http.StatusNoContent, post(t, r.url, unknown, sig(unknown)))
	require.Len(t, r.logs.all("unknown_event"), 1)

	other := `{"time":1,"self_id":10001000,"post_type":"meta_event","meta_event_type":"heartbeat"}`
	h := sig(other)
	h["X-Self-ID"] = "20002000"
	require.Equal(t, http.StatusForbidden, post(t, r.url, other, h))

	resp, err := http.Get(r.url)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	// None of that produced an event; a good post still works.
	require.Equal(t, http.StatusNoContent, post(t, r.url, msg, sig(msg)))
	ev := s.waitMessage(t, "77")
	require.Equal(t, "hi", ev.Text())
	evs := s.Events()
	require.Len(t, evs, 1)

	// A refused event is answered 503 so the implementation may retry.
	s.FailNext(1)
	msg2 := strings.Replace(msg, `"message_id":77`, `"message_id":78`, 1)
	require.Equal(t, http.StatusServiceUnavailable, post(t, r.url, msg2, sig(msg2)))
	require.Len(t, r.logs.all("event_nacked"), 1)
	require.Equal(t, http.StatusNoContent, post(t, r.url, msg2, sig(msg2)))
	s.waitMessage(t, "78")
}

// TestHTTPReceiverNotRunning: before Run the receiver answers 503.
func TestHTTPReceiverNotRunning(t *testing.T) {
	t.Parallel()
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeHTTP, URL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	srv := httptest.NewServer(ch)
	t.Cleanup(srv.Close)
	require.Equal(t, http.StatusServiceUnavailable, post(t, srv.URL, hmacBody, nil))
}

// TestHTTPAPIGarbage: an HTTP API answering garbage fails the bootstrap
// (logged, retried), never panics.
func TestHTTPAPIGarbage(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("<html>not json</html>"))
	}))
	t.Cleanup(api.Close)
	al, alog := newLogs(t, "adapter")
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeHTTP, URL: api.URL, Logger: alog, BackoffMin: 10_000_000, BackoffMax: 20_000_000})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ch.Run(ctx, newSink()) }()
	recs := al.wait(t, "bootstrap_failed", 2)
	require.Contains(t, recs[0].attrs["err"].(error).Error(), "malformed response")
	cancel()
	require.NoError(t, <-done)
}
