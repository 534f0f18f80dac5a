package qqbot_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
)

func webhookChannel(t *testing.T, srv *qqbottest.Server, mod func(*qqbot.Config)) (*qqbot.Channel, string, *recSink) {
	t.Helper()
	ch := newChannel(t, srv, func(c *qqbot.Config) {
		c.Mode = qqbot.ModeWebhook
		if mod != nil {
			mod(c)
		}
	})
	url := serveWebhook(t, srv, ch)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	return ch, url, sink
}

func post(t *testing.T, srv *qqbottest.Server, url string, body string, header map[string]string) (int, string) {
	t.Helper()
	resp, err := srv.PostWebhook(tctx(t), url, []byte(body), header)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func TestWebhookDeliversAndAcks(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, url, sink := webhookChannel(t, srv, nil)
	require.NoError(t, srv.ValidateWebhook(tctx(t), url), "callback URL validation (op 13)")
	require.Equal(t, srv.BotUserID(), ch.UserID(), "learned from GET /users/@me")

	p, err := srv.Push(tctx(t), qqbottest.Incoming{Chat: group, From: alice, Text: "hello"})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)[0]
	require.Equal(t, p.ID, ev.MessageID)
	d := srv.Deliveries()
	require.Equal(t, qqbottest.Delivery{EventID: p.EventID, Status: 200, Ack: 0}, d[len(d)-1])

	// The message can be replied to.
	_, err = ch.Send(tctx(t), channel.Outgoing{Chat: group, Text: "hi back"})
	require.NoError(t, err)
	require.Equal(t, p.ID, srv.Sent()[0].MsgID)

	code, body := post(t, srv, url, `{"op":1,"d":42}`, nil)
	require.Equal(t, 200, code)
	require.JSONEq(t, `{"op":11,"d":42}`, body)
}

func TestWebhookRefusals(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	log, buf := newLogger()
	ch, url, sink := webhookChannel(t, srv, func(c *qqbot.Config) { c.Logger = log; c.MaxBodyBytes = 4096 })
	good := `{"op":0,"id":"GROUP_AT_MESSAGE_CREATE:1","s":1,"t":"GROUP_AT_MESSAGE_CREATE","d":{"id":"ROBOT1.0_x","author":{"member_openid":"M1"},"content":" hi","group_openid":"G1","timestamp":"2023-11-06T13:37:18+08:00"}}`
	tests := []struct {
		name   string
		body   string
		header map[string]string
		status int
	}{
		{"no signature", good, map[string]string{"X-Signature-Ed25519": ""}, 401},
		{"no timestamp", good, map[string]string{"X-Signature-Timestamp": ""}, 401},
		{"wrong signature", good, map[string]string{"X-Signature-Ed25519": strings.Repeat("ab", 64)}, 401},
		{"signature of another timestamp", good, map[string]string{"X-Signature-Timestamp": "1"}, 401},
		{"too large", `{"op":0,"d":"` + strings.Repeat("x", 5000) + `"}`, nil, 413},
		{"not JSON", `{"op":`, nil, 400},
		{"op not an integer", `{"op":"0"}`, nil, 400},
		{"validation without fields", `{"op":13,"d":{}}`, nil, 400},
	}
	for _, tc := range tests {
		code, _ := post(t, srv, url, tc.body, tc.header)
		require.Equal(t, tc.status, code, tc.name)
	}
	// Unknown ops, unsupported and invalid events: acknowledged, dropped.
	for _, body := range []string{
		`{"op":99,"d":{}}`,
		`{"op":0,"t":"GROUP_ADD_ROBOT","d":{"group_openid":"G1"}}`,
		`{"op":0,"t":"C2C_MESSAGE_CREATE","d":{"id":"","content":"no id"}}`,
		`{"op":0,"t":"C2C_MESSAGE_CREATE","d":[1,2]}`,
		"{\"op\":0,\"t\":\"C2C_MESSAGE_CREATE\",\"d\":{\"id\":\"m\\u0000\",\"author\":{\"user_openid\":\"U\"}}}",
	} {
		code, resp := post(t, srv, url, body, nil)
		require.Equal(t, 200, code, body)
		require.JSONEq(t, `{"op":12,"d":0}`, resp, body)
	}
	require.Empty(t, sink.Events())
	require.Contains(t, buf.String(), "qq_webhook_rejected")
	require.Contains(t, buf.String(), "qq_event_invalid")

	code, _ := post(t, srv, url, good, nil)
	require.Equal(t, 200, code)
	require.Len(t, sink.waitEvents(t, 1), 1)

	// Gateway mode does not serve the webhook; GET is not allowed.
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	rec := httptest.NewRecorder()
	ch.ServeHTTP(rec, req)
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	gw := newChannel(t, srv, nil)
	rec = httptest.NewRecorder()
	gw.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(good)))
	require.Equal(t, http.StatusNotFound, rec.Code)
}

// A refused event is answered 503 {"op":12,"d":1} and delivered again; an
// event arriving while Run is not active likewise.
func TestWebhookNackRedelivers(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch := newChannel(t, srv, func(c *qqbot.Config) { c.Mode = qqbot.ModeWebhook })
	serveWebhook(t, srv, ch)
	ctx := tctx(t)
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: aliceChat, From: alice, Text: "before Run"})
	require.ErrorIs(t, err, qqbottest.ErrNotAcknowledged)
	require.Equal(t, qqbottest.Delivery{EventID: p.EventID, Status: 503, Ack: 1, Err: "HTTP 503, ack 1"}, srv.Deliveries()[0])

	sink := newRecSink()
	sink.FailNext(1)
	run(t, ch, sink)
	sink.waitOnline(t, true)
	require.ErrorIs(t, srv.FlushWebhook(ctx), qqbottest.ErrNotAcknowledged)
	require.Len(t, sink.Refused(), 1)
	require.NoError(t, srv.FlushWebhook(ctx))
	require.Equal(t, p.ID, sink.waitEvents(t, 1)[0].MessageID)
	require.Zero(t, srv.PendingWebhook())
}

// The handler answers only after HandleEvent returned.
func TestWebhookAnswersAfterHandleEvent(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch := newChannel(t, srv, func(c *qqbot.Config) { c.Mode = qqbot.ModeWebhook })
	serveWebhook(t, srv, ch)
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	sink := newRecSink()
	sink.SetHandler(func(ctx context.Context, _ channel.Event) error {
		entered <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return errors.New("gave up")
		}
	})
	run(t, ch, sink)
	sink.waitOnline(t, true)
	done := make(chan error, 1)
	go func() {
		_, err := srv.Push(tctx(t), qqbottest.Incoming{Chat: aliceChat, From: alice, Text: "slow"})
		done <- err
	}()
	<-entered
	require.Empty(t, srv.Deliveries())
	select {
	case <-done:
		t.Fatal("the webhook answered before HandleEvent returned")
	default:
	}
	close(release)
	require.NoError(t, <-done)
	require.Equal(t, 200, srv.Deliveries()[0].Status)
}
