package feishu_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
	"github.com/personakit/persona/clock"
)

// advance waits until someone sleeps on clk, then moves it by d.
func advance(t *testing.T, clk *clock.Fake, d time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return clk.Pending() > 0 }, waitTimeout, time.Millisecond, "no timer to advance")
	clk.Advance(d)
}

func newClock() *clock.Fake { return clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

// TestLongConnectionPingsAndAcks: pings at the server's interval on the
// injected clock; each event is answered only after HandleEvent
// returned, with code 200 and biz_rt.
func TestLongConnectionPingsAndAcks(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newFake(t, feishutest.Config{Clock: clk, PingInterval: 30 * time.Second})
	ch := newChannel(t, srv, feishu.ModeWebSocket, func(c *feishu.Config) { c.Clock = clk })
	sink := newRecSink()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	sink.SetHandler(func(ctx context.Context, ev channel.Event) error {
		entered <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	run(t, ch, sink)
	sink.waitOnline(t, true)
	require.Eventually(t, func() bool { return srv.Pings() == 1 }, waitTimeout, time.Millisecond, "a ping on connect")
	advance(t, clk, 29*time.Second)
	require.Never(t, func() bool { return srv.Pings() > 1 }, 20*time.Millisecond, time.Millisecond)
	clk.Advance(time.Second)
	require.Eventually(t, func() bool { return srv.Pings() == 2 }, waitTimeout, time.Millisecond, "the server's interval")

	ctx := tctx(t)
	done := make(chan error, 1)
	go func() {
		_, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "hello"})
		done <- err
	}()
	<-entered
	require.Empty(t, srv.Acks(), "no answer while HandleEvent runs")
	close(release)
	require.NoError(t, <-done)
	acks := srv.Acks()
	require.Len(t, acks, 1)
	require.Equal(t, 200, acks[0].Code)
	require.NotEmpty(t, acks[0].BizRT)
	ev := sink.waitEvents(t, 1)[0]
	require.Equal(t, "hello", ev.Text())
	require.True(t, clk.Now().Equal(ev.Time), "create_time from the platform: %s", ev.Time)
}

// TestLongConnectionNackRedelivers: a refused event is answered 500 and
// delivered again.
func TestLongConnectionNackRedelivers(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, feishu.ModeWebSocket, func(c *feishu.Config) { c.Logger = log })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	sink.FailNext(1)
	p, err := srv.Push(tctx(t), feishutest.Incoming{From: alice, Text: "private, refused once"})
	require.ErrorIs(t, err, feishutest.ErrNotAcknowledged)
	ev := sink.waitEvents(t, 1)[0]
	require.Equal(t, p.MessageID, ev.MessageID)
	require.Equal(t, channel.Chat{Kind: channel.Private, ID: alice.OpenID}, ev.Chat)
	require.Eventually(t, func() bool { return len(srv.Acks()) == 2 }, waitTimeout, time.Millisecond)
	var codes []int
	for _, a := range srv.Acks() {
		codes = append(codes, a.Code)
	}
	require.Equal(t, []int{500, 200}, codes)
	require.Contains(t, buf.String(), "feishu_event_nacked")
}

// TestLongConnectionFragments: an event split over several frames is
// reassembled (and answered once).
func TestLongConnectionFragments(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{FragmentSize: 64})
	ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	text := strings.Repeat("片段", 200)
	_, err := srv.Push(tctx(t), feishutest.Incoming{ChatID: group, From: alice, Text: text})
	require.NoError(t, err)
	require.Equal(t, text, sink.waitEvents(t, 1)[0].Text())
	require.Len(t, srv.Acks(), 1)
}

