// Package persona is an embeddable SDK for persona chat bots: plug in
// channels, a persona (SOUL.md) and an OpenAI-compatible model, and get a bot
// that answers when addressed, never loses a message across crashes, never
// sends the same chunk twice, and records for every message why it did or
// did not reply.
//
// # Overview
//
// One inbound message travels a fixed pipeline of eight stages, each a
// package with a small interface:
//
//  1. channel: platform message → normalised channel.Event
//     (channel/onebot, channel/telegram, channel/qqbot, channel/dingtalk,
//     channel/feishu, channel/wecom, or your own adapter)
//  2. inbound: the durable queue (idempotent enqueue, leases, retries) and
//     the per-channel coordinator (checkpoints, reconnect backfill, gaps)
//  3. gate, route: deterministic gates → direct triggers → router; the same
//     person's bursts are merged into the reply being generated
//  4. agent, memory: context assembly (stable prefix first, aliased ids,
//     recalled memory after the cache breakpoint)
//  5. agent: generation (one model call, the agent tool loop with
//     Options.Agent, or a Runner of your own)
//  6. outbound: pre-send review (silence, dedup, audit, stop windows)
//  7. outbound: chunked sending through the delivery ledger
//  8. store: the outcome record (code + reason) of every message
//
// [New] builds a [Pipeline] from one [Options] struct whose zero fields mean
// "use the default stage"; set Options.Router, Options.Runner, ... to swap a
// stage. [Pipeline.Run] runs the channels and workers until its context ends.
// [Pipeline.HandleEvent] is the single entry for events; channels call it
// through the Sink they are given.
//
// # Media
//
// Pictures, stickers and voice (Options.Media, see [MediaOptions]) are
// fetched through the adapters (channel.MediaFetcher) or a public-address
// guard, cached once by content, described by the vision model and
// transcribed before the gates; a picture and its caption are one turn.
// The package media does the work; the pipeline stores what it learnt with
// each message.
//
// # Operating the bot
//
// Every record carries the message's decision trail (inbound.Trail: the
// trigger, the gates passed and the one that stopped it, the router's
// rating, each review verdict). [Pipeline.EventCenter] serves it to a
// person: a page, a JSON API and a live feed behind a bearer token (package
// eventcenter). Chat commands ([Command], Options.Commands and the
// built-in owner commands /status, /send, /pause, /resume, /why, /welcome, /schedule,
// and anyone's /forget me) are answered in code without the chat model.
// Notices the bot acts on ([NoticeOptions]: poke replies, welcomes, friend
// requests) and scheduled messages (package schedule) go through the
// queue as turns of their own, through the gates and the review.
//
// # Durability
//
// HandleEvent returns only after the message is in the SQLite queue (or,
// when the database cannot be written, in an fsynced journal that is
// replayed later). Workers claim items with a lease that a heartbeat renews;
// every claim is stored before any stage runs, so an attempt that crashes
// the process is counted, and a message claimed more often than
// Options.MaxAttempts allows ends as dropped_retries_exhausted without
// running again. The store's file has one owner at a time; opening it frees
// the leases a dead owner left, so work resumes at once after a restart.
// Every outgoing chunk goes through the delivery ledger, so a retried or
// resumed turn never sends a chunk twice.
//
// # Several processes
//
// With Options.DatabaseURL (or a *postgres.DB as Options.DB) the state
// lives in PostgreSQL (package store/postgres) and several processes run
// one bot: any of them receives events and runs turns from the shared
// queue, idle workers wake on the database's notifications, and a process
// that dies has its leases freed as soon as its database session ends.
// Each channel the pipeline runs is wrapped with cluster.Share: a
// connection that only one process can hold is held by one at a time
// (taken over when its holder dies), and a turn in another process sends
// through the holder, once per delivery-ledger key.
//
// # Privacy and delivery boundaries
//
// Every model call goes through one agent.Private model: ids become
// per-session aliases before a model sees a request, and come back as ids in
// the answer. Every chunk leaves through an outbound.Exit: the ledger,
// mentions as platform mentions, secret masking and the history of sent
// messages happen there, whatever Sender an embedder plugs in
// (Options.WrapSender and the other Wrap options decorate a stage instead
// of replacing it).
//
// # Concurrency
//
// A Pipeline is safe for concurrent use. Nothing changes process-wide at
// import or New: no state of another library (SQLite, net/http, slog) is
// touched, and the packages' own bookkeeping (the store's record of the
// files this process's DBs own) only serves to refuse a second owner.
// Several pipelines can live in one process, each with its own data
// directory (two cannot share one: the store refuses a second owner of a
// file with store.ErrLocked). The one process-wide act is that the first
// store.Open registers the store's WAL-buffering SQLite VFS by name; only
// connections that ask for it by that name use it.
package persona
