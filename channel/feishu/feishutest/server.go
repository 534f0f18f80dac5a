package feishutest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Defaults of Config.
const (
	DefaultAppID             = "cli_a1b2c3d4e5f60718"
	DefaultAppSecret         = "persona-test-app-secret-0123456789"
	DefaultVerificationToken = "persona-test-verification-token"
	DefaultBotOpenID         = "ou_7b0c4e0d2f6a4c1e9b3d5a7f8e9c0b1a"
	DefaultBotName           = "Persona Test Bot"
	DefaultTenantKey         = "2ca1d211f64f6438"
	// DefaultTokenTTL is the lifetime of a tenant access token (the
	// platform's "expire": 7200 s).
	DefaultTokenTTL = 2 * time.Hour
	// DefaultPingInterval is the long connection's ClientConfig
	// PingInterval.
	DefaultPingInterval = 120 * time.Second
	// DefaultDeliveryTimeout is how long a delivery waits for the bot's
	// answer (Feishu's 3 s for callbacks).
	DefaultDeliveryTimeout = 3 * time.Second
	// DefaultMaxConnections is how many long connections an app may hold.
	DefaultMaxConnections = 50
	// uuidWindow is how long a send uuid deduplicates.
	uuidWindow = time.Hour
	// Body limits of the send API [doc 发送消息: text 150 KB, post 30 KB].
	maxTextBody = 150 << 10
	maxPostBody = 30 << 10
)

// DefaultRetryDelays is Feishu's redelivery schedule for an event whose
// delivery failed: after 15 s, 5 min, 1 h and 6 h, then it is dropped.
var DefaultRetryDelays = []time.Duration{15 * time.Second, 5 * time.Minute, time.Hour, 6 * time.Hour}

// Open API codes the fake answers with.
const (
	CodeTokenMissing    = 99991661
	CodeTokenInvalid    = 99991663
	CodeRateLimited     = 99991400
	CodeFieldValidation = 99992402
	CodeInvalidParam    = 230001
	CodeBotNotInGroup   = 230002
	CodeMessageRecalled = 230011
	CodeSendDenied      = 230035
	CodeContentTooLong  = 230025
	CodeAppSecret       = 10014
	CodeResourceParam   = 234001
	CodeFileNotInMsg    = 234003
	CodeWSAuthFailed    = 514
	CodeWSConnLimit     = 1000040350
)

// Config configures a Server. The zero value is usable.
type Config struct {
	// The app's credentials and event subscription settings (defaults
	// DefaultAppID, DefaultAppSecret, DefaultVerificationToken, no
	// Encrypt Key: callbacks in plaintext).
	AppID, AppSecret, VerificationToken, EncryptKey string
	// The bot (defaults DefaultBotOpenID, DefaultBotName) and tenant.
	BotOpenID, BotName, TenantKey string
	// Clock stamps messages, tokens and timestamps and times redeliveries
	// (nil = wall clock).
	Clock clock.Clock
	// TokenTTL is the tenant token lifetime (default 2 h).
	TokenTTL time.Duration
	// RetryDelays is the redelivery schedule of a failed delivery (nil =
	// DefaultRetryDelays); after the last one the event is dropped.
	RetryDelays []time.Duration
	// DeliveryTimeout bounds the wait for the bot's answer to a callback
	// or a long-connection frame, in real time (default 3 s).
	DeliveryTimeout time.Duration
	// PingInterval is the ClientConfig PingInterval of the long
	// connection, whole seconds (default 120 s).
	PingInterval time.Duration
	// FragmentSize splits long-connection event payloads into frames of
	// at most this many bytes (0: never).
	FragmentSize int
	// MaxConnections bounds the long connections of the app (default 50);
	// the endpoint answers code 1000040350 beyond it.
	MaxConnections int
}

// User is a user of the fake tenant.
type User struct {
	OpenID  string // ou_…, the id the adapter uses (required)
	UnionID string // on_… (default: derived from OpenID)
	UserID  string // the tenant's own user id (optional)
	Name    string // the display name, for mentions
}

// Mention is a mention in a stored message.
type Mention struct {
	Key    string `json:"key"`  // @_user_1, …: its placeholder in the content
	OpenID string `json:"-"`    // who is mentioned
	Name   string `json:"name"` // the name shown
}

