package wecom

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/internal/netguard"
)

// ErrRunning is returned by Run while another Run of the same Channel is
// active.
var ErrRunning = errors.New("wecom: already running")

// bookkeepingTimeout bounds work done after Run's context ended (the last
// state report).
const bookkeepingTimeout = 5 * time.Second

// Channel is a WeCom adapter: a channel.Channel for a self-built app or an
// AI bot (see Mode). In ModeApp and ModeAIBot it is the http.Handler
// WeCom calls back; in ModeAIBotWS Run keeps the long connection. It
// implements channel.TextLimiter and channel.MediaFetcher.
//
// Create it with New. All methods are safe for concurrent use; Run may be
// active at most once at a time.
type Channel struct {
	cfg    Config
	clk    clock.Clock
	log    *slog.Logger
	crypt  *Crypter     // callback modes
	tokens *tokenSource // ModeApp
	media  *http.Client // AI-bot media links, through the public-address guard
	jitter func() float64

	running atomic.Bool
	// sink is set while Run is active: callbacks are delivered only then.
	sink atomic.Pointer[sinkRef]
	// offline is set while Run reports the channel offline; Send then
	// fails fast with channel.ErrOffline.
	offline atomic.Bool
	// botID is the AI bot's id once known (Config.BotID or a callback's
	// aibotid).
	botID atomic.Pointer[string]

	sent    *sentMemory     // idempotency of sends
	recent  *recentMessages // quote resolution (AI bot)
	keys    *mediaKeys      // AI-bot media links → aeskey
	streams *streamStore    // ModeAIBot
	ws      *wsState        // ModeAIBotWS
}

type sinkRef struct{ sink channel.Sink }

// Compile-time checks of the capabilities.
var (
	_ channel.Channel      = (*Channel)(nil)
	_ channel.TextLimiter  = (*Channel)(nil)
	_ channel.MediaFetcher = (*Channel)(nil)
	_ http.Handler         = (*Channel)(nil)
)

// New validates cfg and returns a Channel. It does no network I/O; with
// Config.StateDir set in ModeAIBot it creates the directory and loads the
// streams a previous process left open.
func New(cfg Config) (*Channel, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Channel{
		cfg:    cfg,
		clk:    cfg.Clock,
		log:    cfg.Logger.With("platform", Platform, "mode", string(cfg.Mode)),
		jitter: mrand.Float64,
		sent:   newSentMemory(),
		recent: newRecentMessages(),
		keys:   newMediaKeys(),
	}
	c.media = netguard.New(netguard.Config{Allow: cfg.MediaAllow, Timeout: 2 * cfg.CallTimeout}).Client()
	if cfg.BotID != "" {
		id := cfg.BotID
		c.botID.Store(&id)
	}
	switch cfg.Mode {
	case ModeApp:
		c.crypt, err = NewCrypter(cfg.Token, cfg.EncodingAESKey, cfg.CorpID)
		c.tokens = &tokenSource{c: c}
	case ModeAIBot:
		c.crypt, err = NewCrypter(cfg.Token, cfg.EncodingAESKey, "")
		if err == nil {
			c.streams, err = newStreamStore(c, cfg.StateDir)
		}
	case ModeAIBotWS:
		c.ws = newWSState()
	}
	if err != nil {
		return nil, fmt.Errorf("wecom: invalid config: %w", err)
	}
	if cfg.Random != nil && c.crypt != nil {
		c.crypt = c.crypt.withRandom(cfg.Random)
	}
	return c, nil
}

// Name returns "wecom".
func (c *Channel) Name() string { return Platform }

// Shareable reports true in ModeApp (channel.Shareable): WeCom posts each
// callback to whichever process its URL reaches, and an app sends with
// plain API calls (message/send, appchat/send), so several processes may
// run the channel at once. An AI bot is not shareable: on callbacks its
// answers are streams kept in the process that answered the callback
// (WeCom polls that one), and ModeAIBotWS is one long connection.
func (c *Channel) Shareable() bool { return c.cfg.Mode == ModeApp }

// Mode returns the configured mode.
func (c *Channel) Mode() Mode { return c.cfg.Mode }

// BotID returns the bot's id as events carry it: the AgentID in ModeApp,
// the AI bot's id in the AI-bot modes ("" until the first callback when
// Config.BotID is empty).
func (c *Channel) BotID() string {
	if c.cfg.Mode == ModeApp {
		return fmt.Sprint(c.cfg.AgentID)
	}
	if p := c.botID.Load(); p != nil {
		return *p
	}
	return ""
}

// TextLimit is 2048 UTF-8 bytes (MaxTextBytes), the text limit of
// message/send; the AI-bot modes use the same chunk size (a stream holds
// up to 20,480 bytes of them, MaxStreamBytes).
func (c *Channel) TextLimit() channel.TextLimit {
	return channel.TextLimit{Unit: channel.Bytes, Max: MaxTextBytes}
}

