package outbound_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// memLedger is an in-memory outbound.Ledger with fault injection.
type memLedger struct {
	mu     sync.Mutex
	drafts map[string]outbound.Draft
	slots  map[string]map[int]outbound.Slot

	// Errors returned by the next calls of each method (nil = succeed).
	saveErr, slotsErr, intentErr, sentErr, clearErr error
	// intentErrSlot restricts intentErr to one slot (-1 = every slot).
	intentErrSlot int
	saves         int
	clears        []int
}

var _ outbound.Ledger = (*memLedger)(nil)

func newLedger() *memLedger {
	return &memLedger{drafts: map[string]outbound.Draft{}, slots: map[string]map[int]outbound.Slot{}, intentErrSlot: -1}
}

func (l *memLedger) SaveDraft(_ context.Context, d outbound.Draft) (outbound.Draft, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.saves++
	if l.saveErr != nil {
		return outbound.Draft{}, l.saveErr
	}
	if old, ok := l.drafts[d.TurnID]; ok {
		return old, nil
	}
	d.Chunks = slices.Clone(d.Chunks)
	l.drafts[d.TurnID] = d
	return d, nil
}

func (l *memLedger) LoadDraft(_ context.Context, turnID string) (outbound.Draft, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.drafts[turnID]
	return d, ok, nil
}

func (l *memLedger) Slots(_ context.Context, turnID string) ([]outbound.Slot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.slotsErr != nil {
		return nil, l.slotsErr
	}
	var out []outbound.Slot
	for _, s := range l.slots[turnID] {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b outbound.Slot) int { return a.N - b.N })
	return out, nil
}

func (l *memLedger) MarkIntent(_ context.Context, turnID string, n int, fp string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.intentErr != nil && (l.intentErrSlot < 0 || l.intentErrSlot == n) {
		return l.intentErr
	}
	m := l.slots[turnID]
	if m == nil {
		m = map[int]outbound.Slot{}
		l.slots[turnID] = m
	}
	if s, ok := m[n]; ok && s.State == outbound.SlotSent {
		return nil // never downgrade
	}
	m[n] = outbound.Slot{TurnID: turnID, N: n, Fingerprint: fp, State: outbound.SlotIntent}
	return nil
}

func (l *memLedger) MarkSent(_ context.Context, turnID string, n int, ids []string, at time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sentErr != nil {
		return l.sentErr
	}
	s := l.slots[turnID][n]
	s.TurnID, s.N, s.State, s.MessageIDs, s.SentAt = turnID, n, outbound.SlotSent, slices.Clone(ids), at
	l.slots[turnID][n] = s
	return nil
}

func (l *memLedger) ClearIntent(_ context.Context, turnID string, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clears = append(l.clears, n)
	if l.clearErr != nil {
		return l.clearErr
	}
	if s, ok := l.slots[turnID][n]; ok && s.State == outbound.SlotIntent {
		delete(l.slots[turnID], n)
	}
	return nil
}

// setIntentAt sets the time of an intent (as a store records it).
func (l *memLedger) setIntentAt(turnID string, n int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.slots[turnID][n]
	s.IntentAt = at
	l.slots[turnID][n] = s
}

func (l *memLedger) slotsOf(turnID string) map[int]outbound.Slot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.slots[turnID])
}

var groupChat = channel.Chat{Kind: channel.Group, ID: "g1"}

// reply returns a reply for the chantest channel ch in groupChat.
func reply(ch *chantest.Channel, turnID, text string) outbound.Reply {
	return outbound.Reply{
		TurnID:     turnID,
		SessionKey: channel.SessionKey("", ch.Name(), ch.BotID(), groupChat),
		Channel:    ch,
		Chat:       groupChat,
		Text:       text,
		Code:       outcome.Replied,
		Reason:     "reply sent",
	}
}

func newSender(t *testing.T, cfg outbound.SenderConfig) *outbound.ChunkSender {
	t.Helper()
	s, err := outbound.NewSender(cfg)
	require.NoError(t, err)
	return s
}

