package queuetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// Start is the fake clock's start time in every subtest.
var Start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Run runs the conformance suite against the queues newQueue returns. Each
// subtest gets a fresh queue and a fresh fake clock set to Start. Every
// subtest runs twice: once as written, and once under "Held/" with every
// claim allowing the queue to hold it (inbound.Limits.HoldBelow at its
// maximum), since a held lease must behave like a stored one.
func Run(t *testing.T, newQueue func(t *testing.T, clk *clock.Fake) inbound.Queue) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"EnqueueFillsIDAndSession", testEnqueueFills},
		{"EnqueueRejectsItemWithoutSession", testEnqueueInvalid},
		{"EnqueueIsIdempotent", testEnqueueIdempotent},
		{"EnqueueDoesNotTouchLeasedOrDone", testEnqueueNotPending},
		{"LiveDeliveryClearsHistoryOnly", testLiveClearsHistoryOnly},
		{"RecordIsTerminalAndIdempotent", testRecord},
		{"ClaimOrder", testClaimOrder},
		{"ClaimReturnsFullLease", testClaimLease},
		{"ClaimMax", testClaimMax},
		{"ClaimPerSessionLimits", testSessionLimits},
		{"ClaimCustomLimits", testCustomLimits},
		{"AvailableAtInFuture", testAvailableAt},
		{"LeaseExpiryMakesItemClaimable", testLeaseExpiry},
		{"StaleHolderLosesLease", testStaleHolder},
		{"ClaimsCountEveryClaim", testClaimsCount},
		{"LeaseOpsAfterComplete", testAfterComplete},
		{"Complete", testComplete},
		{"Retry", testRetry},
		{"Snooze", testSnooze},
		{"Release", testRelease},
		{"Extend", testExtend},
		{"ReleaseExpired", testReleaseExpired},
		{"NextAvailable", testNextAvailable},
		{"LookupNotFound", testLookupNotFound},
		{"ConcurrentClaims", testConcurrentClaims},
	}
	for _, held := range []bool{false, true} {
		prefix := ""
		if held {
			prefix = "Held/"
		}
		for _, tc := range tests {
			t.Run(prefix+tc.name, func(t *testing.T) {
				t.Parallel()
				clk := clock.NewFake(Start)
				q := newQueue(t, clk)
				require.NotNil(t, q, "newQueue returned nil")
				if held {
					q = holding{q}
				}
				tc.fn(t, &harness{q: q, clk: clk})
			})
		}
	}
}

// holding is a queue whose every claim may be held (Limits.HoldBelow at its
// maximum).
type holding struct{ inbound.Queue }

func (h holding) Claim(ctx context.Context, limits inbound.Limits) ([]inbound.Lease, error) {
	limits.HoldBelow = math.MaxInt
	return h.Queue.Claim(ctx, limits)
}

// harness bundles a queue under test with its clock.
type harness struct {
	q   inbound.Queue
	clk *clock.Fake
}

// msg describes a test message.
type msg struct {
	chat     channel.Chat
	id       string
	priority int
	// at is the event time as an offset from Start.
	at   time.Duration
	text string
}

func group(id string) channel.Chat   { return channel.Chat{Kind: channel.Group, ID: id} }
func private(id string) channel.Chat { return channel.Chat{Kind: channel.Private, ID: id} }

// event builds a valid normalised event for m.
func event(m msg) channel.Event {
	ev := channel.Event{
		Platform:  "test",
		Profile:   channel.DefaultProfile,
		BotID:     "bot",
		Kind:      channel.KindMessage,
		Chat:      m.chat,
		MessageID: m.id,
		Time:      Start.Add(m.at),
		Sender:    channel.Sender{ID: "u-" + m.id, Name: "User " + m.id},
		Segments:  []channel.Segment{channel.Text(cmpOr(m.text, "hello "+m.id))},
		Source:    channel.SourceLive,
	}
	ev.SessionKey = channel.SessionKey(ev.Profile, ev.Platform, ev.BotID, ev.Chat)
	return ev
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// item builds the queue item for m with ID and SessionKey left for Enqueue
// to fill.
func item(m msg) inbound.Item {
	return inbound.Item{Event: event(m), Priority: m.priority}
}

// key is the id Enqueue assigns to m.
func key(m msg) string {
	ev := event(m)
	return ev.Key()
}

func (h *harness) enqueue(t *testing.T, ms ...msg) {
	t.Helper()
	for _, m := range ms {
		ok, err := h.q.Enqueue(t.Context(), item(m))
		require.NoError(t, err)
		require.True(t, ok, "first enqueue of %s", m.id)
	}
}

func (h *harness) claim(t *testing.T, owner string, max int) []inbound.Lease {
	t.Helper()
	ls, err := h.q.Claim(t.Context(), inbound.Limits{Max: max, Owner: owner})
	require.NoError(t, err)
	return ls
}

func (h *harness) lookup(t *testing.T, id string) inbound.Record {
	t.Helper()
	r, err := h.q.Lookup(t.Context(), id)
	require.NoError(t, err)
	return r
}

func ids(ls []inbound.Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.ID
	}
	return out
}

