package wecom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/personakit/persona/channel"
)

// ErrSuperseded is returned by Run in ModeAIBotWS when WeCom ends the long
// connection because another connection subscribed for the same bot
// (disconnected_event). Run does not reconnect: two processes would take
// the connection from each other in turn.
var ErrSuperseded = errors.New("wecom: another connection took over the AI bot's long connection")

// Long-connection commands.
const (
	cmdSubscribe = "aibot_subscribe"
	cmdPing      = "ping"
	cmdCallback  = "aibot_msg_callback"
	cmdEvent     = "aibot_event_callback"
	cmdRespond   = "aibot_respond_msg"
	cmdSend      = "aibot_send_msg"
)

// inboundQueue bounds the messages received but not yet accepted by the
// sink.
const inboundQueue = 256

// wsFrame is a long-connection frame: {cmd, headers: {req_id}, body} for
// requests and pushes, {headers, errcode, errmsg} for acknowledgements.
type wsFrame struct {
	Cmd     string          `json:"cmd,omitempty"`
	Headers wsHeaders       `json:"headers"`
	Body    json.RawMessage `json:"body,omitempty"`
	ErrCode *int            `json:"errcode,omitempty"`
	ErrMsg  string          `json:"errmsg,omitempty"`
}

type wsHeaders struct {
	ReqID string `json:"req_id"`
}

// decodeFrame parses a long-connection frame; a frame that is not valid
// UTF-8 is refused (JSON decoding would replace the bad bytes silently).
func decodeFrame(data []byte) (wsFrame, error) {
	if !utf8.Valid(data) {
		return wsFrame{}, errors.New("wecom: frame is not valid UTF-8")
	}
	var f wsFrame
	if err := json.Unmarshal(data, &f); err != nil {
		return wsFrame{}, fmt.Errorf("wecom: frame: %w", err)
	}
	return f, nil
}

// interaction is a message received on the long connection that may
// still be answered with its req_id.
type interaction struct {
	msgID    string
	reqID    string
	chat     channel.Chat
	created  time.Time
	answered bool
}

// wsState is ModeAIBotWS's state: the connection in use and the messages
// that may be answered.
type wsState struct {
	mu       sync.Mutex
	conn     *wsConn
	inter    map[string]*interaction // msgid →
	lastSend map[channel.Chat]time.Time
}

func newWSState() *wsState {
	return &wsState{inter: map[string]*interaction{}, lastSend: map[channel.Chat]time.Time{}}
}

func (s *wsState) current() *wsConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

func (s *wsState) setConn(old, conn *wsConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == old {
		s.conn = conn
	}
}

// register records a received message; old ones are forgotten.
func (s *wsState) register(it *interaction, maxAge time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.inter[it.msgID]; !ok {
		s.inter[it.msgID] = it
	}
	for id, x := range s.inter {
		if it.created.Sub(x.created) > maxAge {
			delete(s.inter, id)
		}
	}
}

// pick chooses the message a chunk answers and marks it answered: the
// quoted one (ReplyTo); else, unless the bot wrote to the chat within
// idle (the chunk goes on a reply in progress), the chat's oldest
// unanswered message. nil: the chunk is sent on its own.
func (s *wsState) pick(out channel.Outgoing, now time.Time, idle, maxAge time.Duration) *interaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	open := func(it *interaction) bool {
		return it != nil && it.chat == out.Chat && !it.answered && now.Sub(it.created) < maxAge
	}
	if out.ReplyTo != "" {
		if it := s.inter[out.ReplyTo]; open(it) {
			it.answered = true
			return it
		}
	}
	if t, ok := s.lastSend[out.Chat]; ok && now.Sub(t) < idle {
		return nil
	}
	var oldest *interaction
	for _, it := range s.inter {
		if open(it) && (oldest == nil || it.created.Before(oldest.created)) {
			oldest = it
		}
	}
	if oldest != nil {
		oldest.answered = true
	}
	return oldest
}

// unpick makes a message answerable again after a refused answer.
func (s *wsState) unpick(it *interaction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it.answered = false
}

func (s *wsState) wrote(chat channel.Chat, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastSend[chat] = now
	if len(s.lastSend) > maxRecentChats {
		for k, t := range s.lastSend {
			if now.Sub(t) > time.Hour {
				delete(s.lastSend, k)
			}
		}
	}
}

// wsConn is one long connection: frames are written one at a time, and
// acknowledgements are matched to requests by req_id.
type wsConn struct {
	conn    *websocket.Conn
	writeMu sync.Mutex

	mu      sync.Mutex
	pending map[string]func(wsFrame)
	closed  chan struct{}
	once    sync.Once
	// ready is closed once the subscription is acknowledged and the
	// connection is the one Send uses: callbacks wait for it, so that a
	// reply to a delivered message always finds the connection.
	ready chan struct{}
}

