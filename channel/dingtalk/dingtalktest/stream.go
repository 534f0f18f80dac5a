package dingtalktest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// ErrNoConnection is returned by the push methods when no stream
// connection opened before their context ended (DingTalk would not
// deliver the message either).
var ErrNoConnection = errors.New("dingtalktest: no stream connection")

// Frame is a server-to-client stream frame; Data is the payload text,
// sent as a JSON string.
type Frame struct {
	SpecVersion string            `json:"specVersion,omitempty"`
	Type        string            `json:"type"`
	Headers     map[string]string `json:"headers"`
	Data        string            `json:"data"`
}

// Ack is an acknowledgement the client sent.
type Ack struct {
	// Conn is the number of the connection it came on (1-based, in
	// accept order).
	Conn int
	// MessageID, Code, Message and Data are the acknowledgement's
	// headers.messageId, code, message and data (decoded from its JSON
	// string).
	MessageID string
	Code      int
	Message   string
	Data      string
	// Raw is the frame as received.
	Raw []byte
	At  time.Time
}

// streamConn is one accepted stream connection.
type streamConn struct {
	s        *Server
	n        int
	ws       *websocket.Conn
	done     chan struct{} // closed when the handler returned
	mu       sync.Mutex
	closing  bool
	killOnce sync.Once
}

func (c *streamConn) kill() {
	c.killOnce.Do(func() { _ = c.ws.CloseNow() })
}

// handleConnect is GET /connect?ticket=…: the ticket must be known,
// unexpired and unused.
func (s *Server) handleConnect(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	exp, ok := s.tickets[ticket]
	delete(s.tickets, ticket) // single use
	ok = ok && s.clk.Now().Before(exp)
	closed := s.closed
	s.mu.Unlock()
	if closed {
		http.Error(w, "closed", http.StatusServiceUnavailable)
		return
	}
	if !ok {
		apiError(w, http.StatusUnauthorized, "invalidTicket", "the ticket is unknown, used or expired")
		return
	}
	ws, err := websocket.Accept(&hijacker{ResponseWriter: w, s: s}, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(1 << 20)
	s.mu.Lock()
	s.accepted++
	c := &streamConn{s: s, n: s.accepted, ws: ws, done: make(chan struct{})}
	s.conns = append(s.conns, c)
	s.notifyLocked()
	off := s.offline || s.closed // went offline during the handshake
	s.mu.Unlock()
	if off {
		c.kill()
	}
	defer func() {
		s.mu.Lock()
		for i, x := range s.conns {
			if x == c {
				s.conns = append(s.conns[:i], s.conns[i+1:]...)
				break
			}
		}
		s.notifyLocked()
		s.mu.Unlock()
		close(c.done)
	}()
	c.readAcks(context.WithoutCancel(r.Context()))
}

// readAcks reads the client's frames (acknowledgements) until the
// connection ends.
func (c *streamConn) readAcks(ctx context.Context) {
	for {
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			c.kill()
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		var a struct {
			Code    json.Number       `json:"code"`
			Headers map[string]string `json:"headers"`
			Message string            `json:"message"`
			Data    string            `json:"data"`
		}
		ack := Ack{Conn: c.n, Raw: data, At: c.s.clk.Now()}
		if json.Unmarshal(data, &a) == nil {
			code, _ := strconv.Atoi(a.Code.String())
			ack.Code, ack.MessageID, ack.Message, ack.Data = code, a.Headers["messageId"], a.Message, a.Data
		}
		c.s.mu.Lock()
		c.s.acks = append(c.s.acks, ack)
		c.s.notifyLocked()
		c.s.mu.Unlock()
	}
}

// Freeze stalls (true) or resumes (false) every stream connection, like a
// network path that stopped carrying packets: what the client sends is
// held (no acknowledgement is recorded, no WebSocket ping answered) until
// the connection is resumed or closed.
func (s *Server) Freeze(frozen bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.gate:
		if frozen {
			s.gate = make(chan struct{})
		}
	default:
		if !frozen {
			close(s.gate)
		}
	}
}

// hijacker hands websocket.Accept a connection whose reads Freeze can
// stall.
type hijacker struct {
	http.ResponseWriter
	s *Server
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("dingtalktest: the ResponseWriter cannot be hijacked")
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &gatedConn{Conn: c, s: h.s, closed: make(chan struct{})}, brw, nil
}

// gatedConn holds what it read while the server is frozen.
type gatedConn struct {
	net.Conn
	s      *Server
	closed chan struct{}
	once   sync.Once
}

func (g *gatedConn) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	for {
		g.s.mu.Lock()
		gate := g.s.gate
		g.s.mu.Unlock()
		select {
		case <-gate:
			return n, err
		case <-g.closed:
			return 0, net.ErrClosed
		}
	}
}

func (g *gatedConn) Close() error {
	g.once.Do(func() { close(g.closed) })
	return g.Conn.Close()
}

// Connections is the number of open stream connections; Accepted the
// number accepted since New.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Accepted is the number of stream connections accepted since New.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// WaitAccepted waits until at least n stream connections were accepted
// and one is open.
func (s *Server) WaitAccepted(ctx context.Context, n int) error {
	return s.waitFor(ctx, func() bool { return s.accepted >= n && s.liveLocked() != nil })
}

