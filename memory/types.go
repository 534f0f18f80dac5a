package memory

import (
	"cmp"
	"errors"
	"time"
)

// Scope says whose a long-term fact is and where it may be recalled.
type Scope string

// The fact scopes.
const (
	// ScopeUser facts are about one user (SubjectUserID) and follow that
	// user into other chats of the same channel (see RecallConfig).
	ScopeUser Scope = "user"
	// ScopeGroup facts belong to the group chat they were learned in.
	ScopeGroup Scope = "group"
	// ScopePrivate facts belong to the private chat they were learned in.
	ScopePrivate Scope = "private"
	// ScopeGlobal facts are the bot's own, recalled everywhere.
	ScopeGlobal Scope = "global"
)

// Valid reports whether s is one of the four scopes.
func (s Scope) Valid() bool {
	return s == ScopeUser || s == ScopeGroup || s == ScopePrivate || s == ScopeGlobal
}

// Kind classifies a fact.
type Kind string

// The fact kinds.
const (
	KindFact        Kind = "fact"
	KindPreference  Kind = "preference"
	KindRelation    Kind = "relation"
	KindEpisode     Kind = "episode"
	KindInstruction Kind = "instruction"
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	switch k {
	case KindFact, KindPreference, KindRelation, KindEpisode, KindInstruction:
		return true
	}
	return false
}

// SourceType says whether a fact was stated or inferred.
type SourceType string

// The source types.
const (
	Explicit SourceType = "explicit"
	Inferred SourceType = "inferred"
)

// Status is the life-cycle state of a fact row.
type Status string

// The fact states.
const (
	StatusActive     Status = "active"
	StatusSuperseded Status = "superseded"
	StatusForgotten  Status = "forgotten"
)

// MaxEvidenceRunes bounds Fact.Evidence.
const MaxEvidenceRunes = 60

// Fact is one long-term memory item (layer 3 in the package doc). At most
// one row per
// (Scope, scope owner, SubjectUserID, Key) is active: the scope owner is the
// session for group and private facts, the platform for user facts and
// nothing for global facts. Writing a different content for the same key
// supersedes the active row (Version + 1, SupersedesID = old ID).
type Fact struct {
	ID            int64
	Scope         Scope
	SubjectUserID string
	Key           string
	Kind          Kind
	Content       string
	// Evidence is the supporting quote, at most 60 runes.
	Evidence string
	// SourceMessageIDs are the history keys (Entry.Key) the fact came from.
	SourceMessageIDs []string
	// SessionKey, ChatKind and Platform say where the fact was learned.
	SessionKey string
	ChatKind   string
	Platform   string
	// EventTime is the time of the newest source message.
	EventTime      time.Time
	SourceType     SourceType
	Confidence     float64
	Importance     float64
	Sensitive      bool
	ExpiresAt      time.Time // zero: never
	CreatedAt      time.Time
	UpdatedAt      time.Time
	LastVerifiedAt time.Time
	Version        int
	SupersedesID   int64
	Status         Status
}

// Core reports whether f is a core fact: always recalled for its subject.
func (f *Fact) Core(minConfidence, minImportance float64) bool {
	return f.Confidence >= minConfidence && f.Importance >= minImportance
}

// Change is one extraction result to apply: an upsert of a fact, or the
// forgetting of the active fact with the same scope, subject and key.
type Change struct {
	// Forget marks the matching active fact forgotten instead of writing
	// Fact.
	Forget bool
	Fact   Fact
}

// ApplyResult counts what applying changes did.
type ApplyResult struct {
	Inserted   int // new keys
	Superseded int // new versions of an existing key
	Refreshed  int // same content as the active row: sources and times merged
	Forgotten  int
}

// Message is one history row as memory search and summaries see it.
type Message struct {
	Key        string
	SessionKey string
	Platform   string
	SenderID   string
	SenderName string
	Direction  Direction
	Time       time.Time
	Text       string
	Recalled   bool
}

