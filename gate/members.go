package gate

import (
	"context"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// memberCacheMax bounds the member cache; when it is full, expired entries
// are dropped first, then arbitrary ones.
const memberCacheMax = 10000

type memberKey struct{ platform, bot, chat, user string }

type memberEntry struct {
	role  channel.Role
	level int
	known bool
	until time.Time
}

// memberCache caches member lookups for a TTL on an injectable clock.
type memberCache struct {
	clk clock.Clock
	ttl time.Duration
	max int

	mu sync.Mutex
	m  map[memberKey]memberEntry
}

func newMemberCache(clk clock.Clock, ttl time.Duration) *memberCache {
	if ttl <= 0 {
		ttl = DefaultMemberCacheTTL
	}
	return &memberCache{clk: clk, ttl: ttl, max: memberCacheMax, m: map[memberKey]memberEntry{}}
}

// member returns the sender's role and level: from the event when it
// carries them, else from the cache, else from lookup (nil = unknown).
// A failed lookup is not cached and leaves the level unknown; err reports
// it for the log.
func (c *memberCache) member(ctx context.Context, lookup channel.MemberLookup, ev *channel.Event) (role channel.Role, level int, known bool, err error) {
	role = ev.Sender.Role
	if ev.Sender.LevelKnown {
		return role, ev.Sender.Level, true, nil
	}
	if role == channel.RoleOwner || role == channel.RoleAdmin || lookup == nil {
		return role, 0, false, nil
	}
	k := memberKey{ev.Platform, ev.BotID, ev.Chat.ID, ev.Sender.ID}
	now := c.clk.Now()
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		return pickRole(role, e.role), e.level, e.known, nil
	}
	m, err := lookup.LookupMember(ctx, ev.Chat, ev.Sender.ID)
	if err != nil {
		return role, 0, false, err
	}
	e = memberEntry{role: m.Role, level: m.Level, known: m.LevelKnown, until: now.Add(c.ttl)}
	c.mu.Lock()
	if len(c.m) >= c.max {
		c.evictLocked(now)
	}
	c.m[k] = e
	c.mu.Unlock()
	return pickRole(role, e.role), e.level, e.known, nil
}

func pickRole(fromEvent, looked channel.Role) channel.Role {
	if fromEvent != "" {
		return fromEvent
	}
	return looked
}

// evictLocked drops expired entries, then arbitrary ones down to 3/4 of
// max; c.mu must be held.
func (c *memberCache) evictLocked(now time.Time) {
	for k, e := range c.m {
		if !now.Before(e.until) {
			delete(c.m, k)
		}
	}
	for k := range c.m {
		if len(c.m) < c.max*3/4 {
			break
		}
		delete(c.m, k)
	}
}
