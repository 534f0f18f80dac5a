package persona

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/cluster"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/media"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/route"
	"github.com/personakit/persona/schedule"
)

// Pipeline is a running bot: channels in, replies out, one durable record
// per message. Build it with New.
type Pipeline struct {
	opt      Options
	clk      clock.Clock
	log      *slog.Logger
	owned    Storage // the store New opened itself, if any
	closers  []io.Closer
	owner    string // lease owner prefix: process uuid
	gates    gate.Chain
	rules    *gate.Rules
	flags    gate.Flags // the store's flags behind one cache
	router   route.Router
	runner   agent.Runner
	reviewer outbound.Reviewer
	admit    gate.AdmissionPolicy
	identity route.Identity
	sender   outbound.Sender
	replayer *inbound.Replayer
	bursts   *bursts
	hold     *mediaHold
	// started is when New ran; heldAtStart the senders whose media-only
	// messages were waiting in the queue then (media assembly looks for
	// them in the history right after a start).
	started     time.Time
	heldAtStart map[string]bool
	// media fetches, caches and describes pictures and voice (nil: off);
	// vision: a vision model writes descriptions; attach: the chat
	// model's requests carry the pictures themselves.
	media          *media.Service
	vision, attach bool
	// bg tracks work a turn leaves running (describing its pictures);
	// bgCtx, Run's context, ends it. Run waits for it before it returns.
	bg    sync.WaitGroup
	bgCtx context.Context
	gen   *generation
	// scopes are the sessions' model-facing identities; model is the
	// aliasing boundary every model call goes through (nil without
	// Options.Model); exit is the way out every chunk takes.
	scopes *scopes
	model  agent.Model
	exit   *outbound.Exit
	// records lists the store's records (/status, /why, the event
	// center; nil when the queue cannot list them); facts is long-term
	// memory's store (nil when Memory is off).
	records inbound.RecordReader
	facts   memory.FactStore
	// sources are the pages each session read recently (nil without
	// Options.Web).
	sources *web.Sources
	// schedules holds the scheduled messages (nil: none); schedRunner
	// fires them while Run runs.
	schedules   schedule.Store
	schedRunner *schedule.Runner
	// listeners are told of every terminal record (the event centers).
	listenMu  sync.Mutex
	listeners []func(id string, o inbound.Outcome)
	// bypass names purposes whose calls skip the boundary: tests prove
	// with it that the privacy test notices a call site that would.
	bypass map[string]bool

	wake     chan struct{}
	replySem chan struct{}
	// isolation lets orphaned items run alone (see isolate).
	isolation sync.RWMutex
	// finishing bounds the turns whose worker is free again while their
	// bookkeeping write waits for its commit (see runTurn).
	finishing chan struct{}

	mu             sync.Mutex
	channels       map[string]*chanState // by "<platform>/<bot id>" and by platform
	states         []*chanState          // every channel once, in registration order
	checkpointKeys []string
	cutoff         time.Time // for events of channels the pipeline does not run

	stats Stats
}

// chanState is one channel with its coordinator (readiness, checkpoints,
// replay cutoff, backfill and gap detection).
type chanState struct {
	ch    channel.Channel
	coord *inbound.Coordinator
	// run: one of Options.Channels, which Run runs (others are run by the
	// embedder, who got their Sink).
	run bool
}

// sameChannel reports whether a and b are the same channel. Channels of a
// type == cannot compare (a struct value holding a slice, or an interface
// holding one) are told apart by type and name instead of panicking.
func sameChannel(a, b channel.Channel) (same bool) {
	if reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	defer func() {
		if recover() != nil {
			same = a.Name() == b.Name()
		}
	}()
	return a == b
}

// Stats are counters of what HandleEvent saw, for monitoring.
type Stats struct {
	// Rejected counts malformed events refused by HandleEvent.
	Rejected atomic.Int64
	// Enqueued counts new queue items; Duplicates counts redeliveries.
	Enqueued   atomic.Int64
	Duplicates atomic.Int64
	// Journaled counts events written to the journal because the queue
	// could not be written.
	Journaled atomic.Int64
}

