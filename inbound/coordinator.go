package inbound

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Defaults of CoordinatorConfig.
const (
	// DefaultCheckpointEvery is how often the online checkpoint is saved.
	DefaultCheckpointEvery = 30 * time.Second
	// DefaultReplayPadding is subtracted from the disconnect time to get
	// the replay cutoff.
	DefaultReplayPadding = 30 * time.Minute
	// DefaultReplayMax is how far back the replay cutoff may reach.
	DefaultReplayMax = 24 * time.Hour
	// DefaultBackfillPageSize is the history page size.
	DefaultBackfillPageSize = 100
	// DefaultBackfillSessionCap is the most messages one backfill run reads
	// per session.
	DefaultBackfillSessionCap = 200
	// DefaultBackfillContactsCap is the most sessions one run walks.
	DefaultBackfillContactsCap = 1000
	// DefaultBackfillTriggerLimit is history_backfill_message_limit: the
	// newest directly-triggering backfilled messages per session that are
	// queued for a reply.
	DefaultBackfillTriggerLimit = 3
	// DefaultWatermarkOverlap is re-read below a session's newest stored
	// message.
	DefaultWatermarkOverlap = 30 * time.Minute
)

// DefaultBackfillDelays returns the delays after a reconnect at which the
// three backfills run: 1 s, 1 min and 5 min.
func DefaultBackfillDelays() []time.Duration {
	return []time.Duration{time.Second, time.Minute, 5 * time.Minute}
}

// DefaultGapRechecks returns the recheck delays of a sequence gap, counted
// from its first refetch: 15 s, 1 min and 3 min.
func DefaultGapRechecks() []time.Duration {
	return []time.Duration{15 * time.Second, time.Minute, 3 * time.Minute}
}

// checkpointTimeout bounds a checkpoint save that runs detached from
// cancellation.
const checkpointTimeout = 5 * time.Second

// backfillLiveGrace is how recent a message a backfill run leaves to the
// live path: one sent less than this before the run started may still be
// on its way as a push, and a run that enqueued it first would keep it as
// history only when it arrives live a moment later (a backfill run queues
// for a reply only the newest few messages of a session that would have
// triggered one directly). A later run, or the gap rechecks, pick up such
// a message if its push never comes; after the last scheduled run
// (+5 min) only the gap rechecks (group chats with sequence numbers) or
// the next reconnect's runs do.
const backfillLiveGrace = 10 * time.Second

var (
	// ErrBackfillWindow is returned by RequestBackfill for a window that is
	// not positive or exceeds ReplayMax.
	ErrBackfillWindow = errors.New("inbound: backfill window out of range")
	// ErrNoBackfill is returned by RequestBackfill when the channel
	// implements neither channel.HistoryFetcher nor channel.ChatLister.
	ErrNoBackfill = errors.New("inbound: channel cannot backfill")
	// ErrCoordinatorRunning is returned by a second concurrent Run.
	ErrCoordinatorRunning = errors.New("inbound: coordinator already running")
)

