package qqbot

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// ErrRunning is returned by Run while another Run of the same Channel is
// active.
var ErrRunning = errors.New("qqbot: already running")

// Channel is the QQ official bot adapter: a channel.Channel that receives
// events from the WebSocket gateway (ModeGateway) or as signed webhook
// callbacks (ModeWebhook, the Channel is the http.Handler) and sends
// passive replies through the OpenAPI. It implements channel.TextLimiter
// and channel.MediaFetcher.
//
// Create it with New. All methods are safe for concurrent use; Run may be
// active at most once at a time.
type Channel struct {
	cfg    Config
	log    *slog.Logger
	clk    clock.Clock
	tokens *tokenSource
	key    ed25519.PrivateKey
	pub    ed25519.PublicKey
	file   *stateFile // nil: the state lives in memory only
	jitter func() float64

	running atomic.Bool
	// offline is set while Run reports the channel offline; Send then
	// fails fast with channel.ErrOffline.
	offline atomic.Bool
	// active is set while a webhook-mode Run is active: the handler
	// delivers only then.
	active atomic.Pointer[channel.Sink]

	whoMu  sync.Mutex
	userID string // the bot's guild user id ("" until known)

	stMu sync.Mutex // guards st and the state file
	st   state
}

// Compile-time checks of the capabilities.
var (
	_ channel.Channel      = (*Channel)(nil)
	_ channel.TextLimiter  = (*Channel)(nil)
	_ channel.MediaFetcher = (*Channel)(nil)
)

// New validates cfg and returns a Channel. It does no network I/O; with
// Config.StateDir set it creates the directory and reads the saved state
// (a corrupt state file is logged and replaced).
func New(cfg Config) (*Channel, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	key := signingKey(cfg.Secret)
	c := &Channel{
		cfg: cfg,
		log: cfg.Logger.With("platform", Platform),
		clk: cfg.Clock,
		tokens: &tokenSource{url: cfg.TokenURL, appID: cfg.AppID, secret: cfg.Secret, client: cfg.HTTPClient,
			clk: cfg.Clock, before: cfg.TokenRefreshBefore, limit: cfg.CallTimeout},
		key:    key,
		pub:    key.Public().(ed25519.PublicKey),
		jitter: rand.Float64,
	}
	if cfg.StateDir != "" {
		f, err := newStateFile(cfg.StateDir, cfg.AppID)
		if err != nil {
			return nil, fmt.Errorf("qqbot: invalid config: StateDir: %w", err)
		}
		c.file = f
		st, err := f.load()
		if err != nil {
			c.log.Error("qq_state_unreadable", "path", f.path(), "err", err,
				"effect", "starting with a new gateway session and an empty reply ledger")
			st = state{}
		}
		c.st = st
	}
	return c, nil
}

// Name returns "qq".
func (c *Channel) Name() string { return Platform }

// BotID returns the AppID, which is Event.BotID.
func (c *Channel) BotID() string { return c.cfg.AppID }

// UserID returns the bot's user id in guilds, known once the gateway's
// READY (or, in webhook mode, GET /users/@me) told it ("" before).
func (c *Channel) UserID() string {
	c.whoMu.Lock()
	defer c.whoMu.Unlock()
	return c.userID
}

func (c *Channel) setUserID(id string) {
	if !validID(id) {
		return
	}
	c.whoMu.Lock()
	c.userID = id
	c.whoMu.Unlock()
}

func (c *Channel) identity() identity {
	return identity{BotID: c.cfg.AppID, UserID: c.UserID()}
}

// TextLimit is 2000 UTF-8 bytes (MaxTextBytes).
func (c *Channel) TextLimit() channel.TextLimit {
	return channel.TextLimit{Unit: channel.Bytes, Max: MaxTextBytes}
}

// FetchMedia hands over the link of an attachment: the platform's media
// are plain CDN links, so MediaContent.URL is m.URL (fetched by the
// caller through its public-address guard) with the declared MIME type
// and size. A reference without an http(s) URL is channel.ErrMediaUnavailable;
// a declared size above req.MaxBytes is channel.ErrMediaTooLarge.
func (c *Channel) FetchMedia(ctx context.Context, _ channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	if err := ctx.Err(); err != nil {
		return channel.MediaContent{}, err
	}
	u, ok := attachmentURL(m.URL)
	if !ok || u != m.URL {
		return channel.MediaContent{}, fmt.Errorf("qqbot: fetch media: no http(s) URL: %w", channel.ErrMediaUnavailable)
	}
	if req.MaxBytes > 0 && m.Size > req.MaxBytes {
		return channel.MediaContent{}, fmt.Errorf("qqbot: fetch media: %d bytes, at most %d wanted: %w", m.Size, req.MaxBytes, channel.ErrMediaTooLarge)
	}
	return channel.MediaContent{URL: m.URL, MIME: m.MIME, Size: max(m.Size, 0)}, nil
}

// window is the passive reply window of a route.
func (c *Channel) window(r route) time.Duration {
	if r == routeC2C {
		return c.cfg.PrivateReplyWindow
	}
	return c.cfg.GroupReplyWindow
}

// saveLocked writes the state when it is kept in a file; c.stMu is held.
// A failure is logged: the event or chunk it records has gone through
// already.
func (c *Channel) saveLocked(what string) {
	c.st.prune(c.clk.Now(), c.window)
	if c.file == nil {
		return
	}
	if err := c.file.save(&c.st); err != nil {
		c.log.Error("qq_state_save_failed", "what", what, "err", err,
			"effect", "a restart may identify anew and re-read events (the idempotent enqueue drops them)")
	}
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
