package telegram_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
	"github.com/personakit/persona/internal/logbuf"
)

const secret = "hook-secret_42"

// webhookEnv runs an adapter in webhook mode behind a loopback server.
type webhookEnv struct {
	srv  *telegramtest.Server
	ch   *telegram.Channel
	sink *recSink
	url  string
	log  *logbuf.Buffer
}

func startWebhook(t *testing.T, fn func(*telegram.Config)) webhookEnv {
	t.Helper()
	srv := newFake(t, telegramtest.Config{})
	var h atomic.Pointer[telegram.Channel]
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.Load().ServeHTTP(w, r) }))
	t.Cleanup(hs.Close)
	log, buf := newLogger()
	url := hs.URL + "/tg/hook"
	ch := newChannel(t, srv, func(c *telegram.Config) {
		c.Mode = telegram.ModeWebhook
		c.Logger = log
		c.Webhook = telegram.WebhookConfig{URL: url, SecretToken: secret, MaxBodyBytes: 4096}
		if fn != nil {
			fn(c)
		}
	})
	h.Store(ch)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	return webhookEnv{srv: srv, ch: ch, sink: sink, url: url, log: buf}
}

func TestWebhookDelivery(t *testing.T) {
	t.Parallel()
	env := startWebhook(t, nil)
	gotURL, gotSecret := env.srv.Webhook()
	require.Equal(t, env.url, gotURL)
	require.Equal(t, secret, gotSecret)
	require.Zero(t, env.srv.CallCount("getUpdates"), "no polling in webhook mode")
	var set telegramtest.Call
	for _, c := range env.srv.Calls() {
		if c.Method == "setWebhook" {
			set = c
		}
	}
	require.JSONEq(t, `"`+secret+`"`, string(set.Params["secret_token"]))
	require.JSONEq(t, `["message","edited_message"]`, string(set.Params["allowed_updates"]))
	require.NotContains(t, env.log.String(), "/tg/hook", "the webhook path may hold a secret and is not logged")

	m, err := env.srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: "hi @persona_test_bot 🎉"})
	require.NoError(t, err)
	ev := env.sink.waitEvents(t, 1)[0]
	require.Equal(t, "hi @persona_test_bot 🎉", ev.Text(), "no mention entity was sent, so this is plain text")
	require.Equal(t, []telegramtest.Delivery{{UpdateID: telegramtest.DefaultFirstUpdateID, Status: 200}}, env.srv.Deliveries())

	// A refused event is answered 503, stays queued at Telegram and is
	// accepted on the next delivery.
	var refuse atomic.Bool
	refuse.Store(true)
	env.sink.SetHandler(func(context.Context, channel.Event) error {
		if refuse.Swap(false) {
			return errors.New("journal full")
		}
		return nil
	})
	_, err = env.srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: "again", ReplyTo: m.MessageID})
	require.ErrorContains(t, err, "webhook answered 503")
	require.Equal(t, 1, env.srv.Pending())
	require.NoError(t, env.srv.FlushWebhook(t.Context()))
	require.Zero(t, env.srv.Pending())
	evs := env.sink.waitEvents(t, 2)
	require.Equal(t, "again", evs[1].Text())
	require.Equal(t, ev.MessageID, evs[1].QuoteID())
	d := env.srv.Deliveries()
	require.Equal(t, []int{200, 503, 200}, []int{d[0].Status, d[1].Status, d[2].Status})
	waitLog(t, env.log, "telegram_event_nacked")
}

