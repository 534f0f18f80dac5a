package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/agent/openai"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/route"
)

// Simulation pacing: when a message has no outcome after quietPeriod of
// real time and no model call is running, the clock moves by clockStep;
// after maxWait of simulated time the run gives up on the message.
const (
	quietPeriod = 20 * time.Millisecond
	clockStep   = time.Second
	maxWait     = 6 * time.Hour
)

// HistoryOutcome is the pseudo-outcome of the bot's own lines.
const HistoryOutcome = "history"

// defaultPersona is used when PERSONA_SOUL is not set.
const defaultPersona = "You are a friendly regular in this group chat. You keep replies short and casual, " +
	"answer when someone talks to you, and join in only when you have something fitting to add."

// hooks are test seams of runWith.
type hooks struct {
	// model replaces the model from the environment (the router is then
	// on, as with an environment model).
	model agent.Model
}

// options are the parsed flags.
type options struct {
	in        string
	aliases   []string
	aliasMode route.AliasMode
	owners    []string
	level     gate.ChatLevel
	config    string
	verbose   bool
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty value")
	}
	*l = append(*l, strings.TrimSpace(s))
	return nil
}

const levelNames = "off, low, medium, high or no_limit"

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("groupsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var aliases, owners listFlag
	var level, mode string
	fs.StringVar(&o.in, "in", "", "the chat log, JSON Lines (default: standard input)")
	fs.Var(&aliases, "alias", "a name the bot answers to (repeatable)")
	fs.StringVar(&mode, "alias-mode", "", "how aliases match: loose, smart (default) or strict")
	fs.Var(&owners, "owner", "an owner account id (repeatable)")
	fs.StringVar(&level, "level", "", "the chat-in level: "+levelNames+" (default: the policy's, low)")
	fs.StringVar(&o.config, "config", "", "the reply policy, JSON (see go doc ./examples/groupsim)")
	fs.BoolVar(&o.verbose, "v", false, "log the pipeline's info records to standard error")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: groupsim [flags] [-in FILE]\n\nReplays a chat log (JSON Lines) through the persona pipeline offline.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (the log is given with -in FILE or on standard input)", fs.Arg(0))
	}
	o.aliases, o.owners = aliases, owners
	o.level = gate.ChatLevel(level)
	if level != "" && !o.level.Valid() {
		return o, fmt.Errorf("-level %q: want %s", level, levelNames)
	}
	o.aliasMode = route.AliasMode(mode)
	if !o.aliasMode.Valid() {
		return o, fmt.Errorf("-alias-mode %q: want loose, smart or strict", mode)
	}
	for _, id := range o.owners {
		if id == botID {
			return o, fmt.Errorf("-owner %q: that is the bot's own id", id)
		}
	}
	return o, nil
}

// result is one output line.
type result struct {
	ID       string   `json:"id"`
	Outcome  string   `json:"outcome"`
	Reason   string   `json:"reason,omitempty"`
	Directed string   `json:"directed,omitempty"`
	ChatIn   *float64 `json:"chat_in,omitempty"`
	Trigger  string   `json:"trigger,omitempty"`
	Reply    []string `json:"reply,omitempty"`
}

func runWith(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, h hooks) error {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	pol, err := loadConfig(o.config)
	if err != nil {
		return err
	}
	if o.level != "" {
		pol.bot.Proactive.ChatIn = o.level
	}
	in := stdin
	if o.in != "" && o.in != "-" {
		f, err := os.Open(o.in)
		if err != nil {
			return fmt.Errorf("-in: %w", err)
		}
		defer func() { _ = f.Close() }()
		in = f
	}
	msgs, err := readLog(in)
	if err != nil {
		if o.in != "" && o.in != "-" {
			return fmt.Errorf("%s: %w", o.in, err)
		}
		return err
	}
	for _, m := range msgs {
		if m.unresolved {
			fmt.Fprintf(stderr, "groupsim: line %d: reply_to %q names no earlier message of %s; kept as an unresolved quote\n",
				m.line, m.replyTo, m.event.Chat)
		}
	}
	soul := defaultPersona
	if path := getenv("PERSONA_SOUL"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read PERSONA_SOUL: %w", err)
		}
		soul = string(b)
	}
	model, online, desc, err := pickModel(getenv, h)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, "groupsim:", desc)
	s := &sim{opt: o, pol: pol, persona: soul, model: &busyModel{m: model}, online: online,
		out: json.NewEncoder(stdout), stderr: stderr}
	return s.run(ctx, msgs)
}

