package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/personakit/persona/channel"
)

// ErrLost is returned by the methods of a Holding whose hold has ended
// (lost or released): the caller no longer holds the connection.
var ErrLost = errors.New("cluster: the hold has ended")

// ErrUnknownRequest is returned by Store.Result for a relayed request the
// store no longer has (finished long ago and deleted).
var ErrUnknownRequest = errors.New("cluster: unknown relayed request")

// ReadKeep is how long a store keeps the answer of a relayed call (any
// request but a send: a history read, a media fetch, a forward card, ...)
// after it finished (at most; see Holding.Prune): only the process that
// asked reads it, once, as soon as it is there.
const ReadKeep = time.Minute

// Store is the port a shared store offers so that processes can take
// turns holding a connection and relay sends and the calls of the
// channel's optional capabilities to its holder. The names it takes are
// Options.Name values: the same in every process for the same
// connection.
//
// Sends and calls are requests of one queue: all are claimed, finished,
// withdrawn and pruned alike, and their ids are of one kind. The store
// does not interpret a call: it keeps its kind, its payload and its
// answer as bytes.
type Store interface {
	// TryHold tries to become the holder of name without waiting. It
	// returns a nil Holding (and no error) when another process holds it.
	// On success the requests the previous holder had claimed and not
	// finished become StatusUnconfirmed (their followers are told), and
	// the published state of name says "not connected" until the new
	// holder publishes its own.
	TryHold(ctx context.Context, name string) (Holding, error)
	// LoadState returns the state the holder of name published and
	// whether some process holds name right now.
	LoadState(ctx context.Context, name string) (Status, error)
	// WatchState calls fn with the name whose published state or holder
	// may have changed, from any process, until cancel is called; with ""
	// when anything may have changed (notifications were missed). fn must
	// not block.
	WatchState(fn func(name string)) (cancel func())

	// Request asks the holder of name to send out, and returns the
	// request's current result (StatusPending for a new one). With
	// out.IdempotencyKey set there is one request per (name, key): asking
	// again for a send that is done returns its stored receipt and sends
	// nothing; one that is pending or claimed is returned as it is, to
	// wait for; one that failed, was cancelled or is unconfirmed is asked
	// again (pending anew).
	Request(ctx context.Context, name string, out channel.Outgoing, opt RequestOptions) (Result, error)
	// Call asks the holder of name to make a call of kind (any kind but
	// KindSend) with payload (its arguments, encoded by package cluster),
	// and returns the new request's result (StatusPending). Every call is
	// a request of its own, without an idempotency key. Its answer is
	// Result.Answer (and Result.Body), kept for ReadKeep at most.
	Call(ctx context.Context, name string, kind RequestKind, payload []byte, opt RequestOptions) (Result, error)
	// Result returns the current result of request id (ErrUnknownRequest
	// when the store no longer has it).
	Result(ctx context.Context, id int64) (Result, error)
	// Withdraw cancels request id if it is still pending, so that it is
	// never sent, and reports whether it did.
	Withdraw(ctx context.Context, id int64) (bool, error)
	// WatchRequests calls fn with the name that got a new pending request
	// (from any process), "" when anything may have changed, until cancel
	// is called. fn must not block.
	WatchRequests(fn func(name string)) (cancel func())
	// WatchResults calls fn with the id of a request that finished (from
	// any process), 0 when anything may have changed, until cancel is
	// called. fn must not block.
	WatchResults(fn func(id int64)) (cancel func())
}

// Holding is a hold on one name, taken with Store.TryHold: while it
// lasts, no other process holds the name. PublishState and Claim act
// only while the hold lasts (ErrLost after); Finish and Prune also after
// it ended, so that an outcome known late is still recorded when no new
// holder has settled the send yet.
type Holding interface {
	// Lost is closed when the hold ended: the store's connection that
	// keeps it failed or was closed, or Release was called.
	Lost() <-chan struct{}
	// Release gives the hold up (publishing "not connected"). It is
	// idempotent.
	Release() error
	// PublishState records st as the state of the connection, for the
	// other processes (Store.LoadState, Store.WatchState).
	PublishState(ctx context.Context, st channel.State) error
	// Claim takes up to limit pending requests of the name, oldest first,
	// and marks them claimed by this hold. Requests left pending past
	// their RequestOptions.Pending are cancelled instead.
	Claim(ctx context.Context, limit int) ([]Request, error)
	// Finish stores the outcome of a claimed request and tells its
	// follower. res.Status is StatusDone (with res.Receipt for a send,
	// res.Answer and res.Body for a call), StatusFailed (with res.Error),
	// StatusUnconfirmed or StatusCancelled (not sent).
	// It reports false when the request is no longer claimed by this hold
	// (another holder took over in between).
	Finish(ctx context.Context, id int64, res Result) (bool, error)
	// Prune deletes the finished requests of the name older than age,
	// and its finished calls older than ReadKeep (or age, when shorter).
	Prune(ctx context.Context, age time.Duration) error
}