func texts(sent []chantest.Sent) []string {
	out := make([]string, len(sent))
	for i, s := range sent {
		out[i] = s.Out.Text
	}
	return out
}

// eventually waits, without sleeping, until cond holds (failing after ten
// seconds of wall time).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 10*time.Second || t.Context().Err() != nil {
			t.Fatalf("gave up waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func TestNewSenderRequiresLedger(t *testing.T) {
	t.Parallel()
	s, err := outbound.NewSender(outbound.SenderConfig{})
	require.Error(t, err)
	require.ErrorContains(t, err, "Ledger")
	require.Nil(t, s)
}

func TestSendWithoutChannel(t *testing.T) {
	t.Parallel()
	led := newLedger()
	s := newSender(t, outbound.SenderConfig{Ledger: led})
	_, err := s.Send(t.Context(), outbound.Reply{TurnID: "t1", Text: "hi"})
	require.ErrorContains(t, err, "no channel")
	require.Zero(t, led.saves, "nothing persisted")
}

func TestSendChunksFirstCarriesQuoteAndMentions(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	var after []string
	s := newSender(t, outbound.SenderConfig{
		Ledger:   led,
		NoPacing: true,
		AfterSend: func(_ context.Context, r outbound.Reply, n int, c outbound.Chunk, rc channel.Receipt) {
			after = append(after, fmt.Sprintf("%s/%d/%s/%s", r.TurnID, n, c.Text, rc.MessageIDs[0]))
		},
	})
	r := reply(ch, "t1", "One.[persona-msg]Two[persona-line]lines[persona-msg][[PAUSE_30M]]Three。")
	r.ReplyTo = "in-7"
	r.Mentions = []string{"u1", "u2"}
	d, err := s.Send(t.Context(), r)
	require.NoError(t, err)

	sent := ch.Sent()
	require.Equal(t, []string{"One", "Two\nlines", "Three"}, texts(sent))
	require.Equal(t, "in-7", sent[0].Out.ReplyTo)
	require.Equal(t, []string{"u1", "u2"}, sent[0].Out.Mentions)
	for _, x := range sent[1:] {
		require.Empty(t, x.Out.ReplyTo, "only the first chunk quotes")
		require.Empty(t, x.Out.Mentions, "only the first chunk mentions")
	}
	for _, x := range sent {
		require.Equal(t, groupChat, x.Out.Chat)
	}

	require.Equal(t, []string{"out-1", "out-2", "out-3"}, d.MessageIDs)
	require.Equal(t, 3, d.Chunks)
	require.Zero(t, d.Skipped)
	require.Equal(t, outcome.Replied, d.Code)
	require.Equal(t, "reply sent", d.Reason)
	require.False(t, d.FirstSend.IsZero())
	require.False(t, d.FirstAck.Before(d.FirstSend))
	require.Equal(t, []string{"t1/0/One/out-1", "t1/1/Two\nlines/out-2", "t1/2/Three/out-3"}, after)

	// The draft was persisted with the quote and mentions on chunk 0 only.
	draft, ok, err := led.LoadDraft(t.Context(), "t1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, outbound.Draft{
		TurnID: "t1", SessionKey: r.SessionKey, Chat: groupChat, Code: outcome.Replied, Reason: "reply sent",
		Chunks: []outbound.Chunk{
			{Text: "One", ReplyTo: "in-7", Mentions: []string{"u1", "u2"}},
			{Text: "Two\nlines"},
			{Text: "Three"},
		},
	}, draft)

	// Every slot is sent, with its fingerprint in the ledger and an
	// idempotency key of its own.
	slots := led.slotsOf("t1")
	require.Len(t, slots, 3)
	keys := map[string]bool{}
	for n, c := range draft.Chunks {
		fp := outbound.Fingerprint(ch.Name(), ch.BotID(), groupChat, n, c)
		require.Equal(t, outbound.SlotSent, slots[n].State)
		require.Equal(t, fp, slots[n].Fingerprint)
		require.Equal(t, []string{fmt.Sprintf("out-%d", n+1)}, slots[n].MessageIDs)
		require.Len(t, sent[n].Out.IdempotencyKey, 64)
		keys[sent[n].Out.IdempotencyKey] = true
	}
	require.Len(t, keys, 3)
}

