package outbound

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// State is one piece of session state with a deadline: a stop window, a
// pause, a counter, a lane. It has the shape of gate.Flag, so the pipeline
// adapts its session-flag store to [StateStore] field by field.
type State struct {
	SessionKey string
	// Subject is who the state is about: "" for the whole session, else a
	// user id or a lane name.
	Subject string
	Name    string
	// Until is the deadline; the state is inactive from then on.
	Until time.Time
	// Value is extra state (a counter, timestamps).
	Value string
}

// Active reports whether s is still in force at now.
func (s State) Active(now time.Time) bool { return now.Before(s.Until) }

// StateStore is the session-state port of the review and the send lanes.
// package store implements it through its session flags; [MemoryState] is
// an in-memory implementation for tests.
type StateStore interface {
	// GetState returns the stored state, ok=false when there is none.
	// Expired states may be returned; callers check Active.
	GetState(ctx context.Context, sessionKey, subject, name string) (s State, ok bool, err error)
	// SetState stores (or replaces) a state.
	SetState(ctx context.Context, s State) error
}

// State names written by this package. The first two are the names package
// gate reads (its stop-window and suppression gates), so a stop window or a
// pause opened by the review stops later turns at the gates too.
const (
	// StateStopWindow: unprompted replies in the group stop until Until.
	StateStopWindow = "stop_window"
	// StatePause: replies to Subject (a user id) are paused until Until;
	// Value holds the reason.
	StatePause = "response_suppression"
	// StateLoopHits: timestamps of loop hits for Subject.
	StateLoopHits = "ai_reply_loop_hits"
	// StateRefusals: timestamps of refusals sent to Subject.
	StateRefusals = "refusal_hits"
	// StateGoodbyes: answered goodbyes of Subject in a private chat.
	StateGoodbyes = "private_goodbyes"
	// StateLastBotMessage: the time of the bot's last message in the
	// session (Value: unix milliseconds).
	StateLastBotMessage = "last_bot_message"
	// StateLane: a send lane of a group chat; Subject is the lane name.
	StateLane = "outbound_lane"
)

// MemoryState is an in-memory [StateStore]. The zero value is ready to use;
// it is safe for concurrent use.
type MemoryState struct {
	mu sync.Mutex
	m  map[[3]string]State
}

var _ StateStore = (*MemoryState)(nil)

// GetState implements StateStore.
func (m *MemoryState) GetState(_ context.Context, sessionKey, subject, name string) (State, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[[3]string{sessionKey, subject, name}]
	return s, ok, nil
}

// SetState implements StateStore.
func (m *MemoryState) SetState(_ context.Context, s State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[[3]string]State{}
	}
	m.m[[3]string{s.SessionKey, s.Subject, s.Name}] = s
	return nil
}

// All returns every stored state (tests use it), ordered by session,
// subject and name.
func (m *MemoryState) All() []State {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]State, 0, len(m.m))
	for _, s := range m.m {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b State) int {
		return strings.Compare(a.SessionKey+"\x00"+a.Subject+"\x00"+a.Name, b.SessionKey+"\x00"+b.Subject+"\x00"+b.Name)
	})
	return out
}

// activeState reads a state and reports whether it is active at now.
func activeState(ctx context.Context, st StateStore, session, subject, name string, now time.Time) (State, bool, error) {
	s, ok, err := st.GetState(ctx, session, subject, name)
	if err != nil || !ok {
		return State{}, false, err
	}
	return s, s.Active(now), nil
}

// extendState sets a state with deadline until unless an active one with a
// later deadline exists (a pause is extended, never shortened).
func extendState(ctx context.Context, st StateStore, s State, now time.Time) error {
	old, active, err := activeState(ctx, st, s.SessionKey, s.Subject, s.Name, now)
	if err != nil {
		return err
	}
	if active && old.Until.After(s.Until) {
		return nil
	}
	return st.SetState(ctx, s)
}

// countHit appends now to a windowed hit counter and returns the number of
// hits within the window (including this one).
func countHit(ctx context.Context, st StateStore, session, subject, name string, now time.Time, window time.Duration) (int, error) {
	var hits []int64
	if s, ok, err := st.GetState(ctx, session, subject, name); err != nil {
		return 0, err
	} else if ok {
		hits = parseHits(s.Value)
	}
	cut := now.Add(-window).UnixMilli()
	hits = slices.DeleteFunc(hits, func(ms int64) bool { return ms <= cut })
	hits = append(hits, now.UnixMilli())
	err := st.SetState(ctx, State{SessionKey: session, Subject: subject, Name: name, Until: now.Add(window), Value: formatHits(hits)})
	return len(hits), err
}

// resetHits clears a hit counter.
func resetHits(ctx context.Context, st StateStore, session, subject, name string, now time.Time) error {
	return st.SetState(ctx, State{SessionKey: session, Subject: subject, Name: name, Until: now})
}

func parseHits(v string) []int64 {
	var out []int64
	for f := range strings.SplitSeq(v, ",") {
		if n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func formatHits(hits []int64) string {
	parts := make([]string, len(hits))
	for i, h := range hits {
		parts[i] = strconv.FormatInt(h, 10)
	}
	return strings.Join(parts, ",")
}

// RecordBotMessage stores the time of the bot's last message in a session
// (StateLastBotMessage). The private closing check of the review is judged
// only within 3 minutes of it. [ChunkSender] calls it after each delivered
// reply when its config has a StateStore.
func RecordBotMessage(ctx context.Context, st StateStore, sessionKey string, at time.Time) error {
	return st.SetState(ctx, State{SessionKey: sessionKey, Name: StateLastBotMessage,
		Until: at.Add(24 * time.Hour), Value: strconv.FormatInt(at.UnixMilli(), 10)})
}

// lastBotMessage reads StateLastBotMessage; the zero time when unknown.
func lastBotMessage(ctx context.Context, st StateStore, sessionKey string) (time.Time, error) {
	s, ok, err := st.GetState(ctx, sessionKey, "", StateLastBotMessage)
	if err != nil || !ok {
		return time.Time{}, err
	}
	ms, err := strconv.ParseInt(s.Value, 10, 64)
	if err != nil {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms).UTC(), nil
}
