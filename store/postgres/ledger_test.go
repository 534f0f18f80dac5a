package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outbound/ledgertest"
	"github.com/personakit/persona/schedule"
	"github.com/personakit/persona/schedule/scheduletest"
	"github.com/personakit/persona/store/postgres"
)

// TestLedgerConformance runs the outbound.Ledger and
// outbound.DraftIntentLedger suites against the PostgreSQL store.
func TestLedgerConformance(t *testing.T) {
	t.Parallel()
	t.Run("Ledger", func(t *testing.T) {
		t.Parallel()
		ledgertest.Run(t, func(t *testing.T, clk *clock.Fake) outbound.Ledger { return open(t, clk) })
	})
	t.Run("DraftIntentLedger", func(t *testing.T) {
		t.Parallel()
		ledgertest.RunDraftIntent(t, func(t *testing.T, clk *clock.Fake) outbound.DraftIntentLedger {
			return open(t, clk)
		})
	})
}

// TestFlagsConformance runs the gate.Flags suite (with the batch and
// subject-probe cases) against the PostgreSQL store.
func TestFlagsConformance(t *testing.T) {
	t.Parallel()
	gatetest.RunFlags(t, func(t *testing.T) gate.Flags {
		return open(t, clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)))
	})
}

// TestSchedulesConformance runs the schedule.Store suite, the runner
// included, against the PostgreSQL store.
func TestSchedulesConformance(t *testing.T) {
	t.Parallel()
	scheduletest.Run(t, func(t *testing.T) schedule.Store { return open(t, clock.NewFake(scheduletest.Start)) })
}

var ledgerT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestLedgerFingerprintMismatch: a slot keeps its first fingerprint; a
// different one is ErrFingerprintMismatch, and SaveDraftIntent that meets
// one saves nothing.
func TestLedgerFingerprintMismatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := open(t, clock.NewFake(ledgerT0))
	require.NoError(t, d.MarkIntent(ctx, "t1", 0, "fp-a"))
	require.ErrorIs(t, d.MarkIntent(ctx, "t1", 0, "fp-b"), postgres.ErrFingerprintMismatch)
	require.NoError(t, d.MarkIntent(ctx, "t1", 0, "fp-a"))

	// A slot sent without an intent takes the first fingerprint offered.
	require.NoError(t, d.MarkSent(ctx, "t2", 0, []string{"m"}, time.Time{}))
	require.NoError(t, d.MarkIntent(ctx, "t2", 0, "fp-x"))
	require.ErrorIs(t, d.MarkIntent(ctx, "t2", 0, "fp-y"), postgres.ErrFingerprintMismatch)
	ss, err := d.Slots(ctx, "t2")
	require.NoError(t, err)
	require.Len(t, ss, 1)
	require.Equal(t, outbound.SlotSent, ss[0].State)
	require.Equal(t, "fp-x", ss[0].Fingerprint)
	require.Equal(t, ledgerT0, ss[0].SentAt, "a zero send time is the clock's now")

	// SaveDraftIntent meeting a mismatch on slot 0 saves no draft.
	require.NoError(t, d.MarkIntent(ctx, "t3", 0, "fp-old"))
	dr := outbound.Draft{TurnID: "t3", Chunks: []outbound.Chunk{{Text: "x"}}}
	_, _, err = d.SaveDraftIntent(ctx, dr, "fp-new")
	require.ErrorIs(t, err, postgres.ErrFingerprintMismatch)
	_, ok, err := d.LoadDraft(ctx, "t3")
	require.NoError(t, err)
	require.False(t, ok, "the failed combined write saved nothing")

	// Malformed calls write nothing.
	require.Error(t, d.MarkIntent(ctx, "", 0, "fp"))
	require.Error(t, d.MarkIntent(ctx, "t4", -1, "fp"))
	require.Error(t, d.MarkSent(ctx, "t4", -1, nil, time.Time{}))
	require.Error(t, d.ClearIntent(ctx, "", 0))
	_, err = d.SaveDraft(ctx, outbound.Draft{})
	require.Error(t, err)
	ss, err = d.Slots(ctx, "t4")
	require.NoError(t, err)
	require.Empty(t, ss)
}

