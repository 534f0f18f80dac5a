package dingtalktest

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/clock"
)

// Defaults of Config.
const (
	DefaultClientID     = "dingfakeclientid0001"
	DefaultClientSecret = "fake-client-secret-Zq9xV3pL7mK2"
	DefaultCorpID       = "dingfakecorp0001"
	DefaultBotName      = "Persona Robot"
	// DefaultTicketTTL is how long a connection ticket is valid (the
	// protocol's 90 s); a ticket is good for one connection only.
	DefaultTicketTTL = 90 * time.Second
	// DefaultTokenTTL is the access token's lifetime (expireIn 7200 s).
	DefaultTokenTTL = 2 * time.Hour
	// DefaultSessionTTL is how long a session webhook stays valid after
	// the message that carried it (about 90 minutes on DingTalk).
	DefaultSessionTTL = 90 * time.Minute
	// DefaultDisconnectGrace is how long the server keeps a connection
	// open after announcing its close with a disconnect frame (10 s).
	DefaultDisconnectGrace = 10 * time.Second
)

// The topic of robot message callbacks.
const BotMessageTopic = "/v1.0/im/bot/messages/get"

// Session webhook errcodes the fake answers with. ErrcodeSendTooFast is
// DingTalk's (a robot over 20 messages a minute); the others are the
// fake's choice where the documentation names no code.
const (
	ErrcodeSendTooFast    = 130101
	ErrcodeSessionInvalid = 300001
	ErrcodeBadMessage     = 400105
	ErrcodeRejected       = 310000
)

// OpenAPI codes the fake answers with.
const (
	CodeQPSLimit        = "Forbidden.AccessDenied.QpsLimitForApi"
	CodeBotNotInGroup   = "invalidParameter.robotCode.notExsit"
	CodeBadParameter    = "invalidParameter.param.invalid"
	CodeUnauthenticated = "InvalidAuthentication"
	CodeBadDownloadCode = "invalidParameter.downloadCode.invalid"
)

// Config configures a Server. The zero value is usable.
type Config struct {
	// ClientID and ClientSecret are the app credentials the server
	// accepts (defaults DefaultClientID and DefaultClientSecret).
	ClientID, ClientSecret string
	// RobotCode is the robot's code (default ClientID, as for an internal
	// app's robot).
	RobotCode string
	// CorpID is the organisation (default DefaultCorpID); BotName the
	// robot's display name (default DefaultBotName).
	CorpID  string
	BotName string
	// Clock stamps messages and expires tickets, tokens and session
	// webhooks (nil = wall clock).
	Clock clock.Clock
	// TicketTTL, TokenTTL, SessionTTL and DisconnectGrace default to the
	// Default… constants.
	TicketTTL, TokenTTL, SessionTTL, DisconnectGrace time.Duration
	// SendsPerMinute, when positive, throttles the robot: a send over it
	// within a minute (on Clock) is answered errcode ErrcodeSendTooFast
	// by a session webhook and HTTP 403 CodeQPSLimit by the robot API.
	SendsPerMinute int
	// OnDelivered, when set, is called with every message the robot
	// sent, after it was recorded and before the sender gets the answer
	// (a test can take DingTalk offline between two chunks). It runs on
	// the request's goroutine and may call the Server.
	OnDelivered func(SentMessage)
}

// Via says how a message reached the fake.
type Via string

// The send routes.
const (
	ViaWebhook Via = "webhook"
	ViaGroup   Via = "groupMessages/send"
	ViaOTO     Via = "oToMessages/batchSend"
)

// SentMessage is a message the robot sent successfully.
type SentMessage struct {
	Via Via
	// ConversationID is the conversation of a webhook or group send; a
	// one-to-one send has UserIDs instead.
	ConversationID string
	// Group tells a group conversation from a one-to-one chat; Peer is
	// the user of a one-to-one chat.
	Group bool
	Peer  string
	// UserIDs are the userIds of a oToMessages/batchSend.
	UserIDs []string
	// MsgType is "text" or "markdown" (webhook), "sampleText" or
	// "sampleMarkdown" (robot API).
	MsgType string
	// Text is the text content, or the markdown text; Title the markdown
	// title.
	Text  string
	Title string
	// AtUserIDs and AtDingtalkIDs are the webhook's at lists.
	AtUserIDs     []string
	AtDingtalkIDs []string
	// ProcessQueryKey is the robot API's message key ("" for a webhook).
	ProcessQueryKey string
	At              time.Time
}

