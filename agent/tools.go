package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Names of the built-in core tools every loop run offers.
const (
	ToolFinalize = "agent_finalize"
	ToolSay      = "say"
	ToolsLoad    = "tools_load"
	ToolsExecute = "tools_execute"
)

// Errors returned by [Registry.Register].
var (
	ErrToolName      = errors.New("agent: invalid tool name")
	ErrToolDuplicate = errors.New("agent: tool already registered")
)

var toolNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

// ToolOption adjusts how a tool is registered.
type ToolOption func(*toolEntry)

// Core makes the tool always callable: its schema is sent with every
// request instead of a catalog line.
func Core() ToolOption { return func(e *toolEntry) { e.core = true } }

// Deferred lists the tool as one catalog line; the model reaches it through
// tools_load and tools_execute. This is the default.
func Deferred() ToolOption { return func(e *toolEntry) { e.core = false } }

// Purpose sets the one-line purpose shown in the catalog (default: the first
// line of the spec's description).
func Purpose(line string) ToolOption {
	return func(e *toolEntry) { e.purpose = firstLine(line) }
}

// Tiers restricts the tool to callers holding one of the permission tiers
// (e.g. "owner", "friend"). Without it everyone may call the tool; owners
// may call every tool.
func Tiers(tiers ...string) ToolOption {
	return func(e *toolEntry) { e.tiers = append(e.tiers, tiers...) }
}

// ChangesExtensions marks a tool that changes the bot's extensions: it runs
// only after the owner typed the one-time confirmation code it hands out.
func ChangesExtensions() ToolOption { return func(e *toolEntry) { e.extension = true } }

// Introspection marks a tool that looks at the run or the bot itself: it
// uses no step and shares the introspection quota (6 per run by default).
func Introspection() ToolOption { return func(e *toolEntry) { e.introspection = true } }

// Quota limits the calls per run (0 keeps the configured quota, if any, as
// for web_search).
func Quota(n int) ToolOption { return func(e *toolEntry) { e.quota = n } }

// Timeout sets the tool's own timeout (default LoopConfig.ToolTimeout); the
// planning deadline bounds it either way.
func Timeout(d time.Duration) ToolOption { return func(e *toolEntry) { e.timeout = d } }

type toolEntry struct {
	tool          Tool
	spec          ToolSpec
	schema        *schemaNode
	purpose       string
	core          bool
	tiers         []string
	extension     bool
	introspection bool
	quota         int
	timeout       time.Duration
}

// Registry holds the tools an embedder adds in code. One Registry is shared
// by every run of a [Loop]; it is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]*toolEntry
	order []string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tools: map[string]*toolEntry{}} }

// Register adds t. The name must be 1–64 letters, digits, '_' or '-' and
// not one of the built-in tools; the parameters, when set, must be a JSON
// schema object.
func (r *Registry) Register(t Tool, opts ...ToolOption) error {
	if t == nil {
		return fmt.Errorf("%w: nil tool", ErrToolName)
	}
	spec := t.Spec()
	if !toolNameRE.MatchString(spec.Name) || isBuiltin(spec.Name) {
		return fmt.Errorf("%w: %q", ErrToolName, spec.Name)
	}
	schema, err := parseSchema(spec.Parameters)
	if err != nil {
		return fmt.Errorf("tool %s: %w", spec.Name, err)
	}
	if schema != nil && schema.Type != "" && schema.Type != "object" {
		return fmt.Errorf("agent: tool %s: parameters must be an object schema", spec.Name)
	}
	e := &toolEntry{tool: t, spec: spec, schema: schema, purpose: firstLine(spec.Description)}
	for _, o := range opts {
		o(e)
	}
	if e.quota < 0 || e.timeout < 0 {
		return fmt.Errorf("agent: tool %s: negative quota or timeout", spec.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tools == nil {
		r.tools = map[string]*toolEntry{}
	}
	if _, dup := r.tools[spec.Name]; dup {
		return fmt.Errorf("%w: %s", ErrToolDuplicate, spec.Name)
	}
	r.tools[spec.Name] = e
	r.order = append(r.order, spec.Name)
	return nil
}

// MustRegister is Register that panics on error, for set-up code.
func (r *Registry) MustRegister(t Tool, opts ...ToolOption) *Registry {
	if err := r.Register(t, opts...); err != nil {
		panic(err)
	}
	return r
}

// Lookup returns the named tool.
func (r *Registry) Lookup(name string) (Tool, bool) {
	e := r.entry(name)
	if e == nil {
		return nil, false
	}
	return e.tool, true
}

// Names returns the registered names in registration order.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.order)
}

func (r *Registry) entry(name string) *toolEntry {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.tools[name]
}

func (r *Registry) entries() []*toolEntry {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*toolEntry, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, r.tools[n])
	}
	return out
}

