package onebot_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
	"github.com/personakit/persona/clock"
)

var testGroup = channel.Chat{Kind: channel.Group, ID: "100200300"}

// TestCallTimeout: an unanswered call fails with ErrTimeout after the
// per-call deadline on the injected clock (10 s; history 15 s), and the
// pending call is removed.
func TestCallTimeout(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			r := tr.build(t, onebottest.Config{}, onebot.Config{Clock: clk})
			r.run(t)
			ctx := tctx(t)

			r.fake.Stall("send_group_msg", true)
			errc := make(chan error, 1)
			go func() {
				_, err := r.ch.Send(ctx, channel.Outgoing{Chat: testGroup, Text: "never answered"})
				errc <- err
			}()
			_, err := r.fake.WaitCall(ctx, "send_group_msg")
			require.NoError(t, err)
			if tr.name != "HTTP" {
				require.Equal(t, 1, r.ch.PendingCalls())
			}
			clk.Advance(10 * time.Second)
			err = <-errc
			require.ErrorIs(t, err, onebot.ErrTimeout)
			require.Equal(t, channel.ClassTransient, channel.Classify(err))
			require.Equal(t, 0, r.ch.PendingCalls(), "the timed-out call is removed")

			// History calls get 15 s.
			r.fake.Stall("get_group_msg_history", true)
			go func() {
				_, err := r.ch.FetchHistory(ctx, channel.HistoryQuery{Chat: testGroup, Limit: 10})
				errc <- err
			}()
			_, err = r.fake.WaitCall(ctx, "get_group_msg_history")
			require.NoError(t, err)
			clk.Advance(10 * time.Second)
			select {
			case err := <-errc:
				require.Failf(t, "history call ended early", "after 10 s: %v", err)
			default:
			}
			clk.Advance(5 * time.Second)
			require.ErrorIs(t, <-errc, onebot.ErrTimeout)
			require.Equal(t, 0, r.ch.PendingCalls())

			// The channel still works.
			r.fake.Stall("send_group_msg", false)
			_, err = r.ch.Send(ctx, channel.Outgoing{Chat: testGroup, Text: "answered"})
			require.NoError(t, err)
		})
	}
}

// TestConnectionLostFailsCalls: a call waiting when the WebSocket drops
// fails at once with ErrConnectionLost (transient).
func TestConnectionLostFailsCalls(t *testing.T) {
	t.Parallel()
	r := reverseRig(t, onebottest.Config{}, onebot.Config{})
	r.run(t)
	ctx := tctx(t)
	r.fake.Stall("get_msg", true)
	errc := make(chan error, 1)
	go func() {
		_, err := r.ch.GetMessage(ctx, "12")
		errc <- err
	}()
	_, err := r.fake.WaitCall(ctx, "get_msg")
	require.NoError(t, err)
	r.fake.Drop()
	err = <-errc
	require.ErrorIs(t, err, onebot.ErrConnectionLost)
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
	require.Equal(t, 0, r.ch.PendingCalls())
}

