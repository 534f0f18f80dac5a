package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"hash/maphash"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
)

// eventCacheSize bounds the decoded-event cache (entries).
const eventCacheSize = 20000

// eventCache keeps decoded transcript payloads so that reading a session's
// recent history does not decode the same JSON on every turn. An entry is
// keyed by the row's id and checked against a hash of the stored payload,
// so an updated row is decoded again: the database stays the truth.
type eventCache struct {
	mu sync.Mutex
	m  map[string]cachedEvent

	// recent is Recent's query, prepared once on the read pool (see
	// recentStmt).
	recentOnce sync.Once
	recent     *sql.Stmt
	recentErr  error
}

// cachedEvent holds the event by pointer: the map stays small to copy and
// to scan, and the event is often the one the claim index holds too.
type cachedEvent struct {
	sum uint64
	ev  *channel.Event
}

func newEventCache() *eventCache { return &eventCache{m: make(map[string]cachedEvent)} }

// recentStmt returns Recent's prepared query on db (the read pool),
// preparing it on first use. database/sql prepares it again on each pool
// connection as needed; closing db releases it.
func (c *eventCache) recentStmt(ctx context.Context, db *sql.DB) (*sql.Stmt, error) {
	c.recentOnce.Do(func() {
		c.recent, c.recentErr = db.PrepareContext(context.WithoutCancel(ctx), sqlRecent)
	})
	return c.recent, c.recentErr
}

// decode returns the event stored in payload, from the cache when the
// payload is unchanged. The returned event shares its slices with the cache;
// callers must not modify them.
func (c *eventCache) decode(key string, payload []byte) (channel.Event, error) {
	sum := payloadSum(payload)
	c.mu.Lock()
	ce, ok := c.m[key]
	c.mu.Unlock()
	if ok && ce.sum == sum {
		return *ce.ev, nil
	}
	ev := new(channel.Event)
	if err := json.Unmarshal(payload, ev); err != nil {
		return channel.Event{}, err
	}
	c.store(key, sum, ev)
	return *ev, nil
}

// put caches ev as the decoded form of payload under key.
func (c *eventCache) put(key string, payload []byte, ev *channel.Event) {
	c.store(key, payloadSum(payload), ev)
}

// store caches ev under key, dropping about half the entries (in map
// order) when the cache is full.
func (c *eventCache) store(key string, sum uint64, ev *channel.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= eventCacheSize {
		n := 0
		for k := range c.m {
			delete(c.m, k)
			if n++; n >= eventCacheSize/2 {
				break
			}
		}
	}
	c.m[key] = cachedEvent{sum: sum, ev: ev}
}

// payloadSeed seeds payloadSum; the sums are compared within the process
// only.
var payloadSeed = maphash.MakeSeed()

// payloadSum is the hash an entry is checked against.
func payloadSum(payload []byte) uint64 { return maphash.Bytes(payloadSeed, payload) }

// storedEvent is ev as decoding its stored JSON gives it back, built
// without the JSON round trip: a deep copy whose time has no monotonic
// reading and the location a decoder assigns (UTC for a zero offset, Local
// when the offset is Local's at that instant, else a fixed zone), empty
// slices nil, and the raw payload compacted. TestStoredEventMatchesJSON
// checks it against the real round trip.
func storedEvent(ev *channel.Event) (channel.Event, error) {
	c := ev.Clone()
	c.Time = jsonTime(c.Time)
	if len(c.Segments) == 0 {
		c.Segments = nil
	}
	if c.Quoted != nil && len(c.Quoted.Segments) == 0 {
		c.Quoted.Segments = nil
	}
	if len(c.Raw) == 0 {
		c.Raw = nil
	} else {
		var b bytes.Buffer
		if err := json.Compact(&b, c.Raw); err != nil {
			return channel.Event{}, err
		}
		c.Raw = b.Bytes()
	}
	return c, nil
}

// jsonTime is t as time.Time's JSON decoding returns it.
func jsonTime(t time.Time) time.Time {
	t = t.Round(0)
	if t.IsZero() {
		return time.Time{}
	}
	_, off := t.Zone()
	if off == 0 {
		return t.UTC()
	}
	if lt := t.In(time.Local); func() bool { _, lo := lt.Zone(); return lo == off }() {
		return lt
	}
	return t.In(time.FixedZone("", off))
}
