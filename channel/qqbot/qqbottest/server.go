package qqbottest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Defaults of Config.
const (
	DefaultAppID     = "102000001"
	DefaultSecret    = "qqbottestSecret0123"
	DefaultBotUserID = "11586990140073229091"
	DefaultBotName   = "persona-test-bot"
	// DefaultGuildID is the guild of channel messages pushed without one.
	DefaultGuildID = "18700000000001"
	// DefaultHeartbeatInterval is the Hello's heartbeat_interval.
	DefaultHeartbeatInterval = 45 * time.Second
	// DefaultTokenTTL is the lifetime of an access token (7200 s).
	DefaultTokenTTL = 7200 * time.Second
	// TokenRenewWindow is the last part of a token's life in which the
	// token endpoint issues a new one (the old one stays valid until it
	// expires).
	TokenRenewWindow = 60 * time.Second
)

// Business codes the fake answers with (see the package doc).
const (
	CodeEmptyMessage = 50006
	CodeBadRequest   = 12002
	CodeMsgIDWrong   = 304026
	CodeReplyExpired = 304027
	CodeDuplicateSeq = 40054005
	CodeActiveDenied = 40034102
	// CodeMsgLimit (22009, "msg limit exceed") is the platform's
	// frequency limit (the docs' error-trace/openapi.md);
	// the fake answers it only when injected with FailNextSend.
	CodeMsgLimit = 22009
	// CodeReplyLimit answers a reply to a msg_id that had its MaxReplies
	// replies. It is not a platform code: the platform's code for this is
	// not documented (users report the text "reply msg exceed limit"), so
	// the fake uses this stand-in, which the adapter must never see.
	CodeReplyLimit     = 990001
	CodeTokenExpired   = 11244
	CodeBadCredentials = 100016
	CodeNoPermission   = 11253
)

// Config configures a Server. The zero value is usable.
type Config struct {
	// AppID and Secret are the bot's credentials (defaults DefaultAppID,
	// DefaultSecret). The secret also seeds the webhook signing key.
	AppID, Secret string
	// BotUserID and BotName are the bot's guild user (READY's user,
	// GET /users/@me).
	BotUserID, BotName string
	// Clock drives token expiry, reply windows and message times (nil =
	// wall clock).
	Clock clock.Clock
	// HeartbeatInterval is sent in Hello (default 45 s).
	HeartbeatInterval time.Duration
	// TokenTTL is the lifetime of access tokens (default 7200 s).
	TokenTTL time.Duration
	// AllowActive accepts sends without msg_id (active messages). Off,
	// they get 400 with code 40034102, as the platform answers since
	// active messages ended.
	AllowActive bool
	// Intents are the intents the bot may ask for (0 = any); an Identify
	// asking for more is closed with 4014.
	Intents int64
	// PrivateWindow, GroupWindow and MaxReplies are the passive reply
	// rules (defaults 60 min, 5 min and 5).
	PrivateWindow, GroupWindow time.Duration
	MaxReplies                 int
}

// Failure is an error answer injected with FailNextSend.
type Failure struct {
	// Status is the HTTP status (default 400); Code the business code.
	Status int
	Code   int64
	// Message defaults to a short text.
	Message string
	// RetryAfter sets the Retry-After header (seconds).
	RetryAfter int
	// Drop closes the connection without an answer. With Deliver the
	// message is delivered first (its answer is lost).
	Drop    bool
	Deliver bool
	// DropGateway also drops the live gateway connection (abruptly) as
	// this answer goes out: the connection dies in the middle of a reply.
	DropGateway bool
}

// Call is one OpenAPI request the fake received.
type Call struct {
	Method, Path string
	// Auth is the Authorization header.
	Auth string
	Body json.RawMessage
	At   time.Time
}

// SentMessage is a message the bot sent successfully.
type SentMessage struct {
	// Route is "group", "c2c", "channel" or "dm"; Target the group or
	// user openid, channel id or direct-message guild id of the path.
	Route, Target string
	// Chat is the chat as the adapter names it.
	Chat channel.Chat
	// ID is the id the fake gave the message.
	ID string
	// MsgType is msg_type (v2 routes).
	MsgType int
	// Content is the content (or markdown.content) as sent; guild content
	// is escaped (&amp; &lt; &gt;).
	Content  string
	Markdown bool
	// FileInfo (msg_type 7) or Image (guild) is the media sent.
	FileInfo, Image string
	// MsgID and MsgSeq make it a passive reply (MsgID "" = active).
	MsgID  string
	MsgSeq int
	At     time.Time
}

