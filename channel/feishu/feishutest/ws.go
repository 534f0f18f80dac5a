package feishutest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// The long connection: the endpoint hands out a one-time ws:// URL with a
// device_id ticket and the service_id; frames are binary protobuf
// (wire.go). The fake answers pings with pongs carrying its
// ClientConfig, sends events as data frames (fragmented when
// Config.FragmentSize is set) and waits for the answer of each.

// serviceID is the service_id of the fake's long connections.
const serviceID = 33554678

// longCon is the long-connection state of a Server.
type longCon struct {
	conns    []*wsConn // open connections, oldest first
	tickets  map[string]bool
	connects int // connections accepted so far
	pings    int
	acks     []Ack
	seq      uint64
	noPongs  bool
	refuse   *refusal
}

type refusal struct{ status, authErr int }

func (l *longCon) init() { l.tickets = map[string]bool{} }

// Ack is an answer the bot sent to a data frame.
type Ack struct {
	// MessageID is the frame's message_id header.
	MessageID string
	// Code is the answer's code (200 accepted, 500 refused, …).
	Code int
	// BizRT is the biz_rt header (handling time in ms) as sent.
	BizRT string
	// Headers are the frame's headers as sent back.
	Headers []FrameHeader
}

// wsConn is one accepted long connection.
type wsConn struct {
	s       *Server
	ws      *websocket.Conn
	mu      sync.Mutex
	waiting map[string]chan int // frame message_id → its answer's code
	closed  chan struct{}
	once    sync.Once
}

func (c *wsConn) close(reason string) {
	c.once.Do(func() {
		close(c.closed)
		_ = c.ws.Close(websocket.StatusGoingAway, reason)
	})
}

func (s *Server) connsLocked() []*wsConn { return slices.Clone(s.conns) }

func (s *Server) newestConnLocked() *wsConn {
	if len(s.conns) == 0 {
		return nil
	}
	return s.conns[len(s.conns)-1]
}