// Markdown reports whether the message was sent as markdown.
func (m SentMessage) Markdown() bool { return m.MsgType == "markdown" || m.MsgType == "sampleMarkdown" }

// Failure is an answer injected with FailNext.
type Failure struct {
	// Op selects the calls it applies to: OpOpen, OpToken, OpWebhook,
	// OpGroup, OpOTO, OpDownload, or OpAnySend (any of the three sends);
	// "" means OpAnySend.
	Op Op
	// Status is the HTTP status (default 200 when ErrCode is set, else
	// 500).
	Status int
	// ErrCode and ErrMsg make a webhook-style {"errcode":…,"errmsg":…}
	// body; Code and Message an OpenAPI-style {"code":…,"message":…}.
	ErrCode int
	ErrMsg  string
	Code    string
	Message string
	// RetryAfter is sent as the Retry-After header (seconds) when set.
	RetryAfter int
	// Body, when set, is written verbatim instead.
	Body string
	// Drop closes the connection without an answer, after the request
	// was read (and, for a send, delivered: the answer is lost).
	Drop bool
	// Deliver makes a send with Drop reach the chat before the answer is
	// lost; without it the message is not delivered.
	Deliver bool
	// Hang holds the request until the client gives up.
	Hang bool
}

// Op names a group of calls for FailNext.
type Op string

// The ops.
const (
	OpOpen     Op = "open"
	OpToken    Op = "token"
	OpWebhook  Op = "webhook"
	OpGroup    Op = "group"
	OpOTO      Op = "oto"
	OpDownload Op = "download"
	OpAnySend  Op = "send"
)

// OpenRequest is one connections/open call.
type OpenRequest struct {
	// ClientID, Subscriptions, UA and LocalIP are what the client sent
	// (clientId, subscriptions, ua, localIp); At is when.
	ClientID      string
	Subscriptions []Subscription
	UA            string
	LocalIP       string
	At            time.Time
	// Ticket is the ticket the server answered.
	Ticket string
}

// Subscription is one entry of an OpenRequest.
type Subscription struct {
	Type  string `json:"type"`
	Topic string `json:"topic"`
}

// Server is an in-process fake of DingTalk's Stream mode and robot APIs
// on a loopback httptest server: connections/open and the WebSocket
// stream, the access token, session webhooks, groupMessages/send,
// oToMessages/batchSend and the robot file download. Point the adapter's
// APIBase at URL. It implements chantest.PlatformDriver.
//
// A Server is safe for concurrent use.
type Server struct {
	cfg Config
	clk clock.Clock
	hs  *httptest.Server

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change
	gate        chan struct{} // closed unless frozen (see Freeze)
	closed      bool
	offline     bool
	tickets     map[string]time.Time
	tokens      map[string]time.Time
	conns       []*streamConn
	accepted    int
	opens       []OpenRequest
	tokenCalls  int
	issued      []string
	failures    []Failure
	sessions    map[string]*session // session token → session
	convSession map[string]string   // conversation → newest session token
	convs       map[string]*conversation
	messages    map[string]*storedMessage // msgId → message
	sent        []SentMessage
	acks        []Ack
	sendTimes   []time.Time
	kicked      map[string]bool
	invalid     map[string]bool
	files       map[string]*file // download code → file
	links       map[string]string
	downloads   []string
	nextMsg     int
	nextFrame   int
	nextKey     int
}

type session struct {
	conv    string
	expires time.Time
}

// conversation is a chat the fake knows.
type conversation struct {
	id    string
	group bool
	title string
	peer  string // one-to-one: the user
}

// storedMessage is a message of a conversation (a user's or the robot's),
// for quotes and replies.
type storedMessage struct {
	id   string
	conv string
	from User
	text string
	bot  bool
	at   time.Time
	seq  int
}

