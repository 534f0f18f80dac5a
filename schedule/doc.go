// Package schedule lets the bot speak on a schedule: durable scheduled
// messages, each belonging to one session, that fire a scheduled turn at
// the due times of a spec read in an IANA time zone.
//
// # Overview
//
// A spec ([Parse]) is a fixed interval ("every 90m", "every 1h30m",
// "every 24h": whole minutes, at least one) or a five-field cron line
// "minute hour day-of-month month day-of-week" with numbers, "*", lists,
// ranges, steps, three-letter month and weekday names, and the shortcuts
// @hourly, @daily, @weekly and @monthly. When both day fields are
// restricted (neither starts with "*") a day matches if either does, as
// in crontab(5). [Spec.Next] finds the first due time after an instant:
// an interval counts elapsed time from an anchor; a cron line is read on
// the wall clock of the zone, where a time skipped by a DST change does
// not fall due that day and a time repeated by one falls due once, at its
// first occurrence.
//
// A [Schedule] is a stored schedule: id, session, [Target] (bot and chat),
// spec, zone, prompt, NextDue and LastDue. [Plan] canonicalises and
// validates a new or edited schedule and sets its NextDue from now;
// [Store] is the storage port (package store implements it on SQLite,
// and schedule/scheduletest has its conformance suite and an in-memory
// Store).
//
// A [Runner] fires what is due. [Runner.Tick] reads the due schedules and
// for each computes the latest due time d at or before now. It fires d once
// through Config.Fire — Late when d is more than Config.Grace (1 minute)
// old, with Missed counting the earlier due times of the same catch-up,
// which never fire — or, when d is more than Config.MaxLate (1 hour) old,
// tells Config.Skip instead. Then it advances the schedule with a
// compare-and-set on NextDue ([Store.AdvanceSchedule]). The due times of
// an interval are the lattice through NextDue: Plan anchors it at the plan
// time, and every advance stays on it, so restarts do not shift it.
// [Runner.Run] ticks and then sleeps until the earliest NextDue, a
// [Runner.Wake], or at most [PollInterval].
//
// Firing is at least once; the Fire callback makes it exactly once. Each
// firing has an id, [Firing.ID], derived from the schedule id and the due
// time. A crash between Fire and the advance, or two runners reading the
// same due schedule, hands the same firing (same id) to Fire again; the
// pipeline enqueues the scheduled turn under that id into its durable
// queue, which refuses a duplicate, so a due time is spoken once. A Fire
// error leaves the schedule unadvanced and the next Tick tries again.
//
// # Usage
//
//	s := schedule.Schedule{ID: "morning", SessionKey: key, Target: target,
//		Spec: "0 9 * * mon-fri", Zone: "Europe/Berlin",
//		Prompt: "Wish everyone a good morning.", Enabled: true}
//	if err := schedule.Plan(&s, time.Now()); err != nil { ... }
//	if err := db.PutSchedule(ctx, s); err != nil { ... }
//	runner.Wake()
//
//	runner, err := schedule.NewRunner(schedule.Config{Store: db,
//		Fire: func(ctx context.Context, f schedule.Firing) error {
//			return enqueueScheduledTurn(ctx, f.ID(), f) // refuses duplicates
//		}})
//	go runner.Run(ctx)
//
// Zones are loaded with time.LoadLocation, which needs the system's zone
// database or a program that imports time/tzdata.
//
// # Concurrency
//
// Spec is an immutable value. A Runner is safe for concurrent use: Tick
// may run while Run does, and Wake may be called from any goroutine.
// Several runners, in one process or in several processes sharing a
// store, may run at once: the compare-and-set advance lets exactly one of
// them move each schedule on, and Fire may then be called by both with the
// same Firing.ID. Store implementations must be safe for concurrent use.
package schedule
