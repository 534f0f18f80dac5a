package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
)

// candidate is a final answer: agent_finalize's arguments or plain text.
type candidate struct {
	Text          string `json:"text"`
	Silent        bool   `json:"silent"`
	TimeSensitive bool   `json:"time_sensitive"`
	finalize      bool
}

// finishCandidate runs the finish checks (silence, line breaks, evidence,
// links, protocol words, empty text; each repaired once). It returns the result
// when the candidate is accepted, a forced-finish reason when the run must
// be forced to finish, or neither after a repair message was appended.
func (r *run) finishCandidate(ctx context.Context, c candidate, asst Message, callID string) (*LoopResult, FinishReason) {
	kind, msg := r.checkFinish(c)
	if kind == "" {
		return r.accept(c), ""
	}
	r.msgs = append(r.msgs, asst)
	notice := "finish check failed: " + msg + r.budget()
	if callID != "" {
		r.msgs = append(r.msgs, Message{Role: RoleTool, ToolCallID: callID, Content: notice})
		for _, tc := range asst.ToolCalls[1:] {
			r.msgs = append(r.msgs, Message{Role: RoleTool, ToolCallID: tc.ID, Content: "not executed: the step ended with " + ToolFinalize})
		}
	} else {
		r.msgs = append(r.msgs, Message{Role: RoleSystem, Content: notice})
	}
	again := r.repaired[kind]
	r.repaired[kind] = true
	reason := r.fail(ctx, "finish_"+kind)
	switch {
	case again && kind == "evidence":
		return nil, FinishForcedEvidence
	case again:
		return nil, FinishForcedRepairs
	}
	return nil, reason
}

var blankLinesRE = regexp.MustCompile(`\n{2,}`)

var urlRE = regexp.MustCompile(`https?://[^\s<>"'\x60\])}]+`)

var leakPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)</?(tool_call|tool_use|function_call|function|invoke|parameter)\b`),
	regexp.MustCompile(`"(arguments|tool_calls|tool_call_id|parameters|properties|required|function)"\s*:`),
	regexp.MustCompile(`\btool_call_id\b|\bToolCall\b`),
	regexp.MustCompile(`\[\[[A-Za-z0-9_ ]*\]\]`),
	regexp.MustCompile(`\[budget: `),
}

// leak returns the first internal protocol word in text.
func (r *run) leak(text string) string {
	names := []string{ToolFinalize, ToolsLoad, ToolsExecute}
	for _, n := range r.l.cfg.Registry.Names() {
		if strings.ContainsAny(n, "_") {
			names = append(names, n)
		}
	}
	for _, n := range names {
		if strings.Contains(text, n) {
			return n
		}
	}
	for _, re := range leakPatterns {
		for _, m := range re.FindAllString(text, -1) {
			switch m {
			case MarkerSilent, MarkerPause, MarkerRefuse, MarkerNoImage:
				continue
			}
			return m
		}
	}
	// Marker syntax other than the configured markers.
	if prefix, ok := markerPrefix(r.l.cfg.MsgMarker); ok {
		rest := strings.NewReplacer(r.l.cfg.MsgMarker, "", r.l.cfg.LineMarker, "").Replace(text)
		for i := strings.Index(rest, prefix); i >= 0; i = strings.Index(rest, prefix) {
			tail := rest[i+len(prefix):]
			if !strings.HasPrefix(tail, "reply:") && !strings.HasPrefix(tail, "at:") {
				return prefix
			}
			rest = tail
		}
	}
	return ""
}

// markerPrefix is "[persona-" for "[persona-msg]".
func markerPrefix(m string) (string, bool) {
	i := strings.IndexByte(m, '-')
	if !strings.HasPrefix(m, "[") || i < 0 {
		return "", false
	}
	return m[:i+1], true
}

// body is the visible text: markers removed, trimmed.
func (r *run) body(text string) string {
	text = strings.NewReplacer(r.l.cfg.MsgMarker, "", r.l.cfg.LineMarker, "",
		MarkerSilent, "", MarkerPause, "", MarkerRefuse, "", MarkerNoImage, "").Replace(text)
	return strings.TrimSpace(text)
}

// linkKnown reports whether a URL was fetched this run or seen in the
// conversation (user, system or tool messages).
func (r *run) linkKnown(u string) bool {
	norm := strings.TrimRight(u, "/")
	for _, e := range r.evidence {
		if strings.TrimRight(e.URL, "/") == norm {
			return true
		}
	}
	for _, m := range r.msgs {
		if m.Role != RoleAssistant && strings.Contains(m.Content, norm) {
			return true
		}
	}
	return false
}

func (r *run) imageQueued() bool {
	if r.image {
		return true
	}
	if r.in.ImageQueued != nil && r.in.ImageQueued() {
		r.image = true
	}
	return r.image
}

// checkFinish returns the first failed finish check and its repair message.
func (r *run) checkFinish(c candidate) (kind, msg string) {
	text := strings.TrimSpace(c.Text)
	body := r.body(text)
	// 1. silent.
	if c.Silent || (strings.Contains(text, MarkerSilent) && body == "") {
		if r.imageQueued() {
			return "silence", "an image job is queued for this turn, so silence is not allowed; tell them the image is on its way."
		}
		return "", ""
	}
	// 2. Real line breaks.
	if strings.ContainsAny(text, "\n\r") {
		return "line_breaks", fmt.Sprintf("the reply has real line breaks; put %s between chat messages and %s for a line break inside one.", r.l.cfg.MsgMarker, r.l.cfg.LineMarker)
	}
	// 3. Evidence and links.
	if (r.in.EvidenceRequired || c.TimeSensitive) && len(r.evidence) == 0 {
		return "evidence", "this reply needs sources: search or fetch a page first, then finish based on what you found."
	}
	for _, u := range urlRE.FindAllString(text, -1) {
		u = strings.TrimRight(u, ".,;:!?")
		if !r.linkKnown(u) {
			return "links", "the link " + u + " was neither fetched this turn nor seen in the conversation; fetch it first or leave it out."
		}
	}
	// 4. Leaked protocol words; empty text.
	if w := r.leak(text); w != "" {
		return "leak", fmt.Sprintf("the reply contains internal protocol text (%q); call tools through the tool interface and write only what the chat should read.", w)
	}
	if body == "" && !strings.Contains(text, MarkerPause) && !strings.Contains(text, MarkerRefuse) &&
		len(r.said) == 0 && !r.imageQueued() {
		return "empty", "the reply is empty; write the reply (or finish with silent=true to say nothing)."
	}
	return "", ""
}

// accept turns a candidate that passed the checks into the result.
func (r *run) accept(c candidate) *LoopResult {
	text := strings.TrimSpace(c.Text)
	if c.Silent || (strings.Contains(text, MarkerSilent) && r.body(text) == "") {
		return r.result(MarkerSilent, "", true)
	}
	if r.body(text) == "" {
		return r.fallback(text, false)
	}
	return r.result(cutRunes(text, r.maxChars), "", false)
}

// fallback is the empty-generation fallback chain (pause line, refusal
// text, queued-image line, silence after say, the fallback text), with the
// evidence digest of a failed forced finish when digest is set.
func (r *run) fallback(raw string, digest bool) *LoopResult {
	switch {
	case strings.Contains(raw, MarkerPause):
		return r.result(r.l.cfg.PauseText+MarkerPause, FallbackPause, false)
	case strings.Contains(raw, MarkerRefuse):
		return r.result(r.l.cfg.RefusalText+MarkerRefuse, FallbackRefusal, false)
	case r.imageQueued():
		return r.result(r.l.cfg.QueuedImageText, FallbackQueuedImage, false)
	case digest && len(r.evidence) > 0:
		return r.result(cutRunes(r.digest(), r.maxChars), FallbackDigest, false)
	case len(r.said) > 0:
		return r.result(MarkerSilent, FallbackSaid, true)
	}
	return r.result(r.l.cfg.FallbackText, FallbackLine, false)
}

// digest is a reply built only from the evidence ledger.
func (r *run) digest() string {
	parts := []string{"Here's what I found:"}
	seen := map[string]bool{}
	for _, e := range r.evidence {
		if seen[e.URL] || len(parts) > 5 {
			continue
		}
		seen[e.URL] = true
		line := e.URL
		if e.Title != "" {
			line = e.Title + " — " + e.URL
		}
		if e.Excerpt != "" {
			line += " (" + short(e.Excerpt, 160) + ")"
		}
		parts = append(parts, line)
	}
	return strings.Join(parts, r.l.cfg.LineMarker)
}

func (r *run) result(text, fallback string, silent bool) *LoopResult {
	return &LoopResult{
		Result:        Result{Text: text, Usage: r.usage, Model: r.model, Calls: r.calls},
		Fallback:      fallback,
		Silent:        silent,
		Steps:         r.steps,
		Repairs:       r.repairs(),
		Said:          slices.Clone(r.said),
		Evidence:      slices.Clone(r.evidence),
		ToolCalls:     slices.Clone(r.records),
		TimeSensitive: r.timeSensitive,
	}
}

// forced is the forced finish: only agent_finalize is offered,
// forced, under the request deadline; if that fails, the evidence digest,
// else the fallback line.
func (r *run) forced(ctx context.Context, reason FinishReason) (*LoopResult, error) {
	r.l.log.LogAttrs(ctx, slog.LevelInfo, "agent_forced_finish", slog.String("session", r.in.SessionKey),
		slog.String("reason", string(reason)), slog.Int("steps", r.steps), slog.Int("repairs", r.repairs()))
	var b strings.Builder
	b.WriteString("Finish now: no more tools. Call " + ToolFinalize + " with your final reply, based only on what you already know and found. ")
	fmt.Fprintf(&b, "Use %s between chat messages and %s for line breaks.", r.l.cfg.MsgMarker, r.l.cfg.LineMarker)
	if len(r.evidence) > 0 {
		b.WriteString("\nEvidence gathered:")
		for _, e := range r.evidence {
			fmt.Fprintf(&b, "\n- %s %s: %s", e.Title, e.URL, short(e.Excerpt, 200))
		}
	}
	r.msgs = append(r.msgs, Message{Role: RoleSystem, Content: b.String()})
	finish := func(res *LoopResult) (*LoopResult, error) {
		res.Finish = reason
		return res, nil
	}
	if r.now().Before(r.deadline) {
		resp, _, err := r.generate(ctx, r.request([]ToolSpec{finalizeSpec}, ToolFinalize), r.deadline)
		if err != nil && cancelled(ctx) {
			return nil, ctx.Err()
		}
		if err == nil {
			if c, ok := forcedCandidate(resp); ok {
				if res := r.salvage(c); res != nil {
					return finish(res)
				}
			}
		} else {
			r.l.log.LogAttrs(ctx, slog.LevelWarn, "agent_forced_finish_failed", slog.String("session", r.in.SessionKey), slog.Any("err", err))
		}
	}
	return finish(r.fallback("", true))
}

func forcedCandidate(resp *Response) (candidate, bool) {
	if len(resp.ToolCalls) == 0 {
		return candidate{Text: resp.Text}, true
	}
	tc := resp.ToolCalls[0]
	if strings.TrimSpace(tc.Name) != ToolFinalize {
		return candidate{}, false
	}
	var c candidate
	if err := json.Unmarshal(nonEmpty(tc.Arguments), &c); err != nil {
		return candidate{}, false
	}
	return c, true
}

// salvage accepts a forced-finish answer without repairs: real line breaks
// become markers; leaked protocol text or unfetched links reject it (nil).
func (r *run) salvage(c candidate) *LoopResult {
	text := strings.TrimSpace(c.Text)
	if c.Silent || (strings.Contains(text, MarkerSilent) && r.body(text) == "") {
		if r.imageQueued() {
			return r.result(r.l.cfg.QueuedImageText, FallbackQueuedImage, false)
		}
		return r.result(MarkerSilent, "", true)
	}
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = blankLinesRE.ReplaceAllString(text, r.l.cfg.MsgMarker)
	text = strings.ReplaceAll(text, "\n", r.l.cfg.LineMarker)
	if r.leak(text) != "" {
		return nil
	}
	for _, u := range urlRE.FindAllString(text, -1) {
		if !r.linkKnown(strings.TrimRight(u, ".,;:!?")) {
			return nil
		}
	}
	if r.body(text) == "" {
		if strings.Contains(text, MarkerPause) || strings.Contains(text, MarkerRefuse) {
			return r.fallback(text, false)
		}
		return nil
	}
	return r.result(cutRunes(text, r.maxChars), "", false)
}

// remember stores the turn's tool calls, the carry-over archive after a
// forced finish, and the group snapshot of loaded tools.
func (r *run) remember(ctx context.Context, res *LoopResult) {
	key := r.in.SessionKey
	if key == "" {
		return
	}
	carry := r.l.cfg.Carry
	if len(r.records) > 0 {
		carry.AddCalls(key, r.records...)
	}
	if res.Finish.Forced() && len(r.summaries) > 0 {
		carry.SetArchive(key, r.summaries)
	} else {
		carry.ClearArchive(key)
	}
	if r.in.Group && r.l.cfg.Snapshots != nil && len(r.loaded) > 0 {
		names := make([]string, 0, len(r.loaded))
		for n := range r.loaded {
			names = append(names, n)
		}
		slices.Sort(names)
		if err := r.l.cfg.Snapshots.SaveSnapshot(ctx, key, ToolSnapshot{Loaded: names, SavedAt: r.now()}); err != nil {
			r.l.log.LogAttrs(ctx, slog.LevelWarn, "agent_snapshot_save_failed", slog.String("session", key), slog.Any("err", err))
		}
	}
}