// TestSendClassification: retcodes and state map to the channel error
// classes (channel.Classify), never by message text.
func TestSendClassification(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			r := tr.build(t, onebottest.Config{}, onebot.Config{Clock: clk})
			s := r.run(t)
			ctx := tctx(t)
			send := func(chat channel.Chat) error {
				_, err := r.ch.Send(ctx, channel.Outgoing{Chat: chat, Text: "x"})
				return err
			}
			r.fake.AddGroup(100200300, "test")
			r.fake.AddGroup(500, "other")

			for _, tc := range []struct {
				retcode int64
				class   channel.ErrorClass
			}{{1400, channel.ClassRejected}, {1404, channel.ClassRejected}, {100, channel.ClassTransient}, {-1, channel.ClassTransient}} {
				r.fake.FailNext("send_", tc.retcode)
				err := send(testGroup)
				require.Equal(t, tc.class, channel.Classify(err), "retcode %d: %v", tc.retcode, err)
				var apiErr *onebot.APIError
				require.ErrorAs(t, err, &apiErr)
				require.Equal(t, tc.retcode, apiErr.Retcode)
				require.Equal(t, "send_group_msg", apiErr.Action)
				if tc.class == channel.ClassRejected {
					var rej *channel.RejectedError
					require.ErrorAs(t, err, &rej)
					require.Equal(t, strconv.FormatInt(tc.retcode, 10), rej.Code)
				}
			}
			// Private sends are never "kicked".
			r.fake.FailNext("send_", 100)
			require.Equal(t, channel.ClassTransient, channel.Classify(send(channel.Chat{Kind: channel.Private, ID: "4242"})))

			// Removed from a group: the cached group list (fetched by the
			// retcode-100 failure above) is trusted for GroupListTTL.
			r.fake.Kick(500)
			require.Equal(t, channel.ClassTransient, channel.Classify(send(channel.Chat{Kind: channel.Group, ID: "500"})), "cache still fresh")
			clk.Advance(61 * time.Second)
			err := send(channel.Chat{Kind: channel.Group, ID: "500"})
			require.Equal(t, channel.ClassKicked, channel.Classify(err), "%v", err)
			require.True(t, channel.Classify(err).Definitive())

			// kick_me notice: known at once.
			require.NoError(t, r.fake.PushRaw(ctx, []byte(`{"time":1,"self_id":10001000,"post_type":"notice","notice_type":"group_decrease","sub_type":"kick_me","group_id":100200300,"operator_id":1,"user_id":10001000}`)))
			r.logs.wait(t, "removed_from_group", 1)
			r.fake.FailNext("send_", 100)
			require.ErrorIs(t, send(testGroup), channel.ErrKicked)
			r.fake.AddGroup(100200300, "back")
			clk.Advance(61 * time.Second)
			require.NoError(t, send(testGroup), "the refreshed list clears the kick")

			// A ban of the bot: sends that fail meanwhile are "muted".
			require.NoError(t, r.fake.PushRaw(ctx, []byte(`{"time":1700000200,"self_id":10001000,"post_type":"notice","notice_type":"group_ban","sub_type":"ban","group_id":100200300,"operator_id":1,"user_id":10001000,"duration":600}`)))
			require.NoError(t, r.fake.PushRaw(ctx, []byte(`{"time":1,"self_id":10001000,"post_type":"notice","notice_type":"friend_add","user_id":31337}`)))
			s.waitEvent(t, "the marker notice", func(e channel.Event) bool { return e.Notice != nil && e.Notice.UserID == "31337" })
			r.fake.FailNext("send_", 100)
			err = send(testGroup)
			var muted *channel.MutedError
			require.ErrorAs(t, err, &muted)
			require.Equal(t, time.Unix(1700000200+600, 0), muted.Until)
			require.Equal(t, channel.ClassMuted, channel.Classify(err))

			// Invalid input is rejected without a call.
			require.Equal(t, channel.ClassRejected, channel.Classify(send(channel.Chat{Kind: channel.Group, ID: "abc"})))
			require.Equal(t, channel.ClassRejected, channel.Classify(send(channel.Chat{Kind: "channel", ID: "1"})))
			_, err = r.ch.Send(ctx, channel.Outgoing{Chat: testGroup})
			require.Equal(t, channel.ClassRejected, channel.Classify(err))

			// Offline: fail fast.
			require.NoError(t, r.fake.SetOffline(ctx, true))
			s.waitState(t, "offline", 0, func(st channel.State) bool { return st.Connected && !st.Online })
			require.ErrorIs(t, send(testGroup), channel.ErrOffline)
		})
	}
}

