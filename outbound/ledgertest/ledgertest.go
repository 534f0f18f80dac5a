package ledgertest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

// Start is the fake clock's start time in every subtest. It has a
// sub-millisecond part, so a ledger that keeps coarser times than
// milliseconds fails.
var Start = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

// Run runs the outbound.Ledger conformance suite against the ledgers open
// returns. Each subtest gets a fresh ledger and a fresh fake clock set to
// Start; the ledger must read "now" from that clock.
func Run(t *testing.T, open func(t *testing.T, clk *clock.Fake) outbound.Ledger) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"DraftRoundTripEveryField", testDraftRoundTrip},
		{"MissingTurn", testMissingTurn},
		{"SaveDraftFirstWins", testFirstDraftWins},
		{"SlotsOrderedAndPerTurn", testSlotsOrdered},
		{"IntentRoundTrip", testIntentRoundTrip},
		{"MarkIntentIsIdempotent", testIntentIdempotent},
		{"MarkSentRoundTrip", testSentRoundTrip},
		{"MarkSentWithoutIntent", testSentWithoutIntent},
		{"MarkIntentDoesNotDowngradeSent", testNoDowngrade},
		{"ClearIntent", testClearIntent},
		{"ConcurrentSaveDraftOneWinner", testConcurrentSaveDraft},
		{"ConcurrentTurns", testConcurrentTurns},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(Start)
			l := open(t, clk)
			require.NotNil(t, l, "open returned nil")
			tc.fn(t, &harness{l: l, clk: clk})
		})
	}
}

// RunDraftIntent runs the outbound.DraftIntentLedger conformance suite (the
// combined SaveDraftIntent write) against the ledgers open returns, with a
// fresh ledger and fake clock per subtest as in Run. It does not repeat
// Run's cases: call both for a DraftIntentLedger.
func RunDraftIntent(t *testing.T, open func(t *testing.T, clk *clock.Fake) outbound.DraftIntentLedger) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness, l outbound.DraftIntentLedger)
	}{
		{"NewDraftWithIntent", testDINew},
		{"RepeatIsIdempotent", testDIRepeat},
		{"EqualDraftAlreadyStored", testDIEqualStored},
		{"OtherDraftStored", testDIOtherStored},
		{"DoesNotDowngradeSent", testDINoDowngrade},
		{"ConcurrentOneWinner", testDIConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(Start)
			l := open(t, clk)
			require.NotNil(t, l, "open returned nil")
			tc.fn(t, &harness{l: l, clk: clk}, l)
		})
	}
}

// harness bundles a ledger under test with its clock.
type harness struct {
	l   outbound.Ledger
	clk *clock.Fake
}

var privateChat = channel.Chat{Kind: channel.Private, ID: "u1"}

// draft is a small valid draft of turn with one chunk per text.
func draft(turn string, texts ...string) outbound.Draft {
	d := outbound.Draft{TurnID: turn, SessionKey: "default:test:bot:private:u1", Chat: privateChat,
		Code: outcome.Replied}
	for _, s := range texts {
		d.Chunks = append(d.Chunks, outbound.Chunk{Text: s})
	}
	return d
}

// fp is the fingerprint of chunk n with text s, as the sender computes it.
func fp(n int, s string) string {
	return outbound.Fingerprint("test", "bot", privateChat, n, outbound.Chunk{Text: s})
}

func (h *harness) slots(t *testing.T, turn string) []outbound.Slot {
	t.Helper()
	ss, err := h.l.Slots(t.Context(), turn)
	require.NoError(t, err)
	return ss
}

func (h *harness) load(t *testing.T, turn string) outbound.Draft {
	t.Helper()
	d, ok, err := h.l.LoadDraft(t.Context(), turn)
	require.NoError(t, err)
	require.True(t, ok, "draft of %s not found", turn)
	return d
}

func (h *harness) intent(t *testing.T, turn string, n int, fingerprint string) {
	t.Helper()
	require.NoError(t, h.l.MarkIntent(t.Context(), turn, n, fingerprint))
}

func (h *harness) sent(t *testing.T, turn string, n int, ids []string, at time.Time) {
	t.Helper()
	require.NoError(t, h.l.MarkSent(t.Context(), turn, n, ids, at))
}

