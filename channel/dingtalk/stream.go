package dingtalk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/personakit/persona/channel"
)

// bookkeepingTimeout bounds each piece of work done after Run's context
// ended: the last offer of the messages still waiting for the sink, and
// the final state report.
const bookkeepingTimeout = 5 * time.Second

// quickDisconnect: a disconnect frame sooner than this after connecting
// makes the next connection wait a backoff.
const quickDisconnect = 10 * time.Second

// hardFrameFactor: a frame over MaxFrameBytes is read to its end and
// dropped, up to this many times MaxFrameBytes; a larger one closes the
// connection.
const hardFrameFactor = 16

// Run connects the Stream and delivers robot messages to sink until ctx
// ends. It opens a connection (connections/open with the client id and
// secret, subscribing BotMessageTopic), dials the endpoint with the
// single-use ticket, and then
//
//   - answers every ping with its opaque data;
//   - hands each robot message to sink.HandleEvent, one after the other
//     in arrival order, and acknowledges it (200) only after HandleEvent
//     returned nil; a refused message is answered 500 with data status
//     LATER, and since DingTalk does not deliver robot messages again,
//     Run offers it to the sink again after a backoff, until accepted or
//     ctx ends; when ctx ends, the messages still waiting are offered
//     once more (bounded by a 5 s deadline) and those not accepted are
//     logged as lost (dingtalk_event_dropped);
//   - on a "disconnect" frame opens the next connection at once and
//     reads the old one until the server closes it (at most
//     DrainTimeout);
//   - probes the connection with a WebSocket ping every KeepAlive and
//     gives it up when the pong takes longer than PongTimeout;
//   - after a lost connection or a failed attempt retries with backoff
//     (RetryMin doubling to RetryMax, ±20 % jitter, on Config.Clock).
//
// Run reports Connected and Online to the sink while a connection is up,
// offline as soon as it is lost. It returns nil when ctx ends, an error
// wrapping ErrUnauthorized when DingTalk refuses the credentials (a
// throttled connections/open is retried), and ErrRunning when another Run
// is active.
func (c *Channel) Run(ctx context.Context, sink channel.Sink) error {
	if sink == nil {
		return errors.New("dingtalk: Run with a nil sink")
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.offline.Store(true)
	r := &runner{c: c, sink: sink, items: make(chan item, c.cfg.Backlog)}

	// lctx ends with the loop, also when it gives up (refused
	// credentials): the delivery goroutine and draining connections stop.
	lctx, stop := context.WithCancel(ctx)
	var pending *item // the message being delivered when the loop stopped
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		pending = r.deliverLoop(lctx)
	}()
	err := r.loop(lctx)
	stop()
	r.wg.Wait() // the readers too: nothing is queued any more
	r.flush(ctx, pending)

	c.offline.Store(false)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	c.log.Info("dingtalk_state", "online", false, "reason", "stopped")
	sink.ReportState(sctx, channel.State{Platform: Platform, BotID: c.cfg.RobotCode, Reason: "stopped"})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// runner is the state of one Run.
type runner struct {
	c     *Channel
	sink  channel.Sink
	items chan item
	wg    sync.WaitGroup
	seq   atomic.Int64 // connection numbers, for logs

	// reported and up are touched by the loop goroutine only.
	reported bool
	up       bool
}

// item is a robot message waiting for the sink.
type item struct {
	ev      channel.Event
	cn      *conn
	frameID string // the frame's messageId ("" when it had none: no ack)
	offers  int    // how many times the sink refused it (it was answered LATER after the first)
}

// conn is one Stream connection.
type conn struct {
	ws         *websocket.Conn
	n          int64
	done       chan struct{} // closed when the reader ended
	err        error         // why the reader ended; read after done
	disconnect chan struct{} // closed when a disconnect frame arrived
	reason     atomic.Pointer[string]
	discOnce   sync.Once
	closeOnce  sync.Once
}

// close starts a close handshake without waiting for it.
func (cn *conn) close(code websocket.StatusCode, reason string) {
	cn.closeOnce.Do(func() {
		go func() { _ = cn.ws.Close(code, reason) }()
	})
}

// announced records a disconnect frame.
func (cn *conn) announced(reason string) {
	cn.discOnce.Do(func() {
		cn.reason.Store(&reason)
		close(cn.disconnect)
	})
}

// why the serving of a connection ended.
type ending int

const (
	endStopped    ending = iota // ctx ended
	endLost                     // the connection failed or was closed
	endDisconnect               // the server announced the close
)

// loop connects, serves and reconnects until ctx ends or the credentials
// are refused.
func (r *runner) loop(ctx context.Context) error {
	c := r.c
	attempt := 0
	quick := 0 // disconnect frames soon after connecting, in a row
	for {
		cn, err := r.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrUnauthorized) {
				c.log.Error("dingtalk_unauthorized", "err", err)
				return err
			}
			attempt++
			c.log.Warn("dingtalk_connect_failed", "attempt", attempt, "err", err)
			r.report(ctx, false, "connecting failed: "+err.Error())
			if !r.pause(ctx, c.retryDelay(attempt, err), slog.LevelInfo, "dingtalk_reconnect_scheduled", "attempt", attempt) {
				return nil
			}
			continue
		}
		attempt = 0
		r.report(ctx, true, "connected")
		since := c.cfg.Clock.Now()
		switch r.serve(ctx, cn) {
		case endStopped:
			return nil
		case endDisconnect:
			// At once, while the old connection drains; but a server that
			// keeps rotating fresh connections is not hammered.
			if c.cfg.Clock.Now().Sub(since) >= quickDisconnect {
				quick = 0
				continue
			}
			quick++
			if !r.pause(ctx, c.backoff(quick), slog.LevelWarn, "dingtalk_reconnect_scheduled", "attempt", quick,
				"reason", "disconnect announced right after connecting") {
				return nil
			}
		case endLost:
			reason := "connection lost"
			if cn.err != nil {
				reason += ": " + c.redact(cn.err).Error()
			}
			r.report(ctx, false, reason)
			attempt++
			if !r.pause(ctx, c.backoff(attempt), slog.LevelInfo, "dingtalk_reconnect_scheduled", "attempt", attempt) {
				return nil
			}
		}
	}
}