// TestFlagsBatchAndDeadlines: a batch naming a key twice keeps the later
// flag, a flag without a deadline reads back with a zero Until (and the
// unix epoch as itself), and the flag is dated by the store's clock.
func TestFlagsBatchAndDeadlines(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := open(t, clock.NewFake(ledgerT0))
	require.NoError(t, d.SetFlags(ctx, []gate.Flag{
		{SessionKey: "s", Name: "n", Value: "first", Until: ledgerT0.Add(time.Hour)},
		{SessionKey: "a", Name: "n", Value: "other"},
		{SessionKey: "s", Name: "n", Value: "second", Until: ledgerT0.Add(2 * time.Hour)},
		{SessionKey: "s", Name: "epoch", Until: time.UnixMilli(0)},
	}))
	got, ok, err := d.GetFlag(ctx, "s", "", "n")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "second", got.Value, "the later flag of the batch wins")
	require.Equal(t, ledgerT0.Add(2*time.Hour), got.Until)
	require.True(t, got.Active(ledgerT0))
	require.False(t, got.Active(ledgerT0.Add(2*time.Hour)))

	got, ok, err = d.GetFlag(ctx, "a", "", "n")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, got.Until.IsZero(), "no deadline")
	require.False(t, got.Active(ledgerT0))

	got, ok, err = d.GetFlag(ctx, "s", "", "epoch")
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, got.Until.IsZero())
	require.True(t, time.UnixMilli(0).Equal(got.Until))

	require.Error(t, d.SetFlag(ctx, gate.Flag{Name: "n"}))
}

// TestSchedulesZeroTimesUseClock: zero CreatedAt and UpdatedAt are stored
// as the store clock's now; invalid calls wrap schedule.ErrInvalid.
func TestSchedulesZeroTimesUseClock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := open(t, clock.NewFake(ledgerT0))
	s := testSchedule(t, "a", ledgerT0.Add(-time.Hour))
	s.CreatedAt, s.UpdatedAt = time.Time{}, time.Time{}
	require.NoError(t, d.PutSchedule(ctx, s))
	got, ok, err := d.GetSchedule(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ledgerT0, got.CreatedAt)
	require.Equal(t, ledgerT0, got.UpdatedAt)
	require.True(t, got.LastDue.IsZero())

	s.NextDue = time.Time{}
	require.ErrorIs(t, d.PutSchedule(ctx, s), schedule.ErrInvalid)
	_, err = d.DueSchedules(ctx, ledgerT0, 0)
	require.ErrorIs(t, err, schedule.ErrInvalid)
	_, err = d.AdvanceSchedule(ctx, "a", got.NextDue, got.NextDue, time.Time{})
	require.ErrorIs(t, err, schedule.ErrInvalid)
}

// TestLedgerClosedStore: every operation after Close is ErrClosed.
func TestLedgerClosedStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := open(t, clock.NewFake(ledgerT0))
	require.NoError(t, d.Close())
	require.ErrorIs(t, d.MarkIntent(ctx, "t", 0, "fp"), postgres.ErrClosed)
	_, err := d.Slots(ctx, "t")
	require.ErrorIs(t, err, postgres.ErrClosed)
	_, _, err = d.SaveDraftIntent(ctx, outbound.Draft{TurnID: "t"}, "fp")
	require.ErrorIs(t, err, postgres.ErrClosed)
	require.ErrorIs(t, d.SetFlag(ctx, gate.Flag{SessionKey: "s", Name: "n"}), postgres.ErrClosed)
	_, _, err = d.GetFlag(ctx, "s", "", "n")
	require.ErrorIs(t, err, postgres.ErrClosed)
	_, err = d.ListSchedules(ctx, "")
	require.ErrorIs(t, err, postgres.ErrClosed)
	_, err = d.AdvanceSchedule(ctx, "a", ledgerT0, ledgerT0, ledgerT0.Add(time.Hour))
	require.ErrorIs(t, err, postgres.ErrClosed)
}