// sameTime asserts two instants are equal at millisecond precision: less
// than a millisecond apart, so that a store may truncate or round to
// milliseconds or keep finer times.
func sameTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	d := got.Sub(want)
	require.True(t, d > -time.Millisecond && d < time.Millisecond, "%s: want %s, got %s", what, want, got)
}

// requireIntent asserts s is turn's slot n, an intent with fingerprint
// fingerprint recorded at at.
func requireIntent(t *testing.T, s outbound.Slot, turn string, n int, fingerprint string, at time.Time) {
	t.Helper()
	require.Equal(t, turn, s.TurnID)
	require.Equal(t, n, s.N)
	require.Equal(t, outbound.SlotIntent, s.State, "slot %d state", n)
	require.Equal(t, fingerprint, s.Fingerprint, "slot %d fingerprint", n)
	require.Empty(t, s.MessageIDs, "slot %d: an intent has no platform ids", n)
	require.True(t, s.SentAt.IsZero(), "slot %d: an intent has no send time, got %s", n, s.SentAt)
	require.False(t, s.IntentAt.IsZero(), "slot %d: an intent is dated", n)
	sameTime(t, at, s.IntentAt, fmt.Sprintf("slot %d IntentAt", n))
}

// requireSent asserts s is turn's slot n, sent with ids at at.
func requireSent(t *testing.T, s outbound.Slot, turn string, n int, ids []string, at time.Time) {
	t.Helper()
	require.Equal(t, turn, s.TurnID)
	require.Equal(t, n, s.N)
	require.Equal(t, outbound.SlotSent, s.State, "slot %d state", n)
	if len(ids) == 0 {
		require.Empty(t, s.MessageIDs, "slot %d ids", n)
	} else {
		require.Equal(t, ids, s.MessageIDs, "slot %d ids", n)
	}
	sameTime(t, at, s.SentAt, fmt.Sprintf("slot %d SentAt", n))
}

func slotNumbers(ss []outbound.Slot) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = s.N
	}
	return out
}

// --- Ledger ---

func testDraftRoundTrip(t *testing.T, h *harness) {
	full := outbound.Draft{
		TurnID:     "onebot/10001/group:42/m-7 ünïcode",
		SessionKey: "night-owl:onebot:10001:group:42",
		Chat:       channel.Chat{Kind: channel.Group, ID: "42"},
		Chunks: []outbound.Chunk{
			{Text: "First line\nsecond \"quoted\" line, 早上好 🌅", ReplyTo: "m-7", Mentions: []string{"u1", "u2"}},
			{Text: "", Media: []channel.Media{
				{URL: "https://example.invalid/a.png", FileID: "f-1", Name: "a.png", MIME: "image/png", Size: 123456,
					SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Description: "a cat",
					Album: "al-1"},
				{FileID: "voice-2", MIME: "audio/ogg", Duration: 7, Transcript: "hello there"},
			}},
			{Text: "   leading and trailing spaces kept   "},
		},
		Code:   outcome.Replied,
		Reason: "answered the question",
	}
	bare := outbound.Draft{TurnID: "t-bare", Chunks: []outbound.Chunk{{Text: "only text"}}}

	for _, d := range []outbound.Draft{full, bare} {
		got, err := h.l.SaveDraft(t.Context(), d)
		require.NoError(t, err)
		require.Equal(t, d, got, "SaveDraft returns a new draft as given")
		require.Equal(t, d, h.load(t, d.TurnID), "LoadDraft returns every field")
	}
	require.Empty(t, h.slots(t, full.TurnID), "a draft is not a slot")
}

func testMissingTurn(t *testing.T, h *harness) {
	_, ok, err := h.l.LoadDraft(t.Context(), "t-none")
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, h.slots(t, "t-none"))
	require.NoError(t, h.l.ClearIntent(t.Context(), "t-none", 0), "clearing a missing slot is not an error")
	require.Empty(t, h.slots(t, "t-none"))
	_, ok, err = h.l.LoadDraft(t.Context(), "t-none")
	require.NoError(t, err)
	require.False(t, ok, "reads and a no-op clear create nothing")
}