// New validates the options, opens the store (when DataDir is used) and
// returns a Pipeline ready to Run.
func New(opt Options) (*Pipeline, error) {
	if err := opt.applyDefaults(); err != nil {
		return nil, err
	}
	owned, err := opt.openStorage()
	if err != nil {
		return nil, err
	}
	p := &Pipeline{
		opt:       opt,
		clk:       opt.Clock,
		log:       opt.Logger,
		owned:     owned,
		owner:     uuid.NewString(),
		admit:     gate.AdmissionPolicy{Mode: opt.PrivateAdmission, Owners: opt.Owners, Allowlist: opt.PrivateAllowlist},
		identity:  route.Identity{Aliases: opt.Aliases, Owners: opt.Owners, Commands: publicCommands(opt.Commands)},
		bursts:    newBursts(),
		hold:      newMediaHold(),
		started:   opt.Clock.Now(),
		wake:      make(chan struct{}, 1),
		replySem:  make(chan struct{}, opt.ReplyConcurrency),
		finishing: make(chan struct{}, 4*opt.Workers),
		channels:  map[string]*chanState{},
	}
	if fj, ok := opt.Journal.(io.Closer); ok && opt.Journal != nil {
		p.closers = append(p.closers, fj)
	}
	p.scopes = newScopes(p)
	if opt.Model != nil {
		p.model = purposeModel{p: p, private: agent.Private(opt.Model, p.scopes)}
	}
	if err := p.mediaSetup(); err != nil {
		_ = p.Close()
		return nil, err
	}
	if err := p.buildStages(); err != nil {
		_ = p.Close()
		return nil, err
	}
	db := opt.DB
	if db == nil {
		db = owned
	}
	if w, ok := opt.Queue.(inbound.Waker); ok {
		// Another process enqueued or released something: wake the idle
		// workers here.
		p.closers = append(p.closers, closerFunc(w.OnClaimable(p.Wake)))
	}
	if err := p.buildGeneration(db); err != nil {
		_ = p.Close()
		return nil, err
	}
	if db != nil {
		p.records = db
		if opt.Memory {
			p.facts = db
		}
	} else if rr, ok := opt.Queue.(inbound.RecordReader); ok {
		p.records = rr
	}
	p.schedules = opt.Schedules
	if p.schedules == nil && db != nil {
		p.schedules = db
	}
	if p.schedRunner, err = p.newScheduleRunner(); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("persona: %w", err)
	}
	if opt.Web != nil {
		p.identity.ResolveLink = opt.Web.Resolvable
		p.sources = web.NewSources(p.clk, 0, 0)
	}
	if db != nil {
		hctx, cancel := context.WithTimeout(context.Background(), DefaultBookkeeping)
		p.heldAtStart, err = heldBefore(hctx, db, p.started)
		cancel()
		if err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("persona: list held media: %w", err)
		}
	}
	p.replayer = inbound.NewReplayer(opt.Journal, opt.Queue, inbound.ReplayOptions{
		Clock: opt.Clock, Logger: opt.Logger,
		OnReplayed: func(it inbound.Item, enqueued bool) {
			if enqueued {
				if it.Event.MediaOnly() && !it.HistoryOnly {
					p.hold.note(&it, p.clk.Now())
				}
				p.Wake()
			}
			// A journaled message means the store was unavailable for a
			// while: look for what else was missed in that chat.
			if st := p.channelFor(it.Event.Platform, it.Event.BotID); st != nil && st.coord.CanBackfill() {
				if err := st.coord.RequestBackfill(DefaultReplayMax, it.Event.Chat); err != nil {
					p.log.Warn("backfill after journal replay", "err", err)
				}
			}
		},
	})
	shared, _ := db.(cluster.Store)
	for i, ch := range opt.Channels {
		if shared != nil {
			// Several processes may share this store: a connection that
			// only one of them can hold is held by one at a time, and the
			// others send through it. The name is the same in every
			// process that runs the same configuration.
			ch = cluster.Share(ch, shared, cluster.Options{
				Name:   fmt.Sprintf("%s/%s#%d", opt.Profile, ch.Name(), i),
				Logger: p.log.With("channel", ch.Name()),
			})
		}
		st, err := p.register(ch, "")
		if err != nil {
			_ = p.Close()
			return nil, err
		}
		st.run = true
	}
	return p, nil
}