// inbound is a message the fake pushed, for the reply rules.
type inbound struct {
	id      string
	route   string
	target  string
	at      time.Time
	seqs    map[int]bool
	replies int
}

// Server is an in-process fake of the QQ bot OpenAPI, token endpoint,
// WebSocket gateway and webhook sender on a loopback httptest server. It
// implements chantest.PlatformDriver.
//
// A Server is safe for concurrent use.
type Server struct {
	cfg Config
	clk clock.Clock
	hs  *httptest.Server
	key ed25519.PrivateKey
	hc  *http.Client

	deliverMu sync.Mutex // serialises webhook deliveries

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every change
	closed     bool
	offline    bool
	tokens     map[string]time.Time // token → expiry
	current    string
	tokenCalls int
	nextID     int64
	inbound    map[string]*inbound
	chanSeq    map[string]int64
	dmGuild    map[string]string // DM user id → guild id
	dmUser     map[string]string // guild id → DM user id
	files      map[string]string // file_info → url
	sent       []SentMessage
	calls      []Call
	failures   []pendingFailure
	// gateway
	sessions   map[string]*gwSession
	latest     *gwSession
	pending    []gwEvent // pushed before any session
	conns      map[*gwConn]bool
	identifies []Identify
	resumes    []Resume
	heartbeats []json.RawMessage
	noAcks     bool
	// webhook
	hookURL    string
	hookQueue  []gwEvent
	hookSeq    int64
	deliveries []Delivery
}

// New starts a Server on a loopback address. Close it when done.
func New(cfg Config) *Server {
	if cfg.AppID == "" {
		cfg.AppID = DefaultAppID
	}
	if cfg.Secret == "" {
		cfg.Secret = DefaultSecret
	}
	if cfg.BotUserID == "" {
		cfg.BotUserID = DefaultBotUserID
	}
	if cfg.BotName == "" {
		cfg.BotName = DefaultBotName
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if cfg.PrivateWindow <= 0 {
		cfg.PrivateWindow = 60 * time.Minute
	}
	if cfg.GroupWindow <= 0 {
		cfg.GroupWindow = 5 * time.Minute
	}
	if cfg.MaxReplies <= 0 {
		cfg.MaxReplies = 5
	}
	s := &Server{
		cfg:      cfg,
		clk:      clock.OrReal(cfg.Clock),
		key:      SigningKey(cfg.Secret),
		hc:       &http.Client{Timeout: 10 * time.Second},
		changed:  make(chan struct{}),
		tokens:   map[string]time.Time{},
		inbound:  map[string]*inbound{},
		chanSeq:  map[string]int64{},
		dmGuild:  map[string]string{},
		dmUser:   map[string]string{},
		files:    map[string]string{},
		sessions: map[string]*gwSession{},
		conns:    map[*gwConn]bool{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /app/getAppAccessToken", s.handleToken)
	mux.HandleFunc("GET /websocket/", s.handleWebSocket)
	mux.HandleFunc("/", s.handleAPI)
	s.hs = httptest.NewServer(mux)
	return s
}

// SigningKey derives the webhook key from a bot secret as the platform's
// docs describe (the secret repeated to at least 32 bytes, cut to 32, is
// the Ed25519 seed).
func SigningKey(secret string) ed25519.PrivateKey {
	seed := []byte(secret)
	for len(seed) < ed25519.SeedSize {
		seed = append(seed, seed...)
	}
	return ed25519.NewKeyFromSeed(seed[:ed25519.SeedSize])
}

// Close shuts the server down and drops every gateway connection.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	conns := s.connsLocked()
	s.notifyLocked()
	s.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
	s.hs.CloseClientConnections()
	s.hs.Close()
}

// URL is the OpenAPI base (Config.APIBase of the adapter).
func (s *Server) URL() string { return s.hs.URL }

// TokenURL is the access-token endpoint (Config.TokenURL).
func (s *Server) TokenURL() string { return s.hs.URL + "/app/getAppAccessToken" }

// AppID returns the bot's AppID, which the adapter reports as Event.BotID.
func (s *Server) AppID() string { return s.cfg.AppID }

// BotID returns the AppID (chantest's bot id).
func (s *Server) BotID() string { return s.cfg.AppID }

// Secret returns the bot secret.
func (s *Server) Secret() string { return s.cfg.Secret }

// BotUserID returns the bot's guild user id.
func (s *Server) BotUserID() string { return s.cfg.BotUserID }

// SetOffline takes the whole platform down (every HTTP request gets 502,
// gateway connections are dropped and refused) or brings it back. It
// implements chantest.PlatformDriver.
func (s *Server) SetOffline(_ context.Context, offline bool) error {
	s.mu.Lock()
	s.offline = offline
	var conns []*gwConn
	if offline {
		conns = s.connsLocked()
	}
	s.notifyLocked()
	s.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
	return nil
}

// pendingFailure is an injected failure that comes after a number of
// successful sends.
type pendingFailure struct {
	after int
	f     Failure
}

// FailNextSend makes the next message send (POST …/messages) fail with
// f. Calls queue up: each failure applies to one send, in order.
func (s *Server) FailNextSend(f Failure) { s.FailSendAfter(0, f) }

// FailSendAfter lets n sends succeed and makes the one after them fail
// with f (after the failures already queued).
func (s *Server) FailSendAfter(n int, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, pendingFailure{after: n, f: f})
}

// Sent lists the messages the bot sent successfully, in order.
func (s *Server) Sent() []SentMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SentMessage(nil), s.sent...)
}

