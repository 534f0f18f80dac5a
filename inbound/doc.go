// Package inbound is the durable inbound queue: every message a channel
// delivers is written here before anything else happens, so a crash, a
// restart or a stuck model never loses it.
//
// # Overview
//
// [Queue] is the port; package store implements it on SQLite and any other
// implementation can prove itself with the conformance suite in
// inbound/queuetest. An [Item] is keyed by the event's canonical key
// (platform, bot id, chat, message id), so enqueueing the same platform
// message twice is a no-op that only raises a still-pending item's priority
// (and ends a backfill's history-only mark when the repeat arrives live).
//
// Items move pending → leased → done. [Queue.Claim] leases up to a number of
// items in one atomic step, in priority order (direct 100, quote 80, link 60,
// else 0; ties by event time, then id), honouring per-session in-flight limits
// (3 per group, 2 per private chat by default). A lease lasts 10 minutes and is
// renewed by [Queue.Extend] while the turn runs; [Queue.Complete],
// [Queue.Retry], [Queue.Snooze], [Queue.Release] and [Queue.Extend] succeed
// only for the current lease holder and otherwise return [ErrLeaseLost]. An
// expired lease is claimable again. A queue may hold a claim in memory and
// store it with the lease's first operation ([Limits.HoldBelow],
// [Lease.Held]) for a caller that asks for it. The pipeline asks for none:
// every claim it makes is stored before any stage runs, so an attempt that
// kills the process is still counted.
//
// Processing errors are retried with [RetryDelay] (5 s doubling, capped at 5
// minutes); the fifth failed attempt completes the item as
// dropped_retries_exhausted. A definitive failure is completed, never
// retried.
//
// When the queue cannot be written, the pipeline appends the item to a
// [Journal] (an fsynced local file, see [OpenJournal]) and a replayer retries
// it with 2 s doubling to 30 s backoff.
//
// A [Coordinator] per channel keeps the pipeline in step with the
// connection: work is claimed only while the channel is connected and its
// account online ([Coordinator.Ready]); an online checkpoint is saved every
// 30 s; after a reconnect the replay cutoff is max(disconnect − 30 min,
// now − 24 h) and three backfills (+1 s, +1 min, +5 min) pull what was sent
// while the bot was away, through the channel's HistoryFetcher and
// ChatLister: per session only the newest 3 messages that would have
// triggered directly are queued normally, the rest are kept as history
// only, and anything older than the cutoff ends ignored_stale. A run
// leaves a message sent less than 10 s before it started to the live push
// (which would otherwise find it already kept as history only); a later run
// takes it if the push never came. Live group
// messages with sequence numbers feed gap detection ([Coordinator.ObserveLive]),
// which refetches missing ranges and rechecks them at 15 s, 1 min and 3 min.
//
// # Implementing
//
// Implement [Queue] and run queuetest.Run against it. Timestamps are stored
// as unix milliseconds; "now" comes from the implementation's injected clock.
//
// # Concurrency
//
// Queue implementations must be safe for concurrent use by many workers and
// many channel goroutines.
package inbound
