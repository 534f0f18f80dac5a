package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/personakit/persona/clock"
)

// Defaults of the agent loop.
const (
	DefaultSteps           = 20
	MaxSteps               = 32
	DefaultOwnerSteps      = 32
	DefaultReplyChars      = 8000
	DefaultOwnerReplyChars = 20000
	DefaultToolTimeout     = 60 * time.Second
	DefaultFinishReserve   = 20 * time.Second
	DefaultRequestTimeout  = 180 * time.Second
	DefaultRepairs         = 3
	DefaultToolOutputChars = 8000
	MaxToolOutputChars     = 20000
	DefaultWebSearchQuota  = 3
	DefaultIntrospection   = 6
	DefaultLoadQuota       = 4
)

// Default texts and markers of the loop (the same as package outbound's).
const (
	DefaultFallbackText    = "I didn't produce a usable reply."
	DefaultRefusalText     = "I'd rather not answer that."
	DefaultPauseText       = "I'll step away for a while."
	DefaultQueuedImageText = "Started generating the image."
	DefaultMsgMarker       = "[persona-msg]"
	DefaultLineMarker      = "[persona-line]"
	MarkerSilent           = "[[SILENT]]"
	MarkerPause            = "[[PAUSE_30M]]"
	MarkerRefuse           = "[[REFUSE]]"
	MarkerNoImage          = "[[NO_IMAGE]]"
)

// FinishReason tells how a loop run ended.
type FinishReason string

// The finish reasons.
const (
	// FinishFinal: the model called agent_finalize and the reply passed the
	// finish checks.
	FinishFinal FinishReason = "final"
	// FinishPlainText: the model answered with plain text that passed the
	// finish checks.
	FinishPlainText FinishReason = "plain_text"
	// FinishForcedSteps: the steps ran out.
	FinishForcedSteps FinishReason = "forced_steps"
	// FinishForcedRepairs: the protocol repairs ran out (or a finish check
	// failed a second time).
	FinishForcedRepairs FinishReason = "forced_repairs"
	// FinishForcedReserve: the planning deadline was reached.
	FinishForcedReserve FinishReason = "forced_reserve"
	// FinishForcedEvidence: evidence was required and not gathered after a
	// repair.
	FinishForcedEvidence FinishReason = "forced_evidence"
)

// Forced reports whether the run was forced to finish.
func (f FinishReason) Forced() bool { return strings.HasPrefix(string(f), "forced_") }

// Fallback kinds reported in LoopResult.Fallback.
const (
	FallbackPause       = "pause"
	FallbackRefusal     = "refusal"
	FallbackQueuedImage = "queued_image"
	FallbackSaid        = "said"
	FallbackLine        = "fallback_line"
	FallbackDigest      = "digest"
)

// LoopConfig configures a [Loop]. Every zero field takes the default of the
// matching Default… constant.
type LoopConfig struct {
	// Registry holds the embedder's tools (nil = built-in tools only).
	Registry *Registry
	// ToolImages lets pictures a tool returns (ToolResult.Images, a page
	// screenshot) reach the model: after the tool's result, a user
	// message carries them as image parts (at most MaxToolImages per
	// step). Set it only when the model takes images; otherwise they are
	// dropped and the tool's text stands alone.
	ToolImages bool
	// Clock drives every deadline and store (nil = wall clock).
	Clock clock.Clock
	// Logger receives agent_* events (nil = discard).
	Logger *slog.Logger

	// Steps per run (20, at most MaxSteps); OwnerSteps for owners (32).
	Steps      int
	OwnerSteps int
	// ReplyChars caps the final reply (8,000); OwnerReplyChars for owners
	// (20,000).
	ReplyChars      int
	OwnerReplyChars int
	// ToolTimeout per tool call (60 s), bounded by the planning deadline.
	ToolTimeout time.Duration
	// FinishReserve is kept for the final answer (20 s); the actual reserve
	// is min(FinishReserve, ⅓ of the remaining time at run start).
	FinishReserve time.Duration
	// RequestTimeout is the run's time when neither LoopInput.Deadline nor
	// ctx has a deadline (180 s).
	RequestTimeout time.Duration
	// Repairs is the number of protocol repairs per run (3).
	Repairs int
	// ToolOutputChars caps each observation (8,000, at most 20,000).
	ToolOutputChars int
	// Quotas limit calls per run by tool name (default web_search: 3); a
	// tool's own Quota option wins.
	Quotas map[string]int
	// IntrospectionQuota is shared by Introspection tools (6);
	// LoadQuota limits tools_load (4). Neither uses steps.
	IntrospectionQuota int
	LoadQuota          int
	// Secrets are values masked in every tool observation, besides
	// token/key-shaped strings.
	Secrets []string

	// Carry keeps the carry-over archive and recent tool calls (nil = a
	// private in-memory store on Clock with the defaults).
	Carry *CarryStore
	// Confirm keeps confirmation codes (nil = a private in-memory store).
	Confirm *ConfirmStore
	// Snapshots restores loaded tools in group sessions (nil = none);
	// SnapshotTTL is their validity (30 min).
	Snapshots   SnapshotStore
	SnapshotTTL time.Duration

	// Texts of the empty-generation fallbacks: the lines sent when a run
	// ends without usable text (a pause, a refusal, a queued image, or
	// nothing at all).
	FallbackText    string
	RefusalText     string
	PauseText       string
	QueuedImageText string
	// Markers separating chat messages and lines (defaults [persona-msg],
	// [persona-line]).
	MsgMarker  string
	LineMarker string
}

