package qqbot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// sessionEnd says how one gateway connection ended.
type sessionEnd struct {
	// ready: the connection got as far as READY or RESUMED (the backoff
	// starts over).
	ready  bool
	reason string
	// fatal ends Run.
	fatal error
}

// gateway connects, and reconnects with backoff, until ctx ends or a
// connection ends fatally.
func (r *runner) gateway(ctx context.Context) error {
	c := r.c
	attempt := 0
	for {
		end := r.connect(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if end.fatal != nil {
			c.log.Error("qq_gateway_fatal", "err", end.fatal)
			return end.fatal
		}
		r.report(ctx, false, end.reason)
		if end.ready {
			attempt = 0
		}
		attempt++
		d := c.backoff(attempt)
		t := c.clk.NewTimer(d)
		c.log.Warn("qq_gateway_reconnect", "reason", end.reason, "attempt", attempt, "delay", d)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// gatewayConn is one WebSocket connection to the gateway.
type gatewayConn struct {
	c      *Channel
	conn   *websocket.Conn
	acked  atomic.Bool   // the last heartbeat was acknowledged
	dead   chan struct{} // closed by the heartbeat loop on a missed ack
	frames chan []byte
	rerr   chan error
	// wg counts the read and heartbeat goroutines; connect waits for
	// them before it returns.
	wg sync.WaitGroup
}

// write sends one frame with the CallTimeout deadline.
func (g *gatewayConn) write(ctx context.Context, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, g.c.cfg.CallTimeout)
	defer cancel()
	return g.conn.Write(wctx, websocket.MessageText, data)
}

// connect runs one connection: gateway URL, dial, Hello, Identify or
// Resume, then dispatches until it ends.
func (r *runner) connect(ctx context.Context) sessionEnd {
	c := r.c
	var gw struct {
		URL string `json:"url"`
	}
	if err := c.call(ctx, http.MethodGet, "/gateway", nil, false, &gw); err != nil {
		if errors.Is(err, ErrUnauthorized) {
			return sessionEnd{fatal: err}
		}
		return sessionEnd{reason: "GET /gateway: " + err.Error()}
	}
	u, err := url.Parse(gw.URL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return sessionEnd{reason: "GET /gateway gave no ws(s) URL"}
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	conn, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{HTTPClient: c.cfg.HTTPClient})
	cancel()
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return sessionEnd{reason: "dialling the gateway: " + c.tokens.scrub(err).Error()}
	}
	conn.SetReadLimit(-1) // readLoop enforces hardFrameLimit itself
	rctx, stopRead := context.WithCancel(ctx)
	g := &gatewayConn{c: c, conn: conn, dead: make(chan struct{}), frames: make(chan []byte), rerr: make(chan error, 1)}
	var closing sync.WaitGroup
	defer func() {
		stopRead()
		_ = conn.CloseNow()
		g.wg.Wait()
		closing.Wait()
	}()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.readLoop(rctx)
	}()
	end := r.serve(ctx, g)
	if ctx.Err() != nil {
		// A polite close; CloseNow in the deferred func cuts it short
		// when the gateway does not answer in time.
		done := make(chan struct{})
		closing.Add(1)
		go func() {
			defer closing.Done()
			_ = conn.Close(websocket.StatusNormalClosure, "stopping")
			close(done)
		}()
		t := c.clk.NewTimer(time.Second)
		select {
		case <-done:
		case <-t.C():
		}
		t.Stop()
	}
	return end
}

// errFrameTooLarge ends a connection whose frame exceeded the hard limit
// (16 × Config.MaxFrameBytes).
var errFrameTooLarge = errors.New("qqbot: gateway frame over the hard size limit")

// hardFrameLimit is the largest frame read at all; frames between
// MaxFrameBytes and it are read, acknowledged and dropped.
func (c *Channel) hardFrameLimit() int64 {
	if c.cfg.MaxFrameBytes > math.MaxInt64/16 {
		return math.MaxInt64 - 1
	}
	return 16 * c.cfg.MaxFrameBytes
}

