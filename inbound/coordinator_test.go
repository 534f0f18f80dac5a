package inbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/internal/logbuf"
)

var ct0 = time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)

// coCheckpoints is an in-memory Checkpoints recording every save.
type coCheckpoints struct {
	mu    sync.Mutex
	at    time.Time
	ok    bool
	saves []time.Time
}

func (c *coCheckpoints) SaveCheckpoint(_ context.Context, _ string, at time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.ok = at, true
	c.saves = append(c.saves, at)
	return nil
}

func (c *coCheckpoints) LoadCheckpoint(context.Context, string) (time.Time, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, c.ok, nil
}

func (c *coCheckpoints) saved() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.saves)
}

// spyChannel is a chantest.Channel that counts history calls and can fail
// or block them per chat.
type spyChannel struct {
	*chantest.Channel
	clk *clock.Fake

	mu      sync.Mutex
	fetches map[channel.Chat]int
	lists   []time.Time
	fail    func(chat channel.Chat, call int) error
	block   chan struct{} // when set, FetchHistory waits for it to close
	entered chan struct{}
}

func (s *spyChannel) FetchHistory(ctx context.Context, q channel.HistoryQuery) (channel.HistoryPage, error) {
	s.mu.Lock()
	s.fetches[q.Chat]++
	call := s.fetches[q.Chat]
	fail, block, entered := s.fail, s.block, s.entered
	s.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return channel.HistoryPage{}, ctx.Err()
		}
	}
	if fail != nil {
		if err := fail(q.Chat, call); err != nil {
			return channel.HistoryPage{}, err
		}
	}
	return s.Channel.FetchHistory(ctx, q)
}

func (s *spyChannel) ListChats(ctx context.Context) ([]channel.Chat, error) {
	s.mu.Lock()
	s.lists = append(s.lists, s.clk.Now())
	s.mu.Unlock()
	return s.Channel.ListChats(ctx)
}

func (s *spyChannel) fetchCount(chat channel.Chat) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches[chat]
}

func (s *spyChannel) listTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lists)
}

type coEnqueued struct {
	ev          channel.Event
	historyOnly bool
}

// coHarness runs a Coordinator against a chantest platform. While away is
// set, messages said on the platform reach its history but not the bot.
type coHarness struct {
	t    *testing.T
	clk  *clock.Fake
	ch   *spyChannel
	cp   *coCheckpoints
	logs *logbuf.Buffer
	c    *Coordinator

	mu    sync.Mutex
	away  bool
	known map[string]bool
	enq   []coEnqueued
}

var (
	gA    = channel.Chat{Kind: channel.Group, ID: "a"}
	gB    = channel.Chat{Kind: channel.Group, ID: "b"}
	gC    = channel.Chat{Kind: channel.Group, ID: "c"}
	pAnn  = channel.Chat{Kind: channel.Private, ID: "ann"}
	pSelf = channel.Chat{Kind: channel.Private, ID: chantest.DefaultBotID}
	ann   = channel.Sender{ID: "ann", Name: "Ann"}
	bob   = channel.Sender{ID: "bob", Name: "Bob"}
)

type coOption func(*CoordinatorConfig, *coHarness)

func newCoHarness(t *testing.T, opts ...coOption) *coHarness {
	t.Helper()
	h := &coHarness{t: t, clk: clock.NewFake(ct0), cp: &coCheckpoints{}, logs: &logbuf.Buffer{}, known: map[string]bool{}}
	h.ch = &spyChannel{Channel: chantest.New(chantest.Config{Clock: h.clk}), clk: h.clk, fetches: map[channel.Chat]int{}}
	cfg := CoordinatorConfig{
		Bot:         "default/chantest/bot",
		Channel:     h.ch,
		Checkpoints: h.cp,
		Known: func(_ context.Context, key string) (bool, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.known[key], nil
		},
		Direct: func(ev *channel.Event) bool {
			return ev.Chat.Kind == channel.Private || ev.Mentions(ev.BotID)
		},
		Enqueue: func(_ context.Context, ev channel.Event, historyOnly bool) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.known[ev.Key()] = true
			h.enq = append(h.enq, coEnqueued{ev, historyOnly})
			return nil
		},
		Clock:  h.clk,
		Logger: slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, o := range opts {
		o(&cfg, h)
	}
	c, err := NewCoordinator(cfg)
	require.NoError(t, err)
	h.c = c

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.ch.Run(ctx, coSink{h})
	}()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, h.ch.Running, 5*time.Second, time.Millisecond)
	return h
}