// New starts a fake DingTalk server on a loopback port. Call Close when
// done (e.g. t.Cleanup(srv.Close)).
func New(cfg Config) *Server {
	cfg.ClientID = cmp.Or(cfg.ClientID, DefaultClientID)
	cfg.ClientSecret = cmp.Or(cfg.ClientSecret, DefaultClientSecret)
	cfg.RobotCode = cmp.Or(cfg.RobotCode, cfg.ClientID)
	cfg.CorpID = cmp.Or(cfg.CorpID, DefaultCorpID)
	cfg.BotName = cmp.Or(cfg.BotName, DefaultBotName)
	cfg.TicketTTL = cmp.Or(cfg.TicketTTL, DefaultTicketTTL)
	cfg.TokenTTL = cmp.Or(cfg.TokenTTL, DefaultTokenTTL)
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, DefaultSessionTTL)
	cfg.DisconnectGrace = cmp.Or(cfg.DisconnectGrace, DefaultDisconnectGrace)
	s := &Server{
		cfg:         cfg,
		clk:         clock.OrReal(cfg.Clock),
		changed:     make(chan struct{}),
		gate:        make(chan struct{}),
		tickets:     map[string]time.Time{},
		tokens:      map[string]time.Time{},
		sessions:    map[string]*session{},
		convSession: map[string]string{},
		convs:       map[string]*conversation{},
		messages:    map[string]*storedMessage{},
		kicked:      map[string]bool{},
		invalid:     map[string]bool{},
		files:       map[string]*file{},
		links:       map[string]string{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1.0/gateway/connections/open", s.handleOpen)
	mux.HandleFunc("GET /connect", s.handleConnect)
	mux.HandleFunc("POST /v1.0/oauth2/accessToken", s.handleToken)
	mux.HandleFunc("POST /robot/sendBySession", s.handleWebhook)
	mux.HandleFunc("POST /v1.0/robot/groupMessages/send", s.handleGroupSend)
	mux.HandleFunc("POST /v1.0/robot/oToMessages/batchSend", s.handleOTOSend)
	mux.HandleFunc("POST /v1.0/robot/messageFiles/download", s.handleDownload)
	mux.HandleFunc("GET /oss/{key}", s.handleOSS)
	close(s.gate)
	s.hs = httptest.NewServer(s.guard(mux))
	return s
}

// Close closes every stream connection and shuts the server down.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	conns := append([]*streamConn(nil), s.conns...)
	s.notifyLocked()
	s.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
	s.hs.CloseClientConnections()
	s.hs.Close()
}

// URL is the API base to configure in the adapter (dingtalk.Config.APIBase);
// session webhooks are on the same host.
func (s *Server) URL() string { return s.hs.URL }

// ClientID and ClientSecret are the credentials the server accepts.
func (s *Server) ClientID() string     { return s.cfg.ClientID }
func (s *Server) ClientSecret() string { return s.cfg.ClientSecret }

// BotID is the robot code, the adapter's Event.BotID.
func (s *Server) BotID() string { return s.cfg.RobotCode }

// ChatbotUserID is the robot's dingtalk id as callbacks carry it
// (chatbotUserId, and the robot's entry of atUsers).
func (s *Server) ChatbotUserID() string { return "$:LWCP_v1:$" + s.cfg.RobotCode + "Bot" }

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor blocks until cond (called with s.mu held) holds or ctx ends.
func (s *Server) waitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ok := cond()
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SetOffline takes DingTalk offline (every stream connection is closed
// and every HTTP call answered 503) or brings it back. It implements
// chantest.PlatformDriver.
func (s *Server) SetOffline(_ context.Context, offline bool) error {
	s.mu.Lock()
	s.offline = offline
	conns := append([]*streamConn(nil), s.conns...)
	s.notifyLocked()
	s.mu.Unlock()
	if offline {
		for _, c := range conns {
			c.kill()
		}
	}
	return nil
}

// FailNext queues an injected answer for the next call f.Op selects.
func (s *Server) FailNext(f Failure) {
	if f.Op == "" {
		f.Op = OpAnySend
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, f)
}

// RejectNextSend makes the next send fail definitively: a session webhook
// answers errcode ErrcodeRejected, the robot API HTTP 400. It implements
// chantest.PlatformDriver.
func (s *Server) RejectNextSend(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, Failure{Op: OpAnySend, Status: -1}) // -1: the route's rejection
	return nil
}

// KickBot makes the robot API answer sends to the group conversation as
// for a robot that is no longer in it (HTTP 400 CodeBotNotInGroup).
func (s *Server) KickBot(conversationID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kicked[conversationID] = true
}

// SetInvalidUser makes oToMessages/batchSend list the user in
// invalidStaffIdList.
func (s *Server) SetInvalidUser(userID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invalid[userID] = true
}