// Calls lists the OpenAPI requests received, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// TokenCalls is how many token requests succeeded.
func (s *Server) TokenCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenCalls
}

// CurrentToken is the newest access token issued ("" before the first).
func (s *Server) CurrentToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// RevokeTokens makes every issued token invalid (the next API call gets
// 401 with code 11244).
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]time.Time{}
	s.current = ""
}

// Wait blocks until cond holds or ctx ends. cond is called without the
// server's lock (it may call the Server's methods), again after every
// change.
func (s *Server) Wait(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitSent waits until at least n messages were sent and returns them.
func (s *Server) WaitSent(ctx context.Context, n int) ([]SentMessage, error) {
	err := s.Wait(ctx, func() bool { return len(s.Sent()) >= n })
	return s.Sent(), err
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) newIDLocked(prefix string) string {
	s.nextID++
	return prefix + strconv.FormatInt(s.nextID, 10)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// handleToken is POST /app/getAppAccessToken.
func (s *Server) handleToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offline {
		writeOffline(w)
		return
	}
	var req struct {
		AppID        string `json:"appId"`
		ClientSecret string `json:"clientSecret"`
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if json.Unmarshal(body, &req) != nil || req.AppID != s.cfg.AppID || req.ClientSecret != s.cfg.Secret {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"code": CodeBadCredentials, "message": "invalid appid or secret"})
		return
	}
	now := s.clk.Now()
	if exp, ok := s.tokens[s.current]; ok && exp.Sub(now) > TokenRenewWindow {
		writeJSON(w, http.StatusOK, map[string]string{"access_token": s.current,
			"expires_in": strconv.FormatInt(int64(exp.Sub(now)/time.Second), 10)})
		s.tokenCalls++
		return
	}
	tok := randomHex(16)
	s.tokens[tok] = now.Add(s.cfg.TokenTTL)
	s.current = tok
	s.tokenCalls++
	s.notifyLocked()
	writeJSON(w, http.StatusOK, map[string]string{"access_token": tok,
		"expires_in": strconv.FormatInt(int64(s.cfg.TokenTTL/time.Second), 10)})
}

