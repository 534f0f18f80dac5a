// Command groupsim replays a chat log offline through the real persona
// pipeline, to tune a bot (aliases, owners, chat-in level, group policy)
// before it goes live:
//
//	go run ./examples/groupsim -in examples/groupsim/testdata/sample.jsonl -alias Mira
//
// # Input
//
// JSON Lines (-in FILE, or standard input), one message per line, in time
// order:
//
//	{"id":"m7","at":"2026-11-30T10:00:07Z","chat":"group:100","from":"u3","name":"Bea","text":"…",
//	 "mentions":["bot"],"reply_to":"m5","role":"member","level":12,"media":["image"]}
//
// id, at (RFC 3339), chat (group:<id> or private:<id>, the id of a private
// chat being the peer's user id) and from are required; text or media must
// be present. mentions (user ids; "bot" is the bot), reply_to (the id of an
// earlier line of the same chat), role (owner, admin, member), level (the
// member level, known when present) and media (image, video, voice, file)
// are optional. Unknown fields, duplicate ids and other malformed lines stop
// the run with the line number before anything is simulated.
//
// Lines from "bot" are the bot's own earlier messages: they go into the
// chat history (as the platform's echo of the bot's messages would), and a
// reply_to one of them is a quote of the bot. They get an output line with
// the pseudo-outcome "history".
//
// # Simulation
//
// Every other line is injected, one at a time, into the real pipeline over
// an in-memory channel, a throwaway SQLite store in a temporary directory
// (removed at exit) and a simulated clock that starts at the earliest "at"
// of the log: the clock is set to each line's "at" (it never goes back, so
// a line out of order is decided at the later time, with its own "at" as
// the message time), and the next line waits until this one has its
// terminal record. While it waits and no model call is running, the clock
// is stepped a second at a time, so retries, media-merge waits and pacing
// timers finish without real waiting (the clock can then run slightly ahead
// of the next line's "at"). Messages are therefore never concurrent: a burst
// from one person is decided message by message, and the same-person merge
// (merged_into_reply) cannot happen in a replay.
//
// The model comes from the environment, as for examples/console
// (PERSONA_MODEL_BASE_URL, PERSONA_MODEL_API_KEY or OPENAI_API_KEY,
// PERSONA_MODEL; PERSONA_SOUL names a SOUL.md). It answers everything: the
// replies, the proactive router, the review. Without one, the simulation is
// offline and deterministic: there is no router model, so unprompted group
// messages end as ignored_proactive_off (after the gates before it), direct
// ones get a fixed offline reply, and the review is the program-only one
// (no audit, so a stop request opens no stop window).
//
// # Output
//
// One JSON line per input line, in input order:
//
//	{"id":"m7","outcome":"replied_proactive","reason":"…","directed":"yes","chat_in":0.91,"reply":["…"]}
//
// directed and chat_in appear when the router rated the message (taken from
// its proactive_reply_route log record); trigger names the direct trigger
// (mention, quote, alias, private, owner_command, …) and is absent for
// unprompted messages; reply lists the texts the bot sent for the message.
// A last line counts the output lines per outcome:
// {"summary":{"history":4,"replied":20,…}}.
//
// # Flags
//
//	-in FILE        the log (default: standard input; "-" too)
//	-alias NAME     a name the bot answers to (repeatable)
//	-alias-mode M   loose, smart (default) or strict
//	-owner ID       an owner account id (repeatable)
//	-level L        the chat-in level: off, low, medium, high or no_limit
//	-config FILE    the reply policy, see below
//	-v              log the pipeline's info records to standard error
//
// # Policy file
//
// -config takes a JSON object; every field is optional and zero means the
// default (gate.Policy and gate.GroupPolicy document each one).
// Durations are strings such as "90s" or "1h". Unknown fields are errors.
//
//	{
//	  "policy": {
//	    "disabled": false,
//	    "group_admission": "open", "group_allowlist": ["100"], "disabled_groups": ["300"],
//	    "blocked_users": ["u9"], "allowed_users": [], "exempt_users": ["u2"],
//	    "active_hours": "08:00-23:00", "zone": "Europe/Berlin",
//	    "quiet_reply": "I'm off for the night.", "quiet_reply_interval": "1h",
//	    "min_member_level": 0, "level_unknown": "allow", "member_cache_ttl": "10m",
//	    "bot_chat": "mentions", "sampling_rate": 1, "stop_window": "10m",
//	    "quota": {"bot": 0, "group": 0, "user": 0},
//	    "proactive": {"answer_questions": "on", "chat_in": "low", "chat_threshold": 0,
//	                  "chat_cooldown": "30s", "criteria": "Answer questions about the game."}
//	  },
//	  "groups": {
//	    "200": {"blocked_users": ["u9"], "active_hours": "09:00-22:00", "quiet_reply": "…",
//	            "min_member_level": 3, "proactive": {"chat_in": "off"}}
//	  },
//	  "private_admission": "everyone",
//	  "private_allowlist": []
//	}
//
// "groups" is keyed by the group id ("200" or "group:200"); a group entry
// takes the fields of "policy" except group_admission, group_allowlist,
// disabled_groups, quiet_reply_interval, member_cache_ttl, stop_window and
// quota.bot. -level sets the bot-wide chat-in level (replacing
// policy.proactive.chat_in); a group's own proactive.chat_in still wins.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "groupsim:", err)
		os.Exit(1)
	}
}

// run is main without the process globals, so the command is testable.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	return runWith(ctx, args, stdin, stdout, stderr, getenv, hooks{})
}
