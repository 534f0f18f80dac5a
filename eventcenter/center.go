package eventcenter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outbound"
)

// Defaults of Config.
const (
	// DefaultPoll is how often an open live feed looks for new records
	// when nothing wakes it.
	DefaultPoll = 250 * time.Millisecond
	// DefaultHeartbeat is how often a live feed sends a comment line, so
	// that proxies and the browser keep an idle stream open.
	DefaultHeartbeat = 15 * time.Second
	// DefaultSessionTTL is how long a session cookie from POST
	// /api/session stays valid.
	DefaultSessionTTL = time.Hour
	// DefaultTitle is the page's title.
	DefaultTitle = "persona event center"
	// MinTokenLen is the shortest Config.Token accepted.
	MinTokenLen = 16
	// Mask replaces every secret in the texts shown.
	Mask = "***"
)

// SlotReader reads a turn's delivery-ledger rows; outbound.Ledger (and so
// the store) has it.
type SlotReader interface {
	// Slots returns the turn's ledger rows ordered by slot number.
	Slots(ctx context.Context, turnID string) ([]outbound.Slot, error)
}

// FeedHeader is implemented by a record reader that can tell the cursor of
// its newest completed record at once (the store does). Without it a live
// feed opened without a cursor pages through the whole feed once to find
// where it ends.
type FeedHeader interface {
	// FeedHead returns the CompletedAfter cursor of the newest completed
	// record ("" when none is).
	FeedHead(ctx context.Context) (string, error)
}

// Config configures New.
type Config struct {
	// Records is the event log the center reads (required).
	Records inbound.RecordReader
	// Ledger, when set, adds each chunk's delivery slot (state, platform
	// message ids, times) to a message's trail.
	Ledger SlotReader
	// Token is the operator's bearer token, at least MinTokenLen
	// characters (required). It is compared in constant time and never
	// shown.
	Token string
	// Secrets are strings (API keys, passwords) replaced by Mask wherever
	// they occur in the texts shown: message text, reasons, errors and the
	// trail's notes. Token is masked too.
	Secrets []string
	// Poll is how often an open live feed reads new records (0 =
	// DefaultPoll). Wake makes them read at once.
	Poll time.Duration
	// Heartbeat is the live feed's keep-alive period (0 =
	// DefaultHeartbeat).
	Heartbeat time.Duration
	// SessionTTL is the lifetime of a session cookie (0 =
	// DefaultSessionTTL).
	SessionTTL time.Duration
	// Clock drives polls, heartbeats, session expiry and the summary's
	// default range (nil = clock.Real).
	Clock clock.Clock
	// Logger receives read failures (nil = discard).
	Logger *slog.Logger
	// Title is the page's title (""= DefaultTitle).
	Title string
}

// Center is the event center: an http.Handler serving the page, the JSON
// API and the live feed. Create it with New; it is safe for concurrent use.
type Center struct {
	records   inbound.RecordReader
	ledger    SlotReader
	tokenSum  [sha256.Size]byte
	mask      *strings.Replacer
	poll      time.Duration
	heartbeat time.Duration
	ttl       time.Duration
	clk       clock.Clock
	log       *slog.Logger
	page      []byte
	mux       *http.ServeMux
	sessions  sessions

	wakeMu sync.Mutex
	wake   chan struct{}

	closeOnce sync.Once
	done      chan struct{}
	feeds     atomic.Int64
}

