package outbound

import (
	"context"
	"strings"

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
}

// Verdict is a reviewer's decision. Send=false ends the turn with Code and
// Reason; Send=true sends Text and records Code (replied, replied_fallback,
// ...) once delivered.
type Verdict struct {
	Send   bool
	Text   string
	Code   outcome.Code
	Reason string
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
	body := strings.TrimSpace(strings.NewReplacer(MsgMarker, "", LineMarker, "").Replace(StripControl(raw)))
	switch {
	case strings.Contains(raw, MarkerSilent) && body == "":
		return Verdict{Code: IgnoredModelSilent, Reason: "the model chose to stay silent"}, nil
	case strings.Contains(raw, MarkerRefuse) && !p.Direct:
		// SPEC §6.1 step 3: a chat-in reply marked as a refusal is not
		// sent, whatever text came with the marker.
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
