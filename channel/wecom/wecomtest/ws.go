package wecomtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/personakit/persona/channel"
)

// Long-connection commands.
const (
	cmdSubscribe = "aibot_subscribe"
	cmdPing      = "ping"
	cmdCallback  = "aibot_msg_callback"
	cmdEvent     = "aibot_event_callback"
	cmdRespond   = "aibot_respond_msg"
	cmdSend      = "aibot_send_msg"
)

// frame is a long-connection frame.
type frame struct {
	Cmd     string          `json:"cmd,omitempty"`
	Headers frameHeaders    `json:"headers"`
	Body    json.RawMessage `json:"body,omitempty"`
	ErrCode *int            `json:"errcode,omitempty"`
	ErrMsg  string          `json:"errmsg,omitempty"`
}

type frameHeaders struct {
	ReqID string `json:"req_id"`
}

// wsServer is the long-connection side of the fake: one subscribed
// connection per bot (a new subscription pushes disconnected_event to the
// old one and closes it), acknowledgements by req_id, callbacks pushed
// with fresh req_ids that the bot answers with aibot_respond_msg.
type wsServer struct {
	s *Server

	mu       sync.Mutex
	conns    map[*wsClient]bool
	current  *wsClient
	reqs     map[string]*wsReq // callback req_id →
	frames   []frame           // every frame the bot sent
	dials    int
	silenced bool // pings go unanswered
}

type wsReq struct {
	msgID   string
	chat    channel.Chat
	created time.Time
	stream  *Sent
}

type wsClient struct {
	conn       *websocket.Conn
	writeMu    sync.Mutex
	subscribed bool
	ctx        context.Context
	cancel     context.CancelFunc
}

func newWSServer(s *Server) *wsServer {
	return &wsServer{s: s, conns: map[*wsClient]bool{}, reqs: map[string]*wsReq{}}
}

