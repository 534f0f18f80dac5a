package mcptool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/personakit/persona/clock"
)

// Process and listing limits.
const (
	// terminateGrace is how long a stdio server has to exit after its stdin
	// closes, and again after SIGTERM, before it is killed.
	terminateGrace = 2 * time.Second
	// closeGrace bounds the wait for a session to close before its process
	// group is killed outright.
	closeGrace = 2*terminateGrace + time.Second
	// waitDelay bounds the wait for a process's stderr after it exited
	// (a grandchild may still hold it open).
	waitDelay = 2 * time.Second
	// maxListPages and maxTools bound a tools/list that never ends.
	maxListPages = 100
	maxTools     = 1000
)

// inheritedEnv are the variables a stdio server inherits from us.
var inheritedEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
	"SYSTEMROOT", "COMSPEC", "PATHEXT", "WINDIR", "USERPROFILE", "APPDATA", "LOCALAPPDATA", "TEMP", "TMP",
}

var errStartTimeout = errors.New("start timeout")

// conn is the connection to one server: at most one live session, shared
// by every call, replaced when it breaks.
type conn struct {
	src    *Sources
	cfg    Server
	log    *slog.Logger
	client *mcp.Client
	http   *http.Client    // URL servers only
	pool   *http.Transport // URL servers only

	mu         sync.Mutex
	sess       *session
	listing    map[string]*mcp.Tool // nil until the first listing
	names      []string             // listing's names, sorted
	lastErr    error
	connecting chan struct{} // closed when the running attempt ends
	failures   int           // consecutive failed attempts
	flaps      int           // sessions lost soon after they started
	nextTry    time.Time     // no attempt before this
	retrying   bool          // a background retry loop runs
	closed     bool
	// listSeq numbers tool-list refreshes; listApplied is the newest one
	// applied to the listing.
	listSeq, listApplied uint64
}

// session is one live MCP session.
type session struct {
	c       *conn
	cs      *mcp.ClientSession
	pid     int // stdio process, 0 for HTTP
	stderr  *stderrTail
	started time.Time
}

func newConn(s *Sources, cfg Server) *conn {
	c := &conn{src: s, cfg: cfg, log: s.opt.Logger.With(slog.String("mcp_server", cfg.Name))}
	if cfg.URL != "" {
		c.http, c.pool = newHTTPClient(cfg.Headers)
	}
	c.client = mcp.NewClient(&mcp.Implementation{Name: s.opt.ClientName, Version: "1.0.0"}, &mcp.ClientOptions{
		Logger: c.log,
		ToolListChangedHandler: func(_ context.Context, req *mcp.ToolListChangedRequest) {
			c.refresh(req.Session)
		},
	})
	return c
}

func (c *conn) clk() clock.Clock { return c.src.opt.Clock }

func (c *conn) transport() string {
	if c.cfg.URL != "" {
		return "http"
	}
	return "stdio"
}

