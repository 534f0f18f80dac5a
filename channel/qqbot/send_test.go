package qqbot_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
	"github.com/personakit/persona/clock"
)

// started runs a gateway adapter against srv and waits until it is online.
func started(t *testing.T, srv *qqbottest.Server, mod func(*qqbot.Config)) (*qqbot.Channel, *recSink) {
	t.Helper()
	ch := newChannel(t, srv, mod)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	return ch, sink
}

func rejectCode(t *testing.T, err error) string {
	t.Helper()
	var re *channel.RejectedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, channel.ClassRejected, channel.Classify(err))
	return re.Code
}

// Replies carry the inbound msg_id and msg_seq 1, 2, …; at most five per
// message; ReplyTo picks the message.
func TestPassiveRepliesInGroup(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	p1, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "first"})
	require.NoError(t, err)
	p2, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "second"})
	require.NoError(t, err)
	sink.waitEvents(t, 2)

	rc, err := ch.Send(ctx, channel.Outgoing{Chat: group, Text: "to the first", ReplyTo: p1.ID, IdempotencyKey: "k1"})
	require.NoError(t, err)
	for i := 2; i <= 5; i++ {
		_, err := ch.Send(ctx, channel.Outgoing{Chat: group, Text: "more", ReplyTo: p1.ID, IdempotencyKey: "k" + string(rune('0'+i))})
		require.NoError(t, err)
	}
	// The sixth reply to p1 goes to p2, the newest that still takes one.
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "sixth", ReplyTo: p1.ID, IdempotencyKey: "k6"})
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 6)
	require.Equal(t, []string{sent[0].ID}, rc.MessageIDs)
	for i := range 5 {
		require.Equal(t, p1.ID, sent[i].MsgID)
		require.Equal(t, i+1, sent[i].MsgSeq)
		require.Equal(t, 0, sent[i].MsgType)
	}
	require.Equal(t, p2.ID, sent[5].MsgID)
	require.Equal(t, 1, sent[5].MsgSeq)
	require.Equal(t, "to the first", sent[0].Content)

	for i := 2; i <= 5; i++ {
		_, err := ch.Send(ctx, channel.Outgoing{Chat: group, Text: "more"})
		require.NoError(t, err)
	}
	calls := len(srv.Calls())
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "one too many"})
	require.Equal(t, qqbot.RejectReplyLimit, rejectCode(t, err))
	require.Len(t, srv.Calls(), calls, "no call for a send the count forbids")
}

func TestReplyWindows(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	// Heartbeats stay out of the way of the clock jumps.
	srv := newFake(t, qqbottest.Config{Clock: clk, HeartbeatInterval: 24 * time.Hour})
	ch, sink := started(t, srv, func(c *qqbot.Config) { c.Clock = clk })
	ctx := tctx(t)
	_, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "group"})
	require.NoError(t, err)
	_, err = srv.Push(ctx, qqbottest.Incoming{Chat: aliceChat, From: alice, Text: "private"})
	require.NoError(t, err)
	sink.waitEvents(t, 2)

	clk.Advance(4*time.Minute + 59*time.Second)
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "just in time"})
	require.NoError(t, err)
	clk.Advance(time.Second)
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "too late"})
	require.Equal(t, qqbot.RejectWindowExpired, rejectCode(t, err))

	clk.Advance(54 * time.Minute)
	_, err = ch.Send(ctx, channel.Outgoing{Chat: aliceChat, Text: "59 minutes on"})
	require.NoError(t, err)
	clk.Advance(time.Minute)
	_, err = ch.Send(ctx, channel.Outgoing{Chat: aliceChat, Text: "an hour on"})
	require.Equal(t, qqbot.RejectWindowExpired, rejectCode(t, err))
	require.Len(t, srv.Sent(), 2)
}

func TestNoInboundMessage(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, _ := started(t, srv, nil)
	_, err := ch.Send(tctx(t), channel.Outgoing{Chat: group, Text: "hello?"})
	require.Equal(t, qqbot.RejectNoInbound, rejectCode(t, err))

	// With ActiveMessages the platform decides: it refuses active messages.
	ch2, _ := started(t, srv, func(c *qqbot.Config) { c.ActiveMessages = true })
	_, err = ch2.Send(tctx(t), channel.Outgoing{Chat: group, Text: "hello?"})
	require.Equal(t, "40034102", rejectCode(t, err))
	require.Empty(t, srv.Sent())
}

