package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Defaults of Options.
const (
	// DefaultRetry is how often a follower tries to take the connection
	// over.
	DefaultRetry = time.Second
	// DefaultPendingTimeout is how long a relayed send or call
	// may wait for the holder to take it before the follower withdraws
	// it.
	DefaultPendingTimeout = 30 * time.Second
	// DefaultKeep is how long finished relayed sends are kept (a send
	// asked again within it is answered from its row).
	DefaultKeep = time.Hour
)

const (
	// recheckEvery is how often a waiting follower reads its request
	// again, in case a notification was lost.
	recheckEvery = time.Second
	// relayBatch is the most requests the holder claims at once.
	relayBatch = 16
	// relayParallel is the most relayed requests the holder serves at
	// once.
	relayParallel = 8
	// pruneEvery is how often the holder deletes old finished requests.
	pruneEvery = time.Minute
	// finishTimeout bounds the recording of a relayed request and of its
	// outcome.
	finishTimeout = 10 * time.Second
)

// Options configures Share. Every zero field means the documented
// default.
type Options struct {
	// Name identifies the connection: the same in every process that
	// runs it and different for different connections (default
	// ch.Name()).
	Name string
	// Retry is how often a process that does not hold the connection
	// tries to take it over (default DefaultRetry). Takeover after the
	// holder died takes about this long.
	Retry time.Duration
	// PendingTimeout is how long a relayed send or call may wait
	// for the holder to take it (default DefaultPendingTimeout); after
	// that it is withdrawn and fails with channel.ErrOffline.
	PendingTimeout time.Duration
	// Keep is how long the holder keeps finished relayed sends (default
	// DefaultKeep); finished calls go after ReadKeep, or Keep
	// when that is shorter.
	Keep time.Duration
	// Clock times the retries and the waits (nil = clock.Real).
	Clock clock.Clock
	// Logger receives the holds taken and lost and background errors (nil
	// = slog.Default()).
	Logger *slog.Logger
}

// Share returns a channel that runs ch in one process at a time among
// all the processes sharing st, and relays the sends of the others to
// that one (see the package doc). ch itself is returned when st is nil or
// ch is channel.Shareable (several processes may run it at once, so
// there is nothing to coordinate).
//
// The returned channel is a channel.Forwarder (its Unwrap is ch): it
// implements every optional capability the holder can be asked for
// (channel.HistoryFetcher, ChatLister, MemberLookup, MediaFetcher, Typer,
// Recaller, RequestResponder and ForwardSender), and channel.As finds
// each of them only when ch has it (found with channel.As too). In the
// holder a capability is ch's own; in the others it is relayed to the
// holder like a send. The capabilities that need no connection
// (channel.TextLimiter, AccountRisk, ...) are ch's, found through Unwrap.
func Share(ch channel.Channel, st Store, opt Options) channel.Channel {
	if ch == nil || st == nil {
		return ch
	}
	if s, ok := channel.As[channel.Shareable](ch); ok && s.Shareable() {
		return ch
	}
	if opt.Name == "" {
		opt.Name = ch.Name()
	}
	if opt.Retry <= 0 {
		opt.Retry = DefaultRetry
	}
	if opt.PendingTimeout <= 0 {
		opt.PendingTimeout = DefaultPendingTimeout
	}
	if opt.Keep <= 0 {
		opt.Keep = DefaultKeep
	}
	opt.Clock = clock.OrReal(opt.Clock)
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	return &shared{ch: ch, st: st, opt: opt, log: opt.Logger.With("cluster_name", opt.Name),
		waiters: map[int64]map[chan struct{}]struct{}{}}
}

// shared is the channel Share returns. It implements the capabilities
// as a channel.Forwarder (see capabilities.go).
type shared struct {
	ch  channel.Channel
	st  Store
	opt Options
	log *slog.Logger

	// holding is set while this process holds the connection: Send and
	// the capabilities then go to ch directly.
	holding atomic.Bool

	watchOnce sync.Once
	mu        sync.Mutex
	waiters   map[int64]map[chan struct{}]struct{} // followers waiting for a request's outcome
}

// Name returns the wrapped channel's name.
func (s *shared) Name() string { return s.ch.Name() }

