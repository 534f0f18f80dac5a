package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/personakit/persona/clock"
)

// run is the state of one RunLoop call.
type run struct {
	l  *Loop
	in LoopInput

	start, deadline, plan time.Time
	reserve               time.Duration
	maxSteps, maxChars    int

	msgs   []Message
	loaded map[string]bool
	tiers  map[string]bool
	off    map[string]bool

	steps, failures, calls int
	repaired               map[string]bool // finish checks repaired once
	quota                  map[string]int  // calls per tool name
	introspections, loads  int
	lastKey                string
	evidence               []Evidence
	said                   []string
	records                []CallRecord
	summaries              []string
	image                  bool
	images                 []string // the last tool call's pictures (ToolImages)
	usage                  Usage
	model                  string
	timeSensitive          bool
}

func (l *Loop) newRun(ctx context.Context, in LoopInput) *run {
	now := l.clk.Now()
	r := &run{l: l, in: in, start: now, loaded: map[string]bool{}, tiers: map[string]bool{},
		off: map[string]bool{}, repaired: map[string]bool{}, quota: map[string]int{}}
	r.deadline = in.Deadline
	if r.deadline.IsZero() {
		if d, ok := ctx.Deadline(); ok {
			r.deadline = now.Add(time.Until(d))
		} else {
			r.deadline = now.Add(l.cfg.RequestTimeout)
		}
	}
	r.reserve = min(l.cfg.FinishReserve, max(r.deadline.Sub(now), 0)/3)
	r.plan = r.deadline.Add(-r.reserve)
	r.maxSteps, r.maxChars = l.cfg.Steps, l.cfg.ReplyChars
	if in.Owner {
		r.maxSteps, r.maxChars = l.cfg.OwnerSteps, l.cfg.OwnerReplyChars
	}
	for _, t := range in.Tiers {
		r.tiers[t] = true
	}
	for _, t := range in.Disabled {
		r.off[t] = true
	}
	if in.ImageQueued != nil && in.ImageQueued() {
		r.image = true
	}
	r.restore(ctx)
	r.msgs = slices.Clone(in.Request.Messages)
	r.inject()
	return r
}

// restore loads the group session's snapshot of loaded tools.
func (r *run) restore(ctx context.Context) {
	if !r.in.Group || r.in.SessionKey == "" || r.l.cfg.Snapshots == nil {
		return
	}
	snap, ok, err := r.l.cfg.Snapshots.LoadSnapshot(ctx, r.in.SessionKey)
	if err != nil {
		r.l.log.LogAttrs(ctx, slog.LevelWarn, "agent_snapshot_load_failed", slog.String("session", r.in.SessionKey), slog.Any("err", err))
		return
	}
	if !ok || r.start.Sub(snap.SavedAt) >= r.l.cfg.SnapshotTTL {
		return
	}
	for _, name := range snap.Loaded {
		if e := r.l.cfg.Registry.entry(name); e != nil && !e.core && r.allowed(e) {
			r.loaded[name] = true
		}
	}
}

// allowed applies the permission allowlist and the extension switches.
func (r *run) allowed(e *toolEntry) bool {
	if r.off[e.spec.Name] {
		return false
	}
	if r.in.Owner || len(e.tiers) == 0 {
		return true
	}
	return slices.ContainsFunc(e.tiers, func(t string) bool { return r.tiers[t] })
}

// inject adds the protocol prompt, the deferred-tool catalog and the
// agent-memory blocks as one system message before the current message
// (after the cache breakpoint).
func (r *run) inject() {
	var b strings.Builder
	b.WriteString("## Tool protocol\n")
	b.WriteString("Work in steps. In each step call exactly one tool; only the first call of a step runs. ")
	b.WriteString("Finish by calling " + ToolFinalize + " with your reply. Use " + ToolSay + " to send a short line right away. ")
	b.WriteString("Catalog tools below are not callable until you get their schemas with " + ToolsLoad + " and run them with " + ToolsExecute + ". ")
	b.WriteString("Never write tool calls, tool names or JSON in the reply text. ")
	fmt.Fprintf(&b, "Budget: %d steps, %d protocol repairs.", r.maxSteps, r.l.cfg.Repairs)
	var cat []string
	for _, e := range r.l.cfg.Registry.entries() {
		if !e.core && r.allowed(e) && !r.loaded[e.spec.Name] {
			cat = append(cat, "- "+e.spec.Name+": "+e.purpose)
		}
	}
	if len(cat) > 0 {
		b.WriteString("\n\n## Tool catalog (load before use)\n" + strings.Join(cat, "\n"))
	}
	if r.in.SessionKey != "" && !r.in.SkipMemoryBlocks {
		mb := r.l.cfg.Carry.Blocks(r.in.SessionKey)
		for _, s := range []string{mb.RecentCalls, mb.CarryOver} {
			if s != "" {
				b.WriteString("\n\n" + s)
			}
		}
	}
	msg := Message{Role: RoleSystem, Content: b.String()}
	at := len(r.msgs)
	if at > 0 && r.msgs[at-1].Role == RoleUser {
		at--
	}
	r.msgs = slices.Insert(r.msgs, at, msg)
}