// Message is a message the fake keeps: the users' and the bot's.
type Message struct {
	ID       string // om_…
	RootID   string // the first message of a reply chain ("" when none)
	ParentID string // the message this one replies to ("" when none)
	ChatID   string // oc_…
	// ChatType is "p2p", "group" or "topic_group".
	ChatType string
	MsgType  string // text, post, image, …
	// Content is the stored content JSON (mentions as @_user_N keys).
	Content  string
	Mentions []Mention // the mentions the keys stand for
	// SenderID is the sender's open_id, or the app id for the bot.
	SenderID   string
	FromBot    bool      // sent by the bot
	CreateTime time.Time // on Config.Clock
	Deleted    bool      // recalled (Recall)
	// EventID is the event that delivered a user's message.
	EventID string
}

// SentMessage is a message the bot sent successfully.
type SentMessage struct {
	// Op is "send" or "reply".
	Op        string
	MessageID string // the new message's id
	ChatID    string // the chat it went to
	// Chat is the chat as the adapter names it: a group's chat_id, or for
	// a private chat the peer's open_id.
	Chat     channel.Chat
	MsgType  string    // text, post or image
	Content  string    // the content JSON as stored
	Text     string    // the rendered text: mentions as "@Name"
	Mentions []string  // mentioned open_ids
	ParentID string    // the message replied to ("" for a plain send)
	UUID     string    // the request's uuid ("" when none)
	Time     time.Time // its create_time
}

// Call is one Open API request the fake received.
type Call struct {
	// Op names the endpoint: token, bot_info, send, reply, list,
	// resource, ws_endpoint, or "unknown".
	Op    string
	Path  string     // the request path
	Query url.Values // the query parameters
	Body  []byte     // the request body
	// Auth is the bearer token sent ("" when none).
	Auth    string
	At      time.Time // on Config.Clock
	Offline bool      // answered 503 because the platform was offline
}

// Failure is an error answer injected with FailNext or FailNextSend.
type Failure struct {
	// Status is the HTTP status (default 400) and Code the Open API code
	// (0: a body without one).
	Status int
	Code   int    // the answer's code (0: no Open API body)
	Msg    string // the answer's msg (default "injected failure")
	// RetryAfter sets x-ogw-ratelimit-reset (seconds).
	RetryAfter int
	// Drop closes the connection without an answer. With StoreFirst (a
	// send), the message is stored first: the answer is lost after the
	// platform accepted it.
	Drop       bool
	StoreFirst bool // store the message before failing (sends only)
}

type pendingFailure struct {
	op string
	f  Failure
}

type chatState struct {
	id, typ string
	peer    string // a p2p chat's user
	msgs    []string
	kicked  bool
	muted   bool
}

type resource struct {
	data []byte
	mime string
}

// Server is an in-process fake of the Feishu Open Platform on a loopback
// httptest server: the tenant token, bot info, message send, reply, list
// and resource APIs, event callbacks (webhook) and the long connection.
// It implements chantest.PlatformDriver.
//
// A Server is safe for concurrent use.
type Server struct {
	cfg Config
	clk clock.Clock
	hs  *httptest.Server
	hc  *http.Client

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change
	closed    bool
	offline   bool
	nextID    int
	tokens    map[string]time.Time
	users     map[string]User
	chats     map[string]*chatState
	p2p       map[string]string // user open_id → p2p chat_id
	messages  map[string]*Message
	uuids     map[string]uuidEntry
	resources map[string]resource // message_id/key → content
	images    map[string]bool     // image keys the bot may send
	failures  []pendingFailure
	stall     *stall
	onSent    func(SentMessage)
	calls     []Call
	sent      []SentMessage

	events  // event delivery state (events.go)
	longCon // long-connection state (ws.go)
}

type uuidEntry struct {
	msgID string
	at    time.Time
}

type stall struct {
	store   bool
	started chan struct{}
}