// get returns the live session, connecting first when there is none and
// the backoff allows; otherwise it fails at once with ErrUnavailable.
func (c *conn) get(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if c.sess != nil {
			s := c.sess
			c.mu.Unlock()
			return s, nil
		}
		ch, err := c.startAttemptLocked()
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// startAttemptLocked returns the channel of the running connection
// attempt, starting one when none runs and the backoff allows. c.mu is
// held.
func (c *conn) startAttemptLocked() (<-chan struct{}, error) {
	if c.connecting != nil {
		return c.connecting, nil
	}
	if wait := c.nextTry.Sub(c.clk().Now()); wait > 0 {
		last := c.lastErr
		if last == nil {
			last = errors.New("connection failed")
		}
		return nil, fmt.Errorf("mcp server %q %w: %w (next attempt in %s)", c.cfg.Name, ErrUnavailable, last, roundWait(wait))
	}
	ch := make(chan struct{})
	c.connecting = ch
	if !c.src.goBackground(func() { c.attempt(ch) }) {
		c.connecting = nil
		close(ch)
		return nil, ErrClosed
	}
	return ch, nil
}

func roundWait(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// attempt makes one connection attempt and records its outcome.
func (c *conn) attempt(ch chan struct{}) {
	ctx, cancel := withTimeout(c.src.life, c.clk(), c.cfg.StartTimeout, errStartTimeout)
	sess, tools, err := c.dial(ctx)
	if err != nil && errors.Is(context.Cause(ctx), errStartTimeout) {
		err = fmt.Errorf("did not start within %s: %w", c.cfg.StartTimeout, err)
	}
	cancel()

	c.mu.Lock()
	c.connecting = nil
	if c.closed {
		c.mu.Unlock()
		close(ch)
		if sess != nil {
			sess.close()
		}
		return
	}
	now := c.clk().Now()
	if err != nil {
		c.failures++
		c.lastErr = err
		c.nextTry = now.Add(c.src.opt.backoff(c.failures))
		c.mu.Unlock()
		close(ch)
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "mcp server connection failed",
			slog.String("error", err.Error()), slog.Int("failures", c.failures))
		c.ensureRetrier()
		return
	}
	c.failures = 0
	c.lastErr = nil
	sess.started = now
	c.sess = sess
	c.setListingLocked(tools)
	c.mu.Unlock()
	close(ch)
	c.log.LogAttrs(context.Background(), slog.LevelInfo, "mcp server connected", slog.Int("tools", len(tools)))
	if !c.src.goBackground(func() { c.watch(sess) }) {
		c.lost(sess, ErrClosed)
	}
	c.src.toolsChanged(c)
}

// dial starts the transport, completes the MCP handshake and lists the
// tools, all within ctx. A stdio process still starting when ctx ends is
// killed at once, so a server that never answers cannot hold Open past
// its StartTimeout.
func (c *conn) dial(ctx context.Context) (*session, []*mcp.Tool, error) {
	sess := &session{c: c}
	var t mcp.Transport
	var st *stdioTransport
	if c.cfg.URL != "" {
		t = &mcp.StreamableClientTransport{Endpoint: c.cfg.URL, HTTPClient: c.http}
	} else {
		cmd := exec.Command(c.cfg.Command, c.cfg.Args...)
		cmd.Env = childEnv(c.cfg.Env)
		cmd.Dir = c.cfg.Dir
		sess.stderr = newStderrTail(c.log)
		cmd.Stderr = sess.stderr
		cmd.WaitDelay = waitDelay
		ownProcessGroup(cmd)
		st = &stdioTransport{inner: &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateGrace}}
		t = st
		stop := context.AfterFunc(ctx, func() { killGroup(int(st.pid.Load())) })
		defer stop()
	}
	cs, err := c.client.Connect(ctx, t, nil)
	if st != nil {
		sess.pid = int(st.pid.Load())
	}
	if err != nil {
		switch {
		case st != nil && sess.pid == 0:
			err = fmt.Errorf("start %q: %w", c.cfg.Command, err)
		case st != nil:
			killGroup(sess.pid)
			err = fmt.Errorf("MCP handshake: %w", err)
			if msg := sess.stderr.last(); msg != "" {
				err = fmt.Errorf("%w; server stderr: %q", err, msg)
			}
		default:
			err = fmt.Errorf("MCP handshake: %w", err)
		}
		return nil, nil, err
	}
	sess.cs = cs
	tools, err := c.list(ctx, cs)
	if err != nil {
		sess.close()
		return nil, nil, fmt.Errorf("listing tools: %w", err)
	}
	return sess, tools, nil
}

// stdioTransport is the SDK's CommandTransport that remembers the pid of
// the process it started.
type stdioTransport struct {
	inner *mcp.CommandTransport
	pid   atomic.Int64
}

// Connect starts the process through the SDK transport.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.inner.Connect(ctx)
	if p := t.inner.Command.Process; p != nil {
		t.pid.Store(int64(p.Pid))
		if ctx.Err() != nil {
			// dial's kill on ctx may have run before the pid was known.
			killGroup(p.Pid)
		}
	}
	return conn, err
}