// tools returns the specs offered in a planning request.
func (r *run) tools() []ToolSpec {
	specs := []ToolSpec{finalizeSpec, saySpec, loadSpec, executeSpec}
	for _, e := range r.l.cfg.Registry.entries() {
		if r.allowed(e) && (e.core || r.loaded[e.spec.Name]) {
			specs = append(specs, e.spec)
		}
	}
	return specs
}

func (r *run) request(tools []ToolSpec, choice string) Request {
	req := r.in.Request
	if req.Purpose == "" {
		req.Purpose = PurposeChat
	}
	req.Messages = slices.Clip(slices.Clone(r.msgs))
	req.Tools = tools
	req.ToolChoice = choice
	return req
}

func (r *run) now() time.Time { return r.l.clk.Now() }

// loop is the step loop: each step the model either calls one tool or
// finishes (see the package doc, "The agent loop").
func (r *run) loop(ctx context.Context) (*LoopResult, error) {
	for {
		if cancelled(ctx) {
			return nil, ctx.Err()
		}
		// 1. Step check.
		if r.steps >= r.maxSteps {
			return r.forced(ctx, FinishForcedSteps)
		}
		if !r.now().Before(r.plan) {
			return r.forced(ctx, FinishForcedReserve)
		}
		// Safety net: every call uses a step, a repair or a no-step quota.
		if r.calls >= r.maxSteps+r.l.cfg.Repairs+r.l.cfg.IntrospectionQuota+r.l.cfg.LoadQuota+2 {
			return r.forced(ctx, FinishForcedSteps)
		}
		// 2. Call the model under the planning deadline.
		resp, hit, err := r.generate(ctx, r.request(r.tools(), ""), r.plan)
		if err != nil {
			if cancelled(ctx) {
				return nil, ctx.Err()
			}
			if hit {
				return r.forced(ctx, FinishForcedReserve)
			}
			return nil, err
		}
		if len(resp.ToolCalls) == 0 {
			res, reason := r.finishCandidate(ctx, candidate{Text: resp.Text}, Message{Role: RoleAssistant, Content: resp.Text}, "")
			if res != nil {
				res.Finish = FinishPlainText
				return res, nil
			}
			if reason != "" {
				return r.forced(ctx, reason)
			}
			continue
		}
		// 3. Exactly one tool call per step.
		calls := slices.Clone(resp.ToolCalls)
		for i := range calls {
			if calls[i].ID == "" {
				calls[i].ID = fmt.Sprintf("call_%d_%d", r.calls, i)
			}
		}
		first := calls[0]
		if strings.TrimSpace(first.Name) == ToolFinalize {
			var c candidate
			if err := json.Unmarshal(nonEmpty(first.Arguments), &c); err != nil {
				r.appendStep(resp.Text, calls, "protocol error: agent_finalize arguments are not a JSON object with text, silent and time_sensitive")
				if reason := r.fail(ctx, "finalize_args"); reason != "" {
					return r.forced(ctx, reason)
				}
				continue
			}
			c.finalize = true
			r.timeSensitive = r.timeSensitive || c.TimeSensitive
			res, reason := r.finishCandidate(ctx, c, Message{Role: RoleAssistant, Content: resp.Text, ToolCalls: calls}, first.ID)
			if res != nil {
				res.Finish = FinishFinal
				return res, nil
			}
			if reason != "" {
				return r.forced(ctx, reason)
			}
			continue
		}
		obs, failed := r.step(ctx, first)
		r.appendStep(resp.Text, calls, obs)
		if failed != "" {
			if reason := r.fail(ctx, failed); reason != "" {
				return r.forced(ctx, reason)
			}
		}
	}
}

// cancelled reports whether ctx ended for another reason than its deadline
// (a lost lease, shutdown): the run is abandoned. A passed deadline instead
// leads to the forced finish and the fallbacks.
func cancelled(ctx context.Context) bool {
	err := ctx.Err()
	return err != nil && !errors.Is(err, context.DeadlineExceeded)
}

