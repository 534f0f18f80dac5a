package outbound

import (
	"context"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outcome"
)

// Chunk is one outgoing message of a reply.
type Chunk struct {
	Text     string          `json:"text"`
	ReplyTo  string          `json:"reply_to,omitempty"`
	Mentions []string        `json:"mentions,omitempty"`
	Media    []channel.Media `json:"media,omitempty"`
}

// Draft is the shaped reply of a turn, persisted before its first chunk is
// sent so that a retry resumes it instead of regenerating.
type Draft struct {
	TurnID     string       `json:"turn_id"`
	SessionKey string       `json:"session_key"`
	Chat       channel.Chat `json:"chat"`
	Chunks     []Chunk      `json:"chunks"`
	// Code and Reason are the outcome the turn records once delivered.
	Code   outcome.Code `json:"code"`
	Reason string       `json:"reason,omitempty"`
}

// SlotState is the state of one chunk in the ledger.
type SlotState string

// The slot states.
const (
	// SlotIntent: written before the platform call; outcome unknown after a
	// crash.
	SlotIntent SlotState = "intent"
	// SlotSent: the platform acknowledged the chunk.
	SlotSent SlotState = "sent"
)

// Slot is one chunk's ledger row.
type Slot struct {
	TurnID      string
	N           int
	Fingerprint string
	State       SlotState
	MessageIDs  []string
	SentAt      time.Time
	// IntentAt is when an intent was recorded (zero when unknown); the
	// exit looks back to it when it settles an intent a crash left.
	IntentAt time.Time
}

// Ledger is the delivery-ledger port.
type Ledger interface {
	// SaveDraft stores the draft of a turn unless one is already stored; it
	// returns the stored draft (the existing one wins).
	SaveDraft(ctx context.Context, d Draft) (Draft, error)
	// LoadDraft returns the turn's draft, ok=false when none was saved.
	LoadDraft(ctx context.Context, turnID string) (d Draft, ok bool, err error)
	// Slots returns the turn's ledger rows ordered by slot number.
	Slots(ctx context.Context, turnID string) ([]Slot, error)
	// MarkIntent records that chunk n is about to be sent. It does not
	// downgrade a sent slot.
	MarkIntent(ctx context.Context, turnID string, n int, fingerprint string) error
	// MarkSent records the platform ids of a delivered chunk.
	MarkSent(ctx context.Context, turnID string, n int, messageIDs []string, at time.Time) error
	// ClearIntent removes an intent slot whose send is known to have failed
	// (the platform answered with an error), so a retry sends it again. A
	// sent slot is never removed.
	ClearIntent(ctx context.Context, turnID string, n int) error
}

// DraftIntentLedger is a Ledger that can store a turn's draft and the
// intent of its first chunk in one atomic write. [ChunkSender] uses it for
// a new reply that does not go out as a merged-forward card, which saves a
// write per reply; a crash leaves either both or neither.
type DraftIntentLedger interface {
	Ledger
	// SaveDraftIntent saves d as SaveDraft does and, when the stored draft
	// is d (this call saved it, or an equal one was stored), records slot 0
	// as an intent with fingerprint fp as MarkIntent does, in the same
	// write. intent reports whether slot 0 was recorded; when it is false
	// the caller marks the stored draft's first chunk itself.
	SaveDraftIntent(ctx context.Context, d Draft, fp string) (stored Draft, intent bool, err error)
}