// Status is what Store.LoadState knows about a name.
type Status struct {
	// State is the last state the holder published (zero when none was).
	State channel.State
	// Held: some process holds the name now.
	Held bool
}

// RequestOptions are the limits of a relayed request.
type RequestOptions struct {
	// Pending is how long the request may wait to be claimed; the holder
	// does not take it after that (0 = no limit).
	Pending time.Duration
	// Deadline is the follower's deadline (zero = none): the holder gives
	// up the request at that time, and does not start it after it.
	Deadline time.Time
}

// RequestKind tells what a relayed request asks the holder to do.
type RequestKind string

// The kinds of relayed requests: a send, and a call for each optional
// capability of a channel. The payload and the answer of a call are JSON
// written and read by package cluster (see the methods of the channel
// Share returns); the store keeps them as they are.
const (
	// KindSend: send Request.Out (channel.Channel's Send).
	KindSend RequestKind = "send"
	// KindHistory: read a page of a chat's history
	// (channel.HistoryFetcher).
	KindHistory RequestKind = "history"
	// KindChats: list the chats (channel.ChatLister).
	KindChats RequestKind = "chats"
	// KindMember: look a group member up (channel.MemberLookup).
	KindMember RequestKind = "member"
	// KindMedia: fetch a media reference's content
	// (channel.MediaFetcher); the bytes are Result.Body.
	KindMedia RequestKind = "media"
	// KindTyping: show the typing indicator (channel.Typer).
	KindTyping RequestKind = "typing"
	// KindRecall: delete a sent message (channel.Recaller).
	KindRecall RequestKind = "recall"
	// KindAnswerRequest: answer a friend request
	// (channel.RequestResponder).
	KindAnswerRequest RequestKind = "answer_request"
	// KindForward: send a merged-forward card (channel.ForwardSender).
	KindForward RequestKind = "forward"
)

// Request is a relayed request, as the holder claims it.
type Request struct {
	ID   int64
	Kind RequestKind
	// Out is the message to send (KindSend).
	Out channel.Outgoing
	// Payload is a call's arguments (any other kind), as Store.Call got
	// them.
	Payload []byte
	// Deadline is the follower's deadline (zero = none).
	Deadline time.Time
}

// RequestStatus is where a relayed request stands.
type RequestStatus string

// The statuses of a relayed request: pending → claimed → done, failed or
// unconfirmed; pending → cancelled.
const (
	// StatusPending: waiting for the holder.
	StatusPending RequestStatus = "pending"
	// StatusClaimed: the holder is sending it (making it, for a call).
	StatusClaimed RequestStatus = "claimed"
	// StatusDone: sent, and Result.Receipt is the platform's; for a
	// call, made, and Result.Answer (with Result.Body) is its answer.
	StatusDone RequestStatus = "done"
	// StatusFailed: the holder's send (or call) failed (Result.Error);
	// not sent.
	StatusFailed RequestStatus = "failed"
	// StatusUnconfirmed: the holder stopped while sending it; it may or
	// may not have reached the platform, and it is never sent again by
	// the relay on its own. A call the holder stopped in is unconfirmed
	// too (a read may simply be asked again).
	StatusUnconfirmed RequestStatus = "unconfirmed"
	// StatusCancelled: withdrawn before the holder took it; never sent.
	StatusCancelled RequestStatus = "cancelled"
)

// Final reports whether the status is an outcome (nothing more happens
// to the request unless it is asked again).
func (s RequestStatus) Final() bool {
	return s != StatusPending && s != StatusClaimed
}

// Result is a relayed request's status and outcome.
type Result struct {
	ID     int64
	Status RequestStatus
	// Receipt is a done send's receipt.
	Receipt channel.Receipt
	// Answer is a done call's answer, as the holder gave it to
	// Holding.Finish (nil for a send).
	Answer []byte
	// Body is the content a done media fetch read (nil when none).
	Body []byte
	// Error is the holder's send or call error (StatusFailed).
	Error *ErrorRecord
}