func (w *wsServer) handle(rw http.ResponseWriter, r *http.Request) {
	if w.s.cfg.Mode != ModeAIBotWS {
		http.Error(rw, "no long connection in mode "+string(w.s.cfg.Mode), http.StatusNotFound)
		return
	}
	conn, err := websocket.Accept(rw, r, nil)
	if err != nil {
		return
	}
	conn.SetReadLimit(4 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	c := &wsClient{conn: conn, ctx: ctx, cancel: cancel}
	w.mu.Lock()
	w.conns[c] = true
	w.dials++
	w.mu.Unlock()
	w.s.wg.Go(func() {
		defer func() {
			cancel()
			_ = conn.CloseNow()
			w.mu.Lock()
			delete(w.conns, c)
			if w.current == c {
				w.current = nil
			}
			w.mu.Unlock()
			w.s.mu.Lock()
			w.s.changedLocked()
			w.s.mu.Unlock()
		}()
		w.serve(c)
	})
}

// serve reads the bot's frames.
func (w *wsServer) serve(c *wsClient) {
	for {
		typ, data, err := c.conn.Read(c.ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			_ = c.conn.Close(websocket.StatusUnsupportedData, "malformed frame")
			return
		}
		w.mu.Lock()
		w.frames = append(w.frames, f)
		w.mu.Unlock()
		if !c.subscribed && f.Cmd != cmdSubscribe {
			w.ack(c, f.Headers.ReqID, CodeInvalidParam, "subscribe first")
			continue
		}
		switch f.Cmd {
		case cmdSubscribe:
			if !w.subscribe(c, f) {
				return
			}
		case cmdPing:
			w.mu.Lock()
			silent := w.silenced
			w.mu.Unlock()
			if !silent {
				w.ack(c, f.Headers.ReqID, 0, "ok")
			}
		case cmdRespond:
			w.respond(c, f)
		case cmdSend:
			w.send(c, f)
		default:
			w.ack(c, f.Headers.ReqID, CodeInvalidParam, "unknown cmd")
		}
	}
}

// ack answers a request.
func (w *wsServer) ack(c *wsClient, reqID string, code int, msg string) {
	w.write(c, frame{Headers: frameHeaders{ReqID: reqID}, ErrCode: &code, ErrMsg: msg})
}

func (w *wsServer) write(c *wsClient, f frame) {
	b, _ := json.Marshal(f)
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	_ = c.conn.Write(ctx, websocket.MessageText, b)
}

func (w *wsServer) subscribe(c *wsClient, f frame) bool {
	var body struct {
		BotID  string `json:"bot_id"`
		Secret string `json:"secret"`
	}
	_ = json.Unmarshal(f.Body, &body)
	w.s.mu.Lock()
	fail, failing := w.s.takeFailureLocked(cmdSubscribe)
	w.s.mu.Unlock()
	if failing {
		if fail.Drop {
			_ = c.conn.CloseNow()
			return false
		}
		w.ack(c, f.Headers.ReqID, fail.ErrCode, "injected failure")
		return fail.ErrCode == CodeBusy
	}
	if body.BotID != w.s.cfg.BotID || body.Secret != w.s.cfg.BotSecret {
		w.ack(c, f.Headers.ReqID, CodeInvalidSecret, "invalid bot_id or secret")
		_ = c.conn.Close(websocket.StatusPolicyViolation, "unauthorized")
		return false
	}
	w.mu.Lock()
	old := w.current
	w.current = c
	c.subscribed = true
	w.mu.Unlock()
	w.ack(c, f.Headers.ReqID, 0, "ok")
	if old != nil && old != c {
		w.kick(old)
	}
	w.s.mu.Lock()
	w.s.changedLocked()
	w.s.mu.Unlock()
	return true
}

// kick tells a connection another one took over, and closes it.
func (w *wsServer) kick(c *wsClient) {
	body, _ := json.Marshal(map[string]any{
		"msgid": "evt" + randomHex(8), "aibotid": w.s.cfg.BotID, "create_time": w.s.clk.Now().Unix(),
		"msgtype": "event", "event": map[string]string{"eventtype": "disconnected_event"},
	})
	w.write(c, frame{Cmd: cmdEvent, Headers: frameHeaders{ReqID: "evt_" + randomHex(8)}, Body: body})
	_ = c.conn.Close(websocket.StatusNormalClosure, "replaced by a newer connection")
}

// respond handles aibot_respond_msg: a stream answer to a callback.
func (w *wsServer) respond(c *wsClient, f frame) {
	var body struct {
		MsgType string `json:"msgtype"`
		Stream  *struct {
			ID      string `json:"id"`
			Finish  bool   `json:"finish"`
			Content string `json:"content"`
		} `json:"stream"`
	}
	s := w.s
	s.mu.Lock()
	fail, failing := s.takeFailureLocked(cmdRespond)
	if failing && !fail.Drop {
		s.mu.Unlock()
		w.ack(c, f.Headers.ReqID, fail.ErrCode, "injected failure")
		return
	}
	w.mu.Lock()
	req := w.reqs[f.Headers.ReqID]
	w.mu.Unlock()
	code, msg := 0, "ok"
	switch {
	case json.Unmarshal(f.Body, &body) != nil || body.MsgType != "stream" || body.Stream == nil || body.Stream.ID == "":
		code, msg = CodeInvalidParam, "want a stream"
	case req == nil || s.clk.Now().Sub(req.created) > StreamWindow:
		code, msg = CodeInvalidReqID, "invalid req_id"
	case req.stream != nil && req.stream.Finished:
		code, msg = CodeStreamExpired, "stream message update expired"
	case req.stream != nil && req.stream.MessageID != body.Stream.ID:
		code, msg = CodeInvalidParam, "another stream id for this req_id"
	case len(body.Stream.Content) > MaxStreamBytes:
		code, msg = CodeContentTooLong, "content size out of limit"
	case s.takeRejectLocked():
		code, msg = CodeInvalidParam, "rejected by the test"
	}
	if code == 0 {
		if req.stream == nil {
			req.stream = &Sent{Op: cmdRespond, Chat: req.chat, MsgType: "stream", ReplyTo: req.msgID, MessageID: body.Stream.ID}
			s.recordSentLocked(req.stream)
		}
		req.stream.Text, req.stream.Finished = body.Stream.Content, body.Stream.Finish
		s.messages[body.Stream.ID] = &message{id: body.Stream.ID, chat: req.chat, text: body.Stream.Content, fromMe: true}
		s.changedLocked()
	}
	s.mu.Unlock()
	if failing && fail.Drop && code == 0 {
		_ = c.conn.CloseNow() // applied, but the acknowledgement is lost
		return
	}
	w.ack(c, f.Headers.ReqID, code, msg)
}

// send handles aibot_send_msg: a message of the bot's own to a chat that
// talked to it.
func (w *wsServer) send(c *wsClient, f frame) {
	var body struct {
		ChatID   string `json:"chatid"`
		MsgType  string `json:"msgtype"`
		Markdown *struct {
			Content string `json:"content"`
		} `json:"markdown"`
	}
	s := w.s
	s.mu.Lock()
	fail, failing := s.takeFailureLocked(cmdSend)
	if failing && !fail.Drop {
		s.mu.Unlock()
		w.ack(c, f.Headers.ReqID, fail.ErrCode, "injected failure")
		return
	}
	code, msg := 0, "ok"
	var chat channel.Chat
	err := json.Unmarshal(f.Body, &body)
	if err == nil {
		chat, err = s.chatOfLocked(body.ChatID)
	}
	switch {
	case err != nil:
		code, msg = CodeInvalidParam, err.Error()
	case body.MsgType != "markdown" || body.Markdown == nil || body.Markdown.Content == "":
		code, msg = CodeInvalidParam, "want a markdown message"
	case len(body.Markdown.Content) > MaxStreamBytes:
		code, msg = CodeContentTooLong, "content size out of limit"
	case s.takeRejectLocked():
		code, msg = CodeInvalidParam, "rejected by the test"
	}
	if code == 0 {
		s.recordSentLocked(&Sent{Op: cmdSend, Chat: chat, Text: body.Markdown.Content, MsgType: "markdown", MessageID: f.Headers.ReqID})
	}
	s.mu.Unlock()
	if failing && fail.Drop && code == 0 {
		_ = c.conn.CloseNow()
		return
	}
	w.ack(c, f.Headers.ReqID, code, msg)
}

// chatOfLocked finds the chat a chatid names among those that talked to
// the bot (a group's chatid, or a user's userid for the single chat).
func (s *Server) chatOfLocked(id string) (channel.Chat, error) {
	for _, k := range []channel.ChatKind{channel.Group, channel.Private} {
		if c := (channel.Chat{Kind: k, ID: id}); s.chats[c] {
			return c, nil
		}
	}
	return channel.Chat{}, fmt.Errorf("chatid %q never talked to the bot", id)
}

// push writes a callback frame to the subscribed connection and returns
// its req_id.
func (w *wsServer) push(ctx context.Context, cmd string, body []byte) (string, error) {
	reqID, err := w.pushRaw(ctx, cmd, body)
	if err != nil {
		return "", err
	}
	if cmd == cmdCallback {
		var m struct {
			MsgID    string `json:"msgid"`
			ChatID   string `json:"chatid"`
			ChatType string `json:"chattype"`
			From     struct {
				UserID string `json:"userid"`
			} `json:"from"`
		}
		_ = json.Unmarshal(body, &m)
		chat := channel.Chat{Kind: channel.Private, ID: m.From.UserID}
		if m.ChatType == "group" {
			chat = channel.Chat{Kind: channel.Group, ID: m.ChatID}
		}
		w.mu.Lock()
		w.reqs[reqID] = &wsReq{msgID: m.MsgID, chat: chat, created: w.s.clk.Now()}
		w.mu.Unlock()
	}
	return reqID, nil
}

// pushRaw writes a frame with body as is.
func (w *wsServer) pushRaw(ctx context.Context, cmd string, body []byte) (string, error) {
	if w.s.isOffline() {
		return "", errors.New("wecomtest: offline")
	}
	if err := w.s.wait(ctx, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.current != nil
	}); err != nil {
		return "", fmt.Errorf("wecomtest: no subscribed long connection: %w", err)
	}
	w.mu.Lock()
	c := w.current
	w.mu.Unlock()
	if c == nil {
		return "", errors.New("wecomtest: no subscribed long connection")
	}
	reqID := cmd + "_" + randomHex(8)
	w.write(c, frame{Cmd: cmd, Headers: frameHeaders{ReqID: reqID}, Body: body})
	return reqID, nil
}

