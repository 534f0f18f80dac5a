package feishutest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/feishu/feishutest"
	"github.com/personakit/persona/clock"
)

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// call makes an Open API request and decodes the answer.
func call(t *testing.T, srv *feishutest.Server, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(tctx(t), method, srv.URL()+path, r)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func token(t *testing.T, srv *feishutest.Server) string {
	t.Helper()
	status, m := call(t, srv, "POST", "/open-apis/auth/v3/tenant_access_token/internal", "", map[string]string{"app_id": srv.AppID(), "app_secret": srv.AppSecret()})
	require.Equal(t, 200, status)
	require.EqualValues(t, 0, m["code"])
	require.EqualValues(t, 7200, m["expire"])
	return m["tenant_access_token"].(string)
}

func TestTokenAndAuth(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := feishutest.New(feishutest.Config{Clock: clk})
	t.Cleanup(srv.Close)
	_, m := call(t, srv, "POST", "/open-apis/auth/v3/tenant_access_token/internal", "", map[string]string{"app_id": srv.AppID(), "app_secret": "wrong"})
	require.EqualValues(t, feishutest.CodeAppSecret, m["code"])

	tok := token(t, srv)
	status, m := call(t, srv, "GET", "/open-apis/bot/v3/info", tok, nil)
	require.Equal(t, 200, status)
	require.Equal(t, srv.BotID(), m["bot"].(map[string]any)["open_id"])
	_, m = call(t, srv, "GET", "/open-apis/bot/v3/info", "", nil)
	require.EqualValues(t, feishutest.CodeTokenMissing, m["code"])
	clk.Advance(2 * time.Hour)
	_, m = call(t, srv, "GET", "/open-apis/bot/v3/info", tok, nil)
	require.EqualValues(t, feishutest.CodeTokenInvalid, m["code"], "expired on the clock")
}

func TestSendUUIDAndList(t *testing.T) {
	t.Parallel()
	srv := feishutest.New(feishutest.Config{})
	t.Cleanup(srv.Close)
	srv.AddUser(feishutest.User{OpenID: "ou_a", Name: "Ann"})
	tok := token(t, srv)
	send := func(text, uuid string) map[string]any {
		content, _ := json.Marshal(map[string]string{"text": text})
		_, m := call(t, srv, "POST", "/open-apis/im/v1/messages?receive_id_type=chat_id", tok,
			map[string]string{"receive_id": "oc_g", "msg_type": "text", "content": string(content), "uuid": uuid})
		require.EqualValues(t, 0, m["code"], "%v", m)
		return m["data"].(map[string]any)
	}
	a := send(`<at user_id="ou_a"></at> hi`, "u-1")
	b := send("something else", "u-1")
	require.Equal(t, a["message_id"], b["message_id"], "the same uuid within an hour: the first message")
	c := send("third", "u-2")
	require.NotEqual(t, a["message_id"], c["message_id"])
	require.Len(t, srv.Sent(), 2)
	require.Equal(t, "@Ann hi", srv.Sent()[0].Text)
	require.Equal(t, `{"text":"@_user_1 hi"}`, a["body"].(map[string]any)["content"], "stored with the mention key")

	_, m := call(t, srv, "POST", "/open-apis/im/v1/messages?receive_id_type=chat_id", tok,
		map[string]string{"receive_id": "oc_g", "msg_type": "text", "content": `{"text":"x"}`, "uuid": strings.Repeat("u", 51)})
	require.EqualValues(t, feishutest.CodeFieldValidation, m["code"])

	_, m = call(t, srv, "GET", "/open-apis/im/v1/messages?container_id_type=chat&container_id=oc_g&sort_type=ByCreateTimeDesc&page_size=1", tok, nil)
	data := m["data"].(map[string]any)
	require.Equal(t, true, data["has_more"])
	item := data["items"].([]any)[0].(map[string]any)
	require.Equal(t, c["message_id"], item["message_id"], "newest first")
	require.Equal(t, "app", item["sender"].(map[string]any)["sender_type"])
	require.Equal(t, srv.AppID(), item["sender"].(map[string]any)["id"])
	_, m = call(t, srv, "GET", "/open-apis/im/v1/messages?container_id_type=chat&container_id=oc_g&page_size=51", tok, nil)
	require.EqualValues(t, feishutest.CodeFieldValidation, m["code"])
}

// TestCallbackWire: an encrypted callback as a plain receiver sees it:
// the headers, a valid signature and a body that decrypts.
func TestCallbackWire(t *testing.T) {
	t.Parallel()
	const key = "wire key"
	type got struct {
		header http.Header
		body   []byte
	}
	ch := make(chan got, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- got{r.Header.Clone(), b}
	}))
	t.Cleanup(hook.Close)
	srv := feishutest.New(feishutest.Config{EncryptKey: key})
	t.Cleanup(srv.Close)
	srv.SetCallback(hook.URL)
	p, err := srv.Push(tctx(t), feishutest.Incoming{ChatID: "oc_g", From: feishutest.User{OpenID: "ou_a"}, Text: "hi", MentionBot: true})
	require.NoError(t, err)
	g := <-ch
	ts, nonce := g.header.Get("X-Lark-Request-Timestamp"), g.header.Get("X-Lark-Request-Nonce")
	require.NotEmpty(t, ts)
	require.NotEmpty(t, nonce)
	require.Equal(t, feishutest.Sign(ts, nonce, key, g.body), g.header.Get("X-Lark-Signature"))
	var enc struct {
		Encrypt string `json:"encrypt"`
	}
	require.NoError(t, json.Unmarshal(g.body, &enc))
	require.NotEmpty(t, enc.Encrypt)
	require.NotContains(t, string(g.body), p.MessageID, "the event travels encrypted")
}

