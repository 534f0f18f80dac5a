package agent

import (
	"context"
	"encoding/json"
)

// Tool is something the model can call during a run.
type Tool interface {
	// Spec describes the tool to the model (name, purpose, JSON-schema
	// parameters).
	Spec() ToolSpec
	// Call runs the tool with the model's JSON arguments and returns the
	// observation shown to the model. An error is shown to the model as an
	// observation too; it never ends the run.
	Call(ctx context.Context, args json.RawMessage) (string, error)
}

// ToolFunc adapts a spec and a function to a Tool.
type ToolFunc struct {
	ToolSpec
	F func(ctx context.Context, args json.RawMessage) (string, error)
}

// Spec returns the embedded spec.
func (t ToolFunc) Spec() ToolSpec { return t.ToolSpec }

// Call calls F.
func (t ToolFunc) Call(ctx context.Context, args json.RawMessage) (string, error) {
	return t.F(ctx, args)
}