// ExpireSessions expires every session webhook now.
func (s *Server) ExpireSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.sessions {
		ss.expires = time.Time{}
	}
}

// Opens lists the connections/open calls.
func (s *Server) Opens() []OpenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]OpenRequest(nil), s.opens...)
}

// Tokens lists every access token issued.
func (s *Server) Tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.issued...)
}

// TokenCalls counts the access token requests the server answered with a
// token.
func (s *Server) TokenCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenCalls
}

// Sent lists the robot's successful sends, in order.
func (s *Server) Sent() []SentMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SentMessage(nil), s.sent...)
}

// WaitSent waits until at least n messages were sent and returns them.
func (s *Server) WaitSent(ctx context.Context, n int) ([]SentMessage, error) {
	err := s.waitFor(ctx, func() bool { return len(s.sent) >= n })
	return s.Sent(), err
}

// takeFailureLocked pops the first queued failure that applies to op.
func (s *Server) takeFailureLocked(op Op) (Failure, bool) {
	for i, f := range s.failures {
		if f.Op == op || (f.Op == OpAnySend && (op == OpWebhook || op == OpGroup || op == OpOTO)) {
			s.failures = append(s.failures[:i], s.failures[i+1:]...)
			return f, true
		}
	}
	return Failure{}, false
}

// guard answers 503 while offline.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		off := s.offline
		s.mu.Unlock()
		if off {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "<html><body>503 Service Temporarily Unavailable</body></html>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// fail writes an injected failure.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, f Failure) {
	switch {
	case f.Hang:
		<-r.Context().Done()
		return
	case f.Drop:
		dropConn(w)
		return
	}
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfter))
	}
	status := f.Status
	if status == 0 {
		status = http.StatusInternalServerError
		if f.ErrCode != 0 {
			status = http.StatusOK
		}
	}
	if f.Body != "" {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, f.Body)
		return
	}
	if f.ErrCode != 0 {
		writeJSON(w, status, map[string]any{"errcode": f.ErrCode, "errmsg": cmp.Or(f.ErrMsg, "injected failure")})
		return
	}
	writeJSON(w, status, map[string]any{"code": cmp.Or(f.Code, "InternalError"), "message": cmp.Or(f.Message, "injected failure"),
		"requestid": "req-injected"})
}

// dropConn closes the client's connection without an answer.
func dropConn(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError writes an OpenAPI-style error.
func apiError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"code": code, "message": message, "requestid": "req-" + randHex(6)})
}

// readJSON decodes a request body of at most 1 MiB.
func readJSON(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		return err
	}
	if len(data) > 1<<20 {
		return errors.New("body too large")
	}
	return json.Unmarshal(data, v)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// handleOpen is POST /v1.0/gateway/connections/open.
func (s *Server) handleOpen(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ClientID      string         `json:"clientId"`
		ClientSecret  string         `json:"clientSecret"`
		Subscriptions []Subscription `json:"subscriptions"`
		UA            string         `json:"ua"`
		LocalIP       string         `json:"localIp"`
	}
	if err := readJSON(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, CodeBadParameter, "the body is not JSON")
		return
	}
	s.mu.Lock()
	f, failed := s.takeFailureLocked(OpOpen)
	s.mu.Unlock()
	if failed {
		s.fail(w, r, f)
		return
	}
	if req.ClientID != s.cfg.ClientID || req.ClientSecret != s.cfg.ClientSecret {
		apiError(w, http.StatusUnauthorized, CodeUnauthenticated, "clientId or clientSecret is wrong")
		return
	}
	if len(req.Subscriptions) == 0 {
		apiError(w, http.StatusBadRequest, CodeBadParameter, "subscriptions is empty")
		return
	}
	for _, sub := range req.Subscriptions {
		switch sub.Type {
		case "EVENT", "CALLBACK", "SYSTEM":
		default:
			apiError(w, http.StatusBadRequest, CodeBadParameter, "unknown subscription type "+sub.Type)
			return
		}
	}
	ticket := randHex(4) + "-" + randHex(2) + "-" + randHex(2) + "-" + randHex(2) + "-" + randHex(6)
	s.mu.Lock()
	now := s.clk.Now()
	s.tickets[ticket] = now.Add(s.cfg.TicketTTL)
	s.opens = append(s.opens, OpenRequest{ClientID: req.ClientID, Ticket: ticket, Subscriptions: req.Subscriptions, UA: req.UA, LocalIP: req.LocalIP, At: now})
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"endpoint": "ws" + strings.TrimPrefix(s.hs.URL, "http") + "/connect", "ticket": ticket})
}

