package persona_test

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/internal/logbuf"
	"github.com/personakit/persona/outcome"
)

// stable returns the messages up to and including the cache breakpoint,
// without the breakpoint flag (which moves forward every turn).
func stable(req agent.Request) []agent.Message {
	var out []agent.Message
	for _, m := range req.Messages {
		flag := m.CacheBreakpoint
		m.CacheBreakpoint = false
		out = append(out, m)
		if flag {
			return out
		}
	}
	return nil
}

// Across many turns of one conversation, each prompt starts with the
// previous prompt's stable part byte for byte, well past the 30 messages a
// sliding window would show: the upstream prompt cache keeps hitting.
func TestPromptPrefixStaysStableAcrossTurns(t *testing.T) {
	t.Parallel()
	logs := &logbuf.Buffer{}
	model := agenttest.New()
	model.Otherwise(agenttest.Reply("noted"))
	h := newHarness(t, model, func(o *persona.Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	const turns = 40 // 80 history messages with the bot's replies
	var prev []agent.Message
	for i := range turns {
		ev := h.say(dmAlice, alice, fmt.Sprintf("message number %d", i))
		require.Equal(t, outcome.Replied, h.outcome(ev).Code)
		cur := stable(lastChat(model))
		require.NotEmpty(t, cur)
		if prev != nil {
			require.GreaterOrEqual(t, len(cur), len(prev), "turn %d", i)
			require.Equal(t, prev, cur[:len(prev)], "turn %d: the prefix of the previous prompt changed", i)
		}
		prev = cur
	}
	require.Greater(t, len(prev), 60, "the stable history reaches back past a 30-message window")
	require.NotContains(t, logs.String(), "prompt_prefix_changed")
}
