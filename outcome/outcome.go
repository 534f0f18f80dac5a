package outcome

import "strings"

// Code is a stable, machine-readable outcome such as "replied" or
// "ignored_stale". Codes are part of the public contract: they are stored,
// shown to operators and matched by dashboards, so they never change meaning.
type Code string

// String returns the code itself.
func (c Code) String() string { return string(c) }

// Replied reports whether something was delivered for the message
// (every code starting with "replied").
func (c Code) Replied() bool { return strings.HasPrefix(string(c), "replied") }

// Valid reports whether c is a well-formed code: lower-case ASCII letters,
// digits and underscores, starting with a letter.
func (c Code) Valid() bool {
	if c == "" {
		return false
	}
	for i, r := range c {
		switch {
		case r >= 'a' && r <= 'z':
		case (r >= '0' && r <= '9' || r == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

// The codes decided by the pipeline's own wiring (the root package and the
// default reply flow). Stage packages declare the rest.
const (
	// Replied: a direct trigger was answered.
	Replied Code = "replied"
	// RepliedProactive: an unprompted group message was answered after the
	// router allowed it.
	RepliedProactive Code = "replied_proactive"
	// RepliedFallback: generation was empty and a fallback line was sent.
	RepliedFallback Code = "replied_fallback"
	// RepliedError: a definitive generation failure on a direct turn; a short
	// error line was sent.
	RepliedError Code = "replied_error"
	// IgnoredGenerationFailed: a definitive generation failure on an
	// unprompted turn (silent).
	IgnoredGenerationFailed Code = "ignored_generation_failed"
	// IgnoredPrivateAdmission: a private chat refused by the admission mode.
	IgnoredPrivateAdmission Code = "ignored_private_admission"
	// MergedIntoReply: folded into another turn's reply (a supplement or
	// correction of a message whose reply was being generated, or a
	// proactive companion).
	MergedIntoReply Code = "merged_into_reply"
	// SupersededRepeat: a repeat of a message whose reply was being
	// generated; that reply answers it.
	SupersededRepeat Code = "superseded_repeat"
	// SupersededFollowUp: a sealed turn dropped before sending; a newer turn
	// of the same person answers both.
	SupersededFollowUp Code = "superseded_follow_up"
	// SupersededMediaTurn: a message of only media (a picture, a voice
	// clip) taken into the same sender's text message sent within the
	// media window; that turn answers both.
	SupersededMediaTurn Code = "superseded_media_turn"
	// DroppedInvalidResult: a stage (gate, router, reviewer, sender — the
	// default or an embedder's) returned a zero or invalid result, such as
	// a route.Decision or outbound.Verdict without a valid code; the reason
	// names what it returned.
	DroppedInvalidResult Code = "dropped_invalid_result"
)

// The notice codes: a platform notice recorded in history, never queued.
const (
	NoticeGroupRecall   Code = "notice_group_recall"
	NoticeFriendRecall  Code = "notice_friend_recall"
	NoticePoke          Code = "notice_poke"
	NoticeGroupIncrease Code = "notice_group_increase"
	NoticeFriendAdd     Code = "notice_friend_add"
	NoticeMessageEdited Code = "notice_message_edited"
)

// Notice returns the code recorded for a platform notice of the given type,
// for example Notice("group_recall") == "notice_group_recall".
func Notice(noticeType string) Code { return Code("notice_" + noticeType) }