// New starts a Server on a loopback port. Close it when done.
func New(cfg Config) *Server {
	cfg.AppID = cmp.Or(cfg.AppID, DefaultAppID)
	cfg.AppSecret = cmp.Or(cfg.AppSecret, DefaultAppSecret)
	cfg.VerificationToken = cmp.Or(cfg.VerificationToken, DefaultVerificationToken)
	cfg.BotOpenID = cmp.Or(cfg.BotOpenID, DefaultBotOpenID)
	cfg.BotName = cmp.Or(cfg.BotName, DefaultBotName)
	cfg.TenantKey = cmp.Or(cfg.TenantKey, DefaultTenantKey)
	cfg.TokenTTL = cmp.Or(cfg.TokenTTL, DefaultTokenTTL)
	cfg.DeliveryTimeout = cmp.Or(cfg.DeliveryTimeout, DefaultDeliveryTimeout)
	cfg.PingInterval = cmp.Or(cfg.PingInterval, DefaultPingInterval)
	cfg.MaxConnections = cmp.Or(cfg.MaxConnections, DefaultMaxConnections)
	if cfg.RetryDelays == nil {
		cfg.RetryDelays = DefaultRetryDelays
	}
	s := &Server{
		cfg:       cfg,
		clk:       clock.OrReal(cfg.Clock),
		hc:        &http.Client{Timeout: cfg.DeliveryTimeout},
		changed:   make(chan struct{}),
		tokens:    map[string]time.Time{},
		users:     map[string]User{},
		chats:     map[string]*chatState{},
		p2p:       map[string]string{},
		messages:  map[string]*Message{},
		uuids:     map[string]uuidEntry{},
		resources: map[string]resource{},
		images:    map[string]bool{},
	}
	s.events.init()
	s.longCon.init()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /open-apis/auth/v3/tenant_access_token/internal", s.api("token", false, s.handleToken))
	mux.HandleFunc("GET /open-apis/bot/v3/info", s.api("bot_info", true, s.handleBotInfo))
	mux.HandleFunc("POST /open-apis/im/v1/messages", s.api("send", true, s.handleSend))
	mux.HandleFunc("GET /open-apis/im/v1/messages", s.api("list", true, s.handleList))
	mux.HandleFunc("POST /open-apis/im/v1/messages/{id}/reply", s.api("reply", true, s.handleSend))
	mux.HandleFunc("GET /open-apis/im/v1/messages/{id}/resources/{key}", s.api("resource", true, s.handleResource))
	mux.HandleFunc("POST /callback/ws/endpoint", s.api("ws_endpoint", false, s.handleEndpoint))
	mux.HandleFunc("GET /ws", s.handleWS)
	mux.HandleFunc("/", s.api("unknown", false, func(w http.ResponseWriter, _ *http.Request, _ *Call) {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "msg": "404 page not found"})
	}))
	s.hs = httptest.NewServer(mux)
	go s.dispatch()
	return s
}

// Close stops the server, its deliveries and connections.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.notifyLocked()
	conns := s.connsLocked()
	s.mu.Unlock()
	for _, c := range conns {
		c.close("server closed")
	}
	s.stop()
	s.hs.CloseClientConnections()
	s.hs.Close()
}

// URL is the base URL to give the adapter (Config.BaseURL).
func (s *Server) URL() string { return s.hs.URL }

// AppID, AppSecret, VerificationToken and EncryptKey are the app's
// settings.
func (s *Server) AppID() string { return s.cfg.AppID }

// AppSecret is the app secret.
func (s *Server) AppSecret() string { return s.cfg.AppSecret }

// VerificationToken is the event subscription's verification token.
func (s *Server) VerificationToken() string { return s.cfg.VerificationToken }

// EncryptKey is the event subscription's Encrypt Key ("" = none).
func (s *Server) EncryptKey() string { return s.cfg.EncryptKey }

// BotID is the bot's open_id (what the adapter reports as Event.BotID).
func (s *Server) BotID() string { return s.cfg.BotOpenID }

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor blocks until cond (called under the lock) holds or ctx ends.
func (s *Server) waitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
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

// newIDLocked returns a fresh id with prefix (om_, oc_, …) in the
// platform's 32-hex-digit style.
func (s *Server) newIDLocked(prefix string) string {
	s.nextID++
	return fmt.Sprintf("%s%032x", prefix, 0x5e3702a84e847582+s.nextID)
}

// AddUser registers a user (name for mentions and rendering).
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addUserLocked(u)
}

func (s *Server) addUserLocked(u User) {
	if u.OpenID == "" {
		return
	}
	old := s.users[u.OpenID]
	u.Name = cmp.Or(u.Name, old.Name)
	u.UnionID = cmp.Or(u.UnionID, old.UnionID, "on_"+strings.TrimPrefix(u.OpenID, "ou_"))
	u.UserID = cmp.Or(u.UserID, old.UserID)
	s.users[u.OpenID] = u
}

// AddImage registers an image_key the bot may send (as if it had uploaded
// the image).
func (s *Server) AddImage(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images[key] = true
}

