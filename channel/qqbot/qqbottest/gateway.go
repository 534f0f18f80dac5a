package qqbottest

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Identify is one Identify (op 2) the gateway received.
type Identify struct {
	Token   string
	Intents int64
	Shard   []int
}

// Resume is one Resume (op 6) the gateway received.
type Resume struct {
	Token     string
	SessionID string
	Seq       int64
}

// gwEvent is a dispatch waiting for (or kept for) delivery.
type gwEvent struct {
	id     string
	t      string
	d      json.RawMessage
	intent int64
	seq    int64 // webhook: the s it is posted with
}

type logged struct {
	s     int64
	frame []byte
}

// gwSession is a gateway session: the dispatches it carried, for Resume.
type gwSession struct {
	id      string
	intents int64
	nextS   int64
	log     []logged
	conn    *gwConn
}

// gwConn is one gateway WebSocket connection.
type gwConn struct {
	ws      *websocket.Conn
	out     chan []byte
	closing chan closeReq
	done    chan struct{}
	once    sync.Once
	sess    *gwSession
}

type closeReq struct {
	code   websocket.StatusCode
	reason string
}

func newConn(ws *websocket.Conn) *gwConn {
	c := &gwConn{ws: ws, out: make(chan []byte, 4096), closing: make(chan closeReq, 1), done: make(chan struct{})}
	go c.writeLoop()
	return c
}

func (c *gwConn) writeLoop() {
	write := func(f []byte) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.ws.Write(ctx, websocket.MessageText, f); err != nil {
			c.kill()
			return false
		}
		return true
	}
	for {
		select {
		case <-c.done:
			return
		case f := <-c.out:
			if !write(f) {
				return
			}
		case cr := <-c.closing:
			for drained := false; !drained; {
				select {
				case f := <-c.out:
					if !write(f) {
						return
					}
				default:
					drained = true
				}
			}
			c.once.Do(func() {
				close(c.done)
				go func() { _ = c.ws.Close(cr.code, cr.reason) }()
			})
			return
		}
	}
}

// send queues a frame; a connection that cannot keep up is dropped.
func (c *gwConn) send(frame []byte) {
	select {
	case c.out <- frame:
	default:
		go c.kill()
	}
}

// kill drops the connection without a close frame.
func (c *gwConn) kill() {
	c.once.Do(func() {
		close(c.done)
		_ = c.ws.CloseNow()
	})
}

// closeWith sends a close frame with code once the queued frames are out.
func (c *gwConn) closeWith(code websocket.StatusCode, reason string) {
	select {
	case c.closing <- closeReq{code: code, reason: reason}:
	default:
	}
}