// readLoop hands frames to serve until the connection fails.
func (g *gatewayConn) readLoop(ctx context.Context) {
	hard := g.c.hardFrameLimit()
	for {
		typ, rd, err := g.conn.Reader(ctx)
		if err != nil {
			g.rerr <- err
			return
		}
		data, err := io.ReadAll(io.LimitReader(rd, hard+1))
		if err != nil {
			g.rerr <- err
			return
		}
		if int64(len(data)) > hard {
			g.rerr <- errFrameTooLarge
			return
		}
		if typ != websocket.MessageText {
			g.c.log.Warn("qq_frame_dropped", "reason", "binary frame", "bytes", len(data))
			continue
		}
		select {
		case g.frames <- data:
		case <-ctx.Done():
			return
		}
	}
}

// serve waits for Hello, identifies or resumes, and handles frames.
func (r *runner) serve(ctx context.Context, g *gatewayConn) sessionEnd {
	c := r.c
	hello, end, ok := r.awaitHello(ctx, g)
	if !ok {
		return end
	}
	interval := time.Duration(hello.HeartbeatInterval) * time.Millisecond
	if interval <= 0 {
		interval = 45 * time.Second
	}
	hctx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	g.acked.Store(true)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		r.heartbeat(hctx, g, interval)
	}()

	tok, err := c.tokens.get(ctx)
	if err != nil {
		if errors.Is(err, ErrUnauthorized) {
			return sessionEnd{fatal: err}
		}
		return sessionEnd{reason: "access token: " + err.Error()}
	}
	sessionID, seq := r.session()
	if sessionID != "" {
		err = g.write(ctx, map[string]any{"op": opResume, "d": map[string]any{"token": tok, "session_id": sessionID, "seq": seq}})
		c.log.Info("qq_gateway_resume", "seq", seq)
	} else {
		err = g.write(ctx, map[string]any{"op": opIdentify, "d": map[string]any{
			"token":      "QQBot " + tok,
			"intents":    c.cfg.Intents,
			"shard":      [2]int{0, 1},
			"properties": map[string]string{"$os": runtime.GOOS, "$browser": "persona", "$device": "persona"},
		}})
		c.log.Info("qq_gateway_identify", "intents", c.cfg.Intents)
	}
	if err != nil {
		return sessionEnd{reason: "sending Identify/Resume: " + c.tokens.scrub(err).Error()}
	}

	ready := false
	for {
		select {
		case <-ctx.Done():
			return sessionEnd{ready: ready, reason: "stopped"}
		case <-g.dead:
			return sessionEnd{ready: ready, reason: "heartbeat not acknowledged"}
		case err := <-g.rerr:
			end := r.closed(err)
			end.ready = end.ready || ready
			return end
		case data := <-g.frames:
			p, err := decodePayload(data)
			if err != nil {
				c.log.Warn("qq_frame_dropped", "reason", err.Error(), "bytes", len(data))
				continue
			}
			if int64(len(data)) > c.cfg.MaxFrameBytes {
				c.log.Warn("qq_frame_dropped", "reason", "frame over MaxFrameBytes", "bytes", len(data), "op", p.Op,
					"seq", p.S, "type", truncate(p.T, maxEventTypeBytes), "effect", "acknowledged and dropped")
				if p.Op == opDispatch {
					r.accept(p.S, nil)
				}
				continue
			}
			switch p.Op {
			case opDispatch:
				end, stop := r.dispatch(ctx, p, &ready)
				if stop {
					end.ready = end.ready || ready
					return end
				}
			case opHeartbeatAck:
				g.acked.Store(true)
			case opHeartbeat:
				_, seq := r.session()
				if err := g.write(ctx, map[string]any{"op": opHeartbeat, "d": nullableSeq(seq)}); err != nil {
					return sessionEnd{ready: ready, reason: "heartbeat: " + err.Error()}
				}
			case opReconnect:
				return sessionEnd{ready: ready, reason: "the gateway asked for a reconnect (op 7)"}
			case opInvalidSession:
				r.clearSession("invalid session (op 9)")
				return sessionEnd{ready: ready, reason: "invalid session (op 9); identifying anew"}
			case opHello:
				c.log.Debug("qq_frame_dropped", "reason", "a second Hello")
			default:
				c.log.Warn("qq_frame_dropped", "reason", fmt.Sprintf("unknown op %d", p.Op), "bytes", len(data))
			}
		}
	}
}

