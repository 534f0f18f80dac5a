package gate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
	"github.com/personakit/persona/route"
)

// benchSetup returns a realistic policy (active hours, user lists, member
// level, quotas, sampling, a group override) over flags holding some state
// of other sessions and users.
func benchSetup(b *testing.B, flags gate.Flags) (gate.Chain, route.Identity) {
	b.Helper()
	ctx := context.Background()
	quota := gate.NewFlagQuota(flags)
	rules, err := gate.Compile(gate.Config{
		Flags: flags, Quota: quota,
		Policy: gate.Policy{
			BlockedUsers: []string{"spam1", "spam2"}, ExemptUsers: []string{"friend"},
			ActiveHours: "08:00-23:30", MinMemberLevel: 3,
			Quota:        gate.Quotas{Bot: 5000, Group: 500, User: 100},
			SamplingRate: 1,
		},
		Groups: map[string]gate.GroupPolicy{
			"g1": {Proactive: gate.Proactive{ChatIn: gate.ChatMedium, Criteria: "food talk"}},
			"g2": {Disabled: true},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 200 {
		s := channel.SessionKey("", "onebot", "bot", channel.Chat{Kind: channel.Group, ID: fmt.Sprint("g", i)})
		_ = gate.Suppress(ctx, flags, s, fmt.Sprint("x", i), t0.Add(time.Hour), "paused")
		_ = gate.OpenStopWindow(ctx, flags, s, t0.Add(-time.Hour), 0)
	}
	ev := groupTurn().Event
	for range 20 {
		_ = rules.RecordModelCall(ctx, &ev, t0)
	}
	id := route.Identity{BotID: "bot", Aliases: []string{"Mira", "米拉"}, Owners: []string{"owner"}}
	return rules.Chain(), id
}

// benchEvent is an unprompted group message: a mention of someone else, a
// quoted alias, an image, and the sender's level on the event.
func benchEvent() channel.Event {
	tr := groupTurn()
	ev := tr.Event
	ev.Sender.Level, ev.Sender.LevelKnown = 12, true
	ev.Segments = []channel.Segment{
		channel.Mention("u2"),
		channel.Text(` did you see what "Mira" said yesterday about the new ramen place near the station? I think we should go on Friday after work`),
		channel.Image(channel.Media{URL: "https://img.example/a.jpg"}),
	}
	return ev
}

func runDecision(b *testing.B, chain gate.Chain, id route.Identity, ev channel.Event, wantDirect bool) {
	b.Helper()
	ctx := context.Background()
	triggers := route.DefaultTriggers()
	b.ReportAllocs()
	start := time.Now()
	n := 0
	for b.Loop() {
		kind := route.Classify(&ev, id, triggers)
		t := gate.Turn{Event: ev, SessionKey: ev.SessionKey, Direct: kind != "", Trigger: kind,
			Owner: id.IsOwner(&ev), Now: t0}
		if v := chain.Check(ctx, &t); v.Stop || v.Err != nil || t.Direct != wantDirect {
			b.Fatalf("unexpected verdict %+v (direct %v)", v, t.Direct)
		}
		n++
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkDecision measures the deterministic decision path: Classify and
// the default chain of twelve gates, with state in an in-memory Flags.
func BenchmarkDecision(b *testing.B) {
	b.Run("unprompted", func(b *testing.B) {
		chain, id := benchSetup(b, gatetest.NewFlags())
		runDecision(b, chain, id, benchEvent(), false)
	})
	b.Run("direct", func(b *testing.B) {
		chain, id := benchSetup(b, gatetest.NewFlags())
		ev := benchEvent()
		ev.Segments[0] = channel.Mention("bot")
		runDecision(b, chain, id, ev, true)
	})
}