func sameTime(t *testing.T, want, got time.Time, msgAndArgs ...any) {
	t.Helper()
	require.True(t, want.Truncate(time.Millisecond).Equal(got.Truncate(time.Millisecond)),
		"%s: want %s, got %s", fmt.Sprint(msgAndArgs...), want, got)
}

var replied = inbound.Outcome{Code: outcome.Replied, Reason: "answered"}

func testEnqueueFills(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1", priority: inbound.PriorityQuote, text: "fill me"}
	ev := event(m)
	ok, err := h.q.Enqueue(t.Context(), inbound.Item{Event: ev, Priority: m.priority})
	require.NoError(t, err)
	require.True(t, ok)

	r := h.lookup(t, ev.Key())
	require.Equal(t, ev.Key(), r.ID)
	require.Equal(t, ev.SessionKey, r.SessionKey)
	require.Equal(t, ev.Sender.ID, r.SenderID)
	require.Equal(t, "1", r.MessageID)
	require.Equal(t, "fill me", r.Text)
	require.Equal(t, channel.SourceLive, r.Source)
	require.Equal(t, inbound.PriorityQuote, r.Priority)
	require.Equal(t, inbound.StatusPending, r.Status)
	require.Zero(t, r.Attempts)
	require.False(t, r.HistoryOnly)
	sameTime(t, ev.Time, r.EventTime, "event time")
	sameTime(t, Start, r.AvailableAt, "available at (zero = now)")
	sameTime(t, Start, r.EnqueuedAt, "enqueued at")
	require.True(t, r.FirstClaim.IsZero())
	require.True(t, r.CompletedAt.IsZero())

	// An explicit id and session key are kept.
	custom := inbound.Item{ID: "custom-id", SessionKey: "default:test:bot:group:other", Event: event(msg{chat: group("g2"), id: "2"}), HistoryOnly: true}
	ok, err = h.q.Enqueue(t.Context(), custom)
	require.NoError(t, err)
	require.True(t, ok)
	r = h.lookup(t, "custom-id")
	require.Equal(t, "default:test:bot:group:other", r.SessionKey)
	require.True(t, r.HistoryOnly)
}

func testEnqueueInvalid(t *testing.T, h *harness) {
	cases := []struct {
		name string
		it   inbound.Item
	}{
		{"zero item", inbound.Item{}},
		{"event without session key", inbound.Item{Event: func() channel.Event {
			ev := event(msg{chat: group("g1"), id: "1"})
			ev.SessionKey = ""
			return ev
		}()}},
		{"explicit id without session", inbound.Item{ID: "x"}},
	}
	for _, tc := range cases {
		ok, err := h.q.Enqueue(t.Context(), tc.it)
		require.Error(t, err, tc.name)
		require.False(t, ok, tc.name)
	}
	require.Empty(t, h.claim(t, "w", 10), "nothing may be stored")
	_, ok, err := h.q.NextAvailable(t.Context())
	require.NoError(t, err)
	require.False(t, ok)
}

func testEnqueueIdempotent(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1", priority: inbound.PriorityLink, text: "v1"}
	h.enqueue(t, m)

	steps := []struct {
		priority int
		text     string
		want     int
	}{
		{inbound.PriorityDirect, "v2", inbound.PriorityDirect}, // raised
		{inbound.PriorityOther, "v3", inbound.PriorityDirect},  // never lowered
		{inbound.PriorityQuote, "v4", inbound.PriorityDirect},
	}
	for _, s := range steps {
		m2 := m
		m2.priority, m2.text = s.priority, s.text
		ok, err := h.q.Enqueue(t.Context(), item(m2))
		require.NoError(t, err)
		require.False(t, ok, "second enqueue reports enqueued=false")
		r := h.lookup(t, key(m))
		require.Equal(t, s.want, r.Priority)
		require.Equal(t, inbound.StatusPending, r.Status)
	}

	ls := h.claim(t, "w", 10)
	require.Len(t, ls, 1, "one item, never a second record")
	require.Equal(t, key(m), ls[0].ID)
	require.Equal(t, "v4", ls[0].Event.Text(), "payload refreshed")
	require.Equal(t, inbound.PriorityDirect, ls[0].Priority)
}

