package telegramtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/telegram/telegramtest"
	"github.com/personakit/persona/clock"
)

type answer struct {
	OK          bool                             `json:"ok"`
	Result      json.RawMessage                  `json:"result"`
	ErrorCode   int                              `json:"error_code"`
	Description string                           `json:"description"`
	Parameters  *telegramtest.ResponseParameters `json:"parameters"`
}

// rawCall posts JSON params to a method and decodes the answer.
func rawCall(ctx context.Context, srv *telegramtest.Server, method string, params any) (int, answer, error) {
	body, err := json.Marshal(params)
	if err != nil {
		return 0, answer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/bot"+srv.Token()+"/"+method, bytes.NewReader(body))
	if err != nil {
		return 0, answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ownClient.Do(req)
	if err != nil {
		return 0, answer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, answer{}, err
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return resp.StatusCode, a, fmt.Errorf("%w: %s", err, raw)
	}
	return resp.StatusCode, a, nil
}

func call(t *testing.T, ctx context.Context, srv *telegramtest.Server, method string, params any) (int, answer) {
	t.Helper()
	st, a, err := rawCall(ctx, srv, method, params)
	require.NoError(t, err)
	return st, a
}

func updatesOf(t *testing.T, a answer) []telegramtest.Update {
	t.Helper()
	require.True(t, a.OK, a.Description)
	var ups []telegramtest.Update
	require.NoError(t, json.Unmarshal(a.Result, &ups))
	return ups
}

var (
	alice = telegramtest.User{ID: 4242, FirstName: "Alice", Username: "alice"}
	group = telegramtest.Chat{ID: -100777, Type: telegramtest.ChatSupergroup, Title: "G"}
)

func newServer(t *testing.T, cfg telegramtest.Config) *telegramtest.Server {
	t.Helper()
	srv := telegramtest.New(cfg)
	t.Cleanup(srv.Close)
	return srv
}

func TestGetMeAndRouting(t *testing.T) {
	t.Parallel()
	srv := newServer(t, telegramtest.Config{Token: "777:abc"})
	require.Equal(t, "777", srv.BotID())

	st, a := call(t, t.Context(), srv, "GETME", nil)
	require.Equal(t, http.StatusOK, st)
	var me telegramtest.User
	require.NoError(t, json.Unmarshal(a.Result, &me))
	require.Equal(t, telegramtest.User{ID: 777, IsBot: true, FirstName: telegramtest.DefaultBotName, Username: telegramtest.DefaultBotUsername}, me)

	resp, err := http.Get(srv.URL() + "/bot777:wrong/getMe")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	st, a = call(t, t.Context(), srv, "noSuchMethod", nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, "Not Found", a.Description)

	// Form-encoded parameters with a JSON-serialised object field.
	srv.AddChat(group)
	form := url.Values{"chat_id": {"-100777"}, "text": {"123"}}
	resp, err = http.PostForm(srv.URL()+"/bot777:abc/sendMessage", form)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	form = url.Values{"chat_id": {"-100777"}, "text": {"re"}, "reply_parameters": {`{"message_id":1}`}}
	resp, err = http.PostForm(srv.URL()+"/bot777:abc/sendMessage?disable_notification=true", form)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	sent := srv.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, "123", sent[0].Text)
	require.Equal(t, int64(1), sent[1].ReplyTo)
	require.Equal(t, group, sent[1].Chat)
	require.Equal(t, 2, srv.CallCount("sendmessage"), "method names are case-insensitive")
}

func TestOffsetSemantics(t *testing.T) {
	t.Parallel()
	srv := newServer(t, telegramtest.Config{})
	ctx := t.Context()
	for _, text := range []string{"a", "b", "c", "d"} {
		_, err := srv.Push(ctx, telegramtest.Incoming{Chat: group, From: alice, Text: text})
		require.NoError(t, err)
	}
	first := int64(telegramtest.DefaultFirstUpdateID)
	_, a := call(t, ctx, srv, "getUpdates", map[string]any{"timeout": 0})
	ups := updatesOf(t, a)
	require.Len(t, ups, 4)
	require.Equal(t, first, ups[0].UpdateID)
	require.Equal(t, "a", ups[0].Message.Text)
	require.Equal(t, 4, srv.Pending(), "nothing is confirmed without an offset")

	_, a = call(t, ctx, srv, "getUpdates", map[string]any{"offset": first + 2, "limit": 1})
	ups = updatesOf(t, a)
	require.Len(t, ups, 1)
	require.Equal(t, first+2, ups[0].UpdateID)
	require.Equal(t, 2, srv.Pending(), "updates below the offset are confirmed and dropped")
	require.Equal(t, first+2, srv.Offset())

	_, a = call(t, ctx, srv, "getUpdates", map[string]any{"offset": first})
	require.Len(t, updatesOf(t, a), 2, "a lower offset cannot bring confirmed updates back")

	_, a = call(t, ctx, srv, "getUpdates", map[string]any{"offset": -1})
	ups = updatesOf(t, a)
	require.Len(t, ups, 1)
	require.Equal(t, first+3, ups[0].UpdateID, "a negative offset keeps the last updates only")
	require.Equal(t, 1, srv.Pending())

	_, a = call(t, ctx, srv, "getUpdates", map[string]any{"offset": first + 4})
	require.Empty(t, updatesOf(t, a))
	require.Zero(t, srv.Pending())
}

func TestLongPoll(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := newServer(t, telegramtest.Config{Clock: clk})
	ctx := t.Context()
	poll := func(timeout int) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			_, a, err := rawCall(ctx, srv, "getUpdates", map[string]any{"timeout": timeout})
			if err != nil {
				a.Description = err.Error()
			}
			ch <- a
		}()
		return ch
	}
	waitHeld := func(n int) {
		require.NoError(t, srv.WaitCalls(ctx, "getUpdates", n))
	}

	// A push wakes a held poll.
	res := poll(30)
	waitHeld(1)
	m, err := srv.Push(ctx, telegramtest.Incoming{Chat: group, From: alice, Text: "wake up"})
	require.NoError(t, err)
	ups := updatesOf(t, <-res)
	require.Len(t, ups, 1)
	require.Equal(t, m.MessageID, ups[0].Message.MessageID)
	_, a := call(t, ctx, srv, "getUpdates", map[string]any{"offset": ups[0].UpdateID + 1, "timeout": 0})
	require.Empty(t, updatesOf(t, a))

	// Wake ends a held poll with no updates.
	res = poll(30)
	waitHeld(3)
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, 5*time.Second, time.Millisecond)
	srv.Wake()
	require.Empty(t, updatesOf(t, <-res))

	// The timeout runs on the configured clock.
	res = poll(5)
	waitHeld(4)
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, 5*time.Second, time.Millisecond)
	clk.Advance(5 * time.Second)
	require.Empty(t, updatesOf(t, <-res))

	// A second poll terminates the first with 409 Conflict.
	res = poll(30)
	waitHeld(5)
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, 5*time.Second, time.Millisecond)
	res2 := poll(30)
	a = <-res
	require.False(t, a.OK)
	require.Equal(t, http.StatusConflict, a.ErrorCode)
	require.Contains(t, a.Description, "terminated by other getUpdates request")
	require.Eventually(t, func() bool { return clk.Pending() == 1 }, 5*time.Second, time.Millisecond)
	srv.Wake()
	require.True(t, (<-res2).OK)
}