func isBuiltin(name string) bool {
	switch name {
	case ToolFinalize, ToolSay, ToolsLoad, ToolsExecute:
		return true
	}
	return false
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s
}

// Evidence is one source a search or render tool saw: it grounds links and
// time-sensitive claims in the final reply.
type Evidence struct {
	URL     string `json:"url"`
	Title   string `json:"title,omitempty"`
	Excerpt string `json:"excerpt,omitempty"`
	// Tool is filled in by the loop.
	Tool string `json:"tool,omitempty"`
}

// ToolResult is the richer result of a [ResultTool].
type ToolResult struct {
	// Text is the observation shown to the model.
	Text string
	// Evidence goes into the run's evidence ledger.
	Evidence []Evidence
	// Images are pictures the tool produced (a page screenshot), as data:
	// URLs. When the run's model takes pictures ([ImageInput]) they are
	// shown to it right after the tool's result; otherwise they are
	// dropped and the text alone is the observation.
	Images []string
}

// ResultTool is an optional interface: a Tool that also implements it is
// called through CallResult, so it can report evidence with its result.
type ResultTool interface {
	Tool
	CallResult(ctx context.Context, args json.RawMessage) (ToolResult, error)
}

type toolEnvKey struct{}

// toolEnv is what a running tool can reach through its context.
type toolEnv struct {
	mu       sync.Mutex
	evidence []Evidence
	image    bool
}

// ReportEvidence adds sources to the evidence ledger of the run that called
// the tool. It reports false when ctx does not belong to a loop run.
func ReportEvidence(ctx context.Context, ev ...Evidence) bool {
	env, ok := ctx.Value(toolEnvKey{}).(*toolEnv)
	if !ok {
		return false
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	env.evidence = append(env.evidence, ev...)
	return true
}

// ReportImageJob tells the run that the tool queued an image job, so the
// turn may not end in silence. It reports false outside a loop run.
func ReportImageJob(ctx context.Context) bool {
	env, ok := ctx.Value(toolEnvKey{}).(*toolEnv)
	if !ok {
		return false
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	env.image = true
	return true
}

func (e *toolEnv) take() ([]Evidence, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev := e.evidence
	e.evidence = nil
	return ev, e.image
}

// Built-in tool specs.
var (
	finalizeSpec = ToolSpec{
		Name:        ToolFinalize,
		Description: "Finish this turn with your reply. Use [persona-msg] between separate chat messages and [persona-line] for a line break; never a real line break. Set silent=true to say nothing. Set time_sensitive=true when the reply states current facts (news, prices, releases) you looked up.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"silent":{"type":"boolean"},"time_sensitive":{"type":"boolean"}}}`),
	}
	saySpec = ToolSpec{
		Name:        ToolSay,
		Description: "Send one short chat line right now, before you finish (e.g. \"let me look that up\"). Not repeated in the final reply.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
	}
	loadSpec = ToolSpec{
		Name:        ToolsLoad,
		Description: "Load catalog tools by name; returns their parameter schemas so you can run them with tools_execute.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"names":{"type":"array","items":{"type":"string"}}},"required":["names"]}`),
	}
	executeSpec = ToolSpec{
		Name:        ToolsExecute,
		Description: "Run a loaded catalog tool: name and its arguments object.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"arguments":{"type":"object"}},"required":["name"]}`),
	}
)

var builtinSchemas = func() map[string]*schemaNode {
	m := map[string]*schemaNode{}
	for _, s := range []ToolSpec{finalizeSpec, saySpec, loadSpec, executeSpec} {
		n, err := parseSchema(s.Parameters)
		if err != nil {
			panic(err)
		}
		m[s.Name] = n
	}
	return m
}()