func newWSConn(conn *websocket.Conn) *wsConn {
	return &wsConn{conn: conn, pending: map[string]func(wsFrame){}, closed: make(chan struct{}), ready: make(chan struct{})}
}

func (w *wsConn) close() { w.once.Do(func() { close(w.closed) }) }

// expect registers fn for the acknowledgement of reqID.
func (w *wsConn) expect(reqID string, fn func(wsFrame)) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, busy := w.pending[reqID]; busy {
		return false
	}
	w.pending[reqID] = fn
	return true
}

func (w *wsConn) forget(reqID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pending, reqID)
}

// resolve hands an acknowledgement to its request.
func (w *wsConn) resolve(f wsFrame) bool {
	w.mu.Lock()
	fn, ok := w.pending[f.Headers.ReqID]
	delete(w.pending, f.Headers.ReqID)
	w.mu.Unlock()
	if ok {
		fn(f)
	}
	return ok
}

// write sends one frame.
func (c *Channel) wsWrite(ctx context.Context, w *wsConn, f wsFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	return w.conn.Write(ctx, websocket.MessageText, b)
}

// wsRequest sends a frame and waits for its acknowledgement (CallTimeout
// on the clock). errcode != 0 is an *APIError; a connection that ends
// before the answer is channel.ErrOffline, with the outcome unknown.
func (c *Channel) wsRequest(ctx context.Context, w *wsConn, cmd, reqID string, body any) (wsFrame, error) {
	var raw json.RawMessage
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return wsFrame{}, fmt.Errorf("wecom: %s: encoding: %w", cmd, err)
		}
		raw = b
	}
	ack := make(chan wsFrame, 1)
	if !w.expect(reqID, func(f wsFrame) { ack <- f }) {
		return wsFrame{}, fmt.Errorf("wecom: %s: a request with req_id %q is already waiting", cmd, reqID)
	}
	if err := c.wsWrite(ctx, w, wsFrame{Cmd: cmd, Headers: wsHeaders{ReqID: reqID}, Body: raw}); err != nil {
		w.forget(reqID)
		return wsFrame{}, fmt.Errorf("wecom: %s: %w", cmd, &sendFailure{err: fmt.Errorf("%w: writing the frame: %w", channel.ErrOffline, err)})
	}
	t := c.clk.NewTimer(c.cfg.CallTimeout)
	defer t.Stop()
	select {
	case f := <-ack:
		if f.ErrCode != nil && *f.ErrCode != 0 {
			return f, newAPIError(cmd, *f.ErrCode, f.ErrMsg, false)
		}
		return f, nil
	case <-w.closed:
		w.forget(reqID)
		return wsFrame{}, fmt.Errorf("wecom: %s: %w", cmd, &sendFailure{err: fmt.Errorf("%w: the connection ended before the answer", channel.ErrOffline), maybeSent: true})
	case <-t.C():
		w.forget(reqID)
		return wsFrame{}, fmt.Errorf("wecom: %s: %w", cmd, &sendFailure{err: fmt.Errorf("no answer within %s", c.cfg.CallTimeout), maybeSent: true})
	case <-ctx.Done():
		w.forget(reqID)
		return wsFrame{}, ctx.Err()
	}
}

// wsInbound is a received message on its way to the sink.
type wsInbound struct {
	ev    channel.Event
	reqID string
}

// runWS is Run for ModeAIBotWS: it keeps the long connection, redialing
// with backoff, and hands received messages to the sink in order.
func (c *Channel) runWS(ctx context.Context, r *reporter) error {
	queue := make(chan wsInbound, inboundQueue)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.deliverWS(ctx, r.sink, queue) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	for {
		err := c.wsSession(ctx, r, queue)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrSuperseded) {
			c.log.Error("wecom_long_connection_ended", "err", err)
			r.report(ctx, false, err.Error())
			return err
		}
		n := r.failed(ctx, "long connection", err)
		c.log.Warn("wecom_long_connection_failed", "err", err, "attempt", n)
		if !c.sleep(ctx, c.backoff(n)) {
			return nil
		}
	}
}

// deliverWS hands received messages to the sink one after the other; a
// refused message is handed over again after a backoff (WeCom does not
// redeliver on the long connection), holding back the ones after it.
func (c *Channel) deliverWS(ctx context.Context, sink channel.Sink, queue <-chan wsInbound) {
	for {
		var in wsInbound
		select {
		case <-ctx.Done():
			return
		case in = <-queue:
		}
		c.ws.register(&interaction{msgID: in.ev.MessageID, reqID: in.reqID, chat: in.ev.Chat, created: c.clk.Now()}, c.cfg.StreamMaxAge)
		for attempt := 1; ; attempt++ {
			err := sink.HandleEvent(ctx, in.ev)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("wecom_event_nacked", "chat", in.ev.Chat.String(), "message_id", in.ev.MessageID, "err", err,
				"attempt", attempt, "effect", "handed to the sink again after a backoff")
			if !c.sleep(ctx, c.backoff(attempt)) {
				return
			}
		}
	}
}