func testFirstDraftWins(t *testing.T, h *harness) {
	first := draft("t1", "one", "two")
	got, err := h.l.SaveDraft(t.Context(), first)
	require.NoError(t, err)
	require.Equal(t, first, got)

	regenerated := draft("t1", "something else entirely")
	regenerated.Code, regenerated.Reason = outcome.Code("other_code"), "retry"
	h.clk.Advance(time.Minute)
	got, err = h.l.SaveDraft(t.Context(), regenerated)
	require.NoError(t, err)
	require.Equal(t, first, got, "the stored draft wins")
	require.Equal(t, first, h.load(t, "t1"))

	got, err = h.l.SaveDraft(t.Context(), first)
	require.NoError(t, err)
	require.Equal(t, first, got, "saving the stored draft again")

	// Another turn, even one whose id extends this one, is independent.
	other := draft("t10", "ten")
	got, err = h.l.SaveDraft(t.Context(), other)
	require.NoError(t, err)
	require.Equal(t, other, got)
	require.Equal(t, other, h.load(t, "t10"))
	require.Equal(t, first, h.load(t, "t1"))
}

func testSlotsOrdered(t *testing.T, h *harness) {
	_, err := h.l.SaveDraft(t.Context(), draft("t1", "a", "b", "c", "d"))
	require.NoError(t, err)
	// Written out of order, with the card slot and a sent slot among them.
	at := Start.Add(time.Second)
	h.intent(t, "t1", 3, fp(3, "d"))
	h.intent(t, "t1", outbound.ForwardSlot, "fp-card")
	h.intent(t, "t1", 0, fp(0, "a"))
	h.sent(t, "t1", 2, []string{"m2"}, at)
	h.intent(t, "t1", 1, fp(1, "b"))
	// Turns whose ids share a prefix with t1.
	h.intent(t, "t10", 0, "fp-t10")
	h.intent(t, "t", 5, "fp-t")

	ss := h.slots(t, "t1")
	require.Equal(t, []int{0, 1, 2, 3, outbound.ForwardSlot}, slotNumbers(ss), "ordered by slot number, this turn only")
	requireIntent(t, ss[0], "t1", 0, fp(0, "a"), Start)
	requireIntent(t, ss[1], "t1", 1, fp(1, "b"), Start)
	requireSent(t, ss[2], "t1", 2, []string{"m2"}, at)
	requireIntent(t, ss[3], "t1", 3, fp(3, "d"), Start)
	requireIntent(t, ss[4], "t1", outbound.ForwardSlot, "fp-card", Start)

	ss = h.slots(t, "t10")
	require.Len(t, ss, 1)
	requireIntent(t, ss[0], "t10", 0, "fp-t10", Start)
	ss = h.slots(t, "t")
	require.Len(t, ss, 1)
	requireIntent(t, ss[0], "t", 5, "fp-t", Start)
}

func testIntentRoundTrip(t *testing.T, h *harness) {
	h.intent(t, "t1", 0, fp(0, "a"))
	h.clk.Advance(1500*time.Millisecond + 777*time.Microsecond)
	second := h.clk.Now()
	h.intent(t, "t1", 1, "any opaque fingerprint: ünïcode/\x01")

	ss := h.slots(t, "t1")
	require.Len(t, ss, 2)
	requireIntent(t, ss[0], "t1", 0, fp(0, "a"), Start)
	requireIntent(t, ss[1], "t1", 1, "any opaque fingerprint: ünïcode/\x01", second)
}

func testIntentIdempotent(t *testing.T, h *harness) {
	h.intent(t, "t1", 0, fp(0, "a"))
	h.clk.Advance(time.Minute)
	h.intent(t, "t1", 0, fp(0, "a"))

	ss := h.slots(t, "t1")
	require.Len(t, ss, 1, "one slot, never a second row")
	// The exit looks back to the first intent when it settles the slot: a
	// repeat must not move it later.
	requireIntent(t, ss[0], "t1", 0, fp(0, "a"), Start)
}

func testSentRoundTrip(t *testing.T, h *harness) {
	h.intent(t, "t1", 0, fp(0, "a"))
	h.intent(t, "t1", 1, fp(1, "b"))
	h.clk.Advance(time.Second)
	at := Start.Add(2*time.Second + 345678*time.Microsecond)
	ids := []string{"m-3", "m-1", "m-2 ünïcode"}
	h.sent(t, "t1", 0, ids, at)

	ss := h.slots(t, "t1")
	require.Len(t, ss, 2)
	requireSent(t, ss[0], "t1", 0, ids, at)
	require.Equal(t, fp(0, "a"), ss[0].Fingerprint, "the fingerprint of the intent stays")
	requireIntent(t, ss[1], "t1", 1, fp(1, "b"), Start)

	// A chunk delivered without platform ids.
	h.sent(t, "t1", 1, nil, at.Add(time.Second))
	ss = h.slots(t, "t1")
	require.Len(t, ss, 2)
	requireSent(t, ss[1], "t1", 1, nil, at.Add(time.Second))
	require.Equal(t, fp(1, "b"), ss[1].Fingerprint)
}