func TestSendRespectsTheChannelLimit(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{Limit: channel.TextLimit{Unit: channel.UTF16, Max: 12}})
	s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), NoPacing: true})
	d, err := s.Send(t.Context(), reply(ch, "t1", "hello there 😀 this is a long reply"))
	require.NoError(t, err, "chantest rejects texts over its limit")
	require.Greater(t, d.Chunks, 2)
	for _, x := range ch.Sent() {
		require.LessOrEqual(t, outbound.Measure(x.Out.Text, channel.UTF16), 12)
	}
}

func TestSendEmptyReplySendsNothing(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{})
	s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), NoPacing: true})
	d, err := s.Send(t.Context(), reply(ch, "t1", " [[SILENT]] [persona-msg] "))
	require.NoError(t, err)
	require.Zero(t, d.Chunks)
	require.Empty(t, d.MessageIDs)
	require.Empty(t, ch.Sent())
}

func TestSendResumesStoredDraft(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	failOnce := true
	s := newSender(t, outbound.SenderConfig{
		Ledger:   led,
		NoPacing: true,
		AfterSend: func(_ context.Context, _ outbound.Reply, n int, _ outbound.Chunk, _ channel.Receipt) {
			if n == 0 && failOnce {
				failOnce = false
				ch.FailNext(1, nil) // the second chunk fails
			}
		},
	})
	r := reply(ch, "t1", "alpha[persona-msg]beta[persona-msg]gamma")
	r.ReplyTo, r.Mentions = "in-1", []string{"u1"}

	d, err := s.Send(t.Context(), r)
	var se *outbound.SendError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 1, se.Slot)
	require.Equal(t, []string{"out-1"}, se.Delivered)
	require.ErrorIs(t, err, chantest.ErrSendFailed, "SendError unwraps to the channel error")
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
	require.Contains(t, err.Error(), "chunk 1")
	require.Equal(t, []string{"out-1"}, d.MessageIDs)
	require.Equal(t, []string{"alpha"}, texts(ch.Sent()))

	// The failed chunk's intent was cleared; the sent one stays.
	slots := led.slotsOf("t1")
	require.Len(t, slots, 1)
	require.Equal(t, outbound.SlotSent, slots[0].State)
	require.Equal(t, []int{1}, led.clears)

	// A retry of the turn with another text resumes the stored draft: it
	// skips the sent chunk, reuses its id and sends the rest.
	r2 := reply(ch, "t1", "a completely different generation")
	r2.ReplyTo, r2.Mentions = "in-9", []string{"u9"}
	r2.Code, r2.Reason = outcome.RepliedFallback, "other"
	d, err = s.Send(t.Context(), r2)
	require.NoError(t, err)
	require.Equal(t, []string{"alpha", "beta", "gamma"}, texts(ch.Sent()))
	require.Equal(t, []string{"out-1", "out-2", "out-3"}, d.MessageIDs)
	require.Equal(t, 3, d.Chunks)
	require.Equal(t, 1, d.Skipped)
	require.Equal(t, outcome.Replied, d.Code, "code and reason come from the stored draft")
	require.Equal(t, "reply sent", d.Reason)
	for _, x := range ch.Sent()[1:] {
		require.Empty(t, x.Out.ReplyTo)
		require.Empty(t, x.Out.Mentions)
	}

	// A third call sends nothing and returns every id.
	d, err = s.Send(t.Context(), r2)
	require.NoError(t, err)
	require.Len(t, ch.Sent(), 3)
	require.Equal(t, []string{"out-1", "out-2", "out-3"}, d.MessageIDs)
	require.Equal(t, 3, d.Skipped)
	require.True(t, d.FirstSend.IsZero(), "nothing sent by this call")
}

