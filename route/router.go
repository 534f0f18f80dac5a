package route

import (
	"context"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outcome"
)

// Input is what a Router rates: one unprompted group message that passed
// the gates, with the recent transcript of its session.
type Input struct {
	// Event is the message to rate.
	Event channel.Event
	// SessionKey is its session (Event.SessionKey when empty).
	SessionKey string
	// Recent is the session's recent messages, oldest first, not including
	// Event. The bot's own messages are KindSelf events (or carry the bot's
	// id as sender). The default router shows between 30 and 60 of them
	// to the model (an epoch-anchored window, see [ModelRouter.RecentLimit])
	// and measures talk-too-much over the last 10 minutes of the newest
	// 30, so the pipeline should pass RecentLimit (60) messages: with
	// fewer, the window slides with every message and consecutive requests
	// share less of their bytes.
	Recent []channel.Event
	// Owner is set when the sender is an owner.
	Owner bool
	// Others are other undecided unprompted messages of the same session
	// waiting for a rating, oldest first; they are rated in the same call
	// and decided in Decision.Others. Optional.
	Others []channel.Event
}

// Decision is a router's verdict. Reply=false ends the message with Code and
// Reason; Reply=true lets the reply flow run (recorded as
// replied_proactive once sent), and Reason is the decisive reason for the
// record.
type Decision struct {
	Reply  bool
	Code   outcome.Code
	Reason string

	// MessageID is the message this decision is about (Input.Event's, or an
	// Input.Others entry's).
	MessageID string
	// Directed is the model's answer to "is this addressed to the bot":
	// "yes" or "no", "" when the message was not rated (no model call, or
	// the call failed).
	Directed string
	// ChatIn is the model's chat-in score in [0,1] (valid when Directed is
	// set).
	ChatIn float64
	// ChatInPass is set when Reply came through the chat-in path (not as
	// an answered question). After such a reply was actually sent, the
	// pipeline starts the chat cooldown ([ModelRouter.ChatReplySent]).
	ChatInPass bool

	// Others holds the decisions for Input.Others, in order.
	Others []Decision
	// Target is, among the passing candidates (Event and Others), the
	// message the reply should answer: the most recent one rated directed,
	// else the one with the highest chat-in score; "" when none passes.
	// The other passing candidates join that turn (merged_into_reply).
	Target string

	// Calls is the number of model calls made (for quota accounting) and
	// Usage/Model their token use, for the record.
	Calls int
	Usage agent.Usage
	Model string
}

// Router rates unprompted messages.
type Router interface {
	Route(ctx context.Context, in Input) (Decision, error)
}

// RouterFunc adapts a function to a Router.
type RouterFunc func(ctx context.Context, in Input) (Decision, error)

// Route calls f.
func (f RouterFunc) Route(ctx context.Context, in Input) (Decision, error) { return f(ctx, in) }

// Outcome codes decided by the router.
const (
	// IgnoredRouterFailed: the router failed (timeout, error, unparsable
	// twice); the message is left unanswered.
	IgnoredRouterFailed outcome.Code = "ignored_router_failed"
	// IgnoredRouterStop: rated not directed with chat score 0 (someone
	// asking the bot to stop, or a mechanical loop); silent even at
	// no_limit.
	IgnoredRouterStop outcome.Code = "ignored_router_stop"
	// IgnoredChatScore: not an answerable directed question, and the
	// chat-in score is below the level's threshold (or chat-in is off).
	IgnoredChatScore outcome.Code = "ignored_chat_score"
	// IgnoredChatCooldown: the chat-in cooldown after the last chat-in
	// reply is not over.
	IgnoredChatCooldown outcome.Code = "ignored_chat_cooldown"
	// IgnoredTalkTooMuch: the bot's share of the recent messages is too
	// high for another chat-in reply.
	IgnoredTalkTooMuch outcome.Code = "ignored_talk_too_much"
)