// report tells the sink about a change of the connection state.
func (r *runner) report(ctx context.Context, up bool, reason string) {
	if r.reported && r.up == up {
		return
	}
	r.reported, r.up = true, up
	r.c.offline.Store(!up)
	lvl := slog.LevelInfo
	if !up {
		lvl = slog.LevelWarn
	}
	reason = r.c.secrets.scrub(reason)
	r.c.log.Log(ctx, lvl, "dingtalk_state", "online", up, "reason", reason)
	r.sink.ReportState(ctx, channel.State{Platform: Platform, BotID: r.c.cfg.RobotCode, Connected: up, Online: up, Reason: reason})
}

// pause waits d on the clock and reports false when ctx ended first. The
// log line (msg with args and the delay) is written once the timer is
// armed, so a test that saw it can advance a fake clock.
func (r *runner) pause(ctx context.Context, d time.Duration, level slog.Level, msg string, args ...any) bool {
	t := r.c.cfg.Clock.NewTimer(d)
	defer t.Stop()
	r.c.log.Log(ctx, level, msg, append(args, "delay", d)...)
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// backoff is the n-th (1-based) retry delay: RetryMin doubling to
// RetryMax, times a jitter factor in [0.8, 1.2).
func (c *Channel) backoff(n int) time.Duration {
	d := c.cfg.RetryMin
	for i := 1; i < n && d < c.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.RetryMax)
	return time.Duration(float64(d) * (0.8 + 0.4*c.jitter()))
}

// retryDelay is the wait after a failed connection attempt: the backoff,
// or the platform's RetryAfter when that is longer.
func (c *Channel) retryDelay(n int, err error) time.Duration {
	d := c.backoff(n)
	var rl *channel.RateLimitedError
	if errors.As(err, &rl) && rl.RetryAfter > d {
		d = min(rl.RetryAfter, time.Hour)
	}
	return d
}

// endpoint is the answer of connections/open.
type endpoint struct {
	Endpoint string `json:"endpoint"`
	Ticket   string `json:"ticket"`
}

