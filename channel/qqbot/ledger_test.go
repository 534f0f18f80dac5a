package qqbot_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
	"github.com/personakit/persona/clock"
)

func countContent(srv *qqbottest.Server, content string) int {
	n := 0
	for _, m := range srv.Sent() {
		if m.Content == content {
			n++
		}
	}
	return n
}

// A chunk with text and a picture whose picture failed is sent again: the
// text, delivered the first time, is not posted again; its id comes back
// with the picture's.
func TestResendSkipsDeliveredParts(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "pic please"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	out := channel.Outgoing{Chat: group, Text: "here it is", ReplyTo: p.ID, IdempotencyKey: "turn1-slot0",
		Media: []channel.Media{{URL: "https://example.com/a.png", MIME: "image/png"}}}
	srv.FailSendAfter(1, qqbottest.Failure{Status: 500})
	rc, err := ch.Send(ctx, out)
	require.Error(t, err)
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
	require.Len(t, rc.MessageIDs, 1, "the text went out")

	rc2, err := ch.Send(ctx, out)
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, 1, countContent(srv, "here it is"), "the text was delivered once")
	require.Equal(t, []int{1, 2}, []int{sent[0].MsgSeq, sent[1].MsgSeq})
	require.Equal(t, []string{sent[0].ID, sent[1].ID}, rc2.MessageIDs)
}

// A chunk whose answer was lost is retried after its message dropped out
// of the ledger's 16 per chat: it goes to the same msg_id and msg_seq, so
// the platform refuses the copy, and it is delivered once.
func TestRetryOutlivesPruning(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	now := time.Now()
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "q", Time: now.Add(-100 * time.Second)})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	out := channel.Outgoing{Chat: group, Text: "answer", ReplyTo: p.ID, IdempotencyKey: "K"}
	srv.FailNextSend(qqbottest.Failure{Drop: true, Deliver: true})
	_, err = ch.Send(ctx, out)
	require.Error(t, err)
	for i := range 16 {
		_, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: fmt.Sprint("m", i), Time: now.Add(time.Duration(i-90) * time.Second)})
		require.NoError(t, err)
	}
	sink.waitEvents(t, 17)
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "other", IdempotencyKey: "other"}) // saves, and so prunes
	require.NoError(t, err)
	rc, err := ch.Send(ctx, out)
	require.NoError(t, err)
	require.Equal(t, []string{p.ID + "#1"}, rc.MessageIDs)
	require.Equal(t, 1, countContent(srv, "answer"), "the retried chunk was delivered once")
}

// Past the reply window, a chunk that may have been delivered is not sent
// to a newer message (RejectDeliveryUnknown); one whose attempts certainly
// delivered nothing is.
func TestRetryPastWindow(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	srv := newFake(t, qqbottest.Config{Clock: clk, HeartbeatInterval: 24 * time.Hour})
	ch, sink := started(t, srv, func(c *qqbot.Config) { c.Clock = clk })
	ctx := tctx(t)
	_, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "q"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	lost := channel.Outgoing{Chat: group, Text: "lost", IdempotencyKey: "lost"}
	srv.FailNextSend(qqbottest.Failure{Drop: true, Deliver: true})
	_, err = ch.Send(ctx, lost)
	require.Error(t, err)
	limited := channel.Outgoing{Chat: group, Text: "limited", IdempotencyKey: "limited"}
	srv.FailNextSend(qqbottest.Failure{Status: 429})
	_, err = ch.Send(ctx, limited)
	require.Equal(t, channel.ClassRateLimited, channel.Classify(err))

	clk.Advance(6 * time.Minute)
	p2, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "later"})
	require.NoError(t, err)
	sink.waitEvents(t, 2)
	_, err = ch.Send(ctx, lost)
	require.Equal(t, qqbot.RejectDeliveryUnknown, rejectCode(t, err))
	_, err = ch.Send(ctx, limited)
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, "lost", sent[0].Content)
	require.Equal(t, "limited", sent[1].Content)
	require.Equal(t, p2.ID, sent[1].MsgID)
}