// CoordinatorConfig configures a Coordinator. Zero durations and counts
// mean the defaults (the Default… constants and functions).
type CoordinatorConfig struct {
	// Bot is the checkpoint key, e.g. "<profile>/<platform>/<bot id>".
	// Required.
	Bot string
	// Profile is stamped on fetched events that have none and is used for
	// session keys (empty = channel.DefaultProfile).
	Profile string
	// BotID is the bot's own account id when known in advance; otherwise
	// it is learned from State.BotID and from fetched events. Used to skip
	// the bot's own private chat and its own messages.
	BotID string
	// Channel is the platform connection. Backfill needs it to implement
	// channel.HistoryFetcher and channel.ChatLister, gap refetch needs
	// channel.HistoryFetcher; without them only checkpoints, readiness and
	// the cutoff work. Required.
	Channel channel.Channel
	// Checkpoints stores the last-online time. Required.
	Checkpoints Checkpoints
	// Known reports whether a message (by its Event.Key()) is already
	// queued or stored. Required when the channel can fetch history.
	Known func(ctx context.Context, key string) (bool, error)
	// Direct reports whether the message would have triggered a reply
	// directly (mention, quote of the bot, private chat, …). Required when
	// the channel can fetch history.
	Direct func(ev *channel.Event) bool
	// Enqueue hands a fetched message to the pipeline with Source set
	// (backfill or gap) and historyOnly as decided; the pipeline applies its
	// usual entry rules and must enqueue idempotently. Required when the
	// channel can fetch history.
	Enqueue func(ctx context.Context, ev channel.Event, historyOnly bool) error
	// NewestStored optionally returns the newest stored event time of a
	// session that is before `before` (the reconnect time, so messages
	// delivered live since then do not hide the outage). The backfill stops
	// paging at that time minus WatermarkOverlap, never below the cutoff.
	// Nil: the backfill reads back to the cutoff.
	NewestStored func(ctx context.Context, sessionKey string, before time.Time) (time.Time, bool, error)
	// NewestEvent optionally returns the newest stored event time of all
	// sessions; Start uses it when no checkpoint was saved. When nil, Start
	// uses a NewestEventTime(ctx) method of Checkpoints if it has one.
	NewestEvent func(ctx context.Context) (time.Time, bool, error)
	// Clock drives every timer (nil = wall clock).
	Clock clock.Clock
	// Logger receives the coordinator's records (nil = discard).
	Logger *slog.Logger

	// CheckpointEvery is the checkpoint period while online (30 s).
	CheckpointEvery time.Duration
	// ReplayPadding and ReplayMax give the cutoff
	// max(disconnected_at − ReplayPadding, now − ReplayMax) (30 min, 24 h).
	ReplayPadding time.Duration
	ReplayMax     time.Duration
	// BackfillDelays are the runs after a reconnect (1 s, 1 min, 5 min).
	BackfillDelays []time.Duration
	// PageSize, SessionCap and ContactsCap bound a run: history page size,
	// messages per session, sessions walked (100, 200, 1000).
	PageSize    int
	SessionCap  int
	ContactsCap int
	// TriggerLimit is how many of the newest directly-triggering new
	// messages per session are queued for a reply (3); negative = none.
	TriggerLimit int
	// WatermarkOverlap is re-read below the newest stored message (30 min).
	WatermarkOverlap time.Duration
	// GapRechecks are the recheck delays of a seq gap after its first
	// refetch (15 s, 1 min, 3 min).
	GapRechecks []time.Duration
}

func (cfg *CoordinatorConfig) applyDefaults() {
	setDur := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	setInt := func(n *int, def int) {
		if *n <= 0 {
			*n = def
		}
	}
	setDur(&cfg.CheckpointEvery, DefaultCheckpointEvery)
	setDur(&cfg.ReplayPadding, DefaultReplayPadding)
	setDur(&cfg.ReplayMax, DefaultReplayMax)
	setDur(&cfg.WatermarkOverlap, DefaultWatermarkOverlap)
	setInt(&cfg.PageSize, DefaultBackfillPageSize)
	setInt(&cfg.SessionCap, DefaultBackfillSessionCap)
	setInt(&cfg.ContactsCap, DefaultBackfillContactsCap)
	switch {
	case cfg.TriggerLimit == 0:
		cfg.TriggerLimit = DefaultBackfillTriggerLimit
	case cfg.TriggerLimit < 0:
		cfg.TriggerLimit = 0
	}
	if len(cfg.BackfillDelays) == 0 {
		cfg.BackfillDelays = DefaultBackfillDelays()
	} else {
		cfg.BackfillDelays = slices.Clone(cfg.BackfillDelays)
		slices.Sort(cfg.BackfillDelays)
	}
	if len(cfg.GapRechecks) == 0 {
		cfg.GapRechecks = DefaultGapRechecks()
	} else {
		cfg.GapRechecks = slices.Clone(cfg.GapRechecks)
		slices.Sort(cfg.GapRechecks)
	}
}

