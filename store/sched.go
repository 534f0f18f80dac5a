package store

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
)

// The claim index.
//
// A DB keeps every live queue item (pending, or leased) of its file in
// memory: per session a heap of the items that can be claimed now, in claim
// order, and the count of unexpired leases; across sessions a heap of the
// sessions by their best item; and two time heaps, one of the pending items
// that are not available yet and one of the leases by expiry. Claim decides
// in memory which items to take (so its cost does not depend on the
// backlog or on what SQL can express cheaply) and leases them there; a
// lease the claim does not store at once is soft (held in memory, see
// DB.Claim) until its first operation writes it. inbound_items stays the truth for everything else; the index
// is rebuilt from it at Open (and by ReleaseExpired, keeping the soft
// leases) and kept in step by this DB's own writes: every change is applied
// by the write's post-commit hook, on the writer goroutine, so the index
// sees the writes in commit order. A lease operation pins its item (out of
// every heap, counted in flight) from before its write is queued until its
// hook or failure settles it, so no claim takes it meanwhile. No other DB
// writes the file while this one has it open (a DB owns its file, see
// Open); a write from outside the store (a plain SQLite connection) is not
// seen, and the row's claims count, which every write of a lease checks,
// makes such a race fail the DB's own write, never take effect twice.

// Where a live item sits in the index.
const (
	locNone     = iota // not indexed (being claimed, or gone)
	locReady           // in its session's ready heap: claimable now
	locDelayed         // in the delayed heap: pending, available later
	locLeased          // in the lease heap: leased, counted in flight
	locClaiming        // picked by a claim whose write is in progress
)

// maxHeldPayload bounds the events the index keeps for claims, counted by
// the size of their encoded payload; beyond it a claim reads the payload
// from the table.
const maxHeldPayload = 32 << 20

// schedItem is one live queue item.
type schedItem struct {
	id, session string
	rid         int64 // the queue row's key (its transcript row's rowid)
	private     bool
	priority    int
	eventTime   int64
	history     bool
	availableAt int64
	leased      bool  // leased (in the table, or softly: see soft)
	leaseUntil  int64 // when leased
	claims      int   // every claim, this DB's soft ones included
	attempts    int   // counted attempts, this DB's soft claims included
	// soft marks a lease this DB granted in memory only: the row still
	// shows the item as it was before the claim (see DB.Claim). dbClaims
	// is the claims count the row has; owner and firstClaim describe the
	// soft lease (firstClaim: the first claim this DB made, for a row
	// without first_claimed_at).
	soft       bool
	dbClaims   int
	owner      string
	firstClaim int64
	// pinWait, while a lease operation's write is in flight (see
	// pinLease), is closed when the item is settled.
	pinWait chan struct{}
	ev      *channel.Event // the stored event, nil when not held; shared read-only
	size    int            // its encoded size, for the bound

	loc     int
	heapIdx int // position in the heap loc names
}

// claimBefore reports whether a is claimed before b: priority DESC, event
// time, id.
func claimBefore(a, b *schedItem) bool {
	return cmp.Or(cmp.Compare(b.priority, a.priority), cmp.Compare(a.eventTime, b.eventTime),
		strings.Compare(a.id, b.id)) < 0
}

// claimableAt is when the item becomes claimable.
func (it *schedItem) claimableAt() int64 {
	if it.leased {
		return it.leaseUntil
	}
	return it.availableAt
}

// idxHeap is a container/heap of elements that know their position in it
// (so an element can be removed or fixed in O(log n)); O supplies the order
// and the position field.
type idxHeap[T any, O heapOrder[T]] []T

// heapOrder orders the elements of an idxHeap and locates their position
// field.
type heapOrder[T any] interface {
	less(a, b T) bool
	pos(T) *int
}

func (h idxHeap[T, O]) Len() int           { return len(h) }
func (h idxHeap[T, O]) Less(i, j int) bool { var o O; return o.less(h[i], h[j]) }
func (h idxHeap[T, O]) Swap(i, j int) {
	var o O
	h[i], h[j] = h[j], h[i]
	*o.pos(h[i]), *o.pos(h[j]) = i, j
}
func (h *idxHeap[T, O]) Push(x any) {
	var o O
	v := x.(T)
	*o.pos(v) = len(*h)
	*h = append(*h, v)
}
func (h *idxHeap[T, O]) Pop() any {
	var (
		o    O
		zero T
	)
	old := *h
	v := old[len(old)-1]
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	*o.pos(v) = -1
	return v
}

