package persona_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/outcome"
)

// With Options.Memory a fact the user states is extracted after the reply
// (a background job) and recalled into a later prompt, after the cache
// breakpoint.
func TestMemoryFactIsExtractedAndRecalled(t *testing.T) {
	t.Parallel()
	extracted := make(chan struct{})
	model := agenttest.New()
	model.OnPurpose(agent.PurposeMemory, agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) {
		defer close(extracted)
		return &agent.Response{Text: `{"candidates":[{"op":"upsert","scope":"user","key":"home_city",` +
			`"kind":"fact","content":"lives in Berlin","evidence":"I live in Berlin","source_type":"explicit",` +
			`"confidence":0.95,"importance":0.8}]}`}, nil
	}))
	model.Otherwise(agenttest.Reply("nice"))
	h := newHarness(t, model, func(o *persona.Options) { o.Memory = true })

	first := h.say(dmAlice, alice, "I live in Berlin by the way")
	require.Equal(t, outcome.Replied, h.outcome(first).Code)
	select {
	case <-extracted:
	case <-time.After(20 * time.Second):
		t.Fatal("no extraction job ran")
	}
	var memBlock string
	require.Eventually(t, func() bool {
		h.clk.Advance(time.Second)
		ev := h.say(dmAlice, alice, "where do I live again? Berlin?")
		h.outcome(ev)
		memBlock = ""
		req := lastChat(h.model)
		for i, m := range req.Messages {
			if strings.Contains(m.Content, "lives in Berlin") {
				memBlock = m.Content
				require.Greater(t, i, breakpoint(req), "memory sits after the cache breakpoint")
			}
		}
		return memBlock != ""
	}, 20*time.Second, 10*time.Millisecond)
}

func breakpoint(req agent.Request) int {
	for i, m := range req.Messages {
		if m.CacheBreakpoint {
			return i
		}
	}
	return -1
}
