package route

import (
	"context"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outcome"
)

// Input is what a Router rates: one unprompted group message that passed
// the gates, with the recent transcript of its session.
type Input struct {
	Event      channel.Event
	SessionKey string
	// Recent is the session's recent messages, oldest first, not including
	// Event.
	Recent []channel.Event
	Owner  bool
}

// Decision is a router's verdict. Reply=false ends the message with Code and
// Reason; Reply=true lets the reply flow run (recorded as
// replied_proactive once sent).
type Decision struct {
	Reply  bool
	Code   outcome.Code
	Reason string
}

// Router rates unprompted messages.
type Router interface {
	Route(ctx context.Context, in Input) (Decision, error)
}

// RouterFunc adapts a function to a Router.
type RouterFunc func(ctx context.Context, in Input) (Decision, error)

// Route calls f.
func (f RouterFunc) Route(ctx context.Context, in Input) (Decision, error) { return f(ctx, in) }

// IgnoredRouterFailed: the router failed (timeout, error, unparsable); the
// message is left unanswered.
const IgnoredRouterFailed outcome.Code = "ignored_router_failed"