// KickBot removes the bot from a group: sends there answer 230002.
func (s *Server) KickBot(chatID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groupLocked(chatID).kicked = true
}

// MuteChat makes sends to a chat answer 230035 (no permission to send).
func (s *Server) MuteChat(chatID string, muted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groupLocked(chatID).muted = muted
}

// ExpireTokens invalidates every tenant token handed out so far.
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tokens)
}

// Recall marks a message deleted.
func (s *Server) Recall(messageID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.messages[messageID]; m != nil {
		m.Deleted = true
	}
}

// groupLocked returns a group chat, creating it (with the bot in it).
func (s *Server) groupLocked(id string) *chatState {
	c := s.chats[id]
	if c == nil {
		c = &chatState{id: id, typ: "group"}
		s.chats[id] = c
	}
	return c
}

// p2pLocked returns the private chat of the bot with user, creating it.
func (s *Server) p2pLocked(user string) *chatState {
	if id, ok := s.p2p[user]; ok {
		return s.chats[id]
	}
	c := &chatState{id: s.newIDLocked("oc_"), typ: "p2p", peer: user}
	s.chats[c.id] = c
	s.p2p[user] = c.id
	return c
}

// chatOfLocked names a chat as the adapter does.
func (s *Server) chatOfLocked(chatID string) channel.Chat {
	c := s.chats[chatID]
	if c != nil && c.typ == "p2p" {
		return channel.Chat{Kind: channel.Private, ID: c.peer}
	}
	return channel.Chat{Kind: channel.Group, ID: chatID}
}

// storeLocked adds a message to its chat.
func (s *Server) storeLocked(m *Message) {
	s.messages[m.ID] = m
	c := s.chats[m.ChatID]
	c.msgs = append(c.msgs, m.ID)
	s.notifyLocked()
}

// Messages returns a copy of a chat's messages in order (users' and the
// bot's).
func (s *Server) Messages(chatID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chats[chatID]
	if c == nil {
		return nil
	}
	out := make([]Message, 0, len(c.msgs))
	for _, id := range c.msgs {
		out = append(out, *s.messages[id])
	}
	return out
}

// P2PChatID returns the chat_id of the bot's private chat with a user
// ("" when there is none yet).
func (s *Server) P2PChatID(openID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p2p[openID]
}

// FailNext makes the next call of op (token, bot_info, send, reply,
// list, resource, ws_endpoint) answer with f.
func (s *Server) FailNext(op string, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, pendingFailure{op: op, f: f})
}

// FailNextSend makes the next send or reply answer with f.
func (s *Server) FailNextSend(f Failure) { s.FailNext("send", f) }

// StallNextSend makes the next send or reply hang (after storing the
// message when store is set) until the client gives up or the server
// closes; the returned channel is closed when it started hanging.
func (s *Server) StallNextSend(store bool) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stall = &stall{store: store, started: make(chan struct{})}
	return s.stall.started
}

// OnSent sets a function called with every message the bot sends, after
// it is stored and before the answer (nil: none). It runs on the
// request's goroutine without the server's lock.
func (s *Server) OnSent(fn func(SentMessage)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onSent = fn
}

// SetOffline takes the platform down (every API answers 503, the long
// connections are closed and refused, no event is delivered) or brings
// it back.
func (s *Server) SetOffline(ctx context.Context, offline bool) error {
	s.mu.Lock()
	s.offline = offline
	conns := s.connsLocked()
	s.notifyLocked()
	s.mu.Unlock()
	if offline {
		for _, c := range conns {
			c.close("platform offline")
		}
	}
	return nil
}

// Calls returns a copy of the requests received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// CallCount counts the requests of op.
func (s *Server) CallCount(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c.Op == op {
			n++
		}
	}
	return n
}

// Sent returns a copy of the bot's successful sends, in order.
func (s *Server) Sent() []SentMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// WaitSent waits until at least n messages were sent and returns them.
func (s *Server) WaitSent(ctx context.Context, n int) ([]SentMessage, error) {
	if err := s.waitFor(ctx, func() bool { return len(s.sent) >= n }); err != nil {
		return s.Sent(), fmt.Errorf("feishutest: waiting for %d sent messages (have %d): %w", n, len(s.Sent()), err)
	}
	return s.Sent(), nil
}

