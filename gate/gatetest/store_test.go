package gatetest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
	"github.com/personakit/persona/route"
	"github.com/personakit/persona/store"
)

// TestStoreFlagsConformance runs the Flags suite against the SQLite store.
func TestStoreFlagsConformance(t *testing.T) {
	t.Parallel()
	gatetest.RunFlags(t, func(t *testing.T) gate.Flags {
		db, err := store.Open(t.TempDir()+"/flags.db", store.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		return db
	})
}

// TestRulesOnStore runs the default gates with their state in the SQLite
// store, and checks that the state survives a restart.
func TestRulesOnStore(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	path := t.TempDir() + "/x.db"
	open := func() (*store.DB, *gate.Rules) {
		db, err := store.Open(path, store.Options{Clock: clk})
		require.NoError(t, err)
		rules, err := gate.Compile(gate.Config{Flags: db, Quota: gate.NewFlagQuota(db), Clock: clk,
			Policy: gate.Policy{Quota: gate.Quotas{User: 2}}})
		require.NoError(t, err)
		return db, rules
	}
	ev := channel.Event{Platform: "onebot", BotID: "bot", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: channel.Group, ID: "g1"}, MessageID: "m1", Time: t0,
		Sender: channel.Sender{ID: "u1"}, Segments: []channel.Segment{channel.Text("hi all")}, Source: channel.SourceLive}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
	turn := func() *gate.Turn { return &gate.Turn{Event: ev, SessionKey: ev.SessionKey, Now: clk.Now()} }
	ctx := t.Context()

	db, rules := open()
	require.NoError(t, rules.OpenStopWindow(ctx, ev.SessionKey, clk.Now()))
	require.NoError(t, gate.Suppress(ctx, db, ev.SessionKey, "u9", clk.Now().Add(time.Hour), "loop"))
	require.NoError(t, rules.RecordModelCall(ctx, &ev, clk.Now()))
	require.Equal(t, gate.NameStopWindow, rules.Chain().Check(ctx, turn()).Gate)
	require.NoError(t, db.Close())

	// After a restart the stop window and the counters are still there.
	db, rules = open()
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	v := rules.Chain().Check(ctx, turn())
	require.Equal(t, gate.IgnoredStopRequested, v.Code)

	require.NoError(t, rules.RecordModelCall(ctx, &ev, clk.Now()))
	tr := turn()
	tr.Direct = true
	require.Equal(t, gate.IgnoredModelQuota, rules.Chain().Check(ctx, tr).Code)

	// Tomorrow the quota is fresh and the stop window long over.
	clk.Advance(24 * time.Hour)
	require.Equal(t, gate.Pass, rules.Chain().Check(ctx, turn()))

	// The unavailable mark, set now, is cleared by a newer live message.
	require.NoError(t, gate.MarkUnavailable(ctx, db, ev.SessionKey, clk.Now(), "kicked"))
	tr = turn()
	require.Equal(t, gate.IgnoredUnavailableGroup, rules.Chain().Check(ctx, tr).Code)
	tr.Event.Time = clk.Now().Add(time.Second)
	require.Equal(t, gate.Pass, rules.Chain().Check(ctx, tr))
	_, ok, err := db.GetFlag(ctx, ev.SessionKey, "", gate.FlagUnavailable)
	require.NoError(t, err)
	require.False(t, ok)
}

// BenchmarkDecisionStore is BenchmarkDecision (package gate) with the
// state in the SQLite store: Classify and the twelve default gates with
// quotas, user lists, active hours and a member level, for an unprompted
// group message. "direct" reads every flag from SQLite (8 queries per
// message); "cached" reads through a gate.FlagCache.
func BenchmarkDecisionStore(b *testing.B) {
	b.Run("direct", func(b *testing.B) { benchDecisionStore(b, false) })
	b.Run("cached", func(b *testing.B) { benchDecisionStore(b, true) })
}

func benchDecisionStore(b *testing.B, cached bool) {
	t0 := time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	db, err := store.Open(b.TempDir()+"/bench.db", store.Options{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	var flags gate.Flags = db
	if cached {
		flags = gate.NewFlagCache(db, gate.FlagCacheConfig{Clock: clk})
	}
	rules, err := gate.Compile(gate.Config{Flags: flags, Quota: gate.NewFlagQuota(flags), Policy: gate.Policy{
		BlockedUsers: []string{"spam1"}, ExemptUsers: []string{"friend"}, ActiveHours: "08:00-23:30",
		MinMemberLevel: 3, Quota: gate.Quotas{Bot: 5000, Group: 500, User: 100},
	}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ev := channel.Event{Platform: "onebot", BotID: "bot", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: channel.Group, ID: "g1"}, MessageID: "m1", Time: t0, Source: channel.SourceLive,
		Sender: channel.Sender{ID: "u1", Role: channel.RoleMember, Level: 12, LevelKnown: true},
		Segments: []channel.Segment{channel.Mention("u2"),
			channel.Text(` did you see what "Mira" said about the new ramen place near the station? Friday after work?`)}}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
	for i := range 100 {
		s := channel.SessionKey("", "onebot", "bot", channel.Chat{Kind: channel.Group, ID: fmt.Sprint("g", i)})
		if err := gate.Suppress(ctx, flags, s, fmt.Sprint("x", i), t0.Add(time.Hour), "paused"); err != nil {
			b.Fatal(err)
		}
	}
	for range 10 {
		if err := rules.RecordModelCall(ctx, &ev, t0); err != nil {
			b.Fatal(err)
		}
	}
	chain, triggers := rules.Chain(), route.DefaultTriggers()
	id := route.Identity{BotID: "bot", Aliases: []string{"Mira"}, Owners: []string{"owner"}}
	b.ReportAllocs()
	start, n := time.Now(), 0
	for b.Loop() {
		kind := route.Classify(&ev, id, triggers)
		t := gate.Turn{Event: ev, SessionKey: ev.SessionKey, Direct: kind != "", Trigger: kind, Now: t0}
		if v := chain.Check(ctx, &t); v.Stop || v.Err != nil {
			b.Fatalf("unexpected verdict %+v", v)
		}
		n++
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
}