// Unwrap returns the wrapped channel.
func (s *shared) Unwrap() channel.Channel { return s.ch }

// Send sends through the wrapped channel when this process holds the
// connection, else through the holder.
func (s *shared) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	if s.holding.Load() {
		return s.ch.Send(ctx, out)
	}
	res, err := s.request(ctx, "send", func(ctx context.Context, opt RequestOptions) (Result, error) {
		return s.st.Request(ctx, s.opt.Name, out, opt)
	})
	switch {
	case errors.Is(err, ErrUnknownRequest):
		return channel.Receipt{}, fmt.Errorf("cluster: %s: the relayed send disappeared: %w", s.opt.Name, channel.ErrUnconfirmed)
	case err != nil:
		return channel.Receipt{}, err
	}
	return s.outcome(res)
}

// Run takes turns holding the connection with the other processes until
// ctx ends or the wrapped channel's Run fails for good.
func (s *shared) Run(ctx context.Context, sink channel.Sink) error {
	rep := &reporter{sink: sink}
	stateWake := make(chan struct{}, 1)
	stop := s.st.WatchState(func(name string) {
		if name == "" || name == s.opt.Name {
			poke(stateWake)
		}
	})
	defer stop()
	var lastErr string
	yield := false // the hold was just lost: let the others try first
	for {
		if ctx.Err() != nil {
			s.stopped(ctx, rep)
			return nil
		}
		var h Holding
		var err error
		if !yield {
			h, err = s.st.TryHold(ctx, s.opt.Name)
		}
		yield = false
		switch {
		case err != nil:
			if ctx.Err() == nil && err.Error() != lastErr {
				s.log.Warn("cluster: cannot try to hold the connection", "err", err)
			}
			lastErr = err.Error()
		case h != nil:
			lastErr = ""
			if done, err := s.lead(ctx, h, rep); done {
				s.stopped(ctx, rep)
				return err
			}
			yield = true
			continue
		default:
			lastErr = ""
		}
		s.follow(ctx, rep)
		t := s.opt.Clock.NewTimer(s.opt.Retry)
	wait:
		for {
			select {
			case <-ctx.Done():
				break wait
			case <-t.C():
				break wait
			case <-stateWake:
				s.follow(ctx, rep)
			}
		}
		t.Stop()
	}
}

// stopped reports the connection down as Run returns.
func (s *shared) stopped(ctx context.Context, rep *reporter) {
	st := rep.lastState()
	st.Platform = cmp.Or(st.Platform, s.ch.Name())
	st.Connected, st.Online, st.Reason = false, false, "stopped"
	rep.report(context.WithoutCancel(ctx), st, false)
}

// follow reports the holder's published state to the sink.
func (s *shared) follow(ctx context.Context, rep *reporter) {
	last := rep.lastState()
	out := channel.State{Platform: cmp.Or(last.Platform, s.ch.Name()), BotID: last.BotID}
	status, err := s.st.LoadState(ctx, s.opt.Name)
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("cluster: cannot read the holder's state", "err", err)
		out.Reason = "the shared store is unreachable"
	case !status.Held:
		out.Platform = cmp.Or(status.State.Platform, out.Platform)
		out.BotID = cmp.Or(status.State.BotID, out.BotID)
		out.Reason = "no process holds the connection"
	default:
		out.Platform = cmp.Or(status.State.Platform, out.Platform)
		out.BotID = cmp.Or(status.State.BotID, out.BotID)
		out.Connected = status.State.Connected
		out.Online = status.State.Connected && status.State.Online
		out.Reason = "held by another process"
		if status.State.Reason != "" {
			out.Reason += ": " + status.State.Reason
		}
	}
	rep.report(ctx, out, false)
}