// TestHTTPAPIErrors: HTTP statuses of the HTTP API map like retcodes; an
// unreachable API is offline.
func TestHTTPAPIErrors(t *testing.T) {
	t.Parallel()
	r := httpRig(t, onebottest.Config{}, onebot.Config{})
	r.run(t)
	_, err := r.ch.Call(tctx(t), "no_such_action", nil)
	var apiErr *onebot.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 404, apiErr.HTTPStatus)
	require.Equal(t, int64(1404), apiErr.Retcode)
	require.Equal(t, channel.ClassRejected, channel.Classify(err))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeHTTP, URL: "http://" + addr})
	require.NoError(t, err)
	_, err = ch.Call(tctx(t), "get_status", nil)
	require.ErrorIs(t, err, channel.ErrOffline)
	_, err = ch.Send(tctx(t), channel.Outgoing{Chat: testGroup, Text: "x"})
	require.ErrorIs(t, err, channel.ErrOffline, "not running: offline")

	// Wrong token on the HTTP API: definitive (a configuration error).
	r2 := httpRig(t, onebottest.Config{AccessToken: "a"}, onebot.Config{AccessToken: "b"})
	_, err = r2.ch.Call(tctx(t), "get_status", nil)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 403, apiErr.HTTPStatus)
	require.Equal(t, channel.ClassRejected, channel.Classify(err))
}

