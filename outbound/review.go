package outbound

import (
	"context"
	"strings"
	"time"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/outcome"
)

// Outcome codes decided by the review and send stages.
const (
	// IgnoredModelSilent: the model chose silence and silence was allowed.
	IgnoredModelSilent outcome.Code = "ignored_model_silent"
	// IgnoredNoNaturalReply: an unprompted reply was empty or a refusal.
	IgnoredNoNaturalReply outcome.Code = "ignored_no_natural_reply"
	// DroppedSendRejected: the platform rejected the send definitively
	// (including kicked and muted); not retried.
	DroppedSendRejected outcome.Code = "dropped_send_rejected"
)

// FallbackText is sent when a direct turn produced no usable reply.
const FallbackText = "I didn't produce a usable reply."

// RefusalText is sent for a bare [[REFUSE]] marker.
const RefusalText = "I'd rather not answer that."

// Proposal is a generated reply waiting for review.
type Proposal struct {
	TurnID     string
	SessionKey string
	// Event is the message being answered.
	Event channel.Event
	// Text is the model's reply, markers included.
	Text string
	// Direct is set when the message triggered the bot directly; otherwise
	// the reply is unprompted.
	Direct bool
	Owner  bool

	// The fields below feed the model-backed review ([NewReviewer]); the
	// BasicReviewer ignores them.

	// HasImages: dependency images were attached to the generation.
	HasImages bool
	// FromDescriptions: this text was regenerated from image descriptions
	// after a [[NO_IMAGE]] verdict, so it is not regenerated again.
	FromDescriptions bool
	// SideEffect: the turn already had an external side effect (a tool that
	// changed something, a say line, a scheduled job).
	SideEffect bool
	// FactualResult: a plugin returned a factual result the user must get.
	FactualResult bool
	// QueuedImage: an image-generation job was queued this turn.
	QueuedImage bool
	// Said are the lines already sent with say this turn.
	Said []string
	// Plugin: a direct plugin reply (no semantic dedup).
	Plugin bool
	// MentionsBot: a group message that mentions, quotes or names the bot
	// (the group-stop check is judged only then).
	MentionsBot bool
	// PeerIsBot: the other side is flagged as a bot (loop detection counts
	// dense exchanges without purpose too).
	PeerIsBot bool
	// AccountRisk: the channel implements channel.AccountRisk and reports
	// true; the audit then judges account safety.
	AccountRisk bool
	// Recent are the bot's recent replies in the session with their times
	// (newest last). Dedup compares with those of the last 2 minutes; the
	// newest also dates the bot's last private message.
	Recent []BotReply
	// LastBotMessage is the time of the bot's newest message in the
	// session as the caller's transcript has it, replies to later messages
	// included (zero: unknown). The private closing check dates the bot's
	// last message by the newest of this, Recent and the state store's
	// StateLastBotMessage record, so a caller that sets it from a
	// transcript holding every sent chunk need not record that state.
	LastBotMessage time.Time
	// Transcript is recent conversation context for the audit, oldest
	// first (optional).
	Transcript []Line
}

// BotReply is one reply the bot sent earlier in the session.
type BotReply struct {
	Text string
	At   time.Time
}

// Line is one line of conversation context.
type Line struct {
	Speaker string
	Text    string
	FromBot bool
}

// ModelUsage is the token accounting of one review or shaping model call.
type ModelUsage struct {
	Purpose string
	Model   string
	agent.Usage
}

// Verdict is a reviewer's decision. Send=false ends the turn with Code and
// Reason; Send=true sends Text and records Code (replied, replied_fallback,
// ...) once delivered.
type Verdict struct {
	Send   bool
	Text   string
	Code   outcome.Code
	Reason string

	// Regenerate asks the caller to generate the reply once more from image
	// descriptions (the model could not see the images) and review it again
	// with Proposal.FromDescriptions set. Send is false.
	Regenerate bool
	// PauseUntil is set when the review paused replies to the sender (the
	// pause is already stored in the StateStore).
	PauseUntil time.Time
	// StopWindowUntil is set when the audit opened a group stop window (the
	// window is already stored; this reply is still sent).
	StopWindowUntil time.Time
	// Rewritten: semantic dedup rewrote the text.
	Rewritten bool
	// Usage lists the model calls the review made (dedup, audit).
	Usage []ModelUsage
}

// Reviewer decides whether and what to send.
type Reviewer interface {
	Review(ctx context.Context, p Proposal) (Verdict, error)
}

// ReviewerFunc adapts a function to a Reviewer.
type ReviewerFunc func(ctx context.Context, p Proposal) (Verdict, error)

// Review calls f.
func (f ReviewerFunc) Review(ctx context.Context, p Proposal) (Verdict, error) { return f(ctx, p) }

// BasicReviewer is the program-only review: model-chosen silence, empty
// replies, bare refusal markers and unprompted refusals. It makes no model
// call.
var BasicReviewer Reviewer = ReviewerFunc(basicReview)

func basicReview(_ context.Context, p Proposal) (Verdict, error) {
	replied := outcome.Replied
	if !p.Direct {
		replied = outcome.RepliedProactive
	}
	raw := p.Text
	body := bodyOf(raw)
	switch {
	case strings.Contains(raw, MarkerSilent) && body == "":
		return Verdict{Code: IgnoredModelSilent, Reason: "the model chose to stay silent"}, nil
	case strings.Contains(raw, MarkerRefuse) && !p.Direct:
		// A chat-in reply marked as a refusal is not sent, whatever text
		// came with the marker.
		return Verdict{Code: IgnoredNoNaturalReply, Reason: "unprompted reply was a refusal"}, nil
	case strings.Contains(raw, MarkerRefuse) && body == "":
		return Verdict{Send: true, Text: RefusalText, Code: replied, Reason: "refusal marker; fixed refusal text sent"}, nil
	case body == "":
		if !p.Direct {
			return Verdict{Code: IgnoredNoNaturalReply, Reason: "unprompted reply was empty"}, nil
		}
		return Verdict{Send: true, Text: FallbackText, Code: outcome.RepliedFallback, Reason: "generation was empty; fallback line sent"}, nil
	}
	return Verdict{Send: true, Text: StripControl(raw), Code: replied, Reason: "reply sent"}, nil
}
