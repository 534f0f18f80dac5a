package onebot

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Errors of the adapter. Send errors are additionally classified with the
// channel package's sentinels (see Send).
var (
	// ErrTimeout: an API call got no response within its deadline (10 s,
	// history 15 s). The outcome of the call is unknown; it is a transient
	// error.
	ErrTimeout = errors.New("onebot: API call timed out")
	// ErrConnectionLost: the WebSocket closed while a call waited for its
	// response. The outcome is unknown; it is a transient error.
	ErrConnectionLost = errors.New("onebot: connection lost before the response")
	// ErrRunning is returned by Run while another Run of the same Channel
	// is active.
	ErrRunning = errors.New("onebot: Run is already active")
	// ErrNoSink is returned by Run when it is given a nil sink.
	ErrNoSink = errors.New("onebot: Run needs a sink")
	// ErrListenerUsed is returned by a second Run of a Channel configured
	// with Config.Listener: the first Run closed it. Use Addr to run again.
	ErrListenerUsed = errors.New("onebot: Config.Listener was closed by an earlier Run")
)

// Channel is a OneBot v11 adapter for one bot account: a channel.Channel
// that also implements the optional capabilities HistoryFetcher,
// ChatLister, Typer, Recaller, ForwardSender, MemberLookup, TextLimiter,
// AccountRisk, MediaFetcher and RequestResponder, and http.Handler (the
// reverse-WebSocket endpoint or the HTTP POST event receiver, depending on
// the mode).
//
// Create it with New. It is safe for concurrent use; Run is called once at a
// time.
type Channel struct {
	cfg Config
	log *slog.Logger
	clk clock.Clock

	echoSeq atomic.Uint64
	quotes  quoteCache

	mu           sync.Mutex
	running      bool
	runCtx       context.Context
	sink         channel.Sink
	events       chan channel.Event // WS events for the delivery goroutine
	wg           sync.WaitGroup     // connection goroutines of the current Run
	selfID       string
	nickname     string
	conn         *wsConn         // the current WebSocket (WS modes)
	reserved     bool            // reverse WS: a handshake holds the slot
	up           bool            // transport ready (bootstrap done; HTTP: heartbeats on time)
	online       bool            // account status: online and good
	last         *channel.State  // the last state queued for the sink
	stq          []channel.State // states waiting for the reporter goroutine
	stWake       chan struct{}   // wakes the reporter; closed at the end of Run
	hbStop       chan struct{}   // stops the current heartbeat watchdog
	hbGen        uint64
	httpDown     chan struct{} // HTTP mode: wakes the bootstrap loop after a transport failure
	groups       groupCache
	muted        map[string]time.Time // group id → mute end (zero: until lifted)
	noTyping     bool                 // set_input_status is unsupported
	bootstrap    bool                 // HTTP mode: the first bootstrap succeeded
	listenerUsed bool                 // Config.Listener was served (and closed) by a Run
}

// Compile-time checks of the capabilities.
var (
	_ channel.Channel          = (*Channel)(nil)
	_ channel.HistoryFetcher   = (*Channel)(nil)
	_ channel.ChatLister       = (*Channel)(nil)
	_ channel.Typer            = (*Channel)(nil)
	_ channel.Recaller         = (*Channel)(nil)
	_ channel.ForwardSender    = (*Channel)(nil)
	_ channel.MemberLookup     = (*Channel)(nil)
	_ channel.TextLimiter      = (*Channel)(nil)
	_ channel.AccountRisk      = (*Channel)(nil)
	_ channel.MediaFetcher     = (*Channel)(nil)
	_ channel.RequestResponder = (*Channel)(nil)
	_ http.Handler             = (*Channel)(nil)
)

// New validates cfg, fills in its defaults and returns a Channel. It does
// no I/O: Run connects or listens.
func New(cfg Config) (*Channel, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Channel{
		cfg:    cfg,
		log:    cfg.Logger.With("platform", cfg.Platform, "mode", string(cfg.Mode)),
		clk:    cfg.Clock,
		selfID: cfg.SelfID,
		online: true,
		muted:  map[string]time.Time{},
	}
	c.quotes.init(2048)
	return c, nil
}

// Name returns the platform id ("onebot" unless configured).
func (c *Channel) Name() string { return c.cfg.Platform }

// Mode returns the configured transport.
func (c *Channel) Mode() Mode { return c.cfg.Mode }

// BotID returns the bot's QQ number once known (configured, or learned from
// the connection), else "".
func (c *Channel) BotID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.selfID
}

// State returns the current health as it would be reported to the sink.
func (c *Channel) State() channel.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateLocked("")
}

// TextLimit declares TextLimitRunes (900) runes per outgoing message.
func (c *Channel) TextLimit() channel.TextLimit {
	return channel.TextLimit{Unit: channel.Runes, Max: TextLimitRunes}
}

