package wecomtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Mode is the WeCom product the fake plays.
type Mode string

// The modes, named like the adapter's.
const (
	// ModeApp: a self-built app; messages are posted as encrypted XML
	// callbacks, the API serves gettoken, message/send, appchat/send and
	// media/get.
	ModeApp Mode = "app"
	// ModeAIBot: an AI bot with a callback URL; messages are posted as
	// encrypted JSON callbacks, stream answers are polled, response_url
	// posts are accepted.
	ModeAIBot Mode = "aibot"
	// ModeAIBotWS: an AI bot with the long connection at WSURL.
	ModeAIBotWS Mode = "aibot-ws"
)

// Defaults of Config: the credentials of the fake corp, app and bot.
const (
	DefaultCorpID         = "wwf4ce0000c0ffee01"
	DefaultAgentID        = 1000002
	DefaultSecret         = "app-secret-Zq9wP1xR7tY3uV5bN8mK2jH4"
	DefaultToken          = "cbToken7Xq2"
	DefaultEncodingAESKey = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR"
	DefaultBotID          = "aibAAAAbbbbCCCC0123"
	DefaultBotName        = "Mira"
	DefaultBotSecret      = "bot-secret-Ks82jQ0vLm3nB7xC"
	// DefaultTokenLifetime is gettoken's expires_in.
	DefaultTokenLifetime = 2 * time.Hour
	// DefaultPollInterval is how often a stream is polled (real time).
	DefaultPollInterval = 20 * time.Millisecond
	// StreamWindow is how long WeCom polls a stream after the message.
	StreamWindow = 6 * time.Minute
	// MediaLinkLifetime is how long an AI-bot media link is served.
	MediaLinkLifetime = 5 * time.Minute
	// ResponseURLLifetime is how long a response_url may be used (once).
	ResponseURLLifetime = time.Hour
)

// Error codes the fake answers with. The AI bot's codes for a req_id it
// does not know and a finished stream are the reported ones; the others
// are WeCom's documented codes.
const (
	CodeBusy           = -1
	CodeInvalidSecret  = 40001
	CodeInvalidMediaID = 40007
	CodeInvalidCorpID  = 40013
	CodeInvalidToken   = 40014
	CodeTokenExpired   = 42001
	CodeInvalidAgent   = 40056
	CodeInvalidParam   = 40058
	CodeFreqLimit      = 45009
	CodeContentTooLong = 45002
	CodeNoRecipient    = 81013
	CodeInvalidReqID   = 846605
	CodeStreamExpired  = 846608
	// CodeResponseURLUsed is the fake's answer to a second use of a
	// response_url (WeCom does not document its code).
	CodeResponseURLUsed = 846600
)

// Limits the fake enforces (UTF-8 bytes).
const (
	MaxTextBytes   = 2048
	MaxStreamBytes = 20480
)

// Config configures a Server. The zero value is a self-built app with the
// default credentials.
type Config struct {
	Mode Mode
	// CorpID, AgentID and Secret are the app's (ModeApp).
	CorpID  string
	AgentID int64
	Secret  string
	// Token and EncodingAESKey are the callback's (ModeApp, ModeAIBot).
	Token          string
	EncodingAESKey string
	// BotID, BotName and BotSecret are the AI bot's.
	BotID     string
	BotName   string
	BotSecret string
	// TokenLifetime is gettoken's expires_in (default 2 h).
	TokenLifetime time.Duration
	// CallbackURL is where callbacks are posted (ModeApp, ModeAIBot); it
	// can be set later with SetCallbackURL.
	CallbackURL string
	// Retries is how often a callback answered with a non-2xx status (or
	// not at all) is posted again (default 3, as WeCom does).
	Retries int
	// PollInterval paces the automatic stream polls (default 20 ms, real
	// time). ManualPoll turns them off: tests call PollStream.
	PollInterval time.Duration
	ManualPoll   bool
	// Clock stamps messages and decides expiries (nil = wall clock).
	Clock clock.Clock
}

// Failure is an answer injected with FailNext.
type Failure struct {
	// ErrCode is the errcode to answer with (0: none).
	ErrCode int
	// Status is the HTTP status (default 200 with an errcode, 502 without).
	Status int
	// Drop records the request as WeCom would (a send is delivered) and
	// then closes the connection without an answer.
	Drop bool
}

// Sent is a message the bot delivered, as the platform shows it.
type Sent struct {
	// Op is how it came: "message/send", "appchat/send", "aibot/response",
	// "stream" (a polled answer, ModeAIBot), "aibot_respond_msg" or
	// "aibot_send_msg".
	Op   string
	Chat channel.Chat
	// Text is the text, the markdown, or the stream's latest content.
	Text string
	// MsgType is text, markdown, stream, image, voice, video or file.
	MsgType string
	// MediaID is the media_id of a media message.
	MediaID string
	// ReplyTo is the message an AI-bot answer belongs to.
	ReplyTo string
	// MessageID is the platform's id: msgid of message/send, the stream
	// id of a stream, the req_id of aibot_send_msg.
	MessageID string
	// Finished: a stream ended (finish=true).
	Finished bool
	At       time.Time
}

