package agent_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
)

func TestModelsRouting(t *testing.T) {
	t.Parallel()
	named := func(name string) *agenttest.Model {
		return agenttest.New().Otherwise(agenttest.Reply(name, agenttest.WithModel(name)))
	}
	text := []agent.Message{{Role: agent.RoleUser, Content: "hi"}}
	img := []agent.Message{{Role: agent.RoleUser, Content: "look", Parts: []agent.Part{{ImageURL: "https://x/y.png"}}}}
	full := agent.Models{Chat: named("chat"), Vision: named("vision"), Router: named("router"), Audit: named("audit"),
		Summary: named("summary"), ByPurpose: map[string]agent.Model{agent.PurposeClassify: named("classify")}}
	chatOnly := agent.Models{Chat: named("chat")}
	for _, tc := range []struct {
		name    string
		models  agent.Models
		purpose string
		msgs    []agent.Message
		want    string
	}{
		{"chat", full, agent.PurposeChat, text, "chat"},
		{"empty purpose", full, "", text, "chat"},
		{"images go to vision", full, agent.PurposeChat, img, "vision"},
		{"vision purpose", full, agent.PurposeVision, text, "vision"},
		{"router", full, agent.PurposeRouter, text, "router"},
		{"audit", full, agent.PurposeAudit, text, "audit"},
		{"summary", full, agent.PurposeSummary, text, "summary"},
		{"by purpose", full, agent.PurposeClassify, text, "classify"},
		{"unknown purpose", full, agent.PurposeDedup, text, "chat"},
		{"fallback vision", chatOnly, agent.PurposeChat, img, "chat"},
		{"fallback router", chatOnly, agent.PurposeRouter, text, "chat"},
		{"fallback audit", chatOnly, agent.PurposeAudit, text, "chat"},
		{"fallback summary", chatOnly, agent.PurposeSummary, text, "chat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, err := tc.models.Generate(t.Context(), agent.Request{Purpose: tc.purpose, Messages: tc.msgs})
			require.NoError(t, err)
			require.Equal(t, tc.want, resp.Model)
		})
	}
	_, err := agent.Models{}.Generate(t.Context(), agent.Request{})
	require.ErrorIs(t, err, agent.ErrNoModel)

	// Single-call generation through the Models router.
	res, err := agent.SingleCall.Run(t.Context(), agent.RunInput{Model: full, Request: agent.Request{Messages: img}})
	require.NoError(t, err)
	require.Equal(t, "vision", res.Model)
}
