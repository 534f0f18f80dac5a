package outbound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/personakit/persona/clock"
)

// Lane is a send lane of a group chat: text and media fail and recover
// independently, each with its own backoff.
type Lane string

// The lanes.
const (
	LaneText  Lane = "text"
	LaneMedia Lane = "media"
)

// Lane defaults.
const (
	DefaultLaneBase          = time.Minute
	DefaultLaneCap           = 15 * time.Minute
	DefaultLaneFailureWindow = 30 * time.Minute
	DefaultLaneDropCooldown  = 30 * time.Minute
)

// LanesConfig configures [Lanes]. Zero durations take the defaults.
type LanesConfig struct {
	// State stores the lanes (State name StateLane, Subject the lane).
	// Required.
	State  StateStore
	Clock  clock.Clock
	Logger *slog.Logger
	// Base and Cap bound the backoff: Base × 2^(n−1), capped at Cap,
	// times a deterministic jitter of 100–120 %.
	Base time.Duration
	Cap  time.Duration
	// FailureWindow after a lane's first failure it enters a drop cooldown
	// of DropCooldown.
	FailureWindow time.Duration
	DropCooldown  time.Duration
}

// Lanes tracks the send lanes of group chats. A worker never sleeps on a
// lane: [Lanes.Check] says until when the item is to be snoozed, or that the
// lane drops everything for now.
type Lanes struct {
	cfg LanesConfig
	clk clock.Clock
	log *slog.Logger
}

// laneState is the stored Value of a lane.
type laneState struct {
	Failures     int       `json:"failures"`
	FirstFailure time.Time `json:"first_failure"`
	Next         time.Time `json:"next"`
	DropUntil    time.Time `json:"drop_until,omitzero"`
}

// LaneStatus is the answer of [Lanes.Check].
type LaneStatus struct {
	// Wait: the lane is backing off; snooze the item until Until (no
	// attempt is charged).
	Wait bool
	// Drop: the lane is in its drop cooldown until Until; the send ends
	// with DroppedOutboundDelivery.
	Drop  bool
	Until time.Time
	// Failures is the lane's failure count.
	Failures int
}

// NewLanes returns the lane tracker.
func NewLanes(cfg LanesConfig) (*Lanes, error) {
	if cfg.State == nil {
		return nil, errors.New("outbound: LanesConfig.State is required")
	}
	if cfg.Base <= 0 {
		cfg.Base = DefaultLaneBase
	}
	if cfg.Cap <= 0 {
		cfg.Cap = DefaultLaneCap
	}
	if cfg.FailureWindow <= 0 {
		cfg.FailureWindow = DefaultLaneFailureWindow
	}
	if cfg.DropCooldown <= 0 {
		cfg.DropCooldown = DefaultLaneDropCooldown
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Lanes{cfg: cfg, clk: clock.OrReal(cfg.Clock), log: log}, nil
}

func (l *Lanes) load(ctx context.Context, session string, lane Lane) (laneState, bool, error) {
	s, ok, err := l.cfg.State.GetState(ctx, session, string(lane), StateLane)
	if err != nil || !ok || s.Value == "" {
		return laneState{}, false, err
	}
	var ls laneState
	if err := json.Unmarshal([]byte(s.Value), &ls); err != nil {
		return laneState{}, false, nil // a broken lane is a healthy lane
	}
	return ls, true, nil
}

func (l *Lanes) save(ctx context.Context, session string, lane Lane, ls laneState, until time.Time) error {
	b, err := json.Marshal(ls)
	if err != nil {
		return err
	}
	return l.cfg.State.SetState(ctx, State{SessionKey: session, Subject: string(lane), Name: StateLane, Until: until, Value: string(b)})
}

// Check reports whether a send on the lane may go ahead now.
func (l *Lanes) Check(ctx context.Context, session string, lane Lane) (LaneStatus, error) {
	ls, ok, err := l.load(ctx, session, lane)
	if err != nil || !ok || ls.Failures == 0 {
		return LaneStatus{}, err
	}
	now := l.clk.Now()
	switch {
	case now.Before(ls.DropUntil):
		return LaneStatus{Drop: true, Until: ls.DropUntil, Failures: ls.Failures}, nil
	case now.Before(ls.Next):
		return LaneStatus{Wait: true, Until: ls.Next, Failures: ls.Failures}, nil
	}
	return LaneStatus{Failures: ls.Failures}, nil
}

// Fail records a failed send on the lane and returns its new status: the
// next attempt is now + Base × 2^(n−1) (capped, jittered 100–120 %); once
// FailureWindow has passed since the first failure the lane drops sends
// for DropCooldown.
func (l *Lanes) Fail(ctx context.Context, session string, lane Lane) (LaneStatus, error) {
	now := l.clk.Now()
	ls, _, err := l.load(ctx, session, lane)
	if err != nil {
		return LaneStatus{}, err
	}
	if ls.Failures == 0 || (!ls.DropUntil.IsZero() && !now.Before(ls.DropUntil)) {
		// A fresh lane, or one whose drop cooldown is over: start again.
		ls = laneState{FirstFailure: now}
	}
	ls.Failures++
	delay := min(l.cfg.Cap, l.cfg.Base<<min(ls.Failures-1, 30))
	delay = time.Duration(float64(delay) * jitter(session, string(lane), ls.Failures))
	ls.Next = now.Add(delay)
	st := LaneStatus{Wait: true, Until: ls.Next, Failures: ls.Failures}
	until := ls.Next.Add(l.cfg.FailureWindow + l.cfg.DropCooldown)
	if now.Sub(ls.FirstFailure) >= l.cfg.FailureWindow {
		ls.DropUntil = now.Add(l.cfg.DropCooldown)
		ls.Next = ls.DropUntil
		st = LaneStatus{Drop: true, Until: ls.DropUntil, Failures: ls.Failures}
		until = ls.DropUntil
		l.log.Warn("outbound_delivery_dropped", "session", session, "lane", lane, "failures", ls.Failures, "until", ls.DropUntil)
	} else {
		l.log.Info("outbound_delivery_backoff", "session", session, "lane", lane, "failures", ls.Failures, "next", ls.Next)
	}
	if err := l.save(ctx, session, lane, ls, until); err != nil {
		return LaneStatus{}, fmt.Errorf("outbound: save lane: %w", err)
	}
	return st, nil
}

// Succeed resets the lane after a delivered send.
func (l *Lanes) Succeed(ctx context.Context, session string, lane Lane) error {
	ls, ok, err := l.load(ctx, session, lane)
	if err != nil || !ok || ls.Failures == 0 {
		return err
	}
	l.log.Info("outbound_delivery_recovered", "session", session, "lane", lane, "failures", ls.Failures)
	now := l.clk.Now()
	return l.save(ctx, session, lane, laneState{}, now)
}

// jitter is a deterministic factor in [1.0, 1.2] from the lane and the
// failure count, so retries of many groups spread out without randomness
// in tests.
func jitter(session, lane string, n int) float64 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s|%s|%d", session, lane, n)
	return 1 + float64(h.Sum32()%2001)/10000
}
