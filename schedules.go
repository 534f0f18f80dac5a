package persona

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/schedule"
)

// The outcome codes of scheduled messages.
const (
	// RepliedScheduled: a scheduled message was posted.
	RepliedScheduled outcome.Code = "replied_scheduled"
	// IgnoredScheduleMissed: a due time passed while the bot was down,
	// longer ago than a late firing is allowed (schedule.DefaultMaxLate).
	IgnoredScheduleMissed outcome.Code = "ignored_schedule_missed"
)

// noticeSchedule is the notice type of a scheduled turn's event: the
// schedule's id in Flag, its prompt in Comment. Like every notice it is
// kept out of the prompts' history.
const noticeSchedule = "schedule"

// ErrNoSchedules is returned by the schedule methods when the pipeline has
// no schedule store (no DataDir or DB, and no Options.Schedules).
var ErrNoSchedules = errors.New("persona: no schedule store (use DataDir, DB or Options.Schedules)")

// AddSchedule stores a schedule (or replaces the one with its ID) and
// plans its next due time from now. The zero SessionKey is derived from
// Target; Enabled is what you set (the zero value keeps it disabled).
// Each due time sends a scheduled turn through the whole pipeline (the
// gates as for a direct message, the generation asked to post Prompt, the
// review, the delivery): at most once per due time across restarts and
// crashes, and after downtime at most one late firing (a due time older
// than schedule.DefaultMaxLate is recorded as ignored_schedule_missed).
func (p *Pipeline) AddSchedule(ctx context.Context, s schedule.Schedule) (schedule.Schedule, error) {
	if p.schedules == nil {
		return schedule.Schedule{}, ErrNoSchedules
	}
	if s.Target.Profile == "" {
		s.Target.Profile = p.opt.Profile
	}
	if s.SessionKey == "" {
		s.SessionKey = channel.SessionKey(s.Target.Profile, s.Target.Platform, s.Target.BotID, s.Target.Chat)
	}
	now := p.clk.Now()
	if old, ok, err := p.schedules.GetSchedule(ctx, s.ID); err != nil {
		return schedule.Schedule{}, err
	} else if ok {
		s.CreatedAt, s.LastDue = old.CreatedAt, old.LastDue
	}
	if err := schedule.Plan(&s, now); err != nil {
		return schedule.Schedule{}, err
	}
	if err := p.schedules.PutSchedule(ctx, s); err != nil {
		return schedule.Schedule{}, err
	}
	if r := p.schedRunner; r != nil {
		r.Wake()
	}
	return s, nil
}

// Schedules lists the schedules of a session ("" = every session).
func (p *Pipeline) Schedules(ctx context.Context, sessionKey string) ([]schedule.Schedule, error) {
	if p.schedules == nil {
		return nil, ErrNoSchedules
	}
	return p.schedules.ListSchedules(ctx, sessionKey)
}

// RemoveSchedule deletes a schedule (schedule.ErrNotFound when there is
// none). A firing already enqueued still runs.
func (p *Pipeline) RemoveSchedule(ctx context.Context, id string) error {
	if p.schedules == nil {
		return ErrNoSchedules
	}
	return p.schedules.DeleteSchedule(ctx, id)
}

// newScheduleRunner builds the runner Run drives (nil without a store).
func (p *Pipeline) newScheduleRunner() (*schedule.Runner, error) {
	if p.schedules == nil {
		return nil, nil
	}
	return schedule.NewRunner(schedule.Config{Store: p.schedules, Clock: p.clk, Logger: p.log.With("component", "schedule"),
		Fire: p.fireSchedule, Skip: p.skipSchedule, Workers: 4})
}

// scheduleItem is the queue item of one firing: its id is the firing's,
// so the queue refuses a second enqueue of the same due time.
func (p *Pipeline) scheduleItem(f schedule.Firing) inbound.Item {
	s := f.Schedule
	ev := channel.Event{Platform: s.Target.Platform, Profile: s.Target.Profile, BotID: s.Target.BotID, Kind: channel.KindNotice,
		Chat: s.Target.Chat, SessionKey: s.SessionKey,
		// The event is dated when it fires (not at its due time), so a
		// late firing is not taken for a stale replay.
		Time:   p.clk.Now(),
		Notice: &channel.Notice{Type: noticeSchedule, Flag: s.ID, Comment: s.Prompt},
		Source: channel.SourceSchedule}
	return inbound.Item{ID: f.ID(), SessionKey: s.SessionKey, Event: ev, Priority: inbound.PriorityDirect}
}

// fireSchedule enqueues a scheduled turn (idempotent per firing).
func (p *Pipeline) fireSchedule(ctx context.Context, f schedule.Firing) error {
	if err := p.enqueue(ctx, p.scheduleItem(f)); err != nil {
		return fmt.Errorf("enqueue scheduled turn: %w", err)
	}
	return nil
}

