package onebottest

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/clock"
)

// Defaults of Config.
const (
	DefaultSelfID            int64 = 10001000
	DefaultNickname                = "persona-bot"
	DefaultReconnectInterval       = 3 * time.Second
	DefaultHeartbeatInterval       = 15 * time.Second
	DefaultPostRetries             = 3
	DefaultPostRetryInterval       = 50 * time.Millisecond
)

// Retcodes the fake answers with besides 0 (ok), 1400 (bad request or a
// rejected send) and 1404 (unknown action).
const (
	// RetcodeFailed is the generic failure (go-cqhttp's 100): unknown
	// message or member, a send while offline or to a group the bot left.
	RetcodeFailed int64 = 100
)

// Config configures a Server. The zero value is usable.
type Config struct {
	// SelfID is the bot account's QQ number (default 10001000).
	SelfID int64
	// Nickname is the bot account's nickname (default "persona-bot").
	Nickname string
	// AccessToken, when set, is required from clients of the forward
	// WebSocket and the HTTP API (401 missing, 403 wrong) and sent as
	// "Authorization: Bearer" when the fake dials a reverse WebSocket.
	AccessToken string
	// Secret, when set, signs HTTP POST events (X-Signature).
	Secret string
	// Format is the format of the message field of pushed events and
	// history items (default onebot.FormatArray).
	Format onebot.MessageFormat
	// Dialect selects how the history actions read their parameters and
	// page (default onebot.DialectNapCat; see onebot.Dialect).
	// DialectGoCQHTTP also makes get_friend_msg_history unknown (1404).
	Dialect onebot.Dialect
	// ReportSelf pushes the bot's own sends as message_sent events, like
	// NapCat's reportSelfMessage.
	ReportSelf bool
	// ReconnectInterval is the reverse WebSocket client's wait between
	// connection attempts (default 3 s, the OneBot default).
	ReconnectInterval time.Duration
	// HeartbeatInterval is the interval announced in heartbeats (default
	// 15 s). The fake sends heartbeats only through Heartbeat and
	// SetOffline.
	HeartbeatInterval time.Duration
	// PostRetries is how many times an HTTP POST event answered 5xx (or
	// not answered) is retried (default 3; negative: never).
	PostRetries int
	// PostRetryInterval is the wait between those retries (default 50 ms).
	PostRetryInterval time.Duration
	// Clock stamps message times (nil = wall clock).
	Clock clock.Clock
	// HTTPClient posts events and dials reverse WebSockets (nil = a new
	// client).
	HTTPClient *http.Client
	// Logger receives the fake's log lines (nil = discard).
	Logger *slog.Logger
}

// Record is one message the fake platform stores: pushed by a user
// (EmitMessage) or sent by the bot.
type Record struct {
	// ID is the message id the fake assigned.
	ID int32
	// Seq is the per-chat sequence number (message_seq).
	Seq int64
	// Time is the send time.
	Time time.Time
	// GroupID is the group of a group message; 0 for a private message.
	GroupID int64
	// PeerID is the other party of a private message (the user for both
	// directions).
	PeerID int64
	// UserID is the sender (the bot's SelfID for Self records).
	UserID int64
	// Nickname is the sender's nickname.
	Nickname string
	// Card is the sender's group card.
	Card string
	// Role is the sender's group role.
	Role string
	// Level is the sender's member level as text ("" = not reported).
	Level string
	// Message is the content.
	Message onebot.Message
	// Self marks a message the bot sent.
	Self bool
	// Recalled marks a message deleted by delete_msg or Recall.
	Recalled bool
}

