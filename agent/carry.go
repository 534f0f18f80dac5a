package agent

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/clock"
)

// Defaults of the agent memory across turns.
const (
	DefaultCarrySummaries = 12
	DefaultCarryTTL       = 10 * time.Minute
	DefaultRecentCalls    = 8
	DefaultRecentTTL      = 30 * time.Minute
	DefaultSnapshotTTL    = 30 * time.Minute
	DefaultConfirmTTL     = 10 * time.Minute
)

// CallRecord is one executed tool call as later turns see it.
type CallRecord struct {
	Tool string
	// Args and Result are shortened to one line.
	Args   string
	Result string
	At     time.Time
}

// CarryConfig configures a [CarryStore]; zero fields take the defaults.
type CarryConfig struct {
	Clock clock.Clock
	// Summaries is the most step summaries kept after a forced finish (12);
	// SummaryTTL how long they stay valid (10 min).
	Summaries  int
	SummaryTTL time.Duration
	// Calls is the number of recent tool calls kept (8); CallTTL how long
	// each stays valid (30 min).
	Calls   int
	CallTTL time.Duration
}

// CarryStore keeps, per session, the carry-over archive of a forced finish
// and the last tool calls, in memory. It is safe for concurrent use.
type CarryStore struct {
	cfg      CarryConfig
	clk      clock.Clock
	mu       sync.Mutex
	sessions map[string]*carrySession
}

type carrySession struct {
	archive   []string
	archiveAt time.Time
	calls     []CallRecord
}

// NewCarryStore returns an empty store.
func NewCarryStore(cfg CarryConfig) *CarryStore {
	if cfg.Summaries <= 0 {
		cfg.Summaries = DefaultCarrySummaries
	}
	if cfg.SummaryTTL <= 0 {
		cfg.SummaryTTL = DefaultCarryTTL
	}
	if cfg.Calls <= 0 {
		cfg.Calls = DefaultRecentCalls
	}
	if cfg.CallTTL <= 0 {
		cfg.CallTTL = DefaultRecentTTL
	}
	return &CarryStore{cfg: cfg, clk: clock.OrReal(cfg.Clock), sessions: map[string]*carrySession{}}
}

func (s *CarryStore) session(key string) *carrySession {
	cs := s.sessions[key]
	if cs == nil {
		cs = &carrySession{}
		s.sessions[key] = cs
	}
	return cs
}

// SetArchive stores the step summaries of a forced finish (the last
// cfg.Summaries of them), replacing any earlier archive.
func (s *CarryStore) SetArchive(session string, summaries []string) {
	if len(summaries) > s.cfg.Summaries {
		summaries = summaries[len(summaries)-s.cfg.Summaries:]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.session(session)
	cs.archive = slices.Clone(summaries)
	cs.archiveAt = s.clk.Now()
}

// ClearArchive drops the session's archive (its next turn has run).
func (s *CarryStore) ClearArchive(session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cs := s.sessions[session]; cs != nil {
		cs.archive = nil
	}
}

// Archive returns the session's valid carry-over archive, oldest first.
func (s *CarryStore) Archive(session string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.sessions[session]
	if cs == nil || len(cs.archive) == 0 || s.clk.Now().Sub(cs.archiveAt) >= s.cfg.SummaryTTL {
		return nil
	}
	return slices.Clone(cs.archive)
}

// AddCalls appends executed calls, keeping the newest cfg.Calls.
func (s *CarryStore) AddCalls(session string, calls ...CallRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.session(session)
	cs.calls = append(cs.calls, calls...)
	if len(cs.calls) > s.cfg.Calls {
		cs.calls = slices.Clone(cs.calls[len(cs.calls)-s.cfg.Calls:])
	}
}

// RecentCalls returns the session's tool calls younger than cfg.CallTTL,
// oldest first.
func (s *CarryStore) RecentCalls(session string) []CallRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.sessions[session]
	if cs == nil {
		return nil
	}
	now := s.clk.Now()
	var out []CallRecord
	for _, c := range cs.calls {
		if now.Sub(c.At) < s.cfg.CallTTL {
			out = append(out, c)
		}
	}
	return out
}

// MemoryBlocks are the rendered agent-memory blocks of a session, for the
// per-turn part of the prompt (after the cache breakpoint). Empty strings
// mean there is nothing to inject.
type MemoryBlocks struct {
	// RecentCalls is the "recent tool calls" block.
	RecentCalls string
	// CarryOver is the archive of the last turn, when it was forced to
	// finish.
	CarryOver string
}