// AccountRisk reports true: QQ bans accounts for content and frequency.
func (c *Channel) AccountRisk() bool { return true }

// Run connects (ModeForwardWS), or listens on Addr/Listener (ModeReverseWS,
// ModeHTTP; without either it only accepts requests through ServeHTTP), and
// delivers events to sink until ctx ends. Connection and account state
// changes are reported with sink.ReportState. Run returns nil once ctx has
// ended and every connection is closed; ErrRunning if another Run is active,
// ErrNoSink, ErrListenerUsed, or a listen error.
func (c *Channel) Run(ctx context.Context, sink channel.Sink) error {
	if sink == nil {
		return ErrNoSink
	}
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrRunning
	}
	ln := c.cfg.Listener
	if ln != nil {
		if c.listenerUsed {
			c.mu.Unlock()
			return ErrListenerUsed
		}
		c.listenerUsed = true
	}
	if ln == nil && c.cfg.Addr != "" {
		var err error
		ln, err = net.Listen("tcp", c.cfg.Addr)
		if err != nil {
			c.mu.Unlock()
			return err
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.running = true
	c.runCtx = runCtx
	c.sink = sink
	c.events = make(chan channel.Event, 256)
	c.last = nil
	c.stq = nil
	c.stWake = make(chan struct{}, 1)
	c.httpDown = make(chan struct{}, 1)
	events, wake := c.events, c.stWake
	c.mu.Unlock()

	reported := make(chan struct{})
	go func() {
		defer close(reported)
		c.reportLoop(runCtx, sink, wake)
	}()

	var srv *http.Server
	if ln != nil {
		srv = &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return runCtx }}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				c.log.Error("listener_failed", "addr", ln.Addr().String(), "err", err)
			}
		}()
		c.log.Info("listening", "addr", ln.Addr().String())
	}

	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		c.deliverLoop(runCtx, sink, events)
	}()

	switch c.cfg.Mode {
	case ModeForwardWS:
		c.runForward(runCtx)
	case ModeHTTP:
		c.runHTTP(runCtx)
	default:
		<-runCtx.Done()
	}

	// Shutdown: refuse new work, close the listener and the connections.
	c.mu.Lock()
	c.running = false
	conn := c.conn
	c.mu.Unlock()
	if srv != nil {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = srv.Shutdown(sctx)
		scancel()
		_ = srv.Close()
	}
	if conn != nil {
		conn.close("shutting down")
	}
	c.wg.Wait()
	<-delivered

	c.mu.Lock()
	c.up = false
	c.conn = nil
	c.stopWatchdogLocked()
	st := c.stateLocked("stopped")
	c.stq = append(c.stq, st) // always the last report
	c.sink = nil              // no more reports
	close(c.stWake)
	c.stWake = nil
	c.mu.Unlock()
	<-reported
	c.log.Info("stopped")
	return nil
}

// ServeHTTP is the endpoint the implementation talks to: in ModeReverseWS
// the WebSocket handshake (Universal client, Bearer token, X-Self-ID), in
// ModeHTTP the HTTP POST event receiver (X-Signature). It answers 503 while
// Run is not active and 404 in ModeForwardWS. It accepts any path; mount it
// under a path of your own with http.ServeMux if needed.
func (c *Channel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch c.cfg.Mode {
	case ModeReverseWS:
		c.serveReverse(w, r)
	case ModeHTTP:
		c.serveEvents(w, r)
	default:
		http.Error(w, "onebot: this adapter dials the implementation (forward-ws); it serves nothing", http.StatusNotFound)
	}
}

// stateLocked builds the state to report. c.mu must be held.
func (c *Channel) stateLocked(reason string) channel.State {
	return channel.State{
		Platform:  c.cfg.Platform,
		BotID:     c.selfID,
		Connected: c.up,
		Online:    c.up && c.online,
		Reason:    reason,
	}
}

// report queues the current state for the sink if it differs from the
// last one queued. The reporter goroutine delivers the queue in order, so
// no adapter goroutine (a WebSocket reader, a call) ever waits for
// sink.ReportState, and no transition is coalesced away.
func (c *Channel) report(reason string) {
	c.mu.Lock()
	st := c.stateLocked(reason)
	wake := c.stWake
	if c.sink == nil || wake == nil || (c.last != nil && c.last.Connected == st.Connected && c.last.Online == st.Online && c.last.BotID == st.BotID) {
		c.mu.Unlock()
		return
	}
	c.last = &st
	c.stq = append(c.stq, st)
	c.mu.Unlock()
	c.log.Info("state", "connected", st.Connected, "online", st.Online, "bot_id", st.BotID, "reason", reason)
	select {
	case wake <- struct{}{}:
	default: // the reporter is awake already and will see the queue
	}
}