// connect registers a connection and dials it.
func (r *runner) connect(ctx context.Context) (*conn, error) {
	c := r.c
	body := map[string]any{
		"clientId":      c.cfg.ClientID,
		"clientSecret":  c.cfg.ClientSecret,
		"subscriptions": []map[string]string{{"type": FrameCallback, "topic": BotMessageTopic}},
		"ua":            c.cfg.UserAgent,
	}
	if c.cfg.LocalIP != "" {
		body["localIp"] = c.cfg.LocalIP
	}
	var ep endpoint
	err := c.do(ctx, call{op: "gateway/connections/open", url: c.cfg.APIBase + "/v1.0/gateway/connections/open", body: body, result: &ep})
	if err != nil {
		if credentialsRefused(err) {
			return nil, &authError{err: err}
		}
		return nil, err // a rate limit or a transient failure: retried
	}
	if ep.Ticket == "" || strings.ContainsAny(ep.Ticket, " \t\r\n") {
		return nil, errors.New("dingtalk: gateway/connections/open: the answer has no usable ticket")
	}
	c.secrets.add(ep.Ticket)
	u, err := url.Parse(ep.Endpoint)
	if err != nil || (u.Scheme != "wss" && u.Scheme != "ws") || u.Host == "" || u.User != nil {
		return nil, errors.New("dingtalk: gateway/connections/open: the answer has no usable ws(s) endpoint")
	}
	if u.Scheme == "ws" && strings.HasPrefix(c.cfg.APIBase, "https://") {
		return nil, errors.New("dingtalk: gateway/connections/open: refusing an unencrypted ws:// endpoint from an https API")
	}
	q := u.Query()
	q.Set("ticket", ep.Ticket)
	u.RawQuery = q.Encode()

	// The handshake is bounded by the call timeout; the established
	// connection outlives dctx.
	dctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{HTTPClient: c.cfg.HTTPClient})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		return nil, fmt.Errorf("dingtalk: stream handshake with %s (HTTP %d): %w", u.Host, status, c.redact(err))
	}
	ws.SetReadLimit(-1) // frames are bounded by readFrame, which drops oversize ones
	cn := &conn{ws: ws, n: r.seq.Add(1), done: make(chan struct{}), disconnect: make(chan struct{})}
	c.log.Info("dingtalk_connected", "conn", cn.n, "host", u.Host)
	return cn, nil
}

// serve reads a connection until it ends, ctx ends or the server
// announces its close (then the connection keeps being read, drained, in
// the background).
func (r *runner) serve(ctx context.Context, cn *conn) ending {
	c := r.c
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.read(ctx, cn)
	}()
	go func() {
		defer r.wg.Done()
		r.keepalive(cn)
	}()
	select {
	case <-ctx.Done():
		cn.close(websocket.StatusNormalClosure, "shutting down")
		<-cn.done
		return endStopped
	case <-cn.done:
		c.log.Warn("dingtalk_connection_lost", "conn", cn.n, "err", c.redact(cn.err))
		return endLost
	case <-cn.disconnect:
		reason := ""
		if p := cn.reason.Load(); p != nil {
			reason = *p
		}
		c.log.Info("dingtalk_disconnect_announced", "conn", cn.n, "reason", reason, "effect", "connecting again now; the old connection drains")
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.drain(ctx, cn)
		}()
		return endDisconnect
	}
}

// drain reads a connection the server announced to close until it does,
// DrainTimeout passes or ctx ends.
func (r *runner) drain(ctx context.Context, cn *conn) {
	t := r.c.cfg.Clock.NewTimer(r.c.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-cn.done:
	case <-t.C():
		cn.close(websocket.StatusNormalClosure, "replaced")
		<-cn.done
	case <-ctx.Done():
		cn.close(websocket.StatusNormalClosure, "shutting down")
		<-cn.done
	}
	r.c.log.Info("dingtalk_connection_drained", "conn", cn.n)
}

// keepalive pings the connection every KeepAlive and closes it when a
// pong does not come within PongTimeout.
func (r *runner) keepalive(cn *conn) {
	c := r.c
	for {
		t := c.cfg.Clock.NewTimer(c.cfg.KeepAlive)
		select {
		case <-cn.done:
			t.Stop()
			return
		case <-t.C():
		}
		pctx, cancel := c.clockTimeout(context.Background(), c.cfg.PongTimeout)
		err := cn.ws.Ping(pctx)
		cancel()
		if err == nil {
			c.log.Debug("dingtalk_keepalive_ok", "conn", cn.n)
			continue
		}
		select {
		case <-cn.done:
			return
		default:
		}
		c.log.Warn("dingtalk_pong_missing", "conn", cn.n, "timeout", c.cfg.PongTimeout, "effect", "closing the connection")
		_ = cn.ws.CloseNow()
		return
	}
}