// apiHandler handles one endpoint with the call recorded.
type apiHandler func(w http.ResponseWriter, r *http.Request, call *Call)

// api wraps an endpoint: it records the call, answers 503 while offline,
// checks the tenant token (auth), and applies injected failures.
func (s *Server) api(op string, auth bool, h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		call := &Call{Op: op, Path: r.URL.Path, Query: r.URL.Query(), Body: body, At: s.clk.Now()}
		if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
			call.Auth = strings.TrimPrefix(a, "Bearer ")
		}
		s.mu.Lock()
		offline := s.offline
		call.Offline = offline
		s.calls = append(s.calls, *call)
		s.notifyLocked()
		var fail *Failure
		fop := op
		if op == "reply" {
			fop = "send"
		}
		if !offline {
			for i, pf := range s.failures {
				if pf.op == fop {
					f := pf.f
					fail = &f
					s.failures = slices.Delete(s.failures, i, i+1)
					break
				}
			}
		}
		var tokenOK bool
		exp, known := s.tokens[call.Auth]
		tokenOK = known && s.clk.Now().Before(exp)
		s.mu.Unlock()

		switch {
		case offline:
			w.Header().Set("Content-Type", "text/html")
			http.Error(w, "<html><body>503 Service Temporarily Unavailable</body></html>", http.StatusServiceUnavailable)
			return
		case auth && call.Auth == "":
			writeJSON(w, http.StatusBadRequest, map[string]any{"code": CodeTokenMissing, "msg": "Missing access token for authorization."})
			return
		case auth && !tokenOK:
			writeJSON(w, http.StatusBadRequest, map[string]any{"code": CodeTokenInvalid, "msg": "Invalid access token for authorization."})
			return
		}
		if fail != nil && (!fail.StoreFirst || op != "send" && op != "reply") {
			s.writeFailure(w, *fail)
			return
		}
		if fail != nil {
			r = r.WithContext(context.WithValue(r.Context(), failKey{}, fail))
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		h(w, r, call)
	}
}

type failKey struct{}

// writeFailure answers with an injected failure.
func (s *Server) writeFailure(w http.ResponseWriter, f Failure) {
	if f.Drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	if f.RetryAfter > 0 {
		w.Header().Set("X-Ogw-Ratelimit-Reset", strconv.Itoa(f.RetryAfter))
	}
	status := cmp.Or(f.Status, http.StatusBadRequest)
	if f.Code == 0 {
		http.Error(w, cmp.Or(f.Msg, http.StatusText(status)), status)
		return
	}
	writeJSON(w, status, map[string]any{"code": f.Code, "msg": cmp.Or(f.Msg, "injected failure")})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"code": code, "msg": msg})
}

func (s *Server) handleToken(w http.ResponseWriter, r *http.Request, _ *Call) {
	var req struct {
		AppID     string `json:"app_id"`
		AppSecret string `json:"app_secret"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, CodeFieldValidation, "invalid request body")
		return
	}
	if req.AppID != s.cfg.AppID || req.AppSecret != s.cfg.AppSecret {
		apiError(w, CodeAppSecret, "app secret invalid")
		return
	}
	s.mu.Lock()
	tok := s.newIDLocked("t-")
	s.tokens[tok] = s.clk.Now().Add(s.cfg.TokenTTL)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"code": 0, "msg": "ok", "tenant_access_token": tok, "expire": int(s.cfg.TokenTTL / time.Second)})
}

func (s *Server) handleBotInfo(w http.ResponseWriter, _ *http.Request, _ *Call) {
	writeJSON(w, http.StatusOK, map[string]any{"code": 0, "msg": "ok", "bot": map[string]any{
		"activate_status": 2, "app_name": s.cfg.BotName, "avatar_url": "", "ip_white_list": []string{}, "open_id": s.cfg.BotOpenID,
	}})
}

// handleSend serves send (POST /im/v1/messages) and reply (POST
// /im/v1/messages/{id}/reply).
func (s *Server) handleSend(w http.ResponseWriter, r *http.Request, call *Call) {
	var req struct {
		ReceiveID string          `json:"receive_id"`
		MsgType   string          `json:"msg_type"`
		Content   json.RawMessage `json:"content"`
		UUID      string          `json:"uuid"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, CodeFieldValidation, "field validation failed: body is not JSON")
		return
	}
	var content string
	if err := json.Unmarshal(req.Content, &content); err != nil {
		apiError(w, CodeFieldValidation, "field validation failed: content must be a JSON string")
		return
	}
	if len(req.UUID) > 50 {
		apiError(w, CodeFieldValidation, "field validation failed: uuid longer than 50 characters")
		return
	}
	s.mu.Lock()
	m, code, msg := s.acceptSendLocked(call.Op, r.PathValue("id"), r.URL.Query().Get("receive_id_type"), req.ReceiveID, req.MsgType, content, req.UUID)
	if code != 0 {
		s.mu.Unlock()
		apiError(w, code, msg)
		return
	}
	fail, _ := r.Context().Value(failKey{}).(*Failure)
	st := s.stall
	if st != nil {
		s.stall = nil
	}
	var sent *SentMessage
	if m.isNew && (st == nil || st.store) {
		s.storeLocked(m.msg)
		if req.UUID != "" {
			s.uuids[req.UUID] = uuidEntry{msgID: m.msg.ID, at: m.msg.CreateTime}
		}
		sm := s.sentOfLocked(call.Op, m.msg, req.UUID)
		s.sent = append(s.sent, sm)
		sent = &sm
	}
	hook := s.onSent
	s.mu.Unlock()

	if st != nil {
		close(st.started)
		s.mu.Lock()
		closed := s.changed
		s.mu.Unlock()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-closed:
				s.mu.Lock()
				done := s.closed
				closed = s.changed
				s.mu.Unlock()
				if done {
					return
				}
			}
		}
	}
	if sent != nil && hook != nil {
		hook(*sent)
	}
	if fail != nil {
		s.writeFailure(w, *fail)
		return
	}
	s.mu.Lock()
	data := s.itemLocked(m.msg)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"code": 0, "msg": "success", "data": data})
}

