package channel

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel send errors. Adapters return them (or wrap them with %w); callers
// test with errors.Is.
var (
	// ErrOffline: the transport or account is offline. Fail fast; the turn is
	// retried after reconnect.
	ErrOffline = errors.New("channel: offline")
	// ErrKicked: the bot is no longer in the chat (kicked, group gone).
	ErrKicked = errors.New("channel: kicked from chat")
	// ErrMediaInvalid: the platform rejected an attachment as invalid.
	ErrMediaInvalid = errors.New("channel: media rejected")
	// ErrRateLimited matches any *RateLimitedError.
	ErrRateLimited = errors.New("channel: rate limited")
	// ErrRejected matches any *RejectedError.
	ErrRejected = errors.New("channel: rejected")
	// ErrMuted matches any *MutedError.
	ErrMuted = errors.New("channel: muted")
	// ErrMediaUnavailable is returned by MediaFetcher when the platform no
	// longer has the media (expired or deleted) or refuses it for good.
	ErrMediaUnavailable = errors.New("channel: media unavailable")
	// ErrMediaTooLarge is returned by MediaFetcher when the media is
	// larger than MediaRequest.MaxBytes.
	ErrMediaTooLarge = errors.New("channel: media too large")
	// ErrUnconfirmed: the message may or may not have reached the
	// platform (a send relayed to another process that died while it was
	// sending). Unlike every other send error it does not mean "not
	// delivered": the delivery ledger keeps the chunk's intent, so a
	// later attempt looks for the chunk in the chat instead of sending
	// it again. It classifies as transient.
	ErrUnconfirmed = errors.New("channel: delivery unconfirmed")
)

// RateLimitedError says the platform asked to slow down.
type RateLimitedError struct {
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("channel: rate limited, retry after %s", e.RetryAfter)
}

// Is makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitedError) Is(target error) bool { return target == ErrRateLimited }

// RejectedError is a definitive rejection: sending the same message again
// will fail again, so it is never retried.
type RejectedError struct {
	// Code is the platform's status or return code, as text.
	Code   string
	Reason string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("channel: rejected (code %s): %s", e.Code, e.Reason)
}

// Is makes errors.Is(err, ErrRejected) true.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// MutedError says the bot is muted in the chat, until Until when known.
type MutedError struct {
	Until time.Time
}

func (e *MutedError) Error() string {
	if e.Until.IsZero() {
		return "channel: muted"
	}
	return "channel: muted until " + e.Until.UTC().Format(time.RFC3339)
}

// Is makes errors.Is(err, ErrMuted) true.
func (e *MutedError) Is(target error) bool { return target == ErrMuted }

// ErrorClass is the coarse class of a send error.
type ErrorClass int

// The error classes, from Classify.
const (
	ClassNone ErrorClass = iota
	ClassTransient
	ClassOffline
	ClassRateLimited
	ClassRejected
	ClassKicked
	ClassMuted
	ClassMediaInvalid
)

// String names the class.
func (c ErrorClass) String() string {
	names := [...]string{"none", "transient", "offline", "rate_limited", "rejected", "kicked", "muted", "media_invalid"}
	if c < 0 || int(c) >= len(names) {
		return fmt.Sprintf("class(%d)", int(c))
	}
	return names[c]
}

// Definitive reports whether retrying the same send cannot succeed.
func (c ErrorClass) Definitive() bool {
	return c == ClassRejected || c == ClassKicked || c == ClassMuted
}

// Classify returns the class of a send error; nil is ClassNone and any
// unclassified error is ClassTransient.
func Classify(err error) ErrorClass {
	switch {
	case err == nil:
		return ClassNone
	case errors.Is(err, ErrKicked):
		return ClassKicked
	case errors.Is(err, ErrMuted):
		return ClassMuted
	case errors.Is(err, ErrRejected):
		return ClassRejected
	case errors.Is(err, ErrOffline):
		return ClassOffline
	case errors.Is(err, ErrRateLimited):
		return ClassRateLimited
	case errors.Is(err, ErrMediaInvalid):
		return ClassMediaInvalid
	}
	return ClassTransient
}
