package feishu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/personakit/persona/clock"
)

// Long-connection limits.
const (
	// maxFragments bounds the "sum" of a fragmented event.
	maxFragments = 64
	// maxPartials bounds the fragmented events being reassembled at once.
	maxPartials = 32
	// fragmentTTL drops a fragmented event whose other parts did not come.
	fragmentTTL = 30 * time.Second
	// deadAfter is how many ping intervals without any frame from the
	// server end the connection.
	deadAfter = 3
	// frameQueue is how many data frames wait for the sink.
	frameQueue = 64
)

// Handshake headers of a refused long connection [SDK ws/const.go].
const (
	headerHandshakeStatus  = "Handshake-Status"
	headerHandshakeAuthErr = "Handshake-Autherrcode"
)

// errConflict marks a connection refused because the app has too many
// long connections (another process runs with the same app).
var errConflict = errors.New("feishu: long connection limit exceeded (another client of this app is connected)")

// wsEndpoint is the answer of the long-connection endpoint.
type wsEndpoint struct {
	URL          string          `json:"URL"`
	ClientConfig *wsClientConfig `json:"ClientConfig"`
}

// wsClientConfig is the connection configuration the server hands out
// (in the endpoint answer and in pongs); the adapter uses PingInterval
// and keeps its own reconnect backoff.
type wsClientConfig struct {
	ReconnectCount    int `json:"ReconnectCount"`
	ReconnectInterval int `json:"ReconnectInterval"`
	ReconnectNonce    int `json:"ReconnectNonce"`
	PingInterval      int `json:"PingInterval"` // seconds
}

// wsAck is the payload of the answer to a data frame.
type wsAck struct {
	Code    int               `json:"code"`
	Headers map[string]string `json:"headers"`
	Data    []byte            `json:"data"`
}

// longConnection keeps the long connection up until ctx ends or the
// platform refuses the app.
func (r *runner) longConnection(ctx context.Context) error {
	c := r.c
	for {
		up, err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrUnauthorized) {
			c.log.Error("feishu_unauthorized", "op", "long connection", "err", err)
			return err
		}
		if up {
			r.fails = 0
		}
		r.fails++
		if errors.Is(err, errConflict) {
			c.log.Error("duplicate_client_conflict", "err", err,
				"hint", "another process holds long connections of this app; stop it or use one process per app")
		} else {
			c.log.Warn("feishu_ws_disconnected", "err", err, "attempt", r.fails)
		}
		r.report(ctx, false, "long connection: "+err.Error())
		if !r.sleep(ctx, c.retryDelay(r.fails, err)) {
			return nil
		}
	}
}

// session opens one long connection and serves it until it ends. up
// says whether the connection was established.
func (r *runner) session(ctx context.Context) (up bool, err error) {
	c := r.c
	ep, err := c.wsEndpoint(ctx)
	if err != nil {
		return false, err
	}
	u, err := url.Parse(ep.URL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return false, errors.New("feishu: ws_endpoint: the answer has no ws(s) URL")
	}
	var service int32
	if s := u.Query().Get("service_id"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return false, errors.New("feishu: ws_endpoint: service_id is not a 32-bit integer")
		}
		service = int32(n)
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	conn, resp, err := websocket.Dial(dctx, ep.URL, &websocket.DialOptions{HTTPClient: c.cfg.HTTPClient})
	cancel()
	if err != nil {
		return false, handshakeError(resp, redactURL(err, ep.URL, u))
	}
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	conn.SetReadLimit(2*c.cfg.MaxBodyBytes + 4096)
	ping := c.cfg.PingInterval
	if ep.ClientConfig != nil && ep.ClientConfig.PingInterval > 0 {
		ping = time.Duration(ep.ClientConfig.PingInterval) * time.Second
	}
	c.log.Info("feishu_ws_connected", "host", u.Host, "ping_interval", ping.String()) // never the URL: it holds a ticket
	s := &wsSession{r: r, conn: conn, service: service, frames: make(chan Frame, frameQueue), parts: map[string]*partial{}}
	s.ping.Store(int64(ping))
	s.lastRecv.Store(c.clk.Now().UnixNano())
	r.succeeded(ctx, "long connection up")
	return true, s.serve(ctx)
}

