package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/agent"
)

// Errors a tool call or Register may wrap; test with errors.Is.
var (
	// ErrClosed: the Sources were closed.
	ErrClosed = errors.New("mcptool: sources closed")
	// ErrUnavailable: the server is not connected (it failed to start or
	// its connection broke) and is being reconnected in the background.
	ErrUnavailable = errors.New("not connected")
	// ErrConnectionLost: the connection broke during the call; the server
	// is being reconnected. The call may or may not have run.
	ErrConnectionLost = errors.New("connection lost")
	// ErrTimeout: the call took longer than the server's CallTimeout.
	ErrTimeout = errors.New("timed out")
	// ErrToolFailed: the server ran the tool and reported an error
	// (isError); the error text is the server's.
	ErrToolFailed = errors.New("the tool reported an error")
	// ErrToolGone: the server's latest tool list no longer has the tool.
	ErrToolGone = errors.New("tool no longer offered by server")
)

// Sources holds the connections to a set of MCP servers and the agent
// tools made from their tools. Create it with [Open]; it is safe for
// concurrent use.
type Sources struct {
	opt   Options
	conns []*conn

	// life is cancelled by Close: it ends connection attempts, retries
	// and calls in flight.
	life context.Context
	stop context.CancelFunc

	// bgMu guards bgClosed and the adding to wg, so no background work
	// starts once Close waits for it. It is taken after conn.mu, never
	// before.
	bgMu     sync.Mutex
	bgClosed bool
	wg       sync.WaitGroup
	calls    sync.WaitGroup // calls in flight, under the same rule

	// mu guards the tool table and the registries; it may be held while
	// taking a conn.mu, never the other way round.
	mu     sync.Mutex
	ready  bool // Open has named the first listings
	names  map[toolKey]string
	taken  map[string]bool
	tools  map[string]*remoteTool
	order  []string
	regs   []*regState
	closed bool
}

type toolKey struct{ server, tool string }

// regState is one registry handed to Register and the tools added to it.
type regState struct {
	reg  *agent.Registry
	done map[string]bool
}

// ToolInfo describes one MCP tool known to the [Sources].
type ToolInfo struct {
	// Server is the configured server name.
	Server string
	// Name is the agent tool name ("<server>_<tool>", sanitised).
	Name string
	// Remote is the tool's name on the server.
	Remote string
	// Description is the tool's description from the server.
	Description string
	// Parameters is the JSON schema registered for the tool.
	Parameters json.RawMessage
	// Relaxed says why the server's input schema was rewritten before
	// registration; empty when it was registered as sent.
	Relaxed string
	// Offered reports whether the server's latest tool list has the tool.
	Offered bool
}

// ServerStatus is the connection state of one server.
type ServerStatus struct {
	// Name is the configured server name.
	Name string
	// Transport is "stdio" or "http".
	Transport string
	// Connected reports whether a session is up.
	Connected bool
	// Tools counts the tools of the latest listing.
	Tools int
	// LastError is the last connection failure, empty when none.
	LastError string
	// NextAttempt is the earliest time of the next reconnect attempt when
	// not connected (zero when one may start at once).
	NextAttempt time.Time
}

// Open connects to every server at once, each within its StartTimeout,
// and lists their tools. Configuration errors always fail Open. A server
// that fails to start fails Open too, with one error per failed server
// joined (errors.Join), and every session opened so far is closed; with
// Options.Lenient the failure is logged instead, the server is retried in
// the background with backoff, and its tools are registered (into every
// registry handed to Register) once it is up. Cancelling ctx aborts Open.
func Open(ctx context.Context, servers []Server, opt Options) (*Sources, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	cfgs := make([]Server, 0, len(servers))
	seen := map[string]bool{}
	var errs []error
	for _, srv := range servers {
		cfg, err := srv.withDefaults()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if key := strings.ToLower(cfg.Name); seen[key] {
			errs = append(errs, fmt.Errorf("%w: server %q: name used twice", ErrConfig, cfg.Name))
			continue
		}
		seen[strings.ToLower(cfg.Name)] = true
		cfgs = append(cfgs, cfg)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &Sources{
		opt:   opt,
		names: map[toolKey]string{},
		taken: map[string]bool{},
		tools: map[string]*remoteTool{},
	}
	for _, n := range builtinNames {
		s.taken[n] = true
	}
	s.life, s.stop = context.WithCancel(context.Background())
	for _, cfg := range cfgs {
		s.conns = append(s.conns, newConn(s, cfg))
	}
	waits := make([]<-chan struct{}, len(s.conns))
	for i, c := range s.conns {
		c.mu.Lock()
		ch, _ := c.startAttemptLocked()
		c.mu.Unlock()
		waits[i] = ch
	}
	for _, ch := range waits {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			_ = s.Close()
			return nil, fmt.Errorf("mcptool: open: %w", ctx.Err())
		}
	}
	for _, c := range s.conns {
		c.mu.Lock()
		up, last := c.sess != nil, c.lastErr
		c.mu.Unlock()
		if !up {
			if last == nil {
				last = errors.New("connection failed")
			}
			errs = append(errs, fmt.Errorf("mcp server %q: %w", c.cfg.Name, last))
		}
	}
	if len(errs) > 0 && !opt.Lenient {
		_ = s.Close()
		return nil, errors.Join(errs...)
	}
	for _, err := range errs {
		opt.Logger.LogAttrs(ctx, slog.LevelWarn, "mcp server failed to start; retrying in the background", slog.String("error", err.Error()))
	}
	s.mu.Lock()
	s.ready = true
	for _, c := range s.conns {
		s.addToolsLocked(c)
	}
	s.mu.Unlock()
	return s, nil
}

