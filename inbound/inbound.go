package inbound

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outcome"
)

// Outcome codes decided by the queue stage.
const (
	// DroppedRetriesExhausted: the item failed its last allowed attempt.
	DroppedRetriesExhausted outcome.Code = "dropped_retries_exhausted"
	// IgnoredStale: the message is older than the replay cutoff.
	IgnoredStale outcome.Code = "ignored_stale"
	// BackfillHistoryOnly: a backfilled message kept as history only.
	BackfillHistoryOnly outcome.Code = "backfill_history_only"
)

// Priorities of queue items (claim order is priority DESC, event time ASC,
// id ASC).
const (
	PriorityDirect = 100
	PriorityQuote  = 80
	PriorityLink   = 60
	PriorityOther  = 0
)

// Status is an item's queue state.
type Status string

// The item states.
const (
	StatusPending Status = "pending"
	StatusLeased  Status = "leased"
	StatusDone    Status = "done"
)

// ErrLeaseLost is returned when a lease operation is attempted by a worker
// that no longer holds the lease (it expired and was claimed again, or the
// item is already done). Nothing is changed.
var ErrLeaseLost = errors.New("inbound: lease lost")

// ErrNotFound is returned by Lookup for an unknown id.
var ErrNotFound = errors.New("inbound: not found")

// Item is one inbound message to enqueue.
type Item struct {
	// ID is the canonical key, Event.Key(). Enqueue fills it when empty.
	ID string
	// SessionKey is the event's session; Enqueue fills it from the event
	// when empty.
	SessionKey string
	Event      channel.Event
	Priority   int
	// HistoryOnly items are stored and completed as backfill_history_only.
	HistoryOnly bool
	// AvailableAt delays the first claim (zero = now). Media-only messages
	// use now + 15 s so a text from the same sender can absorb them.
	AvailableAt time.Time
}

// Lease is a claimed item held by one worker.
type Lease struct {
	Item
	// Owner identifies the holder ("<process uuid>/<worker>").
	Owner string
	// Until is the lease expiry.
	Until time.Time
	// Attempts counts the charged attempts of this item, this one included
	// (Snooze and Release give an attempt back).
	Attempts int
	// Claims counts every claim of this item, this one included, charged
	// or not; it never decreases. Claims > 1 means an earlier attempt may
	// have left work behind (a draft, delivered chunks). It is also the
	// lease's fencing token.
	Claims int
	// Held reports a claim the queue holds in memory only (see
	// Limits.HoldBelow): the lease's first operation (Extend, Complete,
	// Retry, Snooze, Release) stores it. A process that dies first leaves
	// the item as it was before the claim, claimable again with that
	// attempt not counted, so a holder about to do something that could
	// kill the process (call a model, send) extends the lease first
	// (Queue.Extend clears Held once the claim is stored).
	Held bool
	// Orphaned reports an item whose previous claim was held by a process
	// that died while it ran (the store freed that lease when it was
	// opened again): the item may be the one that killed the process. The
	// pipeline runs such an item alone, with no other turn beside it, so
	// that a message that keeps crashing the process is charged its
	// attempts alone while the others flow. A Queue that cannot tell
	// leaves it false.
	Orphaned bool
}

// Limits bound one Claim call.
type Limits struct {
	// Max is the most items to claim (the free worker count).
	Max int
	// PerGroup and PerPrivate cap the unexpired leases per session (0 =
	// defaults 3 and 2).
	PerGroup   int
	PerPrivate int
	// Lease is the lease length (0 = DefaultLease).
	Lease time.Duration
	// Owner is the lease owner to record.
	Owner string
	// HoldBelow lets the queue hold the claims of items with a priority
	// below it in memory until the lease's first operation (Lease.Held):
	// a turn that ends early, in the gates, then costs one write. Claims
	// of items at or above it are stored before Claim returns. 0 stores
	// every claim; a queue that always stores claims ignores it.
	HoldBelow int
}