func childEnv(extra []string) []string {
	env := make([]string, 0, len(inheritedEnv)+len(extra))
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// list reads every page of tools/list, bounded against servers that page
// forever, and keeps the valid, included tools.
func (c *conn) list(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var all []*mcp.Tool
	params := &mcp.ListToolsParams{}
	for page := 0; ; page++ {
		if page == maxListPages {
			return nil, fmt.Errorf("tools/list still paging after %d pages", maxListPages)
		}
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return nil, err
		}
		all = append(all, res.Tools...)
		if len(all) > maxTools {
			c.log.LogAttrs(ctx, slog.LevelWarn, "mcp server lists too many tools; keeping the first ones", slog.Int("limit", maxTools))
			all = all[:maxTools]
			break
		}
		if res.NextCursor == "" {
			break
		}
		if res.NextCursor == params.Cursor {
			return nil, errors.New("tools/list repeats its page cursor")
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
	seen := map[string]bool{}
	out := make([]*mcp.Tool, 0, len(all))
	for _, t := range all {
		if t == nil || strings.TrimSpace(t.Name) == "" || seen[t.Name] {
			continue
		}
		if len(c.cfg.Include) > 0 && !slices.Contains(c.cfg.Include, t.Name) {
			continue
		}
		seen[t.Name] = true
		out = append(out, t)
	}
	for _, name := range c.cfg.Include {
		if !seen[name] {
			c.log.LogAttrs(ctx, slog.LevelWarn, "mcp server does not offer an included tool", slog.String("tool", name))
		}
	}
	return out, nil
}

func (c *conn) setListingLocked(tools []*mcp.Tool) {
	c.listing = make(map[string]*mcp.Tool, len(tools))
	c.names = c.names[:0]
	for _, t := range tools {
		c.listing[t.Name] = t
		c.names = append(c.names, t.Name)
	}
	slices.Sort(c.names)
}

// listed returns the latest listing sorted by name.
func (c *conn) listed() []*mcp.Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*mcp.Tool, 0, len(c.names))
	for _, n := range c.names {
		out = append(out, c.listing[n])
	}
	return out
}

func (c *conn) offers(tool string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listing[tool] != nil
}

// refresh re-lists the tools after the server said its list changed.
// Overlapping refreshes apply in the order they started.
func (c *conn) refresh(cs *mcp.ClientSession) {
	c.mu.Lock()
	c.listSeq++
	seq := c.listSeq
	c.mu.Unlock()
	c.src.goBackground(func() {
		ctx, cancel := withTimeout(c.src.life, c.clk(), c.cfg.StartTimeout, errStartTimeout)
		defer cancel()
		tools, err := c.list(ctx, cs)
		if err != nil {
			c.log.LogAttrs(ctx, slog.LevelWarn, "mcp server tool list refresh failed", slog.String("error", err.Error()))
			return
		}
		c.mu.Lock()
		current := c.sess != nil && c.sess.cs == cs && seq > c.listApplied
		if current {
			c.listApplied = seq
			c.setListingLocked(tools)
		}
		c.mu.Unlock()
		if current {
			c.src.toolsChanged(c)
		}
	})
}

// watch waits for the session to end and reports it lost.
func (c *conn) watch(sess *session) {
	err := sess.cs.Wait()
	cause := errors.New("the server closed the connection")
	if c.cfg.Command != "" {
		cause = errors.New("the server process exited")
	}
	if err != nil {
		cause = fmt.Errorf("%w: %w", cause, err)
	}
	if msg := sess.stderr.last(); msg != "" {
		cause = fmt.Errorf("%w; server stderr: %q", cause, msg)
	}
	c.lost(sess, cause)
}

