// Package outbound is the last part of a turn: the pre-send review of a
// drafted reply, its shaping, and its delivery in chunks.
//
// # Overview
//
// A [Reviewer] looks at a generated reply ([Proposal]) and returns a
// [Verdict]: send this text with this outcome code, stop with a code, or
// regenerate once from image descriptions. [BasicReviewer] makes the
// program checks only; [NewReviewer] builds the default [ModelReviewer],
// which runs its checks in a fixed order: images the model could not see,
// model-chosen silence, empty replies and refusals, pause and refusal
// markers, lines already said with say, then semantic dedup and the audit
// model started in parallel (the audit runs again when dedup rewrote the
// text), the audit verdicts in their fixed order (failure, private
// closing, group stop, loops, account safety, quality, refusals) and
// finally the group stop window. Stop windows, pauses and counters live in
// a [StateStore]; the names [StatePause] and [StateStopWindow] are the
// ones package gate reads, so a pause set here stops later turns at the
// gates. [MemoryState] is an in-memory StateStore.
//
// Shaping ([Shape], [ShapeReply], [Split]) strips control markers and tool
// calls written as prose, turns Markdown into plain text unless the channel
// implements [RichTexter], splits on the message markers, then at natural
// boundaries in the channel's own unit (bytes, runes or UTF-16 units), cuts
// code blocks with their fences closed and reopened, and compresses a reply
// that would need more than 8 chunks through a model (at most 2 calls of
// 30 s). Nothing is truncated: no chunk exceeds the limit, and a reply
// still long after compression goes out in all its chunks.
// [PlatformLimits] lists the default limits of each platform.
//
// An [Exit] is the single way out to a platform. [Exit.Bind] wraps a
// channel for one reply ([ExitChannel], passed as Reply.Channel), and
// every chunk any [Sender] sends through it goes through the delivery
// [Ledger] (its fingerprint written as an intent before the platform call,
// the platform ids after it; a chunk an earlier attempt delivered is not
// sent again, and one it left as an intent is looked for in the bot's
// echoed messages and in the chat's history back to the intent's time,
// and sent again only when proven absent, else counted as unknown:
// [ErrDeliveryUnknown], Delivery.Unknown), has the mentions the model
// wrote turned into platform mentions or names ([ResolveMentions]),
// control markers stripped and secrets masked ([MaskSecrets]), and is
// reported to ExitConfig.Delivered (the pipeline writes it into history).
// package store implements Ledger on SQLite.
//
// A [Sender] delivers a reply. The default [ChunkSender] resolves
// [persona-reply:<id>] markers ([ResolveMarkers]), applies the
// [SendPolicy] and the [BeforeSend] hooks, shapes the text, stores the
// draft (a resumed turn sends its stored draft instead of new text), runs
// the caller's send-time guard ([Reply].Guard) before the first chunk
// only, and then sends one merged-forward card (where the channel
// implements channel.ForwardSender and the reply is over the threshold)
// or the chunks, paced, with the typing indicator kept on when asked
// ([TypingController]), all through the reply's ExitChannel (one bound to
// an Exit of its own when the caller passed a plain channel).
//
// A step that ends a reply before the platform call returns a [Delivery]
// with Stopped set and the code to record (IgnoredSendPolicy,
// IgnoredCancelledByHook, DroppedForwardUnsafe, DroppedOutboundDelivery or
// the guard's code). Platform failures return a [*SendError] wrapping the
// classified channel error: the caller snoozes offline and rate-limited
// turns (a rate limit up to 6 s is waited out inline), records
// DroppedSendRejected for definitive rejections (kicked, muted, 403-style)
// and retries the rest. Group chats back off in [Lanes] (a text and a
// media lane each): a failing lane returns a [*SnoozeError] (which unwraps
// to a *channel.RateLimitedError) until its next attempt, and after 30
// minutes of failures drops sends for 30 minutes.
//
// # Implementing
//
// Implement Reviewer or Sender, or wrap a function in [ReviewerFunc] /
// [SenderFunc]. Implement [Ledger] and [StateStore] to persist elsewhere.
//
// # Concurrency
//
// Reviewers, Senders, Lanes, Ledgers and StateStores are used by many
// workers at once. A ChunkSender sends one reply per session at a time.
package outbound
