package browser

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-rod/rod/lib/launcher"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/internal/netguard"
)

// Defaults of the Config fields.
const (
	DefaultSlots         = 3
	DefaultQueueWait     = 20 * time.Second
	DefaultSettle        = 25 * time.Second
	DefaultMaxSettle     = 60 * time.Second
	DefaultMaxText       = 8000
	DefaultMaxScreenshot = 8 << 20
	DefaultMaxTabs       = 8
	DefaultHold          = 10 * time.Minute
	DefaultActionTimeout = 15 * time.Second
	DefaultRetention     = 7 * 24 * time.Hour
)

// Tuning that is not configurable.
const (
	// renderOverhead is the time a render may take beyond its settle
	// bound: opening the context, the screenshot, closing.
	renderOverhead = 15 * time.Second
	// recycleAfter is how many pages one Chromium process serves before
	// it is replaced by a fresh one (once its open pages are closed). It
	// bounds the memory a long-running process and the driver's
	// per-page bookkeeping accumulate.
	recycleAfter = 200
	// launchTimeout bounds starting Chromium and connecting to it.
	launchTimeout = 45 * time.Second
	// cleanupEvery is how often Run deletes old screenshots.
	cleanupEvery = time.Hour
)

// Errors the browser returns; test them with errors.Is.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("browser: closed")
	// ErrBusy is returned when no render slot frees up within QueueWait.
	ErrBusy = errors.New("browser: too many disposable browsers running, try again later")
	// ErrDownload is returned when a page turns out to be a download.
	ErrDownload = errors.New("browser: the URL starts a download; downloads are not allowed")
	// ErrNoSession is returned by an interactive tool called outside a
	// conversation (no session key in its context).
	ErrNoSession = errors.New("browser: interactive browsing needs a conversation (no session key)")
	// ErrTooManyTabs is returned when every tab is busy and none can be
	// closed to make room.
	ErrTooManyTabs = errors.New("browser: too many browser tabs open, try again later")
	// ErrNoTab is returned by an interactive action before browser_open.
	ErrNoTab = errors.New("browser: no open tab in this conversation; call browser_open first")
)

// RefusedError reports a URL the network guard refused: its address is
// not public (loopback, private, link-local, metadata, ...). It wraps
// netguard.ErrBlocked.
type RefusedError struct {
	// URL is the refused URL (a redirect target or a frame's, not
	// necessarily the one asked for).
	URL string
	// Err is the guard's reason.
	Err error
}

// Error says which URL was refused and why.
func (e *RefusedError) Error() string {
	detail := strings.TrimPrefix(e.Err.Error(), netguard.ErrBlocked.Error())
	detail = strings.TrimPrefix(detail, ": ")
	if detail == "" {
		return "refused: " + e.URL + ": address is not public"
	}
	return "refused: " + e.URL + ": address is not public: " + detail
}

// Unwrap returns the guard's error (wrapping netguard.ErrBlocked).
func (e *RefusedError) Unwrap() error { return e.Err }