// Sent is one message the fake accepted from the bot.
type Sent struct {
	// Action is the API action used (send_group_msg, send_msg, …).
	Action string
	// GroupID is the target group (0 for a private send).
	GroupID int64
	// UserID is the target user of a private send.
	UserID int64
	// MessageID is the id the fake assigned.
	MessageID int32
	// Message is the message as parsed by the fake (the array format, or
	// a CQ-code string parsed with onebot.ParseCQ unless auto_escape).
	Message onebot.Message
	// Raw is the message parameter as a CQ-code string when the bot sent
	// the string format, else "".
	Raw string
	// Forward holds the nodes of a merged-forward send.
	Forward []Node
	// Time is when the fake accepted the send.
	Time time.Time
}

// Node is one node of a merged-forward message as the fake read it.
type Node struct {
	// ID is set for a node that references an existing message.
	ID string
	// Name is the node's display name (name or nickname).
	Name string
	// UserID is the node's sender (uin or user_id).
	UserID string
	// Content is the node's message.
	Content onebot.Message
}

// Call is one API request the fake received.
type Call struct {
	// Action is the action as requested (with any suffix).
	Action string
	// Params are the request parameters (JSON numbers as json.Number,
	// query and form values as strings).
	Params map[string]any
	// Via is "ws" or "http".
	Via string
}

// Member is a group member as the fake knows it.
type Member struct {
	// UserID is the member's QQ number.
	UserID int64
	// Nickname is the member's nickname.
	Nickname string
	// Card is the member's group card ("" = none).
	Card string
	// Role is owner, admin or member (default member).
	Role string
	// Level is the member level as text ("" = not reported).
	Level string
}

type group struct {
	name    string
	members map[int64]Member
}

type chatKey struct {
	group int64
	peer  int64
}

type failRule struct {
	prefix  string
	retcode int64
	msg     string
}

// Server is an in-process OneBot v11 implementation. It serves the forward
// WebSocket and the HTTP API (ServeHTTP), dials reverse WebSockets
// (DialReverse), posts events over HTTP (SetPostURL), keeps message history
// with per-chat seq numbers, and answers the actions an adapter needs. It
// implements chantest.PlatformDriver.
//
// It is safe for concurrent use.
type Server struct {
	cfg    Config
	log    *slog.Logger
	clk    clock.Clock
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	changed    chan struct{}
	conns      map[*conn]bool
	postURL    string
	down       bool
	offline    bool
	losePushes bool
	fails      []failRule
	stalls     map[string]bool
	groups     map[int64]*group
	kicked     map[int64]bool
	friends    map[int64]string
	seqs       map[chatKey]int64
	msgs       map[int32]*Record
	byChat     map[chatKey][]*Record
	n          int64
	nforward   int64
	sent       []Sent
	calls      []Call
	typing     []int64
	media      map[string]MediaFile
	requests   map[string]int64 // flag → requester of a pending friend request
	nrequest   int64
	answers    []FriendAnswer
	dials      int
	lastDial   int
	closed     bool
}

// New returns a Server configured by cfg. Call Close when done.
func New(cfg Config) *Server {
	cfg.SelfID = cmp.Or(cfg.SelfID, DefaultSelfID)
	cfg.Nickname = cmp.Or(cfg.Nickname, DefaultNickname)
	cfg.Format = cmp.Or(cfg.Format, onebot.FormatArray)
	cfg.Dialect = cmp.Or(cfg.Dialect, onebot.DialectNapCat)
	cfg.ReconnectInterval = cmp.Or(cfg.ReconnectInterval, DefaultReconnectInterval)
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	if cfg.PostRetries == 0 {
		cfg.PostRetries = DefaultPostRetries
	}
	cfg.PostRetryInterval = cmp.Or(cfg.PostRetryInterval, DefaultPostRetryInterval)
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "onebottest"),
		clk:      clock.OrReal(cfg.Clock),
		ctx:      ctx,
		cancel:   cancel,
		changed:  make(chan struct{}),
		conns:    map[*conn]bool{},
		stalls:   map[string]bool{},
		groups:   map[int64]*group{},
		kicked:   map[int64]bool{},
		friends:  map[int64]string{},
		seqs:     map[chatKey]int64{},
		msgs:     map[int32]*Record{},
		byChat:   map[chatKey][]*Record{},
		media:    map[string]MediaFile{},
		requests: map[string]int64{},
		n:        999,
	}
}