// A chunk whose first attempt reached the platform but whose answer was
// lost is sent again with the same msg_seq; the platform refuses the copy
// as a duplicate, and Send reports the chunk delivered. Another chunk gets
// a new msg_seq.
func TestRetriedChunkKeepsMsgSeq(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: aliceChat, From: alice, Text: "hi"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)

	srv.FailNextSend(qqbottest.Failure{Drop: true, Deliver: true})
	out := channel.Outgoing{Chat: aliceChat, Text: "chunk one", IdempotencyKey: "fp-1"}
	_, err = ch.Send(ctx, out)
	require.Error(t, err)
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
	rc, err := ch.Send(ctx, out)
	require.NoError(t, err)
	require.Equal(t, []string{p.ID + "#1"}, rc.MessageIDs, "delivered earlier; its id was lost")

	_, err = ch.Send(ctx, channel.Outgoing{Chat: aliceChat, Text: "chunk two", IdempotencyKey: "fp-2"})
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 2, "each chunk reached the chat once")
	require.Equal(t, "chunk one", sent[0].Content)
	require.Equal(t, 1, sent[0].MsgSeq)
	require.Equal(t, "chunk two", sent[1].Content)
	require.Equal(t, 2, sent[1].MsgSeq)
}

// The idempotency key names one chunk of one reply: sent again after a
// success it is not posted again (its id comes back); after a definitive
// refusal, which delivered nothing, it goes out with the msg_seq it had.
func TestSameKeyIsOneChunk(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	_, err := srv.Push(ctx, qqbottest.Incoming{Chat: aliceChat, From: alice, Text: "hi"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	out := channel.Outgoing{Chat: aliceChat, Text: "ok", IdempotencyKey: "same"}
	rc1, err := ch.Send(ctx, out)
	require.NoError(t, err)
	rc2, err := ch.Send(ctx, out)
	require.NoError(t, err)
	require.Equal(t, rc1.MessageIDs, rc2.MessageIDs)
	require.Len(t, srv.Sent(), 1, "a delivered chunk is not sent again")

	other := channel.Outgoing{Chat: aliceChat, Text: "ok", IdempotencyKey: "other"}
	srv.FailNextSend(qqbottest.Failure{Status: 400, Code: 11253})
	_, err = ch.Send(ctx, other)
	require.Error(t, err)
	_, err = ch.Send(ctx, other)
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, []int{1, 2}, []int{sent[0].MsgSeq, sent[1].MsgSeq}, "the refused part keeps its msg_seq")
}

// The reply ledger in StateDir survives a restart: the same chunk keeps
// its msg_seq, a new one gets the next.
func TestMsgSeqSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := newFake(t, qqbottest.Config{})
	ctx := tctx(t)
	ch1, sink := started(t, srv, func(c *qqbot.Config) { c.StateDir = dir })
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "hi"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	srv.FailNextSend(qqbottest.Failure{Drop: true, Deliver: true})
	_, err = ch1.Send(ctx, channel.Outgoing{Chat: group, Text: "chunk one", IdempotencyKey: "fp-1"})
	require.Error(t, err)

	ch2 := newChannel(t, srv, func(c *qqbot.Config) { c.StateDir = dir })
	rc, err := ch2.Send(ctx, channel.Outgoing{Chat: group, Text: "chunk one", IdempotencyKey: "fp-1"})
	require.NoError(t, err)
	require.Equal(t, []string{p.ID + "#1"}, rc.MessageIDs)
	_, err = ch2.Send(ctx, channel.Outgoing{Chat: group, Text: "chunk two", IdempotencyKey: "fp-2"})
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, 2, sent[1].MsgSeq)
}

func TestSendErrorClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		f     qqbottest.Failure
		class channel.ErrorClass
		check func(t *testing.T, err error)
	}{
		{"429", qqbottest.Failure{Status: 429, RetryAfter: 7}, channel.ClassRateLimited, func(t *testing.T, err error) {
			var rl *channel.RateLimitedError
			require.ErrorAs(t, err, &rl)
			require.Equal(t, 7*time.Second, rl.RetryAfter)
		}},
		{"22009", qqbottest.Failure{Status: 400, Code: 22009}, channel.ClassRateLimited, nil},
		{"500", qqbottest.Failure{Status: 500}, channel.ClassTransient, nil},
		{"504", qqbottest.Failure{Status: 504, Code: 12003}, channel.ClassTransient, nil},
		{"11242 retry once", qqbottest.Failure{Status: 400, Code: 11242}, channel.ClassTransient, nil},
		{"304082 media retry", qqbottest.Failure{Status: 400, Code: 304082}, channel.ClassTransient, nil},
		{"11253 permission", qqbottest.Failure{Status: 400, Code: 11253}, channel.ClassRejected, nil},
		{"11265 banned", qqbottest.Failure{Status: 403, Code: 11265}, channel.ClassRejected, nil},
		{"50006 empty", qqbottest.Failure{Status: 400, Code: 50006}, channel.ClassRejected, nil},
		{"304027 expired", qqbottest.Failure{Status: 400, Code: 304027}, channel.ClassRejected, func(t *testing.T, err error) {
			require.Equal(t, "304027", rejectCode(t, err))
		}},
		{"40054005 duplicate", qqbottest.Failure{Status: 400, Code: 40054005}, channel.ClassRejected, nil},
		{"1100104 group gone", qqbottest.Failure{Status: 400, Code: 1100104}, channel.ClassKicked, nil},
		{"304018 not connected", qqbottest.Failure{Status: 400, Code: 304018}, channel.ClassOffline, nil},
		{"404 no code", qqbottest.Failure{Status: 404}, channel.ClassRejected, func(t *testing.T, err error) {
			require.Equal(t, "http_404", rejectCode(t, err))
		}},
		{"dropped", qqbottest.Failure{Drop: true}, channel.ClassTransient, nil},
	}
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := len(sink.Events())
			_, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "q"})
			require.NoError(t, err)
			sink.waitEvents(t, n+1)
			srv.FailNextSend(tc.f)
			_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "a"})
			require.Error(t, err)
			require.Equal(t, tc.class, channel.Classify(err), "%v", err)
			require.NotContains(t, err.Error(), srv.Secret())
			if tc.check != nil {
				tc.check(t, err)
			}
		})
	}
}

func TestSendLocalChecks(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch := newChannel(t, srv, nil)
	ctx := tctx(t)
	_, err := ch.Send(ctx, channel.Outgoing{Chat: group})
	require.Equal(t, qqbot.RejectEmpty, rejectCode(t, err))
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: strings.Repeat("字", 667)}) // 2001 bytes
	require.Equal(t, qqbot.RejectTextTooLong, rejectCode(t, err))
	for _, bad := range []channel.Chat{{Kind: channel.Group, ID: "a/b"}, {Kind: channel.Private, ID: ""}, {Kind: "x", ID: "1"}, {Kind: channel.Group, ID: "channel:"}} {
		_, err = ch.Send(ctx, channel.Outgoing{Chat: bad, Text: "x"})
		require.Equal(t, qqbot.RejectBadChat, rejectCode(t, err), "%v", bad)
	}
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "x", Media: []channel.Media{{FileID: "abc"}}})
	require.ErrorIs(t, err, channel.ErrMediaInvalid)
	require.Equal(t, channel.TextLimit{Unit: channel.Bytes, Max: 2000}, ch.TextLimit())
	require.Empty(t, srv.Calls())
}

// Guild channel messages: mentions as "<@id>", the text escaped, no
// msg_seq; markdown when configured; media uploaded on v2 routes.
func TestSendShapes(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	pc, err := srv.Push(ctx, qqbottest.Incoming{Chat: guildChan, From: bob, Text: "hey", MentionBot: true})
	require.NoError(t, err)
	pg, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "pic please"})
	require.NoError(t, err)
	sink.waitEvents(t, 2)

	_, err = ch.Send(ctx, channel.Outgoing{Chat: guildChan, Text: "a<b & c>d", Mentions: []string{"1234", "not-a-guild-id"}})
	require.NoError(t, err)
	rc, err := ch.Send(ctx, channel.Outgoing{Chat: group, Text: "here", Media: []channel.Media{{URL: "https://example.com/cat.png"}}, IdempotencyKey: "fp"})
	require.NoError(t, err)
	require.Len(t, rc.MessageIDs, 2)
	_, err = ch.Send(ctx, channel.Outgoing{Chat: guildChan, Media: []channel.Media{{URL: "https://example.com/a.jpg", MIME: "image/jpeg"}}})
	require.NoError(t, err)
	_, err = ch.Send(ctx, channel.Outgoing{Chat: guildChan, Media: []channel.Media{{URL: "https://example.com/a.mp4"}}})
	require.ErrorIs(t, err, channel.ErrMediaInvalid)

	sent := srv.Sent()
	require.Len(t, sent, 4)
	require.Equal(t, "channel", sent[0].Route)
	require.Equal(t, "<@1234> a&lt;b &amp; c&gt;d", sent[0].Content)
	require.Equal(t, pc.ID, sent[0].MsgID)
	require.Zero(t, sent[0].MsgSeq)
	require.Equal(t, 0, sent[1].MsgType)
	require.Equal(t, 7, sent[2].MsgType)
	require.NotEmpty(t, sent[2].FileInfo)
	require.Equal(t, pg.ID, sent[2].MsgID)
	require.Equal(t, 2, sent[2].MsgSeq, "the media message is the second reply")
	require.Equal(t, "https://example.com/a.jpg", sent[3].Image)

	got, err := srv.Received(ctx)
	require.NoError(t, err)
	require.Equal(t, "a<b & c>d", got[0].Text)
	require.Equal(t, []string{"1234"}, got[0].Mentions)

	md, mdSink := started(t, srv, func(c *qqbot.Config) { c.Markdown = true })
	pm, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "markdown please"})
	require.NoError(t, err)
	mdSink.waitEvents(t, 1)
	_, err = md.Send(ctx, channel.Outgoing{Chat: group, Text: "**bold**", ReplyTo: pm.ID})
	require.NoError(t, err)
	last := srv.Sent()[len(srv.Sent())-1]
	require.True(t, last.Markdown)
	require.Equal(t, 2, last.MsgType)
	require.Equal(t, "**bold**", last.Content)
	var body map[string]json.RawMessage
	calls := srv.Calls()
	require.NoError(t, json.Unmarshal(calls[len(calls)-1].Body, &body))
	require.JSONEq(t, `{"content":"**bold**"}`, string(body["markdown"]))
}