// coSink plays the pipeline: live messages become known and feed gap
// detection, unless the bot is away.
type coSink struct{ h *coHarness }

func (s coSink) HandleEvent(ctx context.Context, ev channel.Event) error {
	s.h.mu.Lock()
	away := s.h.away
	if !away {
		s.h.known[ev.Key()] = true
	}
	s.h.mu.Unlock()
	if !away {
		s.h.c.ObserveLive(ctx, ev)
	}
	return nil
}

func (coSink) ReportState(context.Context, channel.State) {}

// run starts the coordinator (Start, then Run in a goroutine) and returns
// a stop function that cancels Run and waits for it.
func (h *coHarness) run() (stop func()) {
	h.t.Helper()
	require.NoError(h.t, h.c.Start(h.t.Context()))
	ctx, cancel := context.WithCancel(h.t.Context())
	done := make(chan error, 1)
	go func() { done <- h.c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(h.t, <-done)
		})
	}
	h.t.Cleanup(stop)
	h.settle()
	return stop
}

// settle waits until the Run loop has seen every change and sleeps on a
// timer that has not fired yet.
func (h *coHarness) settle() {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return h.c.waiting && h.c.waitGen == h.c.gen && h.c.waitUntil.After(h.clk.Now())
	}, 5*time.Second, 100*time.Microsecond)
}

func (h *coHarness) advance(d time.Duration) {
	h.t.Helper()
	h.clk.Advance(d)
	h.settle()
}

// advanceTo steps the clock to t, stopping at every deadline the Run loop
// waits for, so each timer fires at its own time.
func (h *coHarness) advanceTo(t time.Time) {
	h.t.Helper()
	for h.clk.Now().Before(t) {
		h.c.mu.Lock()
		next := h.c.waitUntil
		h.c.mu.Unlock()
		if next.After(t) {
			next = t
		}
		h.advance(next.Sub(h.clk.Now()))
	}
}

func (h *coHarness) state(connected, online bool) {
	h.t.Helper()
	h.c.ReportState(h.t.Context(), channel.State{Platform: "chantest", BotID: chantest.DefaultBotID, Connected: connected, Online: online})
	h.settle()
}

func (h *coHarness) setAway(away bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.away = away
}

func (h *coHarness) say(chat channel.Chat, from channel.Sender, text string, opts ...chantest.SayOption) channel.Event {
	h.t.Helper()
	ev, err := h.ch.Say(h.t.Context(), chat, from, text, opts...)
	require.NoError(h.t, err)
	return ev
}

func (h *coHarness) enqueued() []coEnqueued {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.enq)
}

// byText maps the enqueued texts to whether they were history-only.
func byText(enq []coEnqueued) map[string]bool {
	m := map[string]bool{}
	for _, e := range enq {
		m[e.ev.Text()] = e.historyOnly
	}
	return m
}

func TestNewCoordinatorValidation(t *testing.T) {
	t.Parallel()
	ch := chantest.New(chantest.Config{})
	cp := &coCheckpoints{}
	for name, cfg := range map[string]CoordinatorConfig{
		"no bot":        {Channel: ch, Checkpoints: cp},
		"no channel":    {Bot: "b", Checkpoints: cp},
		"no checkpoint": {Bot: "b", Channel: ch},
		"no callbacks":  {Bot: "b", Channel: ch, Checkpoints: cp},
	} {
		_, err := NewCoordinator(cfg)
		require.Error(t, err, name)
	}
	c, err := NewCoordinator(CoordinatorConfig{Bot: "b", Channel: ch.Bare(), Checkpoints: cp})
	require.NoError(t, err)
	require.False(t, c.CanBackfill())
	require.False(t, c.Ready())
	require.ErrorIs(t, c.RequestBackfill(time.Hour), ErrNoBackfill)
}

