package qqbottest_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
	"github.com/personakit/persona/clock"
)

func call(t *testing.T, method, url, auth string, body any) (int, map[string]any) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(data))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func token(t *testing.T, srv *qqbottest.Server) (string, string) {
	t.Helper()
	status, out := call(t, http.MethodPost, srv.TokenURL(), "", map[string]string{"appId": srv.AppID(), "clientSecret": srv.Secret()})
	require.Equal(t, 200, status)
	return out["access_token"].(string), out["expires_in"].(string)
}

// The token endpoint hands out the same token until its last 60 s, then a
// new one; the old one stays valid until it expires.
func TestTokenEndpoint(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := qqbottest.New(qqbottest.Config{Clock: clk})
	defer srv.Close()
	tok, exp := token(t, srv)
	require.Equal(t, "7200", exp, "expires_in is a string, as in the docs")
	clk.Advance(7000 * time.Second)
	tok2, exp2 := token(t, srv)
	require.Equal(t, tok, tok2)
	require.Equal(t, "200", exp2)
	clk.Advance(150 * time.Second)
	tok3, _ := token(t, srv)
	require.NotEqual(t, tok, tok3)
	status, _ := call(t, http.MethodGet, srv.URL()+"/users/@me", "QQBot "+tok, nil)
	require.Equal(t, 200, status, "the old token is valid until it expires")
	clk.Advance(60 * time.Second)
	status, out := call(t, http.MethodGet, srv.URL()+"/users/@me", "QQBot "+tok, nil)
	require.Equal(t, 401, status)
	require.EqualValues(t, qqbottest.CodeTokenExpired, out["code"])
	status, out = call(t, http.MethodPost, srv.TokenURL(), "", map[string]string{"appId": srv.AppID(), "clientSecret": "wrong"})
	require.Equal(t, 401, status)
	require.EqualValues(t, qqbottest.CodeBadCredentials, out["code"])
}

// The passive-reply rules of a group message.
func TestReplyRules(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := qqbottest.New(qqbottest.Config{Clock: clk})
	defer srv.Close()
	tok, _ := token(t, srv)
	auth := "QQBot " + tok
	grp := channel.Chat{Kind: channel.Group, ID: "G1"}
	p, err := srv.Push(t.Context(), qqbottest.Incoming{Chat: grp, From: channel.Sender{ID: "M1"}, Text: "hi"})
	require.NoError(t, err)
	url := srv.URL() + "/v2/groups/G1/messages"
	send := func(body map[string]any) (int, map[string]any) { return call(t, http.MethodPost, url, auth, body) }

	status, out := send(map[string]any{"content": "active", "msg_type": 0})
	require.Equal(t, 400, status)
	require.EqualValues(t, qqbottest.CodeActiveDenied, out["code"])
	status, out = send(map[string]any{"content": "", "msg_type": 0, "msg_id": p.ID})
	require.Equal(t, 400, status)
	require.EqualValues(t, qqbottest.CodeEmptyMessage, out["code"])
	status, _ = send(map[string]any{"content": "one", "msg_type": 0, "msg_id": p.ID})
	require.Equal(t, 200, status, "msg_seq defaults to 1")
	status, out = send(map[string]any{"content": "again", "msg_type": 0, "msg_id": p.ID, "msg_seq": 1})
	require.Equal(t, 400, status)
	require.EqualValues(t, qqbottest.CodeDuplicateSeq, out["code"])
	for seq := 2; seq <= 5; seq++ {
		status, _ = send(map[string]any{"content": "more", "msg_type": 0, "msg_id": p.ID, "msg_seq": seq})
		require.Equal(t, 200, status)
	}
	status, out = send(map[string]any{"content": "sixth", "msg_type": 0, "msg_id": p.ID, "msg_seq": 6})
	require.Equal(t, 400, status)
	require.EqualValues(t, qqbottest.CodeReplyLimit, out["code"])

	p2, err := srv.Push(t.Context(), qqbottest.Incoming{Chat: grp, From: channel.Sender{ID: "M1"}, Text: "later"})
	require.NoError(t, err)
	status, out = call(t, http.MethodPost, srv.URL()+"/v2/users/U1/messages", auth, map[string]any{"content": "x", "msg_type": 0, "msg_id": p2.ID})
	require.Equal(t, 400, status, "a msg_id of another chat")
	require.EqualValues(t, qqbottest.CodeMsgIDWrong, out["code"])
	clk.Advance(5 * time.Minute)
	status, out = send(map[string]any{"content": "late", "msg_type": 0, "msg_id": p2.ID})
	require.Equal(t, 400, status)
	require.EqualValues(t, qqbottest.CodeReplyExpired, out["code"])
	require.Len(t, srv.Sent(), 5)
}

// The signing key follows the docs' derivation (sign.md example, bot-docs
// @ 645787a4).
func TestSigningKeyDocVector(t *testing.T) {
	t.Parallel()
	pub := qqbottest.SigningKey("naOC0ocQE3shWLAfffVLB1rhYPG7").Public().(ed25519.PublicKey)
	require.Equal(t, []byte{215, 195, 98, 254, 120, 174, 248, 31}, []byte(pub[:8]))
}