// Server is an in-process fake of WeCom for one corp app or AI bot (see
// the package documentation). It is safe for concurrent use.
type Server struct {
	cfg  Config
	clk  clock.Clock
	kit  *cipherKit
	hs   *httptest.Server
	hc   *http.Client
	done chan struct{}
	wg   sync.WaitGroup

	mu          sync.Mutex
	changed     chan struct{}
	closed      bool
	offline     bool
	callbackURL string
	tokens      map[string]time.Time // access token → expiry
	tokenCount  int
	failures    map[string][]pendingFailure
	rejectNext  bool
	kicked      map[string]bool
	messages    map[string]*message // msgid → what was said (for quotes)
	chats       map[channel.Chat]bool
	sent        []*Sent
	streams     map[string]*streamState // stream id → (AI bot)
	responseURL map[string]*responseCode
	media       map[string]mediaFile
	deliveries  []Delivery
	duplicates  int
	nextMsg     uint64
	ws          *wsServer
}

type message struct {
	id     string
	chat   channel.Chat
	from   string
	text   string
	fromMe bool
}

type mediaFile struct {
	data    []byte
	mime    string
	created time.Time
}

type responseCode struct {
	msgID   string
	chat    channel.Chat
	created time.Time
	used    bool
}

// Delivery is one callback POST attempt.
type Delivery struct {
	MsgID string
	// Status is the HTTP status of the answer (0: no answer).
	Status int
	Err    string
}

// New starts a Server on a loopback httptest server.
func New(cfg Config) *Server {
	if cfg.Mode == "" {
		cfg.Mode = ModeApp
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&cfg.CorpID, DefaultCorpID)
	def(&cfg.Secret, DefaultSecret)
	def(&cfg.Token, DefaultToken)
	def(&cfg.EncodingAESKey, DefaultEncodingAESKey)
	def(&cfg.BotID, DefaultBotID)
	def(&cfg.BotName, DefaultBotName)
	def(&cfg.BotSecret, DefaultBotSecret)
	if cfg.AgentID == 0 {
		cfg.AgentID = DefaultAgentID
	}
	if cfg.TokenLifetime <= 0 {
		cfg.TokenLifetime = DefaultTokenLifetime
	}
	if cfg.Retries == 0 {
		cfg.Retries = 3
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	kit, err := newCipherKit(cfg.Token, cfg.EncodingAESKey)
	if err != nil {
		panic(err)
	}
	s := &Server{
		cfg:         cfg,
		clk:         clock.OrReal(cfg.Clock),
		kit:         kit,
		done:        make(chan struct{}),
		changed:     make(chan struct{}),
		callbackURL: cfg.CallbackURL,
		tokens:      map[string]time.Time{},
		failures:    map[string][]pendingFailure{},
		kicked:      map[string]bool{},
		messages:    map[string]*message{},
		chats:       map[channel.Chat]bool{},
		streams:     map[string]*streamState{},
		responseURL: map[string]*responseCode{},
		media:       map[string]mediaFile{},
		hc:          &http.Client{Timeout: 10 * time.Second},
	}
	s.ws = newWSServer(s)
	mux := http.NewServeMux()
	mux.HandleFunc("/cgi-bin/gettoken", s.handleGetToken)
	mux.HandleFunc("/cgi-bin/message/send", s.handleMessageSend)
	mux.HandleFunc("/cgi-bin/appchat/send", s.handleAppChatSend)
	mux.HandleFunc("/cgi-bin/media/get", s.handleMediaGet)
	mux.HandleFunc("/cgi-bin/aibot/response", s.handleAIBotResponse)
	mux.HandleFunc("/aibot-media/", s.handleAIBotMedia)
	mux.HandleFunc("/ws", s.ws.handle)
	s.hs = httptest.NewServer(s.offlineGate(mux))
	return s
}

// Close stops the server and its pollers.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.ws.closeAll(true)
	s.hs.CloseClientConnections()
	s.hs.Close()
	s.wg.Wait()
}

// URL is the API base (Config.APIBase of the adapter).
func (s *Server) URL() string { return s.hs.URL }

// WSURL is the long-connection endpoint (Config.WSURL of the adapter).
func (s *Server) WSURL() string { return "ws" + strings.TrimPrefix(s.hs.URL, "http") + "/ws" }

// Mode returns the mode the fake plays.
func (s *Server) Mode() Mode { return s.cfg.Mode }

// CorpID, AgentID, Secret, Token, EncodingAESKey, BotID, BotName and
// BotSecret return the fake's credentials.
func (s *Server) CorpID() string { return s.cfg.CorpID }

// AgentID is the app's AgentId.
func (s *Server) AgentID() int64 { return s.cfg.AgentID }

// Secret is the app's secret.
func (s *Server) Secret() string { return s.cfg.Secret }

// Token is the callback token.
func (s *Server) Token() string { return s.cfg.Token }

// EncodingAESKey is the callback key.
func (s *Server) EncodingAESKey() string { return s.cfg.EncodingAESKey }

// BotName is the AI bot's display name.
func (s *Server) BotName() string { return s.cfg.BotName }