// byClaim orders items in claim order; byTime by the time they become
// claimable; byBestItem sessions by their best claimable item.
type (
	byClaim    struct{}
	byTime     struct{}
	byBestItem struct{}
)

func (byClaim) less(a, b *schedItem) bool       { return claimBefore(a, b) }
func (byClaim) pos(it *schedItem) *int          { return &it.heapIdx }
func (byTime) less(a, b *schedItem) bool        { return a.claimableAt() < b.claimableAt() }
func (byTime) pos(it *schedItem) *int           { return &it.heapIdx }
func (byBestItem) less(a, b *schedSession) bool { return claimBefore(a.ready[0], b.ready[0]) }
func (byBestItem) pos(ss *schedSession) *int    { return &ss.idx }

type (
	// readyHeap holds a session's claimable items in claim order.
	readyHeap = idxHeap[*schedItem, byClaim]
	// timeHeap holds items by the time they become claimable.
	timeHeap = idxHeap[*schedItem, byTime]
	// sessionHeap holds the sessions that have claimable items by their
	// best item.
	sessionHeap = idxHeap[*schedSession, byBestItem]
)

// schedSession is one session with live items.
type schedSession struct {
	key      string
	ready    readyHeap
	inflight int // unexpired leases (and items being claimed)
	live     int // live items of the session
	idx      int // position in sched.sessions heap, -1 when not in it
}

// sched is the claim index (see above). All methods take mu.
type sched struct {
	mu       sync.Mutex
	items    map[string]*schedItem
	sessions map[string]*schedSession
	order    sessionHeap // sessions with claimable items
	delayed  timeHeap    // pending, available later
	leases   timeHeap    // leased, by expiry
	held     int         // bytes of payload held
}

func newSched() *sched {
	return &sched{items: map[string]*schedItem{}, sessions: map[string]*schedSession{}}
}

// session returns (creating) the session entry for key.
func (s *sched) session(key string) *schedSession {
	ss := s.sessions[key]
	if ss == nil {
		ss = &schedSession{key: key, idx: -1}
		s.sessions[key] = ss
	}
	return ss
}

// fixSession puts ss in, moves it within or takes it out of the session
// heap after its ready heap changed.
func (s *sched) fixSession(ss *schedSession) {
	switch {
	case len(ss.ready) == 0 && ss.idx >= 0:
		heap.Remove(&s.order, ss.idx)
	case len(ss.ready) > 0 && ss.idx < 0:
		heap.Push(&s.order, ss)
	case len(ss.ready) > 0:
		heap.Fix(&s.order, ss.idx)
	}
}

// detach takes it out of wherever it is indexed; a lease (or claim in
// progress) stops counting in flight.
func (s *sched) detach(it *schedItem) {
	ss := s.sessions[it.session]
	switch it.loc {
	case locReady:
		heap.Remove(&ss.ready, it.heapIdx)
		s.fixSession(ss)
	case locDelayed:
		heap.Remove(&s.delayed, it.heapIdx)
	case locLeased:
		heap.Remove(&s.leases, it.heapIdx)
		ss.inflight--
	case locClaiming:
		ss.inflight--
		if it.pinWait != nil {
			close(it.pinWait)
			it.pinWait = nil
		}
	}
	it.loc, it.heapIdx = locNone, -1
}

// attach indexes a detached item by its state at now.
func (s *sched) attach(it *schedItem, now int64) {
	ss := s.session(it.session)
	switch {
	case it.leased && it.leaseUntil > now:
		it.loc = locLeased
		heap.Push(&s.leases, it)
		ss.inflight++
	case !it.leased && it.availableAt > now:
		it.loc = locDelayed
		heap.Push(&s.delayed, it)
	default:
		it.loc = locReady
		heap.Push(&ss.ready, it)
		s.fixSession(ss)
	}
}

// add indexes a new live item; an existing one is replaced.
func (s *sched) add(it *schedItem, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addLocked(it, now)
}