func (s *Server) connsLocked() []*gwConn {
	out := make([]*gwConn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

func marshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// handleWebSocket is the gateway.
func (s *Server) handleWebSocket(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	refuse := s.offline || s.closed
	s.mu.Unlock()
	if refuse {
		writeOffline(w)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(1 << 20)
	c := newConn(ws)
	s.mu.Lock()
	s.conns[c] = true
	c.send(marshal(map[string]any{"op": 10, "d": map[string]int64{"heartbeat_interval": s.cfg.HeartbeatInterval.Milliseconds()}}))
	s.notifyLocked()
	s.mu.Unlock()
	defer func() {
		c.kill()
		s.mu.Lock()
		delete(s.conns, c)
		if c.sess != nil && c.sess.conn == c {
			c.sess.conn = nil
		}
		s.notifyLocked()
		s.mu.Unlock()
	}()
	for {
		typ, data, err := ws.Read(r.Context())
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			c.closeWith(4002, "invalid payload")
			continue
		}
		s.handleFrame(c, data)
	}
}

// handleFrame answers one client frame.
func (s *Server) handleFrame(c *gwConn, data []byte) {
	var p struct {
		Op *int            `json:"op"`
		D  json.RawMessage `json:"d"`
	}
	if json.Unmarshal(data, &p) != nil || p.Op == nil {
		c.closeWith(4002, "invalid payload")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notifyLocked()
	switch *p.Op {
	case 1:
		s.heartbeats = append(s.heartbeats, append(json.RawMessage(nil), p.D...))
		if !s.noAcks {
			c.send(marshal(map[string]int{"op": 11}))
		}
	case 2:
		var d struct {
			Token   string `json:"token"`
			Intents int64  `json:"intents"`
			Shard   []int  `json:"shard"`
		}
		if json.Unmarshal(p.D, &d) != nil {
			c.closeWith(4002, "invalid payload")
			return
		}
		s.identifies = append(s.identifies, Identify{Token: d.Token, Intents: d.Intents, Shard: d.Shard})
		if !s.tokenOKLocked(d.Token, false) {
			c.closeWith(4004, "authentication failed")
			return
		}
		if s.cfg.Intents != 0 && d.Intents&^s.cfg.Intents != 0 {
			c.closeWith(4014, "intent not allowed")
			return
		}
		if len(d.Shard) != 2 || d.Shard[1] < 1 || d.Shard[0] < 0 || d.Shard[0] >= d.Shard[1] {
			c.closeWith(4010, "invalid shard")
			return
		}
		sess := &gwSession{id: randomHex(4) + "-" + randomHex(2) + "-" + randomHex(2) + "-" + randomHex(2) + "-" + randomHex(6), intents: d.Intents, nextS: 1}
		s.sessions[sess.id] = sess
		s.latest = sess
		s.attachLocked(c, sess)
		ready := marshal(map[string]any{"op": 0, "s": sess.nextS, "t": "READY", "d": map[string]any{
			"version": 1, "session_id": sess.id, "shard": d.Shard,
			"user": map[string]any{"id": s.cfg.BotUserID, "username": s.cfg.BotName, "bot": true}}})
		sess.nextS++
		c.send(ready)
		pending := s.pending
		s.pending = nil
		for _, ev := range pending {
			s.deliverLocked(ev)
		}
	case 6:
		var d struct {
			Token     string `json:"token"`
			SessionID string `json:"session_id"`
			Seq       int64  `json:"seq"`
		}
		if json.Unmarshal(p.D, &d) != nil {
			c.closeWith(4002, "invalid payload")
			return
		}
		s.resumes = append(s.resumes, Resume{Token: d.Token, SessionID: d.SessionID, Seq: d.Seq})
		if !s.tokenOKLocked(d.Token, true) {
			c.closeWith(4004, "authentication failed")
			return
		}
		sess := s.sessions[d.SessionID]
		if sess == nil {
			c.send(marshal(map[string]any{"op": 9, "d": false}))
			return
		}
		if d.Seq < 0 || d.Seq >= sess.nextS {
			c.closeWith(4007, "invalid seq")
			return
		}
		if old := sess.conn; old != nil && old != c {
			old.kill()
		}
		s.latest = sess
		s.attachLocked(c, sess)
		for _, l := range sess.log {
			if l.s > d.Seq {
				c.send(l.frame)
			}
		}
		c.send(marshal(map[string]any{"op": 0, "s": sess.nextS, "t": "RESUMED", "d": ""}))
		sess.nextS++
	default:
		c.closeWith(4001, "invalid opcode")
	}
}

func (s *Server) attachLocked(c *gwConn, sess *gwSession) {
	c.sess = sess
	sess.conn = c
}

// deliverLocked hands a dispatch to the webhook queue, the live session,
// or keeps it for the first session. It returns the dispatch's s (0 when
// it is not delivered at all: the session did not ask for its intent).
func (s *Server) deliverLocked(ev gwEvent) int64 {
	if s.hookURL != "" {
		s.hookSeq++
		ev.seq = s.hookSeq
		s.hookQueue = append(s.hookQueue, ev)
		return s.hookSeq
	}
	sess := s.latest
	if sess == nil {
		s.pending = append(s.pending, ev)
		return 0
	}
	if ev.intent != 0 && sess.intents&ev.intent == 0 {
		return 0
	}
	n := sess.nextS
	sess.nextS++
	frame := marshal(map[string]any{"op": 0, "id": ev.id, "s": n, "t": ev.t, "d": ev.d})
	sess.log = append(sess.log, logged{s: n, frame: frame})
	if sess.conn != nil {
		sess.conn.send(frame)
	}
	s.notifyLocked()
	return n
}

// liveLocked is the connection of the newest session.
func (s *Server) liveLocked() *gwConn {
	if s.latest == nil {
		return nil
	}
	return s.latest.conn
}

// Connected reports whether the newest session has a live connection.
func (s *Server) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.liveLocked() != nil
}

// WaitConnected waits until the newest session has a live connection.
func (s *Server) WaitConnected(ctx context.Context) error {
	return s.Wait(ctx, s.Connected)
}

// DropConnection closes the live gateway connection: with a close frame
// carrying code, or abruptly (no close frame) when code is 0. It reports
// whether there was one.
func (s *Server) DropConnection(code int, reason string) bool {
	s.mu.Lock()
	c := s.liveLocked()
	s.mu.Unlock()
	if c == nil {
		return false
	}
	if code == 0 {
		c.kill()
	} else {
		c.closeWith(websocket.StatusCode(code), reason)
	}
	return true
}

// SendOp sends a frame {"op":op,"d":d} on the live connection (op 7
// Reconnect, op 9 Invalid Session, …); false when there is none.
func (s *Server) SendOp(op int, d any) bool {
	return s.PushFrame(marshal(map[string]any{"op": op, "d": d}))
}

// PushFrame sends raw bytes as a text frame on the live connection (bad
// input for tests); false when there is none.
func (s *Server) PushFrame(frame []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.liveLocked()
	if c == nil {
		return false
	}
	c.send(append([]byte(nil), frame...))
	return true
}

// ForgetSessions drops every session: a Resume then gets op 9 (Invalid
// Session) and the bot must identify anew. Undelivered dispatches of the
// newest session are lost, as on the platform.
func (s *Server) ForgetSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = map[string]*gwSession{}
}

// SetHeartbeatAcks turns the Heartbeat ACKs (op 11) off or back on: a
// gateway that stops acknowledging is a dead connection to the bot.
func (s *Server) SetHeartbeatAcks(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noAcks = !on
}

// Identifies lists the Identify frames received.
func (s *Server) Identifies() []Identify {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Identify(nil), s.identifies...)
}

// Resumes lists the Resume frames received.
func (s *Server) Resumes() []Resume {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Resume(nil), s.resumes...)
}

// Heartbeats lists the d of every heartbeat received (null or the
// sequence).
func (s *Server) Heartbeats() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]json.RawMessage(nil), s.heartbeats...)
}

// SessionSeq is the last s the newest session handed out (0 = none).
func (s *Server) SessionSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.latest == nil {
		return 0
	}
	return s.latest.nextS - 1
}