// wsSession dials, subscribes and serves one long connection until it
// fails or ctx ends.
func (c *Channel) wsSession(ctx context.Context, r *reporter, queue chan<- wsInbound) error {
	dctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	conn, resp, err := websocket.Dial(dctx, c.cfg.WSURL, &websocket.DialOptions{HTTPClient: c.cfg.HTTPClient})
	cancel()
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		return fmt.Errorf("wecom: dialing the long connection (HTTP %d): %w", status, c.redact(err))
	}
	defer func() { _ = conn.CloseNow() }()
	conn.SetReadLimit(c.cfg.MaxBodyBytes)
	w := newWSConn(conn)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	readErr := make(chan error, 1)
	go func() {
		err := c.readWS(sctx, w, queue)
		w.close()
		readErr <- err
	}()

	body := map[string]string{"bot_id": c.cfg.BotID, "secret": c.cfg.Secret}
	if _, err := c.wsRequest(sctx, w, cmdSubscribe, cmdSubscribe+"_"+randomID(8), body); err != nil {
		// Only a refusal of the credentials ends Run; anything else (busy,
		// rate limited, an unknown code) is tried again after a backoff.
		var ae *APIError
		if errors.As(err, &ae) && credentialCode(ae.Code) {
			return fmt.Errorf("%w: %w", ErrUnauthorized, ae)
		}
		return err
	}
	c.ws.setConn(nil, w)
	defer c.ws.setConn(w, nil)
	close(w.ready)
	c.log.Info("wecom_long_connection_subscribed", "bot_id", c.cfg.BotID)
	r.succeeded(ctx, "long connection subscribed")

	var missed atomic.Int32
	for {
		t := c.clk.NewTimer(c.cfg.PingInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = conn.Close(websocket.StatusNormalClosure, "closing")
			return nil
		case err := <-readErr:
			t.Stop()
			return err
		case <-t.C():
		}
		if n := missed.Load(); n >= 2 {
			return fmt.Errorf("wecom: heartbeat lost: %d pings unanswered", n)
		}
		missed.Add(1)
		id := cmdPing + "_" + randomID(8)
		w.expect(id, func(f wsFrame) {
			if f.ErrCode == nil || *f.ErrCode == 0 {
				missed.Store(0)
			}
		})
		if err := c.wsWrite(sctx, w, wsFrame{Cmd: cmdPing, Headers: wsHeaders{ReqID: id}}); err != nil {
			return fmt.Errorf("wecom: ping: %w", err)
		}
	}
}

// readWS reads frames until the connection fails: callbacks go to the
// queue, acknowledgements to their requests; anything else is logged
// and dropped.
func (c *Channel) readWS(ctx context.Context, w *wsConn, queue chan<- wsInbound) error {
	for {
		typ, data, err := w.conn.Read(ctx)
		if err != nil {
			return fmt.Errorf("wecom: reading the long connection: %w", err)
		}
		if typ != websocket.MessageText {
			c.log.Warn("wecom_frame_dropped", "reason", "binary frame", "bytes", len(data))
			continue
		}
		f, err := decodeFrame(data)
		if err != nil {
			c.log.Warn("wecom_frame_dropped", "reason", "malformed frame", "err", err, "bytes", len(data))
			continue
		}
		switch f.Cmd {
		case "":
			if !w.resolve(f) {
				c.log.Debug("wecom_frame_dropped", "reason", "acknowledgement of no waiting request", "req_id", f.Headers.ReqID)
			}
		case cmdCallback:
			select {
			case <-w.ready:
			case <-ctx.Done():
				return ctx.Err()
			}
			c.wsCallback(f, queue)
		case cmdEvent:
			if err := c.wsEvent(f); err != nil {
				return err
			}
		default:
			c.log.Warn("wecom_frame_dropped", "reason", "unknown cmd "+strconv.Quote(f.Cmd))
		}
	}
}

// wsCallback turns a message frame into an event for the queue.
func (c *Channel) wsCallback(f wsFrame, queue chan<- wsInbound) {
	if !validID(f.Headers.ReqID) {
		c.log.Warn("wecom_frame_dropped", "reason", "callback without a req_id")
		return
	}
	m, err := decodeAIBotMessage(f.Body)
	if err != nil {
		c.log.Warn("wecom_frame_dropped", "reason", "malformed message", "err", err)
		return
	}
	ev, skip := c.aibotEvent(m, f.Body)
	if skip != "" {
		c.log.Warn("wecom_message_invalid", "msg_id", m.MsgID, "reason", skip, "effect", "dropped")
		return
	}
	select {
	case queue <- wsInbound{ev: ev, reqID: f.Headers.ReqID}:
	default:
		c.log.Error("wecom_event_dropped", "chat", ev.Chat.String(), "message_id", ev.MessageID,
			"reason", fmt.Sprintf("%d messages are waiting for the sink", inboundQueue))
	}
}