// SelfID returns the bot account's QQ number.
func (s *Server) SelfID() int64 { return s.cfg.SelfID }

// BotID returns the bot account's QQ number as text.
func (s *Server) BotID() string { return strconv.FormatInt(s.cfg.SelfID, 10) }

// Close drops every connection, stops the reverse WebSocket clients and
// waits for the fake's goroutines.
func (s *Server) Close() {
	s.cancel()
	s.mu.Lock()
	s.closed = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.ws.CloseNow()
	}
	s.wg.Wait()
}

// track registers a goroutine with s.wg unless the server is closed.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// notifyLocked wakes the waiters. s.mu must be held.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor blocks until cond (called with s.mu held) holds or ctx ends.
func (s *Server) waitFor(ctx context.Context, what string, cond func() bool) error {
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
			return fmt.Errorf("onebottest: waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

// nextIDLocked assigns the next message id; every fifth is negative, as
// NapCat's can be.
func (s *Server) nextIDLocked() int32 {
	s.n++
	if s.n%5 == 0 {
		return int32(-s.n)
	}
	return int32(s.n)
}

func (s *Server) groupLocked(id int64) *group {
	g := s.groups[id]
	if g == nil {
		g = &group{name: "group " + strconv.FormatInt(id, 10), members: map[int64]Member{}}
		s.groups[id] = g
	}
	return g
}

// storeLocked assigns id, seq and time and keeps the record.
func (s *Server) storeLocked(r *Record) {
	r.ID = s.nextIDLocked()
	k := chatKey{group: r.GroupID, peer: r.PeerID}
	if r.GroupID != 0 {
		k.peer = 0
		s.groupLocked(r.GroupID)
	}
	s.seqs[k]++
	r.Seq = 100 + s.seqs[k]
	if r.Time.IsZero() {
		r.Time = s.clk.Now()
	}
	s.msgs[r.ID] = r
	s.byChat[k] = append(s.byChat[k], r)
	s.notifyLocked()
}

// AddGroup adds a group to the bot's group list (groups are also added on
// first use).
func (s *Server) AddGroup(id int64, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groupLocked(id).name = name
	delete(s.kicked, id)
}

// AddFriend adds a friend to the bot's friend list.
func (s *Server) AddFriend(id int64, nickname string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.friends[id] = nickname
}

// SetMember sets what get_group_member_info answers for a member.
func (s *Server) SetMember(groupID int64, m Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groupLocked(groupID).members[m.UserID] = m
}

// Kick removes the bot from a group: the group leaves get_group_list and
// sends to it fail with RetcodeFailed. No notice is pushed.
func (s *Server) Kick(groupID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kicked[groupID] = true
}

// SetOffline takes the account offline (get_status and heartbeats say
// online=false, sends fail with RetcodeFailed) or back online, and pushes a
// heartbeat with the new status.
func (s *Server) SetOffline(ctx context.Context, offline bool) error {
	s.mu.Lock()
	s.offline = offline
	s.notifyLocked()
	s.mu.Unlock()
	return s.Heartbeat(ctx)
}

// SetDown takes the whole implementation down (true): every connection is
// dropped, WebSocket handshakes and HTTP API calls get 503, reverse clients
// stop dialing and nothing is pushed or posted. Messages emitted meanwhile
// are stored only (for backfill). SetDown(false) brings it back.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.notifyLocked()
	s.mu.Unlock()
	if down {
		s.Drop()
	}
}

// SetLosePushes makes the fake store emitted messages without pushing them
// (true), as if the pushes were lost, or push them again (false).
func (s *Server) SetLosePushes(lose bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.losePushes = lose
}

// Drop closes every WebSocket connection abruptly. Reverse clients
// reconnect after ReconnectInterval; forward clients redial on their own.
func (s *Server) Drop() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.ws.CloseNow()
	}
}