// reportLoop delivers queued states to the sink until wake is closed, then
// delivers what is left.
func (c *Channel) reportLoop(ctx context.Context, sink channel.Sink, wake <-chan struct{}) {
	flush := func() {
		for {
			c.mu.Lock()
			if len(c.stq) == 0 {
				c.mu.Unlock()
				return
			}
			st := c.stq[0]
			c.stq = c.stq[1:]
			c.mu.Unlock()
			// Reports made while Run shuts down must still arrive.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			sink.ReportState(rctx, st)
			cancel()
		}
	}
	for range wake {
		flush()
	}
	flush()
}

// effectivelyOnline reports whether sends may go out: the transport is up
// and the account online and good.
func (c *Channel) effectivelyOnline() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up && c.online
}

// learnSelfID records the bot's account id if it was unknown. It reports
// false when id conflicts with the known one.
func (c *Channel) learnSelfID(id string) bool {
	if id == "" {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.selfID == "" {
		c.selfID = id
		return true
	}
	return c.selfID == id
}

func (c *Channel) self() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.selfID
}

// deliverLoop hands WebSocket events to the sink in arrival order. An event
// the sink refuses is retried with backoff (BackoffMin doubling to
// BackoffMax) until it is accepted or Run ends: a WebSocket push cannot be
// NACKed to the implementation, so the adapter redelivers it itself.
func (c *Channel) deliverLoop(ctx context.Context, sink channel.Sink, events <-chan channel.Event) {
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case ev := <-events:
					c.log.Warn("event_unacked_at_shutdown", "key", ev.Key())
				default:
					return
				}
			}
		case ev := <-events:
			c.deliver(ctx, sink, ev)
		}
	}
}

func (c *Channel) deliver(ctx context.Context, sink channel.Sink, ev channel.Event) {
	for attempt := 1; ; attempt++ {
		err := sink.HandleEvent(ctx, ev)
		if err == nil {
			return
		}
		if errors.Is(err, channel.ErrInvalidEvent) {
			c.log.Error("event_rejected", "key", ev.Key(), "err", err)
			return
		}
		if ctx.Err() != nil {
			c.log.Warn("event_unacked_at_shutdown", "key", ev.Key(), "err", err)
			return
		}
		if !c.pause(ctx, c.backoff(attempt), slog.LevelWarn, "event_nacked", "key", ev.Key(), "attempt", attempt, "err", err) {
			c.log.Warn("event_unacked_at_shutdown", "key", ev.Key())
			return
		}
	}
}

// enqueue hands a WebSocket event to the delivery goroutine; it blocks while
// the queue is full (back-pressure on the reader) and gives up when ctx ends.
func (c *Channel) enqueue(ctx context.Context, ev channel.Event) {
	c.mu.Lock()
	events := c.events
	c.mu.Unlock()
	if events == nil {
		return
	}
	select {
	case events <- ev:
	case <-ctx.Done():
		c.log.Warn("event_unacked_at_shutdown", "key", ev.Key())
	}
}

// quoteCache remembers recent messages (seen or sent) so that a quote of
// one can be resolved without an API call.
type quoteCache struct {
	mu    sync.Mutex
	max   int
	m     map[string]channel.Quoted
	order []string
}

func (q *quoteCache) init(n int) {
	q.max = n
	q.m = make(map[string]channel.Quoted, n)
}

func quoteKey(chat channel.Chat, id string) string { return chat.String() + "/" + id }

func (q *quoteCache) put(chat channel.Chat, qt channel.Quoted) {
	if qt.MessageID == "" {
		return
	}
	k := quoteKey(chat, qt.MessageID)
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.m[k]; !ok {
		q.order = append(q.order, k)
	}
	qt.Segments = cloneSegments(qt.Segments)
	q.m[k] = qt
	for len(q.order) > q.max {
		delete(q.m, q.order[0])
		q.order = q.order[1:]
	}
}

func (q *quoteCache) get(chat channel.Chat, id string) (channel.Quoted, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	qt, ok := q.m[quoteKey(chat, id)]
	qt.Segments = cloneSegments(qt.Segments)
	return qt, ok
}

// cloneSegments deep-copies segments and their media, so an event handed
// to the sink (whose media the pipeline fills in) shares nothing with the
// quote cache.
func cloneSegments(in []channel.Segment) []channel.Segment {
	if in == nil {
		return nil
	}
	out := slices.Clone(in)
	for i := range out {
		if out[i].Media != nil {
			m := *out[i].Media
			out[i].Media = &m
		}
	}
	return out
}

// groupCache is the bot's group list as last fetched.
type groupCache struct {
	fetched time.Time
	ids     map[string]bool
	left    map[string]bool // groups the bot was removed from since (kick_me)
}
