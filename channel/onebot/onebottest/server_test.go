package onebottest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
)

type envelope struct {
	Status  string          `json:"status"`
	Retcode int64           `json:"retcode"`
	Data    json.RawMessage `json:"data"`
	Echo    json.RawMessage `json:"echo"`
}

func start(t *testing.T, cfg onebottest.Config) (*onebottest.Server, *httptest.Server) {
	t.Helper()
	fake := onebottest.New(cfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	return fake, srv
}

func do(t *testing.T, req *http.Request) (int, envelope) {
	t.Helper()
	resp, err := ownClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var env envelope
	_ = json.Unmarshal(b, &env)
	return resp.StatusCode, env
}

// TestHTTPAPI: the HTTP API takes params from the query, a form or JSON
// (strings coerced), checks the token, and answers with the envelope and
// the spec's HTTP statuses.
func TestHTTPAPI(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, onebottest.Config{AccessToken: "tok"})
	ctx := t.Context()
	get := func(path string, hdr string) (int, envelope) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		return do(t, req)
	}
	code, _ := get("/get_login_info", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("/get_login_info", "Bearer nope")
	require.Equal(t, http.StatusForbidden, code)
	code, env := get("/get_login_info/?access_token=tok", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", env.Status)
	require.JSONEq(t, `{"user_id":10001000,"nickname":"persona-bot"}`, string(env.Data))

	// Query params, coerced from strings; CQ-code string messages.
	code, env = get("/send_group_msg?group_id=123&message="+url.QueryEscape("[CQ:face,id=1]hi&#44;"), "Bearer tok")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, int64(0), env.Retcode)
	sent := fake.Sent()
	require.Len(t, sent, 1)
	require.Equal(t, int64(123), sent[0].GroupID)
	require.Equal(t, onebot.Message{{Type: "face", Data: map[string]string{"id": "1"}}, onebot.TextSegment("hi,")}, sent[0].Message)

	// A form body with auto_escape: the message is plain text.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/send_private_msg", strings.NewReader("user_id=42&auto_escape=true&message="+url.QueryEscape("[CQ:face,id=1]")))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer tok")
	code, _ = do(t, req)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, onebot.Message{onebot.TextSegment("[CQ:face,id=1]")}, fake.Sent()[1].Message)
	require.Equal(t, int64(42), fake.Sent()[1].UserID)

	post := func(path, ct, body string) (int, envelope) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Authorization", "Bearer tok")
		return do(t, req)
	}
	code, env = post("/send_msg", "application/json", `{"message_type":"group","group_id":"77","message":[{"type":"text","data":{"text":"x"}}]}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", env.Status)
	require.Equal(t, int64(77), fake.Sent()[2].GroupID)
	code, _ = post("/send_msg", "application/json", `{not json`)
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = post("/send_msg", "text/xml", `<x/>`)
	require.Equal(t, http.StatusNotAcceptable, code)
	code, env = post("/no_such_action", "application/json", `{}`)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, int64(1404), env.Retcode)
	code, env = post("/send_group_msg", "application/json", `{"message":"x"}`)
	require.Equal(t, http.StatusOK, code, "a failed action is still HTTP 200")
	require.Equal(t, "failed", env.Status)
	require.Equal(t, int64(1400), env.Retcode)
	code, env = post("/send_group_msg_async", "application/json", `{"group_id":1,"message":"x"}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "async", env.Status)
	require.Equal(t, int64(1), env.Retcode)

	fake.FailNext("get_status", 1234)
	code, env = post("/get_status", "application/json", ``)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, int64(1234), env.Retcode)
	calls := fake.Calls()
	require.Equal(t, "get_status", calls[len(calls)-1].Action)
	require.Equal(t, "http", calls[len(calls)-1].Via)
}