func (s *sched) addLocked(it *schedItem, now int64) {
	if old := s.items[it.id]; old != nil {
		s.removeLocked(old)
	}
	if it.ev == nil || s.held+it.size > maxHeldPayload {
		it.ev, it.size = nil, 0
	}
	s.held += it.size
	s.items[it.id] = it
	s.session(it.session).live++
	it.loc, it.heapIdx = locNone, -1
	s.attach(it, now)
}

// removeLocked forgets an item.
func (s *sched) removeLocked(it *schedItem) {
	s.detach(it)
	delete(s.items, it.id)
	s.held -= it.size
	ss := s.sessions[it.session]
	if ss.live--; ss.live == 0 && ss.inflight == 0 && ss.idx < 0 {
		delete(s.sessions, it.session)
	}
}

// advance makes due delayed items and expired leases claimable.
func (s *sched) advance(now int64) {
	for len(s.delayed) > 0 && s.delayed[0].availableAt <= now {
		it := s.delayed[0]
		s.detach(it)
		s.attach(it, now)
	}
	for len(s.leases) > 0 && s.leases[0].leaseUntil <= now {
		it := s.leases[0]
		s.detach(it)
		s.attach(it, now)
	}
}

// claimedItem is a snapshot of an item a claim leased.
type claimedItem struct {
	id, session      string
	rid              int64
	priority         int
	history          bool
	availableAt      int64
	attempts, claims int
	ev               *channel.Event
}

// claim leases up to max claimable items at now in claim order, skipping
// sessions at their in-flight limit, in memory only: each becomes a soft
// lease of owner until until, one claim and one attempt more (see
// DB.Claim). It returns the leased items in claim order.
func (s *sched) claim(now, until int64, owner string, max, perPrivate, perGroup int) []claimedItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(now)
	var (
		out  []claimedItem
		full []*schedSession
	)
	for len(out) < max && len(s.order) > 0 {
		ss := s.order[0]
		it := ss.ready[0]
		limit := perGroup
		if it.private {
			limit = perPrivate
		}
		if ss.inflight >= limit {
			heap.Pop(&s.order)
			full = append(full, ss)
			continue
		}
		s.detach(it)
		if it.firstClaim == 0 {
			it.firstClaim = now
		}
		it.leased, it.leaseUntil, it.soft, it.owner = true, until, true, owner
		it.claims++
		it.attempts++
		s.attach(it, now)
		out = append(out, claimedItem{id: it.id, session: it.session, rid: it.rid, priority: it.priority,
			history: it.history, availableAt: it.availableAt, attempts: it.attempts, claims: it.claims, ev: it.ev})
	}
	for _, ss := range full {
		s.fixSession(ss)
	}
	return out
}

// unclaim takes back soft leases just granted by claim (whose events could
// not be read): the items are claimable again with their attempts given
// back.
func (s *sched) unclaim(items []claimedItem, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range items {
		it := s.items[c.id]
		if it == nil || !it.soft || it.claims != c.claims || it.loc == locClaiming {
			continue
		}
		s.detach(it)
		it.attempts--
		it.leaseUntil = now // expired: claimable at once, as the row has it
		s.attach(it, now)
	}
}

// softLease is the state of a soft lease pinned for the write that ends or
// hardens it.
type softLease struct {
	rid                                 int64
	dbClaims, attempts, claims          int
	firstClaim, availableAt, leaseUntil int64
	owner                               string
}

// softLeaseOf is it's lease as a write needs it.
func softLeaseOf(it *schedItem) softLease {
	return softLease{rid: it.rid, dbClaims: it.dbClaims, attempts: it.attempts, claims: it.claims,
		firstClaim: it.firstClaim, availableAt: it.availableAt, leaseUntil: it.leaseUntil, owner: it.owner}
}

