package memory

import (
	"context"
	"time"

	"github.com/personakit/persona/channel"
)

// Direction says whether a history row came in, went out or is a notice.
type Direction string

// The history directions.
const (
	In     Direction = "in"
	Out    Direction = "out"
	Notice Direction = "notice"
)

// Entry is one row of chat history.
type Entry struct {
	// Key is the event's canonical key (channel.Event.Key).
	Key        string
	SessionKey string
	Direction  Direction
	Event      channel.Event
	// RecalledAt is set once the message was recalled.
	RecalledAt time.Time
}

// History is the chat transcript port.
type History interface {
	// Append stores an entry; a second Append with the same Key updates the
	// stored payload instead of adding a row.
	Append(ctx context.Context, e Entry) error
	// Recent returns up to limit of the newest entries of a session, oldest
	// first.
	Recent(ctx context.Context, sessionKey string, limit int) ([]Entry, error)
	// MarkRecalled records that the message with this key was recalled.
	MarkRecalled(ctx context.Context, key string, at time.Time) error
}

// RecentViewer is an optional capability of a History (detected by type
// assertion): Recent without a copy. The pipeline reads a session's newest
// entries on every turn; a History that keeps them in memory can lend them.
type RecentViewer interface {
	// RecentView returns what Recent returns, in a slice that may be shared
	// with the History and with other callers: the caller must not modify
	// its entries. Appending to it is safe (its capacity ends at its
	// length).
	RecentView(ctx context.Context, sessionKey string, limit int) ([]Entry, error)
}

// RecentOf is h.RecentView when h implements RecentViewer, else h.Recent:
// the newest limit entries of the session, not to be modified.
func RecentOf(ctx context.Context, h History, sessionKey string, limit int) ([]Entry, error) {
	if v, ok := h.(RecentViewer); ok {
		return v.RecentView(ctx, sessionKey, limit)
	}
	return h.Recent(ctx, sessionKey, limit)
}