// handleEndpoint serves POST /callback/ws/endpoint.
func (s *Server) handleEndpoint(w http.ResponseWriter, r *http.Request, _ *Call) {
	var req struct {
		AppID     string `json:"AppID"`
		AppSecret string `json:"AppSecret"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"code": CodeFieldValidation, "msg": "invalid request body"})
		return
	}
	if req.AppID != s.cfg.AppID || req.AppSecret != s.cfg.AppSecret {
		writeJSON(w, http.StatusOK, map[string]any{"code": CodeWSAuthFailed, "msg": "auth failed"})
		return
	}
	s.mu.Lock()
	if len(s.conns) >= s.cfg.MaxConnections {
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"code": CodeWSConnLimit, "msg": "the number of connections exceeded the limit"})
		return
	}
	ticket := s.newIDLocked("")
	s.tickets[ticket] = true
	s.mu.Unlock()
	u := "ws" + strings.TrimPrefix(s.hs.URL, "http") + "/ws?device_id=" + ticket + "&service_id=" + strconv.Itoa(serviceID)
	writeJSON(w, http.StatusOK, map[string]any{"code": 0, "msg": "", "data": map[string]any{
		"URL": u, "ClientConfig": s.clientConfig(),
	}})
}

func (s *Server) clientConfig() map[string]int {
	return map[string]int{"ReconnectCount": -1, "ReconnectInterval": 120, "ReconnectNonce": 30,
		"PingInterval": int(s.cfg.PingInterval / time.Second)}
}

// handleWS accepts a long connection with a valid ticket.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	ticket := r.URL.Query().Get("device_id")
	ok := s.tickets[ticket]
	delete(s.tickets, ticket)
	offline, closed := s.offline, s.closed
	ref := s.refuse
	s.refuse = nil
	s.calls = append(s.calls, Call{Op: "ws_connect", Path: r.URL.Path, At: s.clk.Now(), Offline: offline})
	s.mu.Unlock()
	switch {
	case offline || closed:
		http.Error(w, "service unavailable", http.StatusServiceUnavailable)
		return
	case ref != nil:
		w.Header().Set("Handshake-Status", strconv.Itoa(ref.status))
		w.Header().Set("Handshake-Msg", "refused by the test")
		w.Header().Set("Handshake-Autherrcode", strconv.Itoa(ref.authErr))
		http.Error(w, "refused", http.StatusForbidden)
		return
	case !ok:
		w.Header().Set("Handshake-Status", strconv.Itoa(CodeWSAuthFailed))
		w.Header().Set("Handshake-Msg", "invalid device_id")
		w.Header().Set("Handshake-Autherrcode", "1000040343")
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(4 << 20)
	c := &wsConn{s: s, ws: ws, waiting: map[string]chan int{}, closed: make(chan struct{})}
	s.mu.Lock()
	if s.offline || s.closed {
		s.mu.Unlock()
		c.close("platform offline")
		return
	}
	s.conns = append(s.conns, c)
	s.connects++
	s.notifyLocked()
	s.mu.Unlock()
	s.kick()
	defer func() {
		c.close("")
		s.mu.Lock()
		s.conns = slices.DeleteFunc(s.conns, func(x *wsConn) bool { return x == c })
		s.notifyLocked()
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-c.closed:
		case <-s.life.Done():
		}
		cancel()
	}()
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageBinary {
			continue
		}
		f, err := DecodeFrame(data)
		if err != nil {
			continue
		}
		switch {
		case f.Method == 0 && f.Header("type") == "ping":
			s.mu.Lock()
			s.pings++
			s.seq++
			seq, mute := s.seq, s.noPongs
			s.notifyLocked()
			s.mu.Unlock()
			if mute {
				continue
			}
			cfg, _ := json.Marshal(s.clientConfig())
			pong := Frame{SeqID: seq, LogID: seq, Service: f.Service, Method: 0, Headers: []FrameHeader{{"type", "pong"}}, Payload: cfg}
			_ = c.write(ctx, EncodeFrame(pong))
		case f.Method == 1:
			var ans struct {
				Code int `json:"code"`
			}
			_ = json.Unmarshal(f.Payload, &ans)
			id := f.Header("message_id")
			s.mu.Lock()
			s.acks = append(s.acks, Ack{MessageID: id, Code: ans.Code, BizRT: f.Header("biz_rt"), Headers: slices.Clone(f.Headers)})
			s.notifyLocked()
			s.mu.Unlock()
			c.mu.Lock()
			ch := c.waiting[id]
			delete(c.waiting, id)
			c.mu.Unlock()
			if ch != nil {
				ch <- ans.Code
			}
		}
	}
}

func (c *wsConn) write(ctx context.Context, data []byte) error {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.ws.Write(wctx, websocket.MessageBinary, data)
}

var errNoAnswer = errors.New("no answer before the delivery timeout")

// deliver sends an event as data frame(s) and waits for its answer.
func (c *wsConn) deliver(ctx context.Context, payload []byte) (int, error) {
	s := c.s
	s.mu.Lock()
	id := s.newIDLocked("")
	parts := [][]byte{payload}
	if n := s.cfg.FragmentSize; n > 0 && len(payload) > n {
		parts = nil
		for p := payload; len(p) > 0; {
			k := min(n, len(p))
			parts = append(parts, p[:k])
			p = p[k:]
		}
	}
	frames := make([][]byte, 0, len(parts))
	for i, p := range parts {
		s.seq++
		f := Frame{SeqID: s.seq, LogID: s.seq, Service: serviceID, Method: 1, Headers: []FrameHeader{
			{"type", "event"}, {"message_id", id}, {"sum", strconv.Itoa(len(parts))}, {"seq", strconv.Itoa(i)},
			{"trace_id", "trace-" + id}, {"timestamp", strconv.FormatInt(s.clk.Now().UnixMilli(), 10)},
		}, Payload: p}
		frames = append(frames, EncodeFrame(f))
	}
	s.mu.Unlock()
	ch := make(chan int, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
	}()
	for _, f := range frames {
		if err := c.write(ctx, f); err != nil {
			return 0, fmt.Errorf("writing the event frame: %w", err)
		}
	}
	t := time.NewTimer(s.cfg.DeliveryTimeout)
	defer t.Stop()
	select {
	case code := <-ch:
		return code, nil
	case <-t.C:
		return 0, errNoAnswer
	case <-c.closed:
		return 0, errors.New("the connection closed before the answer")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// DropConnections closes every long connection (the bot reconnects).
func (s *Server) DropConnections() {
	s.mu.Lock()
	conns := s.connsLocked()
	s.mu.Unlock()
	for _, c := range conns {
		c.close("dropped by the test")
	}
}

// Connections returns how many long connections are open and how many
// were accepted in all.
func (s *Server) Connections() (open, accepted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns), s.connects
}

// WaitConnected waits until at least n long connections were accepted
// in all and one is open.
func (s *Server) WaitConnected(ctx context.Context, n int) error {
	return s.waitFor(ctx, func() bool { return s.connects >= n && len(s.conns) > 0 })
}

// Pings counts the pings received.
func (s *Server) Pings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pings
}

// Acks returns a copy of the answers to data frames received so far.
func (s *Server) Acks() []Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.acks)
}

// SendRawFrame writes data as one WebSocket message (binary, or text)
// on the newest long connection, for bad-input tests.
func (s *Server) SendRawFrame(ctx context.Context, data []byte, text bool) error {
	s.mu.Lock()
	c := s.newestConnLocked()
	s.mu.Unlock()
	if c == nil {
		return errors.New("feishutest: no long connection")
	}
	typ := websocket.MessageBinary
	if text {
		typ = websocket.MessageText
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.ws.Write(wctx, typ, data)
}

// SetPongs makes the fake answer pings (the default) or ignore them, to
// test a client's dead-connection detection.
func (s *Server) SetPongs(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noPongs = !on
}

// RefuseNextHandshake makes the next WebSocket handshake fail with the
// Handshake-Status and Handshake-Autherrcode headers (e.g. 403; 514 with
// 1000040350 for the connection limit).
func (s *Server) RefuseNextHandshake(status, authErr int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = &refusal{status: status, authErr: authErr}
}

// NextSeq returns a fresh SeqID for frames a test builds itself.
func (s *Server) NextSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}