// lead runs the connection while h lasts. done is true when Run must
// return (with err): ctx ended or the wrapped Run ended on its own.
func (s *shared) lead(ctx context.Context, h Holding, rep *reporter) (done bool, err error) {
	s.holding.Store(true)
	s.log.Info("cluster: this process holds the connection now")
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	pub := newPublisher()
	hs := &holderSink{rep: rep, pub: pub, online: make(chan struct{}, 1)}

	var wg sync.WaitGroup
	wg.Go(func() { pub.run(runCtx, h, s) })
	wg.Go(func() { s.serveRelay(runCtx, h, hs) })
	runDone := make(chan error, 1)
	go func() { runDone <- s.ch.Run(runCtx, hs) }()

	ended := false
	var runErr error
	select {
	case <-ctx.Done():
	case <-h.Lost():
	case runErr = <-runDone:
		ended = true
	}
	s.holding.Store(false)
	cancel()
	if !ended {
		runErr = <-runDone
	}
	wg.Wait()
	lost := false
	select {
	case <-h.Lost():
		lost = !ended && ctx.Err() == nil
	default:
	}
	if err := h.Release(); err != nil && !lost {
		s.log.Warn("cluster: releasing the hold", "err", err)
	}
	st := rep.lastState()
	st.Platform = cmp.Or(st.Platform, s.ch.Name())
	st.Connected, st.Online = false, false
	st.Reason = "this process no longer holds the connection"
	rep.report(context.WithoutCancel(ctx), st, false)
	switch {
	case ctx.Err() != nil:
		s.log.Info("cluster: stopped holding the connection")
		return true, nil
	case ended:
		s.log.Info("cluster: the channel stopped; giving the hold up", "err", runErr)
		return true, runErr
	}
	s.log.Warn("cluster: the hold was lost; following")
	return false, nil
}

// holderSink is the sink the wrapped channel runs with while this process
// holds it: events go to the pipeline's sink, and every state also to
// the other processes.
type holderSink struct {
	rep    *reporter
	pub    *publisher
	live   atomic.Bool   // the last state was connected and online
	online chan struct{} // poked when it became so
}

func (hs *holderSink) HandleEvent(ctx context.Context, ev channel.Event) error {
	return hs.rep.sink.HandleEvent(ctx, ev)
}

func (hs *holderSink) ReportState(ctx context.Context, st channel.State) {
	live := st.Connected && st.Online
	if hs.live.Swap(live) != live && live {
		poke(hs.online)
	}
	hs.pub.set(st)
	hs.rep.report(ctx, st, true)
}

// publisher publishes the holder's latest state; older ones that were
// not published yet are skipped.
type publisher struct {
	mu     sync.Mutex
	latest *channel.State
	wake   chan struct{}
}

func newPublisher() *publisher { return &publisher{wake: make(chan struct{}, 1)} }

func (p *publisher) set(st channel.State) {
	p.mu.Lock()
	p.latest = &st
	p.mu.Unlock()
	poke(p.wake)
}

func (p *publisher) run(ctx context.Context, h Holding, s *shared) {
	var retry <-chan time.Time
	var t clock.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-retry:
		}
		p.mu.Lock()
		st := p.latest
		p.latest = nil
		p.mu.Unlock()
		if st == nil {
			continue
		}
		if err := h.PublishState(ctx, *st); err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrLost) {
				return
			}
			s.log.Warn("cluster: cannot publish the connection's state; retrying", "err", err)
			p.mu.Lock()
			if p.latest == nil {
				p.latest = st
			}
			p.mu.Unlock()
			if t != nil {
				t.Stop()
			}
			t = s.opt.Clock.NewTimer(s.opt.Retry)
			retry = t.C()
		}
	}
}

// serveRelay sends (and reads), through the wrapped channel, what the
// other processes ask, while the channel is online, until ctx ends.
func (s *shared) serveRelay(ctx context.Context, h Holding, hs *holderSink) {
	wake := make(chan struct{}, 1)
	stop := s.st.WatchRequests(func(name string) {
		if name == "" || name == s.opt.Name {
			poke(wake)
		}
	})
	defer stop()
	sem := make(chan struct{}, relayParallel)
	var wg sync.WaitGroup
	defer wg.Wait()
	var lastPrune time.Time
	for {
		if ctx.Err() != nil {
			return
		}
		more := false
		if hs.live.Load() {
			reqs, err := h.Claim(ctx, relayBatch)
			if err != nil && ctx.Err() == nil && !errors.Is(err, ErrLost) {
				s.log.Warn("cluster: cannot claim relayed requests", "err", err)
			}
			for _, r := range reqs {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					s.relayed(ctx, h, r)
				})
			}
			more = len(reqs) == relayBatch
		}
		if now := s.opt.Clock.Now(); now.Sub(lastPrune) >= pruneEvery {
			lastPrune = now
			if err := h.Prune(ctx, s.opt.Keep); err != nil && ctx.Err() == nil {
				s.log.Warn("cluster: cannot delete old relayed requests", "err", err)
			}
		}
		if more {
			continue
		}
		t := s.opt.Clock.NewTimer(s.opt.Retry)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-hs.online:
		case <-t.C():
		}
		t.Stop()
	}
}

