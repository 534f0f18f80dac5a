// Package memory is what the bot remembers: the chat history of every
// session (the bot's own messages included) and, built on it, recall for the
// prompt.
//
// # Overview
//
// [History] is the port to the one store-backed transcript; package store
// implements it on SQLite. There is no second in-memory copy that could
// disagree with it.
//
// # Implementing
//
// Implement History; Append must be idempotent on Entry.Key.
//
// # Concurrency
//
// History implementations must be safe for concurrent use.
package memory