// pinLease checks the lease (id, owner, claims) against the index before
// a lease operation is written. ok is false when the index knows it is not
// the item's current lease. Otherwise the item, when the index has it
// leased, is pinned (pinned true): no claim takes it, even once expired,
// until the write's hook applies the operation or unpin puts it back. For
// a soft lease, soft is true and sl is its state, which the write must put
// into the row whole; for any other lease the row has it and the write's
// SQL guard decides.
//
// While another write about the same item is in flight, pinLease returns
// its wait channel instead: the caller waits for it and asks again.
func (s *sched) pinLease(id, owner string, claims int) (sl softLease, soft, pinned, ok bool, wait <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[id]
	switch {
	case it == nil:
		return softLease{}, false, false, true, nil
	case it.claims != claims, it.soft && (!it.leased || it.owner != owner):
		return softLease{}, false, false, false, nil
	case !it.leased:
		return softLease{}, false, false, true, nil
	case it.loc == locClaiming:
		return softLease{}, false, false, false, it.pinWait
	}
	s.pin(it)
	if !it.soft {
		return softLease{}, false, true, true, nil
	}
	return softLeaseOf(it), true, true, true, nil
}

// pin takes the leased item it out of every heap while a write about its
// lease is in flight: it counts in flight and no claim takes it.
func (s *sched) pin(it *schedItem) {
	s.detach(it)
	it.loc = locClaiming
	it.pinWait = make(chan struct{})
	s.sessions[it.session].inflight++
}

// unpin puts back a lease pinned by pinLease (or pinSoft) whose
// write failed.
func (s *sched) unpin(id string, claims int, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.items[id]; it != nil && it.claims == claims && it.loc == locClaiming {
		s.detach(it)
		s.attach(it, now)
	}
}

// pinSoft pins every soft lease that is not pinned already and, when
// expiredAt is not 0, expired at expiredAt, and returns them: ReleaseExpired
// writes back the expired ones, Close all of them.
func (s *sched) pinSoft(expiredAt int64) (ids []string, leases []softLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.items {
		if !it.soft || !it.leased || it.loc == locClaiming || expiredAt != 0 && it.leaseUntil > expiredAt {
			continue
		}
		s.pin(it)
		ids, leases = append(ids, it.id), append(leases, softLeaseOf(it))
	}
	return ids, leases
}

// softLeased reports whether the item id has a soft lease.
func (s *sched) softLeased(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[id]
	return it != nil && it.soft
}

// overlay applies the index's soft lease of r's item, if any, to r: the
// row does not show it yet.
func (s *sched) overlay(r *inbound.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[r.ID]
	if it == nil || !it.soft {
		return
	}
	r.Status, r.Attempts = inbound.StatusLeased, it.attempts
	if r.FirstClaim.IsZero() && it.firstClaim != 0 {
		r.FirstClaim = fromMs(it.firstClaim)
	}
	r.Outcome.Code, r.Outcome.Reason, r.Outcome.MergedInto = "", "", ""
}

// replace sets the index entries of ids to rows (the items' live rows as
// the table has them; an id without a row is no longer live).
func (s *sched) replace(ids []string, rows []*schedItem, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if it := s.items[id]; it != nil {
			s.removeLocked(it)
		}
	}
	for _, it := range rows {
		s.addLocked(it, now)
	}
}

// leaseChanged applies a successful lease operation on the item id held
// with claims: done removes it; otherwise it becomes pending from
// availableAt (leased=false) or its lease runs until leaseUntil, and its
// attempts change by attempts (never below zero). The row now has the
// lease as the index does: a soft lease is soft no more.
func (s *sched) leaseChanged(id string, claims int, done, leased bool, availableAt, leaseUntil int64, attempts int, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[id]
	if it == nil || it.claims != claims {
		return
	}
	if done {
		s.removeLocked(it)
		return
	}
	s.detach(it)
	it.soft, it.dbClaims = false, it.claims
	it.attempts = max(it.attempts+attempts, 0)
	it.leased = leased
	if leased {
		it.leaseUntil = leaseUntil
	} else {
		it.availableAt, it.leaseUntil = availableAt, 0
	}
	s.attach(it, now)
}

// raise applies a repeated delivery to a pending item (see
// sqlRaisePriority) and refreshes its held event.
func (s *sched) raise(id string, priority int, history bool, ev *channel.Event, size int, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[id]
	if it == nil || it.leased {
		return
	}
	it.history = it.history && history
	if it.ev != nil {
		s.held += size - it.size
		it.ev, it.size = ev, size
	}
	switch {
	case priority <= it.priority:
	case it.loc == locClaiming: // in no heap; the claim settles it
		it.priority = priority
	default:
		s.detach(it)
		it.priority = priority
		s.attach(it, now)
	}
}

