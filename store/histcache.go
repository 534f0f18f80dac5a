package store

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/memory"
)

// Bounds of the history cache (the defaults of its fields).
const (
	// histWindowMax caps the entries cached per session. A Recent with a
	// larger limit is served from the cache only when the session has no
	// more rows than that.
	histWindowMax = 512
	// histEntriesMax and histSessionsMax cap the whole cache; beyond them
	// the least recently read sessions are dropped. An entry is 400 bytes
	// plus its event's text and segments (shared with the decode cache):
	// the cap is ≈ 50–60 MB when it is reached. 32,768 was too few for 256
	// busy chats with 400-message windows: the sessions evicted each other
	// and most turns read their history from SQL (replied benchmark with
	// 20,000 messages: 1,057 → 1,253 msgs/s, CPU 1,609 → 1,281 µs/msg).
	histEntriesMax  = 1 << 17
	histSessionsMax = 4096
	// histMinRead is the fewest rows a cache miss reads, so that a small
	// first read of a session still installs a useful window.
	histMinRead = 32
	// histSlots is the size of the change table the install guard checks
	// (512 KiB). The guard refuses to install a read if any of its rows'
	// slots changed during the read; with 4,096 slots a 400-row read under
	// a few writes per millisecond was refused most of the time.
	histSlots = 1 << 16
)

// histCache keeps the newest transcript entries of recently read sessions,
// so that Recent, which every direct turn calls, is answered from memory.
// message_events stays the truth: the cache is filled from what Recent reads
// and kept in step by this DB's own writes to the table, applied by
// post-commit hooks on the writer goroutine (writeOp.after), so in commit
// order and only once committed. No other DB writes the file while this
// one has it open (a DB owns its file, see Open); writes from outside the
// store (a plain SQLite connection, a VACUUM, which may renumber rowids)
// are not seen.
//
// A cached session holds a window: its rows from some row on up to the
// newest, in (event_time, rowid) order, as Recent sorts them; complete
// means the window is the whole session. A write whose row falls below an
// incomplete window is not cached (the window stays "everything from its
// first row on"); a window that falls empty without being complete is
// dropped.
//
// A window is two parallel slices, the entries and their sort positions,
// so that the entries can be lent as they are (DB.RecentView). The window
// slices are shared with readers: Recent copies from them after unlocking,
// RecentView hands them out with their capacity cut at their length. A
// window's backing arrays are therefore only ever written beyond the end
// of every slice taken from them (appending a row newer than all), and
// every other change (an update, a recall mark, a removal, an insertion in
// the middle) builds new arrays. Events are shared with the decoded-event
// cache and with the callers of Recent, read-only.
type histCache struct {
	// The bounds: histWindowMax, histEntriesMax and histSessionsMax unless
	// a test lowers them before first use.
	winMax, entriesMax, sessionsMax int

	mu       sync.Mutex
	closed   bool
	hits     int // Recent calls answered from the cache (for tests)
	sessions map[string]*histSession
	keys     map[string]*histSession // key → the session whose window holds it
	total    int                     // entries in all windows
	lru      histSession             // sentinel: lru.next is the most recently read

	// The install guard. seq counts the applied writes; slot[h] is the seq
	// of the last write that touched a session or key hashing to h (the
	// table is small and lossy: a collision only refuses an install).
	// resetSeq is the seq of the last reset. started and done count the
	// batches with hooks that began to commit and whose hooks have run;
	// fenced is signalled when done moves.
	seq      uint64
	resetSeq uint64
	slot     [histSlots]uint64
	seed     maphash.Seed
	started  uint64
	done     uint64
	fenced   sync.Cond
}

type histSession struct {
	key string
	// The window: ents[i] is at position pos[i]; len(ents) == len(pos).
	ents       []memory.Entry
	pos        []histPos
	complete   bool
	prev, next *histSession
}

// histPos is a row's position in Recent's order.
type histPos struct{ t, rowid int64 }

// before reports whether a sorts before b in Recent's order.
func (a histPos) before(b histPos) bool {
	return a.t < b.t || (a.t == b.t && a.rowid < b.rowid)
}

// histEntry is a row read or written: the entry and its position.
type histEntry struct {
	histPos
	e memory.Entry
}

