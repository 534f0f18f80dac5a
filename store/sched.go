package store

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/personakit/persona/channel"
)

// The claim index.
//
// A DB keeps every live queue item (pending, or leased) of its file in
// memory: per session a heap of the items that can be claimed now, in claim
// order, and the count of unexpired leases; across sessions a heap of the
// sessions by their best item; and two time heaps, one of the pending items
// that are not available yet and one of the leases by expiry. Claim decides
// in memory which items to take (so its cost does not depend on the
// backlog or on what SQL can express cheaply) and applies the decision with
// one guarded UPDATE; inbound_items stays the truth, the index is rebuilt
// from it at Open and kept in step by this DB's own writes: every change is
// applied by the write's post-commit hook, on the writer goroutine, so the
// index sees the writes in commit order (a pick only reserves items; the
// claim's hook settles them against whatever committed before it). A second DB handle writing the same file's queue is not seen
// (one process owns a queue file, see the package documentation); the
// guard makes such a race lose a claim, never double it.

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
	leased      bool  // status in the table
	leaseUntil  int64 // when leased
	claims      int
	ev          *channel.Event // the stored event, nil when not held; shared read-only
	size        int            // its encoded size, for the bound

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

// picked is an item chosen by pick, with its id and held event as they
// were when it was picked (the claim's write returns the rest of the row).
type picked struct {
	it  *schedItem
	id  string
	rid int64
	ev  *channel.Event
}

// pick chooses up to max claimable items at now in claim order, skipping
// sessions at their in-flight limit, and marks them as being claimed (they
// count in flight until settle).
func (s *sched) pick(now int64, max, perPrivate, perGroup int) []picked {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(now)
	var (
		out  []picked
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
		it.loc = locClaiming
		ss.inflight++
		out = append(out, picked{it: it, id: it.id, rid: it.rid, ev: it.ev})
	}
	for _, ss := range full {
		s.fixSession(ss)
	}
	return out
}

// settleClaim applies the outcome of a claim write. It runs as the
// write's post-commit hook (in commit order) with got holding the rows the
// write leased, or from the caller with got == nil when the write failed,
// which puts back the items still reserved. A leased row is applied to
// whatever item the index holds for its id now (a reload, or a lease
// operation of the previous holder that committed first, may have replaced
// or moved the picked one) unless that item already shows this claim; an
// id the index lost meanwhile is added. A picked item the write did not
// lease changed under the index (another handle) and is returned in lost
// for the caller to re-read.
func (s *sched) settleClaim(items []picked, got map[string]*schedItem, now int64) (lost []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if got == nil {
		for _, p := range items {
			if it := p.it; s.items[it.id] == it && it.loc == locClaiming {
				s.detach(it)
				s.attach(it, now)
			}
		}
		return nil
	}
	for _, p := range items {
		row, ok := got[p.id]
		cur := s.items[p.id]
		switch {
		case !ok:
			if cur == p.it && cur.loc == locClaiming {
				s.removeLocked(cur)
			}
			lost = append(lost, p.id)
		case cur == nil:
			row.ev, row.size = p.ev, p.it.size
			s.addLocked(row, now)
		case !cur.leased || cur.claims < row.claims || cur.loc == locClaiming && cur == p.it:
			s.detach(cur)
			cur.leased, cur.leaseUntil, cur.claims = true, row.leaseUntil, row.claims
			cur.history = row.history
			s.attach(cur, now)
		}
	}
	return lost
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
// availableAt (leased=false) or its lease runs until leaseUntil.
func (s *sched) leaseChanged(id string, claims int, done, leased bool, availableAt, leaseUntil, now int64) {
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

// sqlLoadLive selects every live item for the index.
const sqlLoadLive = `SELECT id, session_key, chat_kind, priority, event_time, history_only, available_at,
    status, coalesce(lease_until, 0), claims, rid FROM inbound_items WHERE status IN ('pending', 'leased')`

// scanLive reads one row selected like sqlLoadLive.
func scanLive(sc interface{ Scan(...any) error }) (*schedItem, error) {
	var (
		it           schedItem
		kind, status string
	)
	if err := sc.Scan(&it.id, &it.session, &kind, &it.priority, &it.eventTime, &it.history, &it.availableAt,
		&status, &it.leaseUntil, &it.claims, &it.rid); err != nil {
		return nil, err
	}
	it.private = kind == "private"
	it.leased = status == "leased"
	return &it, nil
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
		s.items, s.sessions, s.order, s.delayed, s.leases, s.held =
			fresh.items, fresh.sessions, fresh.order, fresh.delayed, fresh.leases, fresh.held
		s.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("store: load queue: %w", err)
	}
	return nil
}
