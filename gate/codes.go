package gate

import "github.com/personakit/persona/outcome"

// Outcome codes decided by the gates of this package, in the order the
// gates run (G1–G12).
const (
	// IgnoredUnavailableGroup (G1): the bot is no longer in the group.
	IgnoredUnavailableGroup outcome.Code = "ignored_unavailable_group"
	// IgnoredBotDisabled (G2): the bot is switched off.
	IgnoredBotDisabled outcome.Code = "ignored_bot_disabled"
	// IgnoredGroupDisabled (G3): the group is switched off or not admitted.
	IgnoredGroupDisabled outcome.Code = "ignored_group_disabled"
	// IgnoredBotMuted (G4): the bot is muted in this group.
	IgnoredBotMuted outcome.Code = "ignored_bot_muted"
	// IgnoredModelQuota (G5): the daily model quota of the bot, the group
	// or the user is used up.
	IgnoredModelQuota outcome.Code = "ignored_model_quota"
	// IgnoredResponseSuppression (G6): the sender (or the whole chat) is
	// paused: a pause marker, a stop, refusals or a loop.
	IgnoredResponseSuppression outcome.Code = "ignored_response_suppression"
	// IgnoredBotChatSuppressed (G7): the sender is a bot and bot-to-bot
	// chat is not allowed for this message.
	IgnoredBotChatSuppressed outcome.Code = "ignored_bot_chat_suppressed"
	// IgnoredVideo (G8): only video, no text and no image.
	IgnoredVideo outcome.Code = "ignored_video"
	// IgnoredStickerOnly (G8): only stickers (and emoji), not addressed to
	// the bot.
	IgnoredStickerOnly outcome.Code = "ignored_sticker_only"
	// IgnoredBlockedUser (G9, reply gate): the sender is blocked.
	IgnoredBlockedUser outcome.Code = "ignored_blocked_user"
	// IgnoredNotAllowlisted (G9, reply gate): an allowlist is set and the
	// sender is not on it.
	IgnoredNotAllowlisted outcome.Code = "ignored_not_allowlisted"
	// IgnoredQuietHours (G9, reply gate): outside the active hours.
	IgnoredQuietHours outcome.Code = "ignored_quiet_hours"
	// IgnoredMemberLevel (G9, reply gate): below the group's minimum member
	// level, or the level is unknown and the policy is deny.
	IgnoredMemberLevel outcome.Code = "ignored_member_level"
	// IgnoredProactiveOff (G10): an unprompted message while proactive
	// replies are off (both switches off, or no router).
	IgnoredProactiveOff outcome.Code = "ignored_proactive_off"
	// IgnoredStopRequested (G11): an unprompted message inside the group's
	// stop window.
	IgnoredStopRequested outcome.Code = "ignored_stop_requested"
	// IgnoredSampledOut (G12): an unprompted message not selected by the
	// group's sampling rate.
	IgnoredSampledOut outcome.Code = "ignored_sampled_out"
)

// Gate names of the default chain, in order. Use them with Chain.Insert,
// Remove and Replace.
const (
	NameUnavailableGroup    = "unavailable_group"    // G1
	NameBotEnabled          = "bot_enabled"          // G2
	NameGroupEnabled        = "group_enabled"        // G3
	NameBotMuted            = "bot_muted"            // G4
	NameModelQuota          = "model_quota"          // G5
	NameResponseSuppression = "response_suppression" // G6
	NameBotChat             = "bot_chat"             // G7
	NameVideo               = "video"                // G8
	NameReplyGate           = "reply_gate"           // G9
	NameProactiveSwitch     = "proactive_switch"     // G10
	NameStopWindow          = "stop_window"          // G11
	NameSampling            = "sampling"             // G12
)