func testSentWithoutIntent(t *testing.T, h *harness) {
	// A delivery is recorded even when its intent is missing.
	at := Start.Add(-time.Hour)
	h.sent(t, "t1", 4, []string{"m4"}, at)
	h.sent(t, "t1", outbound.ForwardSlot, []string{"card-1", "card-2"}, at.Add(time.Millisecond))

	ss := h.slots(t, "t1")
	require.Len(t, ss, 2)
	requireSent(t, ss[0], "t1", 4, []string{"m4"}, at)
	requireSent(t, ss[1], "t1", outbound.ForwardSlot, []string{"card-1", "card-2"}, at.Add(time.Millisecond))
}

func testNoDowngrade(t *testing.T, h *harness) {
	at := Start.Add(3 * time.Second)
	h.intent(t, "t1", 0, fp(0, "a"))
	h.sent(t, "t1", 0, []string{"m0"}, at)
	h.clk.Advance(time.Minute)
	h.intent(t, "t1", 0, fp(0, "a"))

	ss := h.slots(t, "t1")
	require.Len(t, ss, 1)
	requireSent(t, ss[0], "t1", 0, []string{"m0"}, at)
	require.Equal(t, fp(0, "a"), ss[0].Fingerprint)
}

func testClearIntent(t *testing.T, h *harness) {
	at := Start.Add(time.Second)
	h.intent(t, "t1", 0, fp(0, "a"))
	h.sent(t, "t1", 0, []string{"m0"}, at)
	h.intent(t, "t1", 1, fp(1, "b"))
	h.intent(t, "t1", 2, fp(2, "c"))
	h.intent(t, "t2", 1, "fp-t2")

	require.NoError(t, h.l.ClearIntent(t.Context(), "t1", 1))
	ss := h.slots(t, "t1")
	require.Equal(t, []int{0, 2}, slotNumbers(ss), "only the cleared intent is gone")
	requireSent(t, ss[0], "t1", 0, []string{"m0"}, at)
	requireIntent(t, ss[1], "t1", 2, fp(2, "c"), Start)
	ss = h.slots(t, "t2")
	require.Len(t, ss, 1, "another turn's slot of the same number stays")
	requireIntent(t, ss[0], "t2", 1, "fp-t2", Start)

	require.NoError(t, h.l.ClearIntent(t.Context(), "t1", 0), "clearing a sent slot is not an error")
	require.NoError(t, h.l.ClearIntent(t.Context(), "t1", 1), "clearing it again is not an error")
	require.NoError(t, h.l.ClearIntent(t.Context(), "t1", 9), "clearing a missing slot is not an error")
	ss = h.slots(t, "t1")
	require.Equal(t, []int{0, 2}, slotNumbers(ss))
	requireSent(t, ss[0], "t1", 0, []string{"m0"}, at)

	// The retry records a fresh intent, possibly for a different chunk.
	h.clk.Advance(time.Minute)
	h.intent(t, "t1", 1, fp(1, "b, regenerated"))
	ss = h.slots(t, "t1")
	require.Equal(t, []int{0, 1, 2}, slotNumbers(ss))
	requireIntent(t, ss[1], "t1", 1, fp(1, "b, regenerated"), Start.Add(time.Minute))
}

func testConcurrentSaveDraft(t *testing.T, h *harness) {
	const workers = 8
	var (
		wg   sync.WaitGroup
		got  = make([]outbound.Draft, workers)
		errs = make([]error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			got[w], errs[w] = h.l.SaveDraft(t.Context(), draft("t1", fmt.Sprintf("attempt %d", w)))
		})
	}
	wg.Wait()
	for w := range workers {
		require.NoError(t, errs[w], "worker %d", w)
	}
	winner := h.load(t, "t1")
	require.Len(t, winner.Chunks, 1)
	var from []int
	for w := range workers {
		require.Equal(t, winner, got[w], "worker %d got another draft than the stored one", w)
		if winner.Chunks[0].Text == fmt.Sprintf("attempt %d", w) {
			from = append(from, w)
		}
	}
	require.Len(t, from, 1, "the stored draft is one of those saved")
}