// Register adds every listed tool to reg as a deferred catalog tool named
// "<server>_<tool>", with the tool's description, its input schema as
// parameters (see ToolInfo.Relaxed), the server's CallTimeout and, when
// set, the server's Tiers. Tools listed later (a lenient server coming up,
// a reconnect or a list-changed notification bringing new tools) are added
// to reg as they appear. Calling Register again with the same registry
// adds only what it lacks. Tools that fail to register (a name already
// taken in reg) are reported joined; the others are registered.
func (s *Sources) Register(reg *agent.Registry) error {
	if reg == nil {
		return errors.New("mcptool: nil registry")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	var rs *regState
	for _, x := range s.regs {
		if x.reg == reg {
			rs = x
		}
	}
	if rs == nil {
		rs = &regState{reg: reg, done: map[string]bool{}}
		s.regs = append(s.regs, rs)
	}
	var errs []error
	for _, name := range s.order {
		if err := s.registerLocked(rs, s.tools[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Sources) registerLocked(rs *regState, t *remoteTool) error {
	if rs.done[t.name] {
		return nil
	}
	rs.done[t.name] = true
	opts := []agent.ToolOption{agent.Deferred(), agent.Purpose(t.purpose), agent.Timeout(t.c.cfg.CallTimeout)}
	if len(t.c.cfg.Tiers) > 0 {
		opts = append(opts, agent.Tiers(t.c.cfg.Tiers...))
	}
	if err := rs.reg.Register(t, opts...); err != nil {
		return fmt.Errorf("mcp server %q, tool %q: %w", t.c.cfg.Name, t.remote, err)
	}
	return nil
}

// toolsChanged names and registers the tools of c's latest listing that
// are new.
func (s *Sources) toolsChanged(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready && !s.closed {
		s.addToolsLocked(c)
	}
}

func (s *Sources) addToolsLocked(c *conn) {
	for _, t := range c.listed() {
		key := toolKey{c.cfg.Name, t.Name}
		if _, ok := s.names[key]; ok {
			continue
		}
		name := uniqueName(toolName(c.cfg.Name, t.Name), s.taken)
		s.taken[name] = true
		s.names[key] = name
		rt := newRemoteTool(c, name, t)
		if rt.relaxed != "" {
			s.opt.Logger.LogAttrs(context.Background(), slog.LevelInfo, "mcp tool schema relaxed for the registry",
				slog.String("server", c.cfg.Name), slog.String("tool", t.Name), slog.String("reason", rt.relaxed))
		}
		s.tools[name] = rt
		s.order = append(s.order, name)
		for _, rs := range s.regs {
			if err := s.registerLocked(rs, rt); err != nil {
				s.opt.Logger.LogAttrs(context.Background(), slog.LevelWarn, "mcp tool not registered", slog.String("error", err.Error()))
			}
		}
	}
}

// Tools describes every tool known so far, in registration order.
func (s *Sources) Tools() []ToolInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ToolInfo, 0, len(s.order))
	for _, name := range s.order {
		t := s.tools[name]
		out = append(out, ToolInfo{
			Server:      t.c.cfg.Name,
			Name:        t.name,
			Remote:      t.remote,
			Description: t.spec.Description,
			Parameters:  slices.Clone(t.spec.Parameters),
			Relaxed:     t.relaxed,
			Offered:     t.c.offers(t.remote),
		})
	}
	return out
}

// Status reports the connection state of every server, in config order.
func (s *Sources) Status() []ServerStatus {
	out := make([]ServerStatus, 0, len(s.conns))
	for _, c := range s.conns {
		out = append(out, c.status())
	}
	return out
}

// Close ends every session: calls in flight fail with ErrClosed, stdio
// server processes are stopped (stdin closed, then SIGTERM, then SIGKILL
// of their process group) and reaped, HTTP sessions are deleted, and
// background reconnects stop. It waits for all of that and is idempotent.
func (s *Sources) Close() error {
	s.bgMu.Lock()
	if s.bgClosed {
		s.bgMu.Unlock()
		return nil
	}
	s.bgClosed = true
	s.bgMu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	// Let the aborted calls return before the sessions close: a call
	// retired on a closing SDK connection would otherwise wait for the
	// session's teardown (an HTTP DELETE) to finish.
	waitFor(&s.calls, closeGrace)
	var wg sync.WaitGroup
	for _, c := range s.conns {
		if sess := c.shut(); sess != nil {
			wg.Go(sess.close)
		}
	}
	wg.Wait()
	s.wg.Wait()
	for _, c := range s.conns {
		if c.pool != nil {
			c.pool.CloseIdleConnections()
		}
	}
	return nil
}

// beginCall counts a call in flight; it reports false once Close has
// begun. A true result must be paired with s.calls.Done().
func (s *Sources) beginCall() bool {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgClosed {
		return false
	}
	s.calls.Add(1)
	return true
}

// waitFor waits for wg, at most d of wall time.
func waitFor(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// goBackground runs f in a goroutine that Close waits for; it reports
// false (and does not run f) once Close has begun.
func (s *Sources) goBackground(f func()) bool {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgClosed {
		return false
	}
	s.wg.Go(f)
	return true
}