func TestSendDoesNotResendAnIntentLeftByACrash(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	var logs bytes.Buffer
	s := newSender(t, outbound.SenderConfig{
		Ledger:   led,
		NoPacing: true,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	r := reply(ch, "t1", "one[persona-msg]two[persona-msg]three")
	r.Channel = ch.Bare() // no history to reconcile against

	// A previous process saved the draft, delivered chunk 0 and crashed
	// during the platform call of chunk 1.
	ctx := t.Context()
	_, err := led.SaveDraft(ctx, outbound.Draft{
		TurnID: "t1", SessionKey: r.SessionKey, Chat: groupChat, Code: outcome.Replied,
		Chunks: []outbound.Chunk{{Text: "one"}, {Text: "two"}, {Text: "three"}},
	})
	require.NoError(t, err)
	require.NoError(t, led.MarkIntent(ctx, "t1", 0, chunkFP(r, 0, "one")))
	require.NoError(t, led.MarkSent(ctx, "t1", 0, []string{"old-1"}, t0))
	require.NoError(t, led.MarkIntent(ctx, "t1", 1, chunkFP(r, 1, "two")))

	d, err := s.Send(ctx, r)
	require.NoError(t, err)
	require.Equal(t, []string{"three"}, texts(ch.Sent()), "the unknown chunk is not sent again")
	require.Equal(t, 2, d.Skipped)
	require.Equal(t, 3, d.Chunks)
	require.Equal(t, []string{"old-1", "out-1"}, d.MessageIDs)
	require.Contains(t, logs.String(), "delivery_unknown")
	require.Contains(t, logs.String(), "slot=1")

	slots := led.slotsOf("t1")
	require.Equal(t, outbound.SlotIntent, slots[1].State, "the unknown slot is left as it was")
	require.Equal(t, outbound.SlotSent, slots[2].State)
}

func TestSendRejectedIsDefinitive(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	s := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true})
	ch.FailNext(1, &channel.RejectedError{Code: "403", Reason: "blocked"})
	d, err := s.Send(t.Context(), reply(ch, "t1", "hello"))
	var se *outbound.SendError
	require.ErrorAs(t, err, &se)
	require.Zero(t, se.Slot)
	require.Empty(t, se.Delivered)
	require.Empty(t, d.MessageIDs)
	require.ErrorIs(t, err, channel.ErrRejected)
	require.True(t, channel.Classify(err).Definitive())
	require.Empty(t, led.slotsOf("t1"), "the intent is cleared")
}

func TestSendCancelledKeepsTheIntent(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{})
	led := newLedger()
	s := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Send(ctx, reply(ch, "t1", "hello"))
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, ch.Sent())
	// The outcome of a cancelled platform call is unknown: the intent stays
	// so that a retry does not send the chunk twice.
	require.Equal(t, outbound.SlotIntent, led.slotsOf("t1")[0].State)
	require.Empty(t, led.clears)
}

