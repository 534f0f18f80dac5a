package gate

import (
	"context"
	"time"
)

// Flag is a session flag with a deadline: a stop window, a pause, a cooldown,
// a mute.
type Flag struct {
	SessionKey string
	// Subject is who the flag is about ("" for the whole session, else a
	// user id or a lane name).
	Subject string
	Name    string
	// Until is the deadline; the flag is inactive from then on.
	Until time.Time
	// Value is optional extra state (a counter, a JSON blob).
	Value string
}

// Active reports whether the flag is still in force at now.
func (f Flag) Active(now time.Time) bool { return now.Before(f.Until) }

// Flags is the session-flag port.
type Flags interface {
	// SetFlag stores (or replaces) a flag.
	SetFlag(ctx context.Context, f Flag) error
	// GetFlag returns the stored flag, ok=false when there is none. Expired
	// flags may be returned; check Active.
	GetFlag(ctx context.Context, sessionKey, subject, name string) (f Flag, ok bool, err error)
	// ClearFlag removes a flag.
	ClearFlag(ctx context.Context, sessionKey, subject, name string) error
}