// handleToken is POST /v1.0/oauth2/accessToken.
func (s *Server) handleToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AppKey    string `json:"appKey"`
		AppSecret string `json:"appSecret"`
	}
	if err := readJSON(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, CodeBadParameter, "the body is not JSON")
		return
	}
	s.mu.Lock()
	f, failed := s.takeFailureLocked(OpToken)
	s.mu.Unlock()
	if failed {
		s.fail(w, r, f)
		return
	}
	if req.AppKey != s.cfg.ClientID || req.AppSecret != s.cfg.ClientSecret {
		apiError(w, http.StatusBadRequest, "invalidClientIdOrSecret", "appKey or appSecret is wrong")
		return
	}
	tok := "fake-token-" + randHex(12)
	s.mu.Lock()
	s.tokens[tok] = s.clk.Now().Add(s.cfg.TokenTTL)
	s.issued = append(s.issued, tok)
	s.tokenCalls++
	s.notifyLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"accessToken": tok, "expireIn": int(s.cfg.TokenTTL / time.Second)})
}

// RevokeTokens makes every issued access token invalid (the API answers
// 401 until a new one is fetched).
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tokens)
}

// authorized checks the x-acs-dingtalk-access-token header; it answers
// 401 and reports false when the token is missing, unknown or expired.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	tok := r.Header.Get("x-acs-dingtalk-access-token")
	s.mu.Lock()
	exp, ok := s.tokens[tok]
	ok = ok && s.clk.Now().Before(exp)
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusUnauthorized, CodeUnauthenticated, "the access token is missing, invalid or expired")
	}
	return ok
}

// throttledLocked records a send at now and reports whether it is over
// SendsPerMinute.
func (s *Server) throttledLocked(now time.Time) bool {
	if s.cfg.SendsPerMinute <= 0 {
		return false
	}
	keep := s.sendTimes[:0]
	for _, t := range s.sendTimes {
		if now.Sub(t) < time.Minute {
			keep = append(keep, t)
		}
	}
	s.sendTimes = keep
	if len(s.sendTimes) >= s.cfg.SendsPerMinute {
		return true
	}
	s.sendTimes = append(s.sendTimes, now)
	return false
}

// handleWebhook is POST /robot/sendBySession?session=…, the session
// webhook of a conversation.
func (s *Server) handleWebhook(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MsgType string `json:"msgtype"`
		Text    *struct {
			Content string `json:"content"`
		} `json:"text"`
		Markdown *struct {
			Title string `json:"title"`
			Text  string `json:"text"`
		} `json:"markdown"`
		At *struct {
			AtUserIDs     []string `json:"atUserIds"`
			AtDingtalkIDs []string `json:"atDingtalkIds"`
			AtMobiles     []string `json:"atMobiles"`
			IsAtAll       bool     `json:"isAtAll"`
		} `json:"at"`
	}
	if err := readJSON(r, &req); err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"errcode": ErrcodeBadMessage, "errmsg": "the body is not JSON"})
		return
	}
	token := r.URL.Query().Get("session")
	s.mu.Lock()
	ss, ok := s.sessions[token]
	now := s.clk.Now()
	valid := ok && now.Before(ss.expires)
	f, failed := s.takeFailureLocked(OpWebhook)
	s.mu.Unlock()
	if !valid {
		writeJSON(w, http.StatusOK, map[string]any{"errcode": ErrcodeSessionInvalid, "errmsg": "session is not exist or expired"})
		return
	}
	if failed && f.Status == -1 {
		writeJSON(w, http.StatusOK, map[string]any{"errcode": ErrcodeRejected, "errmsg": "rejected (injected)"})
		return
	}
	if failed && (!f.Drop || !f.Deliver) {
		s.fail(w, r, f)
		return
	}
	m := SentMessage{Via: ViaWebhook, ConversationID: ss.conv, MsgType: req.MsgType, At: now}
	switch {
	case req.MsgType == "text" && req.Text != nil && req.Text.Content != "":
		m.Text = req.Text.Content
	case req.MsgType == "markdown" && req.Markdown != nil && req.Markdown.Title != "" && req.Markdown.Text != "":
		m.Text, m.Title = req.Markdown.Text, req.Markdown.Title
	default:
		writeJSON(w, http.StatusOK, map[string]any{"errcode": ErrcodeBadMessage, "errmsg": "unsupported or empty message"})
		return
	}
	if len(m.Text)+len(m.Title) > MaxMessageBytes {
		writeJSON(w, http.StatusOK, map[string]any{"errcode": ErrcodeBadMessage, "errmsg": "message too long"})
		return
	}
	if req.At != nil {
		m.AtUserIDs, m.AtDingtalkIDs = req.At.AtUserIDs, req.At.AtDingtalkIDs
	}
	s.mu.Lock()
	if s.throttledLocked(now) {
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"errcode": ErrcodeSendTooFast, "errmsg": "send too fast, exceed 20 times per minute"})
		return
	}
	m = s.recordLocked(m)
	s.mu.Unlock()
	s.delivered(m)
	if failed { // Drop with Deliver: delivered, the answer is lost
		dropConn(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"errcode": 0, "errmsg": "ok"})
}