// clockTimeout is a context cancelled d after now on the channel's clock.
func (c *Channel) clockTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	t := c.cfg.Clock.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// read reads frames until the connection ends. Its context outlives
// Run's so that shutdown can do a close handshake; serve closes the
// connection when ctx ends.
func (r *runner) read(ctx context.Context, cn *conn) {
	defer close(cn.done)
	c := r.c
	rctx := context.WithoutCancel(ctx)
	for {
		typ, rd, err := cn.ws.Reader(rctx)
		if err != nil {
			cn.err = err
			_ = cn.ws.CloseNow()
			return
		}
		data, size, err := readFrame(rd, c.cfg.MaxFrameBytes)
		if err != nil {
			cn.err = err
			c.log.Error("dingtalk_frame_too_large", "conn", cn.n, "err", err, "effect", "closing the connection")
			_ = cn.ws.CloseNow()
			return
		}
		if data == nil {
			c.log.Error("dingtalk_frame_too_large", "conn", cn.n, "bytes", size, "limit", c.cfg.MaxFrameBytes, "effect", "dropped")
			continue
		}
		if typ != websocket.MessageText {
			c.log.Warn("dingtalk_frame_binary", "conn", cn.n, "bytes", size, "effect", "dropped")
			continue
		}
		r.handleFrame(cn, data)
	}
}

// readFrame reads one message: its bytes when it has at most limit of
// them; nil and its size when it is larger (it is read to its end and
// dropped); an error when it exceeds hardFrameFactor × limit.
func readFrame(rd io.Reader, limit int64) ([]byte, int64, error) {
	data, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil {
		return nil, int64(len(data)), err
	}
	if int64(len(data)) <= limit {
		return data, int64(len(data)), nil
	}
	hard := limit * hardFrameFactor
	n, err := io.Copy(io.Discard, io.LimitReader(rd, hard-limit))
	size := limit + 1 + n
	if err != nil {
		return nil, size, err
	}
	if size > hard {
		return nil, size, fmt.Errorf("a frame of more than %d bytes", hard)
	}
	return nil, size, nil
}

// handleFrame dispatches one frame. Bad frames are logged and dropped; the
// connection survives.
func (r *runner) handleFrame(cn *conn, data []byte) {
	c := r.c
	f, err := DecodeFrame(data)
	if err != nil {
		c.log.Warn("dingtalk_frame_malformed", "conn", cn.n, "bytes", len(data), "err", err, "effect", "dropped")
		return
	}
	id := f.MessageID()
	switch f.Type {
	case FrameSystem:
		switch f.Topic() {
		case TopicPing:
			if id == "" {
				c.log.Warn("dingtalk_frame_unidentified", "conn", cn.n, "type", f.Type, "topic", f.Topic(), "effect", "not answered")
				return
			}
			r.ack(cn, newAck(id, AckOK, "OK", f.Data))
		case TopicDisconnect:
			var d struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal([]byte(f.Data), &d) // a reason is informational
			cn.announced(cleanName(d.Reason))
		default:
			c.log.Warn("dingtalk_topic_unknown", "conn", cn.n, "type", f.Type, "topic", f.Topic())
			if id != "" {
				r.ack(cn, newAck(id, AckNotFound, "topic not handled", "{}"))
			}
		}
	case FrameCallback:
		if f.Topic() != BotMessageTopic {
			c.log.Warn("dingtalk_topic_unknown", "conn", cn.n, "type", f.Type, "topic", f.Topic())
			if id != "" {
				r.ack(cn, newAck(id, AckNotFound, "topic not handled", "{}"))
			}
			return
		}
		r.botMessage(cn, &f)
	default:
		c.log.Warn("dingtalk_topic_unknown", "conn", cn.n, "type", f.Type, "topic", f.Topic(), "effect", "not subscribed")
		if id != "" {
			r.ack(cn, newAck(id, AckNotFound, "topic not handled", "{}"))
		}
	}
}

// botMessage decodes a robot message and queues it for the sink.
func (r *runner) botMessage(cn *conn, f *Frame) {
	c := r.c
	id := f.MessageID()
	now := c.cfg.Clock.Now()
	at := now
	if ms := frameTime(f); ms > 0 && ms < 1e14 {
		at = time.UnixMilli(ms)
	}
	in, err := parseBotMessage([]byte(f.Data), c.cfg.RobotCode, at)
	if err != nil {
		if errors.Is(err, errSkipped) {
			c.log.Info("dingtalk_message_skipped", "conn", cn.n, "frame", id, "reason", err)
		} else {
			c.log.Warn("dingtalk_message_malformed", "conn", cn.n, "frame", id, "bytes", len(f.Data), "err", err, "effect", "dropped")
		}
		if id != "" {
			r.ack(cn, newAck(id, AckOK, "OK", ackDataBot)) // delivering it again cannot help
		}
		return
	}
	ev := in.ev
	if in.webhook != "" {
		if u := sessionURL(in.webhook, c.cfg.WebhookBase); u != "" {
			c.secrets.addURL(u)
			c.sessions.put(ev.Chat, webhook{url: u, expires: in.expires}, now)
		} else {
			host := ""
			if pu, perr := url.Parse(in.webhook); perr == nil {
				host = pu.Host
			}
			c.log.Warn("dingtalk_webhook_refused", "host", host, "allowed", c.cfg.WebhookBase,
				"effect", "answers to this conversation go through the robot API")
		}
	}
	c.quotes.put(ev.MessageID, quote{chat: ev.Chat, name: ev.Sender.Name, text: ev.Text()})
	select {
	case r.items <- item{ev: ev, cn: cn, frameID: id}:
	default:
		c.log.Error("dingtalk_backlog_full", "conn", cn.n, "message_id", ev.MessageID, "backlog", c.cfg.Backlog,
			"effect", "refused (LATER); DingTalk does not deliver robot messages again, so it is lost")
		if id != "" {
			r.ack(cn, newAck(id, AckFailed, "busy", ackDataLater))
		}
	}
}