// A failed media upload takes none of the message's replies: the upload
// comes before the msg_seq.
func TestFailedUploadTakesNoReply(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	target, err := url.Parse(srv.URL())
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var fails atomic.Int32
	fails.Store(4)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/files") && fails.Add(-1) >= 0 {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"code":0,"message":"boom"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	ch, sink := started(t, srv, func(c *qqbot.Config) { c.APIBase = front.URL })
	ctx := tctx(t)
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "q"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	for i := range 4 {
		_, err = ch.Send(ctx, channel.Outgoing{Chat: group, ReplyTo: p.ID, IdempotencyKey: fmt.Sprint("M", i),
			Media: []channel.Media{{URL: "https://example.com/a.png", MIME: "image/png"}}})
		require.Equal(t, channel.ClassTransient, channel.Classify(err))
	}
	for i := range 5 {
		_, err = ch.Send(ctx, channel.Outgoing{Chat: group, ReplyTo: p.ID, Text: "t", IdempotencyKey: fmt.Sprint("T", i)})
		require.NoError(t, err, "reply %d", i+1)
	}
	for _, m := range srv.Sent() {
		require.Equal(t, p.ID, m.MsgID)
	}
}

// A 2xx answer with a business code is classified like a non-2xx one; a
// 202 "async success" is delivered and not sent again.
func TestSuccessStatusWithCode(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "q"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)

	srv.FailNextSend(qqbottest.Failure{Status: 200, Code: 11253})
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "a", IdempotencyKey: "a"})
	require.Equal(t, "11253", rejectCode(t, err))
	srv.FailNextSend(qqbottest.Failure{Status: 200, Code: qqbottest.CodeMsgLimit})
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "b", IdempotencyKey: "b"})
	require.Equal(t, channel.ClassRateLimited, channel.Classify(err))

	async := channel.Outgoing{Chat: group, Text: "c", IdempotencyKey: "c"}
	srv.FailNextSend(qqbottest.Failure{Status: 202, Code: 304099, Deliver: true})
	rc, err := ch.Send(ctx, async)
	require.NoError(t, err)
	require.Len(t, rc.MessageIDs, 1)
	rc2, err := ch.Send(ctx, async)
	require.NoError(t, err)
	require.Equal(t, rc.MessageIDs, rc2.MessageIDs)
	require.Equal(t, 1, countContent(srv, "c"))
	require.Len(t, srv.Sent(), 1)
	require.Equal(t, p.ID, srv.Sent()[0].MsgID)
}

// 22009 is the platform's frequency limit (the docs' error codes), not the end of
// a message's replies: the retry keeps the msg_seq and the message takes
// its five replies.
func TestMsgLimitIsARateLimit(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch, sink := started(t, srv, nil)
	ctx := tctx(t)
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: group, From: alice, Text: "q"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	out := channel.Outgoing{Chat: group, Text: "first", ReplyTo: p.ID, IdempotencyKey: "k0"}
	srv.FailNextSend(qqbottest.Failure{Status: 400, Code: qqbottest.CodeMsgLimit})
	_, err = ch.Send(ctx, out)
	require.Equal(t, channel.ClassRateLimited, channel.Classify(err))
	_, err = ch.Send(ctx, out)
	require.NoError(t, err)
	for i := 1; i < 5; i++ {
		_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "more", ReplyTo: p.ID, IdempotencyKey: fmt.Sprint("k", i)})
		require.NoError(t, err)
	}
	_, err = ch.Send(ctx, channel.Outgoing{Chat: group, Text: "sixth", ReplyTo: p.ID, IdempotencyKey: "k5"})
	require.Equal(t, qqbot.RejectReplyLimit, rejectCode(t, err))
	sent := srv.Sent()
	require.Len(t, sent, 5)
	for i, m := range sent {
		require.Equal(t, i+1, m.MsgSeq)
	}
}

// Run returns only after the connection's read and heartbeat goroutines
// ended. Not parallel: no other adapter runs while the stacks are read.
func TestRunWaitsForItsGoroutines(t *testing.T) {
	srv := newFake(t, qqbottest.Config{HeartbeatInterval: 20 * time.Millisecond})
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	stop := run(t, ch, sink)
	sink.waitOnline(t, true)
	for range 3 {
		srv.DropConnection(4009, "x")
		sink.waitOnline(t, false)
		sink.waitOnline(t, true)
	}
	require.NoError(t, stop())
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	require.NotContains(t, stacks, "qqbot.(*gatewayConn).readLoop")
	require.NotContains(t, stacks, "qqbot.(*runner).heartbeat")
}
