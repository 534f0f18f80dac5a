package persona

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/route"
	"github.com/personakit/persona/schedule"
	"github.com/personakit/persona/store"
	"github.com/personakit/persona/store/postgres"
)

// Options configures a Pipeline. Every zero field means the documented
// default; only a Model (or a Runner that needs none) and a place to keep
// data (DataDir or DB) are required.
type Options struct {
	// Profile names this bot binding in session keys (default "default").
	Profile string
	// Channels are the platform connections Run starts.
	Channels []channel.Channel

	// DataDir holds the SQLite database (persona.db) and the write-failure
	// journal (inbound.journal). Created if missing. Ignored for the parts
	// given explicitly below.
	DataDir string
	// DatabaseURL, when set, keeps the state in PostgreSQL instead of
	// DataDir's SQLite file (a postgres:// URL; see package
	// store/postgres): several processes with the same URL then run one
	// bot together. Each still needs DataDir (or Journal) for its own
	// write-failure journal.
	DatabaseURL string
	// DB is an already opened store (a *store.DB or a *postgres.DB); the
	// pipeline does not close it.
	DB Storage
	// Queue, History, Ledger, Checkpoints override the store's ports.
	Queue       inbound.Queue
	History     memory.History
	Ledger      outbound.Ledger
	Checkpoints inbound.Checkpoints
	// Journal receives items the queue could not store (default: a file
	// journal in DataDir).
	Journal inbound.Journal

	// Persona is the SOUL.md text; PersonaFile is read when Persona is empty.
	Persona     string
	PersonaFile string
	// Rules replace agent.DefaultRules in the system head.
	Rules string
	// Aliases are names the bot answers to; Owners are owner account ids.
	Aliases []string
	Owners  []string
	// PrivateAdmission says who may talk to the bot in private
	// (default everyone); PrivateAllowlist is used in allowlist mode.
	PrivateAdmission gate.Admission
	PrivateAllowlist []string
	// Zone is the time zone of the clock line in prompts (default UTC).
	Zone *time.Location

	// Model answers every model call (required unless Runner needs none):
	// generation, the proactive router, the audit and dedup, compression.
	Model agent.Model

	// Policy is the bot's reply policy and Groups its per-group overrides
	// (keyed by chat id, or "<platform>:<chat id>"); the zero value is the
	// documented defaults of package gate.
	Policy gate.Policy
	Groups map[string]gate.GroupPolicy
	// Flags overrides the store's session flags (stop windows, pauses,
	// mutes, cooldowns, lanes). The pipeline reads them through one cache.
	Flags gate.Flags
	// NoRouter turns the default model-rated proactive router off: then
	// only direct messages are answered (ignored_proactive_off).
	NoRouter bool
	// AuditDisabled turns the pre-send audit off for a session (default:
	// on everywhere).
	AuditDisabled func(sessionKey string) bool
	// Secrets are credential values masked in every outgoing message.
	Secrets []string
	// Memory turns long-term memory on (needs the default store and a
	// Model): recalled facts and history snippets in every prompt, summary
	// checkpoints before the cache breakpoint, and fact extraction after
	// replies (durable background jobs that call the model).
	Memory bool
	// Agent turns the agent tool loop on (agent.Loop over Tools) instead of
	// one model call per reply. With Memory on, memory_search is added.
	Agent bool
	// Media configures pictures, stickers and voice: fetching, the cache,
	// descriptions and transcription (see MediaOptions; on by default
	// with DataDir).
	Media MediaOptions
	// Tools are the agent's tools (default: an empty registry).
	Tools *agent.Registry
	// ContextWindow is the model's context window in tokens (default
	// 128,000); the prompt is trimmed to fit it.
	ContextWindow int
	// Triggers replace route.DefaultTriggers.
	Triggers []route.Trigger
	// Gates replace the default gate chain.
	Gates gate.Chain
	// Router rates unprompted group messages (default: route.New over
	// Model, unless NoRouter).
	Router route.Router
	// Runner generates replies (default agent.SingleCall).
	Runner agent.Runner
	// Reviewer reviews drafts (default outbound.NewReviewer over Model; with
	// no Model, outbound.BasicReviewer).
	Reviewer outbound.Reviewer
	// Sender delivers replies (default outbound.NewSender over Ledger).
	Sender outbound.Sender
	// NoPacing turns off the pause between chunks of the default Sender.
	NoPacing bool

	// WrapGates, WrapRouter, WrapRunner, WrapReviewer and WrapSender
	// decorate a stage instead of replacing it, like middleware: each is
	// given the stage the pipeline would use (the default, or the one set
	// above) and returns the one it uses. WrapRouter is not called when
	// there is no router (NoRouter, or no Model). A wrapper that returns
	// nil is an error of New.
	//
	// Whatever a stage is, the pipeline's own duties hold around it: every
	// model call goes through the aliasing boundary (the Model a stage is
	// given hides real ids; see agent.Private), every chunk leaves through
	// the delivery exit that Reply.Channel is bound to (ledger, mentions,
	// secret masking, history of sent messages; see outbound.Exit), and
	// every result is checked before it is recorded.
	WrapGates    func(gate.Chain) gate.Chain
	WrapRouter   func(route.Router) route.Router
	WrapRunner   func(agent.Runner) agent.Runner
	WrapReviewer func(outbound.Reviewer) outbound.Reviewer
	WrapSender   func(outbound.Sender) outbound.Sender

	// Workers is the number of turns processed at once (default 8). The
	// dispatcher keeps up to as many leases claimed ahead for them, and up
	// to 4 × Workers finished turns may still be writing their outcome.
	Workers int
	// ReplyConcurrency bounds generation and sending (default 8).
	ReplyConcurrency int
	// PerGroup and PerPrivate cap in-flight items per session (3 and 2).
	PerGroup   int
	PerPrivate int
	// MaxAttempts, RetryBase and RetryCap shape the retry policy
	// (5, 5 s, 5 min: delays 5, 10, 20, 40 s).
	MaxAttempts int
	RetryBase   time.Duration
	RetryCap    time.Duration
	// Lease and RenewEvery are the claim lease and its heartbeat
	// (10 min, 2 min).
	Lease      time.Duration
	RenewEvery time.Duration
	// ClaimPoll is how often idle workers look for due items besides being
	// woken (500 ms).
	ClaimPoll time.Duration
	// RequestTimeout bounds one turn's generation (180 s).
	RequestTimeout time.Duration
	// HistoryLimit is the number of recent messages in the prompt (30).
	HistoryLimit int
	// OfflineRetry is how long an item waits when its channel is offline
	// (1 s; no attempt is charged).
	OfflineRetry time.Duration

	// Commands are chat commands of the embedder's, answered in code
	// without the chat model (see Command). The built-in ones are always
	// there: the owner's /status, /send, /pause, /resume, /why, /welcome,
	// /schedule and /help, and anyone's /forget me.
	Commands []Command
	// Notices says how the bot answers pokes, new members and friend
	// requests (see NoticeOptions).
	Notices NoticeOptions
	// Schedules holds the scheduled messages (default: the store; see
	// Pipeline.AddSchedule).
	Schedules schedule.Store
	// Web reads links: with it, a message holding a link the reader can
	// resolve is direct (the link trigger), the page is read before the
	// reply and shown in the prompt's recent-sources block, and the
	// agent gets the web_fetch tool (when Agent is on: New adds it to
	// Tools unless Tools holds one already). See agent/web.
	Web *web.Reader

	// Clock is the time source (default the wall clock).
	Clock clock.Clock
	// Logger receives structured logs (nil = slog.Default(), so nothing is
	// lost silently; pass slog.New(slog.DiscardHandler) for silence).
	Logger *slog.Logger
	// OnOutcome is called after a message's terminal record is written.
	OnOutcome func(id string, o inbound.Outcome)

	customRunner bool // Runner was set by the embedder
}