// TestCapabilities exercises the optional capabilities over every
// transport.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			r := tr.build(t, onebottest.Config{}, onebot.Config{})
			s := r.run(t)
			ctx := tctx(t)
			var c channel.Channel = r.ch
			require.Equal(t, channel.TextLimit{Unit: channel.Runes, Max: 900}, channel.LimitOf(c))
			require.True(t, r.ch.AccountRisk())
			require.Equal(t, "10001000", r.ch.BotID())
			require.Equal(t, channel.State{Platform: "onebot", BotID: "10001000", Connected: true, Online: true}, r.ch.State())

			// MemberLookup.
			r.fake.SetMember(100200300, onebottest.Member{UserID: 4242, Nickname: "alice", Card: "阿丽", Role: "admin", Level: "33"})
			r.fake.SetMember(100200300, onebottest.Member{UserID: 4243, Nickname: "bob"})
			m, err := r.ch.LookupMember(ctx, testGroup, "4242")
			require.NoError(t, err)
			require.Equal(t, channel.Member{UserID: "4242", Name: "阿丽", Role: channel.RoleAdmin, Level: 33, LevelKnown: true}, m)
			m, err = r.ch.LookupMember(ctx, testGroup, "4243")
			require.NoError(t, err)
			require.Equal(t, channel.Member{UserID: "4243", Name: "bob", Role: channel.RoleMember}, m)
			_, err = r.ch.LookupMember(ctx, testGroup, "9999")
			require.Error(t, err)
			call, err := r.fake.WaitCall(ctx, "get_group_member_info")
			require.NoError(t, err)
			require.Equal(t, false, call.Params["no_cache"])

			// ChatLister: groups, then friends (not the bot itself).
			r.fake.AddGroup(700, "seven")
			r.fake.AddFriend(4242, "alice")
			r.fake.AddFriend(10001000, "me")
			chats, err := r.ch.ListChats(ctx)
			require.NoError(t, err)
			require.Equal(t, []channel.Chat{{Kind: channel.Group, ID: "700"}, testGroup, {Kind: channel.Private, ID: "4242"}}, chats)

			// Recaller.
			rc, err := r.ch.Send(ctx, channel.Outgoing{Chat: testGroup, Text: "oops"})
			require.NoError(t, err)
			require.NoError(t, r.ch.Recall(ctx, testGroup, rc.MessageIDs[0]))
			id, _ := strconv.ParseInt(rc.MessageIDs[0], 10, 32)
			rec, ok := r.fake.Message(int32(id))
			require.True(t, ok)
			require.True(t, rec.Recalled)
			require.Error(t, r.ch.Recall(ctx, testGroup, rc.MessageIDs[0]), "already recalled")
			require.Equal(t, channel.ClassRejected, channel.Classify(r.ch.Recall(ctx, testGroup, "not-a-number")))

			// GetMessage.
			rec2, err := r.fake.EmitMessage(ctx, onebottest.Incoming{GroupID: 100200300, UserID: 4242, Nickname: "alice", Message: onebot.Message{text("fetch me")}, Lost: true})
			require.NoError(t, err)
			ev, err := r.ch.GetMessage(ctx, itoa(int64(rec2.ID)))
			require.NoError(t, err)
			require.Equal(t, "fetch me", ev.Text())
			require.Equal(t, testGroup, ev.Chat)
			require.Equal(t, channel.SourceBackfill, ev.Source)

			// ForwardSender.
			frc, err := r.ch.SendForward(ctx, testGroup, []channel.ForwardNode{{Name: "A", UserID: "1", Text: "one"}, {Text: "two"}})
			require.NoError(t, err)
			require.Len(t, frc.MessageIDs, 1)
			sent := r.fake.Sent()
			fw := sent[len(sent)-1]
			require.Equal(t, "send_group_forward_msg", fw.Action)
			require.Equal(t, []onebottest.Node{
				{Name: "A", UserID: "1", Content: onebot.Message{text("one")}},
				{Name: "persona-bot", UserID: "10001000", Content: onebot.Message{text("two")}},
			}, fw.Forward)
			_, err = r.ch.SendForward(ctx, channel.Chat{Kind: channel.Private, ID: "4242"}, []channel.ForwardNode{{Text: "p"}})
			require.NoError(t, err)
			require.Equal(t, "send_private_forward_msg", r.fake.Sent()[len(r.fake.Sent())-1].Action)

			// Typer: private chats only.
			require.NoError(t, r.ch.Typing(ctx, testGroup))
			require.NoError(t, r.ch.Typing(ctx, channel.Chat{Kind: channel.Private, ID: "4242"}))
			require.Equal(t, []int64{4242}, r.fake.Typing())

			// Media and mentions render as segments.
			_, err = r.ch.Send(ctx, channel.Outgoing{Chat: testGroup, Text: "look", Mentions: []string{"4242", "4243"}, Media: []channel.Media{
				{URL: "https://img.example/a.png", MIME: "image/png"},
				{FileID: "voice.amr", MIME: "audio/amr"},
				{URL: "https://v.example/v.mp4", MIME: "video/mp4"},
				{URL: "https://f.example/a.pdf", Name: "a.pdf", MIME: "application/pdf"},
			}})
			require.NoError(t, err)
			sent = r.fake.Sent()
			require.Equal(t, onebot.Message{
				seg("at", "qq", "4242"), seg("at", "qq", "4243"), text(" look"),
				seg("image", "file", "https://img.example/a.png"), seg("record", "file", "voice.amr"),
				seg("video", "file", "https://v.example/v.mp4"), seg("file", "file", "https://f.example/a.pdf", "name", "a.pdf"),
			}, sent[len(sent)-1].Message)
			_, err = r.ch.Send(ctx, channel.Outgoing{Chat: testGroup, Media: []channel.Media{{MIME: "image/png"}}})
			require.Equal(t, channel.ClassRejected, channel.Classify(err), "an attachment without a reference")

			// Raw calls.
			data, err := r.ch.Call(ctx, "get_version_info", nil)
			require.NoError(t, err)
			require.Contains(t, string(data), `"protocol_version":"v11"`)
			_, err = r.ch.Call(ctx, "get_version_info_async", nil)
			require.NoError(t, err)

			evs := s.Events()
			require.Empty(t, evs, "nothing was pushed")
		})
	}
}

// TestTypingUnsupported: an implementation without set_input_status is
// remembered after the first 1404.
func TestTypingUnsupported(t *testing.T) {
	t.Parallel()
	r := reverseRig(t, onebottest.Config{}, onebot.Config{})
	r.run(t)
	ctx := tctx(t)
	r.fake.FailNext("set_input_status", 1404)
	private := channel.Chat{Kind: channel.Private, ID: "4242"}
	require.NoError(t, r.ch.Typing(ctx, private))
	require.NoError(t, r.ch.Typing(ctx, private))
	n := 0
	for _, c := range r.fake.Calls() {
		if c.Action == "set_input_status" {
			n++
		}
	}
	require.Equal(t, 1, n)
	require.Len(t, r.logs.all("typing_unsupported"), 1)
}