// wsEndpoint asks for a long-connection URL with the app's credentials.
func (c *Channel) wsEndpoint(ctx context.Context) (wsEndpoint, error) {
	var ep wsEndpoint
	_, err := c.call(ctx, request{op: "ws_endpoint", method: http.MethodPost, path: "/callback/ws/endpoint",
		body: map[string]string{"AppID": c.cfg.AppID, "AppSecret": c.cfg.AppSecret}, noAuth: true}, &ep)
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Code {
		case codeWSForbidden, codeWSAuthFailed:
			return ep, fmt.Errorf("%w: %w", ErrUnauthorized, err)
		case codeWSConnLimit:
			return ep, fmt.Errorf("%w: %w", errConflict, err)
		}
	}
	if err != nil {
		return ep, err
	}
	if ep.URL == "" {
		return ep, errors.New("feishu: ws_endpoint: the answer has no URL")
	}
	return ep, nil
}

// handshakeError classifies a refused WebSocket handshake by its
// Handshake-Status header: 403 refuses the app, 514 with auth error
// 1000040350 is the connection limit; anything else is transient.
func handshakeError(resp *http.Response, err error) error {
	if resp == nil {
		return fmt.Errorf("feishu: long connection: %w", err)
	}
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	status, _ := strconv.Atoi(resp.Header.Get(headerHandshakeStatus))
	auth, _ := strconv.Atoi(resp.Header.Get(headerHandshakeAuthErr))
	switch {
	case status == codeWSForbidden:
		return fmt.Errorf("%w: long connection refused (handshake status %d)", ErrUnauthorized, status)
	case status == codeWSAuthFailed && auth == codeWSConnLimit:
		return fmt.Errorf("%w (handshake status %d)", errConflict, status)
	}
	return fmt.Errorf("feishu: long connection: handshake failed (HTTP %d, handshake status %d): %w", resp.StatusCode, status, err)
}

// redactURL removes the endpoint URL (it holds a connection ticket) from
// a dial error's text.
func redactURL(err error, raw string, u *url.URL) error {
	msg := err.Error()
	for _, s := range []string{raw, u.String(), u.RawQuery} {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "<endpoint>")
		}
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is an error whose text had a secret in it. It has no
// Unwrap, so the original text cannot be reached; Is consults the
// original.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

// Is reports whether the original error matches target.
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// wsSession is one long connection.
type wsSession struct {
	r        *runner
	conn     *websocket.Conn
	service  int32
	ping     atomic.Int64 // the ping interval
	lastRecv atomic.Int64 // clock time of the last frame, Unix ns
	blocked  atomic.Bool  // the reader waits for room in frames
	frames   chan Frame   // data frames for the deliverer
	parts    map[string]*partial
}

// partial is a fragmented event being reassembled (reader goroutine
// only).
type partial struct {
	parts [][]byte
	got   int
	size  int
	first time.Time
}

// serve runs the reader, the pinger and the deliverer until the
// connection ends, and returns why it ended.
func (s *wsSession) serve(ctx context.Context) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() { s.pinger(sctx, cancel) })
	wg.Go(func() { s.deliverer(ctx, sctx) })
	err := s.reader(sctx)
	cancel(err)
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	_ = s.conn.Close(websocket.StatusNormalClosure, "")
	wg.Wait()
	return err
}

// reader reads frames until the connection fails.
func (s *wsSession) reader(ctx context.Context) error {
	c := s.r.c
	for {
		typ, data, err := s.conn.Read(ctx)
		if err != nil {
			switch {
			case errors.Is(err, websocket.ErrMessageTooBig):
				c.log.Warn("feishu_ws_frame_dropped", "reason", "frame over the read limit; reconnecting")
				return fmt.Errorf("feishu: long connection: a frame over the read limit: %w", err)
			case websocket.CloseStatus(err) != -1:
				return fmt.Errorf("feishu: long connection closed by the server (status %s)", websocket.CloseStatus(err))
			}
			return fmt.Errorf("feishu: long connection: %w", err)
		}
		s.lastRecv.Store(c.clk.Now().UnixNano())
		if typ != websocket.MessageBinary {
			c.log.Warn("feishu_ws_frame_dropped", "reason", "text message", "bytes", len(data))
			continue
		}
		f, err := UnmarshalFrame(data)
		if err != nil {
			c.log.Warn("feishu_ws_frame_dropped", "reason", "malformed frame", "err", err, "bytes", len(data))
			continue
		}
		switch f.Method {
		case FrameControl:
			s.control(f)
		case FrameData:
			payload, ok := s.assemble(f)
			if !ok {
				continue
			}
			switch t := f.Header(HeaderType); t {
			case TypeEvent:
				f.Payload = payload
				if err := s.enqueue(ctx, f); err != nil {
					return err
				}
			case TypeCard:
				c.log.Info("feishu_ws_frame_skipped", "reason", "card callback (not handled)")
			default:
				c.log.Warn("feishu_ws_frame_dropped", "reason", "unknown data frame type", "type", t)
			}
		default:
			c.log.Warn("feishu_ws_frame_dropped", "reason", "unknown frame method", "method", f.Method)
		}
	}
}