// Defaults of the queue stage.
const (
	DefaultLease       = 10 * time.Minute
	DefaultRenewEvery  = 2 * time.Minute
	DefaultPerGroup    = 3
	DefaultPerPrivate  = 2
	DefaultMaxAttempts = 5
	DefaultRetryBase   = 5 * time.Second
	DefaultRetryCap    = 5 * time.Minute
	// MediaMergeWindow delays media-only messages so a text turn of the
	// same sender can absorb them.
	MediaMergeWindow = 15 * time.Second
)

// RetryDelay is the delay before the next attempt after attempt n (1-based)
// failed: base × 2^(n−1), capped. With the defaults: 5, 10, 20, 40 s.
func RetryDelay(attempt int, base, maxDelay time.Duration) time.Duration {
	if base <= 0 {
		base = DefaultRetryBase
	}
	if maxDelay <= 0 {
		maxDelay = DefaultRetryCap
	}
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		d *= 2
		if d >= maxDelay {
			return maxDelay
		}
	}
	return min(d, maxDelay)
}

// DeliveryStage is how far a reply got; stages only move forward.
type DeliveryStage string

// The delivery stages, in order. Failed never overwrites Acknowledged or
// EchoPersisted.
const (
	StageNone          DeliveryStage = ""
	StageGenerated     DeliveryStage = "generated"
	StageSendAttempted DeliveryStage = "send_attempted"
	StageAcknowledged  DeliveryStage = "acknowledged"
	StageEchoPersisted DeliveryStage = "echo_persisted"
	StageFailed        DeliveryStage = "failed"
)

// Tokens are the token counts of one model purpose in a turn.
type Tokens struct {
	Purpose     string `json:"purpose"`
	Model       string `json:"model,omitempty"`
	Input       int    `json:"input"`
	CachedInput int    `json:"cached_input"`
	Output      int    `json:"output"`
}

// Timings are the turn's milestones; zero values are omitted.
type Timings struct {
	GatesDone       time.Time
	GenerationStart time.Time
	GenerationEnd   time.Time
	FirstSend       time.Time
	FirstAck        time.Time
}

// Outcome is the terminal record of an item.
type Outcome struct {
	Code   outcome.Code
	Reason string
	Stage  DeliveryStage
	// OutboundIDs are the platform ids of messages sent for this item.
	OutboundIDs []string
	// MergedInto is the id of the turn that absorbed this item, if any.
	MergedInto string
	Timings    Timings
	Tokens     []Tokens
	// Kind is the turn kind (chat, proactive, scheduled, notice).
	Kind string
	// Trail is the path the message took through the stages (nil when the
	// item ended before any stage ran, or was recorded by an older
	// version).
	Trail *Trail
}

// Record is the read view of one item (the event log row).
type Record struct {
	ID          string
	SessionKey  string
	SenderID    string
	MessageID   string
	Text        string
	Source      channel.Source
	Priority    int
	Status      Status
	Attempts    int
	HistoryOnly bool
	EventTime   time.Time
	AvailableAt time.Time
	EnqueuedAt  time.Time
	FirstClaim  time.Time
	CompletedAt time.Time
	LastError   string
	Outcome     Outcome
}