// FactFilter is the structured filter, the first step of recall.
type FactFilter struct {
	// SessionKey is the current chat.
	SessionKey string
	// Platform is the current channel's platform.
	Platform string
	// Participants are the user ids whose user-scoped facts are wanted.
	Participants []string
	// CrossGroup admits user-scoped facts learned in other group chats.
	CrossGroup bool
	// CrossChannel admits facts learned on other platforms.
	CrossChannel bool
	// Now decides expiry.
	Now time.Time
	// Limit bounds the candidates (≤ 0: 200).
	Limit int
}

// FactMatch is the text relevance of one fact.
type FactMatch struct {
	ID    int64
	Score float64 // BM25; > 0 when any query token matched
}

// HistoryQuery is a full-text search over message history.
type HistoryQuery struct {
	// Sessions are the chats searched (at least one).
	Sessions []string
	// Tokens are the query tokens (QueryTokens).
	Tokens []string
	// Before excludes messages at or after this time (zero: no bound),
	// e.g. the start of the recent history already in the prompt.
	Before time.Time
	// After excludes messages at or before this time (zero: no bound).
	After time.Time
	// SenderID restricts the search to one sender ("" = anyone).
	SenderID string
	// Limit bounds the hits (≤ 0: 50).
	Limit int
}

// HistoryHit is a history message matching a search, with its BM25 score.
type HistoryHit struct {
	Message
	Score float64
}

// ForgetOptions tune ForgetUser.
type ForgetOptions struct {
	// ExcludeHistory also hides the user's messages from memory search
	// (the rows stay in the transcript for conversation continuity).
	ExcludeHistory bool
}

// ForgetResult counts what "forget me" did; it never carries content.
type ForgetResult struct {
	Facts         int // facts marked forgotten
	JobsCancelled int // pending or running extraction jobs cancelled
	HistoryHidden bool
}

// Watermark is a position in a session's history: the last folded message.
// History is ordered by (event time, key).
type Watermark struct {
	Time time.Time
	Key  string
}

// IsZero reports whether w is the start of history.
func (w Watermark) IsZero() bool { return w.Time.IsZero() && w.Key == "" }

// Precedes reports whether e comes after the watermark (it is not folded
// into the summary that ends at w). Every entry comes after a zero
// watermark.
func (w Watermark) Precedes(e *Entry) bool {
	if w.IsZero() {
		return true
	}
	t := e.Event.Time
	return t.After(w.Time) || (t.Equal(w.Time) && cmp.Or(e.Key, e.Event.Key()) > w.Key)
}

// Summary is one summary checkpoint of a session (layer 2 in the package
// doc). Epoch
// n folds the messages in (From, Watermark] on top of epoch n−1's text.
type Summary struct {
	SessionKey string
	Epoch      int
	Text       string
	From       Watermark
	Watermark  Watermark
	// Messages is the number of messages folded by this epoch.
	Messages int
	// Version is the summary version it was computed with.
	Version int
	// InputHash identifies the folded input (previous text, messages and
	// version); a changed hash invalidates the checkpoint.
	InputHash string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Job is one durable extraction job: the message to learn from.
type Job struct {
	// MessageKey is the history key of the message; jobs are unique on it.
	MessageKey    string
	SessionKey    string
	Platform      string
	SubjectUserID string
	// AvailableAt delays the first attempt (zero: now).
	AvailableAt time.Time
}

// JobLease is a claimed job. Every claim increments Claims, which fences
// the lease: Complete, Retry and Extend succeed only for the current claim.
type JobLease struct {
	ID       int64
	Job      Job
	Owner    string
	Until    time.Time
	Attempts int
	Claims   int
}

// ErrLeaseLost is returned by the job operations when the lease expired and
// the job was claimed again, or the job was cancelled (forget me).
var ErrLeaseLost = errors.New("memory: job lease lost")

// ErrNotFound is returned when a requested row does not exist.
var ErrNotFound = errors.New("memory: not found")