// pickModel returns the test model, the environment's model, or the
// offline model (online false), and a line that says which.
func pickModel(getenv func(string) string, h hooks) (agent.Model, bool, string, error) {
	if h.model != nil {
		return h.model, true, "model: the test's", nil
	}
	if cfg, ok := openai.FromEnv(getenv); ok {
		m, err := openai.New(cfg)
		if err != nil {
			return nil, false, "", fmt.Errorf("model from the environment: %w", err)
		}
		base := cfg.BaseURL
		if base == "" {
			base = "the OpenAI API"
		}
		return m, true, fmt.Sprintf("model: %s at %s (replies, router and review)", cfg.Model, base), nil
	}
	m := agenttest.New()
	m.Otherwise(agenttest.Func(offlineReply))
	return m, false, "no model configured: offline run (no router, so unprompted messages end at ignored_proactive_off; " +
		"fixed offline replies; -level has no effect)", nil
}

// OfflinePrefix starts every reply of the offline model.
const OfflinePrefix = "(offline reply) "

// offlineReply is the deterministic offline model: it only writes replies
// (the simulator turns the router and the audit off without a model).
func offlineReply(_ context.Context, req agent.Request) (*agent.Response, error) {
	if req.Purpose != agent.PurposeChat {
		return nil, fmt.Errorf("the offline model does not answer %q requests", req.Purpose)
	}
	current := ""
	for _, m := range req.Messages {
		if m.Role == agent.RoleUser && strings.HasPrefix(m.Content, "[current] ") {
			current = strings.TrimPrefix(m.Content, "[current] ")
		}
	}
	return &agent.Response{Text: OfflinePrefix + "to " + current, Model: "groupsim-offline", FinishReason: "stop"}, nil
}

// busyModel counts the model calls in flight, so the simulated clock stays
// put while a real model thinks (the router's budget runs on that clock).
type busyModel struct {
	m    agent.Model
	busy atomic.Int64
}

func (b *busyModel) Generate(ctx context.Context, req agent.Request) (*agent.Response, error) {
	b.busy.Add(1)
	defer b.busy.Add(-1)
	return b.m.Generate(ctx, req)
}

// sim is one replay.
type sim struct {
	opt     options
	pol     policy
	persona string
	model   *busyModel
	online  bool
	out     *json.Encoder
	stderr  io.Writer

	clk    *clock.Fake
	ch     *chantest.Channel
	routes *routeLog

	runErr error // what Run returned; read after its done channel closed

	mu       sync.Mutex
	waiting  map[string]chan inbound.Outcome // by item id
	outcomes map[string]inbound.Outcome
}