// buildStages fills in the default stages for the zero Options fields:
// the gate chain compiled from the policy, the model-rated router, the
// model-backed reviewer and the chunked sender with lanes. Every stage that
// keeps session state uses the same flag cache over the store.
func (p *Pipeline) buildStages() error {
	opt := &p.opt
	p.flags = gate.NewFlagCache(opt.Flags, gate.FlagCacheConfig{Clock: p.clk})
	p.router = opt.Router
	rules, err := gate.Compile(gate.Config{
		Policy: opt.Policy, Groups: opt.Groups, Flags: p.flags, Quota: gate.NewFlagQuota(p.flags),
		NoRouter: opt.Router == nil && (opt.NoRouter || opt.Model == nil), Clock: p.clk, Logger: p.log,
	})
	if err != nil {
		return fmt.Errorf("persona: %w", err)
	}
	p.rules = rules
	p.gates = opt.Gates
	if p.gates == nil {
		p.gates = rules.Chain()
	}
	if opt.WrapGates != nil {
		if p.gates = opt.WrapGates(p.gates); p.gates == nil {
			return errors.New("persona: Options.WrapGates returned nil")
		}
	}
	if p.router == nil && !opt.NoRouter && opt.Model != nil {
		r, err := route.New(route.Config{Model: p.model, Flags: p.flags, Settings: rules.ProactiveIn,
			Aliases: opt.Aliases, Clock: p.clk, Logger: p.log})
		if err != nil {
			return fmt.Errorf("persona: %w", err)
		}
		p.router = r
	}
	if opt.WrapRouter != nil && p.router != nil {
		if p.router = opt.WrapRouter(p.router); p.router == nil {
			return errors.New("persona: Options.WrapRouter returned nil")
		}
	}
	state := flagState{p.flags}
	p.reviewer = opt.Reviewer
	if p.reviewer == nil {
		if opt.Model == nil {
			p.reviewer = outbound.BasicReviewer
		} else {
			r, err := outbound.NewReviewer(outbound.ReviewConfig{Model: p.model, State: state, Clock: p.clk,
				Logger: p.log, AuditDisabled: opt.AuditDisabled})
			if err != nil {
				return fmt.Errorf("persona: %w", err)
			}
			p.reviewer = r
		}
	}
	if opt.WrapReviewer != nil {
		if p.reviewer = opt.WrapReviewer(p.reviewer); p.reviewer == nil {
			return errors.New("persona: Options.WrapReviewer returned nil")
		}
	}
	exit, err := outbound.NewExit(outbound.ExitConfig{Ledger: opt.Ledger, Secrets: opt.Secrets, Delivered: p.echo,
		Echoed: p.echoed, Clock: p.clk, Logger: p.log})
	if err != nil {
		return fmt.Errorf("persona: %w", err)
	}
	p.exit = exit
	p.sender = opt.Sender
	if p.sender == nil {
		lanes, err := outbound.NewLanes(outbound.LanesConfig{State: state, Clock: p.clk, Logger: p.log})
		if err != nil {
			return fmt.Errorf("persona: %w", err)
		}
		s, err := outbound.NewSender(outbound.SenderConfig{
			Ledger: opt.Ledger, Clock: p.clk, NoPacing: opt.NoPacing, Logger: p.log,
			Compressor: p.model, Secrets: opt.Secrets, Lanes: lanes,
			// No State: the review dates the bot's last message from the
			// transcript (Proposal.LastBotMessage), where afterSend puts
			// every sent chunk; recording it in a state row as well cost a
			// write per reply.
		})
		if err != nil {
			return fmt.Errorf("persona: %w", err)
		}
		p.sender = s
	}
	if opt.WrapSender != nil {
		if p.sender = opt.WrapSender(p.sender); p.sender == nil {
			return errors.New("persona: Options.WrapSender returned nil")
		}
	}
	return nil
}

// flagState adapts the session flags to outbound's state port; the two
// describe the same rows (the review opens stop windows and pauses that the
// gates read).
type flagState struct{ f gate.Flags }

func (s flagState) GetState(ctx context.Context, sessionKey, subject, name string) (outbound.State, bool, error) {
	f, ok, err := s.f.GetFlag(ctx, sessionKey, subject, name)
	return outbound.State{SessionKey: f.SessionKey, Subject: f.Subject, Name: f.Name, Until: f.Until, Value: f.Value}, ok, err
}

