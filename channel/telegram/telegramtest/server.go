package telegramtest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/clock"
)

// Defaults of Config.
const (
	// DefaultToken is the fake bot's token; the bot id is its numeric
	// prefix, as with real tokens.
	DefaultToken = "123456789:TEST-persona_fake_token"
	// DefaultBotUsername is the fake bot's username.
	DefaultBotUsername = "persona_test_bot"
	// DefaultBotName is the fake bot's first name.
	DefaultBotName = "Persona Test Bot"
	// DefaultFirstUpdateID is the first update_id handed out.
	DefaultFirstUpdateID = 10000
	// DefaultWebhookTimeout bounds one webhook POST.
	DefaultWebhookTimeout = 10 * time.Second
	// DefaultMaxDownloadBytes is the Bot API's limit on files a bot can
	// download (20 MB): getFile refuses larger files.
	DefaultMaxDownloadBytes = 20 << 20
)

// Bot API limits the fake enforces (UTF-16 code units).
const (
	MaxTextUTF16    = 4096
	MaxCaptionUTF16 = 1024
)

// OfflineMode says how the fake behaves while offline.
type OfflineMode int

// The offline modes.
const (
	// Offline5xx answers every request with 502 Bad Gateway and an HTML
	// body, like the Bot API's front end when the backend is down.
	Offline5xx OfflineMode = iota
	// OfflineRefuse closes every connection without an answer.
	OfflineRefuse
)

// ErrUpdateFiltered is returned by the Push methods for an update type
// outside the allowed_updates of the last getUpdates or setWebhook call;
// like Telegram, the fake does not create such updates.
var ErrUpdateFiltered = errors.New("telegramtest: update type not in allowed_updates")

// Config configures a Server. The zero value is usable.
type Config struct {
	// Token is the bot token (default DefaultToken). Its numeric prefix
	// is the bot id (123456789 when it has none).
	Token string
	// BotUsername and BotName describe the bot in getMe (defaults
	// DefaultBotUsername and DefaultBotName).
	BotUsername string
	BotName     string
	// FirstUpdateID is the first update_id (default DefaultFirstUpdateID).
	FirstUpdateID int64
	// Clock stamps message dates and times the long-poll hold (nil = wall
	// clock). With a clock.Fake a held getUpdates returns only on an
	// update, Wake, Advance past its timeout or cancellation.
	Clock clock.Clock
	// OfflineMode is what SetOffline(true) does (default Offline5xx).
	OfflineMode OfflineMode
	// WebhookTimeout bounds one webhook POST (default 10 s).
	WebhookTimeout time.Duration
	// MaxDownloadBytes is the largest file getFile hands out (default
	// DefaultMaxDownloadBytes); larger ones get 400 "Bad Request: file is
	// too big".
	MaxDownloadBytes int64
}

// Call is one Bot API request the fake received.
type Call struct {
	// Method is the canonical method name ("sendMessage").
	Method string
	// Params are the request parameters as JSON values, whichever
	// encoding (query, form, multipart, JSON) the client used.
	Params map[string]json.RawMessage
	At     time.Time
	// Offline is set for a request that arrived while the server was
	// offline (and failed); its Params are not parsed.
	Offline bool
}

// SentMessage is a message the bot sent successfully.
type SentMessage struct {
	// Method is the send method (sendMessage, sendPhoto, sendVoice, ...).
	Method    string
	Chat      Chat
	MessageID int64
	// Text is the text, or the caption of a media message.
	Text     string
	Entities []MessageEntity
	// ReplyTo is reply_parameters.message_id (or reply_to_message_id); 0
	// when none.
	ReplyTo int64
	// Media is the file_id or URL of a media message ("upload:<name>" for
	// a multipart upload).
	Media string
	Date  time.Time
}

// ChatAction is one sendChatAction call.
type ChatAction struct {
	ChatID int64
	Action string
	At     time.Time
}

// Delivery is one webhook POST attempt.
type Delivery struct {
	UpdateID int64
	// Status is the HTTP status of the answer (0 when the request failed).
	Status int
	Err    string
}

// Failure is an error answer injected with FailNext or FailNextSend.
type Failure struct {
	// Code is error_code and the HTTP status (e.g. 400, 403, 429, 502).
	Code int
	// Description defaults to a typical Bot API text for Code.
	Description string
	// RetryAfter (seconds) and MigrateToChatID go to "parameters".
	RetryAfter      int
	MigrateToChatID int64
	// Body, when set, is written verbatim instead of the JSON error (for
	// malformed answers).
	Body string
	// Drop closes the connection without an answer (a network failure).
	Drop bool
}