// wsEvent handles an event frame; disconnected_event ends the session
// with ErrSuperseded.
func (c *Channel) wsEvent(f wsFrame) error {
	m, err := decodeAIBotMessage(f.Body)
	if err != nil {
		c.log.Warn("wecom_frame_dropped", "reason", "malformed event", "err", err)
		return nil
	}
	typ := m.eventType()
	if typ == "disconnected_event" {
		return ErrSuperseded
	}
	c.log.Info("wecom_event_skipped", "event", typ)
	return nil
}

// sendWS delivers a chunk on the long connection: as the answer to a
// received message (a stream finished at once) or on its own
// (aibot_send_msg, markdown).
func (c *Channel) sendWS(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	w := c.ws.current()
	if w == nil {
		return channel.Receipt{}, fmt.Errorf("wecom: send: the long connection is down: %w", channel.ErrOffline)
	}
	if len(out.Media) > 0 {
		return channel.Receipt{}, fmt.Errorf("wecom: the long connection sends text only here: %w", channel.ErrMediaInvalid)
	}
	key := out.IdempotencyKey
	if e, ok := c.sent.attempt(key); ok {
		return c.resendWS(ctx, w, out, e)
	}
	now := c.clk.Now()
	if it := c.ws.pick(out, now, c.cfg.StreamIdle, c.cfg.StreamMaxAge); it != nil {
		sid := StreamID(it.msgID)
		err := c.wsRespond(ctx, w, it.reqID, sid, out.Text)
		var ae *APIError
		switch {
		case err == nil:
			c.ws.wrote(out.Chat, now)
			return channel.Receipt{MessageIDs: []string{sid}, Time: now}, nil
		case maybeSent(err):
			c.sent.unsure(key, sentEntry{kind: cmdRespond, reqID: it.reqID, streamID: sid, chat: out.Chat})
			return channel.Receipt{}, err
		case errors.As(err, &ae) && (ae.Code == codeInvalidReqID || ae.Code == codeStreamExpired):
			c.log.Info("wecom_answer_expired", "message_id", it.msgID, "errcode", ae.Code, "effect", "sent as a message of its own")
		default:
			c.ws.unpick(it)
			return channel.Receipt{}, err
		}
	}
	reqID := cmdSend + "_" + randomID(8)
	body := map[string]any{"chatid": out.Chat.ID, "msgtype": "markdown", "markdown": map[string]string{"content": out.Text}}
	if _, err := c.wsRequest(ctx, w, cmdSend, reqID, body); err != nil {
		if maybeSent(err) {
			c.sent.unsure(key, sentEntry{kind: cmdSend, reqID: reqID, chat: out.Chat})
		}
		return channel.Receipt{}, err
	}
	c.ws.wrote(out.Chat, now)
	return channel.Receipt{MessageIDs: []string{reqID}, Time: now}, nil
}

// wsRespond answers a received message with a stream finished at once.
func (c *Channel) wsRespond(ctx context.Context, w *wsConn, reqID, streamID, text string) error {
	body := streamReply{MsgType: "stream", Stream: streamReplyState{ID: streamID, Finish: true, Content: text}}
	_, err := c.wsRequest(ctx, w, cmdRespond, reqID, body)
	return err
}

// resendWS handles a chunk whose earlier attempt got no answer: an answer
// to a message is sent again (the same stream update, which WeCom applies
// once); a message of its own is not (it would be a second message), and
// counts as delivered.
func (c *Channel) resendWS(ctx context.Context, w *wsConn, out channel.Outgoing, e sentEntry) (channel.Receipt, error) {
	now := c.clk.Now()
	if e.kind != cmdRespond {
		c.log.Warn("wecom_delivery_assumed", "chat", out.Chat.String(),
			"detail", "an earlier attempt of this chunk got no answer; not sending it again")
		return channel.Receipt{MessageIDs: []string{e.reqID}, Time: now}, nil
	}
	err := c.wsRespond(ctx, w, e.reqID, e.streamID, out.Text)
	var ae *APIError
	switch {
	case err == nil:
	case errors.As(err, &ae) && (ae.Code == codeInvalidReqID || ae.Code == codeStreamExpired):
		c.log.Info("wecom_delivery_assumed", "chat", out.Chat.String(), "errcode", ae.Code,
			"detail", "the stream of an earlier attempt can no longer be updated: it was finished")
	default:
		return channel.Receipt{}, err
	}
	c.ws.wrote(out.Chat, now)
	return channel.Receipt{MessageIDs: []string{e.streamID}, Time: now}, nil
}