// WriteFrame writes raw bytes as one text frame to the subscribed
// connection (bad-input tests).
func (s *Server) WriteFrame(ctx context.Context, data []byte) error {
	w := s.ws
	if err := s.wait(ctx, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.current != nil
	}); err != nil {
		return err
	}
	w.mu.Lock()
	c := w.current
	w.mu.Unlock()
	if c == nil {
		return errors.New("wecomtest: no subscribed long connection")
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	return c.conn.Write(ctx, websocket.MessageText, data)
}

// closeAll closes every connection: with a close handshake (in the
// background), or at once when the server shuts down.
func (w *wsServer) closeAll(now bool) {
	w.mu.Lock()
	list := make([]*wsClient, 0, len(w.conns))
	for c := range w.conns {
		list = append(list, c)
	}
	w.current = nil
	w.mu.Unlock()
	for _, c := range list {
		if now {
			_ = c.conn.CloseNow()
			c.cancel()
			continue
		}
		w.s.wg.Go(func() {
			_ = c.conn.Close(websocket.StatusGoingAway, "going away")
			c.cancel()
		})
	}
}

// Subscribed reports whether a long connection is subscribed.
func (s *Server) Subscribed() bool {
	s.ws.mu.Lock()
	defer s.ws.mu.Unlock()
	return s.ws.current != nil
}