// Server is an in-process fake of the Telegram Bot API on a loopback
// httptest server. Point the adapter's APIBase at URL and its Token at
// Token. It keeps chats and their messages, an update queue with
// getUpdates offset semantics, an optional webhook, and records every
// call; failures and outages are scripted. It implements
// chantest.PlatformDriver.
//
// A Server is safe for concurrent use.
type Server struct {
	cfg   Config
	token string
	bot   User
	clk   clock.Clock
	hs    *httptest.Server
	hc    *http.Client

	deliverMu sync.Mutex // serialises webhook deliveries

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every change
	wake       chan struct{} // closed and replaced by Wake
	closed     bool
	offline    bool
	offMode    OfflineMode
	nextUpdate int64
	queue      []queued // unconfirmed (polling) or undelivered (webhook) updates
	confirmed  int64    // highest offset a getUpdates confirmed
	poll       *pollWaiter
	allowed    []string // nil: never set (all types)
	hookURL    string
	hookSecret string
	chats      map[int64]*chatState
	users      map[int64]User
	nextFile   int
	files      map[string]*storedFile // file_id → content
	downloads  []string               // file paths requested from /file/
	failures   []pendingFailure
	calls      []Call
	sent       []SentMessage
	actions    []ChatAction
	deliveries []Delivery
}

type queued struct {
	id  int64
	typ string
	raw []byte
}

type pollWaiter struct{ term chan struct{} }

type chatState struct {
	chat    Chat
	next    int64
	msgs    map[int64]Message
	members map[int64]string // user id → status
	kicked  bool
}

type pendingFailure struct {
	method string // canonical name, or anySend
	f      Failure
}

const anySend = "*send"

// New starts a fake Bot API server on a loopback port. Call Close when
// done (e.g. t.Cleanup(srv.Close)).
func New(cfg Config) *Server {
	cfg.Token = cmp.Or(cfg.Token, DefaultToken)
	cfg.BotUsername = cmp.Or(cfg.BotUsername, DefaultBotUsername)
	cfg.BotName = cmp.Or(cfg.BotName, DefaultBotName)
	cfg.FirstUpdateID = cmp.Or(cfg.FirstUpdateID, DefaultFirstUpdateID)
	cfg.WebhookTimeout = cmp.Or(cfg.WebhookTimeout, DefaultWebhookTimeout)
	cfg.MaxDownloadBytes = cmp.Or(cfg.MaxDownloadBytes, DefaultMaxDownloadBytes)
	botID, err := strconv.ParseInt(strings.SplitN(cfg.Token, ":", 2)[0], 10, 64)
	if err != nil || botID <= 0 {
		botID = 123456789
	}
	s := &Server{
		cfg:        cfg,
		token:      cfg.Token,
		bot:        User{ID: botID, IsBot: true, FirstName: cfg.BotName, Username: cfg.BotUsername},
		clk:        clock.OrReal(cfg.Clock),
		hc:         &http.Client{Timeout: cfg.WebhookTimeout},
		changed:    make(chan struct{}),
		wake:       make(chan struct{}),
		offMode:    cfg.OfflineMode,
		nextUpdate: cfg.FirstUpdateID,
		chats:      make(map[int64]*chatState),
		users:      make(map[int64]User),
		files:      make(map[string]*storedFile),
	}
	s.hs = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close wakes every held request and shuts the server down.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.notifyLocked()
	s.mu.Unlock()
	s.hs.CloseClientConnections()
	s.hs.Close()
}

// URL is the API base to configure in the adapter (telegram.Config.APIBase).
func (s *Server) URL() string { return s.hs.URL }

// Token is the bot token the server accepts.
func (s *Server) Token() string { return s.token }

// Bot is the bot user getMe returns.
func (s *Server) Bot() User { return s.bot }

// BotID is the bot's user id as a string (the adapter's Event.BotID).
func (s *Server) BotID() string { return strconv.FormatInt(s.bot.ID, 10) }

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Wake makes a held getUpdates return now (with no updates if there are
// none), as if its timeout had expired.
func (s *Server) Wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.wake)
	s.wake = make(chan struct{})
}

// SetOfflineMode changes what going offline does.
func (s *Server) SetOfflineMode(m OfflineMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offMode = m
}

