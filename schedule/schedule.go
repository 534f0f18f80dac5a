package schedule

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// Errors of the package. Test for them with errors.Is.
var (
	// ErrSpec is wrapped by every error of Parse, and by the errors of
	// Validate and Plan about the spec.
	ErrSpec = errors.New("schedule: invalid spec")
	// ErrNotFound is returned by Store.DeleteSchedule for an id that is not
	// stored.
	ErrNotFound = errors.New("schedule: not found")
	// ErrInvalid is wrapped by the errors about a malformed schedule or
	// argument (Validate, Plan, Store methods, NewRunner).
	ErrInvalid = errors.New("schedule: invalid")
)

// Limits of Schedule fields checked by Validate.
const (
	// MaxIDBytes bounds Schedule.ID.
	MaxIDBytes = 128
	// MaxSessionKeyBytes bounds Schedule.SessionKey.
	MaxSessionKeyBytes = 1024
	// MaxPromptBytes bounds Schedule.Prompt.
	MaxPromptBytes = 4000
)

// Target is where a schedule speaks: the bot (profile, platform, bot id)
// and the chat of the scheduled turn. Stores keep it as JSON with the tags
// below.
type Target struct {
	// Profile is the persona profile ("" means channel.DefaultProfile).
	Profile string `json:"profile,omitempty"`
	// Platform names the channel ("telegram", "onebot", ...).
	Platform string `json:"platform"`
	// BotID is the bot's account on the platform.
	BotID string `json:"bot_id"`
	// Chat is the chat the turn speaks in.
	Chat channel.Chat `json:"chat"`
}

// Validate checks that every field of t is set (Profile may be empty) and
// that the chat kind is known. Errors wrap ErrInvalid.
func (t Target) Validate() error {
	switch {
	case t.Platform == "":
		return fmt.Errorf("%w: target has no platform", ErrInvalid)
	case t.BotID == "":
		return fmt.Errorf("%w: target has no bot id", ErrInvalid)
	case !t.Chat.Kind.Valid():
		return fmt.Errorf("%w: target chat kind %q is neither %q nor %q", ErrInvalid, t.Chat.Kind,
			channel.Group, channel.Private)
	case t.Chat.ID == "":
		return fmt.Errorf("%w: target chat has no id", ErrInvalid)
	}
	return nil
}

// Schedule is one stored schedule: a prompt the bot is asked to speak on
// in one session at the due times of a spec.
type Schedule struct {
	// ID names the schedule; it is part of every firing's item id.
	ID string
	// SessionKey is the session (chat) the schedule belongs to.
	SessionKey string
	// Target is where the scheduled turn speaks.
	Target Target
	// Spec is the schedule spec (see Parse); Plan stores its canonical
	// form.
	Spec string
	// Zone is the IANA time zone a cron spec is read in ("" means UTC).
	Zone string
	// Prompt is what the scheduled turn is asked to say.
	Prompt string
	// NextDue is the next due time. Plan sets it; the runner advances it.
	NextDue time.Time
	// LastDue is the last due time that was fired (zero: never).
	LastDue time.Time
	// Enabled schedules fall due; disabled ones are kept but never fire.
	// The zero value is disabled.
	Enabled bool
	// CreatedAt is when the schedule was first planned.
	CreatedAt time.Time
	// UpdatedAt is when it was last planned (created or edited).
	UpdatedAt time.Time
}

// Validate checks the schedule: the id (non-empty, at most MaxIDBytes,
// UTF-8 without control characters), the session key (likewise, at most
// MaxSessionKeyBytes), the target, that the spec parses and the zone
// loads, and the prompt (non-blank UTF-8, at most MaxPromptBytes). It does
// not look at the times. Errors wrap ErrInvalid, and ErrSpec for the spec.
func (s *Schedule) Validate() error {
	if s == nil {
		return fmt.Errorf("%w: nil schedule", ErrInvalid)
	}
	if err := checkName("id", s.ID, MaxIDBytes); err != nil {
		return err
	}
	if err := checkName("session key", s.SessionKey, MaxSessionKeyBytes); err != nil {
		return fmt.Errorf("schedule %q: %w", s.ID, err)
	}
	if err := s.Target.Validate(); err != nil {
		return fmt.Errorf("schedule %q: %w", s.ID, err)
	}
	if _, err := Parse(s.Spec); err != nil {
		return fmt.Errorf("%w: schedule %q: %w", ErrInvalid, s.ID, err)
	}
	if _, err := LoadZone(s.Zone); err != nil {
		return fmt.Errorf("schedule %q: %w", s.ID, err)
	}
	switch {
	case strings.TrimSpace(s.Prompt) == "":
		return fmt.Errorf("%w: schedule %q has an empty prompt", ErrInvalid, s.ID)
	case len(s.Prompt) > MaxPromptBytes:
		return fmt.Errorf("%w: schedule %q: prompt of %d bytes is longer than %d", ErrInvalid, s.ID,
			len(s.Prompt), MaxPromptBytes)
	case !utf8.ValidString(s.Prompt):
		return fmt.Errorf("%w: schedule %q: prompt is not valid UTF-8", ErrInvalid, s.ID)
	}
	return nil
}

// checkName validates an identifier-like field.
func checkName(what, v string, maxBytes int) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	case len(v) > maxBytes:
		return fmt.Errorf("%w: %s of %d bytes is longer than %d", ErrInvalid, what, len(v), maxBytes)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalid, what, v)
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s %q contains a control character", ErrInvalid, what, v)
	}
	return nil
}

// zones caches loaded locations by name.
var zones sync.Map // string → *time.Location