func (s flagState) SetState(ctx context.Context, st outbound.State) error {
	return s.f.SetFlag(ctx, gate.Flag{SessionKey: st.SessionKey, Subject: st.Subject, Name: st.Name, Until: st.Until, Value: st.Value})
}

// Close releases what New opened (the store and journal it opened itself).
// Call it after Run returned.
func (p *Pipeline) Close() error {
	var errs []error
	for _, c := range p.closers {
		errs = append(errs, c.Close())
	}
	if p.owned != nil {
		errs = append(errs, p.owned.Close())
	}
	return errors.Join(errs...)
}

// Stats returns the pipeline's counters.
func (p *Pipeline) Stats() *Stats { return &p.stats }

// Lookup returns the record of one inbound message by its item id (the
// event's Key()).
func (p *Pipeline) Lookup(ctx context.Context, id string) (inbound.Record, error) {
	return p.opt.Queue.Lookup(ctx, id)
}

// Wake makes the dispatcher look for claimable work now.
func (p *Pipeline) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// register records a channel (once) with its coordinator, and the bot id it
// serves once known.
func (p *Pipeline) register(ch channel.Channel, botID string) (*chanState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var st *chanState
	for _, x := range p.states {
		if sameChannel(x.ch, ch) {
			st = x
		}
	}
	if st == nil {
		key := p.opt.Profile + "/" + ch.Name()
		for n := 2; p.hasCheckpointKeyLocked(key); n++ {
			key = fmt.Sprintf("%s/%s#%d", p.opt.Profile, ch.Name(), n)
		}
		coord, err := inbound.NewCoordinator(inbound.CoordinatorConfig{
			Bot: key, Profile: p.opt.Profile, Channel: ch, Checkpoints: p.opt.Checkpoints,
			Known:        p.known,
			Direct:       func(ev *channel.Event) bool { return route.Classify(ev, p.identity, p.opt.Triggers) != "" },
			Enqueue:      p.enqueueFetched,
			NewestStored: p.newestStored(),
			Clock:        p.clk, Logger: p.log.With("channel", ch.Name()),
		})
		if err != nil {
			return nil, fmt.Errorf("persona: channel %s: %w", ch.Name(), err)
		}
		st = &chanState{ch: ch, coord: coord}
		p.states = append(p.states, st)
		p.checkpointKeys = append(p.checkpointKeys, key)
	}
	if _, ok := p.channels[ch.Name()]; !ok {
		p.channels[ch.Name()] = st
	}
	if botID != "" {
		p.channels[ch.Name()+"/"+botID] = st
	}
	return st, nil
}

func (p *Pipeline) hasCheckpointKeyLocked(key string) bool {
	for _, k := range p.checkpointKeys {
		if k == key {
			return true
		}
	}
	return false
}

// known reports whether a fetched message is already queued or recorded.
func (p *Pipeline) known(ctx context.Context, key string) (bool, error) {
	_, err := p.opt.Queue.Lookup(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, inbound.ErrNotFound):
		return false, nil
	}
	return false, err
}

// newestStored returns the store's per-session watermark query, if the
// history store has one.
func (p *Pipeline) newestStored() func(context.Context, string, time.Time) (time.Time, bool, error) {
	if n, ok := p.opt.History.(interface {
		NewestSessionEventTime(context.Context, string, time.Time) (time.Time, bool, error)
	}); ok {
		return n.NewestSessionEventTime
	}
	return nil
}

// channelFor finds the channel that serves a platform and bot.
func (p *Pipeline) channelFor(platform, botID string) *chanState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.channels[platform+"/"+botID]; st != nil {
		return st
	}
	return p.channels[platform]
}

// anyReady reports whether some channel is ready for work (connected and
// online). Without channels (events arrive through HandleEvent only) the
// pipeline is always ready.
func (p *Pipeline) anyReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.states) == 0 {
		return true
	}
	for _, st := range p.states {
		if st.coord.Ready() {
			return true
		}
	}
	return false
}

// sink is the channel.Sink a channel gets from Run.
type sink struct {
	p  *Pipeline
	st *chanState
}