// TestLongConnectionBadFrames: malformed and unknown frames are logged
// and dropped; the connection stays up and the next event arrives.
func TestLongConnectionBadFrames(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, feishu.ModeWebSocket, func(c *feishu.Config) { c.Logger, c.MaxBodyBytes = log, 1<<14 })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	require.NoError(t, srv.WaitConnected(ctx, 1))
	data := func(headers []feishutest.FrameHeader, payload string) []byte {
		return feishutest.EncodeFrame(feishutest.Frame{SeqID: srv.NextSeq(), LogID: 1, Service: 1, Method: 1, Headers: headers, Payload: []byte(payload)})
	}
	ev := func(id, sum, seq string) []feishutest.FrameHeader {
		return []feishutest.FrameHeader{{Key: "type", Value: "event"}, {Key: "message_id", Value: id}, {Key: "sum", Value: sum}, {Key: "seq", Value: seq}}
	}
	frames := []struct {
		data []byte
		text bool
		log  string
	}{
		{[]byte("hello"), true, "text message"},
		{[]byte{0x08, 0x80}, false, "malformed frame"},
		{feishutest.EncodeFrame(feishutest.Frame{SeqID: 1, LogID: 1, Method: 7}), false, "unknown frame method"},
		{data([]feishutest.FrameHeader{{Key: "type", Value: "mystery"}}, "{}"), false, "unknown data frame type"},
		{data([]feishutest.FrameHeader{{Key: "type", Value: "card"}}, "{}"), false, "card callback"},
		{data(ev("f1", "x", "0"), "{}"), false, "malformed sum or seq"},
		{data(ev("f2", "2", "5"), "{}"), false, "seq out of range"},
		{data(ev("", "2", "0"), "{}"), false, "fragment without message_id"},
		{data(ev("f3", "1", "0"), strings.Repeat("x", 1<<14+1)), false, "larger than MaxBodyBytes"},
		{data(ev("bad-json", "1", "0"), "{not json"), false, "malformed JSON"},
		{data(ev("bad-utf8", "1", "0"), "{\"schema\":\"2.0\xff\"}"), false, "not UTF-8"},
		{data(ev("no-header", "1", "0"), `{"schema":"2.0"}`), false, "no header"},
		{data(ev("other-type", "1", "0"), `{"schema":"2.0","header":{"event_type":"contact.user.created_v3"}}`), false, "unsupported event type"},
	}
	for _, f := range frames {
		require.NoError(t, srv.SendRawFrame(ctx, f.data, f.text))
		waitLog(t, buf, f.log)
	}
	_, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "still here"})
	require.NoError(t, err)
	require.Equal(t, "still here", sink.waitEvents(t, 1)[0].Text())
	open, accepted := srv.Connections()
	require.Equal(t, 1, open)
	require.Equal(t, 1, accepted, "no reconnect for bad frames")
	codes := map[string]int{}
	for _, a := range srv.Acks() {
		codes[a.MessageID] = a.Code
	}
	require.Equal(t, 400, codes["bad-json"])
	require.Equal(t, 400, codes["bad-utf8"])
	require.Equal(t, 400, codes["no-header"])
	require.Equal(t, 200, codes["other-type"], "an unsupported event is acknowledged")
	require.Len(t, sink.Received(), 1)
}