func TestSendLedgerFailures(t *testing.T) {
	t.Parallel()
	boom := errors.New("disk full")

	t.Run("save draft", func(t *testing.T) {
		t.Parallel()
		ch := chantest.New(chantest.Config{})
		led := newLedger()
		led.saveErr = boom
		_, err := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true}).Send(t.Context(), reply(ch, "t1", "hi"))
		require.ErrorIs(t, err, boom)
		require.ErrorContains(t, err, "save draft")
		require.Empty(t, ch.Sent())
	})
	t.Run("read slots", func(t *testing.T) {
		t.Parallel()
		ch := chantest.New(chantest.Config{})
		led := newLedger()
		led.slotsErr = boom
		_, err := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true}).Send(t.Context(), reply(ch, "t1", "hi"))
		require.ErrorIs(t, err, boom)
		require.Empty(t, ch.Sent())
	})
	t.Run("mark intent", func(t *testing.T) {
		t.Parallel()
		ch := chantest.New(chantest.Config{})
		led := newLedger()
		led.intentErr, led.intentErrSlot = boom, 1
		d, err := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true}).Send(t.Context(), reply(ch, "t1", "a[persona-msg]b"))
		var se *outbound.SendError
		require.ErrorAs(t, err, &se)
		require.ErrorIs(t, err, boom)
		require.Equal(t, 1, se.Slot)
		require.Equal(t, []string{"out-1"}, se.Delivered)
		require.Equal(t, []string{"out-1"}, d.MessageIDs)
		require.Equal(t, []string{"a"}, texts(ch.Sent()), "no platform call without an intent")
	})
	t.Run("mark sent", func(t *testing.T) {
		t.Parallel()
		ch := chantest.New(chantest.Config{})
		led := newLedger()
		led.sentErr = boom
		s := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true})
		d, err := s.Send(t.Context(), reply(ch, "t1", "a[persona-msg]b"))
		require.NoError(t, err, "the chunks went out")
		require.Equal(t, []string{"out-1", "out-2"}, d.MessageIDs)
		// The intent rows alone prevent a second delivery.
		d, err = s.Send(t.Context(), reply(ch, "t1", "a[persona-msg]b"))
		require.NoError(t, err)
		require.Len(t, ch.Sent(), 2)
		require.Equal(t, 2, d.Skipped)
	})
	t.Run("clear intent", func(t *testing.T) {
		t.Parallel()
		ch := chantest.New(chantest.Config{})
		led := newLedger()
		led.clearErr = boom
		ch.FailNext(1, nil)
		_, err := newSender(t, outbound.SenderConfig{Ledger: led, NoPacing: true}).Send(t.Context(), reply(ch, "t1", "a"))
		require.ErrorIs(t, err, chantest.ErrSendFailed, "the send error is returned, not the ledger's")
	})
}

func TestSendPacingWithFakeClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	ch := chantest.New(chantest.Config{Clock: clk})
	s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), Clock: clk})
	second := "a second, somewhat longer chunk"
	third := "ok"

	type result struct {
		d   outbound.Delivery
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := s.Send(t.Context(), reply(ch, "t1", "first[persona-msg]"+second+"[persona-msg]"+third))
		done <- result{d, err}
	}()

	// The first chunk goes out at once; the second waits Pace(second).
	_, err := ch.WaitSent(t.Context(), 1)
	require.NoError(t, err)
	eventually(t, "the pacing timer", func() bool { return clk.Pending() == 1 })
	require.Len(t, ch.Sent(), 1)
	require.Equal(t, 3*time.Second+100*time.Millisecond, outbound.Pace(second))
	require.Len(t, ch.Typings(), 1, "typing is shown while pacing")

	clk.Advance(outbound.Pace(second) - time.Millisecond)
	require.Equal(t, 1, clk.Pending(), "not due yet")
	require.Len(t, ch.Sent(), 1)

	clk.Advance(time.Millisecond)
	_, err = ch.WaitSent(t.Context(), 2)
	require.NoError(t, err)

	// The third chunk waits the minimum pace.
	eventually(t, "the second pacing timer", func() bool { return clk.Pending() == 1 })
	require.Len(t, ch.Sent(), 2)
	clk.Advance(outbound.PaceMin)

	res := <-done
	require.NoError(t, res.err)
	sent := ch.Sent()
	require.Equal(t, []string{"first", second, third}, texts(sent))
	require.Equal(t, t0, sent[0].At)
	require.Equal(t, t0.Add(outbound.Pace(second)), sent[1].At)
	require.Equal(t, t0.Add(outbound.Pace(second)+outbound.PaceMin), sent[2].At)
	require.Equal(t, t0, res.d.FirstSend)
	require.Equal(t, t0, res.d.FirstAck)
	require.Len(t, ch.Typings(), 2)
}