// testSchedule is a valid, enabled schedule planned at at.
func testSchedule(t *testing.T, id string, at time.Time) schedule.Schedule {
	t.Helper()
	s := schedule.Schedule{ID: id, SessionKey: "default:test:bot:group:" + id,
		Target: schedule.Target{Platform: "test", BotID: "bot", Chat: channel.Chat{Kind: channel.Group, ID: id}},
		Spec:   "every 1h", Prompt: "say something", Enabled: true}
	require.NoError(t, schedule.Plan(&s, at))
	return s
}

// TestLedgerSchedulesAcrossProcesses opens two stores on one schema, as
// two processes would, and races them: many goroutines in both advance
// the same due time of a schedule (exactly one wins, round after round),
// mark the same slot with different fingerprints (exactly one fingerprint
// is kept), save competing drafts with their intents (one draft and its
// intent are kept), and mark a slot sent while others clear and re-mark
// it (a sent slot is never turned back).
func TestLedgerSchedulesAcrossProcesses(t *testing.T) {
	t.Parallel()
	url := pgtest.Schema(t)
	clk := clock.NewFake(ledgerT0)
	stores := []*postgres.DB{openURL(t, url, clk), openURL(t, url, clk)}
	const perStore = 8
	ctx := t.Context()

	// race runs fn in perStore goroutines on each store and waits.
	race := func(fn func(d *postgres.DB, w int)) {
		var wg sync.WaitGroup
		for i, d := range stores {
			for g := range perStore {
				wg.Go(func() { fn(d, i*perStore+g) })
			}
		}
		wg.Wait()
	}

	t.Run("AdvanceOneWinner", func(t *testing.T) {
		s := testSchedule(t, "race", ledgerT0)
		require.NoError(t, stores[0].PutSchedule(ctx, s))
		due := s.NextDue
		for round := range 5 {
			var wins atomic.Int64
			errs := make([]error, 2*perStore)
			race(func(d *postgres.DB, w int) {
				ok, err := d.AdvanceSchedule(ctx, "race", due, due, due.Add(time.Hour))
				errs[w] = err
				if ok {
					wins.Add(1)
				}
			})
			for w, err := range errs {
				require.NoError(t, err, "round %d worker %d", round, w)
			}
			require.Equal(t, int64(1), wins.Load(), "round %d: exactly one advance wins", round)
			for _, d := range stores {
				got, ok, err := d.GetSchedule(ctx, "race")
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, due.Add(time.Hour), got.NextDue)
				require.Equal(t, due, got.LastDue)
			}
			due = due.Add(time.Hour)
		}
	})

	t.Run("MarkIntentOneFingerprint", func(t *testing.T) {
		errs := make([]error, 2*perStore)
		race(func(d *postgres.DB, w int) {
			errs[w] = d.MarkIntent(ctx, "turn-race", 0, fmt.Sprintf("fp-%d", w))
		})
		won := -1
		for w, err := range errs {
			if err == nil {
				require.Equal(t, -1, won, "workers %d and %d both recorded their fingerprint", won, w)
				won = w
				continue
			}
			require.ErrorIs(t, err, postgres.ErrFingerprintMismatch, "worker %d", w)
		}
		require.GreaterOrEqual(t, won, 0, "one fingerprint is recorded")
		for _, d := range stores {
			ss, err := d.Slots(ctx, "turn-race")
			require.NoError(t, err)
			require.Len(t, ss, 1)
			require.Equal(t, fmt.Sprintf("fp-%d", won), ss[0].Fingerprint)
			require.Equal(t, outbound.SlotIntent, ss[0].State)
			require.Equal(t, ledgerT0, ss[0].IntentAt)
		}
	})

	t.Run("SaveDraftIntentOneWinner", func(t *testing.T) {
		type result struct {
			got    outbound.Draft
			intent bool
			err    error
		}
		res := make([]result, 2*perStore)
		race(func(d *postgres.DB, w int) {
			dr := outbound.Draft{TurnID: "turn-draft", Chunks: []outbound.Chunk{{Text: fmt.Sprint("attempt ", w)}}}
			res[w].got, res[w].intent, res[w].err = d.SaveDraftIntent(ctx, dr, fmt.Sprint("fp-", w))
		})
		stored, ok, err := stores[1].LoadDraft(ctx, "turn-draft")
		require.NoError(t, err)
		require.True(t, ok)
		won := -1
		for w, r := range res {
			require.NoError(t, r.err, "worker %d", w)
			require.Equal(t, stored, r.got, "worker %d", w)
			if r.intent {
				require.Equal(t, -1, won, "workers %d and %d both recorded an intent", won, w)
				won = w
			}
		}
		require.GreaterOrEqual(t, won, 0)
		require.Equal(t, fmt.Sprint("attempt ", won), stored.Chunks[0].Text)
		ss, err := stores[0].Slots(ctx, "turn-draft")
		require.NoError(t, err)
		require.Len(t, ss, 1)
		require.Equal(t, fmt.Sprint("fp-", won), ss[0].Fingerprint)
	})

	t.Run("SentIsNeverTurnedBack", func(t *testing.T) {
		for round := range 5 {
			turn := fmt.Sprint("turn-sent-", round)
			require.NoError(t, stores[0].MarkIntent(ctx, turn, 0, "fp"))
			errs := make([]error, 2*perStore)
			race(func(d *postgres.DB, w int) {
				switch w % 4 {
				case 0:
					errs[w] = d.MarkSent(ctx, turn, 0, []string{"m-" + turn}, ledgerT0.Add(time.Second))
				case 1:
					errs[w] = d.ClearIntent(ctx, turn, 0)
				default:
					errs[w] = d.MarkIntent(ctx, turn, 0, "fp")
				}
			})
			for w, err := range errs {
				require.NoError(t, err, "round %d worker %d", round, w)
			}
			for _, d := range stores {
				ss, err := d.Slots(ctx, turn)
				require.NoError(t, err)
				require.Len(t, ss, 1, "round %d", round)
				require.Equal(t, outbound.SlotSent, ss[0].State, "round %d: the sent slot stays sent", round)
				require.Equal(t, []string{"m-" + turn}, ss[0].MessageIDs)
				require.Equal(t, ledgerT0.Add(time.Second), ss[0].SentAt)
			}
		}
	})
}

