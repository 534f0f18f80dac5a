// Package route decides whether a message that passed the gates gets a
// reply: first the direct triggers (a pure function of the event), then, for
// unprompted group messages, the [Router] (SPEC §3.3–§3.5).
//
// # Overview
//
// [Classify] runs the [Trigger] list in order and returns the first match
// ("" = unprompted). [DefaultTriggers] holds: owner command (the
// [Identity.CommandPrefix], "/" by default, from an owner), plugin command
// ([Identity.Commands], from anyone), private chat, a mention of the bot, a
// quote of a bot message, an alias in the text the sender wrote
// ([AliasMode] loose, smart (default: aliases inside quotation pairs do not
// count) or strict (vocative position only)), and a resolvable link (on
// when [Identity.ResolveLink] is set). Matching is case-insensitive and
// never looks at quoted or forwarded text. Classify is pure, so the
// pipeline can compute the trigger before the gates.
//
// A [Router] rates an unprompted group message and returns a [Decision].
// The default, [ModelRouter] built by [New], asks a model (purpose
// agent.PurposeRouter, 60 s for the whole rating) with the bot's aliases
// and last message, the last 30 messages (at most 180 characters each,
// speakers aliased as u1, u2, …; real ids never reach the model) and the
// candidates, and expects
//
//	{"candidates":[{"message_id":"c1","relevance":{"directed":"yes|no","reason":"…"},"chat_in":{"score":0.0,"reason":"…"}}]}
//
// ([ParseRatings]; code fences stripped). An unusable answer is asked once
// more with a reminder of the schema; a second unusable answer, a timeout
// or any model error ends as [IgnoredRouterFailed] — there is no keyword
// fallback. Each candidate is then decided in order: not directed and score
// 0 → [IgnoredRouterStop] (even at no_limit); answer-questions on and
// directed → pass; chat-in off or score below the level's threshold →
// [IgnoredChatScore]; chat cooldown running → [IgnoredChatCooldown];
// talk-too-much below no_limit → [IgnoredTalkTooMuch]; else pass through
// chat-in (Decision.ChatInPass). The cooldown starts only when the pipeline
// reports a sent chat-in reply with [ModelRouter.ChatReplySent]. Every
// rating is logged as "proactive_reply_route" with both reasons; the
// decisive reason is Decision.Reason.
//
// The settings per chat (answer questions, chat level and threshold,
// cooldown, extra criteria) come from Config.Settings, normally
// (*gate.Rules).Proactive, so the gates and the router read one policy.
//
// # Implementing
//
// Add a trigger by appending a [TriggerFunc] to the list; implement Router or
// wrap a function in [RouterFunc] to replace the router in a few lines.
//
// # Concurrency
//
// Triggers are pure; Routers are called from many workers at once. The
// ModelRouter bounds concurrent calls (Config.Concurrency) and never rates
// one session twice at the same time.
package route
