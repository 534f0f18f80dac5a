package gate

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
)

// QuotaScope names what a model-call counter counts.
type QuotaScope string

// The quota scopes.
const (
	QuotaBot   QuotaScope = "bot"
	QuotaGroup QuotaScope = "group"
	QuotaUser  QuotaScope = "user"
)

// QuotaKey identifies one daily model-call counter.
type QuotaKey struct {
	// Scope says what is counted.
	Scope QuotaScope
	// ID is "<profile>:<platform>:<bot id>" for the bot, the group's
	// session key for a group, and "<profile>:<platform>:<bot id>:user:<id>"
	// for a user.
	ID string
	// Day is the counter's day, "2006-01-02" in the policy zone.
	Day string
}

// Quota is the model-call counter port (G5). The pipeline adds to it each
// time it makes a model call for a message (see [Rules.RecordModelCall]);
// the quota gate only reads it.
type Quota interface {
	// Used returns the calls counted for k (0 when none).
	Used(ctx context.Context, k QuotaKey) (int, error)
	// Add counts n more calls for k.
	Add(ctx context.Context, k QuotaKey, n int) error
}

// QuotaKeys returns the counters an event's model calls are charged to on
// day: the bot's, the group's (ok=false in a private chat) and the
// sender's.
func QuotaKeys(ev *channel.Event, day string) (bot, group QuotaKey, inGroup bool, user QuotaKey) {
	profile := ev.Profile
	if profile == "" {
		profile = channel.DefaultProfile
	}
	botID := profile + ":" + ev.Platform + ":" + ev.BotID
	bot = QuotaKey{Scope: QuotaBot, ID: botID, Day: day}
	user = QuotaKey{Scope: QuotaUser, ID: botID + ":user:" + ev.Sender.ID, Day: day}
	if ev.Chat.Kind == channel.Group {
		session := ev.SessionKey
		if session == "" {
			session = channel.SessionKey(ev.Profile, ev.Platform, ev.BotID, ev.Chat)
		}
		group, inGroup = QuotaKey{Scope: QuotaGroup, ID: session, Day: day}, true
	}
	return bot, group, inGroup, user
}

// QuotaDay returns the day string of t in loc (nil = UTC).
func QuotaDay(t time.Time, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	return t.In(loc).Format(time.DateOnly)
}

// FlagQuota is a Quota kept in session flags (one flag per counter and
// day). Add is a read-modify-write serialised inside one FlagQuota, so use
// a single FlagQuota per process; counts from several processes sharing a
// database may lose increments.
type FlagQuota struct {
	flags Flags
	mu    sync.Mutex
}

// NewFlagQuota returns a Quota that keeps its counters in f.
func NewFlagQuota(f Flags) *FlagQuota { return &FlagQuota{flags: f} }

const quotaFlag = "model_calls"

func quotaSession(k QuotaKey) string { return "quota:" + string(k.Scope) + ":" + k.ID }

// Used implements Quota.
func (q *FlagQuota) Used(ctx context.Context, k QuotaKey) (int, error) {
	f, ok, err := q.flags.GetFlag(ctx, quotaSession(k), k.Day, quotaFlag)
	if err != nil || !ok {
		return 0, err
	}
	n, _ := strconv.Atoi(f.Value)
	return n, nil
}

// Add implements Quota. The counter's flag expires two days after its day
// starts, so a store may sweep it.
func (q *FlagQuota) Add(ctx context.Context, k QuotaKey, n int) error {
	d, err := time.Parse(time.DateOnly, k.Day)
	if err != nil {
		return fmt.Errorf("gate: quota day: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	used, err := q.Used(ctx, k)
	if err != nil {
		return err
	}
	until := d.Add(48 * time.Hour)
	return q.flags.SetFlag(ctx, Flag{SessionKey: quotaSession(k), Subject: k.Day, Name: quotaFlag,
		Until: until, Value: strconv.Itoa(used + n)})
}