// Config configures a Browser. The zero value is usable: every zero field
// takes the default named in its comment.
type Config struct {
	// Bin is the Chromium (or Chrome) executable. Empty: the first local
	// browser rod's launcher.LookPath finds; New fails with a clear error
	// when there is none. Nothing is ever downloaded.
	Bin string
	// Slots is how many disposable renders run at once (default 3).
	Slots int
	// QueueWait is how long Render waits for a free slot before it fails
	// with ErrBusy (default 20 s). The wait does not count against the
	// render's own timeout.
	QueueWait time.Duration
	// Settle is how long a render waits for the page to become quiet
	// (network and DOM) when RenderOptions.Settle is zero (default 25 s).
	Settle time.Duration
	// MaxSettle caps any settle time, RenderOptions.Settle included
	// (default 60 s).
	MaxSettle time.Duration
	// MaxText is the most runes of visible text a Page or browser_read
	// returns; longer text is cut with a marker (default 8,000).
	MaxText int
	// MaxScreenshot is the largest screenshot in bytes (default 8 MiB). A
	// larger PNG is taken again as JPEG of falling quality, and dropped
	// with a note if even that is too big.
	MaxScreenshot int
	// Guard checks every address the browser connects to (nil: a guard
	// with netguard.Config{}, which lets only public addresses through).
	Guard *netguard.Guard
	// Allow lets these prefixes through the default guard although they
	// are not public (a host of your own, a test server on loopback).
	// Ignored when Guard is set.
	Allow []netip.Prefix
	// Clock drives the tab hold, the idle sweeper, the queue wait and the
	// screenshot retention (nil: clock.Real).
	Clock clock.Clock
	// Logger receives one line per interactive action and the process
	// life cycle (nil: discarded).
	Logger *slog.Logger
	// Dir holds one screenshot folder per conversation (default
	// os.TempDir()/persona-browser).
	Dir string
	// MaxTabs is how many interactive tabs may be open at once over all
	// conversations (default 8).
	MaxTabs int
	// Hold is how long an interactive tab stays open after its last
	// action (default 10 min).
	Hold time.Duration
	// ActionTimeout bounds one interactive action (default 15 s).
	ActionTimeout time.Duration
	// Retention is how long interactive screenshots are kept (default 7
	// days); Cleanup deletes older ones.
	Retention time.Duration
}

func (c Config) withDefaults() Config {
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	if c.QueueWait <= 0 {
		c.QueueWait = DefaultQueueWait
	}
	if c.MaxSettle <= 0 {
		c.MaxSettle = DefaultMaxSettle
	}
	if c.Settle <= 0 {
		c.Settle = DefaultSettle
	}
	c.Settle = min(c.Settle, c.MaxSettle)
	if c.MaxText <= 0 {
		c.MaxText = DefaultMaxText
	}
	if c.MaxScreenshot <= 0 {
		c.MaxScreenshot = DefaultMaxScreenshot
	}
	if c.Guard == nil {
		c.Guard = netguard.New(netguard.Config{Allow: slices.Clone(c.Allow)})
	}
	c.Clock = clock.OrReal(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Dir == "" {
		c.Dir = filepath.Join(os.TempDir(), "persona-browser")
	}
	if c.MaxTabs <= 0 {
		c.MaxTabs = DefaultMaxTabs
	}
	if c.Hold <= 0 {
		c.Hold = DefaultHold
	}
	if c.ActionTimeout <= 0 {
		c.ActionTimeout = DefaultActionTimeout
	}
	if c.Retention <= 0 {
		c.Retention = DefaultRetention
	}
	return c
}

// Browser is a headless Chromium behind the network guard: disposable
// renders (Render, browser_render) and owner-only interactive tabs. Create
// one with New and release it with Close. It is safe for concurrent use.
type Browser struct {
	cfg   Config
	bin   string
	log   *slog.Logger
	proxy *proxy // pages' traffic, through the guard
	void  *proxy // Chromium's own traffic: refused
	slots *pool

	mu           sync.Mutex // guards inst, all, closed, recycleAfter and every instance's counters
	recycleAfter int
	inst         *instance
	all          map[*instance]struct{} // every instance not yet stopped
	closed       bool

	tabMu sync.Mutex
	tabs  map[string]*tab

	sweepEvery time.Duration
	done       chan struct{}
	wg         sync.WaitGroup

	// Instrumentation, read by tests and the benchmark.
	renderPages    atomic.Int64 // render pages open now
	maxRenderPages atomic.Int64 // the most render pages ever open at once
}

// New starts the guard proxy and one warm Chromium process. It fails when
// no browser binary is found or Chromium does not start.
func New(cfg Config) (*Browser, error) {
	cfg = cfg.withDefaults()
	bin, err := findBin(cfg.Bin)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("browser: screenshot folder: %w", err)
	}
	px, err := startProxy(cfg.Guard, cfg.Logger)
	if err != nil {
		return nil, err
	}
	void, err := startProxy(nil, cfg.Logger)
	if err != nil {
		_ = px.close()
		return nil, err
	}
	b := &Browser{
		cfg:          cfg,
		bin:          bin,
		log:          cfg.Logger,
		proxy:        px,
		void:         void,
		slots:        newPool(cfg.Slots, cfg.QueueWait, cfg.Clock),
		tabs:         map[string]*tab{},
		all:          map[*instance]struct{}{},
		recycleAfter: recycleAfter,
		sweepEvery:   min(max(cfg.Hold/10, time.Second), time.Minute),
		done:         make(chan struct{}),
	}
	b.mu.Lock()
	inst, err := b.launch()
	if err == nil {
		b.inst = inst
		b.all[inst] = struct{}{}
	}
	b.mu.Unlock()
	if err != nil {
		_ = px.close()
		_ = void.close()
		return nil, err
	}
	// The first timer is armed before New returns, so a test with a fake
	// clock can advance past it at once.
	first := b.cfg.Clock.NewTimer(b.sweepEvery)
	b.wg.Add(1)
	go b.sweepLoop(first)
	return b, nil
}