// skipSchedule records a due time too old to fire.
func (p *Pipeline) skipSchedule(ctx context.Context, f schedule.Firing) {
	it := p.scheduleItem(f)
	o := inbound.Outcome{Code: IgnoredScheduleMissed, Kind: "schedule",
		Reason: fmt.Sprintf("due at %s while the bot was down; too late to post (%d earlier due time(s) missed as well)",
			f.Due.In(p.zone()).Format(time.DateTime+" MST"), f.Missed),
		Trail: &inbound.Trail{Schedule: f.Schedule.ID}}
	created, err := p.opt.Queue.Record(ctx, it, o)
	if err != nil {
		p.log.Warn("record missed schedule", "schedule", f.Schedule.ID, "err", err)
		return
	}
	if created {
		p.notify(it.ID, o)
	}
}

// scheduledTurn is the synthetic turn of a firing.
func scheduledTurn(n *channel.Notice, tr *turnTrail) *synthetic {
	tr.Schedule = n.Flag
	return &synthetic{trigger: "schedule", code: RepliedScheduled, sender: channel.Sender{Name: "schedule"},
		text: "[A scheduled message: nobody wrote this; you post it to the chat on your own, in character. What to post: " +
			n.Comment + "]"}
}

// scheduleUsage is the owner's /schedule help.
const scheduleUsage = "Usage: /schedule list · /schedule add ID SPEC [ZONE] | PROMPT (SPEC: every 90m, a cron line such as 0 8 * * mon-fri, or @daily) · /schedule remove ID"

// scheduleCommand lists, adds and removes the schedules of the owner's
// chat.
func (p *Pipeline) scheduleCommand(ctx context.Context, l inbound.Lease, args string) (string, error) {
	if p.schedules == nil {
		return "Schedules need the store (DataDir or DB).", nil
	}
	verb, rest, _ := strings.Cut(strings.TrimSpace(args), " ")
	rest = strings.TrimSpace(rest)
	switch strings.ToLower(verb) {
	case "", "list":
		list, err := p.schedules.ListSchedules(ctx, l.SessionKey)
		if err != nil {
			return "", err
		}
		if len(list) == 0 {
			return "No schedules in this chat.", nil
		}
		var b strings.Builder
		b.WriteString("Schedules here:")
		for _, s := range list {
			zone := s.Zone
			if zone == "" {
				zone = "UTC"
			}
			state := "next " + s.NextDue.In(p.zone()).Format("2006-01-02 15:04 MST")
			if !s.Enabled {
				state = "off"
			}
			fmt.Fprintf(&b, "\n%s: %s (%s), %s: %s", s.ID, s.Spec, zone, state, excerpt(s.Prompt, 60))
		}
		return b.String(), nil
	case "add":
		return p.addScheduleCommand(ctx, l, rest)
	case "remove", "rm", "delete":
		old, ok, err := p.schedules.GetSchedule(ctx, rest)
		if err != nil {
			return "", err
		}
		if !ok || old.SessionKey != l.SessionKey {
			return fmt.Sprintf("No schedule %q in this chat.", rest), nil
		}
		if err := p.RemoveSchedule(ctx, rest); err != nil {
			return "", err
		}
		return fmt.Sprintf("Schedule %q removed.", rest), nil
	}
	return scheduleUsage, nil
}

// addScheduleCommand parses "ID SPEC [ZONE] | PROMPT" and stores the
// schedule for the owner's chat.
func (p *Pipeline) addScheduleCommand(ctx context.Context, l inbound.Lease, rest string) (string, error) {
	head, prompt, ok := strings.Cut(rest, "|")
	fields := strings.Fields(head)
	prompt = strings.TrimSpace(prompt)
	if !ok || len(fields) < 2 || prompt == "" {
		return scheduleUsage, nil
	}
	id, specFields := fields[0], fields[1:]
	zone := ""
	if last := specFields[len(specFields)-1]; len(specFields) > 1 && (strings.Contains(last, "/") || last == "UTC") {
		if _, err := schedule.LoadZone(last); err == nil {
			zone, specFields = last, specFields[:len(specFields)-1]
		}
	}
	if zone == "" {
		if name := p.zone().String(); name != "Local" {
			zone = name
		}
	}
	if old, ok, err := p.schedules.GetSchedule(ctx, id); err != nil {
		return "", err
	} else if ok && old.SessionKey != l.SessionKey {
		return fmt.Sprintf("The id %q is taken by a schedule of another chat; pick another.", id), nil
	}
	ev := l.Event
	s, err := p.AddSchedule(ctx, schedule.Schedule{ID: id, Spec: strings.Join(specFields, " "), Zone: zone, Prompt: prompt,
		Enabled: true, SessionKey: l.SessionKey,
		Target: schedule.Target{Profile: ev.Profile, Platform: ev.Platform, BotID: ev.BotID, Chat: ev.Chat}})
	if errors.Is(err, schedule.ErrInvalid) || errors.Is(err, schedule.ErrSpec) {
		return "Not added: " + err.Error(), nil
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Schedule %q added: %s; next at %s.", s.ID, s.Spec, s.NextDue.In(p.zone()).Format("2006-01-02 15:04 MST")), nil
}