// TestStringFormat: with FormatString the adapter sends CQ-code strings
// (escaped) and reads the fake's string-format events.
func TestStringFormat(t *testing.T) {
	t.Parallel()
	r := reverseRig(t, onebottest.Config{Format: onebot.FormatString}, onebot.Config{MessageFormat: onebot.FormatString})
	s := r.run(t)
	ctx := tctx(t)
	rec, err := r.fake.EmitMessage(ctx, onebottest.Incoming{GroupID: 100200300, UserID: 4242, Message: onebot.Message{seg("at", "qq", "10001000"), text(" [a], b & c")}})
	require.NoError(t, err)
	ev := s.waitMessage(t, itoa(int64(rec.ID)))
	require.True(t, ev.ToMe)
	require.Equal(t, " [a], b & c", ev.Text())
	var raw struct {
		Message string `json:"message"`
	}
	require.NoError(t, json.Unmarshal(ev.Raw, &raw))
	require.Equal(t, "[CQ:at,qq=10001000] &#91;a&#93;, b &amp; c", raw.Message)

	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: testGroup, Text: "[x], &y", ReplyTo: ev.MessageID})
	require.NoError(t, err)
	sent, err := r.fake.WaitSent(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "[CQ:reply,id="+ev.MessageID+"]&#91;x&#93;, &amp;y", sent[0].Raw)
	require.Equal(t, onebot.Message{seg("reply", "id", ev.MessageID), text("[x], &y")}, sent[0].Message)
}

// TestHistoryDialects: FetchHistory pages newest first through the whole
// history, without duplicates, in each dialect's parameters, including
// messages whose push was lost (the backfill case).
func TestHistoryDialects(t *testing.T) {
	t.Parallel()
	for _, d := range []onebot.Dialect{onebot.DialectNapCat, onebot.DialectGoCQHTTP, onebot.DialectLagrange} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			r := reverseRig(t, onebottest.Config{Dialect: d}, onebot.Config{HistoryDialect: d})
			s := r.run(t)
			ctx := tctx(t)
			r.fake.SetLosePushes(true)
			var want []string
			for i := range 45 {
				rec, err := r.fake.EmitMessage(ctx, onebottest.Incoming{GroupID: 100200300, UserID: 4242, Nickname: "alice", Message: onebot.Message{text("m" + strconv.Itoa(i))}})
				require.NoError(t, err)
				want = append(want, itoa(int64(rec.ID)))
				if i == 20 {
					_, err := r.ch.Send(ctx, channel.Outgoing{Chat: testGroup, Text: "bot said"})
					require.NoError(t, err)
					want = append(want, itoa(int64(r.fake.Sent()[0].MessageID)))
				}
			}
			r.fake.SetLosePushes(false)
			slices.Reverse(want)

			var got []string
			var self int
			cursor, pages := "", 0
			for {
				page, err := r.ch.FetchHistory(ctx, channel.HistoryQuery{Chat: testGroup, Cursor: cursor, Limit: 20})
				require.NoError(t, err)
				pages++
				require.LessOrEqual(t, len(page.Events), 20)
				var lastSeq int64
				for _, ev := range page.Events {
					require.NoError(t, ev.Validate())
					require.Equal(t, channel.SourceBackfill, ev.Source)
					require.Equal(t, testGroup, ev.Chat)
					require.NotZero(t, ev.Seq)
					if lastSeq != 0 {
						require.Less(t, ev.Seq, lastSeq, "newest first")
					}
					lastSeq = ev.Seq
					if ev.Kind == channel.KindSelf {
						self++
					}
					got = append(got, ev.MessageID)
				}
				if page.Next == "" {
					break
				}
				require.NotEqual(t, cursor, page.Next, "the cursor moves")
				cursor = page.Next
				require.Less(t, pages, 10)
			}
			require.Equal(t, want, got)
			require.Equal(t, 1, self)
			evs := s.Events()
			require.Empty(t, evs, "the lost pushes never arrived live")

			// The parameters follow the dialect.
			var hist []onebottest.Call
			for _, c := range r.fake.Calls() {
				if c.Action == "get_group_msg_history" {
					hist = append(hist, c)
				}
			}
			require.NotEmpty(t, hist)
			last := hist[len(hist)-1].Params
			switch d {
			case onebot.DialectNapCat:
				require.Contains(t, last, "message_seq")
				require.Contains(t, last, "count")
				require.Equal(t, false, last["reverseOrder"])
			case onebot.DialectGoCQHTTP:
				require.Contains(t, last, "message_seq")
				require.NotContains(t, last, "count")
				require.NotContains(t, hist[0].Params, "message_seq", "the first page asks for the latest")
			case onebot.DialectLagrange:
				require.Contains(t, last, "message_id")
				require.NotContains(t, last, "message_seq")
			}

			// Private history.
			rec, err := r.fake.EmitMessage(ctx, onebottest.Incoming{UserID: 4242, Nickname: "alice", Message: onebot.Message{text("dm")}, Lost: true})
			require.NoError(t, err)
			page, err := r.ch.FetchHistory(ctx, channel.HistoryQuery{Chat: channel.Chat{Kind: channel.Private, ID: "4242"}})
			if d == onebot.DialectGoCQHTTP {
				require.Equal(t, channel.ClassRejected, channel.Classify(err), "go-cqhttp has no get_friend_msg_history")
				return
			}
			require.NoError(t, err)
			require.Len(t, page.Events, 1)
			require.Equal(t, itoa(int64(rec.ID)), page.Events[0].MessageID)
			require.Equal(t, channel.Chat{Kind: channel.Private, ID: "4242"}, page.Events[0].Chat)
		})
	}
}

