package gate

import (
	"context"
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

	mu  sync.RWMutex
	gen uint64 // incremented by every write, to drop racing fills
	m   map[flagCacheKey]cachedFlag
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
	c := &FlagCache{inner: inner, ttl: cfg.TTL, max: cfg.Max, clk: clock.OrReal(cfg.Clock), m: map[flagCacheKey]cachedFlag{}}
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
	gen := c.gen
	c.mu.RUnlock()
	if hit && (e.until.IsZero() || c.clk.Now().Before(e.until)) {
		return e.f, e.ok, nil
	}
	f, ok, err := c.inner.GetFlag(ctx, sessionKey, subject, name)
	if err != nil {
		return Flag{}, false, err
	}
	c.mu.Lock()
	if c.gen == gen { // no write since the read began: the value is current
		c.putLocked(k, cachedFlag{f: f, ok: ok, until: c.expiry()})
	}
	c.mu.Unlock()
	return f, ok, nil
}

// SetFlag implements Flags: the store first, then the cache.
func (c *FlagCache) SetFlag(ctx context.Context, f Flag) error {
	if err := c.inner.SetFlag(ctx, f); err != nil {
		c.forget(flagCacheKey{f.SessionKey, f.Subject, f.Name})
		return err
	}
	c.mu.Lock()
	c.gen++
	c.putLocked(flagCacheKey{f.SessionKey, f.Subject, f.Name}, cachedFlag{f: f, ok: true, until: c.expiry()})
	c.mu.Unlock()
	return nil
}

// SetFlags implements BatchFlags: the store first (in one write when it
// implements BatchFlags, else flag by flag), then the cache. After a
// failed write the flags are read from the store again.
func (c *FlagCache) SetFlags(ctx context.Context, fs []Flag) error {
	if err := SetFlags(ctx, c.inner, fs); err != nil {
		c.mu.Lock()
		c.gen++
		for _, f := range fs {
			delete(c.m, flagCacheKey{f.SessionKey, f.Subject, f.Name})
		}
		c.mu.Unlock()
		return err
	}
	c.mu.Lock()
	c.gen++
	for _, f := range fs {
		c.putLocked(flagCacheKey{f.SessionKey, f.Subject, f.Name}, cachedFlag{f: f, ok: true, until: c.expiry()})
	}
	c.mu.Unlock()
	return nil
}

// ClearFlag implements Flags: the store first, then the cache.
func (c *FlagCache) ClearFlag(ctx context.Context, sessionKey, subject, name string) error {
	k := flagCacheKey{sessionKey, subject, name}
	if err := c.inner.ClearFlag(ctx, sessionKey, subject, name); err != nil {
		c.forget(k)
		return err
	}
	c.mu.Lock()
	c.gen++
	c.putLocked(k, cachedFlag{until: c.expiry()})
	c.mu.Unlock()
	return nil
}

// forget drops a key whose store state is unknown after a failed write.
func (c *FlagCache) forget(k flagCacheKey) {
	c.mu.Lock()
	c.gen++
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