func nonEmpty(raw json.RawMessage) []byte {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return []byte("{}")
	}
	return raw
}

// appendStep records the assistant message with all its calls, the first
// call's observation and "not executed" for the rest.
func (r *run) appendStep(text string, calls []ToolCall, obs string) {
	r.msgs = append(r.msgs, Message{Role: RoleAssistant, Content: text, ToolCalls: calls})
	r.msgs = append(r.msgs, Message{Role: RoleTool, ToolCallID: calls[0].ID, Content: obs})
	for _, c := range calls[1:] {
		r.msgs = append(r.msgs, Message{Role: RoleTool, ToolCallID: c.ID,
			Content: "not executed: only the first tool call of a step runs; call it again in the next step if you still need it"})
	}
	if len(r.images) > 0 {
		// Tool messages carry text only: the pictures follow as a user
		// message (after every tool answer, as the protocol wants).
		parts := make([]Part, len(r.images))
		for i, u := range r.images {
			parts[i] = Part{ImageURL: u, Detail: "low"}
		}
		r.msgs = append(r.msgs, Message{Role: RoleUser, Content: fmt.Sprintf("[%d picture(s) returned by %s]", len(parts), calls[0].Name), Parts: parts})
		r.images = nil
	}
}

// fail spends one protocol repair; it returns the forced-finish reason when
// the repairs are exhausted.
func (r *run) fail(ctx context.Context, kind string) FinishReason {
	r.failures++
	r.l.log.LogAttrs(ctx, slog.LevelDebug, "agent_repair", slog.String("session", r.in.SessionKey),
		slog.String("check", kind), slog.Int("repairs", r.failures))
	if r.failures > r.l.cfg.Repairs {
		return FinishForcedRepairs
	}
	return ""
}

func (r *run) repairs() int { return min(r.failures, r.l.cfg.Repairs) }

// generate calls the model with a deadline on the loop's clock. hit reports
// that the deadline (not ctx) ended the call. A model that ignores its
// context is abandoned at the deadline; a panic becomes an error.
func (r *run) generate(ctx context.Context, req Request, until time.Time) (*Response, bool, error) {
	r.calls++
	cctx, cancel := r.l.deadlineCtx(ctx, until)
	defer cancel()
	type out struct {
		resp *Response
		err  error
	}
	ch := make(chan out, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- out{err: &Error{Kind: KindServer, Message: fmt.Sprintf("model panicked: %v", p)}}
			}
		}()
		resp, err := r.in.Model.Generate(cctx, req)
		ch <- out{resp, err}
	}()
	var o out
	select {
	case o = <-ch:
	case <-cctx.Done():
		o.err = cctx.Err()
	}
	hit := !cancelled(ctx) && (errors.Is(context.Cause(cctx), context.DeadlineExceeded) || !r.now().Before(until))
	if o.err == nil && o.resp == nil {
		o.err = &Error{Kind: KindServer, Message: "model returned no response"}
	}
	if o.err != nil {
		if hit {
			o.err = fmt.Errorf("agent: deadline reached: %w", o.err)
		}
		return nil, hit, o.err
	}
	r.usage = r.usage.Add(o.resp.Usage)
	r.model = o.resp.Model
	r.l.log.LogAttrs(ctx, slog.LevelDebug, "agent_model_call", slog.String("session", r.in.SessionKey),
		slog.Int("call", r.calls), slog.Int("tool_calls", len(o.resp.ToolCalls)), slog.Int("text_len", len(o.resp.Text)))
	return o.resp, false, nil
}