func (s sink) HandleEvent(ctx context.Context, ev channel.Event) error {
	if ev.Platform == "" {
		ev.Platform = s.st.ch.Name()
	}
	if ev.BotID != "" {
		if _, err := s.p.register(s.st.ch, ev.BotID); err != nil {
			return err
		}
	}
	return s.p.HandleEvent(ctx, ev)
}

// ReportState hands the channel's health to its coordinator; claiming for
// the channel resumes once it is connected and online.
func (s sink) ReportState(ctx context.Context, st channel.State) {
	if st.BotID != "" {
		_, _ = s.p.register(s.st.ch, st.BotID)
	}
	s.st.coord.ReportState(ctx, st)
	if s.st.coord.Ready() {
		s.p.Wake()
	}
}

// Sink returns the channel.Sink for a channel that is not in
// Options.Channels (an embedder running its own adapter loop).
func (p *Pipeline) Sink(ch channel.Channel) (channel.Sink, error) {
	st, err := p.register(ch, "")
	if err != nil {
		return nil, err
	}
	return sink{p: p, st: st}, nil
}

// start prepares a run: expired leases, the journal, and each channel's
// coordinator (last checkpoint → replay cutoff).
func (p *Pipeline) start(ctx context.Context) error {
	if n, err := p.opt.Queue.ReleaseExpired(ctx); err != nil {
		return fmt.Errorf("persona: release expired leases: %w", err)
	} else if n > 0 {
		p.log.Info("released expired leases", "count", n)
	}
	if n, err := p.replayer.ReplayOnce(ctx); err != nil {
		p.log.Warn("journal replay incomplete; will retry", "replayed", n, "err", err)
	}
	p.mu.Lock()
	states := slices.Clone(p.states)
	p.cutoff = p.clk.Now().Add(-DefaultReplayMax)
	p.mu.Unlock()
	for _, st := range states {
		if err := st.coord.Start(ctx); err != nil {
			return fmt.Errorf("persona: channel %s: %w", st.ch.Name(), err)
		}
	}
	return nil
}

