package persona_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/route"
)

// The pipeline's duties hold whatever the stages are, and a stage's bad
// result ends its message with a clear outcome.

const testSecret = "sk-live-0123456789abcdefXYZ"

// botMessages returns the texts of the bot's own messages in a session's
// history.
func (h *harness) botMessages(chat channel.Chat) []string {
	h.t.Helper()
	hist, err := h.db.Recent(h.t.Context(), channel.SessionKey(channel.DefaultProfile, h.ch.Name(), h.ch.BotID(), chat), 100)
	require.NoError(h.t, err)
	var out []string
	for _, e := range hist {
		if e.Direction == memory.Out {
			out = append(out, e.Event.Text())
		}
	}
	return out
}

// attempts returns the charged attempts of a message's record.
func (h *harness) attempts(ev channel.Event) int {
	h.t.Helper()
	r, err := h.p.Lookup(h.t.Context(), ev.Key())
	require.NoError(h.t, err)
	return r.Attempts
}

func TestZeroResultsOfEachStage(t *testing.T) {
	t.Parallel()
	zeroGate := gate.Chain{gate.Func{GateName: "zero", F: func(context.Context, *gate.Turn) gate.Verdict { return gate.Verdict{Stop: true} }}}
	for _, tc := range []struct {
		name  string
		tweak func(*persona.Options)
		chat  channel.Chat
		want  string // in the reason
	}{
		{"gate", func(o *persona.Options) { o.Gates = zeroGate }, group1, `gate "zero"`},
		{"router", func(o *persona.Options) {
			o.Router = route.RouterFunc(func(context.Context, route.Input) (route.Decision, error) { return route.Decision{}, nil })
		}, group1, "router"},
		{"router with a bad code", func(o *persona.Options) {
			o.Router = route.RouterFunc(func(context.Context, route.Input) (route.Decision, error) {
				return route.Decision{Code: "Not A Code"}, nil
			})
		}, group1, `"Not A Code"`},
		{"reviewer", func(o *persona.Options) {
			o.Reviewer = outbound.ReviewerFunc(func(context.Context, outbound.Proposal) (outbound.Verdict, error) { return outbound.Verdict{}, nil })
		}, dmAlice, "reviewer"},
		{"reviewer sending without a code", func(o *persona.Options) {
			o.Reviewer = outbound.ReviewerFunc(func(_ context.Context, p outbound.Proposal) (outbound.Verdict, error) {
				return outbound.Verdict{Send: true, Text: p.Text}, nil
			})
		}, dmAlice, "reviewer"},
		{"sender", func(o *persona.Options) {
			o.Sender = outbound.SenderFunc(func(context.Context, outbound.Reply) (outbound.Delivery, error) {
				return outbound.Delivery{Stopped: true}, nil
			})
		}, dmAlice, "sender"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			model := agenttest.New()
			model.Otherwise(agenttest.Reply("hello"))
			h := newHarness(t, model, tc.tweak)
			ev := h.say(tc.chat, alice, "hi there")
			o := h.outcome(ev)
			require.Equal(t, outcome.DroppedInvalidResult, o.Code)
			require.Contains(t, o.Reason, tc.want)
			require.Equal(t, 1, h.attempts(ev), "the message ends on its first attempt, which is counted")
			// The pipeline goes on.
			next := h.say(tc.chat, alice, "still there?")
			require.Equal(t, outcome.DroppedInvalidResult, h.outcome(next).Code)
		})
	}
}

// minimal stages an embedder might write: each does the least it can.
func minimalStages(o *persona.Options) {
	o.Gates = gate.Chain{}
	o.NoRouter = false
	o.Router = route.RouterFunc(func(context.Context, route.Input) (route.Decision, error) {
		return route.Decision{Reply: true, Code: outcome.RepliedProactive, Reason: "always"}, nil
	})
	o.Runner = agent.RunnerFunc(func(context.Context, agent.RunInput) (*agent.Result, error) {
		return &agent.Result{Text: "the key is " + testSecret + " and that is all"}, nil
	})
	o.Reviewer = outbound.ReviewerFunc(func(_ context.Context, p outbound.Proposal) (outbound.Verdict, error) {
		code := outcome.Replied
		if !p.Direct {
			code = outcome.RepliedProactive
		}
		return outbound.Verdict{Send: true, Text: p.Text, Code: code, Reason: "fine"}, nil
	})
	o.Sender = outbound.SenderFunc(func(ctx context.Context, r outbound.Reply) (outbound.Delivery, error) {
		rc, err := r.Channel.Send(ctx, channel.Outgoing{Chat: r.Chat, Text: r.Text})
		if err != nil {
			return outbound.Delivery{}, err
		}
		return outbound.Delivery{MessageIDs: rc.MessageIDs, Chunks: 1, Code: r.Code, Reason: r.Reason}, nil
	})
	o.Secrets = []string{testSecret}
}