// awaitHello waits (CallTimeout) for the first frame, which must be Hello.
func (r *runner) awaitHello(ctx context.Context, g *gatewayConn) (qqHello, sessionEnd, bool) {
	c := r.c
	t := c.clk.NewTimer(c.cfg.CallTimeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return qqHello{}, sessionEnd{reason: "stopped"}, false
		case <-t.C():
			return qqHello{}, sessionEnd{reason: "no Hello within " + c.cfg.CallTimeout.String()}, false
		case err := <-g.rerr:
			return qqHello{}, r.closed(err), false
		case data := <-g.frames:
			p, err := decodePayload(data)
			if err != nil || p.Op != opHello {
				c.log.Warn("qq_frame_dropped", "reason", "expected Hello", "bytes", len(data))
				continue
			}
			var h qqHello
			if p.D != nil {
				if err := json.Unmarshal(p.D, &h); err != nil {
					c.log.Warn("qq_hello_malformed", "err", err)
				}
			}
			return h, sessionEnd{}, true
		}
	}
}

// heartbeat sends op 1 with the last accepted sequence every interval and
// declares the connection dead when the previous heartbeat was not
// acknowledged by the time the next is due.
func (r *runner) heartbeat(ctx context.Context, g *gatewayConn, interval time.Duration) {
	c := r.c
	for {
		t := c.clk.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if !g.acked.Swap(false) {
			c.log.Warn("qq_heartbeat_missed", "interval", interval)
			close(g.dead)
			return
		}
		_, seq := r.session()
		if err := g.write(ctx, map[string]any{"op": opHeartbeat, "d": nullableSeq(seq)}); err != nil {
			if ctx.Err() == nil {
				c.log.Debug("qq_heartbeat_failed", "err", err)
			}
			return // the read side sees the broken connection
		}
	}
}

func nullableSeq(seq int64) any {
	if seq <= 0 {
		return nil
	}
	return seq
}

// session returns the saved session id and resume sequence.
func (r *runner) session() (string, int64) {
	c := r.c
	c.stMu.Lock()
	defer c.stMu.Unlock()
	return c.st.SessionID, c.st.Seq
}

// clearSession forgets the session: the next connection identifies.
func (r *runner) clearSession(why string) {
	c := r.c
	c.stMu.Lock()
	defer c.stMu.Unlock()
	if c.st.SessionID == "" && c.st.Seq == 0 {
		return
	}
	c.log.Info("qq_session_cleared", "reason", why)
	c.st.SessionID, c.st.Seq = "", 0
	c.saveLocked("session cleared")
}

// accept records that dispatch s needs no more delivery (the sink
// accepted its event, or it had none), with the reply target it offers.
func (r *runner) accept(s int64, ref *inboundRef) {
	c := r.c
	c.stMu.Lock()
	defer c.stMu.Unlock()
	changed := false
	if s > c.st.Seq {
		c.st.Seq, changed = s, true
	}
	if ref != nil {
		if c.st.find(ref.Chat, ref.ID) == nil {
			c.st.Inbound = append(c.st.Inbound, ref)
		}
		changed = true
	}
	if changed {
		c.saveLocked("resume sequence")
	}
}