// ack writes an acknowledgement; a connection that is gone is logged at
// debug level only (the frame's fate no longer depends on it).
func (r *runner) ack(cn *conn, a Ack) {
	if a.Headers["messageId"] == "" {
		return
	}
	wctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.CallTimeout)
	defer cancel()
	if err := cn.ws.Write(wctx, websocket.MessageText, EncodeAck(a)); err != nil {
		r.c.log.Debug("dingtalk_ack_failed", "conn", cn.n, "frame", a.Headers["messageId"], "code", a.Code, "err", err)
	}
}

// deliverLoop hands queued messages to the sink in order. When ctx ends
// it returns the message it was delivering (nil when none), for flush.
func (r *runner) deliverLoop(ctx context.Context) *item {
	for {
		// ctx first: a select with both ready picks at random.
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case it := <-r.items:
			if ctx.Err() != nil {
				return &it
			}
			if !r.deliver(ctx, &it) {
				return &it
			}
		}
	}
}

// deliver hands one message to the sink, acknowledging it once accepted;
// a refusal is answered LATER and the message offered again after a
// backoff. It reports false when ctx ended before the sink accepted it.
func (r *runner) deliver(ctx context.Context, it *item) bool {
	c := r.c
	for {
		err := r.sink.HandleEvent(ctx, it.ev)
		if err == nil {
			r.accepted(it)
			return true
		}
		r.refused(it)
		if ctx.Err() != nil {
			return false
		}
		if !r.pause(ctx, c.backoff(it.offers), slog.LevelWarn, "dingtalk_event_nacked", "message_id", it.ev.MessageID,
			"chat", it.ev.Chat.String(), "attempt", it.offers, "err", err, "effect", "offered to the sink again after the delay") {
			return false
		}
	}
}

// accepted acknowledges a message the sink took (a message refused before
// was already answered LATER, so it is only logged).
func (r *runner) accepted(it *item) {
	if it.offers == 0 {
		r.ack(it.cn, newAck(it.frameID, AckOK, "OK", ackDataBot))
		return
	}
	r.c.log.Info("dingtalk_event_redelivered", "message_id", it.ev.MessageID, "chat", it.ev.Chat.String(), "attempts", it.offers+1)
}

// refused counts a refusal, answering LATER the first time.
func (r *runner) refused(it *item) {
	if it.offers == 0 {
		r.ack(it.cn, newAck(it.frameID, AckFailed, "not stored", ackDataLater))
	}
	it.offers++
}

// lost logs a message that never reached the sink.
func (r *runner) lost(it *item, why string) {
	r.c.log.Error("dingtalk_event_dropped", "message_id", it.ev.MessageID, "chat", it.ev.Chat.String(), "reason", why,
		"detail", "DingTalk does not deliver robot messages again")
}

// flush runs when Run ends, after every reader stopped: it offers the
// message that was being delivered (pending) and then the queued ones to
// the sink once more, in order, with a context detached from ctx and
// bounded by bookkeepingTimeout, and logs each one still not accepted as
// lost.
func (r *runner) flush(ctx context.Context, pending *item) {
	var left []*item
	if pending != nil {
		left = append(left, pending)
	}
	for more := true; more; {
		select {
		case it := <-r.items:
			left = append(left, &it)
		default:
			more = false
		}
	}
	if len(left) == 0 {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	r.c.log.Info("dingtalk_flushing", "messages", len(left), "timeout", bookkeepingTimeout)
	for _, it := range left {
		if fctx.Err() != nil {
			r.refused(it)
			r.lost(it, "Run stopped; no time left to offer it")
			continue
		}
		err := r.sink.HandleEvent(fctx, it.ev)
		if err == nil {
			r.accepted(it)
			continue
		}
		r.refused(it)
		r.lost(it, "Run stopped; refused again: "+err.Error())
	}
}