// Queue is the durable inbound queue port.
type Queue interface {
	// Enqueue stores the item (and its history row) durably. It returns
	// enqueued=false when the item already existed; a still-pending item then
	// gets priority max(old, new) and a refreshed payload, and a delivery
	// that is not history-only clears its history-only mark (a message a
	// reconnect backfill queued as history only that then arrives live is
	// handled as live).
	Enqueue(ctx context.Context, it Item) (enqueued bool, err error)
	// Record stores an item that is terminal from the start (a notice, an
	// admission refusal) with its outcome. Like Enqueue it is idempotent and
	// returns false when the item already existed.
	Record(ctx context.Context, it Item, o Outcome) (bool, error)
	// Claim leases up to limits.Max claimable items in priority order,
	// honouring per-session in-flight limits, in one atomic step.
	Claim(ctx context.Context, limits Limits) ([]Lease, error)
	// Extend renews the lease to now + d, storing a held claim (and
	// clearing l.Held).
	Extend(ctx context.Context, l *Lease, d time.Duration) error
	// Complete ends the item with its outcome.
	Complete(ctx context.Context, l Lease, o Outcome) error
	// Retry returns the item to pending, claimable from at; the attempt that
	// failed stays counted. cause is kept as last_error.
	Retry(ctx context.Context, l Lease, at time.Time, cause error) error
	// Snooze is Retry without charging the attempt (offline, send-lane
	// backoff, rate limit).
	Snooze(ctx context.Context, l Lease, at time.Time, reason string) error
	// Release gives the lease back at once without charging the attempt
	// (graceful shutdown).
	Release(ctx context.Context, l Lease) error
	// ReleaseExpired returns every item whose lease has expired to pending
	// and reports how many.
	ReleaseExpired(ctx context.Context) (int, error)
	// NextAvailable reports the earliest time a pending item becomes
	// claimable, or ok=false when nothing is pending.
	NextAvailable(ctx context.Context) (at time.Time, ok bool, err error)
	// Lookup returns one item's record, or ErrNotFound.
	Lookup(ctx context.Context, id string) (Record, error)
}

// Checkpoints stores the per-bot "last seen online" time the replay cutoff
// is computed from.
type Checkpoints interface {
	SaveCheckpoint(ctx context.Context, bot string, at time.Time) error
	// LoadCheckpoint returns ok=false when no checkpoint was saved.
	LoadCheckpoint(ctx context.Context, bot string) (at time.Time, ok bool, err error)
}

// ReplayCutoff returns max(disconnectedAt − padding, now − maxAge). A zero
// disconnectedAt (never connected) gives now − maxAge.
func ReplayCutoff(disconnectedAt, now time.Time, padding, maxAge time.Duration) time.Time {
	floor := now.Add(-maxAge)
	if disconnectedAt.IsZero() {
		return floor
	}
	c := disconnectedAt.Add(-padding)
	if c.Before(floor) {
		return floor
	}
	return c
}

// Waker is implemented by a Queue that several processes share:
// OnClaimable calls fn whenever an item may have become claimable through
// another process (an enqueue, a retry or release, leases freed after a
// process died), so that idle workers wake at once without polling. fn
// must not block. A call may be spurious; the returned function stops the
// calls.
type Waker interface {
	OnClaimable(fn func()) (stop func())
}

// ErrInvalidItem is returned (wrapped) by Normalize for an item a Queue
// must refuse: one without an id, or without a session key.
var ErrInvalidItem = errors.New("inbound: invalid item")

// Normalize fills the item's ID and SessionKey from its event when they
// are empty, as Enqueue and Record document, and fails with
// ErrInvalidItem when either is still missing. Queue implementations call
// it first.
func (it *Item) Normalize() error {
	if it.ID == "" {
		it.ID = it.Event.Key()
	}
	if it.SessionKey == "" {
		it.SessionKey = it.Event.SessionKey
	}
	switch {
	case it.ID == "":
		return fmt.Errorf("%w: item without an id", ErrInvalidItem)
	case it.SessionKey == "":
		return fmt.Errorf("%w: item %s without a session key (set Item.SessionKey or Event.SessionKey)", ErrInvalidItem, it.ID)
	}
	return nil
}

// LimitKind is the chat kind whose in-flight limit (Limits.PerPrivate or
// PerGroup) applies to the item: the event's chat kind, else the kind its
// session key names, else group.
func (it *Item) LimitKind() channel.ChatKind {
	if it.Event.Chat.Kind.Valid() {
		return it.Event.Chat.Kind
	}
	if p, err := channel.ParseSessionKey(it.SessionKey); err == nil {
		return p.Chat.Kind
	}
	return channel.Group
}