func TestSendPacingInterruptedByCancel(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	ch := chantest.New(chantest.Config{Clock: clk})
	led := newLedger()
	s := newSender(t, outbound.SenderConfig{Ledger: led, Clock: clk})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := s.Send(ctx, reply(ch, "t1", "one[persona-msg]two"))
		done <- err
	}()
	eventually(t, "the pacing timer", func() bool { return clk.Pending() == 1 })
	cancel()
	err := <-done
	var se *outbound.SendError
	require.ErrorAs(t, err, &se)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, se.Slot)
	require.Equal(t, []string{"out-1"}, se.Delivered)
	require.Zero(t, clk.Pending(), "the pacing timer is stopped")
	_, ok := led.slotsOf("t1")[1]
	require.False(t, ok, "no intent for a chunk that never reached the platform")

	// The retry sends the second chunk right away (first of this call).
	d, err := s.Send(t.Context(), reply(ch, "t1", "ignored"))
	require.NoError(t, err)
	require.Equal(t, []string{"out-1", "out-2"}, d.MessageIDs)
	require.Equal(t, []string{"one", "two"}, texts(ch.Sent()))
}

func TestPace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		want time.Duration
	}{
		{"", outbound.PaceMin},
		{"ab", outbound.PaceMin},
		{"abc", 300 * time.Millisecond},
		{"abcd", 400 * time.Millisecond},
		{"你好你好你", 500 * time.Millisecond},
		{"😀😀😀😀😀😀", 600 * time.Millisecond},
		{strings.Repeat("x", 60), outbound.PaceMax},
		{strings.Repeat("x", 5000), outbound.PaceMax},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, outbound.Pace(tt.text), "%q", tt.text)
	}
}

// hookChannel is a chantest channel whose Send runs a hook first.
type hookChannel struct {
	*chantest.Channel
	before func(out channel.Outgoing)
}

func (c *hookChannel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	c.before(out)
	return c.Channel.Send(ctx, out)
}

func TestSendSerializesPerSession(t *testing.T) {
	t.Parallel()
	const turns, chunks = 6, 8
	ch := chantest.New(chantest.Config{})
	s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), NoPacing: true})
	var wg sync.WaitGroup
	for i := range turns {
		wg.Go(func() {
			parts := make([]string, chunks)
			for j := range parts {
				parts[j] = fmt.Sprintf("t%d-c%d", i, j)
			}
			_, err := s.Send(t.Context(), reply(ch, fmt.Sprintf("t%d", i), strings.Join(parts, outbound.MsgMarker)))
			require.NoError(t, err)
		})
	}
	wg.Wait()

	sent := texts(ch.Sent())
	require.Len(t, sent, turns*chunks)
	for k := 0; k < len(sent); k += chunks {
		turn := strings.SplitN(sent[k], "-", 2)[0]
		for j := range chunks {
			require.Equal(t, fmt.Sprintf("%s-c%d", turn, j), sent[k+j], "replies of one session interleaved: %q", sent)
		}
	}
}

