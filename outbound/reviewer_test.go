package outbound_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

const (
	groupKey   = "chantest:bot:group:g1"
	privateKey = "chantest:bot:private:u1"
)

// proposal returns a proposal from user u1: an unprompted group reply, or
// a direct private one.
func proposal(private, direct bool, text string) outbound.Proposal {
	p := outbound.Proposal{TurnID: "t1", SessionKey: groupKey, Text: text, Direct: direct,
		Event: channel.Event{Chat: groupChat, MessageID: "in-1", Sender: channel.Sender{ID: "u1", Name: "Ann"},
			Segments: []channel.Segment{channel.Text("hello bot")}}}
	if private {
		p.SessionKey = privateKey
		p.Event.Chat = channel.Chat{Kind: channel.Private, ID: "u1"}
	}
	return p
}

// audit answers of the scripted audit model.
const (
	auditPass       = `{"quality":{"ok":true,"problems":[],"send_confidence":0.95},"safety":{"score":0.9},"refusal":{"is_refusal":false,"confidence":0.1},"closing":{"kind":"none","confidence":0.9},"group_stop":{"requested":false,"confidence":0.9},"loop":{"hit":false,"confidence":0.9}}`
	auditLowQuality = `{"quality":{"ok":true,"problems":[],"send_confidence":0.5}}`
	auditProblems   = `{"quality":{"ok":false,"problems":["off_topic"],"send_confidence":0.95}}`
	auditStop       = `{"closing":{"kind":"stop","confidence":0.95},"safety":{"score":0.01},"quality":{"ok":true,"send_confidence":1}}`
	auditWeakStop   = `{"closing":{"kind":"stop","confidence":0.85}}`
	auditGoodbye    = "```json\n{\"closing\":{\"kind\":\"goodbye\",\"confidence\":0.97}}\n```"
	auditGroupStop  = `{"group_stop":{"requested":true,"confidence":0.93}}`
	auditLoop       = `{"loop":{"hit":true,"confidence":0.95},"safety":{"score":0.01},"quality":{"ok":true,"send_confidence":1}}`
	auditUnsafe     = `{"safety":{"score":0.05},"quality":{"ok":false,"send_confidence":0.1}}`
	auditRiskOK     = `{"safety":{"score":0.2}}`
	auditRefusal    = `{"refusal":{"is_refusal":true,"confidence":0.95},"safety":{"score":0.9}}`
)

func ans(text string) agenttest.Step { return agenttest.Reply(text) }

// hits formats a hit counter with hits the given durations before t0.
func hits(ago ...time.Duration) string {
	var parts []string
	for _, a := range ago {
		parts = append(parts, strconv.FormatInt(t0.Add(-a).UnixMilli(), 10))
	}
	return strings.Join(parts, ",")
}