func newHistCache() *histCache {
	c := &histCache{
		winMax: histWindowMax, entriesMax: histEntriesMax, sessionsMax: histSessionsMax,
		sessions: make(map[string]*histSession),
		keys:     make(map[string]*histSession),
		seed:     maphash.MakeSeed(),
	}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	c.fenced.L = &c.mu
	return c
}

// histTicket is what a cache miss remembers for the install.
type histTicket struct{ seq uint64 }

// get returns the newest limit entries of the session, oldest first, when
// the cache can answer: in a fresh slice, or with shared the window itself
// (read-only; its capacity ends at its length). Otherwise it returns a
// ticket for installing what the caller then reads from SQL.
func (c *histCache) get(session string, limit int, shared bool) ([]memory.Entry, histTicket, bool) {
	c.mu.Lock()
	s := c.sessions[session]
	if s == nil || c.closed || (!s.complete && len(s.ents) < limit) {
		t := histTicket{seq: c.seq}
		c.mu.Unlock()
		return nil, t, false
	}
	w := slices.Clip(s.ents[max(0, len(s.ents)-limit):])
	c.hits++
	c.touch(s)
	c.mu.Unlock()
	if shared {
		return w, histTicket{}, true
	}
	return slices.Clone(w), histTicket{}, true
}

// entries copies the entries of w into a fresh slice.
func entries(w []histEntry) []memory.Entry {
	out := make([]memory.Entry, len(w))
	for i := range w {
		out[i] = w[i].e
	}
	return out
}

func (c *histCache) hash(s string) int { return int(maphash.String(c.seed, s) % histSlots) }

// install caches rows (a session's newest rows in order, all of them when
// complete) read after get returned t, unless a write that may change them
// was applied since, or is committed but not applied yet: it waits for a
// batch that is between its COMMIT and the end of its hooks.
func (c *histCache) install(session string, t histTicket, rows []histEntry, complete bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A batch that began to commit before now may be visible to the read
	// and not applied yet.
	for target := c.started; c.done < target && !c.closed; {
		c.fenced.Wait()
	}
	if c.closed || c.resetSeq > t.seq || c.slot[c.hash(session)] > t.seq {
		return
	}
	for i := range rows {
		if c.slot[c.hash(rows[i].e.Key)] > t.seq {
			return
		}
	}
	if len(rows) > c.winMax {
		rows, complete = rows[len(rows)-c.winMax:], false
	}
	if len(rows) == 0 && !complete {
		return
	}
	s := c.sessions[session]
	if s != nil {
		if s.complete || len(s.ents) >= len(rows) {
			return // as good already (nothing changed since the read)
		}
		c.forget(s.ents)
	} else {
		s = &histSession{key: session}
		c.sessions[session] = s
		c.link(s)
	}
	s.ents, s.pos, s.complete = entries(rows), make([]histPos, len(rows)), complete
	for i := range rows {
		s.pos[i] = rows[i].histPos
	}
	for i := range rows {
		k := rows[i].e.Key
		if o := c.keys[k]; o != nil && o != s {
			// Moved here by a write that is already applied in SQL but
			// whose hook has not reached o: impossible after the fence,
			// kept for safety.
			c.removeKey(o, k)
		}
		c.keys[k] = s
	}
	c.total += len(rows)
	c.touch(s)
	c.evict()
}

// upsert applies a committed upsert of a row: key now belongs to session
// with this position and entry. ok false means the entry is unknown (its
// event could not be prepared): the sessions concerned are dropped.
func (c *histCache) upsert(he histEntry, ok bool) {
	key, session := he.e.Key, he.e.SessionKey
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bump(session)
	c.bump(key)
	if o := c.keys[key]; o != nil {
		if !ok {
			c.drop(o)
		} else {
			c.removeKey(o, key)
		}
	}
	s := c.sessions[session]
	if s == nil {
		return
	}
	if !ok {
		c.drop(s)
		return
	}
	n := len(s.pos)
	switch {
	case n == 0 || s.pos[n-1].before(he.histPos):
		// In place: beyond every reader's slice.
		s.ents, s.pos = append(s.ents, he.e), append(s.pos, he.histPos)
	case !s.complete && he.before(s.pos[0]):
		return // below the window
	default:
		i, _ := slices.BinarySearchFunc(s.pos, he.histPos, func(x, y histPos) int {
			if x.before(y) {
				return -1
			}
			return 1
		})
		// New arrays.
		s.ents = slices.Insert(slices.Clip(s.ents), i, he.e)
		s.pos = slices.Insert(slices.Clip(s.pos), i, he.histPos)
	}
	c.keys[key] = s
	c.total++
	if over := len(s.ents) - c.winMax; over > 0 {
		c.forget(s.ents[:over])
		s.ents, s.pos, s.complete = s.ents[over:], s.pos[over:], false
	}
	c.evict()
}

