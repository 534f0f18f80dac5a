package persona_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/outcome"
)

// With Options.Agent the reply comes from the tool loop: a registered tool
// runs, say sends a line at once through the ledger, and agent_finalize
// ends the turn.
func TestAgentLoopTurn(t *testing.T) {
	t.Parallel()
	reg := agent.NewRegistry()
	calls := 0
	require.NoError(t, reg.Register(agent.ToolFunc{
		ToolSpec: agent.ToolSpec{Name: "weather", Description: "today's weather in a city",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
		F: func(_ context.Context, args json.RawMessage) (string, error) {
			calls++
			return "sunny, 21°C", nil
		},
	}, agent.Core(), agent.Purpose("today's weather in a city")))
	model := agenttest.New(
		agenttest.ToolCall(agent.ToolSay, `{"text":"let me check"}`),
		agenttest.ToolCall("weather", `{"city":"Berlin"}`),
		agenttest.ToolCall(agent.ToolFinalize, `{"text":"it's sunny in Berlin, 21°C"}`),
	)
	h := newHarness(t, model, func(o *persona.Options) {
		o.Agent = true
		o.Tools = reg
		if testing.Verbose() {
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	})
	o := h.outcome(h.say(dmAlice, alice, "how's the weather in Berlin?"))
	require.Equal(t, outcome.Replied, o.Code)
	require.Equal(t, 1, calls)
	var texts []string
	for _, s := range h.ch.Sent() {
		texts = append(texts, s.Out.Text)
	}
	require.Equal(t, []string{"let me check", "it's sunny in Berlin, 21°C"}, texts)
}