func testLiveClearsHistoryOnly(t *testing.T, h *harness) {
	// A backfill queues two messages as history only; one of them then
	// arrives live (not history only), the other is delivered again by a
	// second backfill.
	live := msg{chat: group("g1"), id: "live"}
	again := msg{chat: group("g2"), id: "again"}
	for _, m := range []msg{live, again} {
		it := item(m)
		it.HistoryOnly = true
		_, err := h.q.Enqueue(t.Context(), it)
		require.NoError(t, err)
	}
	ok, err := h.q.Enqueue(t.Context(), item(live))
	require.NoError(t, err)
	require.False(t, ok)
	it := item(again)
	it.HistoryOnly = true
	_, err = h.q.Enqueue(t.Context(), it)
	require.NoError(t, err)

	ls := h.claim(t, "w", 10)
	require.Len(t, ls, 2)
	byID := map[string]bool{}
	for _, l := range ls {
		byID[l.ID] = l.HistoryOnly
	}
	require.False(t, byID[key(live)], "the live delivery ends the history-only mark")
	require.True(t, byID[key(again)], "a second history-only delivery keeps it")
	r := h.lookup(t, key(live))
	require.False(t, r.HistoryOnly)
}

func testEnqueueNotPending(t *testing.T, h *harness) {
	a := msg{chat: group("g1"), id: "a", priority: inbound.PriorityOther}
	b := msg{chat: group("g2"), id: "b", priority: inbound.PriorityOther}
	h.enqueue(t, a, b)
	ls := h.claim(t, "w", 10)
	require.Len(t, ls, 2)

	// Leased: priority is not raised.
	a.priority = inbound.PriorityDirect
	ok, err := h.q.Enqueue(t.Context(), item(a))
	require.NoError(t, err)
	require.False(t, ok)
	r := h.lookup(t, key(a))
	require.Equal(t, inbound.PriorityOther, r.Priority)
	require.Equal(t, inbound.StatusLeased, r.Status)
	require.Equal(t, 1, r.Attempts)

	// Done: stays done.
	var lb inbound.Lease
	for _, l := range ls {
		if l.ID == key(b) {
			lb = l
		}
	}
	require.NoError(t, h.q.Complete(t.Context(), lb, replied))
	b.priority = inbound.PriorityDirect
	ok, err = h.q.Enqueue(t.Context(), item(b))
	require.NoError(t, err)
	require.False(t, ok)
	r = h.lookup(t, key(b))
	require.Equal(t, inbound.StatusDone, r.Status)
	require.Equal(t, outcome.Replied, r.Outcome.Code)
	require.Equal(t, inbound.PriorityOther, r.Priority)
	require.Empty(t, h.claim(t, "w2", 10))
}

