// Package route decides whether a message that passed the gates gets a
// reply: first the direct triggers (a pure function of the event), then, for
// unprompted group messages, the [Router].
//
// # Overview
//
// [Classify] runs the [Trigger] list in order and returns the first match:
// private chat, a mention of the bot, a quote of a bot message, an alias in
// the text the sender wrote. A match makes the message direct; otherwise it
// is unprompted and only a Router can let it through.
//
// A [Router] rates an unprompted message and returns a [Decision]. The
// pipeline has no router by default (proactive replies off); an embedder sets
// one, or swaps it with [RouterFunc] in a few lines.
//
// # Implementing
//
// Add a trigger by appending a [TriggerFunc] to the list; implement Router or
// wrap a function in RouterFunc.
//
// # Concurrency
//
// Triggers are pure; Routers are called from many workers at once.
package route