// recalled applies a committed recall mark.
func (c *histCache) recalled(key string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bump(key)
	s := c.keys[key]
	if s == nil {
		return
	}
	i := slices.IndexFunc(s.ents, func(x memory.Entry) bool { return x.Key == key })
	if i < 0 {
		c.drop(s) // cannot happen: the index is out of step
		return
	}
	w := slices.Clone(s.ents)
	w[i].RecalledAt = at
	s.ents = w
}

// bump records a write touching the session or key s.
func (c *histCache) bump(s string) {
	c.seq++
	c.slot[c.hash(s)] = c.seq
}

// removeKey takes key out of s's window.
func (c *histCache) removeKey(s *histSession, key string) {
	delete(c.keys, key)
	i := slices.IndexFunc(s.ents, func(x memory.Entry) bool { return x.Key == key })
	if i < 0 {
		c.drop(s)
		return
	}
	c.total--
	s.ents = slices.Delete(slices.Clone(s.ents), i, i+1)
	s.pos = slices.Delete(slices.Clone(s.pos), i, i+1)
	if len(s.ents) == 0 && !s.complete {
		c.drop(s)
	}
}

// forget unindexes the keys of w.
func (c *histCache) forget(w []memory.Entry) {
	for i := range w {
		delete(c.keys, w[i].Key)
	}
	c.total -= len(w)
}

// drop uncaches a session.
func (c *histCache) drop(s *histSession) {
	if c.sessions[s.key] != s {
		return
	}
	c.forget(s.ents)
	s.ents, s.pos = nil, nil
	delete(c.sessions, s.key)
	s.prev.next, s.next.prev = s.next, s.prev
	s.prev, s.next = nil, nil
}

func (c *histCache) link(s *histSession) {
	s.prev, s.next = &c.lru, c.lru.next
	s.prev.next, s.next.prev = s, s
}

// touch makes s the most recently read session.
func (c *histCache) touch(s *histSession) {
	if c.lru.next == s {
		return
	}
	s.prev.next, s.next.prev = s.next, s.prev
	c.link(s)
}

// evict drops the least recently read sessions while the cache is over
// its bounds.
func (c *histCache) evict() {
	for (c.total > c.entriesMax || len(c.sessions) > c.sessionsMax) && c.lru.prev != &c.lru {
		c.drop(c.lru.prev)
	}
}

// reset empties the cache and refuses the installs of reads begun before.
func (c *histCache) reset() {
	c.seq++
	c.resetSeq = c.seq
	clear(c.sessions)
	clear(c.keys)
	c.total = 0
	c.lru.prev, c.lru.next = &c.lru, &c.lru
}

// close empties the cache for good: Recent then always reads SQL (and
// fails with the closed DB).
func (c *histCache) close() {
	c.mu.Lock()
	c.closed = true
	c.reset()
	c.fenced.Broadcast()
	c.mu.Unlock()
}

// begin and end implement commitFence for the writer.
func (c *histCache) begin() {
	c.mu.Lock()
	c.started++
	c.mu.Unlock()
}

func (c *histCache) end(failed bool) {
	c.mu.Lock()
	c.done++
	if failed {
		c.reset()
	}
	c.fenced.Broadcast()
	c.mu.Unlock()
}

// histEntryOf builds the cache entry of a committed upsert.
func histEntryOf(r *eventRow, ev *channel.Event) histEntry {
	he := histEntry{histPos: histPos{t: r.eventTime, rowid: r.rowid}, e: memory.Entry{
		Key: r.id, SessionKey: r.session, Direction: r.direction, RecalledAt: fromNullMs(r.recalled)}}
	if ev != nil {
		he.e.Event = *ev
	}
	return he
}