func testConcurrentTurns(t *testing.T, h *harness) {
	// Many workers deliver their own turns at once, while readers look at
	// them: slot by slot an intent, then sent; every third chunk fails once
	// first (intent cleared, then retried).
	const (
		workers = 8
		turns   = 4
		chunks  = 5
	)
	turnID := func(w, i int) string { return fmt.Sprintf("w%d/turn-%d", w, i) }
	text := func(n int) string { return fmt.Sprintf("chunk %d", n) }
	sentAt := func(n int) time.Time { return Start.Add(time.Duration(n) * time.Second) }
	var (
		wg   sync.WaitGroup
		errs = make(chan error, workers*2)
	)
	for w := range workers {
		wg.Go(func() {
			ctx := t.Context()
			for i := range turns {
				turn := turnID(w, i)
				var texts []string
				for n := range chunks {
					texts = append(texts, text(n))
				}
				if _, err := h.l.SaveDraft(ctx, draft(turn, texts...)); err != nil {
					errs <- err
					return
				}
				for n := range chunks {
					if n%3 == 0 {
						if err := h.l.MarkIntent(ctx, turn, n, "failed try"); err != nil {
							errs <- err
							return
						}
						if err := h.l.ClearIntent(ctx, turn, n); err != nil {
							errs <- err
							return
						}
					}
					if err := h.l.MarkIntent(ctx, turn, n, fp(n, text(n))); err != nil {
						errs <- err
						return
					}
					ids := []string{fmt.Sprintf("%s#%d", turn, n)}
					if err := h.l.MarkSent(ctx, turn, n, ids, sentAt(n)); err != nil {
						errs <- err
						return
					}
				}
			}
		})
		// A reader per worker: what it sees is always well formed.
		wg.Go(func() {
			ctx := t.Context()
			for i := range turns {
				for range 3 {
					ss, err := h.l.Slots(ctx, turnID(w, i))
					if err != nil {
						errs <- err
						return
					}
					if !slices.IsSortedFunc(ss, func(a, b outbound.Slot) int { return a.N - b.N }) {
						errs <- fmt.Errorf("slots of %s out of order: %v", turnID(w, i), slotNumbers(ss))
						return
					}
					if _, _, err := h.l.LoadDraft(ctx, turnID(w, i)); err != nil {
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
	for w := range workers {
		for i := range turns {
			turn := turnID(w, i)
			require.Len(t, h.load(t, turn).Chunks, chunks)
			ss := h.slots(t, turn)
			require.Len(t, ss, chunks, turn)
			for n, s := range ss {
				requireSent(t, s, turn, n, []string{fmt.Sprintf("%s#%d", turn, n)}, sentAt(n))
				require.Equal(t, fp(n, text(n)), s.Fingerprint, "%s slot %d", turn, n)
			}
		}
	}
}

// --- DraftIntentLedger ---

func testDINew(t *testing.T, h *harness, l outbound.DraftIntentLedger) {
	d := draft("t1", "one", "two")
	got, intent, err := l.SaveDraftIntent(t.Context(), d, fp(0, "one"))
	require.NoError(t, err)
	require.True(t, intent, "a new draft comes with its first intent")
	require.Equal(t, d, got)
	require.Equal(t, d, h.load(t, "t1"))
	ss := h.slots(t, "t1")
	require.Len(t, ss, 1, "slot 0 only")
	requireIntent(t, ss[0], "t1", 0, fp(0, "one"), Start)

	// The rest of the reply goes on as usual.
	h.sent(t, "t1", 0, []string{"m0"}, Start.Add(time.Second))
	h.intent(t, "t1", 1, fp(1, "two"))
	ss = h.slots(t, "t1")
	require.Equal(t, []int{0, 1}, slotNumbers(ss))
	requireSent(t, ss[0], "t1", 0, []string{"m0"}, Start.Add(time.Second))
	require.Equal(t, fp(0, "one"), ss[0].Fingerprint)
}

func testDIRepeat(t *testing.T, h *harness, l outbound.DraftIntentLedger) {
	d := draft("t1", "one")
	_, intent, err := l.SaveDraftIntent(t.Context(), d, fp(0, "one"))
	require.NoError(t, err)
	require.True(t, intent)
	h.clk.Advance(time.Minute)
	got, intent, err := l.SaveDraftIntent(t.Context(), d, fp(0, "one"))
	require.NoError(t, err)
	require.True(t, intent, "repeating the same draft and intent")
	require.Equal(t, d, got)
	ss := h.slots(t, "t1")
	require.Len(t, ss, 1)
	requireIntent(t, ss[0], "t1", 0, fp(0, "one"), Start)
}

func testDIEqualStored(t *testing.T, h *harness, l outbound.DraftIntentLedger) {
	d := draft("t1", "one")
	_, err := h.l.SaveDraft(t.Context(), d)
	require.NoError(t, err)
	h.clk.Advance(time.Second)
	got, intent, err := l.SaveDraftIntent(t.Context(), d, fp(0, "one"))
	require.NoError(t, err)
	require.True(t, intent, "an equal draft was stored: the intent is recorded")
	require.Equal(t, d, got)
	ss := h.slots(t, "t1")
	require.Len(t, ss, 1)
	requireIntent(t, ss[0], "t1", 0, fp(0, "one"), Start.Add(time.Second))
}

func testDIOtherStored(t *testing.T, h *harness, l outbound.DraftIntentLedger) {
	// A draft saved alone by an earlier attempt.
	first := draft("t1", "first")
	_, err := h.l.SaveDraft(t.Context(), first)
	require.NoError(t, err)
	got, intent, err := l.SaveDraftIntent(t.Context(), draft("t1", "second"), fp(0, "second"))
	require.NoError(t, err)
	require.False(t, intent, "another draft is stored: the caller marks its first chunk")
	require.Equal(t, first, got, "the stored draft is returned")
	require.Equal(t, first, h.load(t, "t1"))
	require.Empty(t, h.slots(t, "t1"), "no intent was recorded")

	// A draft saved with its intent by an earlier attempt.
	_, intent, err = l.SaveDraftIntent(t.Context(), draft("t2", "first"), fp(0, "first"))
	require.NoError(t, err)
	require.True(t, intent)
	h.clk.Advance(time.Minute)
	got, intent, err = l.SaveDraftIntent(t.Context(), draft("t2", "second"), fp(0, "second"))
	require.NoError(t, err)
	require.False(t, intent)
	require.Equal(t, draft("t2", "first"), got)
	ss := h.slots(t, "t2")
	require.Len(t, ss, 1)
	requireIntent(t, ss[0], "t2", 0, fp(0, "first"), Start)
}

func testDINoDowngrade(t *testing.T, h *harness, l outbound.DraftIntentLedger) {
	d := draft("t1", "one")
	_, _, err := l.SaveDraftIntent(t.Context(), d, fp(0, "one"))
	require.NoError(t, err)
	h.sent(t, "t1", 0, []string{"m0"}, Start.Add(time.Second))
	h.clk.Advance(time.Minute)
	got, _, err := l.SaveDraftIntent(t.Context(), d, fp(0, "one"))
	require.NoError(t, err)
	require.Equal(t, d, got)
	ss := h.slots(t, "t1")
	require.Len(t, ss, 1)
	requireSent(t, ss[0], "t1", 0, []string{"m0"}, Start.Add(time.Second))
}

func testDIConcurrent(t *testing.T, h *harness, l outbound.DraftIntentLedger) {
	const workers = 8
	text := func(w int) string { return fmt.Sprintf("attempt %d", w) }
	var (
		wg      sync.WaitGroup
		got     = make([]outbound.Draft, workers)
		intents = make([]bool, workers)
		errs    = make([]error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			got[w], intents[w], errs[w] = l.SaveDraftIntent(t.Context(), draft("t1", text(w)), fp(0, text(w)))
		})
	}
	wg.Wait()
	winner := h.load(t, "t1")
	require.Len(t, winner.Chunks, 1)
	won := -1
	for w := range workers {
		require.NoError(t, errs[w], "worker %d", w)
		require.Equal(t, winner, got[w], "worker %d got another draft than the stored one", w)
		if winner.Chunks[0].Text == text(w) {
			require.True(t, intents[w], "the winner's intent is recorded")
			won = w
		} else {
			require.False(t, intents[w], "worker %d lost but reports an intent", w)
		}
	}
	require.GreaterOrEqual(t, won, 0, "the stored draft is one of those saved")
	ss := h.slots(t, "t1")
	require.Len(t, ss, 1)
	requireIntent(t, ss[0], "t1", 0, fp(0, text(won)), Start)
}