// deadlineCtx derives a context that ends at `at` on the loop's clock.
func (l *Loop) deadlineCtx(parent context.Context, at time.Time) (context.Context, context.CancelFunc) {
	if l.clk == clock.Real {
		return context.WithDeadline(parent, at)
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := l.clk.NewTimer(at.Sub(l.clk.Now()))
	go func() {
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
			t.Stop()
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// budget is the line attached to every observation.
func (r *run) budget() string {
	left := max(r.plan.Sub(r.now()), 0).Round(time.Second)
	return fmt.Sprintf("\n[budget: %d steps left, %s left, %d repairs left]", max(r.maxSteps-r.steps, 0), left, max(r.l.cfg.Repairs-r.failures, 0))
}

// step runs the pre-execution checks (loaded and valid arguments, known
// and permitted, lossless coercion, confirmation code, repeat, quotas; see
// the package doc) and, when they pass, the tool. failed names the failed check ("" = the call ran).
func (r *run) step(ctx context.Context, tc ToolCall) (obs, failed string) {
	name := strings.TrimSpace(tc.Name)
	args := tc.Arguments
	if name == "" {
		return "protocol error: a tool call needs a tool name." + r.budget(), "malformed"
	}
	if name == ToolsExecute {
		raw, err := validateArgs(builtinSchemas[ToolsExecute], args)
		if err != nil {
			return "protocol error: " + err.Error() + r.budget(), "schema"
		}
		var x struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		_ = json.Unmarshal(raw, &x)
		name, args = strings.TrimSpace(x.Name), x.Arguments
		if isBuiltin(name) {
			return "protocol error: call " + name + " directly, not through " + ToolsExecute + "." + r.budget(), "malformed"
		}
	}
	if name == ToolFinalize {
		return "protocol error: " + ToolFinalize + " must be the only call of its step." + r.budget(), "malformed"
	}
	var e *toolEntry
	var schema *schemaNode
	builtin := isBuiltin(name)
	if builtin {
		schema = builtinSchemas[name]
	} else {
		e = r.l.cfg.Registry.entry(name)
	}
	permitted := builtin || (e != nil && r.allowed(e))
	// 1. Deferred tool loaded, arguments pass its schema.
	if e != nil && permitted {
		if !e.core && !r.loaded[name] {
			return fmt.Sprintf("protocol error: %s is a catalog tool; load it with %s first.", name, ToolsLoad) + r.budget(), "not_loaded"
		}
		schema = e.schema
	}
	var coerced json.RawMessage
	if permitted {
		var err error
		if coerced, err = validateArgs(schema, args); err != nil {
			return "protocol error: " + err.Error() + r.budget(), "schema"
		}
	}
	// 2. Unknown or denied.
	if e == nil && !builtin {
		return fmt.Sprintf("protocol error: tool %q does not exist.", name) + r.budget(), "unknown"
	}
	if !permitted {
		return fmt.Sprintf("no permission: you may not use %s in this conversation.", name) + r.budget(), "denied"
	}
	// 3. Lossless input coercion (done by the schema check).
	args = coerced
	// 4. Extension changes need the owner's confirmation code.
	if e != nil && e.extension {
		confirmed := r.in.Owner && r.in.SessionKey != "" && r.l.cfg.Confirm.Redeem(r.in.SessionKey, name, r.in.Message)
		if !confirmed {
			code := r.l.cfg.Confirm.Issue(r.in.SessionKey, name)
			return fmt.Sprintf("confirmation needed: %s changes the bot's extensions. Ask the owner to reply with the code %s (valid %s); the change runs on a later turn when the owner's message contains it.",
				name, code, r.l.cfg.Confirm.ttl) + r.budget(), "confirmation"
		}
	}
	// 5. An identical repeat of the previous call is skipped.
	key := name + "\x00" + string(args)
	if key == r.lastKey {
		return "skipped: identical to the previous call; use its result above." + r.budget(), "repeat"
	}
	// 6. Quotas.
	noStep := name == ToolsLoad || (e != nil && e.introspection)
	switch {
	case name == ToolsLoad && r.loads >= r.l.cfg.LoadQuota:
		return fmt.Sprintf("quota: %s may be used %d times per turn.", ToolsLoad, r.l.cfg.LoadQuota) + r.budget(), "quota"
	case e != nil && e.introspection && r.introspections >= r.l.cfg.IntrospectionQuota:
		return fmt.Sprintf("quota: introspection tools may be used %d times per turn.", r.l.cfg.IntrospectionQuota) + r.budget(), "quota"
	}
	if q := r.quotaOf(name, e); q > 0 && r.quota[name] >= q {
		return fmt.Sprintf("quota: %s may be used %d times per turn.", name, q) + r.budget(), "quota"
	}
	// 5. Run the tool; 6. shape the result.
	r.lastKey = key
	r.quota[name]++
	switch {
	case name == ToolsLoad:
		r.loads++
	case e != nil && e.introspection:
		r.introspections++
	}
	if !noStep {
		r.steps++
	}
	out := r.runTool(ctx, name, e, args)
	rec := CallRecord{Tool: name, Args: short(string(args), 120), Result: short(out, 160), At: r.now()}
	r.records = append(r.records, rec)
	r.summaries = append(r.summaries, fmt.Sprintf("%s(%s) → %s", rec.Tool, rec.Args, rec.Result))
	r.l.log.LogAttrs(ctx, slog.LevelDebug, "agent_tool", slog.String("session", r.in.SessionKey),
		slog.String("tool", name), slog.Int("step", r.steps), slog.Int("out_len", len(out)))
	return out + r.budget(), ""
}

func (r *run) quotaOf(name string, e *toolEntry) int {
	if e != nil && e.quota > 0 {
		return e.quota
	}
	return r.l.cfg.Quotas[name]
}

// runTool runs a tool under its timeout (bounded by the planning deadline)
// and shapes the observation.
func (r *run) runTool(ctx context.Context, name string, e *toolEntry, args json.RawMessage) string {
	switch name {
	case ToolSay:
		return r.say(ctx, args)
	case ToolsLoad:
		return r.load(args)
	}
	timeout := r.l.cfg.ToolTimeout
	if e.timeout > 0 {
		timeout = e.timeout
	}
	started := r.now()
	until := started.Add(timeout)
	if r.plan.Before(until) {
		until = r.plan
	}
	env := &toolEnv{}
	tctx, cancel := r.l.deadlineCtx(context.WithValue(ctx, toolEnvKey{}, env), until)
	defer cancel()
	type out struct {
		res ToolResult
		err error
	}
	ch := make(chan out, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- out{err: fmt.Errorf("tool panicked: %v", p)}
			}
		}()
		if rt, ok := e.tool.(ResultTool); ok {
			res, err := rt.CallResult(tctx, args)
			ch <- out{res, err}
			return
		}
		text, err := e.tool.Call(tctx, args)
		ch <- out{ToolResult{Text: text}, err}
	}()
	var o out
	select {
	case o = <-ch:
	case <-tctx.Done():
		o.err = tctx.Err()
	}
	var text string
	switch {
	case o.err != nil && tctx.Err() != nil && !cancelled(ctx):
		text = fmt.Sprintf("error: %s timed out after %s", name, until.Sub(started).Round(time.Second))
	case o.err != nil:
		text = "error: " + o.err.Error()
		if o.res.Text != "" {
			text += "\n" + o.res.Text
		}
	default:
		text = o.res.Text
		if r.l.cfg.ToolImages {
			for _, u := range o.res.Images {
				if len(r.images) < MaxToolImages && strings.HasPrefix(u, "data:image/") {
					r.images = append(r.images, u)
				}
			}
		}
	}
	ev, image := env.take()
	if image {
		r.image = true
	}
	ev = append(ev, o.res.Evidence...)
	for _, x := range ev {
		if x.URL == "" {
			continue
		}
		x.Tool = name
		x.Title = short(maskSecrets(x.Title, r.l.cfg.Secrets), 200)
		x.Excerpt = short(maskSecrets(x.Excerpt, r.l.cfg.Secrets), 500)
		r.evidence = append(r.evidence, x)
	}
	return truncateRunes(maskSecrets(text, r.l.cfg.Secrets), r.l.cfg.ToolOutputChars)
}

func (r *run) say(ctx context.Context, args json.RawMessage) string {
	var x struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(args, &x)
	text := strings.TrimSpace(x.Text)
	switch {
	case text == "":
		return "error: say needs a non-empty text"
	case r.in.Say == nil:
		return "error: say is not available in this conversation"
	case slices.Contains(r.said, text):
		return "already said; not sent again"
	}
	if err := r.in.Say(ctx, text); err != nil {
		return "error: the line was not sent: " + err.Error()
	}
	r.said = append(r.said, text)
	return "sent. Do not repeat this line in the final reply."
}

func (r *run) load(args json.RawMessage) string {
	var x struct {
		Names []string `json:"names"`
	}
	_ = json.Unmarshal(args, &x)
	var b strings.Builder
	for _, n := range x.Names {
		n = strings.TrimSpace(n)
		e := r.l.cfg.Registry.entry(n)
		switch {
		case isBuiltin(n) || (e != nil && e.core && r.allowed(e)):
			fmt.Fprintf(&b, "%s: already callable directly.\n", n)
		case e == nil:
			fmt.Fprintf(&b, "%s: does not exist.\n", n)
		case !r.allowed(e):
			fmt.Fprintf(&b, "%s: no permission.\n", n)
		default:
			r.loaded[n] = true
			params := string(e.spec.Parameters)
			if params == "" {
				params = `{"type":"object"}`
			}
			fmt.Fprintf(&b, "%s: %s\nparameters: %s\n", n, e.purpose, params)
		}
	}
	if b.Len() == 0 {
		return "no tool names given"
	}
	return strings.TrimRight(b.String(), "\n") + "\nRun them with " + ToolsExecute + "."
}