// live waits until a connection not announced to close is open (a
// client may see its handshake complete just before the server records
// the connection) and returns the newest; ErrNoConnection when ctx ends
// first.
func (s *Server) live(ctx context.Context) (*streamConn, error) {
	var c *streamConn
	err := s.waitFor(ctx, func() bool {
		c = s.liveLocked()
		return c != nil || s.closed
	})
	if c == nil || err != nil {
		return nil, ErrNoConnection
	}
	return c, nil
}

// liveLocked is the newest connection not announced to close.
func (s *Server) liveLocked() *streamConn {
	for i := len(s.conns) - 1; i >= 0; i-- {
		c := s.conns[i]
		c.mu.Lock()
		closing := c.closing
		c.mu.Unlock()
		if !closing {
			return c
		}
	}
	return nil
}

// Drop closes every stream connection abruptly (no close frame), as a
// network failure would.
func (s *Server) Drop() {
	s.mu.Lock()
	conns := append([]*streamConn(nil), s.conns...)
	s.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
}

// nextFrameID returns a messageId in DingTalk's style.
func (s *Server) nextFrameID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextFrame++
	return fmt.Sprintf("%s_%d_%x_%x", randHex(4), 970+s.nextFrame%10, s.clk.Now().UnixMilli(), s.nextFrame)
}

// PushFrame sends a frame on the newest open connection (headers
// messageId, contentType and time are filled in when missing) and returns
// its messageId.
func (s *Server) PushFrame(ctx context.Context, f Frame) (string, error) {
	if f.Headers == nil {
		f.Headers = map[string]string{}
	}
	if f.Headers["messageId"] == "" {
		f.Headers["messageId"] = s.nextFrameID()
	}
	if f.Headers["contentType"] == "" {
		f.Headers["contentType"] = "application/json"
	}
	if f.Headers["time"] == "" {
		f.Headers["time"] = strconv.FormatInt(s.clk.Now().UnixMilli(), 10)
	}
	if f.SpecVersion == "" && f.Type != "SYSTEM" {
		f.SpecVersion = "1.0"
	}
	raw, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	return f.Headers["messageId"], s.PushRaw(ctx, raw)
}

// PushRaw writes raw bytes as one text frame on the newest open
// connection.
func (s *Server) PushRaw(ctx context.Context, raw []byte) error {
	return s.pushRaw(ctx, websocket.MessageText, raw)
}

// PushBinary writes raw bytes as one binary frame (the protocol only
// uses text frames).
func (s *Server) PushBinary(ctx context.Context, raw []byte) error {
	return s.pushRaw(ctx, websocket.MessageBinary, raw)
}

func (s *Server) pushRaw(ctx context.Context, typ websocket.MessageType, raw []byte) error {
	c, err := s.live(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.ws.Write(wctx, typ, raw); err != nil {
		return fmt.Errorf("dingtalktest: push: %w", err)
	}
	return nil
}

// Acks lists the acknowledgements received, in order.
func (s *Server) Acks() []Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Ack(nil), s.acks...)
}

// WaitAck waits for the first acknowledgement of the frame messageID and
// returns it.
func (s *Server) WaitAck(ctx context.Context, messageID string) (Ack, error) {
	var found Ack
	err := s.waitFor(ctx, func() bool {
		for _, a := range s.acks {
			if a.MessageID == messageID {
				found = a
				return true
			}
		}
		return false
	})
	return found, err
}

// AcksOf lists every acknowledgement of the frame messageID.
func (s *Server) AcksOf(messageID string) []Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Ack
	for _, a := range s.acks {
		if a.MessageID == messageID {
			out = append(out, a)
		}
	}
	return out
}

// Ping sends a SYSTEM ping with a fresh opaque and waits for its
// acknowledgement, which must echo the opaque.
func (s *Server) Ping(ctx context.Context) (Ack, error) {
	opaque := randHex(4) + "-" + randHex(2)
	data, _ := json.Marshal(map[string]string{"opaque": opaque})
	id, err := s.PushFrame(ctx, Frame{Type: "SYSTEM", Headers: map[string]string{"topic": "ping"}, Data: string(data)})
	if err != nil {
		return Ack{}, err
	}
	a, err := s.WaitAck(ctx, id)
	if err != nil {
		return a, err
	}
	var got struct {
		Opaque string `json:"opaque"`
	}
	if json.Unmarshal([]byte(a.Data), &got) != nil || got.Opaque != opaque || a.Code != 200 {
		return a, fmt.Errorf("dingtalktest: ping answered %d with data %q, want 200 and opaque %q", a.Code, a.Data, opaque)
	}
	return a, nil
}

// Disconnect announces the close of the newest connection with a SYSTEM
// disconnect frame (reason "connection is expired" when empty); the
// server closes it DisconnectGrace later (on Clock), or earlier when the
// client does. New pushes go to a newer connection only.
func (s *Server) Disconnect(ctx context.Context, reason string) error {
	if reason == "" {
		reason = "connection is expired"
	}
	c, err := s.live(ctx)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(map[string]string{"reason": reason})
	f := Frame{Type: "SYSTEM", Headers: map[string]string{"topic": "disconnect", "contentType": "application/json",
		"messageId": s.nextFrameID()}, Data: string(data)}
	raw, _ := json.Marshal(f)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.ws.Write(wctx, websocket.MessageText, raw); err != nil {
		return fmt.Errorf("dingtalktest: disconnect: %w", err)
	}
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	s.mu.Lock()
	s.notifyLocked()
	s.mu.Unlock()
	t := s.clk.NewTimer(s.cfg.DisconnectGrace)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			c.kill()
		case <-c.done:
		}
	}()
	return nil
}
