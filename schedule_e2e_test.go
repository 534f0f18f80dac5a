package persona_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	persona "github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/schedule"
	"github.com/personakit/persona/store"
)

// recorded returns the outcomes the harness saw for ids with a prefix.
func (h *harness) recorded(prefix string) map[string]inbound.Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]inbound.Outcome{}
	for id, o := range h.outcomes {
		if strings.HasPrefix(id, prefix) {
			out[id] = o
		}
	}
	return out
}

// waitID waits for the record of an item id.
func (h *harness) waitID(id string) inbound.Outcome {
	h.t.Helper()
	var o inbound.Outcome
	require.Eventually(h.t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		var ok bool
		o, ok = h.outcomes[id]
		return ok
	}, 20*time.Second, 2*time.Millisecond, "no outcome for %s", id)
	return o
}

func morning(chat channel.Chat) schedule.Schedule {
	return schedule.Schedule{ID: "morning", Spec: "every 1h", Prompt: "wish everyone a good morning", Enabled: true,
		Target: schedule.Target{Platform: "chantest", BotID: "bot", Chat: chat}}
}

func TestScheduledMessageGoesThroughThePipeline(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("good morning, everyone!"))
	h := newHarness(t, model, func(o *persona.Options) { o.Owners = []string{"alice"} })
	s, err := h.p.AddSchedule(t.Context(), morning(group1))
	require.NoError(t, err)
	require.Equal(t, h.clk.Now().Add(time.Hour), s.NextDue)
	require.Equal(t, channel.SessionKey("", "chantest", "bot", group1), s.SessionKey)
	list, err := h.p.Schedules(t.Context(), s.SessionKey)
	require.NoError(t, err)
	require.Len(t, list, 1)

	h.clk.Advance(59 * time.Minute)
	require.Empty(t, h.ch.Sent(), "not before it is due")
	id := schedule.Firing{Schedule: s, Due: s.NextDue}.ID()
	h.clk.Advance(time.Minute)
	o := h.waitID(id)
	require.Equal(t, persona.RepliedScheduled, o.Code, o.Reason)
	require.Equal(t, "morning", o.Trail.Schedule)
	require.Equal(t, "schedule", o.Trail.Trigger)
	require.Equal(t, "good morning, everyone!", h.lastSent())
	require.Empty(t, h.ch.Sent()[0].Out.ReplyTo)
	require.Contains(t, lastUserText(lastChat(model)), "wish everyone a good morning")

	// The gates apply: in a paused chat the next due time posts nothing.
	require.Contains(t, h.replyTo(group1, alice, "/pause 120"), "Paused")
	s2, err := h.p.Schedules(t.Context(), "")
	require.NoError(t, err)
	next := schedule.Firing{Schedule: s2[0], Due: s2[0].NextDue}.ID()
	h.clk.Advance(time.Hour)
	o = h.waitID(next)
	require.Equal(t, "ignored_response_suppression", string(o.Code))
	require.Equal(t, "morning", o.Trail.Schedule)

	require.ErrorIs(t, h.p.RemoveSchedule(t.Context(), "missing"), schedule.ErrNotFound)
	require.NoError(t, h.p.RemoveSchedule(t.Context(), "morning"))
	list, err = h.p.Schedules(t.Context(), "")
	require.NoError(t, err)
	require.Empty(t, list)
	_, err = h.p.AddSchedule(t.Context(), schedule.Schedule{ID: "bad", Spec: "every now and then", Prompt: "x",
		Target: schedule.Target{Platform: "chantest", BotID: "bot", Chat: group1}})
	require.ErrorIs(t, err, schedule.ErrSpec)
}

// flakyAdvance fails the first AdvanceSchedule: the process "crashed"
// after the scheduled turn was enqueued and before the schedule moved on.
type flakyAdvance struct {
	schedule.Store
	failed atomic.Bool
}

func (f *flakyAdvance) AdvanceSchedule(ctx context.Context, id string, expect, fired, next time.Time) (bool, error) {
	if f.failed.CompareAndSwap(false, true) {
		return false, errors.New("crash before the advance")
	}
	return f.Store.AdvanceSchedule(ctx, id, expect, fired, next)
}

func TestScheduleCrashAfterEnqueueFiresOnce(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("morning!"), agenttest.Reply("second post"))
	var flaky *flakyAdvance
	h := newHarness(t, model, func(o *persona.Options) {
		flaky = &flakyAdvance{Store: o.DB}
		o.Schedules = flaky
	})
	s, err := h.p.AddSchedule(t.Context(), morning(group1))
	require.NoError(t, err)
	id := schedule.Firing{Schedule: s, Due: s.NextDue}.ID()
	h.clk.Advance(time.Hour)
	require.Equal(t, persona.RepliedScheduled, h.waitID(id).Code)
	// The runner retries the same firing (the advance failed); the queue
	// refuses the second enqueue of its id.
	h.advanceUntil(time.Second, func() bool {
		got, ok, err := flaky.GetSchedule(t.Context(), "morning")
		return err == nil && ok && got.NextDue.After(s.NextDue)
	})
	require.True(t, flaky.failed.Load())
	require.Len(t, h.recorded(schedule.IDPrefix), 1)
	require.Len(t, h.ch.Sent(), 1, "posted once")
	r, err := h.p.Lookup(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, inbound.StatusDone, r.Status)
}

