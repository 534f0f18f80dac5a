package dingtalktest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
	"github.com/personakit/persona/clock"
)

func tctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newServer(t *testing.T, cfg dingtalktest.Config) *dingtalktest.Server {
	t.Helper()
	srv := dingtalktest.New(cfg)
	t.Cleanup(srv.Close)
	return srv
}

// post makes a JSON call and decodes the answer.
func post(t *testing.T, url, token string, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(tctx(t), http.MethodPost, url, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("x-acs-dingtalk-access-token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	_ = json.Unmarshal(data, &m) // error pages are not JSON
	return resp.StatusCode, m
}

func openConn(t *testing.T, srv *dingtalktest.Server) (endpoint, ticket string) {
	t.Helper()
	st, m := post(t, srv.URL()+"/v1.0/gateway/connections/open", "", map[string]any{
		"clientId": srv.ClientID(), "clientSecret": srv.ClientSecret(),
		"subscriptions": []map[string]string{{"type": "CALLBACK", "topic": dingtalktest.BotMessageTopic}}, "ua": "test/1"})
	require.Equal(t, 200, st)
	return m["endpoint"].(string), m["ticket"].(string)
}

func dial(t *testing.T, endpoint, ticket string) (*websocket.Conn, int) {
	t.Helper()
	ws, resp, err := websocket.Dial(tctx(t), endpoint+"?ticket="+ticket, nil)
	status := 0
	if resp != nil {
		status = resp.StatusCode
		if resp.Body != nil {
			_ = resp.Body.Close()
		}
	}
	if err != nil {
		return nil, status
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	return ws, status
}

// frame reads one frame as the client.
func readFrame(t *testing.T, ws *websocket.Conn) map[string]any {
	t.Helper()
	typ, data, err := ws.Read(tctx(t))
	require.NoError(t, err)
	require.Equal(t, websocket.MessageText, typ)
	var f map[string]any
	require.NoError(t, json.Unmarshal(data, &f))
	return f
}

func token(t *testing.T, srv *dingtalktest.Server) string {
	t.Helper()
	st, m := post(t, srv.URL()+"/v1.0/oauth2/accessToken", "", map[string]string{"appKey": srv.ClientID(), "appSecret": srv.ClientSecret()})
	require.Equal(t, 200, st)
	require.Equal(t, float64(7200), m["expireIn"])
	return m["accessToken"].(string)
}

func TestConnectionsAndTickets(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := newServer(t, dingtalktest.Config{Clock: clk})
	st, m := post(t, srv.URL()+"/v1.0/gateway/connections/open", "", map[string]any{"clientId": srv.ClientID(), "clientSecret": "wrong",
		"subscriptions": []map[string]string{{"type": "CALLBACK", "topic": "t"}}})
	require.Equal(t, 401, st)
	require.Equal(t, dingtalktest.CodeUnauthenticated, m["code"])
	st, _ = post(t, srv.URL()+"/v1.0/gateway/connections/open", "", map[string]any{"clientId": srv.ClientID(), "clientSecret": srv.ClientSecret()})
	require.Equal(t, 400, st, "no subscriptions")

	endpoint, ticket := openConn(t, srv)
	require.True(t, strings.HasPrefix(endpoint, "ws://"))
	require.Equal(t, ticket, srv.Opens()[0].Ticket)
	require.Equal(t, "test/1", srv.Opens()[0].UA)
	ws, _ := dial(t, endpoint, ticket)
	require.NotNil(t, ws)
	require.NoError(t, srv.WaitAccepted(tctx(t), 1))
	_, status := dial(t, endpoint, ticket)
	require.Equal(t, 401, status, "a ticket is good for one connection")
	_, ticket2 := openConn(t, srv)
	clk.Advance(dingtalktest.DefaultTicketTTL)
	_, status = dial(t, endpoint, ticket2)
	require.Equal(t, 401, status, "a ticket expires after 90 s")

	// A ping: the client must echo the opaque.
	pinged := make(chan error, 1)
	go func() {
		_, err := srv.Ping(tctx(t))
		pinged <- err
	}()
	f := readFrame(t, ws)
	require.Equal(t, "SYSTEM", f["type"])
	headers := f["headers"].(map[string]any)
	require.Equal(t, "ping", headers["topic"])
	ack, _ := json.Marshal(map[string]any{"code": 200, "message": "OK", "data": f["data"],
		"headers": map[string]string{"messageId": headers["messageId"].(string), "contentType": "application/json"}})
	require.NoError(t, ws.Write(tctx(t), websocket.MessageText, ack))
	require.NoError(t, <-pinged)
	require.Len(t, srv.Acks(), 1)
	require.Equal(t, 1, srv.Acks()[0].Conn)

	// Offline: the connection is cut and every call answers 503.
	require.NoError(t, srv.SetOffline(tctx(t), true))
	_, _, err := ws.Read(tctx(t))
	require.Error(t, err)
	st, _ = post(t, srv.URL()+"/v1.0/gateway/connections/open", "", map[string]any{})
	require.Equal(t, 503, st)
	require.NoError(t, srv.SetOffline(tctx(t), false))
	openConn(t, srv)
}

func TestPushShapes(t *testing.T) {
	t.Parallel()
	srv := newServer(t, dingtalktest.Config{})
	endpoint, ticket := openConn(t, srv)
	ws, _ := dial(t, endpoint, ticket)
	require.NotNil(t, ws)
	ctx := tctx(t)
	alice := dingtalktest.User{StaffID: "alice01", Nick: "Alice"}
	p, err := srv.Push(ctx, dingtalktest.Incoming{Group: true, ConversationID: "cidG==", From: alice, Text: "hi", MentionBot: true,
		AtUsers: []dingtalktest.User{{StaffID: "bob02"}}})
	require.NoError(t, err)
	f := readFrame(t, ws)
	require.Equal(t, "CALLBACK", f["type"])
	require.Equal(t, "1.0", f["specVersion"])
	h := f["headers"].(map[string]any)
	require.Equal(t, dingtalktest.BotMessageTopic, h["topic"])
	require.Equal(t, p.FrameID, h["messageId"])
	require.Equal(t, "application/json", h["contentType"])
	require.NotEmpty(t, h["time"])
	data, ok := f["data"].(string)
	require.True(t, ok, "data is a JSON-encoded string")
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &d))
	require.Equal(t, "2", d["conversationType"])
	require.Equal(t, "cidG==", d["conversationId"])
	require.Equal(t, true, d["isInAtList"])
	require.Equal(t, " hi", d["text"].(map[string]any)["content"])
	require.Equal(t, "alice01", d["senderStaffId"])
	require.Equal(t, p.MsgID, d["msgId"])
	require.Equal(t, p.Webhook, d["sessionWebhook"])
	require.Equal(t, float64(p.Expires.UnixMilli()), d["sessionWebhookExpiredTime"])
	require.Len(t, d["atUsers"], 2)
	require.Equal(t, srv.BotID(), d["robotCode"])

	// A reply in the same conversation reuses the session and quotes.
	p2, err := srv.Push(ctx, dingtalktest.Incoming{Group: true, ConversationID: "cidG==", From: alice, Text: "again", ReplyTo: p.MsgID})
	require.NoError(t, err)
	require.Equal(t, p.Webhook, p2.Webhook)
	f = readFrame(t, ws)
	require.NoError(t, json.Unmarshal([]byte(f["data"].(string)), &d))
	text := d["text"].(map[string]any)
	require.Equal(t, true, text["isReplyMsg"])
	require.Equal(t, p.MsgID, text["repliedMsg"].(map[string]any)["msgId"])

	// A private message: no group fields.
	_, err = srv.Push(ctx, dingtalktest.Incoming{From: alice, Picture: &dingtalktest.Media{DownloadCode: "dc"}})
	require.NoError(t, err)
	f = readFrame(t, ws)
	d = map[string]any{}
	require.NoError(t, json.Unmarshal([]byte(f["data"].(string)), &d))
	require.Equal(t, "1", d["conversationType"])
	require.NotContains(t, d, "isInAtList")
	require.Equal(t, "picture", d["msgtype"])
	require.Equal(t, "dc", d["content"].(map[string]any)["downloadCode"])

	_, err = srv.Push(ctx, dingtalktest.Incoming{Group: true, From: alice, Text: "x"})
	require.Error(t, err, "a group message needs a conversation")
}

func TestSends(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := newServer(t, dingtalktest.Config{Clock: clk})
	endpoint, ticket := openConn(t, srv)
	ws, _ := dial(t, endpoint, ticket)
	require.NotNil(t, ws)
	ctx := tctx(t)
	alice := dingtalktest.User{StaffID: "alice01", Nick: "Alice"}
	p, err := srv.Push(ctx, dingtalktest.Incoming{Group: true, ConversationID: "cidG==", From: alice, Text: "first line\nsecond"})
	require.NoError(t, err)

	st, m := post(t, p.Webhook, "", map[string]any{"msgtype": "markdown", "markdown": map[string]string{"title": "t", "text": "> Alice: first line\n\nanswer"},
		"at": map[string]any{"atUserIds": []string{"alice01"}}})
	require.Equal(t, 200, st)
	require.Equal(t, float64(0), m["errcode"])
	st, m = post(t, p.Webhook, "", map[string]any{"msgtype": "text", "text": map[string]string{"content": ""}})
	require.Equal(t, 200, st)
	require.Equal(t, float64(dingtalktest.ErrcodeBadMessage), m["errcode"])

	tok := token(t, srv)
	st, _ = post(t, srv.URL()+"/v1.0/robot/groupMessages/send", "", map[string]string{})
	require.Equal(t, 401, st, "no token")
	st, m = post(t, srv.URL()+"/v1.0/robot/groupMessages/send", tok, map[string]string{"robotCode": srv.BotID(), "openConversationId": "cidG==",
		"msgKey": "sampleText", "msgParam": `{"content":"by api"}`})
	require.Equal(t, 200, st)
	key := m["processQueryKey"].(string)
	st, _ = post(t, srv.URL()+"/v1.0/robot/groupMessages/send", tok, map[string]string{"robotCode": srv.BotID(), "openConversationId": "cidG==",
		"msgKey": "sampleImageMsg", "msgParam": `{}`})
	require.Equal(t, 400, st)
	st, m = post(t, srv.URL()+"/v1.0/robot/oToMessages/batchSend", tok, map[string]any{"robotCode": srv.BotID(), "userIds": []string{"alice01"},
		"msgKey": "sampleMarkdown", "msgParam": `{"title":"T","text":"private"}`})
	require.Equal(t, 200, st)
	require.Empty(t, m["invalidStaffIdList"])

	got, err := srv.Received(ctx)
	require.NoError(t, err)
	require.Equal(t, []chantest.Delivered{
		{Chat: channel.Chat{Kind: channel.Group, ID: "cidG=="}, Text: "answer", ReplyTo: p.MsgID, Mentions: []string{"alice01"}},
		{Chat: channel.Chat{Kind: channel.Group, ID: "cidG=="}, Text: "by api", MessageID: key},
		{Chat: channel.Chat{Kind: channel.Private, ID: "alice01"}, Text: "private", MessageID: srv.Sent()[2].ProcessQueryKey},
	}, got)

	// The session and the token expire on the clock.
	clk.Advance(dingtalktest.DefaultTokenTTL)
	st, m = post(t, p.Webhook, "", map[string]any{"msgtype": "text", "text": map[string]string{"content": "late"}})
	require.Equal(t, 200, st)
	require.Equal(t, float64(dingtalktest.ErrcodeSessionInvalid), m["errcode"])
	st, _ = post(t, srv.URL()+"/v1.0/robot/groupMessages/send", tok, map[string]string{"robotCode": srv.BotID(), "openConversationId": "cidG==",
		"msgKey": "sampleText", "msgParam": `{"content":"x"}`})
	require.Equal(t, 401, st)
	require.Equal(t, 1, srv.TokenCalls())
}

func TestFiles(t *testing.T) {
	t.Parallel()
	srv := newServer(t, dingtalktest.Config{})
	code := srv.AddFile("", []byte("bytes"), "image/jpeg")
	tok := token(t, srv)
	st, m := post(t, srv.URL()+"/v1.0/robot/messageFiles/download", tok, map[string]string{"downloadCode": code, "robotCode": srv.BotID()})
	require.Equal(t, 200, st)
	link := m["downloadUrl"].(string)
	resp, err := http.Get(link)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, "bytes", string(body))
	require.Equal(t, "image/jpeg", resp.Header.Get("Content-Type"))
	srv.RemoveFile(code)
	st, _ = post(t, srv.URL()+"/v1.0/robot/messageFiles/download", tok, map[string]string{"downloadCode": code, "robotCode": srv.BotID()})
	require.Equal(t, 400, st)
	require.Equal(t, []string{code, code}, srv.Downloads())
}