// relayed serves one relayed request (a send or a call) and records its
// outcome.
func (s *shared) relayed(ctx context.Context, h Holding, r Request) {
	finish := func(res Result) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		ok, err := h.Finish(fctx, r.ID, res)
		switch {
		case err != nil:
			s.log.Error("cluster: cannot record a relayed request's outcome", "id", r.ID, "kind", r.Kind, "status", res.Status, "err", err)
		case !ok:
			s.log.Warn("cluster: a relayed request was settled by another holder meanwhile", "id", r.ID, "kind", r.Kind, "status", res.Status)
		}
	}
	if ctx.Err() != nil || (!r.Deadline.IsZero() && !time.Now().Before(r.Deadline)) {
		finish(Result{Status: StatusCancelled}) // not sent
		return
	}
	sctx := ctx
	if !r.Deadline.IsZero() {
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadline(ctx, r.Deadline)
		defer cancel()
	}
	var res Result
	var err error
	switch r.Kind {
	case KindSend, "":
		res.Receipt, err = s.ch.Send(sctx, r.Out)
	default:
		res.Answer, res.Body, err = s.serveCall(sctx, r)
	}
	switch {
	case err == nil:
		res.Status = StatusDone
		finish(res)
	case sctx.Err() != nil:
		// Cut off (the hold ended, or the follower's deadline): the
		// platform may have the send.
		finish(Result{Status: StatusUnconfirmed})
	default:
		finish(Result{Status: StatusFailed, Error: RecordError(err)})
	}
}

// request asks the process that holds the connection to do something
// (what names it in errors): submit writes the request, and request waits
// for it to finish. It returns the finished request, or an error: fast,
// wrapping channel.ErrOffline, when no online process holds the
// connection; wrapping channel.ErrOffline too when the holder did not
// take the request within Options.PendingTimeout (it is withdrawn); the
// caller's ctx error when it ended first (a request still pending is
// withdrawn); ErrUnknownRequest when the request disappeared.
func (s *shared) request(ctx context.Context, what string, submit func(ctx context.Context, opt RequestOptions) (Result, error)) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	status, err := s.st.LoadState(ctx, s.opt.Name)
	switch {
	case err != nil:
		return Result{}, fmt.Errorf("cluster: %s: %w", s.opt.Name, err)
	case !status.Held:
		return Result{}, fmt.Errorf("cluster: %s: no process holds the connection: %w", s.opt.Name, channel.ErrOffline)
	case !status.State.Connected || !status.State.Online:
		return Result{}, fmt.Errorf("cluster: %s: the holding process is not online (%s): %w",
			s.opt.Name, cmp.Or(status.State.Reason, "no state yet"), channel.ErrOffline)
	}
	s.watchOnce.Do(func() {
		s.st.WatchResults(s.wakeWaiters) // for the life of the process
	})
	opt := RequestOptions{Pending: s.opt.PendingTimeout}
	if dl, ok := ctx.Deadline(); ok {
		opt.Deadline = dl
	}
	// The request is written whatever happens to ctx meanwhile, so that
	// a request written as ctx ended is withdrawn below rather than left
	// for the holder.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	res, err := submit(rctx, opt)
	cancel()
	if err != nil {
		return Result{}, fmt.Errorf("cluster: %s: %w", s.opt.Name, err)
	}
	if res.Status.Final() {
		return res, nil
	}
	id := res.ID
	if ctx.Err() != nil {
		return s.giveUp(ctx, id, what)
	}
	wake := s.await(id)
	defer s.unawait(id, wake)
	pending := s.opt.Clock.NewTimer(s.opt.PendingTimeout)
	defer pending.Stop()
	pendingC := pending.C()
	// Read again now that a notification cannot be missed.
	bg := context.WithoutCancel(ctx)
	res, err = s.st.Result(bg, id)
	for {
		switch {
		case errors.Is(err, ErrUnknownRequest):
			return Result{}, ErrUnknownRequest
		case err != nil:
			s.log.Warn("cluster: cannot read a relayed request's outcome; waiting", "id", id, "what", what, "err", err)
		case res.Status.Final():
			return res, nil
		}
		recheck := s.opt.Clock.NewTimer(recheckEvery)
		select {
		case <-ctx.Done():
			recheck.Stop()
			return s.giveUp(ctx, id, what)
		case <-wake:
		case <-recheck.C():
		case <-pendingC:
			pendingC = nil
			if ok, werr := s.st.Withdraw(bg, id); werr == nil && ok {
				recheck.Stop()
				return Result{}, fmt.Errorf("cluster: %s: the holding process did not take the %s within %s: %w",
					s.opt.Name, what, s.opt.PendingTimeout, channel.ErrOffline)
			}
		}
		recheck.Stop()
		res, err = s.st.Result(bg, id)
	}
}