func TestWebhookBadInput(t *testing.T) {
	t.Parallel()
	env := startWebhook(t, nil)
	post := func(secret, body string) (int, string) {
		t.Helper()
		st, resp, err := telegramtest.PostWebhook(t.Context(), env.url, secret, []byte(body))
		require.NoError(t, err)
		return st, resp
	}
	valid := `{"update_id":77,"message":{"message_id":5,"date":1700000000,"chat":{"id":4242,"type":"private","first_name":"Alice"},"from":{"id":4242,"is_bot":false,"first_name":"Alice"},"text":"ok"}}`

	st, _ := post("", valid)
	require.Equal(t, http.StatusUnauthorized, st, "missing secret")
	st, _ = post("hook-secret_43", valid)
	require.Equal(t, http.StatusUnauthorized, st, "wrong secret")
	st, _ = post(secret+"x", valid)
	require.Equal(t, http.StatusUnauthorized, st, "longer secret")
	waitLog(t, env.log, "missing or wrong secret token")

	st, body := post(secret, `{"update_id":`)
	require.Equal(t, http.StatusBadRequest, st)
	require.Contains(t, body, "malformed update")
	st, _ = post(secret, `[1,2,3]`)
	require.Equal(t, http.StatusBadRequest, st)
	st, _ = post(secret, `{"no_update_id":true}`)
	require.Equal(t, http.StatusBadRequest, st)

	st, body = post(secret, `{"update_id":78,"message":{"text":"`+strings.Repeat("x", 5000)+`"}}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, st)
	require.Contains(t, body, "larger than 4096 bytes")
	waitLog(t, env.log, "body over the limit")

	st, _ = post(secret, `{"update_id":79,"callback_query":{"id":"4382bfdwdsb323b2d9","from":{"id":1111111,"first_name":"Test"},"data":"x"}}`)
	require.Equal(t, http.StatusOK, st, "an unsupported update is acknowledged")
	waitLog(t, env.log, "unsupported update type callback_query")
	st, _ = post(secret, `{"update_id":80,"message":"garbage"}`)
	require.Equal(t, http.StatusOK, st, "a malformed message cannot become valid by redelivery")
	waitLog(t, env.log, "malformed update")

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, env.url, nil)
	require.NoError(t, err)
	req.Header.Set(telegram.SecretTokenHeader, secret)
	resp, err := ownClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	require.Empty(t, env.sink.Events(), "nothing got through so far")
	st, _ = post(secret, valid)
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "ok", env.sink.waitEvents(t, 1)[0].Text())
}

func TestWebhookNotRunningAndPollingMode(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	hook := newChannel(t, srv, func(c *telegram.Config) {
		c.Mode = telegram.ModeWebhook
		c.Webhook.SecretToken = secret
	})
	body := `{"update_id":1,"message":{"message_id":1,"date":1,"chat":{"id":1,"type":"private"},"text":"x"}}`
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header.Set(telegram.SecretTokenHeader, secret)
	hook.ServeHTTP(rec, req)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, "Telegram retries until Run is up")

	poll := newChannel(t, srv, nil)
	rec = httptest.NewRecorder()
	poll.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
	require.Equal(t, http.StatusNotFound, rec.Code)
}

// With WebhookConfig.Addr the adapter serves the webhook itself; without
// URL it assumes the webhook is registered already.
func TestWebhookListener(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	ch := newChannel(t, srv, func(c *telegram.Config) {
		c.Mode = telegram.ModeWebhook
		c.Webhook = telegram.WebhookConfig{SecretToken: secret, Addr: "127.0.0.1:0", Path: "/telegram"}
	})
	sink := newRecSink()
	stop := run(t, ch, sink)
	sink.waitOnline(t, true)
	addr := ch.WebhookAddr()
	require.NotEmpty(t, addr)
	require.Zero(t, srv.CallCount("setWebhook"))
	srv.SetWebhook("http://"+addr+"/telegram", secret)
	_, err := srv.Push(t.Context(), telegramtest.Incoming{Chat: telegramtest.Chat{ID: 4242, Type: "private"}, From: alice, Text: "via listener"})
	require.NoError(t, err)
	require.Equal(t, "via listener", sink.waitEvents(t, 1)[0].Text())

	st, _, err := telegramtest.PostWebhook(t.Context(), "http://"+addr+"/other", secret, []byte(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, st, "only Path is served")

	require.NoError(t, stop())
	require.Empty(t, ch.WebhookAddr())
	_, _, err = telegramtest.PostWebhook(t.Context(), "http://"+addr+"/telegram", secret, []byte(`{}`))
	require.Error(t, err, "the listener is closed with Run")
}

func TestWebhookSetRefused(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	srv.FailNext("setWebhook", telegramtest.Failure{Code: 400, Description: "Bad Request: bad webhook: HTTPS url must be provided for webhook"})
	ch := newChannel(t, srv, func(c *telegram.Config) {
		c.Mode = telegram.ModeWebhook
		c.Webhook = telegram.WebhookConfig{SecretToken: secret, URL: "http://127.0.0.1:1/hook"}
	})
	err := ch.Run(t.Context(), newRecSink())
	require.ErrorContains(t, err, "setWebhook refused")
	require.Equal(t, channel.ClassRejected, channel.Classify(err))
}

func TestWebhookListenFails(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	ch := newChannel(t, srv, func(c *telegram.Config) {
		c.Mode = telegram.ModeWebhook
		c.Webhook = telegram.WebhookConfig{SecretToken: secret, Addr: "256.0.0.1:99999"}
	})
	require.ErrorContains(t, ch.Run(t.Context(), newRecSink()), "webhook listener")
}

// Concurrent webhook deliveries (Telegram uses up to max_connections) all
// reach the sink.
func TestWebhookConcurrentPosts(t *testing.T) {
	t.Parallel()
	env := startWebhook(t, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			body := `{"update_id":` + strings.Repeat("1", i+1) + `,"message":{"message_id":` + strings.Repeat("2", i+1) +
				`,"date":1700000000,"chat":{"id":-100555,"type":"supergroup","title":"G"},"from":{"id":7,"is_bot":false,"first_name":"Z"},"text":"m"}}`
			st, _, err := telegramtest.PostWebhook(t.Context(), env.url, secret, []byte(body))
			if err != nil || st != http.StatusOK {
				t.Errorf("post %d: %d %v", i, st, err)
			}
		})
	}
	wg.Wait()
	require.Len(t, env.sink.waitEvents(t, 8), 8)
}

// ownClient has a transport of its own: an httptest.Server's Close (in a
// parallel test) closes http.DefaultTransport's idle connections, which can
// break a request that was about to use one.
var ownClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