// replayCutoff is the cutoff for an event: its channel's coordinator's, or
// now − 24 h for events of channels the pipeline does not run.
func (p *Pipeline) replayCutoff(ev *channel.Event) time.Time {
	if st := p.channelFor(ev.Platform, ev.BotID); st != nil {
		return st.coord.Cutoff()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cutoff
}

// Run starts the channels, the journal replayer, the checkpoint loop and the
// workers, and blocks until ctx ends. Running turns are cancelled with ctx
// and their leases given back without charging an attempt.
func (p *Pipeline) Run(ctx context.Context) error {
	if err := p.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	p.mu.Lock()
	states := slices.Clone(p.states)
	p.mu.Unlock()
	for _, st := range states {
		g.Go(func() error { return st.coord.Run(gctx) })
		if !st.run {
			continue // run by the embedder, who got its Sink
		}
		g.Go(func() error {
			err := st.ch.Run(gctx, sink{p: p, st: st})
			if err != nil && gctx.Err() == nil {
				return fmt.Errorf("persona: channel %s: %w", st.ch.Name(), err)
			}
			return nil
		})
	}
	g.Go(func() error { return p.replayer.Run(gctx) })
	if r := p.schedRunner; r != nil {
		g.Go(func() error {
			if err := r.Run(gctx); gctx.Err() == nil {
				return err
			}
			return nil
		})
	}
	g.Go(func() error { return p.runMemory(gctx) })
	if p.media != nil {
		g.Go(func() error { return p.media.Cache().Run(gctx) })
	}
	p.bgCtx = gctx
	g.Go(func() error { p.dispatch(gctx); return nil })
	err := g.Wait()
	// Work a turn left running (describing its pictures) ends with gctx.
	p.bg.Wait()
	if ctx.Err() != nil && err == nil {
		return nil
	}
	return err
}

// dispatch runs the workers and keeps them fed. Options.Workers goroutines
// take leases from a buffer of the same size; the dispatcher claims ahead
// into that buffer, so a worker that finishes a turn starts the next one
// at once instead of waiting for a claim to commit. It sleeps on the wake
// signal, a worker taking a lease or the claim poll, never on a busy
// loop. While there is a backlog (the last claim filled the buffer) it
// waits until half the buffer is free before claiming again, so one claim
// write serves several turns. A lease claimed ahead counts against its
// session's in-flight limit like a running turn; at shutdown the ones not
// started are released.
func (p *Pipeline) dispatch(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	ahead := make(chan inbound.Lease, p.opt.Workers)
	took := make(chan struct{}, 1)
	for range p.opt.Workers {
		wg.Go(func() {
			for l := range ahead {
				select {
				case took <- struct{}{}:
				default:
				}
				if ctx.Err() != nil {
					p.release(l)
					continue
				}
				done := p.isolate(l)
				if !p.freshen(ctx, &l) {
					done()
					continue
				}
				p.runTurn(ctx, l, &wg)
				done()
			}
		})
	}
	defer close(ahead)
	backlog := false
	batch := max(1, p.opt.Workers/2)
	for ctx.Err() == nil {
		room := cap(ahead) - len(ahead)
		if room > 0 && (!backlog || room >= batch) && p.anyReady() {
			leases, err := p.opt.Queue.Claim(ctx, inbound.Limits{
				Max: room, PerGroup: p.opt.PerGroup, PerPrivate: p.opt.PerPrivate,
				Lease: p.opt.Lease, Owner: p.owner,
				// Claims are held in memory while they wait in the
				// claim-ahead buffer and stored (the attempt counted) by
				// freshen right before the turn runs: a process that dies
				// charges its attempt to the turns it was running, never to
				// the ones only waiting, and a message that kills it in a
				// stage has every such attempt counted.
				HoldBelow: math.MaxInt,
			})
			if err != nil && ctx.Err() == nil {
				p.log.Error("claim failed", "err", err)
			}
			for _, l := range leases {
				ahead <- l // never blocks: only this loop sends, and room was free
			}
			backlog = err == nil && len(leases) == room
			if backlog {
				// Maybe more work: wait only for room.
				select {
				case <-took:
				case <-ctx.Done():
				}
				continue
			}
		} else if backlog && room < cap(ahead) {
			select {
			case <-took:
			case <-ctx.Done():
			}
			continue
		}
		t := p.clk.NewTimer(p.opt.ClaimPoll)
		select {
		case <-p.wake:
		case <-took:
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// isolate lets a turn run: an orphaned item (its last attempt died with
// the process, inbound.Lease.Orphaned) runs alone, with no other turn
// beside it, so that if it is the message that kills the process, the
// death is charged to it only; other turns run side by side. It returns
// the function that ends the turn's claim on the workers.
func (p *Pipeline) isolate(l inbound.Lease) func() {
	if l.Orphaned {
		p.isolation.Lock()
		return p.isolation.Unlock
	}
	p.isolation.RLock()
	return p.isolation.RUnlock
}

// freshen stores a held claim (the attempt is counted here, right before
// any stage runs) and renews a lease that waited in the claim-ahead buffer
// (every worker was busy with long turns) unless it has more than half its
// length left and more than 1.5 × RenewEvery, so the turn never starts on
// a lease that could expire before its first heartbeat renews it (another
// claim could then take it over). It reports false when the lease is
// already lost or its claim could not be stored (the item is then given
// back to the queue as it was).
func (p *Pipeline) freshen(ctx context.Context, l *inbound.Lease) bool {
	if l.Held {
		act, ok := p.storeHeld(ctx, l)
		if !ok {
			if act.kind != actAbandon {
				p.log.Warn("storing a claim failed; the item goes back to the queue", "id", l.ID, "err", act.err)
				p.release(*l)
			}
			return false
		}
		return true
	}
	if l.Until.Sub(p.clk.Now()) > max(p.opt.Lease/2, p.opt.RenewEvery*3/2) {
		return true
	}
	err := p.opt.Queue.Extend(ctx, l, p.opt.Lease)
	switch {
	case errors.Is(err, inbound.ErrLeaseLost):
		p.log.Warn("lease lost while waiting for a worker", "id", l.ID)
		return false
	case err != nil:
		p.log.Warn("lease renewal failed", "id", l.ID, "err", err)
	}
	return true
}

// release gives back a lease claimed ahead that no turn will run.
func (p *Pipeline) release(l inbound.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultBookkeeping)
	defer cancel()
	if err := p.opt.Queue.Release(ctx, l); err != nil {
		p.log.Warn("release failed", "id", l.ID, "err", err)
	}
}
