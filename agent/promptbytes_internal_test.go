package agent

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPromptBytesLen: promptBytesLen is exactly the length AppendPromptBytes
// writes, so the prefix buffer is allocated once.
func TestPromptBytesLen(t *testing.T) {
	t.Parallel()
	msgs := []Message{
		{Role: RoleSystem, Content: "persona\nrules"},
		{Role: RoleUser, Name: "n", Content: "hi", Parts: []Part{{ImageURL: "https://x/y.png", Detail: "low"}, {ImageURL: "u"}}},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "search", Arguments: json.RawMessage(`{"q":"x"}`)}}},
		{Role: RoleTool, ToolCallID: "c1", Content: "result"},
		{},
	}
	for i := range msgs {
		require.Len(t, AppendPromptBytes(nil, msgs[:i+1]), promptBytesLen(msgs[:i+1]), i)
	}
}
