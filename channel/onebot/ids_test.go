package onebot_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
)

// The payload of the report: a group message with message_id 1e30 and
// group_id -1.
const outOfRange = `{"time":1700000000,"self_id":10001000,"post_type":"message","message_type":"group","sub_type":"normal",
 "message_id":1e30,"group_id":-1,"user_id":4242,"message":"hello","sender":{"user_id":4242,"nickname":"alice"}}`

// TestOutOfRangeEventNotEnqueued reproduces the report over every
// transport: the event is logged as invalid_event with the reason, never
// reaches the sink, nothing is sent to group -1, and the next message is
// delivered. Over HTTP it is acknowledged (204): redelivery cannot make
// it valid.
func TestOutOfRangeEventNotEnqueued(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			r := tr.build(t, onebottest.Config{}, onebot.Config{})
			s := r.run(t)
			ctx := tctx(t)
			if tr.name == "HTTP" {
				h := map[string]string{"X-Signature": onebot.Sign("test-secret", []byte(outOfRange)), "X-Self-ID": "10001000"}
				require.Equal(t, http.StatusNoContent, post(t, r.url, outOfRange, h))
			} else {
				require.NoError(t, r.fake.PushRaw(ctx, []byte(outOfRange)))
			}
			recs := r.logs.wait(t, "invalid_event", 1)
			require.ErrorContains(t, recs[0].attrs["err"].(error), "message_id 1e30: not an integer")

			ev := emitAndWait(t, r, s, "after the bad one")
			require.Equal(t, "after the bad one", ev.Text())
			require.Len(t, s.Events(), 1, "the out-of-range event never reached the sink")
			require.Empty(t, r.fake.Sent(), "nothing was sent")
			require.Empty(t, r.logs.all("malformed_event"), "a JSON event with a bad id is invalid, not malformed")
		})
	}
}

// scriptedAPI is a OneBot HTTP API whose answers the test sets per action.
type scriptedAPI struct {
	mu      sync.Mutex
	answers map[string]string // action → response body
	calls   []string
}

