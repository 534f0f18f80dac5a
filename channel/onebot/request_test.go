package onebot_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
	"github.com/personakit/persona/clock"
)

// officialFriendRequest is a friend request in the shape of the OneBot v11
// request event (time, self_id, post_type, request_type, user_id, comment,
// flag), written for these tests.
const officialFriendRequest = `{"time":1700000100,"self_id":10001000,"post_type":"request","request_type":"friend",
 "user_id":4242,"comment":"我是 alice，加个好友吧","flag":"1700000100|4242"}`

// Group join requests and invitations, in the shape of the OneBot v11
// request event.
const (
	officialGroupAdd = `{"time":1700000101,"self_id":10001000,"post_type":"request","request_type":"group","sub_type":"add",
 "group_id":100200300,"user_id":4243,"comment":"让我进去","flag":"g-add-1"}`
	officialGroupInvite = `{"time":1700000102,"self_id":10001000,"post_type":"request","request_type":"group","sub_type":"invite",
 "group_id":500600700,"user_id":4244,"comment":"","flag":"g-inv-1"}`
)

func isFriendRequest(ev channel.Event) bool {
	return ev.Kind == channel.KindNotice && ev.Notice != nil && ev.Notice.Type == channel.NoticeFriendRequest
}

// TestFriendRequestEvent: the official friend request payload becomes a
// friend_request notice in the private chat with the requester, over every
// transport, and its key is the same on a redelivery even when the
// adapter's clock moved on.
func TestFriendRequestEvent(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			r := tr.build(t, onebottest.Config{}, onebot.Config{Clock: clk})
			s := r.run(t)
			ctx := tctx(t)

			require.NoError(t, r.fake.PushRaw(ctx, []byte(officialFriendRequest)))
			ev := s.waitEvent(t, "the friend request", isFriendRequest)
			require.NoError(t, ev.Validate())
			require.Equal(t, channel.Event{
				Platform: "onebot", BotID: "10001000", Kind: channel.KindNotice,
				Chat:   channel.Chat{Kind: channel.Private, ID: "4242"},
				Time:   time.Unix(1700000100, 0),
				Sender: channel.Sender{ID: "4242"},
				Notice: &channel.Notice{Type: channel.NoticeFriendRequest, Operator: "4242", UserID: "4242",
					Flag: "1700000100|4242", Comment: "我是 alice，加个好友吧"},
				Source: channel.SourceLive, Raw: ev.Raw,
			}, ev)
			require.JSONEq(t, officialFriendRequest, string(ev.Raw))
			require.Empty(t, ev.MessageID, "a notice has no message id of its own")
			require.Regexp(t, `^sha256:[0-9a-f]{64}$`, ev.Key())

			// The same request pushed again, an hour later by the adapter's
			// clock, has the same key: the time is the payload's.
			clk.Advance(time.Hour)
			require.NoError(t, r.fake.PushRaw(ctx, []byte(officialFriendRequest)))
			s.wait(t, "the redelivery", func(evs []channel.Event, _ []channel.State) bool {
				return len(slices.DeleteFunc(slices.Clone(evs), func(e channel.Event) bool { return !isFriendRequest(e) })) == 2
			})
			var keys []string
			for _, e := range s.Events() {
				if isFriendRequest(e) {
					keys = append(keys, e.Key())
				}
			}
			require.Equal(t, []string{ev.Key(), ev.Key()}, keys)

			// A request from the fake, with a comment-less payload.
			flag, err := r.fake.EmitFriendRequest(ctx, onebottest.FriendRequest{UserID: 5555, Time: time.Unix(1700000200, 0)})
			require.NoError(t, err)
			got := s.waitEvent(t, "the fake's friend request", func(e channel.Event) bool {
				return isFriendRequest(e) && e.Notice.Flag == flag
			})
			require.Equal(t, channel.Chat{Kind: channel.Private, ID: "5555"}, got.Chat)
			require.Equal(t, &channel.Notice{Type: channel.NoticeFriendRequest, Operator: "5555", UserID: "5555", Flag: flag}, got.Notice)
			require.NotEqual(t, ev.Key(), got.Key())
		})
	}
}