// lost retires sess (if it is still the live one), kills it in the
// background (a stdio server whose stream broke is not trusted to exit
// when asked) and schedules a reconnect: at once for a session that lived
// at least BackoffMax, otherwise after a backoff that grows with every
// such short-lived session, so a server that crashes on start is not
// restarted in a tight loop.
func (c *conn) lost(sess *session, cause error) {
	c.mu.Lock()
	if c.sess != sess {
		c.mu.Unlock()
		return
	}
	c.sess = nil
	now := c.clk().Now()
	if now.Sub(sess.started) >= c.src.opt.BackoffMax {
		c.flaps = 0
	}
	c.nextTry = now.Add(c.src.opt.backoff(c.flaps))
	c.flaps++
	c.lastErr = cause
	closed := c.closed
	c.mu.Unlock()
	if !closed {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "mcp server connection lost", slog.String("error", cause.Error()))
	}
	if !c.src.goBackground(sess.kill) {
		sess.kill()
		return
	}
	c.ensureRetrier()
}

// ensureRetrier starts the background reconnect loop unless it runs.
func (c *conn) ensureRetrier() {
	c.mu.Lock()
	if c.retrying || c.closed || c.sess != nil {
		c.mu.Unlock()
		return
	}
	c.retrying = true
	c.mu.Unlock()
	if !c.src.goBackground(c.retry) {
		c.mu.Lock()
		c.retrying = false
		c.mu.Unlock()
	}
}

// retry reconnects in the background, waiting out the backoff between
// attempts, until a session is up or the Sources close.
func (c *conn) retry() {
	done := c.src.life.Done()
	for {
		c.mu.Lock()
		if c.closed || c.sess != nil {
			c.retrying = false
			c.mu.Unlock()
			return
		}
		var ch <-chan struct{} = c.connecting
		wait := c.nextTry.Sub(c.clk().Now())
		if ch == nil && wait <= 0 {
			var err error
			if ch, err = c.startAttemptLocked(); err != nil {
				c.retrying = false // closing
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		switch {
		case ch != nil:
			select {
			case <-ch:
			case <-done:
			}
		case wait > 0:
			clock.Sleep(c.clk(), done, wait)
		}
		select {
		case <-done:
			c.mu.Lock()
			c.retrying = false
			c.mu.Unlock()
			return
		default:
		}
	}
}

// shut marks c closed and hands back its live session for closing.
func (c *conn) shut() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	s := c.sess
	c.sess = nil
	return s
}

func (c *conn) status() ServerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := ServerStatus{Name: c.cfg.Name, Transport: c.transport(), Connected: c.sess != nil, Tools: len(c.listing)}
	if c.lastErr != nil {
		st.LastError = c.lastErr.Error()
	}
	if c.sess == nil && c.nextTry.After(c.clk().Now()) {
		st.NextAttempt = c.nextTry
	}
	return st
}

// close ends the session. For a stdio server the SDK closes stdin, waits,
// sends SIGTERM, waits, then SIGKILL, and reaps the process; if that does
// not finish in closeGrace the process group is killed. Processes the
// server left in its group are killed either way.
func (s *session) close() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.cs.Close(); err != nil {
			s.c.log.LogAttrs(context.Background(), slog.LevelDebug, "mcp session closed", slog.String("error", err.Error()))
		}
	}()
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		killGroup(s.pid)
		t.Reset(closeGrace)
		select {
		case <-done:
		case <-t.C:
			s.c.log.LogAttrs(context.Background(), slog.LevelWarn, "mcp session did not close in time")
		}
	}
	killGroup(s.pid)
}

// kill ends a session that broke: the process group is killed first, so
// closing does not wait for a wedged server to exit by itself.
func (s *session) kill() {
	killGroup(s.pid)
	s.close()
}

// withTimeout derives a context cancelled with cause after d on clk.
func withTimeout(parent context.Context, clk clock.Clock, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	if clk == clock.Real {
		return context.WithTimeoutCause(parent, d, cause)
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := clk.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel(cause)
		case <-ctx.Done():
		}
	}()
	// Stopping the timer here, not only in the goroutine, leaves no stale
	// timer on a fake clock once the work is done.
	return ctx, func() { t.Stop(); cancel(context.Canceled) }
}