// The full reconnect flow: disconnect, messages arrive on the platform while
// the bot is away, reconnect, and the backfill 1 s later applies the rules.
func TestCoordinatorReconnectBackfillRules(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.run()
	h.state(true, true) // connection_opened
	require.True(t, h.c.Ready())
	require.Len(t, h.logs.MustRecords(t, "connection_opened"), 1)
	h.advanceTo(ct0.Add(5 * time.Minute)) // the three runs, nothing to do
	require.Len(t, h.logs.MustRecords(t, "backfill_completed"), 3)

	// Delivered live before the disconnect.
	h.say(gA, bob, "seen before", chantest.WithTime(ct0.Add(4*time.Minute)))
	h.state(false, false)
	require.False(t, h.c.Ready())
	disc := ct0.Add(5 * time.Minute) // the last checkpoint tick
	require.Equal(t, disc, h.cp.saved()[len(h.cp.saved())-1])
	require.Len(t, h.logs.MustRecords(t, "disconnected"), 1)

	// While away.
	h.setAway(true)
	at := func(d time.Duration) chantest.SayOption { return chantest.WithTime(disc.Add(d)) }
	h.say(gA, ann, "stale", at(-40*time.Minute)) // older than the cutoff, never seen
	for i := 1; i <= 5; i++ {
		h.say(gA, ann, fmt.Sprintf("mention %d", i), chantest.MentionBot(), at(time.Duration(10*i)*time.Minute))
		h.say(gA, bob, fmt.Sprintf("plain %d", i), at(time.Duration(10*i+1)*time.Minute))
	}
	_, err := h.ch.Send(t.Context(), channel.Outgoing{Chat: gA, Text: "self"}) // the bot's own message
	require.NoError(t, err)
	h.say(pAnn, ann, "private", at(20*time.Minute))
	h.say(pSelf, ann, "own private chat", at(20*time.Minute))
	h.advance(2 * time.Hour)

	h.setAway(false)
	h.state(true, true) // reconnected
	require.Len(t, h.logs.MustRecords(t, "reconnected"), 1)
	require.Equal(t, disc.Add(-30*time.Minute), h.c.Cutoff())
	h.advance(999 * time.Millisecond)
	require.Empty(t, h.enqueued(), "nothing before +1 s")
	h.advance(time.Millisecond)

	got := byText(h.enqueued())
	require.Equal(t, map[string]bool{
		"stale":     false,                                         // queued normally, the worker records ignored_stale
		"mention 5": false, "mention 4": false, "mention 3": false, // newest 3 direct
		"mention 2": true, "mention 1": true,
		"plain 1": true, "plain 2": true, "plain 3": true, "plain 4": true, "plain 5": true,
		"private": false,
	}, got)
	for _, e := range h.enqueued() {
		require.Equal(t, channel.SourceBackfill, e.ev.Source)
	}
	require.Zero(t, h.ch.fetchCount(pSelf), "the bot's own private chat is skipped")
	require.Len(t, h.logs.MustRecords(t, "backfill_started"), 4)
	done := h.logs.MustRecords(t, "backfill_completed")
	require.Len(t, done, 4)
	require.EqualValues(t, 12, done[3]["enqueued"])
	require.EqualValues(t, 4, done[3]["triggered"]) // 3 in group a + the private chat

	// The later runs find nothing new: nothing is processed twice.
	h.advanceTo(h.clk.Now().Add(5 * time.Minute))
	require.Len(t, h.enqueued(), 12)
	require.Len(t, h.logs.MustRecords(t, "backfill_completed"), 6)
}

// TestCoordinatorBackfillLeavesRecentMessagesToLivePath: a run does not
// enqueue a message sent less than backfillLiveGrace before it started
// (its push may still be on its way, and would then be kept as history
// only); a later run picks it up if the push never came.
func TestCoordinatorBackfillLeavesRecentMessagesToLivePath(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.run()
	h.state(true, true) // connection_opened: runs at +1 s, +1 min, +5 min
	h.setAway(true)     // its push is lost
	h.say(gA, bob, "just sent", chantest.WithTime(ct0.Add(500*time.Millisecond)))

	h.advanceTo(ct0.Add(time.Second))
	require.Empty(t, h.enqueued(), "the +1 s run leaves it to the live path")
	done := h.logs.MustRecords(t, "backfill_completed")
	require.Len(t, done, 1)
	require.EqualValues(t, 1, done[0]["live"])

	h.advanceTo(ct0.Add(time.Minute))
	require.Equal(t, map[string]bool{"just sent": true}, byText(h.enqueued()), "the +1 min run backfills it")
}

