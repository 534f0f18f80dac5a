// Package outbound is the last part of a turn: the pre-send review of a
// drafted reply and its delivery in chunks.
//
// # Overview
//
// A [Reviewer] looks at a draft and decides whether it goes out. A [Sender]
// delivers a reply chunk by chunk through a channel. Every chunk goes through
// the delivery [Ledger]: its fingerprint is written as an intent before the
// platform call and marked sent with the platform message ids after it, so a
// retried or restarted turn skips chunks that were already delivered and never
// sends one twice. package store implements Ledger on SQLite.
//
// # Implementing
//
// Implement Reviewer or Sender, or wrap a function in [ReviewerFunc] /
// [SenderFunc].
//
// # Concurrency
//
// Reviewers, Senders and Ledgers are used by many workers at once.
package outbound