func TestMinimalStagesKeepTheDuties(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(), minimalStages)
	for _, chat := range []channel.Chat{group1, dmAlice} {
		ev := h.say(chat, alice, "tell me the key")
		require.True(t, h.outcome(ev).Code.Replied())
		want := "the key is " + outbound.SecretMask + " and that is all"
		sent := h.ch.Sent()
		require.Equal(t, want, sent[len(sent)-1].Out.Text, "secrets are masked whatever the sender")
		require.Equal(t, []string{want}, h.botMessages(chat), "the sent message reaches history")
		slots, err := h.db.Slots(h.t.Context(), ev.Key())
		require.NoError(t, err)
		require.Len(t, slots, 1, "the chunk went through the delivery ledger")
		require.Equal(t, outbound.SlotSent, slots[0].State)
	}
}

// Each default stage wrapped: the wrappers see every call, and the
// duties still hold.
func TestWrappedStagesKeepTheDuties(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	note := func(s string) {
		mu.Lock()
		seen[s]++
		mu.Unlock()
	}
	model := agenttest.New()
	model.OnPurpose(agent.PurposeRouter, agenttest.Reply(routerRating("yes", 0.95)))
	model.OnPurpose(agent.PurposeAudit, agenttest.Reply(audit(false)))
	model.Otherwise(agenttest.Reply("use " + testSecret + " please"))
	h := newHarness(t, model, func(o *persona.Options) {
		o.NoRouter = false
		o.Secrets = []string{testSecret}
		o.WrapGates = func(c gate.Chain) gate.Chain {
			return append(gate.Chain{gate.Func{GateName: "count", F: func(context.Context, *gate.Turn) gate.Verdict { note("gate"); return gate.Pass }}}, c...)
		}
		o.WrapRouter = func(r route.Router) route.Router {
			return route.RouterFunc(func(ctx context.Context, in route.Input) (route.Decision, error) {
				note("router")
				return r.Route(ctx, in)
			})
		}
		o.WrapRunner = func(r agent.Runner) agent.Runner {
			return agent.RunnerFunc(func(ctx context.Context, in agent.RunInput) (*agent.Result, error) {
				note("runner")
				return r.Run(ctx, in)
			})
		}
		o.WrapReviewer = func(r outbound.Reviewer) outbound.Reviewer {
			return outbound.ReviewerFunc(func(ctx context.Context, p outbound.Proposal) (outbound.Verdict, error) {
				note("reviewer")
				if strings.Contains(p.Text, "forbidden") {
					return outbound.Verdict{Code: "acme_ignored_forbidden", Reason: "one more check"}, nil
				}
				return r.Review(ctx, p)
			})
		}
		o.WrapSender = func(s outbound.Sender) outbound.Sender {
			return outbound.SenderFunc(func(ctx context.Context, r outbound.Reply) (outbound.Delivery, error) {
				note("sender")
				return s.Send(ctx, r)
			})
		}
	})
	ev := h.say(group1, alice, "what should I use?")
	require.Equal(t, outcome.RepliedProactive, h.outcome(ev).Code)
	want := "use " + outbound.SecretMask + " please"
	require.Equal(t, want, h.ch.Sent()[0].Out.Text)
	require.Equal(t, []string{want}, h.botMessages(group1))
	mu.Lock()
	for _, s := range []string{"gate", "router", "runner", "reviewer", "sender"} {
		require.Equal(t, 1, seen[s], s)
	}
	mu.Unlock()
	var purposes []string
	for _, r := range model.Requests() {
		purposes = append(purposes, r.Purpose)
	}
	require.Contains(t, purposes, agent.PurposeAudit, "the wrapped default reviewer still audits")
}

func TestWrapperReturningNil(t *testing.T) {
	t.Parallel()
	_, err := persona.New(persona.Options{DataDir: t.TempDir(), Model: agenttest.New(),
		WrapSender: func(outbound.Sender) outbound.Sender { return nil }})
	require.ErrorContains(t, err, "WrapSender returned nil")
}

// A reply the agent already said a line of is not merged into: the same
// person's follow-up becomes its own turn, and its own line goes out.
func TestSayThenFollowUp(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	chatCalls := make(chan string, 8)
	var mu sync.Mutex
	n := 0
	model := agenttest.New()
	model.OnPurpose(agent.PurposeClassify, agenttest.Reply(`{"label":"supplement","confidence":0.95}`))
	model.Otherwise(agenttest.Func(func(ctx context.Context, req agent.Request) (*agent.Response, error) {
		if req.Purpose != agent.PurposeChat {
			return &agent.Response{Text: "{}"}, nil
		}
		mu.Lock()
		n++
		call := n
		mu.Unlock()
		var cur string
		for _, m := range req.Messages {
			if strings.HasPrefix(m.Content, "[current]") {
				cur = m.Content
			}
		}
		chatCalls <- cur
		last := req.Messages[len(req.Messages)-1]
		if last.Role == agent.RoleTool {
			// After the say: the first turn waits for the follow-up.
			if call == 2 {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &agent.Response{Text: fmt.Sprintf("final %d", call)}, nil
		}
		args, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("line of call %d", call)})
		return &agent.Response{ToolCalls: []agent.ToolCall{{ID: fmt.Sprintf("c%d", call), Name: agent.ToolSay, Arguments: args}}}, nil
	}))
	h := newHarness(t, model, func(o *persona.Options) { o.Agent = true })
	first := h.say(dmAlice, alice, "what's the weather")
	require.Contains(t, <-chatCalls, "weather")
	require.Contains(t, <-chatCalls, "weather") // after its say line went out
	follow := h.say(dmAlice, alice, "in Berlin I mean")
	require.Contains(t, <-chatCalls, "Berlin", "the follow-up is generated on its own")
	close(release)
	fo := h.outcome(follow)
	require.Equal(t, outcome.Replied, fo.Code, "not merged into a turn that already said something")
	require.Equal(t, outcome.Replied, h.outcome(first).Code)
	var texts []string
	for _, s := range h.ch.Sent() {
		texts = append(texts, s.Out.Text)
	}
	require.Contains(t, texts, "line of call 1")
	require.Contains(t, texts, "line of call 3", "the follow-up's own say line is sent")
}

