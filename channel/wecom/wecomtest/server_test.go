package wecomtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

// The official vectors of WeCom's callback crypto (sbzhu/weworkapi_golang
// sample.go @ 7e1b55d1): the fake's crypto must read
// what WeCom writes.
func TestCipherKitOfficialVectors(t *testing.T) {
	t.Parallel()
	k, err := newCipherKit("QDG6eK", "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C")
	require.NoError(t, err)
	echo := "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
	require.Equal(t, "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3", k.sign("1409659589", "263014780", echo))
	msg, err := k.open(echo, "wx5823bf96d3bd56c7")
	require.NoError(t, err)
	require.Equal(t, "1616140317555161061", string(msg))
	_, err = k.open(echo, "")
	require.Error(t, err, "receiver id checked")

	sealed := k.seal([]byte("round trip"), "")
	msg, err = k.open(sealed, "")
	require.NoError(t, err)
	require.Equal(t, "round trip", string(msg))
	_, err = newCipherKit("t", "short")
	require.Error(t, err)
}

func get(t *testing.T, u string) map[string]any {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return m
}

func post(t *testing.T, u string, body any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(u, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return m
}

func TestAppAPI(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	defer s.Close()
	q := url.Values{"corpid": {s.CorpID()}, "corpsecret": {"nope"}}
	require.EqualValues(t, CodeInvalidSecret, get(t, s.URL()+"/cgi-bin/gettoken?"+q.Encode())["errcode"])
	q.Set("corpid", "other")
	require.EqualValues(t, CodeInvalidCorpID, get(t, s.URL()+"/cgi-bin/gettoken?"+q.Encode())["errcode"])
	q = url.Values{"corpid": {s.CorpID()}, "corpsecret": {s.Secret()}}
	tok := get(t, s.URL()+"/cgi-bin/gettoken?"+q.Encode())
	require.EqualValues(t, 0, tok["errcode"])
	require.EqualValues(t, 7200, tok["expires_in"])
	send := s.URL() + "/cgi-bin/message/send?access_token=" + url.QueryEscape(tok["access_token"].(string))

	msg := map[string]any{"touser": "alice", "msgtype": "text", "agentid": s.AgentID(), "text": map[string]string{"content": "hi"},
		"enable_duplicate_check": 1, "duplicate_check_interval": 60}
	a := post(t, send, msg)
	require.EqualValues(t, 0, a["errcode"])
	b := post(t, send, msg)
	require.Equal(t, a["msgid"], b["msgid"], "a duplicate gets the first msgid")
	require.Len(t, s.Sent(), 1)
	require.Equal(t, 1, s.Duplicates())

	msg["agentid"] = 1
	require.EqualValues(t, CodeInvalidAgent, post(t, send, msg)["errcode"])
	msg["agentid"] = s.AgentID()
	msg["text"] = map[string]string{"content": strings.Repeat("x", 2049)}
	require.EqualValues(t, CodeContentTooLong, post(t, send, msg)["errcode"])
	require.EqualValues(t, CodeInvalidToken, post(t, s.URL()+"/cgi-bin/message/send?access_token=x", msg)["errcode"])
	s.ExpireTokens()
	require.EqualValues(t, CodeTokenExpired, post(t, send, msg)["errcode"])

	// FailAfter lets requests through first.
	q2 := s.URL() + "/cgi-bin/gettoken?" + q.Encode()
	s.FailAfter("gettoken", 1, Failure{ErrCode: CodeBusy})
	require.EqualValues(t, 0, get(t, q2)["errcode"])
	require.EqualValues(t, CodeBusy, get(t, q2)["errcode"])
	require.EqualValues(t, 0, get(t, q2)["errcode"])
}

func TestAIBotResponseURLOnce(t *testing.T) {
	t.Parallel()
	s := New(Config{Mode: ModeAIBot})
	defer s.Close()
	s.mu.Lock()
	u := s.newResponseURLLocked("m1", channel.Chat{Kind: channel.Private, ID: "alice"})
	s.mu.Unlock()
	md := map[string]any{"msgtype": "markdown", "markdown": map[string]string{"content": "**hi**"}}
	require.EqualValues(t, 0, post(t, u, md)["errcode"])
	require.EqualValues(t, CodeResponseURLUsed, post(t, u, md)["errcode"])
	sent := s.Sent()
	require.Len(t, sent, 1)
	require.Equal(t, "m1", sent[0].ReplyTo)
}

func TestLongConnectionSubscribe(t *testing.T) {
	t.Parallel()
	s := New(Config{Mode: ModeAIBotWS})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(secret string) (*websocket.Conn, frame) {
		c, resp, err := websocket.Dial(ctx, s.WSURL(), nil)
		require.NoError(t, err)
		if resp.Body != nil {
			_ = resp.Body.Close()
		}
		b, _ := json.Marshal(frame{Cmd: cmdSubscribe, Headers: frameHeaders{ReqID: "sub1"},
			Body: json.RawMessage(`{"bot_id":"` + s.cfg.BotID + `","secret":"` + secret + `"}`)})
		require.NoError(t, c.Write(ctx, websocket.MessageText, b))
		_, data, err := c.Read(ctx)
		require.NoError(t, err)
		var f frame
		require.NoError(t, json.Unmarshal(data, &f))
		return c, f
	}
	c, f := dial("wrong")
	require.EqualValues(t, CodeInvalidSecret, *f.ErrCode)
	_, _, err := c.Read(ctx)
	require.Error(t, err, "closed after a refused subscription")

	c1, f := dial(s.BotSecret())
	require.Zero(t, *f.ErrCode)
	require.True(t, s.Subscribed())
	c2, f := dial(s.BotSecret())
	require.Zero(t, *f.ErrCode)
	_, data, err := c1.Read(ctx)
	require.NoError(t, err)
	require.Contains(t, string(data), "disconnected_event", "the first connection is told")
	_, _, err = c1.Read(ctx)
	require.Error(t, err)
	_ = c2.CloseNow()
}
