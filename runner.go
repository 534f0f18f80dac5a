package persona

import (
	"context"
	"time"

	"github.com/personakit/persona/agent"
)

// turnRun carries what the agent loop needs of a turn beyond the
// agent.RunInput, so that the loop runs behind the plain agent.Runner
// interface (and Options.WrapRunner can wrap it like any runner).
type turnRun struct {
	session  string
	group    bool
	message  string
	say      func(context.Context, string) error
	deadline time.Time
	// said collects the lines the loop said; evidence the sources its
	// tools read (web_fetch, browser_render).
	said     []string
	evidence []agent.Evidence
}

type turnRunKey struct{}

// loopRunner runs the agent loop as an agent.Runner.
type loopRunner struct{ loop *agent.Loop }

// Run runs the loop with the turn's extras from ctx.
func (r loopRunner) Run(ctx context.Context, in agent.RunInput) (*agent.Result, error) {
	li := agent.LoopInput{RunInput: in}
	tr, _ := ctx.Value(turnRunKey{}).(*turnRun)
	if tr != nil {
		li.SessionKey, li.Group, li.Message, li.Say, li.Deadline = tr.session, tr.group, tr.message, tr.say, tr.deadline
	}
	lr, err := r.loop.RunLoop(ctx, li)
	if lr == nil {
		return nil, err
	}
	if tr != nil {
		tr.said = append(tr.said, lr.Said...)
		tr.evidence = append(tr.evidence, lr.Evidence...)
	}
	return &lr.Result, err
}