func TestSendBlocksOnlyTheSameSession(t *testing.T) {
	t.Parallel()
	base := chantest.New(chantest.Config{})
	entered := make(chan struct{})
	release := make(chan struct{})
	ch := &hookChannel{Channel: base, before: func(out channel.Outgoing) {
		if out.Text == "A1" {
			close(entered)
			<-release
		}
	}}
	s := newSender(t, outbound.SenderConfig{Ledger: newLedger(), NoPacing: true})
	mk := func(turn, text string, chat channel.Chat) outbound.Reply {
		return outbound.Reply{
			TurnID: turn, SessionKey: channel.SessionKey("", base.Name(), base.BotID(), chat),
			Channel: ch, Chat: chat, Text: text,
		}
	}
	other := channel.Chat{Kind: channel.Group, ID: "g2"}

	errs := make(chan error, 2)
	go func() {
		_, err := s.Send(t.Context(), mk("A", "A1[persona-msg]A2", groupChat))
		errs <- err
	}()
	<-entered // A holds g1's session lock inside its first platform call

	bDone := make(chan error, 1)
	go func() {
		_, err := s.Send(t.Context(), mk("B", "B1[persona-msg]B2", groupChat))
		bDone <- err
	}()

	// Another session is not blocked by A.
	_, err := s.Send(t.Context(), mk("C", "C1[persona-msg]C2", other))
	require.NoError(t, err)
	// Give B every chance to run (it must stay blocked on the session).
	for range 1000 {
		runtime.Gosched()
	}
	select {
	case err := <-bDone:
		t.Fatalf("B finished while A held the session: %v", err)
	default:
	}

	close(release)
	require.NoError(t, <-errs)
	require.NoError(t, <-bDone)
	var g1 []string
	for _, x := range base.Sent() {
		if x.Out.Chat == groupChat {
			g1 = append(g1, x.Out.Text)
		}
	}
	require.Equal(t, []string{"A1", "A2", "B1", "B2"}, g1)
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	chat := channel.Chat{Kind: channel.Group, ID: "g1"}
	base := outbound.Chunk{Text: "hello", ReplyTo: "m1", Mentions: []string{"u1"}, Media: []channel.Media{{URL: "https://x/a.png"}}}
	fp := outbound.Fingerprint("onebot", "bot", chat, 0, base)
	require.Regexp(t, `^[0-9a-f]{64}$`, fp)
	require.Equal(t, fp, outbound.Fingerprint("onebot", "bot", chat, 0, base), "stable")
	clone := base
	clone.Mentions = slices.Clone(base.Mentions)
	require.Equal(t, fp, outbound.Fingerprint("onebot", "bot", chat, 0, clone), "depends on values, not identity")

	with := func(f func(c *outbound.Chunk)) outbound.Chunk {
		c := base
		c.Mentions = slices.Clone(base.Mentions)
		c.Media = slices.Clone(base.Media)
		f(&c)
		return c
	}
	variants := map[string]string{
		"platform":      outbound.Fingerprint("telegram", "bot", chat, 0, base),
		"bot":           outbound.Fingerprint("onebot", "bot2", chat, 0, base),
		"chat id":       outbound.Fingerprint("onebot", "bot", channel.Chat{Kind: channel.Group, ID: "g2"}, 0, base),
		"chat kind":     outbound.Fingerprint("onebot", "bot", channel.Chat{Kind: channel.Private, ID: "g1"}, 0, base),
		"slot":          outbound.Fingerprint("onebot", "bot", chat, 1, base),
		"text":          outbound.Fingerprint("onebot", "bot", chat, 0, with(func(c *outbound.Chunk) { c.Text = "hello!" })),
		"quote":         outbound.Fingerprint("onebot", "bot", chat, 0, with(func(c *outbound.Chunk) { c.ReplyTo = "" })),
		"mention":       outbound.Fingerprint("onebot", "bot", chat, 0, with(func(c *outbound.Chunk) { c.Mentions = []string{"u2"} })),
		"no mention":    outbound.Fingerprint("onebot", "bot", chat, 0, with(func(c *outbound.Chunk) { c.Mentions = nil })),
		"media":         outbound.Fingerprint("onebot", "bot", chat, 0, with(func(c *outbound.Chunk) { c.Media[0].URL = "https://x/b.png" })),
		"media file id": outbound.Fingerprint("onebot", "bot", chat, 0, with(func(c *outbound.Chunk) { c.Media[0].FileID = "f" })),
		"no media":      outbound.Fingerprint("onebot", "bot", chat, 0, with(func(c *outbound.Chunk) { c.Media = nil })),
		// Length-prefixed fields: moving bytes between fields changes it.
		"shifted text": outbound.Fingerprint("onebot", "bot", chat, 0, with(func(c *outbound.Chunk) { c.Text = "hellom1"; c.ReplyTo = "" })),
	}
	seen := map[string]string{fp: "base"}
	for name, v := range variants {
		prev, dup := seen[v]
		require.False(t, dup, "%s has the same fingerprint as %s", name, prev)
		seen[v] = name
	}
}

func TestSenderFunc(t *testing.T) {
	t.Parallel()
	var s outbound.Sender = outbound.SenderFunc(func(_ context.Context, r outbound.Reply) (outbound.Delivery, error) {
		return outbound.Delivery{Chunks: len(r.Text)}, nil
	})
	d, err := s.Send(t.Context(), outbound.Reply{Text: "abc"})
	require.NoError(t, err)
	require.Equal(t, 3, d.Chunks)
}
