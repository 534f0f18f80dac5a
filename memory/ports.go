package memory

import (
	"context"
	"time"
)

// FactStore holds the long-term facts.
type FactStore interface {
	// CandidateFacts returns the active, unexpired facts passing the
	// structured filter f (recall's first step), most important first, at
	// most f.Limit.
	CandidateFacts(ctx context.Context, f FactFilter) ([]Fact, error)
	// MatchFacts scores the facts with the given ids against the query
	// tokens by full-text relevance; facts that match no token are left
	// out.
	MatchFacts(ctx context.Context, ids []int64, tokens []string) ([]FactMatch, error)
	// ApplyChanges writes changes outside any job (an owner's edit, an
	// import).
	ApplyChanges(ctx context.Context, changes []Change) (ApplyResult, error)
	// TouchFacts sets last_verified_at of the facts to at.
	TouchFacts(ctx context.Context, ids []int64, at time.Time) error
	// ForgetUser forgets every fact whose subject is the user on the
	// platform, erasing content and evidence, cancels the user's pending
	// and running extraction jobs and, with opts.ExcludeHistory, hides the
	// user's messages from memory search.
	ForgetUser(ctx context.Context, platform, userID string, opts ForgetOptions) (ForgetResult, error)
}

// HistorySearch is full-text search over the message history.
type HistorySearch interface {
	// SearchHistory returns the best-scoring messages matching any of the
	// query tokens in the given sessions, excluding recalled messages and
	// the messages of users hidden by ForgetUser, best first.
	SearchHistory(ctx context.Context, q HistoryQuery) ([]HistoryHit, error)
	// Message returns one history message by key (ErrNotFound if absent).
	Message(ctx context.Context, key string) (Message, error)
	// MessagesBefore returns up to limit messages of the session strictly
	// before the watermark, oldest first.
	MessagesBefore(ctx context.Context, sessionKey string, before Watermark, limit int) ([]Message, error)
}

// JobStore is the durable extraction queue, with the same
// lease and claim design as the inbound queue.
type JobStore interface {
	// EnqueueJob adds a pending job; a second job for the same message is
	// ignored (false).
	EnqueueJob(ctx context.Context, j Job) (bool, error)
	// ClaimJobs leases up to n jobs that are pending and available or whose
	// lease expired, oldest first, each for lease. Every claim counts an
	// attempt.
	ClaimJobs(ctx context.Context, owner string, n int, lease time.Duration) ([]JobLease, error)
	// ExtendJob moves the lease's deadline to now + lease.
	ExtendJob(ctx context.Context, l JobLease, lease time.Duration) (JobLease, error)
	// CompleteJob applies the changes and marks the job done in one
	// transaction, or returns ErrLeaseLost and writes nothing.
	CompleteJob(ctx context.Context, l JobLease, changes []Change) (ApplyResult, error)
	// RetryJob releases the job to be claimed again at the given time, or,
	// when dead is set, marks it failed for good.
	RetryJob(ctx context.Context, l JobLease, at time.Time, cause error, dead bool) error
}

// SummaryStore holds the summary checkpoints and reads the history they
// fold.
type SummaryStore interface {
	// LatestSummary returns the newest checkpoint of the session
	// (ErrNotFound if none).
	LatestSummary(ctx context.Context, sessionKey string) (Summary, error)
	// SummaryAt returns epoch n of the session (ErrNotFound if none).
	SummaryAt(ctx context.Context, sessionKey string, epoch int) (Summary, error)
	// SaveSummary inserts or replaces the checkpoint (SessionKey, Epoch).
	SaveSummary(ctx context.Context, s Summary) error
	// MessagesAfter returns up to limit chat messages (notices excluded) of
	// the session after the watermark, oldest first, recalled ones included
	// (Recalled set).
	MessagesAfter(ctx context.Context, sessionKey string, after Watermark, limit int) ([]Message, error)
	// CountAfter counts the chat messages of the session after the
	// watermark.
	CountAfter(ctx context.Context, sessionKey string, after Watermark) (int, error)
}

// Store is every port the default memory implementations use; package
// store implements it.
type Store interface {
	FactStore
	HistorySearch
	JobStore
	SummaryStore
}
