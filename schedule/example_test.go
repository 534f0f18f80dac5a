package schedule_test

import (
	"context"
	"fmt"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/schedule"
	"github.com/personakit/persona/schedule/scheduletest"
)

// Example plans a schedule, stores it, and lets a Runner fire it when it
// falls due. The Fire callback is where the pipeline enqueues a scheduled
// turn under f.ID(), which makes a repeated firing harmless.
func Example() {
	ctx := context.Background()
	start := time.Date(2026, 3, 2, 7, 0, 0, 0, time.UTC) // Monday 08:00 in Berlin
	clk := clock.NewFake(start)
	store := scheduletest.NewMemory() // package store's *DB in production

	s := schedule.Schedule{
		ID:         "morning",
		SessionKey: "default:telegram:bot:group:-100",
		Target: schedule.Target{Platform: "telegram", BotID: "bot",
			Chat: channel.Chat{Kind: channel.Group, ID: "-100"}},
		Spec:    "0 9 * * MON-FRI",
		Zone:    "Europe/Berlin",
		Prompt:  "Wish everyone a good morning.",
		Enabled: true,
	}
	if err := schedule.Plan(&s, clk.Now()); err != nil {
		fmt.Println("plan:", err)
		return
	}
	if err := store.PutSchedule(ctx, s); err != nil {
		fmt.Println("put:", err)
		return
	}
	fmt.Println("spec:", s.Spec, "next due:", s.NextDue)

	r, err := schedule.NewRunner(schedule.Config{
		Store: store,
		Clock: clk,
		Fire: func(ctx context.Context, f schedule.Firing) error {
			fmt.Println("fire", f.ID(), "at", f.Due.Format("Mon 15:04 MST"), "late:", f.Late)
			return nil
		},
	})
	if err != nil {
		fmt.Println("runner:", err)
		return
	}
	// Run(ctx) would wait for the due time; here the fake clock jumps.
	clk.Set(s.NextDue)
	n, err := r.Tick(ctx)
	fmt.Println("fired:", n, err)
	s, _, _ = store.GetSchedule(ctx, "morning")
	fmt.Println("next due:", s.NextDue, "last due:", s.LastDue)

	_, err = schedule.Parse("every 30s")
	fmt.Println(err)
	// Output:
	// spec: 0 9 * * 1-5 next due: 2026-03-02 08:00:00 +0000 UTC
	// fire schedule:morning:1772438400000 at Mon 09:00 CET late: false
	// fired: 1 <nil>
	// next due: 2026-03-03 08:00:00 +0000 UTC last due: 2026-03-02 08:00:00 +0000 UTC
	// schedule: invalid spec "every 30s": interval 30s is shorter than the minimum 1m
}