func TestOffline(t *testing.T) {
	t.Parallel()
	srv := newServer(t, telegramtest.Config{})
	require.NoError(t, srv.SetOffline(t.Context(), true))
	resp, err := http.Get(srv.URL() + "/bot" + srv.Token() + "/getMe")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	require.Contains(t, string(body), "502 Bad Gateway")

	srv.SetOfflineMode(telegramtest.OfflineRefuse)
	resp, err = http.Get(srv.URL() + "/bot" + srv.Token() + "/getMe")
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "the connection is closed without an answer")
	calls := srv.Calls()
	require.GreaterOrEqual(t, len(calls), 2, "net/http may retry an idempotent GET once")
	for _, c := range calls {
		require.True(t, c.Offline)
		require.Equal(t, "getMe", c.Method)
	}

	require.NoError(t, srv.SetOffline(t.Context(), false))
	st, _ := call(t, t.Context(), srv, "getMe", nil)
	require.Equal(t, http.StatusOK, st)
}

func TestSendRulesAndFailures(t *testing.T) {
	t.Parallel()
	srv := newServer(t, telegramtest.Config{})
	ctx := t.Context()
	m, err := srv.Push(ctx, telegramtest.Incoming{Chat: group, From: alice, Text: "hi"})
	require.NoError(t, err)
	send := func(p map[string]any) (int, answer) { return call(t, ctx, srv, "sendMessage", p) }

	tests := []struct {
		p    map[string]any
		code int
		desc string
	}{
		{map[string]any{"chat_id": group.ID, "text": ""}, 400, "Bad Request: message text is empty"},
		{map[string]any{"chat_id": group.ID, "text": strings.Repeat("😀", 2049)}, 400, "Bad Request: message is too long"},
		{map[string]any{"chat_id": group.ID, "text": "x", "reply_parameters": map[string]any{"message_id": 999}}, 400, "Bad Request: message to be replied not found"},
		{map[string]any{"chat_id": "@nope", "text": "x"}, 400, "Bad Request: chat not found"},
		{map[string]any{"chat_id": group.ID, "text": "ab", "entities": []map[string]any{{"type": "bold", "offset": 1, "length": 2}}}, 400, "Bad Request: can't parse entities: entity out of range or incomplete"},
	}
	for _, tc := range tests {
		st, a := send(tc.p)
		require.Equal(t, tc.code, st, "%v", tc.p)
		require.Equal(t, tc.desc, a.Description)
	}
	st, _ := send(map[string]any{"chat_id": group.ID, "text": strings.Repeat("😀", 2048), "reply_parameters": map[string]any{"message_id": 999, "allow_sending_without_reply": true}})
	require.Equal(t, http.StatusOK, st, "4096 UTF-16 units; a missing reply target is allowed when asked")

	srv.RateLimitNextSend(7)
	st, a := send(map[string]any{"chat_id": group.ID, "text": "x"})
	require.Equal(t, http.StatusTooManyRequests, st)
	require.Equal(t, "Too Many Requests: retry after 7", a.Description)
	require.Equal(t, 7, a.Parameters.RetryAfter)

	require.NoError(t, srv.RejectNextSend(ctx))
	_, a = call(t, ctx, srv, "sendChatAction", map[string]any{"chat_id": group.ID, "action": "typing"})
	require.True(t, a.OK, "chat actions are not sends")
	st, _ = call(t, ctx, srv, "sendPhoto", map[string]any{"chat_id": group.ID, "photo": "https://example.com/p.jpg"})
	require.Equal(t, http.StatusBadRequest, st, "the rejection hits the next send of any kind")

	srv.FailNext("getMe", telegramtest.Failure{Code: 500})
	st, _ = call(t, ctx, srv, "getMe", nil)
	require.Equal(t, http.StatusInternalServerError, st)

	st, a = send(map[string]any{"chat_id": group.ID, "text": "reply", "reply_parameters": map[string]any{"message_id": m.MessageID}})
	require.Equal(t, http.StatusOK, st)
	var out telegramtest.Message
	require.NoError(t, json.Unmarshal(a.Result, &out))
	require.Equal(t, m.MessageID, out.ReplyToMessage.MessageID)
	require.Equal(t, srv.Bot(), *out.From)

	srv.KickBot(group.ID)
	st, a = send(map[string]any{"chat_id": group.ID, "text": "x"})
	require.Equal(t, http.StatusForbidden, st)
	require.Equal(t, "Forbidden: bot was kicked from the group chat", a.Description)
	require.Len(t, srv.Sent(), 2, "failed sends are not kept")
	require.Len(t, srv.ChatActions(), 1)
}