func TestOfflineFailsFast(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	require.NoError(t, srv.SetOffline(ctx, true))
	sink.waitOnline(t, false)
	calls := len(srv.Calls())
	_, err := ch.Send(ctx, channel.Outgoing{Chat: group, Text: "x"})
	require.ErrorIs(t, err, channel.ErrOffline)
	require.Len(t, srv.Calls(), calls)
}

func TestFetchMedia(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	_, err := srv.Push(ctx, qqbottest.Incoming{Chat: aliceChat, From: alice, Attachments: []qqbottest.Attachment{
		{ContentType: "image/jpeg", Filename: "B43A.jpg", URL: "https://multimedia.nt.qq.com.cn/download?appid=1406&fileid=abc", Size: 53851, Width: 520, Height: 524},
		{ContentType: "voice", Filename: "v.amr", URL: "multimedia.nt.qq.com.cn/voice/1", Size: 1000},
	}})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)[0]
	require.True(t, ev.MediaOnly())
	require.Len(t, ev.Segments, 2)
	img := ev.Segments[0]
	require.Equal(t, channel.SegImage, img.Type)
	require.Equal(t, channel.Media{URL: "https://multimedia.nt.qq.com.cn/download?appid=1406&fileid=abc", Name: "B43A.jpg", MIME: "image/jpeg", Size: 53851}, *img.Media)
	require.Equal(t, channel.SegVoice, ev.Segments[1].Type)
	require.Equal(t, "https://multimedia.nt.qq.com.cn/voice/1", ev.Segments[1].Media.URL, "the scheme the platform leaves out is added")

	mc, err := ch.FetchMedia(ctx, ev.Chat, *img.Media, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Nil(t, mc.Body)
	require.Equal(t, img.Media.URL, mc.URL)
	require.Equal(t, int64(53851), mc.Size)
	require.Equal(t, "image/jpeg", mc.MIME)

	_, err = ch.FetchMedia(ctx, ev.Chat, *img.Media, channel.MediaRequest{MaxBytes: 1000})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge)
	_, err = ch.FetchMedia(ctx, ev.Chat, channel.Media{FileID: "x"}, channel.MediaRequest{})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable)
	_, err = ch.FetchMedia(ctx, ev.Chat, channel.Media{URL: "file:///etc/passwd"}, channel.MediaRequest{})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable)
}

func TestTokenRetryOn401(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	_, err := srv.Push(ctx, qqbottest.Incoming{Chat: aliceChat, From: alice, Text: "hi"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	old := srv.CurrentToken()
	srv.RevokeTokens()
	_, err = ch.Send(ctx, channel.Outgoing{Chat: aliceChat, Text: "still here"})
	require.NoError(t, err)
	require.NotEqual(t, old, srv.CurrentToken())
	calls := srv.Calls()
	require.Equal(t, "QQBot "+old, calls[len(calls)-2].Auth, "the refused call")
	require.Equal(t, "QQBot "+srv.CurrentToken(), calls[len(calls)-1].Auth, "retried once with a new token")
	require.Len(t, srv.Sent(), 1)
}