// ErrorRecord is a send (or call) error in a form that crosses
// processes: its text, and what errors.Is and errors.As found in it among
// the channel package's sentinels and error types. Err rebuilds an
// equivalent error.
type ErrorRecord struct {
	// Message is the original error's text.
	Message string `json:"message"`
	// Class is channel.Classify of the original error, by name.
	Class string `json:"class"`
	// Sentinels names the channel sentinel errors the original matched
	// (see sentinels), besides those the typed errors below imply.
	Sentinels []string `json:"sentinels,omitempty"`
	// RateLimited, Rejected and Muted copy the typed errors found in it.
	RateLimited *RateLimitedRecord `json:"rate_limited,omitempty"`
	Rejected    *RejectedRecord    `json:"rejected,omitempty"`
	Muted       *MutedRecord       `json:"muted,omitempty"`
}

// RateLimitedRecord is a channel.RateLimitedError in an ErrorRecord.
type RateLimitedRecord struct {
	RetryAfterMs int64 `json:"retry_after_ms"`
}

// RejectedRecord is a channel.RejectedError in an ErrorRecord.
type RejectedRecord struct {
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

// MutedRecord is a channel.MutedError in an ErrorRecord.
type MutedRecord struct {
	// UntilMs is the end of the mute in unix milliseconds (0 = unknown).
	UntilMs int64 `json:"until_ms,omitempty"`
}

// sentinels are the channel errors an ErrorRecord keeps, by name.
var sentinels = []struct {
	name string
	err  error
}{
	{"offline", channel.ErrOffline},
	{"kicked", channel.ErrKicked},
	{"media_invalid", channel.ErrMediaInvalid},
	{"rate_limited", channel.ErrRateLimited},
	{"rejected", channel.ErrRejected},
	{"muted", channel.ErrMuted},
	{"media_unavailable", channel.ErrMediaUnavailable},
	{"media_too_large", channel.ErrMediaTooLarge},
	{"unconfirmed", channel.ErrUnconfirmed},
}

// RecordError describes err for another process (nil for nil).
func RecordError(err error) *ErrorRecord {
	if err == nil {
		return nil
	}
	r := &ErrorRecord{Message: err.Error(), Class: channel.Classify(err).String()}
	var rl *channel.RateLimitedError
	if errors.As(err, &rl) && rl != nil {
		r.RateLimited = &RateLimitedRecord{RetryAfterMs: rl.RetryAfter.Milliseconds()}
	}
	var rj *channel.RejectedError
	if errors.As(err, &rj) && rj != nil {
		r.Rejected = &RejectedRecord{Code: rj.Code, Reason: rj.Reason}
	}
	var mu *channel.MutedError
	if errors.As(err, &mu) && mu != nil {
		r.Muted = &MutedRecord{}
		if !mu.Until.IsZero() {
			r.Muted.UntilMs = mu.Until.UnixMilli()
		}
	}
	for _, s := range sentinels {
		implied := (s.name == "rate_limited" && r.RateLimited != nil) ||
			(s.name == "rejected" && r.Rejected != nil) ||
			(s.name == "muted" && r.Muted != nil)
		if !implied && errors.Is(err, s.err) {
			r.Sentinels = append(r.Sentinels, s.name)
		}
	}
	return r
}

// Err rebuilds the error: a *RemoteError whose text is the original's and
// that matches (errors.Is, errors.As) the same channel sentinels and
// typed errors, so channel.Classify gives the same class.
func (r *ErrorRecord) Err() error {
	if r == nil {
		return nil
	}
	e := &RemoteError{Message: r.Message}
	if r.RateLimited != nil {
		e.causes = append(e.causes, &channel.RateLimitedError{RetryAfter: time.Duration(r.RateLimited.RetryAfterMs) * time.Millisecond})
	}
	if r.Rejected != nil {
		e.causes = append(e.causes, &channel.RejectedError{Code: r.Rejected.Code, Reason: r.Rejected.Reason})
	}
	if r.Muted != nil {
		m := &channel.MutedError{}
		if r.Muted.UntilMs != 0 {
			m.Until = time.UnixMilli(r.Muted.UntilMs).UTC()
		}
		e.causes = append(e.causes, m)
	}
	for _, name := range r.Sentinels {
		for _, s := range sentinels {
			if s.name == name {
				e.causes = append(e.causes, s.err)
			}
		}
	}
	return e
}

// RemoteError is a send or call error that happened in the
// process holding the connection, rebuilt in the process that relayed the
// request: it prints the original text and unwraps to the channel
// sentinels and typed errors the original matched.
type RemoteError struct {
	// Message is the original error's text.
	Message string
	causes  []error
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("cluster: in the holding process: %s", e.Message)
}

// Unwrap returns the channel errors the original matched.
func (e *RemoteError) Unwrap() []error { return e.causes }