// TestLongConnectionReconnectBackoff: after a drop the adapter reports
// offline and redials after 1 s (±20 %) on the injected clock, then 2 s
// when the endpoint fails too; tests never sleep for it.
func TestLongConnectionReconnectBackoff(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newFake(t, feishutest.Config{Clock: clk})
	ch := newChannel(t, srv, feishu.ModeWebSocket, func(c *feishu.Config) {
		c.Clock, c.RetryMin, c.RetryMax = clk, time.Second, 60*time.Second
	})
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	require.NoError(t, srv.WaitConnected(ctx, 1))

	srv.DropConnections()
	sink.waitOnline(t, false)
	_, err := ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Group, ID: group}, Text: "while down"})
	require.ErrorIs(t, err, channel.ErrOffline)
	advance(t, clk, 790*time.Millisecond)
	require.Never(t, func() bool { _, n := srv.Connections(); return n > 1 }, 20*time.Millisecond, time.Millisecond, "not before 0.8 s")
	clk.Advance(420 * time.Millisecond)
	require.NoError(t, srv.WaitConnected(ctx, 2))
	sink.waitOnline(t, true)

	require.NoError(t, srv.SetOffline(ctx, true))
	sink.waitOnline(t, false)
	advance(t, clk, 1210*time.Millisecond) // the first redial: the endpoint is down
	require.Eventually(t, func() bool { return srv.CallCount("ws_endpoint") == 3 }, waitTimeout, time.Millisecond)
	require.NoError(t, srv.SetOffline(ctx, false))
	advance(t, clk, 1590*time.Millisecond)
	require.Never(t, func() bool { _, n := srv.Connections(); return n > 2 }, 20*time.Millisecond, time.Millisecond, "the second delay is 2 s ± 20 %")
	clk.Advance(850 * time.Millisecond)
	require.NoError(t, srv.WaitConnected(ctx, 3))
	sink.waitOnline(t, true)
}

// TestLongConnectionDeadServer: a server that stops answering pings is
// given up after three ping intervals, and the adapter reconnects.
func TestLongConnectionDeadServer(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newFake(t, feishutest.Config{Clock: clk, PingInterval: 10 * time.Second})
	log, buf := newLogger()
	ch := newChannel(t, srv, feishu.ModeWebSocket, func(c *feishu.Config) {
		c.Clock, c.Logger, c.RetryMin, c.RetryMax = clk, log, time.Second, time.Minute
	})
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	srv.SetPongs(false)
	for i := range 4 {
		advance(t, clk, 10*time.Second)
		require.Eventually(t, func() bool { return srv.Pings() >= i+2 || strings.Contains(buf.String(), "no frame from the server") }, waitTimeout, time.Millisecond)
	}
	waitLog(t, buf, "no frame from the server")
	sink.waitOnline(t, false)
	srv.SetPongs(true)
	advance(t, clk, 1200*time.Millisecond)
	require.NoError(t, srv.WaitConnected(tctx(t), 2))
	sink.waitOnline(t, true)
}

// TestLongConnectionSlowSink: while a slow sink keeps the event queue
// full the reader reads no pong, and that is not the server's silence:
// the pings go on, the connection is kept, and every event arrives once
// the sink catches up.
func TestLongConnectionSlowSink(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	clk := newClock()
	srv := newFake(t, feishutest.Config{Clock: clk, PingInterval: interval, DeliveryTimeout: time.Minute})
	log, buf := newLogger()
	ch := newChannel(t, srv, feishu.ModeWebSocket, func(c *feishu.Config) { c.Clock, c.Logger = clk, log })
	sink := newRecSink()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	sink.SetHandler(func(ctx context.Context, _ channel.Event) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	run(t, ch, sink)
	sink.waitOnline(t, true)
	require.Eventually(t, func() bool { return srv.Pings() == 1 }, waitTimeout, time.Millisecond, "a ping on connect")

	// One event in HandleEvent, 64 queued, one more blocks the reader.
	const n = 1 + 64 + 1
	ctx := tctx(t)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "slow " + strconv.Itoa(i)})
			errs <- err
		}()
	}
	<-entered
	waitLog(t, buf, "feishu_ws_queue_full")

	// Well past deadAfter intervals without a frame read.
	for i := range 5 {
		advance(t, clk, interval)
		require.Eventually(t, func() bool { return srv.Pings() >= i+2 || strings.Contains(buf.String(), "no frame from the server") },
			waitTimeout, time.Millisecond)
	}
	require.NotContains(t, buf.String(), "no frame from the server")
	close(release)
	for range n {
		require.NoError(t, <-errs)
	}
	require.Len(t, sink.waitEvents(t, n), n)
	open, accepted := srv.Connections()
	require.Equal(t, 1, open)
	require.Equal(t, 1, accepted, "the connection was kept")
	// Reading again: the pongs count as frames from the server.
	for i := range 4 {
		pings := srv.Pings()
		advance(t, clk, interval)
		require.Eventually(t, func() bool { return srv.Pings() > pings }, waitTimeout, time.Millisecond, "ping %d after the catch-up", i)
	}
	require.Never(t, func() bool { return strings.Contains(buf.String(), "no frame from the server") }, 50*time.Millisecond, time.Millisecond)
	require.NotContains(t, buf.String(), "no frame from the server")
}

