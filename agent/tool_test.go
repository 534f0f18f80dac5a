package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
)

func TestToolFunc(t *testing.T) {
	t.Parallel()
	var tool agent.Tool = agent.ToolFunc{
		ToolSpec: agent.ToolSpec{Name: "echo", Description: "repeats its input",
			Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		F: func(_ context.Context, args json.RawMessage) (string, error) {
			var in struct{ Text string }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err
			}
			return in.Text, nil
		},
	}
	require.Equal(t, "echo", tool.Spec().Name)
	out, err := tool.Call(t.Context(), json.RawMessage(`{"text":"hi"}`))
	require.NoError(t, err)
	require.Equal(t, "hi", out)
	_, err = tool.Call(t.Context(), json.RawMessage(`not json`))
	require.Error(t, err)
}