// TestGroupRequestsIgnored: group join requests and invitations produce no
// event; they are logged as request_ignored with the reason, and the
// connection goes on.
func TestGroupRequestsIgnored(t *testing.T) {
	t.Parallel()
	r := reverseRig(t, onebottest.Config{}, onebot.Config{})
	s := r.run(t)
	ctx := tctx(t)
	for _, p := range []string{officialGroupAdd, officialGroupInvite,
		`{"time":1,"self_id":10001000,"post_type":"request","request_type":"wat","user_id":1,"flag":"x"}`} {
		require.NoError(t, r.fake.PushRaw(ctx, []byte(p)))
	}
	marker := emitAndWait(t, r, s, "marker")
	require.Equal(t, []channel.Event{marker}, s.Events(), "only the marker arrives")
	recs := r.logs.all("request_ignored")
	require.Len(t, recs, 3)
	require.Equal(t, "group", recs[0].attrs["request_type"])
	require.Equal(t, "add", recs[0].attrs["sub_type"])
	require.Equal(t, "invite", recs[1].attrs["sub_type"])
	require.Equal(t, "wat", recs[2].attrs["request_type"])
	require.Equal(t, "only friend requests are supported", recs[0].attrs["reason"])
	require.Empty(t, r.logs.all("invalid_event"))
}

// malformedRequests are friend request payloads that can never become a
// valid event, with the text their error must name.
var malformedRequests = []struct {
	name, payload, want string
	sentinel            error
}{
	{"NoFlag", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"comment":"hi"}`, "without a flag", onebot.ErrInvalidRequest},
	{"EmptyFlag", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"flag":""}`, "without a flag", onebot.ErrInvalidRequest},
	{"NullFlag", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"flag":null}`, "without a flag", onebot.ErrInvalidRequest},
	{"NumberFlag", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"flag":12345}`, "flag 12345: not a string", onebot.ErrInvalidRequest},
	{"ObjectFlag", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"flag":{"id":"x"}}`, "flag", onebot.ErrInvalidRequest},
	{"NumberComment", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"flag":"f","comment":7}`, "comment 7: not a string", onebot.ErrInvalidRequest},
	{"NoUser", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","flag":"f"}`, "without user_id", onebot.ErrInvalidRequest},
	{"StringUser", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":"4242","flag":"f"}`, "user_id", onebot.ErrInvalidID},
	{"ZeroUser", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":0,"flag":"f"}`, "user_id 0", onebot.ErrInvalidID},
	{"FractionUser", `{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":1.5,"flag":"f"}`, "user_id 1.5", onebot.ErrInvalidID},
}

// TestFriendRequestMalformed: a friend request without a usable flag or
// requester is refused with an error naming the field.
func TestFriendRequestMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range malformedRequests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ch, err := onebot.New(onebot.Config{})
			require.NoError(t, err)
			ev, err := ch.DecodeEvent([]byte(tc.payload))
			require.ErrorIs(t, err, tc.sentinel)
			require.ErrorContains(t, err, tc.want)
			require.Zero(t, ev)
		})
	}
	// The same payloads with a good flag and requester are fine.
	ch, err := onebot.New(onebot.Config{})
	require.NoError(t, err)
	_, err = ch.DecodeEvent([]byte(`{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"flag":"f","comment":null}`))
	require.NoError(t, err)
}

// TestFriendRequestMalformedOverTransports: malformed friend requests are
// logged as invalid_event and dropped like other invalid events (over HTTP
// answered 204: redelivery cannot fix them); the connection goes on.
func TestFriendRequestMalformedOverTransports(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			r := tr.build(t, onebottest.Config{}, onebot.Config{})
			s := r.run(t)
			ctx := tctx(t)
			for _, tc := range malformedRequests {
				if tr.name == "HTTP" {
					sig := onebot.Sign("test-secret", []byte(tc.payload))
					require.Equal(t, http.StatusNoContent, post(t, r.url, tc.payload, map[string]string{"X-Signature": sig, "X-Self-ID": "10001000"}), tc.name)
					continue
				}
				require.NoError(t, r.fake.PushRaw(ctx, []byte(tc.payload)), tc.name)
			}
			marker := emitAndWait(t, r, s, "marker")
			require.Equal(t, []channel.Event{marker}, s.Events(), "no malformed request became an event")
			require.Len(t, r.logs.all("invalid_event"), len(malformedRequests))
			require.Empty(t, r.logs.all("disconnected"))
		})
	}
}