func TestCoordinatorBackfillPagingCapAndWatermark(t *testing.T) {
	t.Parallel()
	var befores []time.Time
	var mu sync.Mutex
	h := newCoHarness(t, func(cfg *CoordinatorConfig, h *coHarness) {
		cfg.NewestStored = func(_ context.Context, key string, before time.Time) (time.Time, bool, error) {
			mu.Lock()
			befores = append(befores, before)
			mu.Unlock()
			if strings.HasSuffix(key, ":group:c") {
				return ct0.Add(-50 * time.Minute), true, nil
			}
			return time.Time{}, false, nil
		}
	})
	require.NoError(t, h.cp.SaveCheckpoint(t.Context(), "", ct0.Add(-6*time.Hour)))
	h.cp.saves = nil
	h.setAway(true)
	for i := 1; i <= 250; i++ {
		h.say(gA, bob, fmt.Sprintf("a%d", i), chantest.WithTime(ct0.Add(time.Duration(i-251)*time.Minute)))
		h.say(gC, bob, fmt.Sprintf("c%d", i), chantest.WithTime(ct0.Add(time.Duration(i-251)*time.Minute)))
	}
	for i := 1; i <= 150; i++ {
		h.say(gB, bob, fmt.Sprintf("b%d", i), chantest.WithTime(ct0.Add(time.Duration(i-151)*time.Minute)))
	}
	h.setAway(false)
	h.run()
	h.state(true, true)
	h.advance(time.Second)

	perChat := map[channel.Chat][]string{}
	for _, e := range h.enqueued() {
		perChat[e.ev.Chat] = append(perChat[e.ev.Chat], e.ev.Text())
	}
	// Group a: the cap of 200 over two pages of 100, the newest 200 (a51..a250).
	require.Len(t, perChat[gA], 200)
	require.Equal(t, "a51", perChat[gA][0])
	require.Equal(t, "a250", perChat[gA][199])
	require.Equal(t, 2, h.ch.fetchCount(gA))
	// Group b: a full page, then a short one.
	require.Len(t, perChat[gB], 150)
	require.Equal(t, 2, h.ch.fetchCount(gB))
	// Group c: the watermark (newest stored − 30 min = c171) is inside the
	// first page, so paging stops there; that page is kept whole.
	require.Equal(t, 1, h.ch.fetchCount(gC))
	require.Len(t, perChat[gC], 100)
	require.Equal(t, "c151", perChat[gC][0])
	mu.Lock()
	require.Len(t, befores, 3)
	for _, b := range befores {
		require.Equal(t, ct0, b, "NewestStored asks for the newest message before the reconnect")
	}
	mu.Unlock()
}

func TestCoordinatorBackfillSchedule(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.run()
	h.state(true, true)
	h.advance(999 * time.Millisecond)
	require.Empty(t, h.ch.listTimes())
	h.advance(time.Millisecond)
	h.advanceTo(ct0.Add(2 * time.Minute))
	require.Equal(t, []time.Time{ct0.Add(time.Second), ct0.Add(time.Minute)}, h.ch.listTimes())

	// A new reconnect reschedules: the +5 min run of the first one never
	// happens; the three new runs are relative to the reconnect.
	h.state(false, false)
	h.state(true, true)
	r := ct0.Add(2 * time.Minute)
	h.advanceTo(ct0.Add(15 * time.Minute))
	require.Equal(t, []time.Time{
		ct0.Add(time.Second), ct0.Add(time.Minute),
		r.Add(time.Second), r.Add(time.Minute), r.Add(5 * time.Minute),
	}, h.ch.listTimes())
	var runs []float64
	for _, rec := range h.logs.MustRecords(t, "backfill_started") {
		runs = append(runs, rec["run"].(float64))
	}
	require.Equal(t, []float64{1, 2, 1, 2, 3}, runs)

	// Offline: due runs wait for the reconnect, which replaces them.
	h.state(false, false)
	require.NoError(t, h.c.RequestBackfill(time.Hour))
	h.advance(time.Minute)
	require.Len(t, h.ch.listTimes(), 5)
}