func TestModelReviewerVerdicts(t *testing.T) {
	t.Parallel()
	boom := &agent.Error{Kind: agent.KindServer, Message: "503"}
	recent := func(ago time.Duration) []outbound.BotReply {
		return []outbound.BotReply{{Text: "the park opens at nine", At: t0.Add(-ago)}}
	}
	type want struct {
		send       bool
		text       string
		code       outcome.Code
		regenerate bool
		paused     bool
		stopWindow bool
		rewritten  bool
		calls      int // model calls
	}
	tests := []struct {
		name   string
		p      outbound.Proposal
		edit   func(p *outbound.Proposal)
		dedup  []agenttest.Step
		audit  []agenttest.Step
		before func(ctx context.Context, st *outbound.MemoryState)
		cfg    func(c *outbound.ReviewConfig)
		want   want
	}{
		// 1. Images the model could not see.
		{name: "no image: regenerate from descriptions", p: proposal(true, true, "[[NO_IMAGE]]"),
			edit: func(p *outbound.Proposal) { p.HasImages = true }, want: want{regenerate: true}},
		{name: "no image after a side effect: no regeneration", p: proposal(true, true, "[[NO_IMAGE]]"),
			edit: func(p *outbound.Proposal) { p.HasImages, p.SideEffect = true, true },
			want: want{send: true, text: outbound.FallbackText, code: outcome.RepliedFallback}},
		{name: "no image, already from descriptions: only once", p: proposal(true, true, "[[NO_IMAGE]]I see a cat"),
			edit: func(p *outbound.Proposal) { p.HasImages, p.FromDescriptions = true, true },
			want: want{send: true, text: "I see a cat", code: outcome.Replied}},
		// 2. Silence.
		{name: "silence allowed", p: proposal(false, false, "[[SILENT]]"), want: want{code: outbound.IgnoredModelSilent}},
		{name: "silence refused after a side effect: fallback", p: proposal(true, true, "[[SILENT]]"),
			edit: func(p *outbound.Proposal) { p.SideEffect = true },
			want: want{send: true, text: outbound.FallbackText, code: outcome.RepliedFallback}},
		{name: "silence refused with a factual result", p: proposal(true, true, "[[SILENT]]"),
			edit: func(p *outbound.Proposal) { p.FactualResult = true },
			want: want{send: true, text: outbound.FallbackText, code: outcome.RepliedFallback}},
		{name: "silence refused with a queued image", p: proposal(true, true, "[[SILENT]]"),
			edit: func(p *outbound.Proposal) { p.QueuedImage = true },
			want: want{send: true, text: outbound.QueuedImageText, code: outcome.RepliedFallback}},
		{name: "silence refused, say already spoke", p: proposal(true, true, "[[SILENT]]"),
			edit: func(p *outbound.Proposal) { p.SideEffect, p.Said = true, []string{"done!"} },
			want: want{code: outcome.Replied}},
		// 3. Empty or refusal.
		{name: "empty unprompted", p: proposal(false, false, " "), want: want{code: outbound.IgnoredNoNaturalReply}},
		{name: "refusal unprompted", p: proposal(false, false, "[[REFUSE]]no"), want: want{code: outbound.IgnoredNoNaturalReply}},
		{name: "empty direct: fallback", p: proposal(true, true, ""), want: want{send: true, text: outbound.FallbackText, code: outcome.RepliedFallback}},
		// 4. Markers.
		{name: "bare refuse direct: fixed text", p: proposal(true, true, "[[REFUSE]]"), want: want{send: true, text: outbound.RefusalText, code: outcome.Replied}},
		{name: "bare pause direct: one line and a pause", p: proposal(true, true, "[[PAUSE_30M]]"),
			want: want{send: true, text: outbound.PauseText, code: outcome.Replied, paused: true}},
		{name: "pause with text: text sent, paused", p: proposal(true, true, "ok, bye for now[[PAUSE_30M]]"),
			want: want{send: true, text: "ok, bye for now", code: outcome.Replied, paused: true}},
		{name: "pause by the owner: no pause", p: proposal(true, true, "[[PAUSE_30M]]"),
			edit: func(p *outbound.Proposal) { p.Owner = true },
			want: want{send: true, text: outbound.PauseText, code: outcome.Replied}},
		// 5. say.
		{name: "everything already said", p: proposal(true, true, "Done."),
			edit: func(p *outbound.Proposal) { p.Said = []string{"done"} }, want: want{code: outcome.Replied}},
		{name: "said part dropped", p: proposal(true, true, "done[persona-msg]anything else?"),
			edit: func(p *outbound.Proposal) { p.Said = []string{"done"} },
			want: want{send: true, text: "anything else?", code: outcome.Replied}},
		// 7. Dedup.
		{name: "dedup drop unprompted", p: proposal(false, false, "the park opens at 9"),
			edit:  func(p *outbound.Proposal) { p.Recent = recent(time.Minute) },
			dedup: []agenttest.Step{ans(`{"verdict":"drop","confidence":0.95}`)}, audit: []agenttest.Step{ans(auditPass)},
			want: want{code: outbound.IgnoredDuplicateReply, calls: 2}},
		{name: "dedup drop direct: sent anyway", p: proposal(true, true, "the park opens at 9"),
			edit:  func(p *outbound.Proposal) { p.Recent = recent(time.Minute) },
			dedup: []agenttest.Step{ans(`{"verdict":"drop","confidence":0.95}`)}, audit: []agenttest.Step{ans(auditPass)},
			want: want{send: true, text: "the park opens at 9", code: outcome.Replied, calls: 2}},
		{name: "dedup low confidence passes", p: proposal(false, false, "the park opens at 9"),
			edit:  func(p *outbound.Proposal) { p.Recent = recent(time.Minute) },
			dedup: []agenttest.Step{ans(`{"verdict":"drop","confidence":0.89}`)}, audit: []agenttest.Step{ans(auditPass)},
			want: want{send: true, text: "the park opens at 9", code: outcome.RepliedProactive, calls: 2}},
		{name: "dedup error passes", p: proposal(false, false, "the park opens at 9"),
			edit:  func(p *outbound.Proposal) { p.Recent = recent(time.Minute) },
			dedup: []agenttest.Step{agenttest.Fail(context.DeadlineExceeded)}, audit: []agenttest.Step{ans(auditPass)},
			want: want{send: true, text: "the park opens at 9", code: outcome.RepliedProactive, calls: 2}},
		{name: "dedup unparsable passes", p: proposal(false, false, "the park opens at 9"),
			edit:  func(p *outbound.Proposal) { p.Recent = recent(time.Minute) },
			dedup: []agenttest.Step{ans("sure!")}, audit: []agenttest.Step{ans(auditPass)},
			want: want{send: true, text: "the park opens at 9", code: outcome.RepliedProactive, calls: 2}},
		{name: "dedup rewrite re-runs the audit", p: proposal(false, false, "the park opens at 9, bring water"),
			edit:  func(p *outbound.Proposal) { p.Recent = recent(time.Minute) },
			dedup: []agenttest.Step{ans(`{"verdict":"rewrite","confidence":0.95,"text":"bring water"}`)},
			audit: []agenttest.Step{ans(auditPass), ans(auditPass)},
			want:  want{send: true, text: "bring water", code: outcome.RepliedProactive, rewritten: true, calls: 3}},
		{name: "dedup rewrite, the new text fails the audit", p: proposal(false, false, "the park opens at 9, bring water"),
			edit:  func(p *outbound.Proposal) { p.Recent = recent(time.Minute) },
			dedup: []agenttest.Step{ans(`{"verdict":"rewrite","confidence":0.95,"text":"bring water"}`)},
			audit: []agenttest.Step{ans(auditPass), ans(auditLowQuality)},
			want:  want{code: outbound.IgnoredProactiveReplyQuality, rewritten: true, calls: 3}},
		{name: "no dedup after 2 minutes", p: proposal(false, false, "the park opens at 9"),
			edit:  func(p *outbound.Proposal) { p.Recent = recent(3 * time.Minute) },
			audit: []agenttest.Step{ans(auditPass)},
			want:  want{send: true, text: "the park opens at 9", code: outcome.RepliedProactive, calls: 1}},
		{name: "no dedup for a direct plugin reply", p: proposal(false, true, "the park opens at 9"),
			edit:  func(p *outbound.Proposal) { p.Recent, p.Plugin = recent(time.Minute), true },
			audit: []agenttest.Step{ans(auditPass)},
			want:  want{send: true, text: "the park opens at 9", code: outcome.Replied, calls: 1}},
		// 8.1 Audit failure.
		{name: "audit error unprompted: silent", p: proposal(false, false, "nice"), audit: []agenttest.Step{agenttest.Fail(boom)},
			want: want{code: outbound.IgnoredAuditUnavailable, calls: 1}},
		{name: "audit timeout unprompted: silent", p: proposal(false, false, "nice"), audit: []agenttest.Step{agenttest.Fail(context.DeadlineExceeded)},
			want: want{code: outbound.IgnoredAuditUnavailable, calls: 1}},
		{name: "audit unparsable unprompted: silent", p: proposal(false, false, "nice"), audit: []agenttest.Step{ans("looks fine to me")},
			want: want{code: outbound.IgnoredAuditUnavailable, calls: 1}},
		{name: "audit error direct: sent", p: proposal(false, true, "nice"), audit: []agenttest.Step{agenttest.Fail(boom)},
			want: want{send: true, text: "nice", code: outcome.Replied, calls: 1}},
		// 8.2 Private closing.
		{name: "private stop: ignored, paused", p: proposal(true, true, "ok"),
			edit: func(p *outbound.Proposal) { p.Recent = recent(2 * time.Minute) }, dedup: []agenttest.Step{ans(`{"verdict":"keep","confidence":0.99}`)}, audit: []agenttest.Step{ans(auditStop)},
			want: want{code: outbound.CodeStopRequested(), paused: true, calls: 2}},
		{name: "private stop by the owner: not paused", p: proposal(true, true, "ok"),
			edit: func(p *outbound.Proposal) { p.Recent, p.Owner = recent(2*time.Minute), true }, dedup: []agenttest.Step{ans(`{"verdict":"keep","confidence":0.99}`)}, audit: []agenttest.Step{ans(auditStop)},
			want: want{code: outbound.CodeStopRequested(), calls: 2}},
		{name: "private stop below 0.90 counts for nothing", p: proposal(true, true, "ok"),
			edit: func(p *outbound.Proposal) { p.Recent = recent(time.Minute) }, dedup: []agenttest.Step{ans(`{"verdict":"keep","confidence":0.99}`)}, audit: []agenttest.Step{ans(auditWeakStop)},
			want: want{send: true, text: "ok", code: outcome.Replied, calls: 2}},
		{name: "closing not judged after 3 minutes (the loop still is)", p: proposal(true, true, "ok"),
			edit: func(p *outbound.Proposal) { p.Recent = recent(4 * time.Minute) }, audit: []agenttest.Step{ans(auditPass)},
			want: want{send: true, text: "ok", code: outcome.Replied, calls: 1}},
		{name: "closing window from the proposal's LastBotMessage", p: proposal(true, true, "ok"),
			edit:  func(p *outbound.Proposal) { p.LastBotMessage = t0.Add(-time.Minute) },
			audit: []agenttest.Step{ans(auditStop)},
			want:  want{code: outbound.CodeStopRequested(), paused: true, calls: 1}},
		{name: "an old LastBotMessage opens no closing window", p: proposal(true, true, "ok"),
			edit: func(p *outbound.Proposal) { p.LastBotMessage = t0.Add(-4 * time.Minute) },
			want: want{send: true, text: "ok", code: outcome.Replied}},
		{name: "closing window from the state store", p: proposal(true, true, "ok"),
			before: func(ctx context.Context, st *outbound.MemoryState) {
				_ = outbound.RecordBotMessage(ctx, st, privateKey, t0.Add(-time.Minute))
			},
			audit: []agenttest.Step{ans(auditStop)},
			want:  want{code: outbound.CodeStopRequested(), paused: true, calls: 1}},
		{name: "first goodbye answered", p: proposal(true, true, "bye!"),
			edit: func(p *outbound.Proposal) { p.Recent = recent(time.Minute) }, dedup: []agenttest.Step{ans(`{"verdict":"keep","confidence":0.99}`)}, audit: []agenttest.Step{ans(auditGoodbye)},
			want: want{send: true, text: "bye!", code: outcome.Replied, calls: 2}},
		{name: "second goodbye: closed", p: proposal(true, true, "bye again!"),
			edit: func(p *outbound.Proposal) { p.Recent = recent(time.Minute) }, dedup: []agenttest.Step{ans(`{"verdict":"keep","confidence":0.99}`)}, audit: []agenttest.Step{ans(auditGoodbye)},
			before: func(ctx context.Context, st *outbound.MemoryState) {
				_ = st.SetState(ctx, outbound.State{SessionKey: privateKey, Subject: "u1", Name: outbound.StateGoodbyes,
					Until: t0.Add(time.Hour), Value: hits(time.Minute)})
			},
			want: want{code: outbound.IgnoredConversationClosed, calls: 2}},
		// 8.3 Group stop.
		{name: "group stop opens a window, reply still sent", p: proposal(false, true, "sorry!"),
			audit: []agenttest.Step{ans(auditGroupStop)},
			want:  want{send: true, text: "sorry!", code: outcome.Replied, stopWindow: true, calls: 1}},
		{name: "group stop judged only when the bot is addressed", p: proposal(false, false, "hm"),
			audit: []agenttest.Step{ans(auditGroupStop + "")}, // quality missing → failure
			want:  want{code: outbound.IgnoredAuditUnavailable, calls: 1}},
		// 8.4 Loops.
		{name: "third loop hit: pause with notice", p: proposal(false, false, "ha"),
			edit: func(p *outbound.Proposal) { p.Recent = recent(5 * time.Minute) }, audit: []agenttest.Step{ans(auditLoop)},
			before: func(ctx context.Context, st *outbound.MemoryState) {
				_ = st.SetState(ctx, outbound.State{SessionKey: groupKey, Subject: "u1", Name: outbound.StateLoopHits,
					Until: t0.Add(time.Hour), Value: hits(20*time.Minute, 10*time.Minute)})
			},
			want: want{send: true, text: outbound.LoopNotice, code: outbound.IgnoredAIReplyLoop, paused: true, calls: 1}},
		{name: "loop hits older than 30 minutes do not count", p: proposal(false, false, "ha"),
			edit: func(p *outbound.Proposal) { p.Recent = recent(5 * time.Minute) }, audit: []agenttest.Step{ans(auditLoop)},
			before: func(ctx context.Context, st *outbound.MemoryState) {
				_ = st.SetState(ctx, outbound.State{SessionKey: groupKey, Subject: "u1", Name: outbound.StateLoopHits,
					Until: t0.Add(time.Hour), Value: hits(50*time.Minute, 40*time.Minute)})
			},
			want: want{send: true, text: "ha", code: outcome.RepliedProactive, calls: 1}},
		{name: "loop pause off: counted, never paused", p: proposal(false, false, "ha"),
			edit: func(p *outbound.Proposal) { p.Recent = recent(5 * time.Minute) }, audit: []agenttest.Step{ans(auditLoop)},
			cfg:  func(c *outbound.ReviewConfig) { c.NoLoopPause, c.LoopHits = true, 1 },
			want: want{send: true, text: "ha", code: outcome.RepliedProactive, calls: 1}},
		{name: "loop detection configurable: 1 hit, no notice", p: proposal(false, false, "ha"),
			edit: func(p *outbound.Proposal) { p.Recent = recent(5 * time.Minute) }, audit: []agenttest.Step{ans(auditLoop)},
			cfg:  func(c *outbound.ReviewConfig) { c.LoopHits, c.NoLoopNotice = 1, true },
			want: want{code: outbound.IgnoredAIReplyLoop, paused: true, calls: 1}},
		// 8.5 Safety.
		{name: "unsafe: neutral notice", p: proposal(false, true, "risky words"),
			edit: func(p *outbound.Proposal) { p.AccountRisk = true }, audit: []agenttest.Step{ans(auditUnsafe)},
			want: want{send: true, text: outbound.SafetyNotice, code: outbound.RepliedSafetyNotice, calls: 1}},
		{name: "suspected risk still passes", p: proposal(false, true, "edgy words"),
			edit: func(p *outbound.Proposal) { p.AccountRisk = true }, audit: []agenttest.Step{ans(auditRiskOK)},
			want: want{send: true, text: "edgy words", code: outcome.Replied, calls: 1}},
		{name: "safety not judged without AccountRisk", p: proposal(false, false, "edgy words"), audit: []agenttest.Step{ans(auditUnsafe)},
			want: want{code: outbound.IgnoredProactiveReplyQuality, calls: 1}},
		// 8.6 Quality.
		{name: "low send confidence unprompted", p: proposal(false, false, "meh"), audit: []agenttest.Step{ans(auditLowQuality)},
			want: want{code: outbound.IgnoredProactiveReplyQuality, calls: 1}},
		{name: "listed problems unprompted", p: proposal(false, false, "meh"), audit: []agenttest.Step{ans(auditProblems)},
			want: want{code: outbound.IgnoredProactiveReplyQuality, calls: 1}},
		{name: "quality never gates a direct reply", p: proposal(false, true, "meh"),
			edit: func(p *outbound.Proposal) { p.AccountRisk = true }, audit: []agenttest.Step{ans(auditProblems)},
			want: want{send: true, text: "meh", code: outcome.Replied, calls: 1}},
		{name: "custom quality threshold", p: proposal(false, false, "meh"), audit: []agenttest.Step{ans(auditLowQuality)},
			cfg:  func(c *outbound.ReviewConfig) { c.QualityThreshold = 0.4 },
			want: want{send: true, text: "meh", code: outcome.RepliedProactive, calls: 1}},
		// 8.7 Refusals.
		{name: "fourth refusal: sent, then paused", p: proposal(false, true, "I can't help with that"),
			edit: func(p *outbound.Proposal) { p.AccountRisk = true }, audit: []agenttest.Step{ans(auditRefusal)},
			before: func(ctx context.Context, st *outbound.MemoryState) {
				_ = st.SetState(ctx, outbound.State{SessionKey: groupKey, Subject: "u1", Name: outbound.StateRefusals,
					Until: t0.Add(time.Hour), Value: hits(20*time.Minute, 10*time.Minute, 5*time.Minute)})
			},
			want: want{send: true, text: "I can't help with that", code: outcome.Replied, paused: true, calls: 1}},
		{name: "a refusal below four: no pause", p: proposal(false, true, "I can't help with that"),
			edit: func(p *outbound.Proposal) { p.AccountRisk = true }, audit: []agenttest.Step{ans(auditRefusal)},
			want: want{send: true, text: "I can't help with that", code: outcome.Replied, calls: 1}},
		// Order.
		{name: "order: closing before safety", p: proposal(true, true, "x"),
			edit: func(p *outbound.Proposal) { p.Recent, p.AccountRisk = recent(time.Minute), true }, dedup: []agenttest.Step{ans(`{"verdict":"keep","confidence":0.99}`)}, audit: []agenttest.Step{ans(auditStop)},
			want: want{code: outbound.CodeStopRequested(), paused: true, calls: 2}},
		{name: "order: loop before safety", p: proposal(false, false, "x"),
			edit: func(p *outbound.Proposal) { p.Recent, p.AccountRisk = recent(5*time.Minute), true }, audit: []agenttest.Step{ans(auditLoop)},
			cfg:  func(c *outbound.ReviewConfig) { c.LoopHits = 1 },
			want: want{send: true, text: outbound.LoopNotice, code: outbound.IgnoredAIReplyLoop, paused: true, calls: 1}},
		{name: "order: safety before quality", p: proposal(false, false, "x"),
			edit: func(p *outbound.Proposal) { p.AccountRisk = true }, audit: []agenttest.Step{ans(auditUnsafe)},
			want: want{send: true, text: outbound.SafetyNotice, code: outbound.RepliedSafetyNotice, calls: 1}},
		{name: "order: dedup drop before audit verdicts", p: proposal(false, false, "x"),
			edit:  func(p *outbound.Proposal) { p.Recent, p.AccountRisk = recent(time.Minute), true },
			dedup: []agenttest.Step{ans(`{"verdict":"drop","confidence":0.99}`)}, audit: []agenttest.Step{ans(auditUnsafe)},
			want: want{code: outbound.IgnoredDuplicateReply, calls: 2}},
		// 9. Stop window.
		{name: "stop window stops an unprompted reply", p: proposal(false, false, "fine"), audit: []agenttest.Step{ans(auditPass)},
			before: func(ctx context.Context, st *outbound.MemoryState) {
				_ = st.SetState(ctx, outbound.State{SessionKey: groupKey, Name: outbound.StateStopWindow, Until: t0.Add(5 * time.Minute)})
			},
			want: want{code: outbound.CodeStopRequested(), calls: 1}},
		{name: "stop window does not stop a direct reply", p: proposal(false, true, "fine"), audit: []agenttest.Step{ans(auditPass)},
			before: func(ctx context.Context, st *outbound.MemoryState) {
				_ = st.SetState(ctx, outbound.State{SessionKey: groupKey, Name: outbound.StateStopWindow, Until: t0.Add(5 * time.Minute)})
			},
			want: want{send: true, text: "fine", code: outcome.Replied, calls: 1}},
		{name: "expired stop window", p: proposal(false, false, "fine"), audit: []agenttest.Step{ans(auditPass)},
			before: func(ctx context.Context, st *outbound.MemoryState) {
				_ = st.SetState(ctx, outbound.State{SessionKey: groupKey, Name: outbound.StateStopWindow, Until: t0})
			},
			want: want{send: true, text: "fine", code: outcome.RepliedProactive, calls: 1}},
		// Skipping.
		{name: "audit skipped when nothing applies", p: proposal(true, true, "hi"),
			want: want{send: true, text: "hi", code: outcome.Replied}},
		{name: "audit off for the group", p: proposal(false, false, "hi"),
			cfg:  func(c *outbound.ReviewConfig) { c.AuditDisabled = func(k string) bool { return k == groupKey } },
			want: want{send: true, text: "hi", code: outcome.RepliedProactive}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			m := agenttest.New()
			m.OnPurpose(agent.PurposeDedup, tc.dedup...)
			m.OnPurpose(agent.PurposeAudit, tc.audit...)
			st := &outbound.MemoryState{}
			if tc.before != nil {
				tc.before(ctx, st)
			}
			cfg := outbound.ReviewConfig{Model: m, State: st, Clock: clock.NewFake(t0)}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			rv, err := outbound.NewReviewer(cfg)
			require.NoError(t, err)
			p := tc.p
			if tc.edit != nil {
				tc.edit(&p)
			}
			v, err := rv.Review(ctx, p)
			require.NoError(t, err)
			require.Equal(t, tc.want.send, v.Send, "send (%s)", v.Reason)
			require.Equal(t, tc.want.code, v.Code, v.Reason)
			require.Equal(t, tc.want.regenerate, v.Regenerate)
			if tc.want.send {
				require.Equal(t, tc.want.text, v.Text)
			}
			require.Equal(t, tc.want.paused, !v.PauseUntil.IsZero(), "pause")
			if tc.want.paused {
				require.Equal(t, t0.Add(30*time.Minute), v.PauseUntil)
				s, ok, _ := st.GetState(ctx, p.SessionKey, "u1", outbound.StatePause)
				require.True(t, ok)
				require.True(t, s.Active(t0))
			}
			require.Equal(t, tc.want.stopWindow, !v.StopWindowUntil.IsZero())
			if tc.want.stopWindow {
				s, ok, _ := st.GetState(ctx, p.SessionKey, "", outbound.StateStopWindow)
				require.True(t, ok)
				require.Equal(t, t0.Add(10*time.Minute), s.Until)
			}
			require.Equal(t, tc.want.rewritten, v.Rewritten)
			require.Equal(t, tc.want.calls, m.Calls(), "model calls")
			require.Zero(t, m.Pending(), "every scripted answer used")
			require.LessOrEqual(t, len(v.Usage), tc.want.calls, "usage is recorded per answered call")
		})
	}
}