// friendCalls returns the parameters of the set_friend_add_request calls
// the fake received.
func friendCalls(fake *onebottest.Server) []map[string]any {
	var out []map[string]any
	for _, c := range fake.Calls() {
		if c.Action == "set_friend_add_request" {
			out = append(out, c.Params)
		}
	}
	return out
}

// TestAnswerFriendRequest: a delivered friend request is answered through
// the real transports: set_friend_add_request with the flag and approve,
// without a remark; the fake records the answers and befriends the
// accepted requester only. Answering a handled request again fails.
func TestAnswerFriendRequest(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			r := tr.build(t, onebottest.Config{}, onebot.Config{})
			s := r.run(t)
			ctx := tctx(t)
			var _ channel.RequestResponder = r.ch

			await := func(uid int64, comment string) channel.Event {
				flag, err := r.fake.EmitFriendRequest(ctx, onebottest.FriendRequest{UserID: uid, Comment: comment})
				require.NoError(t, err)
				return s.waitEvent(t, "friend request "+flag, func(e channel.Event) bool { return isFriendRequest(e) && e.Notice.Flag == flag })
			}
			alice := await(4242, "hi, alice here")
			bob := await(4343, "")
			require.Equal(t, "hi, alice here", alice.Notice.Comment)

			rr, ok := channel.As[channel.RequestResponder](r.ch)
			require.True(t, ok)
			require.NoError(t, rr.AnswerFriendRequest(ctx, *alice.Notice, true))
			require.NoError(t, rr.AnswerFriendRequest(ctx, *bob.Notice, false))
			require.Equal(t, []onebottest.FriendAnswer{
				{Flag: alice.Notice.Flag, UserID: 4242, Approve: true},
				{Flag: bob.Notice.Flag, UserID: 4343, Approve: false},
			}, r.fake.FriendAnswers())
			calls := friendCalls(r.fake)
			require.Len(t, calls, 2)
			require.Equal(t, map[string]any{"flag": alice.Notice.Flag, "approve": true}, calls[0])
			require.Equal(t, map[string]any{"flag": bob.Notice.Flag, "approve": false}, calls[1])

			chats, err := r.ch.ListChats(ctx)
			require.NoError(t, err)
			require.Contains(t, chats, channel.Chat{Kind: channel.Private, ID: "4242"})
			require.NotContains(t, chats, channel.Chat{Kind: channel.Private, ID: "4343"})

			// The request was handled: the implementation refuses a second
			// answer, and the error says which call failed and why.
			err = rr.AnswerFriendRequest(ctx, *alice.Notice, true)
			var apiErr *onebot.APIError
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, "set_friend_add_request", apiErr.Action)
			require.Equal(t, onebottest.RetcodeFailed, apiErr.Retcode)
			require.ErrorContains(t, err, "friend request of 4242")
			require.Equal(t, channel.ClassTransient, channel.Classify(err))
			require.Len(t, r.fake.FriendAnswers(), 2)
		})
	}
}

