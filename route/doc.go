// Package route decides whether a message that passed the gates gets a
// reply: first the direct triggers (a pure function of the event), then, for
// unprompted group messages, the [Router].
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
// agent.PurposeRouter, 60 s for the whole rating) with the bot's alias and
// names, the recent transcript (at least 30 messages, at most 180
// characters each), the bot's last message and the candidates, and
// expects
//
//	{"candidates":[{"message_id":"m_…","relevance":{"directed":"yes|no","reason":"…"},"chat_in":{"score":0.0,"reason":"…"}}]}
//
// ([ParseRatings]; code fences stripped; a candidate may be named by the
// alias it was shown with, by its real message id, or by its position
// label c1, c2, …). An unusable answer is asked once
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
// # Privacy and caching
//
// Real ids never reach the router's model. Every id is rendered through
// the session's agent.Scope, the one the context carries (agent.WithScope;
// the pipeline sets it for every turn): speakers, mentions ("@u_…"; a
// mention of everyone, agent.MentionAll, reads "@everyone"), quoted
// senders and the candidates' message ids ("m_…") are the Scope's
// aliases, the same in every call of every kind; ids the Scope knows that
// people typed are scrubbed from the texts; media are placeholders
// ("[image]"), never URLs, and only inline (data:) images of the message
// are attached. The bot has an alias like everyone else; the request says
// which one (bot.speaker) and marks the bot's lines is_bot. Without a
// Scope in the context (the router used on its own) the router renders
// through a fallback Scope per session, keyed by a random secret of the
// ModelRouter: aliases are stable for the router's lifetime and differ
// between sessions. Whether or not the model sits behind agent.Private,
// which turns aliases in its answer back into ids, the router maps the
// answer's message ids back itself.
//
// The request is laid out for a provider's prefix cache: the fixed system
// prompt, then what stays the same from one rating of a session to the
// next (the bot's alias and names, the group's criteria, the transcript
// with absolute UTC times), then what changes with every rating (how long
// ago the bot spoke, the candidates, the current time). The transcript
// window is epoch-anchored: it starts where the session's previous window
// started and grows with the new messages up to twice
// Config.TranscriptMessages, then jumps forward to the newest
// TranscriptMessages; so a request only appends to the previous one's
// transcript, except once every TranscriptMessages messages. The window
// start is kept per session in memory (a restart starts a new epoch). For
// this the pipeline passes [ModelRouter.RecentLimit] recent messages. On a
// busy group replayed in the tests, consecutive requests share about 93 %
// of their bytes (38 % with the former per-call aliases and ages).
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