// dispatch handles an op 0 frame; stop ends the connection.
func (r *runner) dispatch(ctx context.Context, p payload, ready *bool) (sessionEnd, bool) {
	c := r.c
	switch p.T {
	case eventReady:
		var rd qqReady
		if p.D == nil || json.Unmarshal(p.D, &rd) != nil || rd.SessionID == "" || len(rd.SessionID) > maxIDBytes {
			c.log.Warn("qq_frame_dropped", "reason", "READY without a session id")
			return sessionEnd{reason: "READY without a session id"}, true
		}
		c.setUserID(string(rd.User.ID))
		c.stMu.Lock()
		c.st.SessionID, c.st.Seq = rd.SessionID, p.S
		c.saveLocked("session")
		c.stMu.Unlock()
		*ready = true
		c.log.Info("qq_gateway_ready", "bot_user_id", string(rd.User.ID), "username", rd.User.Username)
		r.report(ctx, true, "gateway ready")
		return sessionEnd{}, false
	case eventResumed:
		r.accept(p.S, nil)
		*ready = true
		r.report(ctx, true, "gateway resumed")
		return sessionEnd{}, false
	}
	d := normalize(c.identity(), p.T, p.ID, p.D, c.clk.Now())
	if d.skip != "" {
		if d.invalid {
			c.log.Warn("qq_event_invalid", "seq", p.S, "event_id", truncate(p.ID, 80), "reason", d.skip,
				"effect", "acknowledged and dropped: redelivery cannot make it valid")
		} else {
			c.log.Debug("qq_event_skipped", "seq", p.S, "reason", d.skip)
		}
		r.accept(p.S, nil)
		return sessionEnd{}, false
	}
	// The message can be replied to as soon as the pipeline has it; it is
	// saved with the sequence once accepted.
	c.rememberInbound(d.ref, false)
	if err := r.sink.HandleEvent(ctx, d.ev); err != nil {
		if ctx.Err() != nil {
			return sessionEnd{reason: "stopped"}, true
		}
		c.log.Warn("qq_event_nacked", "seq", p.S, "chat", d.ev.Chat.String(), "message_id", d.ev.MessageID, "err", err,
			"effect", "connection closed; the resume after a backoff delivers it again")
		return sessionEnd{reason: "an event was not accepted"}, true
	}
	r.accept(p.S, d.ref)
	return sessionEnd{}, false
}

// closed turns a read error into how the connection ended, following the
// gateway's close codes (the docs' error-trace/websocket.md).
func (r *runner) closed(err error) sessionEnd {
	c := r.c
	code := int(websocket.CloseStatus(err))
	var ce websocket.CloseError
	reason := ""
	if errors.As(err, &ce) {
		reason = truncate(ce.Reason, 200)
	}
	switch {
	case errors.Is(err, errFrameTooLarge):
		// Resuming would replay the frame: after the second time at the
		// same sequence the session is dropped.
		_, seq := r.session()
		if r.tooBigSeq == seq && r.tooBig > 0 {
			r.clearSession("a frame over the hard size limit came twice at the same sequence")
			r.tooBig = 0
		} else {
			r.tooBigSeq, r.tooBig = seq, 1
		}
		return sessionEnd{reason: err.Error()}
	case code == -1:
		return sessionEnd{reason: "connection lost: " + c.tokens.scrub(err).Error()}
	case code == 4004:
		// Authentication failed: a new token for the next try.
		c.tokens.invalidate(c.currentToken())
		return sessionEnd{reason: fmt.Sprintf("closed with %d (authentication failed)", code)}
	case code == 4001, code == 4002, code == 4006, code == 4007, code >= 4900 && code <= 4913:
		r.clearSession(fmt.Sprintf("close code %d", code))
		return sessionEnd{reason: fmt.Sprintf("closed with %d %s; identifying anew", code, reason)}
	case code >= 4010 && code <= 4014, code == 4914, code == 4915:
		return sessionEnd{fatal: &GatewayError{Code: code, Reason: reason}}
	}
	return sessionEnd{reason: fmt.Sprintf("closed with %d %s", code, reason)}
}

// rememberInbound adds a reply target to the ledger (nil: nothing),
// saving the state when save is set.
func (c *Channel) rememberInbound(ref *inboundRef, save bool) {
	if ref == nil {
		return
	}
	c.stMu.Lock()
	defer c.stMu.Unlock()
	if c.st.find(ref.Chat, ref.ID) != nil {
		return
	}
	c.st.Inbound = append(c.st.Inbound, ref)
	if save {
		c.saveLocked("reply target")
	}
}

// currentToken is the cached token ("" when none).
func (c *Channel) currentToken() string {
	c.tokens.mu.Lock()
	defer c.tokens.mu.Unlock()
	return c.tokens.tok
}