// Blocks renders the session's blocks.
func (s *CarryStore) Blocks(session string) MemoryBlocks {
	var b MemoryBlocks
	if calls := s.RecentCalls(session); len(calls) > 0 {
		var sb strings.Builder
		sb.WriteString("## Recent tool calls (earlier turns)\n")
		for _, c := range calls {
			fmt.Fprintf(&sb, "- %s %s %s → %s\n", c.At.UTC().Format("15:04"), c.Tool, c.Args, c.Result)
		}
		b.RecentCalls = strings.TrimRight(sb.String(), "\n")
	}
	if arch := s.Archive(session); len(arch) > 0 {
		var sb strings.Builder
		sb.WriteString("## Carry-over from the last turn (it ran out of budget before finishing)\n")
		for _, l := range arch {
			sb.WriteString("- " + l + "\n")
		}
		b.CarryOver = strings.TrimRight(sb.String(), "\n")
	}
	return b
}

// ConfirmStore holds the one-time confirmation codes of extension-changing
// tools, per session and tool, in memory. It is safe for concurrent use.
type ConfirmStore struct {
	clk   clock.Clock
	ttl   time.Duration
	mu    sync.Mutex
	codes map[string]confirmCode // session + "\x00" + tool
	// newCode draws a 6-digit code; replaced in tests.
	newCode func() string
}

type confirmCode struct {
	code    string
	expires time.Time
}

// NewConfirmStore returns a store whose codes are valid for ttl (0 = 10
// min) on clk (nil = wall clock).
func NewConfirmStore(clk clock.Clock, ttl time.Duration) *ConfirmStore {
	if ttl <= 0 {
		ttl = DefaultConfirmTTL
	}
	return &ConfirmStore{clk: clock.OrReal(clk), ttl: ttl, codes: map[string]confirmCode{}, newCode: randomCode}
}

func randomCode() string {
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return fmt.Sprintf("%06d", n.Int64())
}

// Issue returns the pending code for the session's tool, or a new one
// valid for the store's TTL.
func (s *ConfirmStore) Issue(session, tool string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := session + "\x00" + tool
	now := s.clk.Now()
	if c, ok := s.codes[k]; ok && now.Before(c.expires) {
		return c.code
	}
	c := confirmCode{code: s.newCode(), expires: now.Add(s.ttl)}
	s.codes[k] = c
	return c.code
}

// Redeem consumes the session's code for tool when message contains it and
// it has not expired.
func (s *ConfirmStore) Redeem(session, tool, message string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := session + "\x00" + tool
	c, ok := s.codes[k]
	if !ok {
		return false
	}
	if !s.clk.Now().Before(c.expires) {
		delete(s.codes, k)
		return false
	}
	if !strings.Contains(message, c.code) {
		return false
	}
	delete(s.codes, k)
	return true
}

// ToolSnapshot is the part of a group session's agent state restored on its
// later turns: the catalog tools it loaded.
type ToolSnapshot struct {
	Loaded  []string
	SavedAt time.Time
}

// SnapshotStore persists tool snapshots per session (optional port; the
// store package may implement it). A snapshot older than
// LoopConfig.SnapshotTTL is ignored.
type SnapshotStore interface {
	LoadSnapshot(ctx context.Context, session string) (ToolSnapshot, bool, error)
	SaveSnapshot(ctx context.Context, session string, s ToolSnapshot) error
}

// MemorySnapshots is an in-memory [SnapshotStore].
type MemorySnapshots struct {
	mu sync.Mutex
	m  map[string]ToolSnapshot
}

// NewMemorySnapshots returns an empty in-memory snapshot store.
func NewMemorySnapshots() *MemorySnapshots { return &MemorySnapshots{m: map[string]ToolSnapshot{}} }

// LoadSnapshot returns the session's snapshot.
func (m *MemorySnapshots) LoadSnapshot(_ context.Context, session string) (ToolSnapshot, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[session]
	s.Loaded = slices.Clone(s.Loaded)
	return s, ok, nil
}

// SaveSnapshot stores the session's snapshot.
func (m *MemorySnapshots) SaveSnapshot(_ context.Context, session string, s ToolSnapshot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s.Loaded = slices.Clone(s.Loaded)
	m.m[session] = s
	return nil
}