// BotSecret is the AI bot's long-connection secret.
func (s *Server) BotSecret() string { return s.cfg.BotSecret }

// BotID is the id events of the bot carry: the AgentID in ModeApp, the
// AI bot's id otherwise.
func (s *Server) BotID() string {
	if s.cfg.Mode == ModeApp {
		return fmt.Sprint(s.cfg.AgentID)
	}
	return s.cfg.BotID
}

// SetCallbackURL sets where callbacks are posted.
func (s *Server) SetCallbackURL(u string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callbackURL = u
}

// FailNext makes the next request of op ("gettoken", "message/send",
// "appchat/send", "media/get", "aibot/response", "aibot_subscribe",
// "aibot_respond_msg", "aibot_send_msg", "ping", "poll") fail as f says.
// Failures of one op are used in order.
func (s *Server) FailNext(op string, f Failure) { s.FailAfter(op, 0, f) }

// FailAfter lets skip requests of op through and makes the one after them
// fail as f says.
func (s *Server) FailAfter(op string, skip int, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[op] = append(s.failures[op], pendingFailure{skip: skip, f: f})
}

type pendingFailure struct {
	skip int
	f    Failure
}

// takeFailureLocked pops the next failure of op once its skips are used.
func (s *Server) takeFailureLocked(op string) (Failure, bool) {
	list := s.failures[op]
	if len(list) == 0 {
		return Failure{}, false
	}
	if list[0].skip > 0 {
		list[0].skip--
		return Failure{}, false
	}
	s.failures[op] = list[1:]
	return list[0].f, true
}

// KickUser takes a user out of the app's visible range: message/send
// names them in invaliduser (81013 when they are the only recipient).
func (s *Server) KickUser(userID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kicked[userID] = true
}

// ExpireTokens makes every access token issued so far expired (42001).
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	past := s.clk.Now().Add(-time.Second)
	for t := range s.tokens {
		s.tokens[t] = past
	}
}

// TokensIssued counts gettoken answers with a token.
func (s *Server) TokensIssued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenCount
}

// IssuedTokens lists the access tokens gettoken handed out.
func (s *Server) IssuedTokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.tokens))
	for t := range s.tokens {
		out = append(out, t)
	}
	return out
}

// Duplicates counts message/send requests dropped by the duplicate check.
func (s *Server) Duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.duplicates
}

// Sent lists what the bot delivered, in order (a stream once, with its
// latest content).
func (s *Server) Sent() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sent, len(s.sent))
	for i, x := range s.sent {
		out[i] = *x
	}
	return out
}

// WaitSent waits until at least n messages were delivered and returns
// them.
func (s *Server) WaitSent(ctx context.Context, n int) ([]Sent, error) {
	var out []Sent
	err := s.wait(ctx, func() bool {
		if len(s.sent) < n {
			return false
		}
		out = make([]Sent, len(s.sent))
		for i, x := range s.sent {
			out[i] = *x
		}
		return true
	})
	return out, err
}

// Deliveries lists the callback POST attempts.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// wait blocks until cond (called with s.mu held) holds, ctx ends or the
// server closes.
func (s *Server) wait(ctx context.Context, cond func() bool) error {
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
			return ctx.Err()
		case <-s.done:
			return errors.New("wecomtest: server closed")
		}
	}
}

// changedLocked wakes the waiters.
func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// SetOffline takes the platform down (API answers 502, the long
// connection is closed and refused, callbacks are not posted) or brings
// it back.
func (s *Server) SetOffline(_ context.Context, offline bool) error {
	s.mu.Lock()
	s.offline = offline
	s.changedLocked()
	s.mu.Unlock()
	if offline {
		s.ws.closeAll(false)
	}
	return nil
}

func (s *Server) isOffline() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offline
}

// offlineGate answers everything with 502 while offline.
func (s *Server) offlineGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.isOffline() {
			http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// RejectNextSend makes the next send of the bot fail with a definitive
// errcode (40058, invalid parameter).
func (s *Server) RejectNextSend(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectNext = true
	return nil
}

// takeRejectLocked reports (once) whether a send must be rejected.
func (s *Server) takeRejectLocked() bool {
	r := s.rejectNext
	s.rejectNext = false
	return r
}

// newMsgIDLocked returns a fresh message id: a 64-bit number for app
// messages, a base64 id (without "/" and "+") for AI-bot messages.
func (s *Server) newMsgIDLocked() string {
	s.nextMsg++
	if s.cfg.Mode == ModeApp {
		return fmt.Sprint(4561255354251345000 + s.nextMsg)
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	id := base64.StdEncoding.EncodeToString(b)
	id = strings.NewReplacer("/", "x", "+", "y").Replace(id)
	return "CAIQ" + id
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// recordSentLocked appends a delivered message.
func (s *Server) recordSentLocked(x *Sent) {
	x.At = s.clk.Now()
	s.sent = append(s.sent, x)
	if x.Text != "" && x.MessageID != "" {
		s.messages[x.MessageID] = &message{id: x.MessageID, chat: x.Chat, text: x.Text, fromMe: true}
	}
	s.changedLocked()
}