// tokenOKLocked checks an access token ("QQBot <token>" or, where
// allowed, the bare token).
func (s *Server) tokenOKLocked(v string, bare bool) bool {
	tok, ok := strings.CutPrefix(v, "QQBot ")
	if !ok {
		if !bare {
			return false
		}
		tok = v
	}
	exp, ok := s.tokens[tok]
	return ok && s.clk.Now().Before(exp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Tps-trace-ID", randomHex(8))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

func writeOffline(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
}

func apiError(w http.ResponseWriter, status int, code int64, msg string) {
	writeJSON(w, status, map[string]any{"code": code, "message": msg, "err_code": code, "trace_id": randomHex(8)})
}

// chatOf names a route's chat as the adapter does.
func (s *Server) chatOfLocked(route, target string) channel.Chat {
	switch route {
	case "group":
		return channel.Chat{Kind: channel.Group, ID: target}
	case "channel":
		return channel.Chat{Kind: channel.Group, ID: "channel:" + target}
	case "dm":
		return channel.Chat{Kind: channel.Private, ID: s.dmUser[target]}
	}
	return channel.Chat{Kind: channel.Private, ID: target}
}

// handleAPI serves the OpenAPI.
func (s *Server) handleAPI(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	s.calls = append(s.calls, Call{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization"), Body: body, At: s.clk.Now()})
	s.notifyLocked()
	if s.offline {
		s.mu.Unlock()
		writeOffline(w)
		return
	}
	if !s.tokenOKLocked(r.Header.Get("Authorization"), false) {
		s.mu.Unlock()
		apiError(w, http.StatusUnauthorized, CodeTokenExpired, "token not exist or expire")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/gateway":
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"url": "ws" + strings.TrimPrefix(s.hs.URL, "http") + "/websocket/"})
	case r.Method == http.MethodGet && r.URL.Path == "/gateway/bot":
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"url": "ws" + strings.TrimPrefix(s.hs.URL, "http") + "/websocket/", "shards": 1,
			"session_start_limit": map[string]int{"total": 1000, "remaining": 1000, "reset_after": 86400000, "max_concurrency": 1}})
	case r.Method == http.MethodGet && r.URL.Path == "/users/@me":
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"id": s.cfg.BotUserID, "username": s.cfg.BotName, "avatar": ""})
	case r.Method == http.MethodPost && len(parts) == 4 && parts[0] == "v2" && parts[3] == "messages" && (parts[1] == "groups" || parts[1] == "users"):
		route := "group"
		if parts[1] == "users" {
			route = "c2c"
		}
		s.handleSend(w, r, route, parts[2], body) // unlocks
	case r.Method == http.MethodPost && len(parts) == 4 && parts[0] == "v2" && parts[3] == "files" && (parts[1] == "groups" || parts[1] == "users"):
		s.handleUpload(w, body) // unlocks
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "channels" && parts[2] == "messages":
		s.handleSend(w, r, "channel", parts[1], body)
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "dms" && parts[2] == "messages":
		s.handleSend(w, r, "dm", parts[1], body)
	default:
		s.mu.Unlock()
		apiError(w, http.StatusNotFound, 0, "api not found")
	}
}

// handleUpload is POST /v2/{groups|users}/{id}/files; s.mu is held.
func (s *Server) handleUpload(w http.ResponseWriter, body []byte) {
	var req struct {
		FileType   int    `json:"file_type"`
		URL        string `json:"url"`
		SrvSendMsg bool   `json:"srv_send_msg"`
	}
	if json.Unmarshal(body, &req) != nil || req.FileType < 1 || req.FileType > 4 ||
		(!strings.HasPrefix(req.URL, "http://") && !strings.HasPrefix(req.URL, "https://")) {
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, CodeBadRequest, "invalid file_type or url")
		return
	}
	info := s.newIDLocked("FILEINFO_")
	s.files[info] = req.URL
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"file_uuid": randomHex(8), "file_info": info, "ttl": 3600})
}

// sendRequest is the union of the message bodies.
type sendRequest struct {
	Content  string `json:"content"`
	MsgType  *int   `json:"msg_type"`
	Markdown *struct {
		Content string `json:"content"`
	} `json:"markdown"`
	Media *struct {
		FileInfo string `json:"file_info"`
	} `json:"media"`
	Image  string `json:"image"`
	MsgID  string `json:"msg_id"`
	MsgSeq *int   `json:"msg_seq"`
}

