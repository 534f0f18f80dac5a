package gate

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/personakit/persona/clock"
)

// Defaults of FlagCache.
const (
	DefaultFlagCacheTTL = time.Minute
	DefaultFlagCacheMax = 100000
)

// FlagCacheConfig configures NewFlagCache.
type FlagCacheConfig struct {
	// TTL is how long a read is reused (default 1 min; negative = until
	// evicted). It bounds how late the cache sees a flag written to the
	// store by someone else.
	TTL time.Duration
	// Max bounds the number of cached keys (default 100,000); when full,
	// expired entries go first, then arbitrary ones.
	Max int
	// Clock is the time source of the TTL (nil = the wall clock).
	Clock clock.Clock
}

// FlagCache is a Flags in front of another Flags (the store): reads are
// served from memory, including "no such flag", for up to TTL; writes and
// clears go to the store first and then update the cache, so writes made
// through the cache are seen at once. The store stays the truth: a
// restart starts with an empty cache.
//
// Route every flag write of the process through the same FlagCache
// (gates, router, outbound); writes that bypass it (another process
// sharing the database) are seen only after TTL.
type FlagCache struct {
	inner Flags
	ttl   time.Duration
	max   int
	clk   clock.Clock

	mu sync.RWMutex
	// gens[genSlot(session, name)] is incremented by every write of a flag
	// of that name in that session (and, by sharing a slot, of some
	// others), so that a read or probe that raced with such a write does
	// not fill the cache. Slots keep writes to other sessions from dropping
	// a fill: with one counter for all, under a steady rate of writes most
	// fills were dropped and most reads reached the store.
	gens [flagGenSlots]uint64
	m    map[flagCacheKey]cachedFlag
	// absent holds, per (session, name), until when no subject-specific
	// flag of that name exists in the session (see SubjectFlagProber).
	absent map[absentKey]time.Time
	prober SubjectFlagProber
}

type absentKey struct{ session, name string }

// flagGenSlots is the number of write counters of a FlagCache.
const flagGenSlots = 256

var flagGenSeed = maphash.MakeSeed()

// genSlot returns the write counter slot of flags named name in session:
// every subject's flag of that name, and the session's "no subject flags
// of that name" answer, share it.
func genSlot(session, name string) int {
	h := maphash.String(flagGenSeed, session) ^ maphash.String(flagGenSeed, name)*0x9e3779b97f4a7c15
	return int(h % flagGenSlots)
}

type flagCacheKey struct{ session, subject, name string }

type cachedFlag struct {
	f     Flag
	ok    bool
	until time.Time // zero = no expiry
}

var _ BatchFlags = (*FlagCache)(nil)

// NewFlagCache returns a cache in front of inner.
func NewFlagCache(inner Flags, cfg FlagCacheConfig) *FlagCache {
	c := &FlagCache{inner: inner, ttl: cfg.TTL, max: cfg.Max, clk: clock.OrReal(cfg.Clock), m: map[flagCacheKey]cachedFlag{},
		absent: map[absentKey]time.Time{}}
	c.prober, _ = inner.(SubjectFlagProber)
	if c.ttl == 0 {
		c.ttl = DefaultFlagCacheTTL
	}
	if c.max <= 0 {
		c.max = DefaultFlagCacheMax
	}
	return c
}

func (c *FlagCache) expiry() time.Time {
	if c.ttl < 0 {
		return time.Time{}
	}
	return c.clk.Now().Add(c.ttl)
}

// GetFlag implements Flags.
func (c *FlagCache) GetFlag(ctx context.Context, sessionKey, subject, name string) (Flag, bool, error) {
	k := flagCacheKey{sessionKey, subject, name}
	c.mu.RLock()
	e, hit := c.m[k]
	c.mu.RUnlock()
	if hit && (e.until.IsZero() || c.clk.Now().Before(e.until)) {
		return e.f, e.ok, nil
	}
	// A miss: note the slot's count before the store read (a write that
	// lands after this note drops the fill below).
	slot := genSlot(sessionKey, name)
	c.mu.RLock()
	gen := c.gens[slot]
	c.mu.RUnlock()
	if subject != "" && c.prober != nil {
		none, err := c.noSubjectFlags(ctx, sessionKey, name)
		if err != nil {
			return Flag{}, false, err
		}
		if none {
			return Flag{}, false, nil
		}
	}
	f, ok, err := c.inner.GetFlag(ctx, sessionKey, subject, name)
	if err != nil {
		return Flag{}, false, err
	}
	c.mu.Lock()
	if c.gens[slot] == gen { // no write since the read began: the value is current
		c.putLocked(k, cachedFlag{f: f, ok: ok, until: c.expiry()})
	}
	c.mu.Unlock()
	return f, ok, nil
}