func (s *sim) run(ctx context.Context, msgs []message) (err error) {
	dir, err := os.MkdirTemp("", "groupsim-*")
	if err != nil {
		return fmt.Errorf("temporary store: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = fmt.Errorf("remove the temporary store: %w", rerr)
		}
	}()

	// Start at the earliest time of the log, so that no line is older
	// than the pipeline's replay cutoff (ignored_stale).
	start := msgs[0].event.Time
	for _, m := range msgs {
		if m.event.Time.Before(start) {
			start = m.event.Time
		}
	}
	s.clk = clock.NewFake(start)
	s.ch = chantest.New(chantest.Config{Platform: platform, BotID: botID, Clock: s.clk})
	s.waiting = map[string]chan inbound.Outcome{}
	s.outcomes = map[string]inbound.Outcome{}
	level := slog.LevelWarn
	if s.opt.verbose {
		level = slog.LevelInfo
	}
	s.routes = &routeLog{ratings: map[string]rating{}}
	logger := slog.New(&captureHandler{log: s.routes,
		next: slog.NewTextHandler(s.stderr, &slog.HandlerOptions{Level: level})})

	trig := triggers(s.opt.aliasMode)
	simCh := &readyChannel{Channel: s.ch.Bare(), ready: make(chan struct{})}
	opt := persona.Options{
		// The bare channel has no history, member or typing capability:
		// the log is the only source of messages (no backfill).
		Channels: []channel.Channel{simCh},
		DataDir:  dir, Persona: s.persona, Model: s.model,
		Aliases: s.opt.aliases, Owners: s.opt.owners,
		PrivateAdmission: s.pol.privateAdmission, PrivateAllowlist: s.pol.privateAllowlist,
		Policy: s.pol.bot, Groups: s.pol.groups, Triggers: trig,
		NoPacing: true, Clock: s.clk, Logger: logger, OnOutcome: s.onOutcome,
	}
	if !s.online {
		opt.NoRouter = true
		opt.Reviewer = outbound.BasicReviewer
	}
	p, err := persona.New(opt)
	if err != nil {
		return fmt.Errorf("start the pipeline: %w", err)
	}
	defer func() {
		if cerr := p.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close the pipeline: %w", cerr)
		}
	}()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}) // closed when Run returned, with s.runErr set
	go func() {
		s.runErr = p.Run(rctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
		if s.runErr != nil && err == nil {
			err = fmt.Errorf("pipeline: %w", s.runErr)
		}
	}()

	// The pipeline fixes its replay cutoff when the channel connects: let
	// that happen at the start time, before the clock moves.
	select {
	case <-simCh.ready:
	case <-done:
		return fmt.Errorf("the pipeline ended at start: %w", s.ended(ctx))
	case <-ctx.Done():
		return ctx.Err()
	}

	id := route.Identity{BotID: botID, Aliases: s.opt.aliases, AliasMode: s.opt.aliasMode, Owners: s.opt.owners}
	counts := map[string]int{}
	for _, m := range msgs {
		res, err := s.replay(ctx, m, done)
		if err != nil {
			return fmt.Errorf("line %d (%s): %w", m.line, m.id, err)
		}
		if !m.self {
			res.Trigger = route.Classify(&m.event, id, trig)
		}
		counts[res.Outcome]++
		if err := s.out.Encode(res); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	s.routes.mute()
	if err := s.out.Encode(map[string]map[string]int{"summary": counts}); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// readyChannel is the simulated channel; ready is closed once the pipeline
// has taken in its first online state.
type readyChannel struct {
	channel.Channel
	ready chan struct{}
	once  sync.Once
}

func (c *readyChannel) Run(ctx context.Context, sink channel.Sink) error {
	return c.Channel.Run(ctx, readySink{Sink: sink, c: c})
}

type readySink struct {
	channel.Sink
	c *readyChannel
}

func (s readySink) ReportState(ctx context.Context, st channel.State) {
	s.Sink.ReportState(ctx, st)
	if st.Connected && st.Online {
		s.c.once.Do(func() { close(s.c.ready) })
	}
}

// triggers is the default trigger list with the alias mode applied.
func triggers(mode route.AliasMode) []route.Trigger {
	def := route.DefaultTriggers()
	if mode == "" {
		return def
	}
	out := make([]route.Trigger, len(def))
	for i, t := range def {
		out[i] = route.TriggerFunc(func(ev *channel.Event, id route.Identity) (string, bool) {
			id.AliasMode = mode
			return t.Match(ev, id)
		})
	}
	return out
}

// replay injects one message and waits for its terminal record.
func (s *sim) replay(ctx context.Context, m message, done <-chan struct{}) (result, error) {
	s.clk.Set(m.event.Time)
	if m.self {
		if err := s.ch.Inject(ctx, m.event); err != nil {
			return result{}, fmt.Errorf("inject: %w", err)
		}
		return result{ID: m.id, Outcome: HistoryOutcome, Reason: "the bot's own message, kept as history"}, nil
	}
	key := m.event.Key()
	wait := make(chan inbound.Outcome, 1)
	s.mu.Lock()
	s.waiting[key] = wait
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, key)
		s.mu.Unlock()
	}()
	if err := s.ch.Inject(ctx, m.event); err != nil {
		return result{}, fmt.Errorf("inject: %w", err)
	}
	s.mu.Lock()
	o, ok := s.outcomes[key]
	s.mu.Unlock()
	if !ok {
		var err error
		if o, err = s.await(ctx, wait, done); err != nil {
			return result{}, err
		}
	}
	res := result{ID: m.id, Outcome: string(o.Code), Reason: o.Reason, Reply: s.sentTexts(o.OutboundIDs)}
	if r, ok := s.routes.get(m.id); ok {
		res.Directed = r.directed
		res.ChatIn = &r.chatIn
	}
	return res, nil
}