// Runs never overlap: a run still busy when the next one is due delays it.
func TestCoordinatorBackfillRunsDoNotOverlap(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.say(gA, bob, "hello")
	block := make(chan struct{})
	entered := make(chan struct{}, 10)
	h.ch.mu.Lock()
	h.ch.block, h.ch.entered = block, entered
	h.ch.mu.Unlock()
	h.run()
	h.state(true, true)
	h.clk.Advance(time.Second)
	<-entered // run 1 is inside FetchHistory
	h.clk.Advance(2 * time.Minute)
	require.Len(t, h.ch.listTimes(), 1, "run 2 waits for run 1")
	h.ch.mu.Lock()
	h.ch.block, h.ch.entered = nil, nil
	h.ch.mu.Unlock()
	close(block)
	h.settle()
	require.Len(t, h.ch.listTimes(), 2)
	require.Len(t, h.logs.MustRecords(t, "backfill_completed"), 2)
}

func TestCoordinatorCheckpointsWithoutBackfill(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t, func(cfg *CoordinatorConfig, h *coHarness) { cfg.Channel = h.ch.Bare() })
	stop := h.run()
	require.False(t, h.c.Ready())
	h.advance(time.Minute)
	require.Empty(t, h.cp.saved(), "no checkpoint before the first connection")

	h.state(true, true)
	h.advance(30 * time.Second)
	h.advance(30 * time.Second)
	t1 := ct0.Add(2 * time.Minute)
	require.Equal(t, []time.Time{t1.Add(-30 * time.Second), t1}, h.cp.saved())

	h.advance(15 * time.Second)
	h.state(false, false)
	require.Equal(t, []time.Time{t1.Add(-30 * time.Second), t1, t1}, h.cp.saved(), "disconnect saves the last time seen online")
	rec := h.logs.MustRecords(t, "disconnected")
	require.Len(t, rec, 1)
	require.Equal(t, t1.Format(time.RFC3339), rec[0]["last_online"])

	h.advance(2 * time.Minute)
	require.Len(t, h.cp.saved(), 3, "no checkpoint while offline")

	h.state(true, true)
	require.Len(t, h.logs.MustRecords(t, "reconnected"), 1)
	require.Equal(t, t1.Add(-30*time.Minute), h.c.Cutoff())

	// Account offline while connected, then back.
	h.state(true, false)
	require.False(t, h.c.Ready())
	require.Len(t, h.logs.MustRecords(t, "account_offline"), 1)
	require.Equal(t, h.clk.Now(), h.cp.saved()[3])
	h.state(true, true)
	require.Len(t, h.logs.MustRecords(t, "account_recovered"), 1)

	h.advance(10 * time.Second)
	stop()
	saves := h.cp.saved()
	require.Len(t, saves, 5)
	require.Equal(t, h.clk.Now(), saves[4], "shutdown while online saves now")
}

func TestCoordinatorCheckpointsWithBackfillDebt(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	d0 := ct0.Add(-time.Hour)
	require.NoError(t, h.cp.SaveCheckpoint(t.Context(), "", d0))
	h.cp.saves = nil
	stop := h.run()
	require.Equal(t, ct0.Add(-24*time.Hour), h.c.Cutoff(), "before any connection")

	h.state(true, true)
	require.Equal(t, d0.Add(-30*time.Minute), h.c.Cutoff())
	h.advanceTo(ct0.Add(2 * time.Minute))
	require.Empty(t, h.cp.saved(), "no checkpoint while a backfill is due")

	// A disconnect with backfill debt keeps the old disconnect time.
	h.state(false, false)
	require.Empty(t, h.cp.saved())
	h.advance(time.Minute)
	h.state(true, true)
	r := h.clk.Now()
	require.Equal(t, d0.Add(-30*time.Minute), h.c.Cutoff())

	h.advanceTo(r.Add(5 * time.Minute))
	require.Empty(t, h.cp.saved())
	h.advanceTo(r.Add(5*time.Minute + 30*time.Second))
	require.Len(t, h.cp.saved(), 1, "checkpoints resume after the last run")

	// Debt again: shutdown does not save.
	h.state(false, false)
	h.state(true, true)
	n := len(h.cp.saved())
	h.advance(10 * time.Second)
	stop()
	require.Len(t, h.cp.saved(), n)
}

