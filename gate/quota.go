package gate

import (
	"context"
	"errors"
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

// BatchQuota is implemented by quotas that can count calls against several
// counters in one step. [Rules.RecordModelCall] uses it when available.
type BatchQuota interface {
	Quota
	// AddAll counts n more calls for every key of keys.
	AddAll(ctx context.Context, keys []QuotaKey, n int) error
}

// FlagQuota is a Quota kept in session flags (one flag per counter and
// day). Adds are read-modify-writes serialised inside one FlagQuota, so use
// a single FlagQuota per process; counts from several processes sharing a
// database may lose increments.
//
// Concurrent adds are coalesced: while one write of counters is in flight,
// the adds that arrive wait and then go out together in the next write (one
// write for all of them when the Flags implement [BatchFlags]). Every add
// returns once its increment is stored (or failed).
type FlagQuota struct {
	flags Flags

	mu       sync.Mutex
	flushing bool        // a round is being written
	next     *quotaRound // the adds waiting for the next write, or nil
}

// quotaRound is one write of counters: the increments it carries and the
// outcome its adders wait for.
type quotaRound struct {
	keys []QuotaKey // in the order of their first add
	adds map[QuotaKey]int
	// Set before done is closed: the errors of single counters, and the
	// error of the batch write with the counters it carried.
	errs     map[QuotaKey]error
	batchErr error
	inBatch  map[QuotaKey]bool
	// lead hands the round to one of its adders, which writes it.
	lead chan struct{}
	done chan struct{}
}

// NewFlagQuota returns a Quota that keeps its counters in f.
func NewFlagQuota(f Flags) *FlagQuota { return &FlagQuota{flags: f} }

var _ BatchQuota = (*FlagQuota)(nil)

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
	return q.AddAll(ctx, []QuotaKey{k}, n)
}

// AddAll implements BatchQuota: the increments are written together, with
// those of concurrent adds. A bad day in any key fails the call before
// anything is counted. The write runs to its end even when ctx is
// cancelled, so an add is never half counted; the error names the counters
// whose write failed.
func (q *FlagQuota) AddAll(ctx context.Context, keys []QuotaKey, n int) error {
	for _, k := range keys {
		if _, err := time.Parse(time.DateOnly, k.Day); err != nil {
			return fmt.Errorf("gate: quota day: %w", err)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	q.mu.Lock()
	r := q.next
	if r == nil {
		r = &quotaRound{adds: map[QuotaKey]int{}, lead: make(chan struct{}, 1), done: make(chan struct{})}
		q.next = r
	}
	for _, k := range keys {
		if _, ok := r.adds[k]; !ok {
			r.keys = append(r.keys, k)
		}
		r.adds[k] += n
	}
	lead := !q.flushing
	if lead {
		q.flushing, q.next = true, nil
	}
	q.mu.Unlock()
	if !lead {
		select {
		case <-r.done:
			return r.errFor(keys)
		case <-r.lead: // the previous write ended: this adder writes the round
		}
	}
	q.write(context.WithoutCancel(ctx), r)
	return r.errFor(keys)
}

// write stores the counters of r, answers its adders and hands the next
// round, if any, to one of its adders. Only one write runs at a time, so
// the counters read here are never stale within the process.
func (q *FlagQuota) write(ctx context.Context, r *quotaRound) {
	r.errs = map[QuotaKey]error{}
	fs := make([]Flag, 0, len(r.keys))
	written := make([]QuotaKey, 0, len(r.keys))
	for _, k := range r.keys {
		used, err := q.Used(ctx, k)
		if err != nil {
			r.errs[k] = err
			continue
		}
		d, _ := time.Parse(time.DateOnly, k.Day) // checked by AddAll
		fs = append(fs, Flag{SessionKey: quotaSession(k), Subject: k.Day, Name: quotaFlag,
			Until: d.Add(48 * time.Hour), Value: strconv.Itoa(used + r.adds[k])})
		written = append(written, k)
	}
	if b, ok := q.flags.(BatchFlags); ok && len(fs) > 0 {
		if r.batchErr = b.SetFlags(ctx, fs); r.batchErr != nil {
			r.inBatch = make(map[QuotaKey]bool, len(written))
			for _, k := range written {
				r.inBatch[k] = true
			}
		}
	} else {
		for i, f := range fs {
			if err := q.flags.SetFlag(ctx, f); err != nil {
				r.errs[written[i]] = err
			}
		}
	}
	close(r.done)

	q.mu.Lock()
	defer q.mu.Unlock()
	if next := q.next; next != nil {
		// Its adders are all waiting (they never leave before their round
		// is written), so the token is taken.
		q.next = nil
		next.lead <- struct{}{}
		return
	}
	q.flushing = false
}

// errFor returns the write errors of keys, joined (nil when all stored).
func (r *quotaRound) errFor(keys []QuotaKey) error {
	var errs []error
	batch := false
	for _, k := range keys {
		if err := r.errs[k]; err != nil {
			errs = append(errs, err)
		}
		batch = batch || r.inBatch[k]
	}
	if batch {
		errs = append(errs, r.batchErr)
	}
	return errors.Join(errs...)
}
