package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"sync"
)

// PrefixState is what a session remembers of its previous request's stable
// prefix to check the next one (the prefix may change only when the
// history window or the summary moved).
type PrefixState struct {
	// Len is the prefix length in canonical bytes; Hash its hex SHA-256.
	Len  int
	Hash string
	// Anchor and Summary identify the history window and summary
	// checkpoint; when either changes the prefix may change.
	Anchor, Summary string
}

// State returns the prefix state of a to keep for the next turn.
func (a *Assembled) State() PrefixState {
	return PrefixState{Len: len(a.prefix), Hash: a.PrefixHash, Anchor: a.HistoryAnchor, Summary: a.SummaryHash}
}

// Extends reports whether a's prefix starts with the previous prefix: the
// hash of its first prev.Len canonical bytes equals prev.Hash. A zero prev
// is always extended.
func (a *Assembled) Extends(prev PrefixState) bool {
	if prev.Hash == "" {
		return true
	}
	if len(a.prefix) < prev.Len {
		return false
	}
	sum := sha256.Sum256(a.prefix[:prev.Len])
	return hex.EncodeToString(sum[:]) == prev.Hash
}

// PrefixTracker checks, per session, that each turn's stable prefix extends
// the previous turn's, and logs "prompt_prefix_changed" when it does not
// outside an epoch advance or a summary checkpoint change. It keeps the
// last state per session in memory; a pipeline that wants the check across
// restarts stores Assembled.State itself and calls Assembled.Extends.
// Safe for concurrent use.
type PrefixTracker struct {
	// Logger receives the warnings (nil: discard).
	Logger *slog.Logger

	mu   sync.Mutex
	last map[string]PrefixState
}

// Observe records asm as the session's latest request. It returns false
// when the prefix changed unexpectedly (and logs it).
func (t *PrefixTracker) Observe(session string, asm *Assembled) bool {
	t.mu.Lock()
	if t.last == nil {
		t.last = make(map[string]PrefixState)
	}
	prev, seen := t.last[session]
	t.last[session] = asm.State()
	t.mu.Unlock()
	if !seen || prev.Anchor != asm.HistoryAnchor || prev.Summary != asm.SummaryHash || asm.Extends(prev) {
		return true
	}
	if t.Logger != nil {
		t.Logger.Warn("prompt_prefix_changed", "session", session,
			"prev_len", prev.Len, "len", len(asm.prefix), "anchor", asm.HistoryAnchor)
	}
	return false
}

// Forget drops a session's state.
func (t *PrefixTracker) Forget(session string) {
	t.mu.Lock()
	delete(t.last, session)
	t.mu.Unlock()
}