func TestCoordinatorCutoff(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		checkpoint time.Time
		newest     time.Time
		want       time.Time
	}{
		{"checkpoint", ct0.Add(-2 * time.Hour), time.Time{}, ct0.Add(-150 * time.Minute)},
		{"24 h floor", ct0.Add(-48 * time.Hour), time.Time{}, ct0.Add(-24 * time.Hour)},
		{"newest stored", time.Time{}, ct0.Add(-3 * time.Hour), ct0.Add(-210 * time.Minute)},
		{"nothing: now", time.Time{}, time.Time{}, ct0.Add(-30 * time.Minute)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newCoHarness(t, func(cfg *CoordinatorConfig, _ *coHarness) {
				cfg.NewestEvent = func(context.Context) (time.Time, bool, error) {
					return tc.newest, !tc.newest.IsZero(), nil
				}
			})
			if !tc.checkpoint.IsZero() {
				require.NoError(t, h.cp.SaveCheckpoint(t.Context(), "", tc.checkpoint))
			}
			h.run()
			require.Equal(t, ct0.Add(-24*time.Hour), h.c.Cutoff())
			h.state(true, true)
			require.Equal(t, tc.want, h.c.Cutoff())
		})
	}

	t.Run("RequestBackfill only lowers", func(t *testing.T) {
		t.Parallel()
		h := newCoHarness(t)
		require.NoError(t, h.cp.SaveCheckpoint(t.Context(), "", ct0.Add(-2*time.Hour)))
		h.say(gA, bob, "hello")
		h.run()
		h.state(true, true)
		h.advanceTo(ct0.Add(6 * time.Minute))
		cut := ct0.Add(-150 * time.Minute)
		require.Equal(t, cut, h.c.Cutoff())
		require.ErrorIs(t, h.c.RequestBackfill(0), ErrBackfillWindow)
		require.ErrorIs(t, h.c.RequestBackfill(25*time.Hour), ErrBackfillWindow)

		require.NoError(t, h.c.RequestBackfill(time.Hour))
		require.Equal(t, cut, h.c.Cutoff(), "never raised")
		h.settle()
		require.Len(t, h.ch.listTimes(), 4, "the manual run ran at once")

		require.NoError(t, h.c.RequestBackfill(20*time.Hour))
		require.Equal(t, h.clk.Now().Add(-20*time.Hour), h.c.Cutoff())
		h.settle()
		require.Len(t, h.ch.listTimes(), 5)

		// A manual run of one chat does not list chats.
		require.NoError(t, h.c.RequestBackfill(time.Hour, gA))
		h.settle()
		require.Len(t, h.ch.listTimes(), 5)
		require.Equal(t, 6, h.ch.fetchCount(gA))
		manual := 0
		for _, rec := range h.logs.MustRecords(t, "backfill_started") {
			if rec["manual"] == true {
				manual++
			}
		}
		require.Equal(t, 3, manual)
	})
}