// enqueue hands an event frame to the deliverer. While the queue is
// full (a slow sink) the reader reads nothing, pongs included: the
// pinger does not count that time as the server's silence (blocked), and
// the wait ends with lastRecv set to its end.
func (s *wsSession) enqueue(ctx context.Context, f Frame) error {
	select {
	case s.frames <- f:
		return nil
	default:
	}
	c := s.r.c
	c.log.Warn("feishu_ws_queue_full", "frames", cap(s.frames), "message_id", f.Header(HeaderMessageID),
		"effect", "reading paused until the sink takes an event")
	s.blocked.Store(true)
	defer func() {
		s.lastRecv.Store(c.clk.Now().UnixNano())
		s.blocked.Store(false)
	}()
	select {
	case s.frames <- f:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// control handles a control frame: a pong may carry a new ClientConfig.
func (s *wsSession) control(f Frame) {
	c := s.r.c
	switch t := f.Header(HeaderType); t {
	case TypePong:
		if len(f.Payload) == 0 {
			return
		}
		var cc wsClientConfig
		if err := json.Unmarshal(f.Payload, &cc); err != nil {
			c.log.Warn("feishu_ws_pong_malformed", "err", err)
			return
		}
		if cc.PingInterval > 0 && cc.PingInterval <= 3600 {
			s.ping.Store(int64(time.Duration(cc.PingInterval) * time.Second))
		}
	case TypePing:
	default:
		c.log.Debug("feishu_ws_frame_skipped", "reason", "unknown control frame type", "type", t)
	}
}

// assemble returns the payload of a data frame, reassembling fragments
// (headers sum and seq, grouped by message_id); ok is false while parts
// are missing and for frames that are dropped.
func (s *wsSession) assemble(f Frame) ([]byte, bool) {
	c := s.r.c
	limit := int(c.cfg.MaxBodyBytes)
	sum, seq, id := f.headerInt(HeaderSum, 1), f.headerInt(HeaderSeq, 0), f.Header(HeaderMessageID)
	drop := func(reason string) ([]byte, bool) {
		c.log.Warn("feishu_ws_frame_dropped", "reason", reason, "message_id", id, "sum", f.Header(HeaderSum), "seq", f.Header(HeaderSeq))
		return nil, false
	}
	switch {
	case sum < 0 || seq < 0 || sum > maxFragments:
		return drop("malformed sum or seq header")
	case sum <= 1:
		if len(f.Payload) > limit {
			return drop("event larger than MaxBodyBytes")
		}
		return f.Payload, true
	case seq >= sum:
		return drop("seq out of range")
	case id == "":
		return drop("fragment without message_id")
	}
	now := c.clk.Now()
	for k, p := range s.parts {
		if now.Sub(p.first) > fragmentTTL {
			c.log.Warn("feishu_ws_frame_dropped", "reason", "fragments missing", "message_id", k)
			delete(s.parts, k)
		}
	}
	p := s.parts[id]
	if p == nil {
		if len(s.parts) >= maxPartials {
			return drop("too many fragmented events at once")
		}
		p = &partial{parts: make([][]byte, sum), first: now}
		s.parts[id] = p
	}
	if len(p.parts) != sum {
		delete(s.parts, id)
		return drop("fragments disagree on sum")
	}
	if p.parts[seq] == nil {
		p.got++
		p.size += len(f.Payload)
	}
	p.parts[seq] = append([]byte{}, f.Payload...)
	if p.size > limit {
		delete(s.parts, id)
		return drop("event larger than MaxBodyBytes")
	}
	if p.got < sum {
		return nil, false
	}
	delete(s.parts, id)
	out := make([]byte, 0, p.size)
	for _, b := range p.parts {
		out = append(out, b...)
	}
	return out, true
}

// pinger pings at the current interval and ends the connection when the
// server has been silent for deadAfter intervals. Time the reader spends
// blocked on a full queue is not silence: the frames wait unread.
func (s *wsSession) pinger(ctx context.Context, cancel context.CancelCauseFunc) {
	c := s.r.c
	for first := true; ; first = false {
		interval := time.Duration(s.ping.Load())
		if !first && !clock.Sleep(c.clk, ctx.Done(), interval) {
			return
		}
		// blocked first: the reader sets lastRecv before it clears blocked.
		if !s.blocked.Load() {
			silent := c.clk.Now().Sub(time.Unix(0, s.lastRecv.Load()))
			if silent > deadAfter*interval {
				cancel(fmt.Errorf("feishu: long connection: no frame from the server for %s", silent.Round(time.Second)))
				return
			}
		}
		ping := Frame{Method: FrameControl, Service: s.service, Headers: []FrameHeader{{Key: HeaderType, Value: TypePing}}}
		if err := s.write(ctx, ping); err != nil {
			if ctx.Err() == nil {
				cancel(fmt.Errorf("feishu: long connection: ping: %w", err))
			}
			return
		}
	}
}

// deliverer hands events to the sink in order and answers each frame
// after the sink did. runCtx is Run's context (a dropped connection does
// not cut a durable enqueue short); sctx ends with the connection.
func (s *wsSession) deliverer(runCtx, sctx context.Context) {
	c := s.r.c
	for {
		var f Frame
		select {
		case f = <-s.frames:
		case <-sctx.Done():
			return
		}
		start := c.clk.Now()
		code := s.handle(runCtx, f)
		f.Headers = append(f.Headers, FrameHeader{Key: HeaderBizRT, Value: strconv.FormatInt(c.clk.Now().Sub(start).Milliseconds(), 10)})
		ack, _ := json.Marshal(wsAck{Code: code})
		f.Payload = ack
		if err := s.write(sctx, f); err != nil {
			c.log.Warn("feishu_ws_ack_failed", "message_id", f.Header(HeaderMessageID), "code", code, "err", err,
				"effect", "Feishu delivers the event again; the pipeline's enqueue is idempotent")
		}
	}
}

// handle delivers one event payload and returns the answer's code: 200
// once the sink accepted it (or when it holds no message to deliver),
// 500 when the sink refused it, 400 when it is malformed.
func (s *wsSession) handle(ctx context.Context, f Frame) int {
	c := s.r.c
	var cb callbackBody
	payload := f.Payload
	if !utf8.Valid(payload) {
		c.log.Warn("feishu_event_malformed", "message_id", f.Header(HeaderMessageID), "reason", "not UTF-8")
		return http.StatusBadRequest
	}
	if err := json.Unmarshal(payload, &cb); err != nil {
		c.log.Warn("feishu_event_malformed", "message_id", f.Header(HeaderMessageID), "reason", "malformed JSON")
		return http.StatusBadRequest
	}
	if cb.Encrypt != nil {
		plain, err := Decrypt(*cb.Encrypt, c.cfg.EncryptKey)
		if c.cfg.EncryptKey == "" || err != nil {
			c.log.Warn("feishu_event_malformed", "message_id", f.Header(HeaderMessageID), "reason", "cannot decrypt", "err", err)
			return http.StatusBadRequest
		}
		payload, cb = plain, callbackBody{}
		if err := json.Unmarshal(payload, &cb); err != nil || !utf8.Valid(payload) {
			c.log.Warn("feishu_event_malformed", "message_id", f.Header(HeaderMessageID), "reason", "malformed decrypted JSON")
			return http.StatusBadRequest
		}
	}
	d, err := decodeEvent(&cb, payload, s.r.botID, c.cfg.AppID, c.clk.Now())
	if err != nil {
		c.log.Warn("feishu_event_malformed", "message_id", f.Header(HeaderMessageID), "err", err)
		return http.StatusBadRequest
	}
	if err := c.deliver(ctx, s.r.sink, d); err != nil {
		return http.StatusInternalServerError
	}
	return http.StatusOK
}

// write sends a frame with the call deadline.
func (s *wsSession) write(ctx context.Context, f Frame) error {
	wctx, cancel := context.WithTimeout(ctx, s.r.c.cfg.CallTimeout)
	defer cancel()
	return s.conn.Write(wctx, websocket.MessageBinary, MarshalFrame(f))
}