// MaxMessageBytes is the most a robot message may carry.
const MaxMessageBytes = 20000

// delivered calls Config.OnDelivered.
func (s *Server) delivered(m SentMessage) {
	if s.cfg.OnDelivered != nil {
		s.cfg.OnDelivered(m)
	}
}

// recordLocked stores a delivered message.
func (s *Server) recordLocked(m SentMessage) SentMessage {
	if c := s.convs[m.ConversationID]; c != nil {
		m.Group, m.Peer = c.group, c.peer
	}
	s.sent = append(s.sent, m)
	// The robot's message, for quotes of it (the fake's own id when the
	// route answers none).
	s.nextMsg++
	id := m.ProcessQueryKey
	if id == "" {
		id = fmt.Sprintf("msgbot%s%04dQ==", randHex(6), s.nextMsg)
	}
	text := m.Text
	if m.Markdown() {
		if _, rest, ok := splitQuote(text); ok {
			text = rest
		}
	}
	s.messages[id] = &storedMessage{id: id, conv: m.ConversationID, text: text, bot: true, at: m.At, seq: s.nextMsg}
	s.notifyLocked()
	return m
}

// apiMessage reads the msgKey/msgParam of a robot API send.
func apiMessage(msgKey, msgParam string) (text, title string, ok bool) {
	var p struct {
		Content string `json:"content"`
		Title   string `json:"title"`
		Text    string `json:"text"`
	}
	if json.Unmarshal([]byte(msgParam), &p) != nil {
		return "", "", false
	}
	switch msgKey {
	case "sampleText":
		return p.Content, "", p.Content != ""
	case "sampleMarkdown":
		return p.Text, p.Title, p.Text != "" && p.Title != ""
	}
	return "", "", false
}

// handleGroupSend is POST /v1.0/robot/groupMessages/send.
func (s *Server) handleGroupSend(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	var req struct {
		RobotCode          string `json:"robotCode"`
		OpenConversationID string `json:"openConversationId"`
		MsgKey             string `json:"msgKey"`
		MsgParam           string `json:"msgParam"`
	}
	if err := readJSON(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, CodeBadParameter, "the body is not JSON")
		return
	}
	s.mu.Lock()
	f, failed := s.takeFailureLocked(OpGroup)
	kicked := s.kicked[req.OpenConversationID]
	s.mu.Unlock()
	if failed && f.Status == -1 {
		apiError(w, http.StatusBadRequest, CodeBadParameter, "rejected (injected)")
		return
	}
	if failed && (!f.Drop || !f.Deliver) {
		s.fail(w, r, f)
		return
	}
	text, title, ok := apiMessage(req.MsgKey, req.MsgParam)
	switch {
	case req.RobotCode != s.cfg.RobotCode:
		apiError(w, http.StatusBadRequest, "invalidParameter.robotCode.auth", "this app's key does not match the robot code")
		return
	case req.OpenConversationID == "":
		apiError(w, http.StatusBadRequest, "invalid.openConversationId", "openConversationId is empty")
		return
	case kicked:
		apiError(w, http.StatusBadRequest, CodeBotNotInGroup, "the robot does not exist; check whether it is in the group")
		return
	case !ok:
		apiError(w, http.StatusBadRequest, "invalidParameter.msgParam.invalid", "msgKey or msgParam is invalid")
		return
	case len(req.MsgParam) > 15000:
		apiError(w, http.StatusBadRequest, CodeBadParameter, "msgParam is longer than 15000 bytes")
		return
	}
	s.mu.Lock()
	now := s.clk.Now()
	if s.throttledLocked(now) {
		s.mu.Unlock()
		apiError(w, http.StatusForbidden, CodeQPSLimit, "too many requests")
		return
	}
	s.ensureConvLocked(req.OpenConversationID, true, "")
	s.nextKey++
	key := fmt.Sprintf("pqk%04d%s==", s.nextKey, randHex(6))
	m := SentMessage{Via: ViaGroup, ConversationID: req.OpenConversationID, MsgType: req.MsgKey, Text: text, Title: title,
		ProcessQueryKey: key, At: now}
	m = s.recordLocked(m)
	s.mu.Unlock()
	s.delivered(m)
	if failed {
		dropConn(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"processQueryKey": key})
}