// WaitSubscribed waits for a subscribed long connection.
func (s *Server) WaitSubscribed(ctx context.Context) error {
	return s.wait(ctx, s.Subscribed)
}

// Dials counts the long connections opened.
func (s *Server) Dials() int {
	s.ws.mu.Lock()
	defer s.ws.mu.Unlock()
	return s.ws.dials
}

// Disconnect closes the long connection (the bot redials).
func (s *Server) Disconnect() { s.ws.closeAll(false) }

// Supersede makes another client take the long connection over: the bot's
// connection gets disconnected_event and is closed.
func (s *Server) Supersede() {
	s.ws.mu.Lock()
	c := s.ws.current
	s.ws.current = nil
	s.ws.mu.Unlock()
	if c != nil {
		s.ws.kick(c)
	}
}

// SilencePings stops (or resumes) answering pings.
func (s *Server) SilencePings(on bool) {
	s.ws.mu.Lock()
	defer s.ws.mu.Unlock()
	s.ws.silenced = on
}

// Frames lists the frames the bot sent on the long connection, with cmd
// and req_id (bodies of subscriptions are not kept).
func (s *Server) Frames() []Frame {
	s.ws.mu.Lock()
	defer s.ws.mu.Unlock()
	out := make([]Frame, 0, len(s.ws.frames))
	for _, f := range s.ws.frames {
		x := Frame{Cmd: f.Cmd, ReqID: f.Headers.ReqID}
		if f.Cmd != cmdSubscribe {
			x.Body = append([]byte(nil), f.Body...)
		}
		out = append(out, x)
	}
	return out
}

// Frame is a frame the bot sent.
type Frame struct {
	Cmd   string
	ReqID string
	Body  []byte
}