// next is the earliest time an item becomes claimable; ok is false when
// nothing is live. Items that are claimable already report the time they
// became so.
func (s *sched) next() (at int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	consider := func(t int64) {
		if !ok || t < at {
			at, ok = t, true
		}
	}
	if len(s.delayed) > 0 {
		consider(s.delayed[0].availableAt)
	}
	if len(s.leases) > 0 {
		consider(s.leases[0].leaseUntil)
	}
	for _, ss := range s.order {
		for _, it := range ss.ready {
			consider(it.claimableAt())
		}
	}
	return at, ok
}

// sqlLoadLive selects every live item for the index: the live rows from
// the queue floor up (migration 0010).
const sqlLoadLive = `SELECT id, session_key, chat_kind, priority, event_time, history_only, available_at,
    status, coalesce(lease_until, 0), claims, rid, attempts FROM inbound_items
WHERE ` + sqlFromQueueFloor + ` AND status IN ('pending', 'leased')`

// scanLive reads one row selected like sqlLoadLive.
func scanLive(sc interface{ Scan(...any) error }) (*schedItem, error) {
	var (
		it           schedItem
		kind, status string
	)
	if err := sc.Scan(&it.id, &it.session, &kind, &it.priority, &it.eventTime, &it.history, &it.availableAt,
		&status, &it.leaseUntil, &it.claims, &it.rid, &it.attempts); err != nil {
		return nil, err
	}
	it.dbClaims = it.claims
	it.private = kind == "private"
	it.leased = status == "leased"
	return &it, nil
}

// keepSoft carries over to s, built from the table, what the table does
// not have of old (the index being replaced): its soft leases, and the pins
// of lease writes in flight (their hooks apply to s, and their waiters wait
// on the same channel). A soft lease whose row's claims moved on since it
// was granted (a write from outside the store claimed the item) is lost. old.mu is held by
// the caller.
func (s *sched) keepSoft(old *sched, now int64) {
	for id, o := range old.items {
		if !o.soft && o.loc != locClaiming {
			continue
		}
		it := s.items[id]
		want := o.claims
		if o.soft {
			want = o.dbClaims
		}
		if it == nil || it.claims != want {
			if o.pinWait != nil {
				close(o.pinWait)
				o.pinWait = nil
			}
			continue
		}
		s.detach(it)
		if o.soft {
			it.leased, it.leaseUntil, it.soft, it.owner = true, o.leaseUntil, true, o.owner
			it.claims, it.attempts, it.firstClaim = o.claims, o.attempts, o.firstClaim
		}
		if o.loc == locClaiming {
			it.loc, it.pinWait = locClaiming, o.pinWait
			o.pinWait = nil
			s.session(it.session).inflight++
		} else {
			s.attach(it, now)
		}
	}
}

// reload rebuilds the claim index from the table (at Open, and after a
// change the index does not follow item by item, such as ReleaseExpired).
// It reads inside a write operation and swaps the index in its post-commit
// hook, so the new index holds exactly the writes committed before it and
// the hooks of later ones apply to it. Events are not held for reloaded
// items: their claims read them from the table.
func (d *DB) reload(ctx context.Context) error {
	var fresh *sched
	err := d.writeThen(ctx, func(tx wtx) error {
		fresh = newSched()
		// The floor first, so that this read and the next Open's start at
		// the oldest live row.
		if _, err := tx.exec(sqlAdvanceQueueFloor); err != nil {
			return err
		}
		rows, err := tx.query(sqlLoadLive)
		if err != nil {
			return err
		}
		defer func() { _ = rows.Close() }()
		now := d.now()
		for rows.Next() {
			it, err := scanLive(rows)
			if err != nil {
				return err
			}
			fresh.addLocked(it, now)
		}
		return rows.Err()
	}, func() {
		s := d.sched
		s.mu.Lock()
		fresh.keepSoft(s, d.now())
		s.items, s.sessions, s.order, s.delayed, s.leases, s.held =
			fresh.items, fresh.sessions, fresh.order, fresh.delayed, fresh.leases, fresh.held
		s.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("store: load queue: %w", err)
	}
	return nil
}