// accepted is a send the fake accepted: a new message, or the one an
// earlier request with the same uuid produced.
type accepted struct {
	msg   *Message
	isNew bool
}

// acceptSendLocked validates a send or reply and builds its message (not
// yet stored). code != 0 is the error answer.
func (s *Server) acceptSendLocked(op, parentID, idType, receiveID, msgType, content, uuid string) (accepted, int, string) {
	now := s.clk.Now()
	if uuid != "" {
		if e, ok := s.uuids[uuid]; ok && now.Sub(e.at) < uuidWindow {
			return accepted{msg: s.messages[e.msgID]}, 0, ""
		}
	}
	var chat *chatState
	var parent *Message
	if op == "reply" {
		parent = s.messages[parentID]
		switch {
		case parent == nil:
			return accepted{}, CodeInvalidParam, "invalid message_id: the message to reply to does not exist"
		case parent.Deleted:
			return accepted{}, CodeMessageRecalled, "The message is recalled."
		}
		chat = s.chats[parent.ChatID]
	} else {
		switch idType {
		case "chat_id":
			if receiveID == "" {
				return accepted{}, CodeInvalidParam, "invalid receive_id"
			}
			if c, ok := s.chats[receiveID]; ok && c.typ == "p2p" {
				chat = c
			} else {
				chat = s.groupLocked(receiveID)
			}
		case "open_id":
			if receiveID == "" {
				return accepted{}, CodeInvalidParam, "invalid receive_id"
			}
			chat = s.p2pLocked(receiveID)
		case "":
			return accepted{}, CodeFieldValidation, "field validation failed: receive_id_type is required"
		default:
			return accepted{}, CodeFieldValidation, "field validation failed: the fake supports receive_id_type chat_id and open_id"
		}
	}
	switch {
	case chat.kicked:
		return accepted{}, CodeBotNotInGroup, "The bot can not be outside the group."
	case chat.muted:
		return accepted{}, CodeSendDenied, "Send Message Permission deny."
	}
	stored, mentions, code, msg := s.parseSendLocked(msgType, content)
	if code != 0 {
		return accepted{}, code, msg
	}
	m := &Message{ID: s.newIDLocked("om_"), ChatID: chat.id, ChatType: chat.typ, MsgType: msgType, Content: stored,
		Mentions: mentions, SenderID: s.cfg.AppID, FromBot: true, CreateTime: now}
	if parent != nil {
		m.ParentID = parent.ID
		m.RootID = cmp.Or(parent.RootID, parent.ID)
	}
	return accepted{msg: m, isNew: true}, 0, ""
}