// A provider that finds the prompt too long gets it once more with half
// the history.
func TestContextOverflowRetriesWithHalfTheHistory(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	model := agenttest.New()
	model.Otherwise(agenttest.Func(func(_ context.Context, req agent.Request) (*agent.Response, error) {
		if req.Purpose != agent.PurposeChat {
			return &agent.Response{Text: "{}"}, nil
		}
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(req.Messages))
		if len(sizes) == 1 {
			return nil, &agent.Error{Kind: agent.KindContextOverflow, Status: 400, Message: "maximum context length exceeded"}
		}
		return &agent.Response{Text: "short answer"}, nil
	}))
	h := newHarness(t, model, nil)
	// A long history: far more than half the history budget.
	ctx := t.Context()
	session := channel.SessionKey(channel.DefaultProfile, h.ch.Name(), h.ch.BotID(), dmAlice)
	long := strings.Repeat("a fairly long message about many things ", 8)
	for i := range 600 {
		ev := channel.Event{Platform: h.ch.Name(), Profile: channel.DefaultProfile, BotID: h.ch.BotID(), Kind: channel.KindMessage,
			Chat: dmAlice, SessionKey: session, MessageID: fmt.Sprintf("old%d", i), Time: h.clk.Now().Add(-time.Hour + time.Duration(i)*time.Second),
			Sender: alice, Segments: []channel.Segment{channel.Text(fmt.Sprintf("%d %s", i, long))}}
		require.NoError(t, h.db.Append(ctx, memory.Entry{Key: ev.Key(), SessionKey: session, Direction: memory.In, Event: ev}))
	}
	o := h.outcome(h.say(dmAlice, alice, "sum it up"))
	require.Equal(t, outcome.Replied, o.Code)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, sizes, 2, "one retry")
	require.Less(t, sizes[1], sizes[0], "the retry carries less history")
}

// The typing indicator starts when generation starts and stops on every
// exit of the turn.
func TestTypingFromGenerationToTheEnd(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 4)
	release := make(chan string, 4)
	model := agenttest.New()
	model.Otherwise(agenttest.Func(func(ctx context.Context, req agent.Request) (*agent.Response, error) {
		if req.Purpose != agent.PurposeChat {
			return &agent.Response{Text: "{}"}, nil
		}
		started <- struct{}{}
		select {
		case text := <-release:
			if text == "fail" {
				return nil, &agent.Error{Kind: agent.KindInvalidRequest, Message: "bad"}
			}
			return &agent.Response{Text: text}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}))
	h := newHarness(t, model, nil)
	for _, tc := range []struct {
		name, answer string
		code         outcome.Code
	}{
		{"reply", "hello", outcome.Replied},
		{"silence", "[[SILENT]]", ""},
		{"failure", "fail", outcome.RepliedError},
	} {
		before := len(h.ch.Typings())
		ev := h.say(dmAlice, alice, "hi "+tc.name)
		<-started
		require.Eventually(t, func() bool { return len(h.ch.Typings()) == before+1 }, 5*time.Second, time.Millisecond,
			"%s: typing shows while the model works, before anything is sent", tc.name)
		sentBefore := len(h.ch.Sent())
		// Kept alive while generating (the clock moves on in steps until
		// the keepalive fires: other timers run on the same clock).
		require.Eventually(t, func() bool {
			h.clk.Advance(time.Second)
			return len(h.ch.Typings()) >= before+2
		}, 5*time.Second, 10*time.Millisecond, "%s: keepalive", tc.name)
		require.Len(t, h.ch.Sent(), sentBefore, "%s: nothing sent yet", tc.name)
		release <- tc.answer
		o := h.outcome(ev)
		if tc.code != "" {
			require.Equal(t, tc.code, o.Code, tc.name)
		}
		after := len(h.ch.Typings())
		h.clk.Advance(3 * outbound.DefaultTypingKeepalive)
		require.Never(t, func() bool { return len(h.ch.Typings()) > after }, 50*time.Millisecond, time.Millisecond,
			"%s: typing stopped when the turn ended", tc.name)
	}
}