// noSubjectFlags reports whether the session is known (or now probed) to
// have no subject-specific flag of the name.
func (c *FlagCache) noSubjectFlags(ctx context.Context, sessionKey, name string) (bool, error) {
	k := absentKey{sessionKey, name}
	slot := genSlot(sessionKey, name)
	c.mu.RLock()
	until, hit := c.absent[k]
	gen := c.gens[slot]
	c.mu.RUnlock()
	if hit && (until.IsZero() || c.clk.Now().Before(until)) {
		return true, nil
	}
	has, err := c.prober.HasSubjectFlags(ctx, sessionKey, name)
	if err != nil {
		return false, err
	}
	if has {
		return false, nil
	}
	c.mu.Lock()
	if c.gens[slot] == gen { // no write since the probe began
		if len(c.absent) >= c.max {
			clear(c.absent)
		}
		c.absent[k] = c.expiry()
	}
	c.mu.Unlock()
	return true, nil
}

// SetFlag implements Flags: the store first, then the cache.
func (c *FlagCache) SetFlag(ctx context.Context, f Flag) error {
	slot := genSlot(f.SessionKey, f.Name)
	if f.Subject != "" {
		// From here on the session may have a flag of this name for a
		// subject: no absence answer until the next probe.
		c.mu.Lock()
		c.gens[slot]++
		delete(c.absent, absentKey{f.SessionKey, f.Name})
		c.mu.Unlock()
	}
	if err := c.inner.SetFlag(ctx, f); err != nil {
		c.forget(flagCacheKey{f.SessionKey, f.Subject, f.Name})
		return err
	}
	c.mu.Lock()
	c.gens[slot]++
	if f.Subject != "" {
		delete(c.absent, absentKey{f.SessionKey, f.Name}) // a probe may have run during the write
	}
	c.putLocked(flagCacheKey{f.SessionKey, f.Subject, f.Name}, cachedFlag{f: f, ok: true, until: c.expiry()})
	c.mu.Unlock()
	return nil
}

// SetFlags implements BatchFlags: the store first (in one write when it
// implements BatchFlags, else flag by flag), then the cache. After a
// failed write the flags are read from the store again.
func (c *FlagCache) SetFlags(ctx context.Context, fs []Flag) error {
	c.mu.Lock()
	c.bumpLocked(fs)
	c.dropAbsentLocked(fs)
	c.mu.Unlock()
	if err := SetFlags(ctx, c.inner, fs); err != nil {
		c.mu.Lock()
		c.bumpLocked(fs)
		for _, f := range fs {
			delete(c.m, flagCacheKey{f.SessionKey, f.Subject, f.Name})
		}
		c.mu.Unlock()
		return err
	}
	c.mu.Lock()
	c.bumpLocked(fs)
	c.dropAbsentLocked(fs) // a probe may have run during the write
	for _, f := range fs {
		c.putLocked(flagCacheKey{f.SessionKey, f.Subject, f.Name}, cachedFlag{f: f, ok: true, until: c.expiry()})
	}
	c.mu.Unlock()
	return nil
}

// bumpLocked counts a write of each of fs in its slot; c.mu must be held.
func (c *FlagCache) bumpLocked(fs []Flag) {
	for _, f := range fs {
		c.gens[genSlot(f.SessionKey, f.Name)]++
	}
}

// dropAbsentLocked ends the "no subject flags" answers fs's subject flags
// make wrong; c.mu must be held.
func (c *FlagCache) dropAbsentLocked(fs []Flag) {
	for _, f := range fs {
		if f.Subject != "" {
			delete(c.absent, absentKey{f.SessionKey, f.Name})
		}
	}
}

// ClearFlag implements Flags: the store first, then the cache.
func (c *FlagCache) ClearFlag(ctx context.Context, sessionKey, subject, name string) error {
	k := flagCacheKey{sessionKey, subject, name}
	if err := c.inner.ClearFlag(ctx, sessionKey, subject, name); err != nil {
		c.forget(k)
		return err
	}
	c.mu.Lock()
	c.gens[genSlot(sessionKey, name)]++
	c.putLocked(k, cachedFlag{until: c.expiry()})
	c.mu.Unlock()
	return nil
}

// forget drops a key whose store state is unknown after a failed write.
func (c *FlagCache) forget(k flagCacheKey) {
	c.mu.Lock()
	c.gens[genSlot(k.session, k.name)]++
	delete(c.m, k)
	c.mu.Unlock()
}

// Len returns the number of cached keys.
func (c *FlagCache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// putLocked stores e, evicting when full; c.mu must be held.
func (c *FlagCache) putLocked(k flagCacheKey, e cachedFlag) {
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		now := c.clk.Now()
		for key, old := range c.m {
			if !old.until.IsZero() && !now.Before(old.until) {
				delete(c.m, key)
			}
		}
		for key := range c.m {
			if len(c.m) < c.max*3/4 {
				break
			}
			delete(c.m, key)
		}
	}
	c.m[k] = e
}