// SetOffline takes the whole API offline (every request fails as set by
// the OfflineMode, held getUpdates calls included, and webhook deliveries
// pause) or brings it back. It implements chantest.PlatformDriver.
func (s *Server) SetOffline(_ context.Context, offline bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offline = offline
	s.notifyLocked()
	return nil
}

// FailNext makes the next call of method (any case) fail with f.
// Failures queue up in order.
func (s *Server) FailNext(method string, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, pendingFailure{method: canonical(method), f: f})
}

// FailNextSend makes the next call of any send method (sendMessage,
// sendPhoto, sendVoice, ...; not sendChatAction) fail with f. The failed
// message is not kept.
func (s *Server) FailNextSend(f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, pendingFailure{method: anySend, f: f})
}

// RateLimitNextSend makes the next send fail with 429 and
// parameters.retry_after = seconds.
func (s *Server) RateLimitNextSend(seconds int) {
	s.FailNextSend(Failure{Code: http.StatusTooManyRequests, RetryAfter: seconds})
}

// RejectNextSend makes the next send fail with 400 "Bad Request: chat not
// found" (definitive). It implements chantest.PlatformDriver.
func (s *Server) RejectNextSend(context.Context) error {
	s.FailNextSend(Failure{Code: http.StatusBadRequest, Description: "Bad Request: chat not found"})
	return nil
}

// KickBot removes the bot from a chat: later sends and chat actions there
// fail with 403 (kicked from a group, blocked by a user).
func (s *Server) KickBot(chatID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chatLocked(chatID).kicked = true
}

// AddChat registers a chat (its type decides how Received reports it).
// Chats are also registered by Push, and guessed for unknown ids the bot
// sends to (negative ids are groups: supergroups when they start with
// -100; positive ids are private chats).
func (s *Server) AddChat(c Chat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registerChatLocked(c)
}

// AddMember makes u a member of a chat with a getChatMember status
// ("creator", "administrator", "member", "restricted", "left",
// "kicked").
func (s *Server) AddMember(chatID int64, u User, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = u
	s.chatLocked(chatID).members[u.ID] = status
}

// SetWebhook registers a webhook as setWebhook would (empty url removes
// it). Pending updates are delivered on the next push or FlushWebhook.
func (s *Server) SetWebhook(url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hookURL, s.hookSecret = url, secret
	s.notifyLocked()
}

// Webhook returns the registered webhook URL and secret ("" when polling).
func (s *Server) Webhook() (url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hookURL, s.hookSecret
}

// Pending is the number of queued updates: not yet confirmed by a
// getUpdates offset, or not yet delivered to the webhook.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Offset is the highest offset a getUpdates call has confirmed (every
// update below it is gone).
func (s *Server) Offset() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed
}

// AllowedUpdates is the allowed_updates of the last getUpdates or
// setWebhook that set it (nil when never set).
func (s *Server) AllowedUpdates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.allowed)
}

// Calls returns every request received, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// CallCount is the number of requests of method (any case).
func (s *Server) CallCount(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.countLocked(canonical(method))
}

func (s *Server) countLocked(method string) int {
	n := 0
	for _, c := range s.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// WaitCalls blocks until at least n requests of method arrived.
func (s *Server) WaitCalls(ctx context.Context, method string, n int) error {
	m := canonical(method)
	return s.wait(ctx, func() bool { return s.countLocked(m) >= n },
		func() string { return fmt.Sprintf("%d of %d %s calls", s.countLocked(m), n, m) })
}

// Sent returns the messages the bot sent successfully, in order.
func (s *Server) Sent() []SentMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// WaitSent blocks until at least n messages were sent and returns them.
func (s *Server) WaitSent(ctx context.Context, n int) ([]SentMessage, error) {
	err := s.wait(ctx, func() bool { return len(s.sent) >= n },
		func() string { return fmt.Sprintf("%d of %d sends", len(s.sent), n) })
	return s.Sent(), err
}

// ChatActions returns the sendChatAction calls that succeeded.
func (s *Server) ChatActions() []ChatAction {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.actions)
}

// Deliveries returns every webhook POST attempt.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

// Message returns a stored message of a chat (user's or bot's).
func (s *Server) Message(chatID, messageID int64) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.chats[chatID]
	if !ok {
		return Message{}, false
	}
	m, ok := c.msgs[messageID]
	return m, ok
}

func (s *Server) wait(ctx context.Context, cond func() bool, state func() string) error {
	for {
		s.mu.Lock()
		if cond() {
			s.mu.Unlock()
			return nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			st := state()
			s.mu.Unlock()
			return fmt.Errorf("telegramtest: waiting (%s): %w", st, context.Cause(ctx))
		}
	}
}

