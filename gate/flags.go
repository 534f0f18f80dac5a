package gate

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Flag is a session flag with a deadline: a stop window, a pause, a cooldown,
// a mute.
type Flag struct {
	// SessionKey is the session the flag belongs to.
	SessionKey string
	// Subject is who the flag is about ("" for the whole session, else a
	// user id or a lane name).
	Subject string
	// Name is the flag name (see the Flag… constants).
	Name string
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

// SubjectFlagProber is implemented by Flags stores that can tell at once
// whether a session has any subject-specific flag of a name (Subject ≠
// ""). FlagCache uses it so that a chat where nobody has, say, a
// per-user suppression costs one read for all its members instead of one
// per member.
type SubjectFlagProber interface {
	HasSubjectFlags(ctx context.Context, sessionKey, name string) (bool, error)
}

// BatchFlags is implemented by Flags that can store several flags in one
// write (the SQLite store, where the write is atomic, and a FlagCache,
// which passes the batch on). [FlagQuota] writes its counters through it
// when available.
type BatchFlags interface {
	Flags
	// SetFlags stores (or replaces) every flag of fs.
	SetFlags(ctx context.Context, fs []Flag) error
}

// SetFlags stores every flag of fs: in one write when f implements
// [BatchFlags], else one SetFlag after the other (stopping at the first
// error).
func SetFlags(ctx context.Context, f Flags, fs []Flag) error {
	if b, ok := f.(BatchFlags); ok {
		return b.SetFlags(ctx, fs)
	}
	for _, fl := range fs {
		if err := f.SetFlag(ctx, fl); err != nil {
			return err
		}
	}
	return nil
}

// Flag names used by this package's gates and helpers (and by the router's
// chat cooldown). Subject is "" unless noted.
const (
	// FlagUnavailable marks a group the bot is no longer in (G1). Value
	// holds the mark time (unix ms) and a reason.
	FlagUnavailable = "group_unavailable"
	// FlagMuted marks the bot muted in a group until Until (G4).
	FlagMuted = "bot_muted"
	// FlagSuppressed pauses replies to Subject (a user id; "" = everyone
	// in the chat) until Until (G6). Value holds the reason.
	FlagSuppressed = "response_suppression"
	// FlagStopWindow silences unprompted replies in a group until Until
	// (G11).
	FlagStopWindow = "stop_window"
	// FlagQuietReply records the last quiet-hours reply of a chat; no new
	// one is sent before Until.
	FlagQuietReply = "quiet_reply"
	// FlagChatCooldown blocks chat-in replies in a group until Until (set
	// after a chat-in reply was sent; read by the router).
	FlagChatCooldown = "chat_cooldown"
	// FlagSendMode is a group's proactive switch set in chat (the owner's
	// /send): Value "on" or "off" overrides the policy for unprompted
	// replies until cleared (/send inherit). Read by G10 and
	// [Rules.ProactiveIn].
	FlagSendMode = "send_mode"
)

// The values of FlagSendMode, and SendInherit, which clears it.
const (
	SendOn      = "on"
	SendOff     = "off"
	SendInherit = "inherit"
)

// SetSendMode stores a session's proactive switch: SendOn or SendOff
// override the policy, SendInherit returns the decision to it.
func SetSendMode(ctx context.Context, f Flags, session, mode string) error {
	switch mode {
	case SendOn, SendOff:
		return f.SetFlag(ctx, Flag{SessionKey: session, Name: FlagSendMode, Until: forever, Value: mode})
	case SendInherit:
		return f.ClearFlag(ctx, session, "", FlagSendMode)
	}
	return fmt.Errorf("gate: send mode %q is not on, off or inherit", mode)
}

// SendMode returns a session's proactive switch: SendOn, SendOff or
// SendInherit when none is set.
func SendMode(ctx context.Context, f Flags, session string, now time.Time) (string, error) {
	fl, ok, err := f.GetFlag(ctx, session, "", FlagSendMode)
	if err != nil {
		return "", fmt.Errorf("gate: read send mode: %w", err)
	}
	if ok && fl.Active(now) && (fl.Value == SendOn || fl.Value == SendOff) {
		return fl.Value, nil
	}
	return SendInherit, nil
}

// forever is the deadline of marks that last until something clears them.
var forever = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

// OpenStopWindow opens (or renews) the group stop window of a session:
// unprompted replies stop with ignored_stop_requested until now+window
// (window <= 0 means DefaultStopWindow).
func OpenStopWindow(ctx context.Context, f Flags, session string, now time.Time, window time.Duration) error {
	if window <= 0 {
		window = DefaultStopWindow
	}
	return f.SetFlag(ctx, Flag{SessionKey: session, Name: FlagStopWindow, Until: now.Add(window)})
}

// Suppress pauses replies to user in a session until until (user "" pauses
// the whole chat), for example 30 minutes after a [[PAUSE_30M]] marker, a
// stop, repeated refusals or a loop. An existing suppression with a later
// deadline is kept (a suppression is extended, never shortened; lift one
// with ClearFlag). reason is shown in the record of the messages it stops.
func Suppress(ctx context.Context, f Flags, session, user string, until time.Time, reason string) error {
	old, ok, err := f.GetFlag(ctx, session, user, FlagSuppressed)
	if err != nil {
		return err
	}
	if ok && old.Until.After(until) {
		return nil
	}
	return f.SetFlag(ctx, Flag{SessionKey: session, Subject: user, Name: FlagSuppressed, Until: until, Value: reason})
}

// MarkMuted records that the bot is muted in a group session until until
// (a zero or past until lifts the mute).
func MarkMuted(ctx context.Context, f Flags, session string, until time.Time) error {
	return f.SetFlag(ctx, Flag{SessionKey: session, Name: FlagMuted, Until: until})
}

// MarkUnavailable records at time at that the bot is no longer in a group
// (kicked, group dissolved, a definitive "not in group" from the platform).
// The mark lasts until ClearUnavailable, or until the gate sees a live
// event from the group that is newer than at.
func MarkUnavailable(ctx context.Context, f Flags, session string, at time.Time, reason string) error {
	v := strconv.FormatInt(at.UnixMilli(), 10)
	if reason != "" {
		v += " " + reason
	}
	return f.SetFlag(ctx, Flag{SessionKey: session, Name: FlagUnavailable, Until: forever, Value: v})
}

// ClearUnavailable removes the unavailable mark of a group session.
func ClearUnavailable(ctx context.Context, f Flags, session string) error {
	return f.ClearFlag(ctx, session, "", FlagUnavailable)
}

// parseUnavailable splits a FlagUnavailable value into the mark time and
// the reason. A malformed value yields the zero time, so any live event
// clears it.
func parseUnavailable(v string) (time.Time, string) {
	ms, reason, _ := strings.Cut(v, " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, v
	}
	return time.UnixMilli(n), reason
}