func TestWebhookMode(t *testing.T) {
	t.Parallel()
	srv := newServer(t, telegramtest.Config{})
	ctx := t.Context()
	var mu sync.Mutex
	status := http.StatusServiceUnavailable
	var got []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Header.Get("X-Telegram-Bot-Api-Secret-Token"))
		w.WriteHeader(status)
	}))
	t.Cleanup(hook.Close)

	st, _ := call(t, ctx, srv, "setWebhook", map[string]any{"url": hook.URL, "secret_token": "bad secret!"})
	require.Equal(t, http.StatusBadRequest, st)
	st, a := call(t, ctx, srv, "setWebhook", map[string]any{"url": hook.URL, "secret_token": "s3cr3t", "allowed_updates": []string{"message"}})
	require.Equal(t, http.StatusOK, st, a.Description)
	require.Equal(t, "Webhook was set", a.Description)
	st, a = call(t, ctx, srv, "getUpdates", nil)
	require.Equal(t, http.StatusConflict, st)
	require.Contains(t, a.Description, "webhook is active")

	_, err := srv.Push(ctx, telegramtest.Incoming{Chat: group, From: alice, Text: "one"})
	require.ErrorContains(t, err, "webhook answered 503")
	require.Equal(t, 1, srv.Pending())
	mu.Lock()
	status = http.StatusOK
	mu.Unlock()
	_, err = srv.Push(ctx, telegramtest.Incoming{Chat: group, From: alice, Text: "two"})
	require.NoError(t, err, "the pending update goes first, then the new one")
	require.Zero(t, srv.Pending())
	require.Equal(t, []string{"s3cr3t", "s3cr3t", "s3cr3t"}, got)
	require.Len(t, srv.Deliveries(), 3)

	_, err = srv.PushEdit(ctx, group.ID, 1, "edited")
	require.ErrorIs(t, err, telegramtest.ErrUpdateFiltered, "allowed_updates is [message]")

	_, a = call(t, ctx, srv, "getWebhookInfo", nil)
	require.JSONEq(t, `{"url":"`+hook.URL+`","has_custom_certificate":false,"pending_update_count":0}`, string(a.Result))
	st, _ = call(t, ctx, srv, "deleteWebhook", map[string]any{"drop_pending_updates": true})
	require.Equal(t, http.StatusOK, st)
	_, a = call(t, ctx, srv, "getUpdates", map[string]any{"timeout": 0})
	require.Empty(t, updatesOf(t, a))
}