// findBin resolves the configured binary or looks for a local one.
func findBin(bin string) (string, error) {
	if bin == "" {
		found, ok := launcher.LookPath()
		if !ok {
			return "", errors.New("browser: no local Chromium or Chrome found; install one (e.g. apt-get install chromium) or set Config.Bin")
		}
		bin = found
	}
	st, err := os.Stat(bin)
	if err != nil {
		return "", fmt.Errorf("browser: Chromium binary: %w", err)
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("browser: Chromium binary %s is not an executable file", bin)
	}
	return bin, nil
}

// Close closes every tab and render, stops Chromium and the proxy, and
// removes the temporary profile. Later calls return ErrClosed.
func (b *Browser) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.closed = true
	b.inst = nil
	all := make([]*instance, 0, len(b.all))
	for in := range b.all {
		all = append(all, in)
	}
	clear(b.all)
	b.mu.Unlock()
	close(b.done)

	b.tabMu.Lock()
	tabs := make([]*tab, 0, len(b.tabs))
	for _, t := range b.tabs {
		t.gone = true
		tabs = append(tabs, t)
	}
	b.tabs = nil // enterTab fails from now on
	b.tabMu.Unlock()
	for _, t := range tabs {
		t.shut()
	}
	for _, in := range all {
		in.stop()
	}
	b.wg.Wait()
	return errors.Join(b.proxy.close(), b.void.close())
}

// acquire returns the live Chromium instance, launching or replacing it
// as needed, and counts one more open page on it. Pair with release.
func (b *Browser) acquire() (*instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if in := b.inst; in != nil && (!in.alive() || in.uses >= b.recycleAfter) {
		b.retireLocked(in)
	}
	if b.inst == nil {
		in, err := b.launch()
		if err != nil {
			return nil, err
		}
		b.inst = in
		b.all[in] = struct{}{}
	}
	b.inst.uses++
	b.inst.open++
	return b.inst, nil
}

// release counts one page fewer on in; a retired instance is stopped once
// its last page is gone.
func (b *Browser) release(in *instance) {
	b.mu.Lock()
	defer b.mu.Unlock()
	in.open--
	if in.retired && in.open == 0 {
		b.stopLocked(in)
	}
}

// retire takes in out of service (it died or is to be recycled).
func (b *Browser) retire(in *instance) {
	b.mu.Lock()
	b.retireLocked(in)
	b.mu.Unlock()
}

func (b *Browser) retireLocked(in *instance) {
	if b.inst == in {
		b.inst = nil
	}
	if in.retired {
		return
	}
	in.retired = true
	if in.alive() {
		b.log.Info("browser: recycling chromium", "pid", in.pid, "pages", in.uses)
	} else {
		b.log.Warn("browser: chromium is gone; a fresh one will be started", "pid", in.pid)
	}
	if in.open == 0 || !in.alive() {
		b.stopLocked(in)
	}
}

// stopLocked stops in in the background; b.mu must be held. After Close
// every instance has been stopped already.
func (b *Browser) stopLocked(in *instance) {
	if _, ok := b.all[in]; !ok || b.closed {
		return
	}
	delete(b.all, in)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		in.stop()
	}()
}

// Slots reports the configured number of render slots.
func (b *Browser) Slots() int { return b.cfg.Slots }