// TestLongConnectionWire: the endpoint, the one-time ticket, a ping
// answered by a pong carrying the ClientConfig.
func TestLongConnectionWire(t *testing.T) {
	t.Parallel()
	srv := feishutest.New(feishutest.Config{PingInterval: 30 * time.Second})
	t.Cleanup(srv.Close)
	_, m := call(t, srv, "POST", "/callback/ws/endpoint", "", map[string]string{"AppID": srv.AppID(), "AppSecret": "nope"})
	require.EqualValues(t, feishutest.CodeWSAuthFailed, m["code"])
	_, m = call(t, srv, "POST", "/callback/ws/endpoint", "", map[string]string{"AppID": srv.AppID(), "AppSecret": srv.AppSecret()})
	require.EqualValues(t, 0, m["code"])
	data := m["data"].(map[string]any)
	u := data["URL"].(string)
	require.Contains(t, u, "service_id=")
	require.EqualValues(t, 30, data["ClientConfig"].(map[string]any)["PingInterval"])

	ctx := tctx(t)
	ws, resp, err := websocket.Dial(ctx, u, nil)
	require.NoError(t, err)
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	defer func() { _ = ws.CloseNow() }()
	_, resp2, err := websocket.Dial(ctx, u, nil)
	require.Error(t, err, "a ticket is good once")
	if resp2.Body != nil {
		_ = resp2.Body.Close()
	}
	require.Equal(t, "514", resp2.Header.Get("Handshake-Status"))

	ping := feishutest.EncodeFrame(feishutest.Frame{SeqID: 1, LogID: 1, Service: 1, Method: 0, Headers: []feishutest.FrameHeader{{Key: "type", Value: "ping"}}})
	require.NoError(t, ws.Write(ctx, websocket.MessageBinary, ping))
	_, b, err := ws.Read(ctx)
	require.NoError(t, err)
	f, err := feishutest.DecodeFrame(b)
	require.NoError(t, err)
	require.Equal(t, "pong", f.Header("type"))
	require.JSONEq(t, `{"PingInterval":30,"ReconnectCount":-1,"ReconnectInterval":120,"ReconnectNonce":30}`, string(f.Payload))
	require.Equal(t, 1, srv.Pings())
}