func TestDriver(t *testing.T) {
	t.Parallel()
	srv := newServer(t, telegramtest.Config{})
	ctx := t.Context()
	gc := channel.Chat{Kind: channel.Group, ID: "-100777"}
	id, err := srv.Emit(ctx, chantest.Inbound{Chat: gc, From: channel.Sender{ID: "4242", Name: "Alice"}, Text: "你好 😀", MentionBot: true})
	require.NoError(t, err)
	require.Equal(t, "1", id)
	m, ok := srv.Message(-100777, 1)
	require.True(t, ok)
	require.Equal(t, "@persona_test_bot 你好 😀", m.Text)
	require.Equal(t, []telegramtest.MessageEntity{{Type: "mention", Offset: 0, Length: 17}}, m.Entities)
	require.Equal(t, telegramtest.ChatSupergroup, m.Chat.Type)

	id2, err := srv.Emit(ctx, chantest.Inbound{Chat: channel.Chat{Kind: channel.Private, ID: "4242"}, From: channel.Sender{ID: "4242", Name: "Alice"}, Text: "dm"})
	require.NoError(t, err)
	require.Equal(t, "1", id2, "message ids count per chat")
	_, err = srv.Emit(ctx, chantest.Inbound{Chat: gc, From: channel.Sender{ID: "4242"}, Text: "x", QuoteID: "99"})
	require.Error(t, err, "no message 99 to quote")
	_, err = srv.Emit(ctx, chantest.Inbound{Chat: channel.Chat{Kind: channel.Group, ID: "g"}, From: channel.Sender{ID: "1"}})
	require.Error(t, err)

	text := "Alice, 👋 @alice"
	_, a := call(t, ctx, srv, "sendMessage", map[string]any{"chat_id": -100777, "text": text,
		"reply_parameters": map[string]any{"message_id": 1},
		"entities": []telegramtest.MessageEntity{
			telegramtest.TextMention(text, "Alice", telegramtest.User{ID: 4242, FirstName: "Alice"}),
			telegramtest.Entity("mention", text, "@alice"),
		}})
	require.True(t, a.OK, a.Description)
	got, err := srv.Received(ctx)
	require.NoError(t, err)
	require.Equal(t, []chantest.Delivered{{Chat: gc, Text: text, ReplyTo: "1", MessageID: "2", Mentions: []string{"4242"}}}, got,
		"@alice is unknown: Emit's users have no username")
	srv.AddMember(-100777, alice, "member")
	got, err = srv.Received(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"4242", "4242"}, got[0].Mentions)
	require.Equal(t, 10, telegramtest.Entity("mention", text, "@alice").Offset, "UTF-16 offset after the emoji")
	require.Equal(t, 12, telegramtest.UTF16Len("👋🏽 你好 🇯🇵"), "4 + 1 + 2 + 1 + 4")
}