// TestSelfEcho: with NapCat's reportSelfMessage the bot's sends come back
// as KindSelf events in the right chat.
func TestSelfEcho(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			r := tr.build(t, onebottest.Config{ReportSelf: true}, onebot.Config{})
			s := r.run(t)
			ctx := tctx(t)
			for _, chat := range []channel.Chat{testGroup, {Kind: channel.Private, ID: "4242"}} {
				rc, err := r.ch.Send(ctx, channel.Outgoing{Chat: chat, Text: "echo " + chat.String()})
				require.NoError(t, err)
				ev := s.waitMessage(t, rc.MessageIDs[0])
				require.Equal(t, channel.KindSelf, ev.Kind)
				require.Equal(t, chat, ev.Chat)
				require.Equal(t, "echo "+chat.String(), ev.Text())
			}
		})
	}
}

// TestNackRedelivery: over WebSocket a refused event is redelivered by the
// adapter with backoff (the implementation cannot be NACKed), in order.
func TestNackRedelivery(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := reverseRig(t, onebottest.Config{}, onebot.Config{Clock: clk, BackoffMin: time.Second, BackoffMax: time.Minute})
	s := r.run(t)
	ctx := tctx(t)
	s.FailNext(2)
	a, err := r.fake.EmitMessage(ctx, onebottest.Incoming{GroupID: 100200300, UserID: 4242, Message: onebot.Message{text("a")}})
	require.NoError(t, err)
	b, err := r.fake.EmitMessage(ctx, onebottest.Incoming{GroupID: 100200300, UserID: 4242, Message: onebot.Message{text("b")}})
	require.NoError(t, err)
	for i := 1; i <= 2; i++ {
		recs := r.logs.wait(t, "event_nacked", i)
		d := recs[i-1].attrs["delay"].(time.Duration)
		within(t, time.Second<<(i-1), d, "retry delay")
		clk.Advance(d)
	}
	s.waitMessage(t, itoa(int64(b.ID)))
	evs := s.Events()
	require.Equal(t, []string{itoa(int64(a.ID)), itoa(int64(b.ID))}, []string{evs[0].MessageID, evs[1].MessageID}, "order kept")
}