func TestCoordinatorSessionFailureIsolated(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	h := newCoHarness(t)
	h.ch.fail = func(chat channel.Chat, call int) error {
		if chat == gB && call == 1 {
			return boom
		}
		if chat == gC {
			return boom // always
		}
		return nil
	}
	require.NoError(t, h.cp.SaveCheckpoint(t.Context(), "", ct0.Add(-time.Hour)))
	h.setAway(true)
	h.say(gA, bob, "a1", chantest.WithTime(ct0.Add(-10*time.Minute)))
	h.say(gB, bob, "b1", chantest.WithTime(ct0.Add(-10*time.Minute)))
	h.say(gC, bob, "c1", chantest.WithTime(ct0.Add(-10*time.Minute)))
	h.setAway(false)
	h.run()
	h.state(true, true)
	h.advance(time.Second)

	require.Equal(t, map[string]bool{"a1": true}, byText(h.enqueued()), "group a is unaffected")
	failed := h.logs.MustRecords(t, "backfill_failed")
	require.Len(t, failed, 1)
	require.EqualValues(t, 2, failed[0]["failed"])
	errs := fmt.Sprint(failed[0]["errors"])
	require.Contains(t, errs, "group:b: fetch history: boom")
	require.Contains(t, errs, "group:c: fetch history: boom")

	h.advanceTo(ct0.Add(time.Minute))
	require.Equal(t, map[string]bool{"a1": true, "b1": true}, byText(h.enqueued()), "run 2 retries group b")

	// Group c fails in every run and is not retried beyond the third.
	h.advanceTo(ct0.Add(20 * time.Minute))
	require.Equal(t, 3, h.ch.fetchCount(gC))
	require.Len(t, h.logs.MustRecords(t, "backfill_failed"), 3)
	require.Len(t, h.logs.MustRecords(t, "backfill_completed"), 0)
}

// connectedPastBackfills connects and lets the three backfills run, so gap
// checks are neither held back nor mixed with backfill fetches.
func (h *coHarness) connectedPastBackfills() {
	h.t.Helper()
	h.state(true, true)
	h.advanceTo(h.clk.Now().Add(5 * time.Minute))
}

func TestCoordinatorGapResolvedOnRecheck(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.run()
	h.connectedPastBackfills()
	for s := int64(1); s <= 3; s++ {
		h.say(gA, bob, fmt.Sprintf("s%d", s), chantest.WithSeq(s))
	}
	h.say(gA, bob, "s6", chantest.WithSeq(6))
	h.settle()
	det := h.logs.MustRecords(t, "backfill_gap_detected")
	require.Len(t, det, 1)
	require.EqualValues(t, 4, det[0]["from"])
	require.EqualValues(t, 5, det[0]["to"])
	require.Equal(t, 1, h.ch.fetchCount(gA), "the first refetch ran at once")
	require.Empty(t, h.logs.MustRecords(t, "backfill_gap_resolved"))

	// The missing messages show up in the platform's history (a lost push).
	h.setAway(true)
	h.say(gA, ann, "s4", chantest.WithSeq(4), chantest.MentionBot(), chantest.WithTime(h.clk.Now().Add(-time.Second)))
	h.say(gA, ann, "s5", chantest.WithSeq(5), chantest.WithTime(h.clk.Now().Add(-time.Second)))
	h.setAway(false)
	h.advance(14 * time.Second)
	require.Empty(t, h.logs.MustRecords(t, "backfill_gap_resolved"))
	h.advance(time.Second)

	res := h.logs.MustRecords(t, "backfill_gap_resolved")
	require.Len(t, res, 1)
	require.EqualValues(t, 2, res[0]["checks"])
	enq := h.enqueued()
	require.Len(t, enq, 2)
	require.Equal(t, map[string]bool{"s4": false, "s5": true}, byText(enq), "backfill rules: the direct one replies")
	for _, e := range enq {
		require.Equal(t, channel.SourceGap, e.ev.Source)
	}
	h.advance(5 * time.Minute)
	require.Empty(t, h.logs.MustRecords(t, "backfill_gap_unresolved"))
}

func TestCoordinatorGapUnresolved(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.run()
	h.connectedPastBackfills()
	h.say(gA, bob, "s10", chantest.WithSeq(10))
	h.say(gA, bob, "s13", chantest.WithSeq(13))
	h.settle()
	require.Len(t, h.logs.MustRecords(t, "backfill_gap_detected"), 1)
	h.advance(15 * time.Second)
	h.advance(45 * time.Second)
	require.Equal(t, 3, h.ch.fetchCount(gA))
	h.advance(119 * time.Second)
	require.Empty(t, h.logs.MustRecords(t, "backfill_gap_unresolved"))
	h.advance(time.Second)
	require.Equal(t, 4, h.ch.fetchCount(gA))
	un := h.logs.MustRecords(t, "backfill_gap_unresolved")
	require.Len(t, un, 1)
	require.Equal(t, []any{11.0, 12.0}, un[0]["missing"])
	require.EqualValues(t, 4, un[0]["checks"])
	require.Empty(t, h.logs.MustRecords(t, "backfill_gap_resolved"))
	h.advance(10 * time.Minute)
	require.Equal(t, 4, h.ch.fetchCount(gA), "no check after the last recheck")
}