// handleSend posts a message; s.mu is held and released here.
func (s *Server) handleSend(w http.ResponseWriter, r *http.Request, route, target string, body []byte) {
	fail := func(status int, code int64, msg string) {
		s.mu.Unlock()
		apiError(w, status, code, msg)
	}
	var f *Failure
	switch {
	case len(s.failures) > 0 && s.failures[0].after > 0:
		s.failures[0].after--
	case len(s.failures) > 0:
		f = &s.failures[0].f
		s.failures = s.failures[1:]
		if !f.Deliver {
			s.mu.Unlock()
			s.writeFailure(w, *f)
			return
		}
	}
	var req sendRequest
	if json.Unmarshal(body, &req) != nil {
		fail(http.StatusBadRequest, CodeBadRequest, "invalid request body")
		return
	}
	now := s.clk.Now()
	m := SentMessage{Route: route, Target: target, Chat: s.chatOfLocked(route, target), MsgID: req.MsgID, At: now}
	v2 := route == "group" || route == "c2c"
	if v2 {
		if req.MsgType == nil {
			fail(http.StatusBadRequest, CodeBadRequest, "msg_type is required")
			return
		}
		m.MsgType = *req.MsgType
		switch m.MsgType {
		case 0:
			m.Content = req.Content
		case 2:
			if req.Markdown != nil {
				m.Content, m.Markdown = req.Markdown.Content, true
			}
		case 7:
			if req.Media == nil || s.files[req.Media.FileInfo] == "" || req.Content == "" {
				fail(http.StatusBadRequest, CodeBadRequest, "media message without a known file_info or content")
				return
			}
			m.FileInfo, m.Content = req.Media.FileInfo, req.Content
		default:
			fail(http.StatusBadRequest, CodeBadRequest, "unsupported msg_type")
			return
		}
		m.MsgSeq = 1
		if req.MsgSeq != nil {
			m.MsgSeq = *req.MsgSeq
		}
	} else {
		m.Content, m.Image = req.Content, req.Image
		if req.Markdown != nil {
			m.Content, m.Markdown = req.Markdown.Content, true
		}
	}
	if strings.TrimSpace(m.Content) == "" && m.Image == "" && m.FileInfo == "" {
		fail(http.StatusBadRequest, CodeEmptyMessage, "empty msg")
		return
	}
	if req.MsgID == "" {
		if !s.cfg.AllowActive {
			fail(http.StatusBadRequest, CodeActiveDenied, "主动消息失败, 无权限")
			return
		}
	} else {
		in := s.inbound[req.MsgID]
		if in == nil || in.route != route || in.target != target {
			fail(http.StatusBadRequest, CodeMsgIDWrong, "msg_id error")
			return
		}
		window := s.cfg.GroupWindow
		if route == "c2c" {
			window = s.cfg.PrivateWindow
		}
		if now.Sub(in.at) >= window {
			fail(http.StatusBadRequest, CodeReplyExpired, "msg expire")
			return
		}
		if v2 {
			if in.seqs[m.MsgSeq] {
				fail(http.StatusBadRequest, CodeDuplicateSeq, "消息被去重，请检查请求msgseq")
				return
			}
			if in.replies >= s.cfg.MaxReplies {
				fail(http.StatusBadRequest, CodeReplyLimit, "reply msg exceed limit")
				return
			}
			in.seqs[m.MsgSeq] = true
			in.replies++
		}
	}
	m.ID = s.newIDLocked("ROBOT1.0_sent")
	s.sent = append(s.sent, m)
	s.notifyLocked()
	s.mu.Unlock()
	if f != nil { // Deliver: delivered, then the answer is lost
		s.writeFailure(w, *f)
		return
	}
	if v2 {
		writeJSON(w, http.StatusOK, map[string]any{"id": m.ID, "timestamp": now.Unix()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": m.ID, "channel_id": target, "content": m.Content,
		"timestamp": now.Format(time.RFC3339), "author": map[string]any{"id": s.cfg.BotUserID, "username": s.cfg.BotName, "bot": true}})
}

// writeFailure answers with an injected failure.
func (s *Server) writeFailure(w http.ResponseWriter, f Failure) {
	if f.DropGateway {
		s.DropConnection(0, "")
	}
	if f.Drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	status := f.Status
	if status == 0 {
		status = http.StatusBadRequest
	}
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfter))
	}
	msg := f.Message
	if msg == "" {
		msg = fmt.Sprintf("injected failure %d", f.Code)
	}
	apiError(w, status, f.Code, msg)
}