// FailNext makes the next call of every action starting with prefix (for
// example "send_" or "get_group_list") fail with retcode. Rules queue up
// and each is used once.
func (s *Server) FailNext(prefix string, retcode int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails = append(s.fails, failRule{prefix: prefix, retcode: retcode, msg: "failure injected by onebottest"})
}

// RejectNextSend makes the next send_* action fail with retcode 1400.
func (s *Server) RejectNextSend(context.Context) error {
	s.FailNext("send_", 1400)
	return nil
}

// Stall makes the fake never answer the action (on) or answer it again
// (off). Over HTTP a stalled call waits until the client gives up.
func (s *Server) Stall(action string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.stalls[action] = true
	} else {
		delete(s.stalls, action)
	}
	s.notifyLocked()
}

// Sent returns what the bot sent, in order.
func (s *Server) Sent() []Sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

// WaitSent waits until the bot sent at least n messages and returns them.
func (s *Server) WaitSent(ctx context.Context, n int) ([]Sent, error) {
	err := s.waitFor(ctx, fmt.Sprintf("%d sends", n), func() bool { return len(s.sent) >= n })
	return s.Sent(), err
}

// Calls returns the API requests received, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// WaitCall waits for the first received call of action and returns it.
func (s *Server) WaitCall(ctx context.Context, action string) (Call, error) {
	var got Call
	err := s.waitFor(ctx, "a call of "+action, func() bool {
		for _, c := range s.calls {
			if c.Action == action {
				got = c
				return true
			}
		}
		return false
	})
	return got, err
}

// WaitCalls waits until the fake received at least n calls of action and
// returns them, in order.
func (s *Server) WaitCalls(ctx context.Context, action string, n int) ([]Call, error) {
	var got []Call
	err := s.waitFor(ctx, fmt.Sprintf("%d calls of %s", n, action), func() bool {
		got = got[:0]
		for _, c := range s.calls {
			if c.Action == action {
				got = append(got, c)
			}
		}
		return len(got) >= n
	})
	return slices.Clone(got), err
}

// Typing returns the user ids set_input_status was called for.
func (s *Server) Typing() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.typing)
}

// History returns the stored messages of a group (groupID != 0) or of the
// private chat with peer, oldest first, including recalled ones.
func (s *Server) History(groupID, peer int64) []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := chatKey{group: groupID, peer: peer}
	if groupID != 0 {
		k.peer = 0
	}
	out := make([]Record, 0, len(s.byChat[k]))
	for _, r := range s.byChat[k] {
		out = append(out, *r)
	}
	return out
}

// Message returns a stored message by id.
func (s *Server) Message(id int32) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.msgs[id]
	if !ok {
		return Record{}, false
	}
	return *r, true
}

// Conns returns the number of open WebSocket connections.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// WaitConnected waits until at least one WebSocket connection that
// receives events is open.
func (s *Server) WaitConnected(ctx context.Context) error {
	return s.waitFor(ctx, "a WebSocket connection", func() bool {
		for c := range s.conns {
			if c.events {
				return true
			}
		}
		return false
	})
}

// WaitDisconnected waits until no WebSocket connection is open.
func (s *Server) WaitDisconnected(ctx context.Context) error {
	return s.waitFor(ctx, "no WebSocket connection", func() bool { return len(s.conns) == 0 })
}

// Dials returns how many reverse WebSocket connection attempts were made
// and the HTTP status of the last failed one (0 if none failed or the
// failure had no status).
func (s *Server) Dials() (attempts, lastStatus int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dials, s.lastDial
}

// conn is one WebSocket connection of the fake (either direction).
type conn struct {
	ws     *websocket.Conn
	events bool // receives events
	api    bool // answers API requests
}

func (s *Server) addConn(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns[c] = true
	s.notifyLocked()
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	s.notifyLocked()
}