// Coordinator decides when the pipeline may claim work and pulls what the
// bot missed: it keeps the online checkpoint, tracks whether the channel
// is effectively online (connected and the account online), computes the
// replay cutoff on every reconnect, runs the
// three reconnect backfills and the manual ones, and verifies sequence gaps
// of group chats.
//
// Usage: Start at process start (reads the checkpoint), Run in its own
// goroutine for the pipeline's lifetime, ReportState from the channel's
// sink, ObserveLive for every accepted live event, Ready before claiming and
// Cutoff in the worker's stale check.
//
// All backfill and gap work runs on the Run goroutine, one session at a
// time, so runs never overlap. A Coordinator is safe for concurrent use.
type Coordinator struct {
	cfg    CoordinatorConfig
	clk    clock.Clock
	log    *slog.Logger
	hist   channel.HistoryFetcher // nil: no gap refetch
	lister channel.ChatLister     // nil (or hist nil): no backfill
	kick   chan struct{}
	saveMu sync.Mutex // serializes checkpoint saves

	mu             sync.Mutex
	started        bool
	looping        bool
	botID          string
	connected      bool
	online         bool
	everOnline     bool
	lastSeen       time.Time // last time seen effectively online
	disconnectedAt time.Time // start of the outage the cutoff is based on
	connectedAt    time.Time // the last reconnect
	cutoff         time.Time // zero before the first connection
	schedule       []backfillRun
	owed           bool   // reconnect backfills not all done yet
	firstPending   bool   // the first backfill after a reconnect has not run
	epoch          uint64 // bumped on every reconnect
	running        bool   // a backfill run is in progress
	cancelJob      context.CancelFunc
	gaps           []*gapJob
	seqs           map[channel.Chat]*seqSet
	gen            uint64 // bumped on every change the Run loop must see

	// Run loop state, read by tests to wait deterministically.
	waiting   bool
	waitGen   uint64
	waitUntil time.Time
}

// backfillRun is one scheduled backfill.
type backfillRun struct {
	at time.Time
	// n is the reconnect run number (1..3), 0 for a manual run.
	n int
	// window is the manual look-back; chats limits a manual run (nil = all).
	window time.Duration
	chats  []channel.Chat
}

// NewCoordinator validates cfg and returns a Coordinator. It reports the
// channel offline until the first ReportState says otherwise.
func NewCoordinator(cfg CoordinatorConfig) (*Coordinator, error) {
	switch {
	case cfg.Bot == "":
		return nil, errors.New("inbound: coordinator: Bot is required")
	case cfg.Channel == nil:
		return nil, errors.New("inbound: coordinator: Channel is required")
	case cfg.Checkpoints == nil:
		return nil, errors.New("inbound: coordinator: Checkpoints is required")
	}
	cfg.applyDefaults()
	c := &Coordinator{
		cfg:   cfg,
		clk:   clock.OrReal(cfg.Clock),
		botID: cfg.BotID,
		kick:  make(chan struct{}, 1),
		seqs:  map[channel.Chat]*seqSet{},
	}
	c.log = cfg.Logger
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With(slog.String("bot", cfg.Bot))
	if h, ok := channel.As[channel.HistoryFetcher](cfg.Channel); ok {
		c.hist = h
		if l, ok := channel.As[channel.ChatLister](cfg.Channel); ok {
			c.lister = l
		}
		if cfg.Known == nil || cfg.Direct == nil || cfg.Enqueue == nil {
			return nil, errors.New("inbound: coordinator: Known, Direct and Enqueue are required for a channel that can fetch history")
		}
	}
	return c, nil
}

// CanBackfill reports whether the channel supports reconnect backfill
// (channel.HistoryFetcher and channel.ChatLister).
func (c *Coordinator) CanBackfill() bool { return c.hist != nil && c.lister != nil }

// Start reads the last online checkpoint: it becomes the initial
// disconnected_at (without one: the newest stored event time, else now).
// Call it once at process start, before the channel runs; Run calls it when
// it was not called.
func (c *Coordinator) Start(ctx context.Context) error {
	at, ok, err := c.cfg.Checkpoints.LoadCheckpoint(ctx, c.cfg.Bot)
	if err != nil {
		return fmt.Errorf("inbound: load checkpoint: %w", err)
	}
	from := "checkpoint"
	if !ok {
		at, from = c.clk.Now(), "now"
		newest := c.cfg.NewestEvent
		if newest == nil {
			if n, ok := c.cfg.Checkpoints.(interface {
				NewestEventTime(context.Context) (time.Time, bool, error)
			}); ok {
				newest = n.NewestEventTime
			}
		}
		if newest != nil {
			t, found, err := newest(ctx)
			switch {
			case err != nil:
				c.log.WarnContext(ctx, "newest event time", slog.Any("error", err))
			case found:
				at, from = t, "history"
			}
		}
	}
	c.mu.Lock()
	c.started = true
	if !c.everOnline {
		c.disconnectedAt = at
	}
	c.mu.Unlock()
	c.log.DebugContext(ctx, "coordinator_started", slog.Time("disconnected_at", at), slog.String("from", from))
	return nil
}

// Ready reports whether the pipeline may claim work for this channel: the
// channel is effectively online (connected and the account online).
func (c *Coordinator) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.online
}