// chatLocked returns the chat with id, creating it with a guessed type.
func (s *Server) chatLocked(id int64) *chatState {
	if c, ok := s.chats[id]; ok {
		return c
	}
	typ := ChatPrivate
	switch {
	case id < 0 && strings.HasPrefix(strconv.FormatInt(id, 10), "-100"):
		typ = ChatSupergroup
	case id < 0:
		typ = ChatGroup
	}
	return s.registerChatLocked(Chat{ID: id, Type: typ})
}

func (s *Server) registerChatLocked(c Chat) *chatState {
	cs, ok := s.chats[c.ID]
	if !ok {
		cs = &chatState{msgs: make(map[int64]Message), members: make(map[int64]string)}
		s.chats[c.ID] = cs
	}
	if c.Type == "" {
		c.Type = cs.chat.Type
	}
	cs.chat = c
	return cs
}

// canonical maps a method name to its canonical spelling (methods are
// case-insensitive).
func canonical(method string) string {
	if method == anySend {
		return method
	}
	for _, m := range knownMethods {
		if strings.EqualFold(m, method) {
			return m
		}
	}
	return method
}

var knownMethods = []string{
	"getMe", "getUpdates", "sendMessage", "sendPhoto", "sendVoice", "sendAudio",
	"sendVideo", "sendDocument", "sendAnimation", "sendChatAction", "deleteMessage",
	"getChatMember", "setWebhook", "deleteWebhook", "getWebhookInfo", "getFile",
}

// mediaField is the file parameter of each media send method.
var mediaField = map[string]string{
	"sendPhoto": "photo", "sendVoice": "voice", "sendAudio": "audio",
	"sendVideo": "video", "sendDocument": "document", "sendAnimation": "animation",
}

func isSend(method string) bool {
	_, media := mediaField[method]
	return method == "sendMessage" || media
}

// serve is the HTTP entry point: /bot<token>/<method>, and file downloads
// at /file/bot<token>/<file_path>.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/file/bot"); ok {
		s.serveFile(w, rest)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
	token, method, ok2 := strings.Cut(rest, "/")
	if s.isOffline() {
		s.mu.Lock()
		s.calls = append(s.calls, Call{Method: canonical(method), At: s.clk.Now(), Offline: true})
		s.notifyLocked()
		s.mu.Unlock()
		s.serveOffline(w)
		return
	}
	if !ok || !ok2 || method == "" {
		writeError(w, Failure{Code: http.StatusNotFound, Description: "Not Found"})
		return
	}
	if token != s.token {
		writeError(w, Failure{Code: http.StatusUnauthorized, Description: "Unauthorized"})
		return
	}
	method = canonical(method)
	p, err := parseParams(r)
	if err != nil {
		s.record(method, nil)
		writeError(w, Failure{Code: http.StatusBadRequest, Description: "Bad Request: " + err.Error()})
		return
	}
	s.record(method, p)
	if f, ok := s.takeFailure(method); ok {
		writeError(w, f)
		return
	}
	switch method {
	case "getMe":
		writeOK(w, struct {
			User
			CanJoinGroups           bool `json:"can_join_groups"`
			CanReadAllGroupMessages bool `json:"can_read_all_group_messages"`
			SupportsInlineQueries   bool `json:"supports_inline_queries"`
		}{User: s.bot, CanJoinGroups: true})
	case "getUpdates":
		s.getUpdates(w, r, p)
	case "sendMessage":
		s.sendMessage(w, p)
	case "sendPhoto", "sendVoice", "sendAudio", "sendVideo", "sendDocument", "sendAnimation":
		s.sendMedia(w, method, p)
	case "sendChatAction":
		s.sendChatAction(w, p)
	case "deleteMessage":
		s.deleteMessage(w, p)
	case "getChatMember":
		s.getChatMember(w, p)
	case "getFile":
		s.getFile(w, p)
	case "setWebhook":
		s.setWebhook(w, p)
	case "deleteWebhook":
		s.deleteWebhook(w, p)
	case "getWebhookInfo":
		s.mu.Lock()
		info := map[string]any{"url": s.hookURL, "has_custom_certificate": false, "pending_update_count": len(s.queue)}
		s.mu.Unlock()
		writeOK(w, info)
	default:
		writeError(w, Failure{Code: http.StatusNotFound, Description: "Not Found"})
	}
}

func (s *Server) isOffline() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offline
}