// await waits for the outcome, stepping the clock while the pipeline idles.
func (s *sim) await(ctx context.Context, wait <-chan inbound.Outcome, done <-chan struct{}) (inbound.Outcome, error) {
	var stepped time.Duration
	quiet := time.NewTicker(quietPeriod)
	defer quiet.Stop()
	for {
		select {
		case o := <-wait:
			return o, nil
		case <-ctx.Done():
			return inbound.Outcome{}, ctx.Err()
		case <-done:
			return inbound.Outcome{}, fmt.Errorf("the pipeline ended before the message was decided: %w", s.ended(ctx))
		case <-quiet.C:
			if s.model.busy.Load() > 0 {
				continue
			}
			if stepped >= maxWait {
				return inbound.Outcome{}, fmt.Errorf("no outcome after %s of simulated time", maxWait)
			}
			s.clk.Advance(clockStep)
			stepped += clockStep
		}
	}
}

// ended is why Run returned (after done is closed): the run's own
// cancellation, or the pipeline's error.
func (s *sim) ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.runErr == nil {
		return errors.New("stopped")
	}
	return s.runErr
}

// onOutcome is the pipeline's OnOutcome hook.
func (s *sim) onOutcome(id string, o inbound.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outcomes[id] = o
	if w := s.waiting[id]; w != nil {
		select {
		case w <- o:
		default:
		}
	}
}

// sentTexts returns the texts of the sent messages with these ids.
func (s *sim) sentTexts(ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var out []string
	for _, sent := range s.ch.Sent() {
		for _, id := range sent.Receipt.MessageIDs {
			if want[id] {
				out = append(out, sent.Out.Text)
				break
			}
		}
	}
	return out
}

// rating is what the router logged about one message.
type rating struct {
	directed string
	chatIn   float64
}

// routeLog collects the router's proactive_reply_route records by message
// id.
type routeLog struct {
	mu      sync.Mutex
	ratings map[string]rating
	muted   atomic.Bool
}

func (l *routeLog) get(id string) (rating, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.ratings[id]
	return r, ok
}

// captureHandler picks the ratings out of the pipeline's log and passes
// every record on to next.
type captureHandler struct {
	log  *routeLog
	next slog.Handler
}

// mute drops the pipeline's log records from now on (the shutdown after
// the last message reports a disconnect that is no news).
func (l *routeLog) mute() { l.muted.Store(true) }

// routeRecord is the router's log message (route.ModelRouter.logRating).
const routeRecord = "proactive_reply_route"

func (h *captureHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *captureHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == routeRecord {
		var id, directed string
		var chatIn float64
		rated := false
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "message_id":
				id = a.Value.String()
			case "rated":
				rated = a.Value.Kind() == slog.KindBool && a.Value.Bool()
			case "directed":
				directed = a.Value.String()
			case "chat_in":
				if a.Value.Kind() == slog.KindFloat64 {
					chatIn = a.Value.Float64()
				}
			}
			return true
		})
		if rated && id != "" {
			h.log.mu.Lock()
			h.log.ratings[id] = rating{directed: directed, chatIn: chatIn}
			h.log.mu.Unlock()
		}
	}
	if !h.log.muted.Load() && h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *captureHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &captureHandler{log: h.log, next: h.next.WithAttrs(attrs)}
}

func (h *captureHandler) WithGroup(name string) slog.Handler {
	return &captureHandler{log: h.log, next: h.next.WithGroup(name)}
}
