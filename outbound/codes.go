package outbound

import "github.com/personakit/persona/outcome"

// Outcome codes decided by the model-backed review.
const (
	// IgnoredDuplicateReply: semantic dedup found that an unprompted reply
	// repeats one the bot sent in the last 2 minutes.
	IgnoredDuplicateReply outcome.Code = "ignored_duplicate_reply"
	// IgnoredAuditUnavailable: the audit call failed (error, timeout,
	// unparsable answer) on an unprompted reply.
	IgnoredAuditUnavailable outcome.Code = "ignored_audit_unavailable"
	// IgnoredConversationClosed: a private goodbye beyond the grace count.
	IgnoredConversationClosed outcome.Code = "ignored_conversation_closed"
	// IgnoredAIReplyLoop: the loop detector reached its hit count; the
	// sender is paused and a notice may be sent instead of the reply.
	IgnoredAIReplyLoop outcome.Code = "ignored_ai_reply_loop"
	// IgnoredProactiveReplyQuality: the quality gate rejected an unprompted
	// reply.
	IgnoredProactiveReplyQuality outcome.Code = "ignored_proactive_reply_quality"
	// RepliedSafetyNotice: the account-safety score was below the threshold;
	// a neutral notice was sent instead of the reply.
	RepliedSafetyNotice outcome.Code = "replied_safety_notice"
)

// Outcome codes decided by the send stage.
const (
	// DroppedForwardUnsafe: the merged-forward text was stopped by its
	// account-safety check; nothing was sent.
	DroppedForwardUnsafe outcome.Code = "dropped_forward_unsafe"
	// DroppedOutboundDelivery: the chat's send lane is in its drop cooldown
	// after 30 minutes of failures.
	DroppedOutboundDelivery outcome.Code = "dropped_outbound_delivery"
	// IgnoredSendPolicy: the send policy denied delivery to this chat.
	IgnoredSendPolicy outcome.Code = "ignored_send_policy"
	// IgnoredCancelledByHook: a BeforeSend hook cancelled the reply.
	IgnoredCancelledByHook outcome.Code = "ignored_cancelled_by_hook"
)

// stopRequested is the code "ignored_stop_requested". Package gate owns and
// declares it (its gate G11, the group stop window); the review returns the
// same code for a private stop verdict and for an unprompted reply inside a
// stop window. It is spelled here as a plain string so that the code has a
// single declaring package.
const stopRequested = "ignored_stop_requested"

// CodeStopRequested returns the code "ignored_stop_requested" (declared by
// package gate), which the review returns for a private stop verdict and for
// an unprompted reply inside a group stop window.
func CodeStopRequested() outcome.Code { return outcome.Code(stopRequested) }