// New returns a Center for cfg, or an error naming what is missing.
func New(cfg Config) (*Center, error) {
	switch {
	case cfg.Records == nil:
		return nil, errors.New("eventcenter: Config.Records is required")
	case len(cfg.Token) < MinTokenLen:
		return nil, fmt.Errorf("eventcenter: Config.Token must have at least %d characters, it has %d",
			MinTokenLen, len(cfg.Token))
	case cfg.Poll < 0 || cfg.Heartbeat < 0 || cfg.SessionTTL < 0:
		return nil, errors.New("eventcenter: Config.Poll, Heartbeat and SessionTTL must not be negative")
	}
	c := &Center{
		records: cfg.Records, ledger: cfg.Ledger, tokenSum: sha256.Sum256([]byte(cfg.Token)),
		mask: newMasker(append(slices.Clone(cfg.Secrets), cfg.Token)),
		poll: cfg.Poll, heartbeat: cfg.Heartbeat, ttl: cfg.SessionTTL, clk: clock.OrReal(cfg.Clock), log: cfg.Logger,
		wake: make(chan struct{}), done: make(chan struct{}),
	}
	if c.poll == 0 {
		c.poll = DefaultPoll
	}
	if c.heartbeat == 0 {
		c.heartbeat = DefaultHeartbeat
	}
	if c.ttl == 0 {
		c.ttl = DefaultSessionTTL
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	title := cfg.Title
	if title == "" {
		title = DefaultTitle
	}
	var page bytes.Buffer
	if err := pageTemplate.Execute(&page, struct{ Title string }{title}); err != nil {
		return nil, fmt.Errorf("eventcenter: render the page: %w", err)
	}
	c.page = page.Bytes()
	c.sessions.m = map[[sha256.Size]byte]time.Time{}
	c.routes()
	return c, nil
}

// newMasker returns a replacer of every non-empty secret by Mask, longest
// first, so a secret that contains another is masked whole.
func newMasker(secrets []string) *strings.Replacer {
	secrets = slices.DeleteFunc(secrets, func(s string) bool { return s == "" })
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	secrets = slices.Compact(secrets)
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		pairs = append(pairs, s, Mask)
	}
	return strings.NewReplacer(pairs...)
}

// routes registers the handlers.
func (c *Center) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", c.servePage)
	m.HandleFunc("GET /app.js", serveAsset("app.js", "text/javascript; charset=utf-8"))
	m.HandleFunc("GET /app.css", serveAsset("app.css", "text/css; charset=utf-8"))
	m.HandleFunc("POST /api/session", c.createSession)
	m.HandleFunc("DELETE /api/session", c.authed(c.deleteSession))
	m.HandleFunc("GET /api/messages", c.authed(c.listMessages))
	m.HandleFunc("GET /api/messages/{id...}", c.authed(c.getMessage))
	m.HandleFunc("GET /api/summary", c.authed(c.summary))
	m.HandleFunc("GET /api/codes", c.authed(c.codes))
	m.HandleFunc("GET /api/events", c.authed(c.serveEvents))
	m.HandleFunc("/api/", c.authed(c.apiNotFound))
	m.HandleFunc("/", notFound)
	c.mux = m
}

// ServeHTTP implements http.Handler. Every response carries a strict
// Content-Security-Policy, nosniff and no-store.
func (c *Center) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	c.mux.ServeHTTP(w, r)
}

// contentSecurityPolicy lets the page load only its own script, style and
// API: no inline script or style, no frames, no other origin.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Wake makes every open live feed look for new records now instead of at
// its next poll. The pipeline calls it when it records an outcome; it never
// blocks.
func (c *Center) Wake() {
	c.wakeMu.Lock()
	close(c.wake)
	c.wake = make(chan struct{})
	c.wakeMu.Unlock()
}

// woken returns the channel the next Wake closes.
func (c *Center) woken() <-chan struct{} {
	c.wakeMu.Lock()
	defer c.wakeMu.Unlock()
	return c.wake
}

// Close ends every open live feed and refuses new ones (503); the page and
// the other API calls keep working. Register it with
// http.Server.RegisterOnShutdown: Shutdown does not end a streaming
// response by itself. Close is idempotent.
func (c *Center) Close() {
	c.closeOnce.Do(func() { close(c.done) })
}

// closed reports whether Close was called.
func (c *Center) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Feeds reports how many live feeds are open now.
func (c *Center) Feeds() int { return int(c.feeds.Load()) }