// ownClient has a transport of its own: an httptest.Server's Close (in a
// parallel test) closes http.DefaultTransport's idle connections, which can
// break a request that was about to use one.
var ownClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

// get fetches a URL with the test client and returns status and body.
func get(t *testing.T, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	require.NoError(t, err)
	resp, err := ownClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestFiles(t *testing.T) {
	t.Parallel()
	srv := newServer(t, telegramtest.Config{MaxDownloadBytes: 8})
	path := srv.AddFile("voice-1", []byte("OggS1234"))
	srv.AddFile("big", []byte("123456789"))

	st, a := call(t, t.Context(), srv, "getFile", map[string]string{"file_id": "voice-1"})
	require.Equal(t, http.StatusOK, st)
	var f telegramtest.FileInfo
	require.NoError(t, json.Unmarshal(a.Result, &f))
	require.Equal(t, telegramtest.FileInfo{FileID: "voice-1", FileUniqueID: "u-voice-1", FileSize: 8, FilePath: path}, f)

	st, body := get(t, srv.URL()+"/file/bot"+srv.Token()+"/"+path)
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "OggS1234", body)

	st, body = get(t, srv.URL()+"/file/bot123:wrong/"+path)
	require.Equal(t, http.StatusNotFound, st, body)
	st, _ = get(t, srv.URL()+"/file/bot"+srv.Token()+"/files/nope")
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, []string{path, path, "files/nope"}, srv.Downloads())

	for id, desc := range map[string]string{"unknown": "Bad Request: invalid file_id", "big": "Bad Request: file is too big"} {
		st, a = call(t, t.Context(), srv, "GETFILE", map[string]string{"file_id": id})
		require.Equal(t, http.StatusBadRequest, st)
		require.Equal(t, answer{ErrorCode: 400, Description: desc}, a)
	}

	srv.FailNextDownload(telegramtest.Failure{Code: http.StatusBadGateway})
	st, _ = get(t, srv.URL()+"/file/bot"+srv.Token()+"/"+path)
	require.Equal(t, http.StatusBadGateway, st)
	srv.FailNextDownload(telegramtest.Failure{Drop: true})
	// A fresh connection: net/http retries a GET whose reused connection
	// closed without an answer.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL()+"/file/bot"+srv.Token()+"/"+path, nil)
	require.NoError(t, err)
	_, err = fresh.Do(req) //nolint:bodyclose // no response
	require.Error(t, err)
	st, _ = get(t, srv.URL()+"/file/bot"+srv.Token()+"/"+path)
	require.Equal(t, http.StatusOK, st, "failures are used up")

	srv.RemoveFile("voice-1")
	st, _ = get(t, srv.URL()+"/file/bot"+srv.Token()+"/"+path)
	require.Equal(t, http.StatusNotFound, st)
}

func TestPushMedia(t *testing.T) {
	t.Parallel()
	srv := newServer(t, telegramtest.Config{})
	in := telegramtest.Incoming{Chat: group, From: alice, Caption: "look", MentionBot: true,
		Photo:   []telegramtest.PhotoSize{{FileID: "p", FileUniqueID: "up", Width: 800, Height: 600, FileSize: 3}},
		Sticker: &telegramtest.Sticker{FileID: "s", FileUniqueID: "us", Width: 512, Height: 512, Emoji: "😀"},
		Voice:   &telegramtest.File{FileID: "v", FileUniqueID: "uv", Duration: 4, MimeType: "audio/ogg"},
	}
	m, err := srv.Push(t.Context(), in)
	require.NoError(t, err)
	require.Equal(t, "regular", m.Sticker.Type)
	require.Equal(t, "@"+telegramtest.DefaultBotUsername+" look", m.Caption)
	ups := updatesOf(t, func() answer { _, a := call(t, t.Context(), srv, "getUpdates", nil); return a }())
	require.Len(t, ups, 1)
	require.Equal(t, &m, ups[0].Message)
}