// LoadZone returns the location of an IANA zone name, "" meaning UTC.
// "Local" is refused: a schedule must not depend on the host's setting.
// Locations are cached. Errors wrap ErrInvalid.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if v, ok := zones.Load(name); ok {
		return v.(*time.Location), nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("%w: zone %q depends on the host; name an IANA zone such as Europe/Berlin",
			ErrInvalid, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: unknown time zone %q: %w", ErrInvalid, name, err)
	}
	zones.Store(name, loc)
	return loc, nil
}

// Store is the schedules port: durable storage of schedules. Package store
// implements it on SQLite; scheduletest.Run is its conformance suite.
// Times are kept at millisecond precision. Implementations must be safe for
// concurrent use, including by several processes when the storage is
// shared: AdvanceSchedule is the one compare-and-set that serialises
// runners.
type Store interface {
	// PutSchedule creates or replaces the schedule with s.ID. s must pass
	// Validate and have NextDue set (see Plan); otherwise the error wraps
	// ErrInvalid and nothing is written.
	PutSchedule(ctx context.Context, s Schedule) error
	// GetSchedule returns the schedule with this id; ok is false when there
	// is none.
	GetSchedule(ctx context.Context, id string) (s Schedule, ok bool, err error)
	// ListSchedules returns the schedules of a session ("" = of every
	// session), ordered by id.
	ListSchedules(ctx context.Context, sessionKey string) ([]Schedule, error)
	// DeleteSchedule removes a schedule; ErrNotFound when there is none.
	DeleteSchedule(ctx context.Context, id string) error
	// DueSchedules returns at most limit (> 0, else ErrInvalid) enabled
	// schedules with NextDue ≤ now, earliest NextDue first (ties by id).
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error)
	// NextDueAt returns the earliest NextDue of the enabled schedules; ok
	// is false when there is none.
	NextDueAt(ctx context.Context) (at time.Time, ok bool, err error)
	// AdvanceSchedule moves a schedule on after a firing, if its stored
	// NextDue still equals expect (at millisecond precision): it sets
	// NextDue to next (non-zero, else ErrInvalid) and LastDue to fired —
	// unless fired is zero (the due time was skipped as too late), which
	// keeps LastDue. It returns ok=false, changing nothing, when the
	// schedule is gone or its NextDue is not expect (another runner
	// advanced it, or an edit moved it). UpdatedAt is left alone.
	AdvanceSchedule(ctx context.Context, id string, expect, fired, next time.Time) (ok bool, err error)
}

// Plan prepares a new or edited schedule for PutSchedule: it replaces
// s.Spec by its canonical form, validates s, and sets NextDue to the first
// due time strictly after now — an interval spec is anchored at now, so
// "every 90m" first falls due 90 minutes after now. It sets UpdatedAt to
// now and CreatedAt to now when it is zero. now is truncated to the
// millisecond first, the precision of stores. A cron spec with no due
// time within five years ("0 0 30 2 *") is refused. Errors wrap
// ErrInvalid (and ErrSpec for the spec); s is not changed on error.
func Plan(s *Schedule, now time.Time) error {
	if s == nil {
		return fmt.Errorf("%w: nil schedule", ErrInvalid)
	}
	spec, err := Parse(s.Spec)
	if err != nil {
		return fmt.Errorf("%w: schedule %q: %w", ErrInvalid, s.ID, err)
	}
	c := *s
	c.Spec = spec.String()
	if err := c.Validate(); err != nil {
		return err
	}
	loc, err := LoadZone(c.Zone)
	if err != nil {
		return err
	}
	now = now.Truncate(time.Millisecond)
	next := spec.Next(now, now, loc)
	if next.IsZero() {
		return fmt.Errorf("%w: schedule %q: %w %q: it never falls due in the next five years", ErrInvalid,
			s.ID, ErrSpec, c.Spec)
	}
	c.NextDue = next.UTC()
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	c.UpdatedAt = now
	*s = c
	return nil
}

// NextAfter returns the schedule's first due time strictly after t (in its
// zone; see Spec.Next). An interval spec is anchored at NextDue — the
// runner keeps NextDue on the lattice Plan started — or at t when NextDue
// is zero. The zero time means none within five years.
func (s *Schedule) NextAfter(t time.Time) (time.Time, error) {
	spec, err := Parse(s.Spec)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: schedule %q: %w", ErrInvalid, s.ID, err)
	}
	loc, err := LoadZone(s.Zone)
	if err != nil {
		return time.Time{}, err
	}
	anchor := s.NextDue
	if anchor.IsZero() {
		anchor = t
	}
	return spec.Next(anchor, t, loc), nil
}

// Firing is one due time of a schedule, handed to Config.Fire (or
// Config.Skip).
type Firing struct {
	// Schedule is the schedule as the runner read it.
	Schedule Schedule
	// Due is the due time being fired, in the schedule's zone.
	Due time.Time
	// Late reports a firing after downtime: Due is more than Config.Grace
	// before the runner's now.
	Late bool
	// Missed counts the earlier due times this catch-up skipped (a runner
	// fires at most one due time per schedule per catch-up: the latest).
	Missed int
}

// IDPrefix starts every Firing.ID.
const IDPrefix = "schedule:"

// ID returns the item id of this firing: "schedule:<schedule id>:<due
// unix ms>". It depends only on the schedule and the due time, so every
// attempt to fire the same due time, by any runner, has the same id.
func (f Firing) ID() string {
	return IDPrefix + f.Schedule.ID + ":" + strconv.FormatInt(f.Due.UnixMilli(), 10)
}