// handleOTOSend is POST /v1.0/robot/oToMessages/batchSend.
func (s *Server) handleOTOSend(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	var req struct {
		RobotCode string   `json:"robotCode"`
		UserIDs   []string `json:"userIds"`
		MsgKey    string   `json:"msgKey"`
		MsgParam  string   `json:"msgParam"`
	}
	if err := readJSON(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, CodeBadParameter, "the body is not JSON")
		return
	}
	s.mu.Lock()
	f, failed := s.takeFailureLocked(OpOTO)
	s.mu.Unlock()
	if failed && f.Status == -1 {
		apiError(w, http.StatusBadRequest, CodeBadParameter, "rejected (injected)")
		return
	}
	if failed && (!f.Drop || !f.Deliver) {
		s.fail(w, r, f)
		return
	}
	text, title, ok := apiMessage(req.MsgKey, req.MsgParam)
	switch {
	case req.RobotCode != s.cfg.RobotCode:
		apiError(w, http.StatusBadRequest, "invalidParameter.robotCode.auth", "this app's key does not match the robot code")
		return
	case len(req.UserIDs) == 0:
		apiError(w, http.StatusBadRequest, "invalidParameter.userIds.empty", "userIds is empty")
		return
	case len(req.UserIDs) > 20:
		apiError(w, http.StatusBadRequest, "invalidParameter.userIds.overMax", "userIds has more than 20 entries")
		return
	case !ok:
		apiError(w, http.StatusBadRequest, "invalidParameter.msgParam.invalid", "msgKey or msgParam is invalid")
		return
	}
	s.mu.Lock()
	now := s.clk.Now()
	res := map[string]any{"invalidStaffIdList": []string{}, "flowControlledStaffIdList": []string{}}
	var invalid, flow, okUsers []string
	for _, u := range req.UserIDs {
		switch {
		case s.invalid[u]:
			invalid = append(invalid, u)
		case s.throttledLocked(now):
			flow = append(flow, u)
		default:
			okUsers = append(okUsers, u)
		}
	}
	if invalid != nil {
		res["invalidStaffIdList"] = invalid
	}
	if flow != nil {
		res["flowControlledStaffIdList"] = flow
	}
	s.nextKey++
	key := fmt.Sprintf("pqk%04d%s==", s.nextKey, randHex(6))
	res["processQueryKey"] = key
	var ms []SentMessage
	for _, u := range okUsers {
		conv := s.ensureConvLocked(privateConv(u), false, u)
		m := SentMessage{Via: ViaOTO, ConversationID: conv.id, UserIDs: []string{u}, MsgType: req.MsgKey, Text: text, Title: title,
			ProcessQueryKey: key, At: now}
		ms = append(ms, s.recordLocked(m))
	}
	s.mu.Unlock()
	for _, m := range ms {
		s.delivered(m)
	}
	if failed {
		dropConn(w)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// privateConv is the fake's conversation id of the robot's one-to-one
// chat with a user.
func privateConv(user string) string { return "cidp2p" + hex.EncodeToString([]byte(user)) + "==" }

// ensureConvLocked returns the conversation, creating it.
func (s *Server) ensureConvLocked(id string, group bool, peer string) *conversation {
	c := s.convs[id]
	if c == nil {
		c = &conversation{id: id, group: group, peer: peer, title: "Group " + id}
		s.convs[id] = c
	}
	return c
}