// Defaults used for zero Options fields.
const (
	DefaultWorkers          = 8
	DefaultReplyConcurrency = 8
	DefaultClaimPoll        = 500 * time.Millisecond
	DefaultRequestTimeout   = 180 * time.Second
	DefaultHistoryLimit     = 30
	DefaultEnqueueTimeout   = 5 * time.Second
	DefaultBookkeeping      = 5 * time.Second
	DefaultOfflineRetry     = time.Second
	// DefaultReplayMax bounds how far back a replay looks (see
	// inbound.DefaultReplayMax).
	DefaultReplayMax = inbound.DefaultReplayMax
)

// ErrNoModel is returned by New when neither a Model nor a Runner is set.
var ErrNoModel = errors.New("persona: Options.Model is required")

func (o *Options) applyDefaults() error {
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
	if o.Profile == "" {
		o.Profile = channel.DefaultProfile
	}
	setInt(&o.Workers, DefaultWorkers)
	setInt(&o.ReplyConcurrency, DefaultReplyConcurrency)
	setInt(&o.PerGroup, inbound.DefaultPerGroup)
	setInt(&o.PerPrivate, inbound.DefaultPerPrivate)
	setInt(&o.MaxAttempts, inbound.DefaultMaxAttempts)
	setInt(&o.HistoryLimit, DefaultHistoryLimit)
	setDur(&o.RetryBase, inbound.DefaultRetryBase)
	setDur(&o.RetryCap, inbound.DefaultRetryCap)
	setDur(&o.Lease, inbound.DefaultLease)
	setDur(&o.RenewEvery, inbound.DefaultRenewEvery)
	setDur(&o.ClaimPoll, DefaultClaimPoll)
	setDur(&o.RequestTimeout, DefaultRequestTimeout)
	setDur(&o.OfflineRetry, DefaultOfflineRetry)
	if o.RenewEvery >= o.Lease {
		return fmt.Errorf("persona: RenewEvery (%s) must be shorter than Lease (%s)", o.RenewEvery, o.Lease)
	}
	if !o.PrivateAdmission.Valid() {
		return fmt.Errorf("persona: unknown PrivateAdmission %q", o.PrivateAdmission)
	}
	if o.Model == nil && o.Runner == nil {
		return ErrNoModel
	}
	if o.Persona == "" && o.PersonaFile != "" {
		b, err := os.ReadFile(o.PersonaFile)
		if err != nil {
			return fmt.Errorf("persona: read persona file: %w", err)
		}
		o.Persona = string(b)
	}
	if err := validateCommands(o.Commands); err != nil {
		return err
	}
	o.customRunner = o.Runner != nil
	if o.Runner == nil {
		o.Runner = agent.SingleCall
	}
	if o.Triggers == nil {
		o.Triggers = route.DefaultTriggers()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Clock = clock.OrReal(o.Clock)
	for i, ch := range o.Channels {
		if ch == nil {
			return fmt.Errorf("persona: Channels[%d] is nil", i)
		}
	}
	return nil
}

// openStorage fills the storage ports from DB, DatabaseURL or DataDir. It
// returns the store it opened itself (to be closed by the pipeline), if
// any.
func (o *Options) openStorage() (owned Storage, err error) {
	needStore := o.Queue == nil || o.History == nil || o.Ledger == nil || o.Checkpoints == nil || o.Flags == nil
	db := o.DB
	switch {
	case !needStore || db != nil:
	case o.DatabaseURL != "":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		pg, err := postgres.Open(ctx, o.DatabaseURL, postgres.Options{Clock: o.Clock, Logger: o.Logger})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("persona: %w", err)
		}
		db, owned = pg, pg
	default:
		if o.DataDir == "" {
			return nil, errors.New("persona: set Options.DataDir (or Options.DB or Options.DatabaseURL)")
		}
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("persona: create data dir: %w", err)
		}
		sq, err := store.Open(filepath.Join(o.DataDir, "persona.db"), store.Options{Clock: o.Clock, Logger: o.Logger,
			// Only memory searches history; without it the rows are
			// tokenized and indexed by the first search, if one ever comes.
			DeferSearch: !o.Memory})
		if err != nil {
			return nil, err
		}
		db, owned = sq, sq
	}
	if o.Queue == nil {
		o.Queue = db
	}
	if o.History == nil {
		o.History = db
	}
	if o.Ledger == nil {
		o.Ledger = db
	}
	if o.Checkpoints == nil {
		o.Checkpoints = db
	}
	if o.Flags == nil {
		o.Flags = db
	}
	if o.Journal == nil {
		dir := o.DataDir
		if dir != "" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				if owned != nil {
					_ = owned.Close()
				}
				return nil, fmt.Errorf("persona: create data dir: %w", err)
			}
		}
		if dir == "" {
			if owned != nil {
				_ = owned.Close()
			}
			return nil, errors.New("persona: set Options.DataDir or Options.Journal")
		}
		j, err := inbound.OpenJournal(filepath.Join(dir, "inbound.journal"))
		if err != nil {
			if owned != nil {
				_ = owned.Close()
			}
			return nil, err
		}
		o.Journal = j
	}
	return owned, nil
}