func (s *Server) serveOffline(w http.ResponseWriter) {
	s.mu.Lock()
	mode := s.offMode
	s.mu.Unlock()
	if mode == OfflineRefuse && dropConn(w) {
		return
	}
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = io.WriteString(w, "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n</body>\r\n</html>\r\n")
}

// dropConn closes the request's connection without an answer.
func dropConn(w http.ResponseWriter) bool {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return true
		}
	}
	return false
}

func (s *Server) record(method string, p params) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{Method: method, Params: p, At: s.clk.Now()})
	s.notifyLocked()
}

func (s *Server) takeFailure(method string) (Failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, pf := range s.failures {
		if pf.method == method || (pf.method == anySend && isSend(method)) {
			s.failures = slices.Delete(s.failures, i, i+1)
			return pf.f, true
		}
	}
	return Failure{}, false
}

// writeOK writes {"ok":true,"result":...}.
func writeOK(w http.ResponseWriter, result any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": result})
}

// writeError writes a Bot API error answer with the HTTP status = Code.
func writeError(w http.ResponseWriter, f Failure) {
	if f.Drop && dropConn(w) {
		return
	}
	code := cmp.Or(f.Code, http.StatusInternalServerError)
	if f.Body != "" {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, f.Body)
		return
	}
	desc := f.Description
	if desc == "" {
		switch code {
		case http.StatusBadRequest:
			desc = "Bad Request: chat not found"
		case http.StatusUnauthorized:
			desc = "Unauthorized"
		case http.StatusForbidden:
			desc = "Forbidden: bot was blocked by the user"
		case http.StatusConflict:
			desc = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
		case http.StatusTooManyRequests:
			desc = "Too Many Requests: retry after " + strconv.Itoa(f.RetryAfter)
		default:
			desc = http.StatusText(code)
		}
	}
	body := map[string]any{"ok": false, "error_code": code, "description": desc}
	if f.RetryAfter > 0 || f.MigrateToChatID != 0 {
		body["parameters"] = ResponseParameters{RetryAfter: f.RetryAfter, MigrateToChatID: f.MigrateToChatID}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func badRequest(w http.ResponseWriter, desc string) {
	writeError(w, Failure{Code: http.StatusBadRequest, Description: "Bad Request: " + desc})
}

// params are request parameters as JSON values.
type params map[string]json.RawMessage

const maxRequestBytes = 50 << 20

// parseParams merges the query string with a JSON, urlencoded or
// multipart body. Form values that are valid JSON numbers, objects,
// arrays or booleans are kept as such (the Bot API accepts JSON-serialised
// objects in form fields); other values become JSON strings.
func parseParams(r *http.Request) (params, error) {
	p := params{}
	for k, vs := range r.URL.Query() {
		p[k] = formValue(vs[0])
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes))
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(body)) == 0 {
			break
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, fmt.Errorf("can't parse JSON object: %w", err)
		}
		for k, v := range m {
			p[k] = v
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		for k, vs := range r.PostForm {
			p[k] = formValue(vs[0])
		}
	case "multipart/form-data":
		if err := r.ParseMultipartForm(maxRequestBytes); err != nil {
			return nil, err
		}
		for k, vs := range r.MultipartForm.Value {
			p[k] = formValue(vs[0])
		}
		for k, fs := range r.MultipartForm.File {
			p[k], _ = json.Marshal("upload:" + fs[0].Filename)
		}
	}
	return p, nil
}

func formValue(v string) json.RawMessage {
	t := strings.TrimSpace(v)
	if t != "" && json.Valid([]byte(t)) && !strings.HasPrefix(t, `"`) && t != "null" {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(v)
	return b
}

// str returns a parameter as text (a JSON string's content, or the raw
// JSON of a number).
func (p params) str(k string) (string, bool) {
	raw, ok := p[k]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	return string(raw), true
}

// int returns an integer parameter (number or numeric string).
func (p params) int(k string) (int64, bool, error) {
	s, ok := p.str(k)
	if !ok || s == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, true, fmt.Errorf("%s is not an integer", k)
	}
	return n, true, nil
}

func (p params) bool(k string) bool {
	s, _ := p.str(k)
	return s == "true" || s == "1"
}

// decode decodes an object or array parameter, also when it was sent as a
// JSON-serialised string.
func (p params) decode(k string, v any) (bool, error) {
	raw, ok := p[k]
	if !ok {
		return false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		raw = json.RawMessage(s)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("can't parse %s: %w", k, err)
	}
	return true, nil
}