// TestAnswerFriendRequestFailures: a bad notice is refused before any
// call; failed retcodes and transport failures come back classified.
func TestAnswerFriendRequestFailures(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := reverseRig(t, onebottest.Config{}, onebot.Config{Clock: clk})
	ctx := tctx(t)
	req := channel.Notice{Type: channel.NoticeFriendRequest, Operator: "4242", UserID: "4242", Flag: "f-1"}

	// Before Run there is no connection.
	err := r.ch.AnswerFriendRequest(ctx, req, true)
	require.ErrorIs(t, err, channel.ErrOffline)

	s := r.run(t)

	// A notice without a flag, or of another type: no call.
	noFlag := req
	noFlag.Flag = ""
	err = r.ch.AnswerFriendRequest(ctx, noFlag, true)
	var rej *channel.RejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "invalid_flag", rej.Code)
	other := req
	other.Type = channel.NoticeFriendAdd
	err = r.ch.AnswerFriendRequest(ctx, other, false)
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "invalid_notice", rej.Code)
	require.Empty(t, friendCalls(r.fake), "nothing was called")

	// Retcodes: 1400 is a definitive rejection, others stay retryable.
	flag, err := r.fake.EmitFriendRequest(ctx, onebottest.FriendRequest{UserID: 4242})
	require.NoError(t, err)
	req.Flag = flag
	r.fake.FailNext("set_friend_add_request", 1400)
	err = r.ch.AnswerFriendRequest(ctx, req, true)
	var apiErr *onebot.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, int64(1400), apiErr.Retcode)
	require.ErrorIs(t, err, channel.ErrRejected)
	r.fake.FailNext("set_friend_add_request", 102)
	err = r.ch.AnswerFriendRequest(ctx, req, true)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, int64(102), apiErr.Retcode)
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
	require.Empty(t, r.fake.FriendAnswers(), "the failed answers changed nothing")

	// No response within the call timeout on the injected clock.
	r.fake.Stall("set_friend_add_request", true)
	errc := make(chan error, 1)
	go func() { errc <- r.ch.AnswerFriendRequest(ctx, req, true) }()
	_, err = r.fake.WaitCalls(ctx, "set_friend_add_request", 3)
	require.NoError(t, err)
	clk.Advance(10 * time.Second)
	require.ErrorIs(t, <-errc, onebot.ErrTimeout)

	// The connection drops while the answer is pending.
	go func() { errc <- r.ch.AnswerFriendRequest(ctx, req, true) }()
	_, err = r.fake.WaitCalls(ctx, "set_friend_add_request", 4)
	require.NoError(t, err)
	n := s.stateCount()
	r.fake.Drop()
	require.ErrorIs(t, <-errc, onebot.ErrConnectionLost)
	require.Equal(t, 0, r.ch.PendingCalls())

	// Once answered for real, the request is handled.
	r.fake.Stall("set_friend_add_request", false)
	s.waitState(t, "disconnected", n, func(st channel.State) bool { return !st.Connected })
	s.waitState(t, "reconnected", n, isUp)
	require.NoError(t, r.fake.WaitConnected(ctx))
	require.NoError(t, r.ch.AnswerFriendRequest(ctx, req, false))
	require.Equal(t, []onebottest.FriendAnswer{{Flag: flag, UserID: 4242, Approve: false}}, r.fake.FriendAnswers())
}

// TestFakeFriendRequestAction: the fake's set_friend_add_request follows
// the protocol: flag required, approve defaulting to true, the remark
// kept, unknown flags failing.
func TestFakeFriendRequestAction(t *testing.T) {
	t.Parallel()
	r := forwardRig(t, onebottest.Config{}, onebot.Config{})
	r.run(t)
	ctx := tctx(t)
	call := func(params map[string]any) (json.RawMessage, error) {
		return r.ch.Call(ctx, "set_friend_add_request", params)
	}
	_, err := call(map[string]any{"approve": true})
	var apiErr *onebot.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, int64(1400), apiErr.Retcode)
	_, err = call(map[string]any{"flag": "unknown"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, onebottest.RetcodeFailed, apiErr.Retcode)

	flag, err := r.fake.EmitFriendRequest(ctx, onebottest.FriendRequest{UserID: 7777, Flag: "my-flag"})
	require.NoError(t, err)
	require.Equal(t, "my-flag", flag)
	_, err = call(map[string]any{"flag": "my-flag", "remark": "Seven"})
	require.NoError(t, err)
	require.Equal(t, []onebottest.FriendAnswer{{Flag: "my-flag", UserID: 7777, Approve: true, Remark: "Seven"}}, r.fake.FriendAnswers())

	_, err = r.fake.EmitFriendRequest(ctx, onebottest.FriendRequest{})
	require.ErrorContains(t, err, "UserID")
}