// TestConfig: New validates and fills defaults.
func TestConfig(t *testing.T) {
	t.Parallel()
	ch, err := onebot.New(onebot.Config{})
	require.NoError(t, err)
	require.Equal(t, "onebot", ch.Name())
	require.Equal(t, onebot.ModeReverseWS, ch.Mode())
	require.Empty(t, ch.BotID())

	ch, err = onebot.New(onebot.Config{Mode: onebot.ModeForwardWS, URL: "wss://example.com/ws", SelfID: "123", Platform: "qq"})
	require.NoError(t, err)
	require.Equal(t, "qq", ch.Name())
	require.Equal(t, "123", ch.BotID())

	for _, tc := range []struct {
		cfg  onebot.Config
		want string
	}{
		{onebot.Config{Mode: "carrier-pigeon"}, "Mode"},
		{onebot.Config{Mode: onebot.ModeForwardWS}, "URL is required"},
		{onebot.Config{Mode: onebot.ModeForwardWS, URL: "http://x"}, "ws or wss"},
		{onebot.Config{Mode: onebot.ModeForwardWS, URL: "ws://x", Addr: ":1"}, "Addr"},
		{onebot.Config{Mode: onebot.ModeHTTP, URL: "ws://x"}, "http or https"},
		{onebot.Config{Mode: onebot.ModeHTTP, URL: "http://"}, "with a host"},
		{onebot.Config{URL: "ws://x"}, "URL is not used"},
		{onebot.Config{Secret: "s"}, "Secret"},
		{onebot.Config{SelfID: "abc"}, "SelfID"},
		{onebot.Config{Platform: "a:b"}, "Platform"},
		{onebot.Config{MessageFormat: "xml"}, "MessageFormat"},
		{onebot.Config{HistoryDialect: "shamrock"}, "HistoryDialect"},
		{onebot.Config{CallTimeout: -time.Second}, "CallTimeout"},
		{onebot.Config{BackoffMin: time.Minute, BackoffMax: time.Second}, "BackoffMax"},
		{onebot.Config{ReadLimit: -1}, "ReadLimit"},
		{onebot.Config{MediaRoot: "relative/dir"}, "MediaRoot"},
		{onebot.Config{Addr: ":0", Listener: &net.TCPListener{}}, "not both"},
	} {
		_, err := onebot.New(tc.cfg)
		require.Error(t, err, "%+v", tc.cfg)
		require.Contains(t, err.Error(), tc.want)
		require.True(t, strings.HasPrefix(err.Error(), "onebot: invalid config"))
	}
	// All problems are reported at once.
	_, err = onebot.New(onebot.Config{Mode: onebot.ModeHTTP, SelfID: "x", ReadLimit: -5})
	require.ErrorContains(t, err, "URL is required")
	require.ErrorContains(t, err, "SelfID")
	require.ErrorContains(t, err, "ReadLimit")
}

// TestRunTwice: a second concurrent Run is refused; Run needs a sink.
func TestRunTwice(t *testing.T) {
	t.Parallel()
	r := reverseRig(t, onebottest.Config{}, onebot.Config{})
	r.run(t)
	require.ErrorIs(t, r.ch.Run(tctx(t), newSink()), onebot.ErrRunning)
	require.ErrorIs(t, r.ch.Run(tctx(t), nil), onebot.ErrNoSink)

	// A Channel with a Listener runs once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	once, err := onebot.New(onebot.Config{Listener: ln})
	require.NoError(t, err)
	ctx1, cancel1 := context.WithCancel(t.Context())
	cancel1()
	require.NoError(t, once.Run(ctx1, newSink()))
	require.ErrorIs(t, once.Run(ctx1, newSink()), onebot.ErrListenerUsed)

	// A forward-WS channel with a cancelled context returns at once.
	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeForwardWS, URL: "ws://127.0.0.1:1/"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, ch.Run(ctx, newSink()), "a cancelled Run returns nil")
	rec := httptest.NewRecorder()
	ch.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusNotFound, rec.Code, "a forward-WS adapter serves nothing")
}
