package outcome

import "strings"

// Info describes one outcome code persona declares: the package that owns
// it and, in a sentence, when a message ends with it.
type Info struct {
	Code Code `json:"code"`
	// Owner is the last element of the declaring package's path
	// ("outcome" for the pipeline's own wiring, "persona" for the root).
	Owner string `json:"owner"`
	// Meaning says when a message ends with the code.
	Meaning string `json:"meaning"`
}

// catalogue lists the codes persona declares, in the order of the README's
// outcome table (a test in the module root keeps the two, and the
// constants, in step).
var catalogue = []struct{ code, owner, meaning string }{
	{"replied", "outcome", "a direct trigger was answered"},
	{"replied_proactive", "outcome", "an unprompted group message was answered after the router allowed it"},
	{"replied_fallback", "outcome", "generation was empty; a fallback line was sent"},
	{"replied_error", "outcome", "definitive generation failure on a direct turn; a short error line was sent"},
	{"ignored_generation_failed", "outcome", "definitive generation failure on an unprompted turn (silent)"},
	{"ignored_private_admission", "outcome", "private chat refused by the admission mode"},
	{"merged_into_reply", "outcome", "folded into another turn's reply (a supplement or correction of the same person's message whose reply was being generated)"},
	{"superseded_repeat", "outcome", "a repeat of a message whose reply was being generated; that reply answers it"},
	{"superseded_follow_up", "outcome", "a sealed turn dropped before sending; the same person's newer turn answers both"},
	{"superseded_media_turn", "outcome", "a media-only message taken into the same sender's text turn within the media window"},
	{"dropped_invalid_result", "outcome", "a stage (gate, router, reviewer, sender; the default or your own) returned a zero or invalid result, such as a decision without a valid code; the reason names it"},
	{"notice_group_recall", "outcome", "a group message was recalled (recorded, never queued)"},
	{"notice_friend_recall", "outcome", "a private message was recalled"},
	{"notice_poke", "outcome", "someone poked the bot"},
	{"notice_group_increase", "outcome", "someone joined a group"},
	{"notice_friend_add", "outcome", "a friend was added"},
	{"notice_message_edited", "outcome", "a message was edited (edits never re-trigger)"},
	{"notice_friend_request", "persona", "a friend request, answered by the friend-request policy or left for a person"},
	{"replied_notice", "persona", "a poke was answered or a new member welcomed (in persona, within the cooldowns)"},
	{"replied_command", "persona", "a chat command was answered in code, without the chat model"},
	{"handled_command", "persona", "a chat command ran and had nothing to say"},
	{"replied_scheduled", "persona", "a scheduled message was posted"},
	{"ignored_schedule_missed", "persona", "a schedule's due time passed while the bot was down, too long ago to post late (more than an hour)"},
	{"dropped_retries_exhausted", "inbound", "the item failed its last allowed attempt (5 by default)"},
	{"ignored_stale", "inbound", "older than the replay cutoff"},
	{"backfill_history_only", "inbound", "a backfilled message kept as history only"},
	{"ignored_proactive_off", "gate", "unprompted and proactive replies are off (or no router)"},
	{"ignored_unavailable_group", "gate", "the bot is no longer in the group"},
	{"ignored_bot_disabled", "gate", "the bot is switched off"},
	{"ignored_group_disabled", "gate", "the group is switched off or not admitted"},
	{"ignored_bot_muted", "gate", "the bot is muted in this group"},
	{"ignored_model_quota", "gate", "the daily model quota of the bot, group or user is used up"},
	{"ignored_response_suppression", "gate", "the sender (or chat) is paused: pause marker, stop, refusals, loop"},
	{"ignored_bot_chat_suppressed", "gate", "the sender is a bot and bot-to-bot chat is not allowed for this message"},
	{"ignored_video", "gate", "only a video, no text or image"},
	{"ignored_sticker_only", "gate", "only stickers, not addressed to the bot"},
	{"ignored_blocked_user", "gate", "reply gate: the sender is blocked"},
	{"ignored_not_allowlisted", "gate", "reply gate: an allowlist is set and the sender is not on it"},
	{"ignored_quiet_hours", "gate", "reply gate: outside the active hours"},
	{"ignored_member_level", "gate", "reply gate: below the group's minimum member level (or unknown with policy deny)"},
	{"ignored_stop_requested", "gate", "a stop was requested: the group's stop window for unprompted replies, or a private stop verdict"},
	{"ignored_sampled_out", "gate", "unprompted message not selected by the group's sampling rate"},
	{"ignored_router_failed", "route", "the router failed; the message is left unanswered"},
	{"ignored_router_stop", "route", "router: not directed and chat score 0"},
	{"ignored_chat_score", "route", "router: not an answerable directed question and chat score below the level threshold"},
	{"ignored_chat_cooldown", "route", "router: the chat-in cooldown is not over"},
	{"ignored_talk_too_much", "route", "the bot's share of recent messages is too high"},
	{"ignored_model_silent", "outbound", "the model chose silence and silence was allowed"},
	{"ignored_no_natural_reply", "outbound", "an unprompted reply was empty or a refusal"},
	{"dropped_send_rejected", "outbound", "the platform rejected the send definitively (incl. kicked, muted)"},
	{"ignored_duplicate_reply", "outbound", "semantic dedup: an unprompted reply repeats one from the last 2 minutes"},
	{"ignored_audit_unavailable", "outbound", "the audit failed on an unprompted reply (when unsure, don't butt in)"},
	{"ignored_conversation_closed", "outbound", "a private goodbye beyond the grace count"},
	{"ignored_ai_reply_loop", "outbound", "the loop detector reached 3 hits in 30 minutes; a pause with a notice"},
	{"ignored_proactive_reply_quality", "outbound", "the quality gate rejected an unprompted reply"},
	{"replied_safety_notice", "outbound", "account-safety score below 0.10; a neutral notice was sent instead"},
	{"dropped_forward_unsafe", "outbound", "merged-forward text stopped by its safety check; nothing sent"},
	{"dropped_outbound_delivery", "outbound", "the send lane is in its drop cooldown after 30 minutes of failures"},
	{"ignored_send_policy", "outbound", "the send policy denied delivery to this chat"},
	{"ignored_cancelled_by_hook", "outbound", "a BeforeSend hook cancelled the reply"},
}