// TestLongConnectionRefusals: a second client over the app's connection
// limit logs duplicate_client_conflict and keeps retrying; a handshake
// refused with status 403, or an endpoint refusing the credentials, ends
// Run with ErrUnauthorized.
func TestLongConnectionRefusals(t *testing.T) {
	t.Parallel()
	t.Run("Conflict", func(t *testing.T) {
		t.Parallel()
		srv := newFake(t, feishutest.Config{MaxConnections: 1})
		first := newChannel(t, srv, feishu.ModeWebSocket, nil)
		s1 := newRecSink()
		run(t, first, s1)
		s1.waitOnline(t, true)
		require.NoError(t, srv.WaitConnected(tctx(t), 1))
		log, buf := newLogger()
		second := newChannel(t, srv, feishu.ModeWebSocket, func(c *feishu.Config) { c.Logger = log })
		s2 := newRecSink()
		stop := run(t, second, s2)
		waitLog(t, buf, "duplicate_client_conflict")
		require.Eventually(t, func() bool { return srv.CallCount("ws_endpoint") >= 4 }, waitTimeout, time.Millisecond, "retries")
		require.NoError(t, stop())
	})
	t.Run("HandshakeConflict", func(t *testing.T) {
		t.Parallel()
		srv := newFake(t, feishutest.Config{})
		srv.RefuseNextHandshake(514, 1000040350)
		log, buf := newLogger()
		ch := newChannel(t, srv, feishu.ModeWebSocket, func(c *feishu.Config) { c.Logger = log })
		sink := newRecSink()
		run(t, ch, sink)
		waitLog(t, buf, "duplicate_client_conflict")
		sink.waitOnline(t, true)
	})
	t.Run("HandshakeForbidden", func(t *testing.T) {
		t.Parallel()
		srv := newFake(t, feishutest.Config{})
		srv.RefuseNextHandshake(403, 0)
		ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
		err := ch.Run(tctx(t), newRecSink())
		require.ErrorIs(t, err, feishu.ErrUnauthorized)
		require.NotContains(t, err.Error(), "device_id", "the endpoint URL holds a ticket; it stays out of errors")
	})
	t.Run("EndpointAuth", func(t *testing.T) {
		t.Parallel()
		srv := newFake(t, feishutest.Config{})
		ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
		sink := newRecSink()
		// The token is fine; only the endpoint refuses.
		srv.FailNext("ws_endpoint", feishutest.Failure{Status: 200, Code: 514, Msg: "auth failed"})
		err := ch.Run(tctx(t), sink)
		require.ErrorIs(t, err, feishu.ErrUnauthorized)
	})
}

// TestLongConnectionPongConfig: a pong's ClientConfig changes the ping
// interval.
func TestLongConnectionPongConfig(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newFake(t, feishutest.Config{Clock: clk, PingInterval: 5 * time.Second})
	ch := newChannel(t, srv, feishu.ModeWebSocket, func(c *feishu.Config) { c.Clock, c.PingInterval = clk, time.Hour })
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	require.Eventually(t, func() bool { return srv.Pings() == 1 }, waitTimeout, time.Millisecond)
	advance(t, clk, 5*time.Second)
	require.Eventually(t, func() bool { return srv.Pings() == 2 }, waitTimeout, time.Millisecond, "the endpoint's ClientConfig wins over Config.PingInterval")
	var cc map[string]int
	require.NoError(t, json.Unmarshal([]byte(`{"PingInterval":5}`), &cc))
}