func newScriptedAPI(t *testing.T) (*scriptedAPI, string) {
	a := &scriptedAPI{answers: map[string]string{
		"get_login_info": `{"status":"ok","retcode":0,"data":{"user_id":10001000,"nickname":"bot"}}`,
		"get_status":     `{"status":"ok","retcode":0,"data":{"online":true,"good":true}}`,
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		action := strings.Trim(r.URL.Path, "/")
		a.mu.Lock()
		a.calls = append(a.calls, action)
		body, ok := a.answers[action]
		a.mu.Unlock()
		if !ok {
			body = `{"status":"failed","retcode":1404,"data":null}`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return a, srv.URL
}

func (a *scriptedAPI) set(action, data string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answers[action] = `{"status":"ok","retcode":0,"data":` + data + `}`
}

func (a *scriptedAPI) called(action string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.calls {
		if c == action {
			n++
		}
	}
	return n
}

// runScripted runs an HTTP-mode adapter against a scripted API and waits
// until it is up.
func runScripted(t *testing.T, url string) (*onebot.Channel, *logs) {
	t.Helper()
	al, alog := newLogs(t, "adapter")
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeHTTP, URL: url, Logger: alog,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	require.NoError(t, err)
	s := newSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ch.Run(ctx, s) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	s.waitState(t, "up", 0, isUp)
	return ch, al
}

var scriptedGroup = channel.Chat{Kind: channel.Group, ID: "100200300"}

// TestReceiptIDs: a send whose answer carries a message_id out of range (or
// of the wrong type) fails with an error naming it instead of returning
// the bad id in the receipt; a negative int32 id is a good one.
func TestReceiptIDs(t *testing.T) {
	t.Parallel()
	api, url := newScriptedAPI(t)
	ch, al := runScripted(t, url)
	ctx := tctx(t)
	bad := map[string]string{
		"1e30": "message_id 1e30: not an integer",
		"0":    "0 is not a message id",
		two31:  "outside the 32-bit range",
		two63:  "out of the 64-bit range",
		"1.5":  "not an integer",
		`"12"`: "a string, not a number",
		"true": "a boolean",
	}
	for raw, want := range bad {
		api.set("send_group_msg", `{"message_id":`+raw+`}`)
		rc, err := ch.Send(ctx, channel.Outgoing{Chat: scriptedGroup, Text: "hi"})
		require.ErrorContains(t, err, want, raw)
		require.ErrorContains(t, err, "invalid message_id", raw)
		require.Empty(t, rc.MessageIDs, raw)
	}
	require.Len(t, al.all("invalid_receipt"), len(bad))

	api.set("send_group_msg", `{"message_id":-2147483648}`)
	rc, err := ch.Send(ctx, channel.Outgoing{Chat: scriptedGroup, Text: "hi"})
	require.NoError(t, err)
	require.Equal(t, []string{"-2147483648"}, rc.MessageIDs)

	api.set("send_group_forward_msg", `{"message_id":1e30,"forward_id":"res-1"}`)
	_, err = ch.SendForward(ctx, scriptedGroup, []channel.ForwardNode{{Name: "a", Text: "x"}})
	require.ErrorContains(t, err, "message_id 1e30")
	api.set("send_group_forward_msg", `{"forward_id":"res-1"}`)
	rc, err = ch.SendForward(ctx, scriptedGroup, []channel.ForwardNode{{Name: "a", Text: "x"}})
	require.NoError(t, err)
	require.Equal(t, []string{"res-1"}, rc.MessageIDs)
}

const two31, two63 = "2147483648", "9223372036854775808"

// TestAPIAnswerIDs: ids in get_msg, history, the group and friend lists,
// member info and login info are range-checked like pushed events.
func TestAPIAnswerIDs(t *testing.T) {
	t.Parallel()
	api, url := newScriptedAPI(t)
	ch, al := runScripted(t, url)
	ctx := tctx(t)

	api.set("get_msg", `{"time":1700000000,"message_type":"group","message_id":5,"group_id":-1,"user_id":4242,"message":"x"}`)
	_, err := ch.GetMessage(ctx, "5")
	require.ErrorContains(t, err, "group_id -1")
	api.set("get_msg", `{"time":1700000000,"message_type":"group","message_id":5,"group_id":100200300,"user_id":1e30,"message":"x"}`)
	_, err = ch.GetMessage(ctx, "5")
	require.ErrorContains(t, err, "user_id 1e30")
	api.set("get_msg", `{"time":1700000000,"message_type":"group","message_id":5,"group_id":100200300,"user_id":4242,"message":"x"}`)
	ev, err := ch.GetMessage(ctx, "5")
	require.NoError(t, err)
	require.Equal(t, scriptedGroup, ev.Chat)

	api.set("get_group_msg_history", `{"messages":[
		{"time":1700000001,"message_id":1,"message_seq":1,"user_id":4242,"message":"good one"},
		{"time":1700000002,"message_id":1e30,"message_seq":2,"user_id":4242,"message":"bad message_id"},
		{"time":1700000003,"message_id":3,"message_seq":-3,"user_id":4242,"message":"bad seq"},
		{"time":1700000004,"message_id":4,"message_seq":4,"user_id":"4242","message":"string user_id"},
		{"time":1700000005,"message_id":5,"message_seq":5,"user_id":4242,"group_id":-1,"message":"bad group"},
		{"time":1700000006,"message_id":-6,"message_seq":6,"user_id":4242,"message":"good two"}]}`)
	page, err := ch.FetchHistory(ctx, channel.HistoryQuery{Chat: scriptedGroup, Limit: 10})
	require.NoError(t, err)
	var texts []string
	for _, e := range page.Events {
		texts = append(texts, e.Text())
	}
	require.Equal(t, []string{"good two", "good one"}, texts)
	require.Len(t, al.all("invalid_history_item"), 4)

	api.set("get_group_list", `[{"group_id":-1},{"group_id":5},{"group_id":"6"},{"group_id":1e3},{"group_id":`+two63+`}]`)
	api.set("get_friend_list", `[{"user_id":0},{"user_id":7},{"user_id":7.5}]`)
	chats, err := ch.ListChats(ctx)
	require.NoError(t, err)
	require.Equal(t, []channel.Chat{{Kind: channel.Group, ID: "5"}, {Kind: channel.Private, ID: "7"}}, chats)
	require.Len(t, al.all("invalid_list_item"), 6)

	api.set("get_group_member_info", `{"user_id":-3,"nickname":"x"}`)
	_, err = ch.LookupMember(ctx, scriptedGroup, "3")
	require.ErrorContains(t, err, "user_id -3")
}

// TestLoginInfoID: get_login_info with an out-of-range user_id fails the
// bootstrap (logged, retried); the adapter never adopts it as its id.
func TestLoginInfoID(t *testing.T) {
	t.Parallel()
	api, url := newScriptedAPI(t)
	api.set("get_login_info", `{"user_id":-1,"nickname":"bot"}`)
	al, alog := newLogs(t, "adapter")
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeHTTP, URL: url, Logger: alog,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ch.Run(ctx, newSink()) }()
	recs := al.wait(t, "bootstrap_failed", 1)
	require.ErrorContains(t, recs[0].attrs["err"].(error), "user_id -1")
	require.Empty(t, ch.BotID())
	cancel()
	require.NoError(t, <-done)
}

// TestOutgoingIDsChecked: chats, message ids and users out of range are
// refused before any call, as definitive rejections.
func TestOutgoingIDsChecked(t *testing.T) {
	t.Parallel()
	api, url := newScriptedAPI(t)
	ch, _ := runScripted(t, url)
	ctx := tctx(t)
	for _, id := range []string{"-1", "0", "1e30", "1.5", two63, "+5", "007"} {
		_, err := ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: id}, Text: "x"})
		require.ErrorIs(t, err, channel.ErrRejected, id)
		_, err = ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Private, ID: id}, Text: "x"})
		require.ErrorIs(t, err, channel.ErrRejected, id)
		require.ErrorIs(t, ch.Typing(ctx, channel.Chat{Kind: channel.Private, ID: id}), channel.ErrRejected, id)
		_, err = ch.LookupMember(ctx, scriptedGroup, id)
		require.ErrorIs(t, err, channel.ErrRejected, id)
	}
	for _, id := range []string{"0", "1e30", two31, "-2147483649", "1.5", "abc"} {
		require.ErrorIs(t, ch.Recall(ctx, scriptedGroup, id), channel.ErrRejected, id)
		_, err := ch.GetMessage(ctx, id)
		require.ErrorIs(t, err, channel.ErrRejected, id)
		_, err = ch.Send(ctx, channel.Outgoing{Chat: scriptedGroup, Text: "x", ReplyTo: id})
		require.ErrorIs(t, err, channel.ErrRejected, id)
	}
	_, err := ch.Send(ctx, channel.Outgoing{Chat: scriptedGroup, Text: "x", Mentions: []string{"-1"}})
	require.ErrorIs(t, err, channel.ErrRejected)
	for _, action := range []string{"send_group_msg", "send_private_msg", "set_input_status", "get_group_member_info", "delete_msg", "get_msg"} {
		require.Zero(t, api.called(action), action)
	}
}