// TestForwardWebSocketPaths: "/" answers API calls and pushes events,
// "/api" only answers, "/event" only pushes; echo comes back verbatim.
func TestForwardWebSocketPaths(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, onebottest.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	base := "ws" + strings.TrimPrefix(srv.URL, "http")
	dial := func(path string) *websocket.Conn {
		ws, resp, err := websocket.Dial(ctx, base+path, nil)
		require.NoError(t, err)
		if resp.Body != nil {
			_ = resp.Body.Close()
		}
		t.Cleanup(func() { _ = ws.CloseNow() })
		return ws
	}
	read := func(ws *websocket.Conn) map[string]any {
		_, b, err := ws.Read(ctx)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		return m
	}
	universal := dial("/")
	require.Equal(t, "lifecycle", read(universal)["meta_event_type"], "a connect lifecycle event first")
	api := dial("/api/")
	events := dial("/event")
	require.Equal(t, "lifecycle", read(events)["meta_event_type"])

	require.NoError(t, api.Write(ctx, websocket.MessageText, []byte(`{"action":"get_login_info","echo":{"n":[1,2]}}`)))
	resp := read(api)
	require.Equal(t, map[string]any{"n": []any{1.0, 2.0}}, resp["echo"])
	require.Equal(t, "ok", resp["status"])
	require.NoError(t, api.Write(ctx, websocket.MessageText, []byte(`{"action":"nope","echo":"e1"}`)))
	resp = read(api)
	require.Equal(t, "e1", resp["echo"])
	require.EqualValues(t, 1404, resp["retcode"])

	_, err := fake.EmitMessage(ctx, onebottest.Incoming{GroupID: 5, UserID: 6, Message: onebot.Message{onebot.TextSegment("hi")}})
	require.NoError(t, err)
	require.Equal(t, "message", read(universal)["post_type"])
	require.Equal(t, "message", read(events)["post_type"])

	code := func(path string) int {
		_, resp, err := websocket.Dial(ctx, base+path, nil)
		require.Error(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusNotFound, code("/elsewhere"))
	fake.SetDown(true)
	require.Equal(t, http.StatusServiceUnavailable, code("/"))
}

// TestHistoryAndIDs: ids are unique (some negative), seqs count per chat,
// history honours count and the anchor.
func TestHistoryAndIDs(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, onebottest.Config{})
	ctx := t.Context()
	seen := map[int32]bool{}
	neg := 0
	for i := range 12 {
		r, err := fake.EmitMessage(ctx, onebottest.Incoming{GroupID: 9, UserID: 1, Message: onebot.Message{onebot.TextSegment("m")}})
		require.NoError(t, err)
		require.False(t, seen[r.ID])
		seen[r.ID] = true
		if r.ID < 0 {
			neg++
		}
		require.Equal(t, int64(101+i), r.Seq)
	}
	require.Positive(t, neg)
	other, err := fake.EmitMessage(ctx, onebottest.Incoming{GroupID: 10, UserID: 1, Message: onebot.Message{onebot.TextSegment("m")}})
	require.NoError(t, err)
	require.Equal(t, int64(101), other.Seq, "seq is per chat")

	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/get_group_msg_history", strings.NewReader(`{"group_id":9,"message_seq":105,"count":3}`))
	_, env := do(t, req)
	var data struct {
		Messages []struct {
			Seq int64 `json:"message_seq"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(env.Data, &data))
	require.Len(t, data.Messages, 3)
	require.Equal(t, []int64{103, 104, 105}, []int64{data.Messages[0].Seq, data.Messages[1].Seq, data.Messages[2].Seq})
	require.Len(t, fake.History(9, 0), 12)
}

// TestPostSigned: HTTP POST events carry X-Self-ID and a valid
// X-Signature, and are retried after a 5xx.
func TestPostSigned(t *testing.T) {
	t.Parallel()
	fake := onebottest.New(onebottest.Config{Secret: "k", PostRetryInterval: time.Millisecond})
	t.Cleanup(fake.Close)
	var bodies []string
	fails := 1
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if !onebot.VerifySignature("k", b, r.Header.Get("X-Signature")) || r.Header.Get("X-Self-ID") != "10001000" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if fails > 0 {
			fails--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		bodies = append(bodies, string(b))
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	fake.SetPostURL(recv.URL)
	require.NoError(t, fake.Heartbeat(t.Context()))
	require.Len(t, bodies, 1)
	require.Contains(t, bodies[0], `"meta_event_type":"heartbeat"`)

	fake2 := onebottest.New(onebottest.Config{Secret: "wrong"})
	t.Cleanup(fake2.Close)
	fake2.SetPostURL(recv.URL)
	var perr *onebottest.PostError
	require.ErrorAs(t, fake2.Heartbeat(t.Context()), &perr)
	require.Equal(t, http.StatusForbidden, perr.Status)
}

// ownClient has a transport of its own: an httptest.Server's Close (in a
// parallel test) closes http.DefaultTransport's idle connections, which can
// break a request that was about to use one.
var ownClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

// TestMediaActions: get_image, get_record and get_file answer registered
// media with base64, url or file as registered, get_record honours
// out_format, unknown files get retcode 100 and a missing file 1400.
func TestMediaActions(t *testing.T) {
	t.Parallel()
	fake, srv := start(t, onebottest.Config{})
	fake.AddMedia("a.image", onebottest.MediaFile{Bytes: []byte("img"), Base64: true, URL: "https://cdn.example/a.png"})
	fake.AddMedia("v.amr", onebottest.MediaFile{Bytes: []byte("silk"), LocalPath: "/cache/v.amr", Formats: map[string][]byte{"mp3": []byte("mp3!")}})
	fake.AddMedia("/f-1", onebottest.MediaFile{Bytes: []byte("doc"), Name: "doc.pdf", Size: -1})
	get := func(path string) envelope {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		_, env := do(t, req)
		return env
	}
	env := get("/get_image?file=a.image")
	require.JSONEq(t, `{"base64":"aW1n","url":"https://cdn.example/a.png","file_size":"3","size":3,"file_name":"a.image","filename":"a.image"}`, string(env.Data))
	env = get("/get_record?file=v.amr")
	require.JSONEq(t, `{"file":"/cache/v.amr","file_size":"4","size":4,"file_name":"v.amr","filename":"v.amr"}`, string(env.Data))
	env = get("/get_record?file=v.amr&out_format=mp3")
	require.JSONEq(t, `{"base64":"bXAzIQ==","file_size":"4","size":4,"file_name":"v.amr","filename":"v.amr"}`, string(env.Data))
	env = get("/get_record?file=v.amr&out_format=flac")
	require.Contains(t, string(env.Data), `"file":"/cache/v.amr"`, "an unknown format is the clip as stored")
	env = get("/get_file?file_id=/f-1")
	require.JSONEq(t, `{"base64":"ZG9j","file_name":"doc.pdf","filename":"doc.pdf"}`, string(env.Data))
	env = get("/get_image?file=nope")
	require.Equal(t, "failed", env.Status)
	require.Equal(t, onebottest.RetcodeFailed, env.Retcode)
	env = get("/get_file")
	require.Equal(t, int64(1400), env.Retcode)
}