// TestSchedulesRunnersAcrossProcesses: one runner per store, both ticking
// at the same due times, fire every due time (at most once per runner: a
// firing id is the same in both, so the enqueue deduplicates) and leave
// every schedule advanced exactly once per due time.
func TestSchedulesRunnersAcrossProcesses(t *testing.T) {
	t.Parallel()
	url := pgtest.Schema(t)
	clk := clock.NewFake(ledgerT0)
	stores := []*postgres.DB{openURL(t, url, clk), openURL(t, url, clk)}
	ctx := t.Context()
	const schedules, rounds = 4, 3
	want := map[string]bool{}
	for i := range schedules {
		s := testSchedule(t, fmt.Sprint("s", i), ledgerT0)
		require.NoError(t, stores[i%2].PutSchedule(ctx, s))
		for k := range rounds {
			f := schedule.Firing{Schedule: s, Due: s.NextDue.Add(time.Duration(k) * time.Hour)}
			want[f.ID()] = true
		}
	}
	var (
		mu    sync.Mutex
		fired = map[string]int{}
	)
	fire := func(_ context.Context, f schedule.Firing) error {
		mu.Lock()
		defer mu.Unlock()
		fired[f.ID()]++
		return nil
	}
	var runners []*schedule.Runner
	for _, d := range stores {
		r, err := schedule.NewRunner(schedule.Config{Store: d, Clock: clk, Fire: fire})
		require.NoError(t, err)
		runners = append(runners, r)
	}
	for range rounds {
		clk.Advance(time.Hour)
		var wg sync.WaitGroup
		errs := make([]error, len(runners))
		for i, r := range runners {
			wg.Go(func() { _, errs[i] = r.Tick(ctx) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, fired, len(want), "every due time fired, no other")
	for id, n := range fired {
		require.True(t, want[id], "unexpected firing %s", id)
		require.LessOrEqual(t, n, 2, "firing %s handed over more than once per runner", id)
	}
	all, err := stores[1].ListSchedules(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, schedules)
	for _, s := range all {
		require.Equal(t, ledgerT0.Add(rounds*time.Hour), s.LastDue, s.ID)
		require.Equal(t, ledgerT0.Add((rounds+1)*time.Hour), s.NextDue, s.ID)
	}
}
