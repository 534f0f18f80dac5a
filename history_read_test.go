package persona_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
)

// countingHistory counts the Recent reads of a memory.History.
type countingHistory struct {
	memory.History
	reads atomic.Int32
}

func (c *countingHistory) Recent(ctx context.Context, session string, limit int) ([]memory.Entry, error) {
	c.reads.Add(1)
	return c.History.Recent(ctx, session, limit)
}

// A direct turn reads the transcript once: the review's transcript and the
// prompt's history come from the same read.
func TestDirectTurnReadsHistoryOnce(t *testing.T) {
	t.Parallel()
	var hist *countingHistory
	model := agenttest.New()
	model.Otherwise(agenttest.Reply("noted"))
	h := newHarness(t, model, func(o *persona.Options) {
		hist = &countingHistory{History: o.DB}
		o.History = hist
	})
	for i := range 3 {
		before := hist.reads.Load()
		ev := h.say(dmAlice, alice, fmt.Sprintf("message number %d", i))
		require.Equal(t, outcome.Replied, h.outcome(ev).Code)
		require.EqualValues(t, 1, hist.reads.Load()-before, "turn %d", i)
	}
	var prompt strings.Builder
	for _, m := range lastChat(model).Messages {
		prompt.WriteString(m.Content)
	}
	require.Contains(t, prompt.String(), "message number 1", "the earlier turns are in the prompt")
	require.Contains(t, prompt.String(), "noted")
}
