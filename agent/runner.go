package agent

import (
	"context"
	"errors"
)

// RunInput is one turn's generation input.
type RunInput struct {
	// Model answers the calls of this run.
	Model Model
	// Request is the assembled prompt (see Prompt).
	Request Request
	// Owner is set when the turn's sender is an owner (more steps, longer
	// replies in the agent loop).
	Owner bool
}

// Result is the outcome of a run.
type Result struct {
	// Text is the reply text, markers included; empty means no usable text.
	Text string
	// Usage sums every model call of the run.
	Usage Usage
	// Model is the model that produced the final text.
	Model string
	// Calls counts the model calls made.
	Calls int
}

// Runner produces a turn's reply.
type Runner interface {
	Run(ctx context.Context, in RunInput) (*Result, error)
}

// RunnerFunc adapts a function to a Runner.
type RunnerFunc func(ctx context.Context, in RunInput) (*Result, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, in RunInput) (*Result, error) { return f(ctx, in) }

// ErrNoModel is returned by a Runner that was given no Model.
var ErrNoModel = errors.New("agent: no model configured")

// SingleCall is the Runner that makes exactly one model call with the
// request as given (the mode used when the agent loop is off).
var SingleCall Runner = RunnerFunc(func(ctx context.Context, in RunInput) (*Result, error) {
	if in.Model == nil {
		return nil, ErrNoModel
	}
	req := in.Request
	if req.Purpose == "" {
		req.Purpose = PurposeChat
	}
	resp, err := in.Model.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, &Error{Kind: KindServer, Message: "model returned no response"}
	}
	return &Result{Text: resp.Text, Usage: resp.Usage, Model: resp.Model, Calls: 1}, nil
})