// TestScheduleDueWhileDown: the process is down for 5 h 10 min; an
// every-30-minutes schedule fires once, late, on restart; a daily one whose
// due time is hours old is recorded as missed instead.
func TestScheduleDueWhileDown(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	db, err := store.Open(t.TempDir()+"/persona.db", store.Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	ch := chantest.New(chantest.Config{Clock: clk})
	var mu sync.Mutex
	outcomes := map[string]inbound.Outcome{}
	start := func(model agent.Model) (*persona.Pipeline, func()) {
		p, err := persona.New(persona.Options{Channels: []channel.Channel{ch}, DB: db, DataDir: t.TempDir(), Persona: "You are Mira.",
			Model: model, Clock: clk, NoPacing: true, NoRouter: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnOutcome: func(id string, o inbound.Outcome) { mu.Lock(); outcomes[id] = o; mu.Unlock() }})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		return p, func() { cancel(); require.NoError(t, <-done); require.NoError(t, p.Close()) }
	}
	p, stop := start(agenttest.New())
	half := morning(group1)
	half.ID, half.Spec = "half-hourly", "every 30m"
	daily := morning(group1)
	daily.ID, daily.Spec, daily.Zone = "daily", "0 9 * * *", "Asia/Shanghai" // 01:00 UTC
	_, err = p.AddSchedule(t.Context(), half)
	require.NoError(t, err)
	d, err := p.AddSchedule(t.Context(), daily)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), d.NextDue.UTC())
	stop()

	clk.Advance(5*time.Hour + 10*time.Minute)  // down from 10:00 to 15:10 UTC
	d.NextDue = d.NextDue.Add(-24 * time.Hour) // pretend the daily one was due at 01:00 today
	require.NoError(t, db.PutSchedule(t.Context(), d))

	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("back, and good afternoon"))
	_, stop = start(model)
	defer stop()
	lateID := schedule.Firing{Schedule: schedule.Schedule{ID: "half-hourly"}, Due: time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)}.ID()
	missedID := schedule.Firing{Schedule: schedule.Schedule{ID: "daily"}, Due: time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)}.ID()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, a := outcomes[lateID]
		_, b := outcomes[missedID]
		return a && b
	}, 20*time.Second, 2*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, persona.RepliedScheduled, outcomes[lateID].Code, outcomes[lateID].Reason)
	require.Equal(t, persona.IgnoredScheduleMissed, outcomes[missedID].Code)
	require.Contains(t, outcomes[missedID].Reason, "too late")
	n := 0
	for id := range outcomes {
		if strings.HasPrefix(id, schedule.IDPrefix) {
			n++
		}
	}
	require.Equal(t, 2, n, "one late firing, one missed record, nothing else")
	require.Len(t, ch.Sent(), 1)
	got, ok, err := db.GetSchedule(t.Context(), "half-hourly")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 11, 30, 15, 30, 0, 0, time.UTC), got.NextDue.UTC())
}

func TestOwnerManagesSchedulesInChat(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("stand-up time!"))
	h := newHarness(t, model, func(o *persona.Options) { o.Owners = []string{"alice"} })
	require.Contains(t, h.replyTo(group1, alice, "/schedule"), "No schedules in this chat")
	require.Contains(t, h.replyTo(group1, alice, "/schedule add standup"), "Usage: /schedule")
	require.Contains(t, h.replyTo(group1, alice, "/schedule add standup every now | hi"), "Not added")
	added := h.replyTo(group1, alice, "/schedule add standup 30 10 * * mon-fri Europe/Berlin | call everyone to the stand-up")
	require.Contains(t, added, `"standup" added`)
	require.Contains(t, added, "next at 2026-12-01 09:30 UTC", "10:30 in Berlin on Tuesday (Monday's has passed)")
	list := h.replyTo(group1, alice, "/schedule list")
	require.Contains(t, list, "standup: 30 10 * * 1-5 (Europe/Berlin)")
	require.Contains(t, list, "call everyone to the stand-up")

	// Another chat cannot take the id, nor remove it.
	other := channel.Chat{Kind: channel.Group, ID: "200"}
	require.Contains(t, h.replyTo(other, alice, "/schedule add standup every 1h | x"), "taken")
	require.Contains(t, h.replyTo(other, alice, "/schedule remove standup"), "No schedule")

	h.clk.Advance(23*time.Hour + 30*time.Minute)
	s, err := h.p.Schedules(t.Context(), "")
	require.NoError(t, err)
	require.Len(t, s, 1)
	o := h.waitID(schedule.Firing{Schedule: s[0], Due: time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)}.ID())
	require.Equal(t, persona.RepliedScheduled, o.Code, o.Reason)
	require.Equal(t, "stand-up time!", h.lastSent())

	require.Contains(t, h.replyTo(group1, alice, "/schedule remove standup"), "removed")
	require.Contains(t, h.replyTo(group1, alice, "/schedule"), "No schedules in this chat")
}