// sentOfLocked describes a stored bot message as a SentMessage.
func (s *Server) sentOfLocked(op string, m *Message, uuid string) SentMessage {
	text, ids := s.renderLocked(m)
	return SentMessage{Op: op, MessageID: m.ID, ChatID: m.ChatID, Chat: s.chatOfLocked(m.ChatID), MsgType: m.MsgType,
		Content: m.Content, Text: text, Mentions: ids, ParentID: m.ParentID, UUID: uuid, Time: m.CreateTime}
}

// itemLocked is a message as the Open API shows it (send answers and the
// list API).
func (s *Server) itemLocked(m *Message) map[string]any {
	sender := map[string]any{"id": m.SenderID, "id_type": "open_id", "sender_type": "user", "tenant_key": s.cfg.TenantKey}
	if m.FromBot {
		sender["id_type"], sender["sender_type"] = "app_id", "app"
	}
	mentions := make([]map[string]any, 0, len(m.Mentions))
	for _, mm := range m.Mentions {
		mentions = append(mentions, map[string]any{"key": mm.Key, "id": mm.OpenID, "id_type": "open_id", "name": mm.Name, "tenant_key": s.cfg.TenantKey})
	}
	ms := strconv.FormatInt(m.CreateTime.UnixMilli(), 10)
	return map[string]any{
		"message_id": m.ID, "root_id": m.RootID, "parent_id": m.ParentID, "msg_type": m.MsgType,
		"create_time": ms, "update_time": ms, "deleted": m.Deleted, "updated": false, "chat_id": m.ChatID,
		"sender": sender, "body": map[string]any{"content": m.Content}, "mentions": mentions,
	}
}

// handleList serves GET /im/v1/messages: a chat's history, paged.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request, _ *Call) {
	q := r.URL.Query()
	if q.Get("container_id_type") != "chat" {
		apiError(w, CodeFieldValidation, "field validation failed: the fake supports container_id_type chat")
		return
	}
	size := 20
	if v := q.Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 50 {
			apiError(w, CodeFieldValidation, "field validation failed: page_size must be 1-50")
			return
		}
		size = n
	}
	off := 0
	if v := q.Get("page_token"); v != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(v, "pt_"))
		if err != nil || n < 0 || !strings.HasPrefix(v, "pt_") {
			apiError(w, CodeFieldValidation, "field validation failed: bad page_token")
			return
		}
		off = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chats[q.Get("container_id")]
	if c == nil {
		apiError(w, CodeInvalidParam, "invalid container_id")
		return
	}
	ids := slices.Clone(c.msgs)
	if q.Get("sort_type") == "ByCreateTimeDesc" {
		slices.Reverse(ids)
	}
	items := []map[string]any{}
	for i := off; i < len(ids) && len(items) < size; i++ {
		items = append(items, s.itemLocked(s.messages[ids[i]]))
	}
	next := off + len(items)
	data := map[string]any{"has_more": next < len(ids), "items": items}
	if next < len(ids) {
		data["page_token"] = "pt_" + strconv.Itoa(next)
	}
	writeJSON(w, http.StatusOK, map[string]any{"code": 0, "msg": "success", "data": data})
}

// AddResource stores the bytes of a resource of a message (an image_key
// or file_key it carries) for the resource API.
func (s *Server) AddResource(messageID, key string, data []byte, mime string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resources[messageID+"/"+key] = resource{data: slices.Clone(data), mime: mime}
}

// handleResource serves GET /im/v1/messages/{id}/resources/{key}.
func (s *Server) handleResource(w http.ResponseWriter, r *http.Request, _ *Call) {
	typ := r.URL.Query().Get("type")
	if typ != "image" && typ != "file" {
		apiError(w, CodeResourceParam, "Invalid request param.")
		return
	}
	s.mu.Lock()
	m := s.messages[r.PathValue("id")]
	res, ok := s.resources[r.PathValue("id")+"/"+r.PathValue("key")]
	s.mu.Unlock()
	switch {
	case m == nil:
		apiError(w, CodeResourceParam, "Invalid request param.")
		return
	case m.Deleted:
		apiError(w, 230110, "Action unavailable as the message has been deleted.")
		return
	case !ok:
		apiError(w, CodeFileNotInMsg, "File not in message.")
		return
	}
	w.Header().Set("Content-Type", cmp.Or(res.mime, "application/octet-stream"))
	w.Header().Set("Content-Length", strconv.Itoa(len(res.data)))
	_, _ = w.Write(res.data)
}