// giveUp ends a relayed request whose caller's ctx ended: a request still
// pending is withdrawn (never served later); one the holder finished
// meanwhile gives its outcome.
func (s *shared) giveUp(ctx context.Context, id int64, what string) (Result, error) {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if ok, err := s.st.Withdraw(bg, id); err == nil && !ok {
		if res, err := s.st.Result(bg, id); err == nil && res.Status.Final() && res.Status != StatusCancelled {
			return res, nil
		}
	}
	return Result{}, fmt.Errorf("cluster: %s: relayed %s: %w", s.opt.Name, what, ctx.Err())
}

// outcome turns a finished request into Send's result.
func (s *shared) outcome(res Result) (channel.Receipt, error) {
	switch res.Status {
	case StatusDone:
		return res.Receipt, nil
	case StatusFailed:
		if err := res.Error.Err(); err != nil {
			return channel.Receipt{}, err
		}
		return channel.Receipt{}, fmt.Errorf("cluster: %s: the relayed send failed", s.opt.Name)
	case StatusUnconfirmed:
		return channel.Receipt{}, fmt.Errorf("cluster: %s: the holding process stopped while sending: %w", s.opt.Name, channel.ErrUnconfirmed)
	case StatusCancelled:
		return channel.Receipt{}, fmt.Errorf("cluster: %s: the relayed send was withdrawn before it was sent: %w", s.opt.Name, channel.ErrOffline)
	}
	return channel.Receipt{}, fmt.Errorf("cluster: %s: relayed send %d is %s", s.opt.Name, res.ID, res.Status)
}

// await registers a wait for request id's outcome.
func (s *shared) await(id int64) chan struct{} {
	c := make(chan struct{}, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.waiters[id]
	if m == nil {
		m = map[chan struct{}]struct{}{}
		s.waiters[id] = m
	}
	m[c] = struct{}{}
	return c
}

func (s *shared) unawait(id int64, c chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiters[id], c)
	if len(s.waiters[id]) == 0 {
		delete(s.waiters, id)
	}
}

// wakeWaiters wakes the waits for id (all of them for 0).
func (s *shared) wakeWaiters(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for wid, m := range s.waiters {
		if id == 0 || wid == id {
			for c := range m {
				poke(c)
			}
		}
	}
}

// reporter passes states to the pipeline's sink and remembers the last.
type reporter struct {
	sink channel.Sink
	mu   sync.Mutex
	last *channel.State
}

// report passes st on; unless force, only when it differs from the last
// one in what the pipeline acts on.
func (r *reporter) report(ctx context.Context, st channel.State, force bool) {
	r.mu.Lock()
	if !force && r.last != nil && r.last.Platform == st.Platform && r.last.BotID == st.BotID &&
		r.last.Connected == st.Connected && r.last.Online == st.Online {
		r.mu.Unlock()
		return
	}
	r.last = &st
	r.mu.Unlock()
	r.sink.ReportState(ctx, st)
}

func (r *reporter) lastState() channel.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		return channel.State{}
	}
	return *r.last
}

// poke wakes whoever waits on c without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