func TestModelReviewerDedupAndAuditRunInParallel(t *testing.T) {
	t.Parallel()
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() { started.Wait(); close(both) }()
	wait := func(answer string) agenttest.Step {
		return agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
			started.Done()
			select {
			case <-both: // each call returns only once both have started
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &agent.Response{Text: answer}, nil
		})
	}
	m := agenttest.New()
	m.OnPurpose(agent.PurposeDedup, wait(`{"verdict":"keep","confidence":0.99}`))
	m.OnPurpose(agent.PurposeAudit, wait(auditPass))
	rv, err := outbound.NewReviewer(outbound.ReviewConfig{Model: m, State: &outbound.MemoryState{}, Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	p := proposal(false, false, "new thought")
	p.Recent = []outbound.BotReply{{Text: "old thought", At: t0.Add(-30 * time.Second)}}
	v, err := rv.Review(t.Context(), p)
	require.NoError(t, err)
	require.True(t, v.Send)
	require.Equal(t, 2, m.Calls())
	reqs := m.Requests()
	for _, r := range reqs {
		require.True(t, r.JSON)
		if r.Purpose == agent.PurposeAudit {
			require.Contains(t, r.Messages[0].Content, `"quality"`)
			require.NotContains(t, r.Messages[0].Content, `"closing"`, "closing does not apply in a group")
			require.Contains(t, r.Messages[1].Content, "new thought")
		}
	}
}

func TestModelReviewerStateErrors(t *testing.T) {
	t.Parallel()
	_, err := outbound.NewReviewer(outbound.ReviewConfig{})
	require.Error(t, err)

	boom := errors.New("db down")
	rv, err := outbound.NewReviewer(outbound.ReviewConfig{Model: agenttest.New(), State: failingState{boom}, Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	_, err = rv.Review(t.Context(), proposal(true, true, "hi"))
	require.ErrorIs(t, err, boom)
}

type failingState struct{ err error }

func (f failingState) GetState(context.Context, string, string, string) (outbound.State, bool, error) {
	return outbound.State{}, false, f.err
}
func (f failingState) SetState(context.Context, outbound.State) error { return f.err }

func TestCodeStopRequested(t *testing.T) {
	t.Parallel()
	require.Equal(t, outcome.Code("ignored_stop_requested"), outbound.CodeStopRequested())
}