func testRecord(t *testing.T, h *harness) {
	ev := channel.Event{
		Platform: "test", BotID: "bot", Kind: channel.KindNotice, Chat: group("g1"),
		Time: Start, Sender: channel.Sender{ID: "op"},
		Notice: &channel.Notice{Type: channel.NoticePoke, Operator: "op", UserID: "bot"},
	}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
	o := inbound.Outcome{Code: outcome.Notice(channel.NoticePoke), Reason: "poke", Kind: "notice"}

	ok, err := h.q.Record(t.Context(), inbound.Item{Event: ev}, o)
	require.NoError(t, err)
	require.True(t, ok)
	r := h.lookup(t, ev.Key())
	require.Equal(t, inbound.StatusDone, r.Status)
	require.Equal(t, o.Code, r.Outcome.Code)
	require.Equal(t, "poke", r.Outcome.Reason)
	require.Equal(t, "notice", r.Outcome.Kind)
	require.Equal(t, ev.SessionKey, r.SessionKey)
	sameTime(t, Start, r.CompletedAt, "completed at")

	h.clk.Advance(time.Second)
	ok, err = h.q.Record(t.Context(), inbound.Item{Event: ev}, inbound.Outcome{Code: outcome.Replied, Reason: "other"})
	require.NoError(t, err)
	require.False(t, ok, "second Record reports false")
	ok, err = h.q.Enqueue(t.Context(), inbound.Item{Event: ev, Priority: inbound.PriorityDirect})
	require.NoError(t, err)
	require.False(t, ok, "Enqueue of a recorded item reports false")

	r2 := h.lookup(t, ev.Key())
	require.Equal(t, o.Code, r2.Outcome.Code, "the first record stays")
	require.Equal(t, "poke", r2.Outcome.Reason)
	sameTime(t, r.CompletedAt, r2.CompletedAt, "completed at unchanged")
	require.Empty(t, h.claim(t, "w", 10), "a record is never claimed")

	// A message that was refused by admission.
	m := msg{chat: private("p1"), id: "9"}
	ok, err = h.q.Record(t.Context(), item(m), inbound.Outcome{Code: outcome.IgnoredPrivateAdmission, Reason: "owner only"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, outcome.IgnoredPrivateAdmission, h.lookup(t, key(m)).Outcome.Code)

	_, err = h.q.Record(t.Context(), inbound.Item{}, o)
	require.Error(t, err, "an item without a session key")
}

func testClaimOrder(t *testing.T, h *harness) {
	// Every message in its own session so that limits do not interfere.
	ms := []msg{
		{chat: group("g1"), id: "a", priority: inbound.PriorityOther, at: 1 * time.Second},
		{chat: group("g2"), id: "b", priority: inbound.PriorityDirect, at: 5 * time.Second},
		{chat: group("g3"), id: "c", priority: inbound.PriorityDirect, at: 2 * time.Second},
		{chat: group("g4"), id: "d", priority: inbound.PriorityQuote, at: 1 * time.Second},
		{chat: group("g5"), id: "e", priority: inbound.PriorityLink, at: 0},
		{chat: group("g6"), id: "f2", priority: inbound.PriorityDirect, at: 2 * time.Second},
		{chat: private("p1"), id: "f1", priority: inbound.PriorityDirect, at: 2 * time.Second},
		{chat: group("g7"), id: "g", priority: inbound.PriorityOther, at: 0},
	}
	h.enqueue(t, ms...)
	want := []string{}
	sorted := slices.Clone(ms)
	slices.SortFunc(sorted, func(a, b msg) int {
		switch {
		case a.priority != b.priority:
			return b.priority - a.priority
		case a.at != b.at:
			return int(a.at - b.at)
		case key(a) < key(b):
			return -1
		}
		return 1
	})
	for _, m := range sorted {
		want = append(want, key(m))
	}

	var got []string
	for range len(ms) {
		ls := h.claim(t, "w", 1)
		require.Len(t, ls, 1)
		got = append(got, ls[0].ID)
	}
	require.Equal(t, want, got, "priority DESC, event time ASC, id ASC")
	require.Empty(t, h.claim(t, "w", 1))

	// A batch claim returns the same order.
	h2 := []msg{
		{chat: group("h1"), id: "x", priority: inbound.PriorityOther, at: 0},
		{chat: group("h2"), id: "y", priority: inbound.PriorityDirect, at: time.Second},
		{chat: group("h3"), id: "z", priority: inbound.PriorityQuote, at: 0},
	}
	h.enqueue(t, h2...)
	require.Equal(t, []string{key(h2[1]), key(h2[2]), key(h2[0])}, ids(h.claim(t, "w", 10)))
}

func testClaimLease(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1", priority: inbound.PriorityDirect, text: "payload text"}
	h.enqueue(t, m)
	h.clk.Advance(3 * time.Second)

	ls, err := h.q.Claim(t.Context(), inbound.Limits{Max: 5, Owner: "proc/1", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	l := ls[0]
	want := event(m)
	require.Equal(t, key(m), l.ID)
	require.Equal(t, want.SessionKey, l.SessionKey)
	require.Equal(t, inbound.PriorityDirect, l.Priority)
	require.Equal(t, "proc/1", l.Owner)
	require.Equal(t, 1, l.Attempts)
	sameTime(t, Start.Add(3*time.Second+time.Minute), l.Until, "lease until")
	require.Equal(t, want.Key(), l.Event.Key(), "event decoded")
	require.Equal(t, "payload text", l.Event.Text())
	require.Equal(t, want.Sender, l.Event.Sender)
	sameTime(t, want.Time, l.Event.Time, "event time")

	r := h.lookup(t, l.ID)
	require.Equal(t, inbound.StatusLeased, r.Status)
	require.Equal(t, 1, r.Attempts)
	sameTime(t, Start.Add(3*time.Second), r.FirstClaim, "first claim")

	// The default lease length.
	h.enqueue(t, msg{chat: group("g2"), id: "2"})
	ls = h.claim(t, "proc/2", 5)
	require.Len(t, ls, 1)
	sameTime(t, h.clk.Now().Add(inbound.DefaultLease), ls[0].Until, "default lease")

	// Max 0 claims nothing.
	h.enqueue(t, msg{chat: group("g3"), id: "3"})
	require.Empty(t, h.claim(t, "w", 0))
}

func testClaimMax(t *testing.T, h *harness) {
	for i := range 10 {
		h.enqueue(t, msg{chat: group(fmt.Sprintf("g%d", i)), id: fmt.Sprint(i), at: time.Duration(i) * time.Second})
	}
	require.Len(t, h.claim(t, "w", 4), 4)
	require.Len(t, h.claim(t, "w", 4), 4)
	require.Len(t, h.claim(t, "w", 4), 2)
	require.Empty(t, h.claim(t, "w", 4))
}

func testSessionLimits(t *testing.T, h *harness) {
	g, p := group("busy"), private("peer")
	var gm, pm []msg
	for i := range 5 {
		gm = append(gm, msg{chat: g, id: fmt.Sprintf("g%d", i), at: time.Duration(i) * time.Second})
		pm = append(pm, msg{chat: p, id: fmt.Sprintf("p%d", i), at: time.Duration(i) * time.Second})
	}
	h.enqueue(t, gm...)
	h.enqueue(t, pm...)

	ls := h.claim(t, "w", 100)
	require.Len(t, ls, inbound.DefaultPerGroup+inbound.DefaultPerPrivate)
	count := map[string][]inbound.Lease{}
	for _, l := range ls {
		count[l.SessionKey] = append(count[l.SessionKey], l)
	}
	gk, pk := event(gm[0]).SessionKey, event(pm[0]).SessionKey
	require.Len(t, count[gk], inbound.DefaultPerGroup, "3 per group session")
	require.Len(t, count[pk], inbound.DefaultPerPrivate, "2 per private session")
	require.Equal(t, []string{key(gm[0]), key(gm[1]), key(gm[2])}, ids(count[gk]), "oldest first within the session")
	require.Equal(t, []string{key(pm[0]), key(pm[1])}, ids(count[pk]))

	require.Empty(t, h.claim(t, "w", 100), "both sessions are at their limit")

	// Finishing one group item frees one group slot only.
	require.NoError(t, h.q.Complete(t.Context(), count[gk][0], replied))
	ls = h.claim(t, "w", 100)
	require.Equal(t, []string{key(gm[3])}, ids(ls))

	// An expired lease no longer counts as in flight, and is itself claimable.
	h.clk.Advance(inbound.DefaultLease)
	ls = h.claim(t, "w2", 100)
	require.Len(t, ls, inbound.DefaultPerGroup+inbound.DefaultPerPrivate)
}

func testCustomLimits(t *testing.T, h *harness) {
	var ms []msg
	for i := range 4 {
		ms = append(ms, msg{chat: group("g"), id: fmt.Sprintf("g%d", i), at: time.Duration(i) * time.Second})
		ms = append(ms, msg{chat: private("p"), id: fmt.Sprintf("p%d", i), at: time.Duration(i) * time.Second})
	}
	h.enqueue(t, ms...)
	ls, err := h.q.Claim(t.Context(), inbound.Limits{Max: 100, PerGroup: 1, PerPrivate: 4, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 5)
	ls, err = h.q.Claim(t.Context(), inbound.Limits{Max: 100, PerGroup: 2, PerPrivate: 4, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1, "one more group item up to the raised limit")
}

func testAvailableAt(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "media"}
	it := item(m)
	it.AvailableAt = Start.Add(inbound.MediaMergeWindow)
	ok, err := h.q.Enqueue(t.Context(), it)
	require.NoError(t, err)
	require.True(t, ok)
	sameTime(t, it.AvailableAt, h.lookup(t, key(m)).AvailableAt, "available at")

	at, ok, err := h.q.NextAvailable(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	sameTime(t, it.AvailableAt, at, "next available")

	require.Empty(t, h.claim(t, "w", 10), "not before AvailableAt")
	h.clk.Advance(inbound.MediaMergeWindow - time.Millisecond)
	require.Empty(t, h.claim(t, "w", 10), "1 ms early")
	h.clk.Advance(time.Millisecond)
	require.Equal(t, []string{key(m)}, ids(h.claim(t, "w", 10)), "claimable at AvailableAt")
}

func testLeaseExpiry(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1"}
	h.enqueue(t, m)
	ls, err := h.q.Claim(t.Context(), inbound.Limits{Max: 1, Owner: "a", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 1)

	h.clk.Advance(time.Minute - time.Millisecond)
	require.Empty(t, h.claim(t, "b", 1), "lease still valid")
	h.clk.Advance(time.Millisecond)
	ls2 := h.claim(t, "b", 1)
	require.Len(t, ls2, 1, "claimable once the lease expired")
	require.Equal(t, key(m), ls2[0].ID)
	require.Equal(t, 2, ls2[0].Attempts, "attempts counted across claims")
	require.Equal(t, "b", ls2[0].Owner)
	r := h.lookup(t, key(m))
	require.Equal(t, 2, r.Attempts)
	sameTime(t, Start, r.FirstClaim, "first claim kept")
}

// testClaimsCount: Claims counts every claim (Snooze gives the attempt back,
// not the claim), and a copy of a lease from before a snooze is stale even
// under the same owner and attempt count.
func testClaimsCount(t *testing.T, h *harness) {
	ctx := t.Context()
	m := msg{chat: private("u1"), id: "1"}
	h.enqueue(t, m)
	first := h.claim(t, "same-owner", 1)
	require.Len(t, first, 1)
	require.Equal(t, 1, first[0].Claims)
	require.Equal(t, 1, first[0].Attempts)
	require.NoError(t, h.q.Snooze(ctx, first[0], h.clk.Now(), "offline"))
	again := h.claim(t, "same-owner", 1)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Claims, "every claim counts")
	require.Equal(t, 1, again[0].Attempts, "the snoozed attempt was given back")
	require.ErrorIs(t, h.q.Complete(ctx, first[0], inbound.Outcome{Code: "replied"}), inbound.ErrLeaseLost)
	require.NoError(t, h.q.Complete(ctx, again[0], inbound.Outcome{Code: "replied"}))
}

func testStaleHolder(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1"}
	h.enqueue(t, m)
	stale := h.claim(t, "same-owner", 1)
	require.Len(t, stale, 1)
	h.clk.Advance(inbound.DefaultLease)
	// Re-claimed under the same owner name: only the attempt count differs.
	cur := h.claim(t, "same-owner", 1)
	require.Len(t, cur, 1)
	require.Equal(t, 2, cur[0].Attempts)

	ops := map[string]func(l inbound.Lease) error{
		"Extend":   func(l inbound.Lease) error { return h.q.Extend(t.Context(), &l, time.Minute) },
		"Complete": func(l inbound.Lease) error { return h.q.Complete(t.Context(), l, replied) },
		"Retry": func(l inbound.Lease) error {
			return h.q.Retry(t.Context(), l, h.clk.Now(), errors.New("boom"))
		},
		"Snooze":  func(l inbound.Lease) error { return h.q.Snooze(t.Context(), l, h.clk.Now(), "offline") },
		"Release": func(l inbound.Lease) error { return h.q.Release(t.Context(), l) },
	}
	before := h.lookup(t, key(m))
	for name, op := range ops {
		err := op(stale[0])
		require.ErrorIs(t, err, inbound.ErrLeaseLost, name)
		// A different owner name is rejected too.
		other := cur[0]
		other.Owner = "someone-else"
		require.ErrorIs(t, op(other), inbound.ErrLeaseLost, name+" by another owner")
		after := h.lookup(t, key(m))
		require.Equal(t, before, after, "%s by a stale holder changed nothing", name)
	}
	require.NoError(t, h.q.Complete(t.Context(), cur[0], replied), "the current holder still can")

	// After ReleaseExpired the old holder is stale as well.
	m2 := msg{chat: group("g2"), id: "2"}
	h.enqueue(t, m2)
	l2 := h.claim(t, "w", 1)
	require.Len(t, l2, 1)
	h.clk.Advance(inbound.DefaultLease)
	n, err := h.q.ReleaseExpired(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.ErrorIs(t, h.q.Complete(t.Context(), l2[0], replied), inbound.ErrLeaseLost)
}

func testAfterComplete(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1"}
	h.enqueue(t, m)
	ls := h.claim(t, "w", 1)
	require.Len(t, ls, 1)
	l := ls[0]
	require.NoError(t, h.q.Complete(t.Context(), l, replied))
	done := h.lookup(t, l.ID)

	require.ErrorIs(t, h.q.Extend(t.Context(), &l, time.Minute), inbound.ErrLeaseLost)
	require.ErrorIs(t, h.q.Complete(t.Context(), l, inbound.Outcome{Code: outcome.RepliedError}), inbound.ErrLeaseLost)
	require.ErrorIs(t, h.q.Retry(t.Context(), l, h.clk.Now(), errors.New("x")), inbound.ErrLeaseLost)
	require.ErrorIs(t, h.q.Snooze(t.Context(), l, h.clk.Now(), "x"), inbound.ErrLeaseLost)
	require.ErrorIs(t, h.q.Release(t.Context(), l), inbound.ErrLeaseLost)
	require.Equal(t, done, h.lookup(t, l.ID), "nothing changed")
	h.clk.Advance(inbound.DefaultLease)
	require.Empty(t, h.claim(t, "w", 1), "a done item is never claimed again")
}

func testComplete(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1"}
	h.enqueue(t, m)
	ls := h.claim(t, "w", 1)
	require.Len(t, ls, 1)
	h.clk.Advance(2 * time.Second)
	o := inbound.Outcome{
		Code:        outcome.RepliedProactive,
		Reason:      "router allowed",
		Stage:       inbound.StageAcknowledged,
		OutboundIDs: []string{"m1", "m2"},
		MergedInto:  "",
		Timings: inbound.Timings{
			GatesDone:       Start.Add(100 * time.Millisecond),
			GenerationStart: Start.Add(200 * time.Millisecond),
			GenerationEnd:   Start.Add(time.Second),
			FirstSend:       Start.Add(1100 * time.Millisecond),
			FirstAck:        Start.Add(1200 * time.Millisecond),
		},
		Tokens: []inbound.Tokens{{Purpose: "generation", Model: "m", Input: 10, CachedInput: 4, Output: 7}},
		Kind:   "proactive",
	}
	require.NoError(t, h.q.Complete(t.Context(), ls[0], o))
	r := h.lookup(t, ls[0].ID)
	require.Equal(t, inbound.StatusDone, r.Status)
	require.Equal(t, 1, r.Attempts)
	require.Equal(t, o.Code, r.Outcome.Code)
	require.Equal(t, o.Reason, r.Outcome.Reason)
	require.Equal(t, o.Stage, r.Outcome.Stage)
	require.Equal(t, o.OutboundIDs, r.Outcome.OutboundIDs)
	require.Equal(t, o.Tokens, r.Outcome.Tokens)
	require.Equal(t, o.Kind, r.Outcome.Kind)
	sameTime(t, o.Timings.GatesDone, r.Outcome.Timings.GatesDone, "gates done")
	sameTime(t, o.Timings.GenerationStart, r.Outcome.Timings.GenerationStart, "generation start")
	sameTime(t, o.Timings.GenerationEnd, r.Outcome.Timings.GenerationEnd, "generation end")
	sameTime(t, o.Timings.FirstSend, r.Outcome.Timings.FirstSend, "first send")
	sameTime(t, o.Timings.FirstAck, r.Outcome.Timings.FirstAck, "first ack")
	sameTime(t, Start.Add(2*time.Second), r.CompletedAt, "completed at")

	// A merged item.
	m2 := msg{chat: group("g2"), id: "2"}
	h.enqueue(t, m2)
	ls = h.claim(t, "w", 1)
	require.Len(t, ls, 1)
	require.NoError(t, h.q.Complete(t.Context(), ls[0], inbound.Outcome{Code: "merged_into_reply", MergedInto: key(m)}))
	r = h.lookup(t, key(m2))
	require.Equal(t, key(m), r.Outcome.MergedInto)
	require.Empty(t, r.Outcome.OutboundIDs)
}

func testRetry(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1"}
	h.enqueue(t, m)
	ls := h.claim(t, "w", 1)
	require.Len(t, ls, 1)
	delay := inbound.RetryDelay(ls[0].Attempts, 0, 0)
	require.NoError(t, h.q.Retry(t.Context(), ls[0], h.clk.Now().Add(delay), errors.New("model timeout")))

	r := h.lookup(t, key(m))
	require.Equal(t, inbound.StatusPending, r.Status)
	require.Equal(t, 1, r.Attempts, "the failed attempt stays counted")
	require.Contains(t, r.LastError, "model timeout")
	sameTime(t, Start.Add(delay), r.AvailableAt, "available at")

	require.Empty(t, h.claim(t, "w", 1), "not before the retry time")
	h.clk.Advance(delay)
	ls = h.claim(t, "w", 1)
	require.Len(t, ls, 1)
	require.Equal(t, 2, ls[0].Attempts)
}

func testSnooze(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1"}
	h.enqueue(t, m)
	ls := h.claim(t, "w", 1)
	require.Len(t, ls, 1)
	require.NoError(t, h.q.Snooze(t.Context(), ls[0], h.clk.Now().Add(time.Minute), "lane backoff"))

	r := h.lookup(t, key(m))
	require.Equal(t, inbound.StatusPending, r.Status)
	require.Zero(t, r.Attempts, "snooze does not charge the attempt")
	sameTime(t, Start.Add(time.Minute), r.AvailableAt, "available at")

	require.Empty(t, h.claim(t, "w", 1))
	h.clk.Advance(time.Minute)
	ls = h.claim(t, "w", 1)
	require.Len(t, ls, 1)
	require.Equal(t, 1, ls[0].Attempts)
}

func testRelease(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1"}
	h.enqueue(t, m)
	ls := h.claim(t, "w", 1)
	require.Len(t, ls, 1)
	h.clk.Advance(time.Second)
	require.NoError(t, h.q.Release(t.Context(), ls[0]))

	r := h.lookup(t, key(m))
	require.Equal(t, inbound.StatusPending, r.Status)
	require.Zero(t, r.Attempts, "release does not charge the attempt")
	sameTime(t, Start.Add(time.Second), r.AvailableAt, "available now")
	ls = h.claim(t, "w2", 1)
	require.Len(t, ls, 1, "claimable at once")
	require.Equal(t, 1, ls[0].Attempts)
}

func testExtend(t *testing.T, h *harness) {
	m := msg{chat: group("g1"), id: "1"}
	h.enqueue(t, m)
	ls, err := h.q.Claim(t.Context(), inbound.Limits{Max: 1, Owner: "w", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	l := ls[0]

	h.clk.Advance(50 * time.Second)
	require.NoError(t, h.q.Extend(t.Context(), &l, time.Minute))
	sameTime(t, Start.Add(110*time.Second), l.Until, "Until updated in place")

	h.clk.Advance(30 * time.Second) // past the original expiry
	require.Empty(t, h.claim(t, "other", 1), "the extended lease holds")
	require.NoError(t, h.q.Complete(t.Context(), l, replied), "the extended lease is still current")
}

func testReleaseExpired(t *testing.T, h *harness) {
	var ms []msg
	for i := range 3 {
		ms = append(ms, msg{chat: group(fmt.Sprintf("g%d", i)), id: fmt.Sprint(i)})
	}
	h.enqueue(t, ms...)
	short, err := h.q.Claim(t.Context(), inbound.Limits{Max: 2, Owner: "w", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, short, 2)
	long, err := h.q.Claim(t.Context(), inbound.Limits{Max: 1, Owner: "w", Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, long, 1)

	n, err := h.q.ReleaseExpired(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "nothing expired yet")

	h.clk.Advance(time.Minute)
	n, err = h.q.ReleaseExpired(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, l := range short {
		r := h.lookup(t, l.ID)
		require.Equal(t, inbound.StatusPending, r.Status)
		require.Equal(t, 1, r.Attempts, "attempts stay counted")
	}
	require.Equal(t, inbound.StatusLeased, h.lookup(t, long[0].ID).Status)

	ls := h.claim(t, "w2", 10)
	require.ElementsMatch(t, ids(short), ids(ls))
	for _, l := range ls {
		require.Equal(t, 2, l.Attempts)
	}
}

func testNextAvailable(t *testing.T, h *harness) {
	_, ok, err := h.q.NextAvailable(t.Context())
	require.NoError(t, err)
	require.False(t, ok, "empty queue")

	later := msg{chat: group("g1"), id: "later"}
	it := item(later)
	it.AvailableAt = Start.Add(time.Hour)
	_, err = h.q.Enqueue(t.Context(), it)
	require.NoError(t, err)
	sooner := msg{chat: group("g2"), id: "sooner"}
	it = item(sooner)
	it.AvailableAt = Start.Add(10 * time.Minute)
	_, err = h.q.Enqueue(t.Context(), it)
	require.NoError(t, err)

	at, ok, err := h.q.NextAvailable(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	sameTime(t, Start.Add(10*time.Minute), at, "earliest pending")

	// A lease expiring before any pending item counts too.
	now := msg{chat: group("g3"), id: "now"}
	h.enqueue(t, now)
	ls, err := h.q.Claim(t.Context(), inbound.Limits{Max: 1, Owner: "w", Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, key(now), ls[0].ID)
	at, ok, err = h.q.NextAvailable(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	sameTime(t, Start.Add(time.Minute), at, "lease expiry")

	require.NoError(t, h.q.Complete(t.Context(), ls[0], replied))
	h.clk.Advance(10 * time.Minute)
	ls = h.claim(t, "w", 1)
	require.Len(t, ls, 1)
	require.NoError(t, h.q.Complete(t.Context(), ls[0], replied))
	at, ok, err = h.q.NextAvailable(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	sameTime(t, Start.Add(time.Hour), at, "only the last pending item")
}

func testLookupNotFound(t *testing.T, h *harness) {
	_, err := h.q.Lookup(t.Context(), "test/bot/group:none/404")
	require.ErrorIs(t, err, inbound.ErrNotFound)
}

func testConcurrentClaims(t *testing.T, h *harness) {
	const (
		sessions = 20
		perSess  = 10
		workers  = 8
	)
	var all []msg
	for s := range sessions {
		chat := group(fmt.Sprintf("g%d", s))
		if s%4 == 0 {
			chat = private(fmt.Sprintf("p%d", s))
		}
		for i := range perSess {
			all = append(all, msg{chat: chat, id: fmt.Sprintf("%d-%d", s, i), at: time.Duration(i) * time.Millisecond,
				priority: []int{0, 60, 80, 100}[(s+i)%4]})
		}
	}
	h.enqueue(t, all...)

	var (
		mu   sync.Mutex
		seen = map[string]string{}
		dup  []string
		wg   sync.WaitGroup
		errs = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			owner := fmt.Sprintf("worker-%d", w)
			idle := 0
			for idle < 50 {
				ls, err := h.q.Claim(t.Context(), inbound.Limits{Max: 3, Owner: owner})
				if err != nil {
					errs <- err
					return
				}
				if len(ls) == 0 {
					idle++
					mu.Lock()
					done := len(seen) == len(all)
					mu.Unlock()
					if done {
						return
					}
					continue
				}
				idle = 0
				for _, l := range ls {
					mu.Lock()
					if prev, ok := seen[l.ID]; ok {
						dup = append(dup, l.ID+" by "+prev+" and "+owner)
					}
					seen[l.ID] = owner
					mu.Unlock()
					if err := h.q.Complete(t.Context(), l, replied); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, dup, "an item was leased twice")
	require.Len(t, seen, len(all), "every item claimed exactly once")
	for _, m := range all {
		r := h.lookup(t, key(m))
		require.Equal(t, inbound.StatusDone, r.Status)
		require.Equal(t, 1, r.Attempts)
	}
}