// Send delivers one outgoing message and returns the platform ids; see the
// package documentation for what each mode does with it. Errors are
// classified (channel.Classify): channel.ErrOffline while Run reports the
// channel offline or the long connection is down, a *channel.RejectedError
// for text over MaxTextBytes, an empty message, unsupported media or a
// chat the bot cannot reach, and the classified *APIError of the call.
// Outgoing.IdempotencyKey makes a repeated Send of the same chunk return
// the first receipt instead of sending it again.
func (c *Channel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return channel.Receipt{}, err
	}
	if c.offline.Load() {
		return channel.Receipt{}, fmt.Errorf("wecom: send: %w", channel.ErrOffline)
	}
	if !out.Chat.Kind.Valid() || out.Chat.ID == "" {
		return channel.Receipt{}, &channel.RejectedError{Code: "bad_chat", Reason: fmt.Sprintf("invalid chat %q", out.Chat)}
	}
	if out.Text == "" && len(out.Media) == 0 {
		return channel.Receipt{}, &channel.RejectedError{Code: "empty_message", Reason: "no text and no media"}
	}
	if !utf8.ValidString(out.Text) {
		return channel.Receipt{}, &channel.RejectedError{Code: "bad_text", Reason: "text is not valid UTF-8"}
	}
	if n := len(out.Text); n > MaxTextBytes {
		return channel.Receipt{}, &channel.RejectedError{Code: "text_too_long", Reason: fmt.Sprintf("%d bytes, the limit is %d", n, MaxTextBytes)}
	}
	if rc, ok := c.sent.done(out.IdempotencyKey); ok {
		c.log.Debug("wecom_send_repeated", "chat", out.Chat.String(), "effect", "returned the first receipt")
		return rc, nil
	}
	var rc channel.Receipt
	var err error
	switch c.cfg.Mode {
	case ModeApp:
		rc, err = c.sendApp(ctx, out)
	case ModeAIBot:
		rc, err = c.sendCallback(ctx, out)
	default:
		rc, err = c.sendWS(ctx, out)
	}
	if err == nil {
		c.sent.remember(out.IdempotencyKey, rc)
		if out.Text != "" {
			for _, id := range rc.MessageIDs[:min(1, len(rc.MessageIDs))] {
				c.recent.add(out.Chat, recentMessage{id: id, text: out.Text, fromBot: true})
			}
		}
	}
	return rc, err
}

// Run delivers callbacks (ModeApp, ModeAIBot) or keeps the long connection
// (ModeAIBotWS) until ctx ends; see the package documentation. It returns
// nil when ctx ends, an error wrapping ErrUnauthorized when WeCom refuses
// the credentials, ErrSuperseded when another connection took the AI bot's
// long connection over, and ErrRunning when another Run is active.
func (c *Channel) Run(ctx context.Context, sink channel.Sink) error {
	if sink == nil {
		return errors.New("wecom: Run with a nil sink")
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	r := &reporter{c: c, sink: sink}
	defer r.stop(ctx)
	var err error
	switch c.cfg.Mode {
	case ModeApp:
		err = c.runApp(ctx, r)
	case ModeAIBot:
		err = c.runCallback(ctx, r)
	default:
		err = c.runWS(ctx, r)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// reporter tells the sink about the channel's state, once per change.
type reporter struct {
	c    *Channel
	sink channel.Sink

	mu       sync.Mutex
	reported bool
	online   bool
	fails    int
}

func (r *reporter) report(ctx context.Context, up bool, reason string) {
	r.mu.Lock()
	if r.reported && r.online == up {
		r.mu.Unlock()
		return
	}
	r.reported, r.online = true, up
	r.mu.Unlock()
	r.c.offline.Store(!up)
	lvl := slog.LevelInfo
	if !up {
		lvl = slog.LevelWarn
	}
	r.c.log.Log(ctx, lvl, "wecom_state", "online", up, "reason", reason)
	r.sink.ReportState(ctx, channel.State{Platform: Platform, BotID: r.c.BotID(), Connected: up, Online: up, Reason: reason})
}

// succeeded resets the failure count and reports online.
func (r *reporter) succeeded(ctx context.Context, reason string) {
	r.mu.Lock()
	r.fails = 0
	r.mu.Unlock()
	r.report(ctx, true, reason)
}

// failed counts a failure and reports offline after OfflineAfter in a
// row; it returns the count (for the backoff).
func (r *reporter) failed(ctx context.Context, what string, err error) int {
	r.mu.Lock()
	r.fails++
	n := r.fails
	r.mu.Unlock()
	if n >= r.c.cfg.OfflineAfter {
		r.report(ctx, false, fmt.Sprintf("%s failed %d times: %v", what, n, err))
	}
	return n
}

// stop runs when Run returns: callbacks stop being delivered, Send stops
// failing fast, and the sink hears that the channel is down.
func (r *reporter) stop(ctx context.Context) {
	r.c.sink.Store(nil)
	r.c.offline.Store(false)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	r.c.log.Info("wecom_state", "online", false, "reason", "stopped")
	r.sink.ReportState(sctx, channel.State{Platform: Platform, BotID: r.c.BotID(), Reason: "stopped"})
}

// backoff is the n-th (1-based) retry delay: RetryMin doubling to
// RetryMax, times a jitter factor in [0.8, 1.2).
func (c *Channel) backoff(n int) time.Duration {
	d := c.cfg.RetryMin
	for i := 1; i < n && d < c.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.RetryMax)
	return time.Duration(float64(d) * (0.8 + 0.4*c.jitter()))
}

// sleep waits d on the clock; false when ctx ended first.
func (c *Channel) sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(c.clk, ctx.Done(), d)
}

// randomID returns n random bytes as hex.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runCallback is Run for ModeAIBot: nothing to connect to; the handler
// delivers while it is active, and the stream store is pruned.
func (c *Channel) runCallback(ctx context.Context, r *reporter) error {
	c.sink.Store(&sinkRef{sink: r.sink})
	r.succeeded(ctx, "callbacks accepted")
	for {
		if !c.sleep(ctx, time.Minute) {
			return nil
		}
		c.streams.prune(c.clk.Now())
		c.sent.prune(c.clk.Now())
	}
}