// Cutoff returns the current replay cutoff: the worker completes items with
// an event time before it as ignored_stale. Before the first connection it
// is now − ReplayMax (or lower, after RequestBackfill).
func (c *Coordinator) Cutoff() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cutoffLocked(c.clk.Now())
}

func (c *Coordinator) cutoffLocked(now time.Time) time.Time {
	if c.everOnline {
		return c.cutoff
	}
	floor := now.Add(-c.cfg.ReplayMax)
	if !c.cutoff.IsZero() && c.cutoff.Before(floor) {
		return c.cutoff
	}
	return floor
}

// changedLocked wakes the Run loop. c.mu must be held.
func (c *Coordinator) changedLocked() {
	c.gen++
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// debtLocked reports whether a backfill is running, due or owed.
func (c *Coordinator) debtLocked() bool {
	return c.running || c.owed || len(c.schedule) > 0
}

// ReportState takes the channel's connection and account state (call it
// from the channel sink's ReportState). Connected && Online is
// "effectively online".
//
// Going offline stops claiming (Ready is false), cancels a running backfill
// or gap check, saves the checkpoint (the last time seen online) unless a
// backfill is still owed, and logs disconnected or account_offline. Coming
// back marks the coordinator ready, logs connection_opened (first
// connection of the process), reconnected or account_recovered, computes
// the cutoff max(disconnected_at − 30 min, now − 24 h) and schedules the
// backfills at +1 s, +1 min and +5 min, replacing any earlier schedule.
// The caller should wake its workers afterwards.
func (c *Coordinator) ReportState(ctx context.Context, st channel.State) {
	online := st.Connected && st.Online
	c.mu.Lock()
	if st.BotID != "" {
		c.botID = st.BotID
	}
	wasConnected := c.connected
	c.connected = st.Connected
	if online == c.online {
		c.mu.Unlock()
		return
	}
	now := c.clk.Now()
	attrs := []any{slog.String("platform", st.Platform), slog.String("bot_id", st.BotID), slog.String("reason", st.Reason)}
	if !online {
		c.online = false
		debt := c.debtLocked()
		save := !debt
		if save {
			c.disconnectedAt = cmp.Or(c.lastSeen, now)
		}
		at := c.disconnectedAt
		c.schedule = nil
		if c.cancelJob != nil {
			c.cancelJob()
		}
		c.changedLocked()
		c.mu.Unlock()
		action := "disconnected"
		if st.Connected {
			action = "account_offline"
		}
		c.log.WarnContext(ctx, action, append(attrs, slog.Time("last_online", at), slog.Bool("backfill_debt", debt))...)
		if save {
			c.save(ctx, at)
		}
		return
	}

	action := "reconnected"
	switch {
	case !c.everOnline:
		action = "connection_opened"
	case wasConnected:
		action = "account_recovered"
	}
	c.online, c.everOnline = true, true
	c.epoch++
	c.lastSeen, c.connectedAt = now, now
	c.cutoff = ReplayCutoff(c.disconnectedAt, now, c.cfg.ReplayPadding, c.cfg.ReplayMax)
	cutoff, from := c.cutoff, c.disconnectedAt
	c.schedule = nil
	if c.CanBackfill() {
		for i, d := range c.cfg.BackfillDelays {
			c.schedule = append(c.schedule, backfillRun{at: now.Add(d), n: i + 1})
		}
		c.owed, c.firstPending = true, true
	}
	c.changedLocked()
	c.mu.Unlock()
	c.log.InfoContext(ctx, action, append(attrs, slog.Time("disconnected_at", from), slog.Time("cutoff", cutoff))...)
}

// RequestBackfill schedules one backfill run now, of the given chats or of
// every listed chat when none are given, looking back window (at most
// ReplayMax). It may lower the replay cutoff to now − window, never raise
// it. The run happens while the channel is online (a reconnect's runs
// replace it).
func (c *Coordinator) RequestBackfill(window time.Duration, chats ...channel.Chat) error {
	if !c.CanBackfill() {
		return ErrNoBackfill
	}
	if window <= 0 || window > c.cfg.ReplayMax {
		return fmt.Errorf("%w: %s (max %s)", ErrBackfillWindow, window, c.cfg.ReplayMax)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	if lower := now.Add(-window); lower.Before(c.cutoffLocked(now)) {
		c.cutoff = lower
	}
	r := backfillRun{at: now, window: window, chats: slices.Clone(chats)}
	// Keep the schedule ordered by due time, after runs due at the same time.
	if i := slices.IndexFunc(c.schedule, func(x backfillRun) bool { return x.at.After(now) }); i >= 0 {
		c.schedule = slices.Insert(c.schedule, i, r)
	} else {
		c.schedule = append(c.schedule, r)
	}
	c.changedLocked()
	return nil
}

// Run keeps the checkpoint (every CheckpointEvery while online, unless a
// backfill is running, due or owed), runs the scheduled backfills and the
// gap checks, all on the injected clock. It returns nil when ctx ends,
// after saving the checkpoint if the channel is online and no backfill is
// owed.
func (c *Coordinator) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.looping {
		c.mu.Unlock()
		return ErrCoordinatorRunning
	}
	c.looping = true
	started := c.started
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.looping = false
		c.mu.Unlock()
	}()
	if !started {
		if err := c.Start(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	nextCheckpoint := c.clk.Now().Add(c.cfg.CheckpointEvery)
	for ctx.Err() == nil {
		now := c.clk.Now()
		if !now.Before(nextCheckpoint) {
			c.checkpointTick(ctx)
			nextCheckpoint = now.Add(c.cfg.CheckpointEvery)
		}
		if c.runDueBackfill(ctx, now) || c.runDueGap(ctx, now) {
			continue
		}
		c.wait(ctx, nextCheckpoint)
	}
	c.mu.Lock()
	save := c.online && !c.debtLocked()
	now := c.clk.Now()
	c.mu.Unlock()
	if save {
		c.save(ctx, now)
	}
	return nil
}

// wait sleeps until the next due work, a change or the end of ctx.
func (c *Coordinator) wait(ctx context.Context, nextCheckpoint time.Time) {
	c.mu.Lock()
	deadline := nextCheckpoint
	if c.online {
		if len(c.schedule) > 0 && c.schedule[0].at.Before(deadline) {
			deadline = c.schedule[0].at
		}
		if !c.firstPending && c.hist != nil {
			for _, j := range c.gaps {
				if j.due.Before(deadline) {
					deadline = j.due
				}
			}
		}
	}
	t := c.clk.NewTimer(deadline.Sub(c.clk.Now()))
	c.waiting, c.waitGen, c.waitUntil = true, c.gen, deadline
	c.mu.Unlock()
	select {
	case <-t.C():
	case <-c.kick:
	case <-ctx.Done():
	}
	t.Stop()
	c.mu.Lock()
	c.waiting = false
	c.mu.Unlock()
}

// checkpointTick saves now as the checkpoint while online and no backfill
// is running, due or owed.
func (c *Coordinator) checkpointTick(ctx context.Context) {
	c.mu.Lock()
	if !c.online {
		c.mu.Unlock()
		return
	}
	now := c.clk.Now()
	c.lastSeen = now
	debt := c.debtLocked()
	c.mu.Unlock()
	if !debt {
		c.save(ctx, now)
	}
}

// save stores the checkpoint detached from ctx's cancellation.
func (c *Coordinator) save(ctx context.Context, at time.Time) {
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	if err := c.cfg.Checkpoints.SaveCheckpoint(sctx, c.cfg.Bot, at); err != nil {
		c.log.ErrorContext(ctx, "checkpoint_save_failed", slog.Time("at", at), slog.Any("error", err))
		return
	}
	c.log.DebugContext(ctx, "checkpoint_saved", slog.Time("at", at))
}

// runDueBackfill runs the first scheduled backfill if it is due and the
// channel is online, and reports whether it ran one.
func (c *Coordinator) runDueBackfill(ctx context.Context, now time.Time) bool {
	c.mu.Lock()
	if !c.online || len(c.schedule) == 0 || c.schedule[0].at.After(now) {
		c.mu.Unlock()
		return false
	}
	r := c.schedule[0]
	c.schedule = c.schedule[1:]
	c.running = true
	jctx, cancel := context.WithCancel(ctx)
	c.cancelJob = cancel
	p := runParams{run: r, cutoff: c.cutoffLocked(now), before: c.connectedAt, live: now.Add(-backfillLiveGrace)}
	epoch := c.epoch
	if r.n == 0 {
		p.floor = now.Add(-r.window)
	}
	c.mu.Unlock()

	c.backfill(jctx, p)
	interrupted := jctx.Err() != nil
	cancel()

	c.mu.Lock()
	c.running = false
	c.cancelJob = nil
	if r.n > 0 && epoch == c.epoch {
		c.firstPending = false // not if a new connection came meanwhile
	}
	c.owed = len(c.schedule) > 0 || (interrupted && c.owed)
	c.changedLocked()
	c.mu.Unlock()
	return true
}

// runParams are the fixed inputs of one backfill run.
type runParams struct {
	run    backfillRun
	cutoff time.Time
	// before is the reconnect time (for NewestStored); floor is a manual
	// run's watermark (now − window).
	before time.Time
	floor  time.Time
	// live: messages at or after it are left to the live path (see
	// backfillLiveGrace).
	live time.Time
}

// counts are a run's tallies.
type counts struct {
	sessions, fetched, known, skipped int
	enqueued, triggered, historyOnly  int
	stale, live                       int
}

func (n *counts) add(o counts) {
	n.fetched += o.fetched
	n.known += o.known
	n.skipped += o.skipped
	n.enqueued += o.enqueued
	n.triggered += o.triggered
	n.historyOnly += o.historyOnly
	n.stale += o.stale
	n.live += o.live
}

// backfill walks the listed chats one at a time. Per-session failures
// are collected and logged with backfill_failed; the next scheduled run
// retries them.
func (c *Coordinator) backfill(ctx context.Context, p runParams) {
	start := c.clk.Now()
	runAttrs := []any{slog.Int("run", p.run.n), slog.Bool("manual", p.run.n == 0), slog.Time("cutoff", p.cutoff)}
	chats := p.run.chats
	if chats == nil {
		var err error
		chats, err = c.lister.ListChats(ctx)
		if err != nil {
			c.log.WarnContext(ctx, "backfill_failed", append(runAttrs, slog.Any("error", fmt.Errorf("list chats: %w", err)))...)
			return
		}
	}
	if len(chats) > c.cfg.ContactsCap {
		chats = chats[:c.cfg.ContactsCap]
	}
	c.mu.Lock()
	botID := c.botID
	c.mu.Unlock()
	c.log.InfoContext(ctx, "backfill_started", append(runAttrs, slog.Int("sessions", len(chats)))...)

	var total counts
	var failed []string
	for _, chat := range chats {
		if ctx.Err() != nil {
			failed = append(failed, "interrupted: "+context.Cause(ctx).Error())
			break
		}
		if chat.Kind == channel.Private && botID != "" && chat.ID == botID {
			continue // the bot's own private chat
		}
		n, err := c.backfillSession(ctx, chat, p)
		total.sessions++
		total.add(n)
		if err != nil {
			failed = append(failed, chat.String()+": "+err.Error())
		}
	}
	attrs := append(runAttrs,
		slog.Int("sessions", total.sessions), slog.Int("fetched", total.fetched),
		slog.Int("known", total.known), slog.Int("skipped", total.skipped),
		slog.Int("enqueued", total.enqueued), slog.Int("triggered", total.triggered),
		slog.Int("history_only", total.historyOnly), slog.Int("stale", total.stale), slog.Int("live", total.live),
		slog.Duration("took", c.clk.Now().Sub(start)))
	if len(failed) > 0 {
		c.log.WarnContext(ctx, "backfill_failed", append(attrs, slog.Int("failed", len(failed)), slog.Any("errors", failed))...)
		return
	}
	c.log.InfoContext(ctx, "backfill_completed", attrs...)
}

// backfillSession pages one chat newest→older and enqueues its new
// messages. On an error nothing more of the session is enqueued.
func (c *Coordinator) backfillSession(ctx context.Context, chat channel.Chat, p runParams) (counts, error) {
	var (
		n       counts
		cursor  string
		cursors = map[string]bool{"": true}
		seen    = map[string]bool{}
		cands   []channel.Event
		mark    time.Time
		marked  bool
	)
	for {
		page, err := c.hist.FetchHistory(ctx, channel.HistoryQuery{Chat: chat, Cursor: cursor, Limit: c.cfg.PageSize})
		if err != nil {
			return n, fmt.Errorf("fetch history: %w", err)
		}
		evs := page.Events
		if room := c.cfg.SessionCap - n.fetched; len(evs) > room {
			evs = evs[:room]
		}
		n.fetched += len(evs)
		var oldest time.Time
		for _, raw := range evs {
			ev := c.fill(raw, chat, channel.SourceBackfill)
			if oldest.IsZero() || ev.Time.Before(oldest) {
				oldest = ev.Time
			}
			if !marked {
				if mark, err = c.watermark(ctx, &ev, p); err != nil {
					return n, err
				}
				marked = true
			}
			c.noteSeq(&ev)
			if c.skip(&ev) {
				n.skipped++
				continue
			}
			key := ev.Key()
			if seen[key] {
				continue
			}
			seen[key] = true
			known, err := c.cfg.Known(ctx, key)
			if err != nil {
				return n, fmt.Errorf("known %s: %w", key, err)
			}
			if known {
				n.known++
				continue
			}
			if !ev.Time.Before(p.live) {
				n.live++ // the live path delivers it
				continue
			}
			cands = append(cands, ev)
		}
		if len(page.Events) < c.cfg.PageSize || page.Next == "" || cursors[page.Next] ||
			n.fetched >= c.cfg.SessionCap || (!oldest.IsZero() && oldest.Before(mark)) {
			break
		}
		cursors[page.Next] = true
		cursor = page.Next
	}
	return n, c.admit(ctx, cands, p.cutoff, &n)
}

// watermark is where paging stops for ev's session: a manual run's floor,
// or the newest stored event before the reconnect minus the overlap, never
// below the cutoff.
func (c *Coordinator) watermark(ctx context.Context, ev *channel.Event, p runParams) (time.Time, error) {
	if p.run.n == 0 {
		return p.floor, nil
	}
	if c.cfg.NewestStored == nil {
		return p.cutoff, nil
	}
	key := channel.SessionKey(c.cfg.Profile, ev.Platform, ev.BotID, ev.Chat)
	t, ok, err := c.cfg.NewestStored(ctx, key, p.before)
	if err != nil {
		return time.Time{}, fmt.Errorf("newest stored of %s: %w", key, err)
	}
	if !ok {
		return p.cutoff, nil
	}
	if mark := t.Add(-c.cfg.WatermarkOverlap); mark.After(p.cutoff) {
		return mark, nil
	}
	return p.cutoff, nil
}

// fill completes a fetched event with what the adapter may have left out
// and marks its source.
func (c *Coordinator) fill(ev channel.Event, chat channel.Chat, src channel.Source) channel.Event {
	if ev.Platform == "" {
		ev.Platform = c.cfg.Channel.Name()
	}
	if ev.BotID == "" {
		c.mu.Lock()
		ev.BotID = c.botID
		c.mu.Unlock()
	}
	if ev.Chat == (channel.Chat{}) {
		ev.Chat = chat
	}
	if ev.Kind == "" {
		ev.Kind = channel.KindMessage
	}
	if ev.Profile == "" {
		ev.Profile = c.cfg.Profile
	}
	ev.Source = src
	return ev
}

// skip reports whether a fetched event is not backfilled: the bot's own
// messages, notices and malformed events.
func (c *Coordinator) skip(ev *channel.Event) bool {
	if ev.Kind != channel.KindMessage || ev.Sender.ID == ev.BotID {
		return true
	}
	return ev.Validate() != nil
}

// admit applies the backfill rules to a session's new messages and
// enqueues them, oldest first: older than the cutoff → queued normally (the
// worker completes them ignored_stale); of the rest, the newest
// TriggerLimit that would trigger directly → queued normally; everything
// else → history only.
func (c *Coordinator) admit(ctx context.Context, cands []channel.Event, cutoff time.Time, n *counts) error {
	slices.SortStableFunc(cands, func(a, b channel.Event) int {
		if x := b.Time.Compare(a.Time); x != 0 {
			return x
		}
		return cmp.Compare(b.Seq, a.Seq)
	})
	historyOnly := make([]bool, len(cands))
	triggered := 0
	for i := range cands {
		ev := &cands[i]
		switch {
		case ev.Time.Before(cutoff):
			n.stale++
		case triggered < c.cfg.TriggerLimit && c.cfg.Direct(ev):
			triggered++
			n.triggered++
		default:
			historyOnly[i] = true
			n.historyOnly++
		}
	}
	for i := len(cands) - 1; i >= 0; i-- {
		if err := c.cfg.Enqueue(ctx, cands[i], historyOnly[i]); err != nil {
			return fmt.Errorf("enqueue %s: %w", cands[i].Key(), err)
		}
		n.enqueued++
	}
	return nil
}