var meanings = func() map[Code]int {
	m := make(map[Code]int, len(catalogue))
	for i, c := range catalogue {
		m[Code(c.code)] = i
	}
	return m
}()

// Catalogue returns every outcome code persona declares, with its owner
// and meaning. Codes of an embedder's own stages are not in it.
func Catalogue() []Info {
	out := make([]Info, len(catalogue))
	for i, c := range catalogue {
		out[i] = Info{Code: Code(c.code), Owner: c.owner, Meaning: c.meaning}
	}
	return out
}

// Meaning returns what a code persona declares means, "" for any other.
func Meaning(c Code) string {
	if i, ok := meanings[c]; ok {
		return catalogue[i].meaning
	}
	return ""
}

// The families codes are grouped by (see Family).
const (
	FamilyReplied = "replied"
	FamilyIgnored = "ignored"
	FamilyDropped = "dropped"
	FamilyNotice  = "notice"
	// FamilyOther is every other code: merges, supersessions, backfill,
	// handled commands.
	FamilyOther = "other"
)

// Family returns the family of a code: the first of the words "replied",
// "ignored", "dropped" and "notice" among its underscore-separated words
// (so an embedder's "acme_ignored_off_topic" is ignored too), else
// FamilyOther; "" for no code.
func Family(c Code) string {
	if c == "" {
		return ""
	}
	for w := range strings.SplitSeq(string(c), "_") {
		switch w {
		case FamilyReplied, FamilyIgnored, FamilyDropped, FamilyNotice:
			return w
		}
	}
	return FamilyOther
}