// Loop is the default agent [Runner]: the tool loop described in the
// package doc ("The agent loop"). It is safe
// for concurrent use; each run keeps its own state.
type Loop struct {
	cfg LoopConfig
	clk clock.Clock
	log *slog.Logger
}

var _ Runner = (*Loop)(nil)

// ErrLoopConfig is wrapped by NewLoop's validation errors.
var ErrLoopConfig = errors.New("agent: invalid loop config")

// NewLoop validates cfg and returns a Loop.
func NewLoop(cfg LoopConfig) (*Loop, error) {
	for name, v := range map[string]int64{
		"Steps": int64(cfg.Steps), "OwnerSteps": int64(cfg.OwnerSteps), "ReplyChars": int64(cfg.ReplyChars),
		"OwnerReplyChars": int64(cfg.OwnerReplyChars), "ToolTimeout": int64(cfg.ToolTimeout),
		"FinishReserve": int64(cfg.FinishReserve), "RequestTimeout": int64(cfg.RequestTimeout),
		"Repairs": int64(cfg.Repairs), "ToolOutputChars": int64(cfg.ToolOutputChars),
		"IntrospectionQuota": int64(cfg.IntrospectionQuota), "LoadQuota": int64(cfg.LoadQuota),
		"SnapshotTTL": int64(cfg.SnapshotTTL),
	} {
		if v < 0 {
			return nil, fmt.Errorf("%w: %s is negative", ErrLoopConfig, name)
		}
	}
	if cfg.Steps > MaxSteps || cfg.OwnerSteps > MaxSteps {
		return nil, fmt.Errorf("%w: steps above %d", ErrLoopConfig, MaxSteps)
	}
	if cfg.ToolOutputChars > MaxToolOutputChars {
		return nil, fmt.Errorf("%w: ToolOutputChars above %d", ErrLoopConfig, MaxToolOutputChars)
	}
	def := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	defD := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	defS := func(p *string, d string) {
		if *p == "" {
			*p = d
		}
	}
	def(&cfg.Steps, DefaultSteps)
	def(&cfg.OwnerSteps, DefaultOwnerSteps)
	def(&cfg.ReplyChars, DefaultReplyChars)
	def(&cfg.OwnerReplyChars, DefaultOwnerReplyChars)
	def(&cfg.Repairs, DefaultRepairs)
	def(&cfg.ToolOutputChars, DefaultToolOutputChars)
	def(&cfg.IntrospectionQuota, DefaultIntrospection)
	def(&cfg.LoadQuota, DefaultLoadQuota)
	defD(&cfg.ToolTimeout, DefaultToolTimeout)
	defD(&cfg.FinishReserve, DefaultFinishReserve)
	defD(&cfg.RequestTimeout, DefaultRequestTimeout)
	defD(&cfg.SnapshotTTL, DefaultSnapshotTTL)
	defS(&cfg.FallbackText, DefaultFallbackText)
	defS(&cfg.RefusalText, DefaultRefusalText)
	defS(&cfg.PauseText, DefaultPauseText)
	defS(&cfg.QueuedImageText, DefaultQueuedImageText)
	defS(&cfg.MsgMarker, DefaultMsgMarker)
	defS(&cfg.LineMarker, DefaultLineMarker)
	if cfg.Quotas == nil {
		cfg.Quotas = map[string]int{"web_search": DefaultWebSearchQuota}
	} else {
		cfg.Quotas = cloneMap(cfg.Quotas)
	}
	cfg.Secrets = slices.Clone(cfg.Secrets)
	if cfg.Registry == nil {
		cfg.Registry = NewRegistry()
	}
	clk := clock.OrReal(cfg.Clock)
	if cfg.Carry == nil {
		cfg.Carry = NewCarryStore(CarryConfig{Clock: clk})
	}
	if cfg.Confirm == nil {
		cfg.Confirm = NewConfirmStore(clk, 0)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Loop{cfg: cfg, clk: clk, log: log}, nil
}

func cloneMap(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Registry returns the loop's tool registry.
func (l *Loop) Registry() *Registry { return l.cfg.Registry }

// Carry returns the loop's carry-over store.
func (l *Loop) Carry() *CarryStore { return l.cfg.Carry }

// MemoryBlocks renders the session's "recent tool calls" and carry-over
// blocks, for a prompt builder that places them itself (then set
// MaxToolImages bounds the pictures one tool call may add to the
// conversation (LoopConfig.ToolImages).
const MaxToolImages = 2

// LoopInput.SkipMemoryBlocks).
func (l *Loop) MemoryBlocks(session string) MemoryBlocks { return l.cfg.Carry.Blocks(session) }

// LoopInput is one turn's input to the loop: the Runner input plus what the
// loop rules need from the turn.
type LoopInput struct {
	RunInput
	// SessionKey keys confirmation codes, carry-over, recent tool calls and
	// snapshots ("" = no cross-turn memory).
	SessionKey string
	// Group marks a group session: loaded tools are restored from and saved
	// to the snapshot store.
	Group bool
	// Tiers are the caller's permission tiers (owners may call every tool).
	Tiers []string
	// Disabled names tools switched off for this bot or group; they answer
	// "no permission".
	Disabled []string
	// Message is the text of the message being answered (an owner's message
	// containing a confirmation code lets the pending change run).
	Message string
	// Say sends a line immediately (the pipeline routes it through the
	// delivery ledger); nil makes say answer "not available".
	Say func(ctx context.Context, text string) error
	// EvidenceRequired is set by a reply rule: the reply must rest on a
	// search made this run.
	EvidenceRequired bool
	// ImageQueued reports whether an image job is queued for this turn
	// (tools may also call ReportImageJob).
	ImageQueued func() bool
	// Deadline is the request deadline on the loop's clock (zero: ctx's
	// deadline, else now + RequestTimeout).
	Deadline time.Time
	// SkipMemoryBlocks stops the loop from injecting the recent-tool-calls
	// and carry-over blocks (the prompt builder placed them).
	SkipMemoryBlocks bool
}

// LoopResult is the outcome of a loop run.
type LoopResult struct {
	Result
	// Finish tells how the run ended.
	Finish FinishReason
	// Fallback names the fallback used for the text ("" = the model's).
	Fallback string
	// Silent: no reply this turn (Text is then [[SILENT]]).
	Silent bool
	// Steps counts the steps used; Repairs the protocol repairs.
	Steps   int
	Repairs int
	// Said are the lines sent with say, in order.
	Said []string
	// Evidence is the run's evidence ledger.
	Evidence []Evidence
	// ToolCalls are the executed calls.
	ToolCalls []CallRecord
	// TimeSensitive is set when agent_finalize declared time-sensitive
	// claims.
	TimeSensitive bool
}

// Run implements [Runner] with the default turn settings: no session
// memory, no say callback, no permission tiers. The pipeline calls
// [Loop.RunLoop] instead.
func (l *Loop) Run(ctx context.Context, in RunInput) (*Result, error) {
	res, err := l.RunLoop(ctx, LoopInput{RunInput: in})
	if err != nil {
		return nil, err
	}
	return &res.Result, nil
}

// RunLoop runs the tool loop for one turn. It returns an error only when
// ctx ends (ctx.Err()), the input has no model ([ErrNoModel]) or a
// planning model call fails for another reason than the planning deadline
// (the error as the model returned it, for the reply flow to retry or
// answer); everything else ends in a reply, a fallback or silence.
func (l *Loop) RunLoop(ctx context.Context, in LoopInput) (*LoopResult, error) {
	if in.Model == nil {
		return nil, ErrNoModel
	}
	r := l.newRun(ctx, in)
	l.log.LogAttrs(ctx, slog.LevelInfo, "agent_run_start",
		slog.String("session", in.SessionKey), slog.Bool("owner", in.Owner),
		slog.Int("max_steps", r.maxSteps), slog.Duration("reserve", r.reserve),
		slog.Time("deadline", r.deadline))
	res, err := r.loop(ctx)
	if err != nil {
		l.log.LogAttrs(ctx, slog.LevelWarn, "agent_run_error", slog.String("session", in.SessionKey), slog.Any("err", err))
		return nil, err
	}
	r.remember(context.WithoutCancel(ctx), res)
	l.log.LogAttrs(ctx, slog.LevelInfo, "agent_finish",
		slog.String("session", in.SessionKey), slog.String("reason", string(res.Finish)),
		slog.String("fallback", res.Fallback), slog.Int("steps", res.Steps),
		slog.Int("repairs", res.Repairs), slog.Int("calls", res.Calls), slog.Bool("silent", res.Silent))
	return res, nil
}