// The first live message after a reconnect reveals the messages missed
// while away; the gap check waits for the backfill, which fetched them.
func TestCoordinatorGapAfterReconnectWaitsForBackfill(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.run()
	h.connectedPastBackfills()
	for s := int64(1); s <= 3; s++ {
		h.say(gA, bob, fmt.Sprintf("s%d", s), chantest.WithSeq(s))
	}
	h.state(false, false)
	h.setAway(true)
	for s := int64(4); s <= 6; s++ {
		h.say(gA, bob, fmt.Sprintf("s%d", s), chantest.WithSeq(s))
	}
	h.setAway(false)
	h.advance(time.Minute)
	h.state(true, true)
	fetches := h.ch.fetchCount(gA)
	h.say(gA, bob, "s7", chantest.WithSeq(7))
	h.settle()
	det := h.logs.MustRecords(t, "backfill_gap_detected")
	require.Len(t, det, 1)
	require.EqualValues(t, 4, det[0]["from"])
	require.EqualValues(t, 6, det[0]["to"])
	require.Equal(t, fetches, h.ch.fetchCount(gA), "held until the backfill ran")

	h.advance(time.Second)
	require.Equal(t, fetches+1, h.ch.fetchCount(gA), "only the backfill fetched")
	res := h.logs.MustRecords(t, "backfill_gap_resolved")
	require.Len(t, res, 1)
	require.EqualValues(t, 1, res[0]["checks"])
	require.Equal(t, map[string]bool{"s4": true, "s5": true, "s6": true}, byText(h.enqueued()))
	for _, e := range h.enqueued() {
		require.Equal(t, channel.SourceBackfill, e.ev.Source)
	}
}

// A group first seen by this process: the range is settled after the
// backfill, from what it saw.
func TestCoordinatorGapFirstMessageOfUnknownChat(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	require.NoError(t, h.cp.SaveCheckpoint(t.Context(), "", ct0.Add(-time.Hour)))
	h.setAway(true)
	h.say(gA, bob, "s1", chantest.WithSeq(1), chantest.WithTime(ct0.Add(-3*time.Minute)))
	h.say(gA, bob, "s2", chantest.WithSeq(2), chantest.WithTime(ct0.Add(-2*time.Minute)))
	h.setAway(false)
	h.run()
	h.state(true, true)
	h.say(gA, bob, "s5", chantest.WithSeq(5))
	h.settle()
	require.Empty(t, h.logs.MustRecords(t, "backfill_gap_detected"), "range unknown until the backfill ran")
	h.advance(time.Second)
	det := h.logs.MustRecords(t, "backfill_gap_detected")
	require.Len(t, det, 1)
	require.EqualValues(t, 3, det[0]["from"])
	require.EqualValues(t, 4, det[0]["to"])
	h.advanceTo(ct0.Add(5 * time.Minute))
	un := h.logs.MustRecords(t, "backfill_gap_unresolved")
	require.Len(t, un, 1)
	require.Equal(t, []any{3.0, 4.0}, un[0]["missing"])
}

func TestCoordinatorDisconnectCancelsRun(t *testing.T) {
	t.Parallel()
	h := newCoHarness(t)
	h.say(gA, bob, "hello")
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	entered := make(chan struct{}, 10)
	h.ch.mu.Lock()
	h.ch.block, h.ch.entered = block, entered
	h.ch.mu.Unlock()
	h.run()
	h.state(true, true)
	h.clk.Advance(time.Second)
	<-entered
	h.c.ReportState(t.Context(), channel.State{Connected: false})
	h.settle()
	failed := h.logs.MustRecords(t, "backfill_failed")
	require.Len(t, failed, 1)
	require.Contains(t, fmt.Sprint(failed[0]["errors"]), "context canceled")
	require.Empty(t, h.cp.saved(), "debt: no checkpoint")
}
