// Package cluster lets several processes of one bot share a platform
// connection that only one of them may have open at a time (a OneBot
// WebSocket, a gateway socket, Telegram long polling).
//
// The processes share a store (store/postgres implements [Store]). Any of
// them may receive events and run turns, but [Share] makes sure that
// exactly one runs the wrapped channel's Run: the holder. The others
// follow it:
//
//   - Holding. The holder is whoever has the hold on Options.Name, a
//     lock the store keeps alive only as long as the holder's own
//     connection to it: PostgreSQL's session-level advisory lock on a
//     connection outside the pool. When the holder dies, even killed
//     without a chance to clean up, its connection closes and the server
//     drops the lock; a follower, which tries to take the hold every
//     Options.Retry (1 s), becomes the holder a moment later. The holder
//     checks its connection every second and stops the channel as soon
//     as the hold is lost, so two processes overlap for a second at most.
//     There is no lease to renew and no clock involved in who holds.
//
//   - Sending. The holder sends directly. A follower's Send writes the
//     message (as JSON) into a table of relayed sends and wakes the
//     holder with a notification; the holder claims it, sends it through
//     the real channel and stores the receipt or the error; the follower,
//     woken by another notification (or a re-read every second, in case
//     one was lost), returns that result as if it had sent the message
//     itself. Errors cross as their class and the fields of the channel
//     package's typed errors, so errors.Is and errors.As on the follower
//     see the same rate limit, rejection or mute ([RemoteError]).
//
//   - Reading history. When the wrapped channel can read a chat's history
//     (channel.HistoryFetcher, found with channel.As), so can the channel
//     Share returns, and only then: a channel without it stays without
//     it. The holder reads through its channel directly; a follower's
//     read is relayed like a send (the query, as JSON, in the same table,
//     the page or the error stored for it), so that the delivery exit can
//     look for a chunk of a crashed attempt in the chat, and gap refetch
//     works, in any process. A read has no idempotency key: every call is
//     a request of its own, and its answer is deleted soon after
//     ([ReadKeep]).
//
//   - Idempotency. A send with an idempotency key has one row per key:
//     asking again for a chunk that was delivered returns the stored
//     receipt and sends nothing; a chunk that is still pending or being
//     sent is waited for; one that failed, was withdrawn or is
//     unconfirmed is asked again.
//
//   - Failing safely. A follower fails fast with channel.ErrOffline when
//     no process holds the connection or the holder is not online. A send
//     (or read) the holder has not taken within Options.PendingTimeout
//     (30 s), or whose caller gave up while it was still pending, is
//     withdrawn and can never be made later; it fails with
//     channel.ErrOffline. A send the holder had taken when it died has an
//     unknown fate: the next holder marks it unconfirmed, and the follower
//     gets channel.ErrUnconfirmed, which tells the delivery ledger to keep
//     the chunk's intent and look for it in the chat rather than send it
//     twice. A read the holder had taken when it died has no effect to be
//     unsure of: it fails with channel.ErrOffline, and may be asked again.
//     The holder claims only while its channel is online, and deletes
//     finished rows after Options.Keep (1 h).
//
//   - State. The holder publishes every state its channel reports; each
//     follower's Run reports the holder's state to its own pipeline (not
//     connected while nobody holds the connection), so every process
//     claims and runs turns for the channel while the holder is online.
//
// A channel that several processes may run at once (channel.Shareable:
// webhook receivers whose sends are plain HTTP calls) needs none of this,
// and Share returns it unchanged. Send and FetchHistory are all that is
// relayed. The other optional capabilities of the wrapped channel
// (listing chats, typing, recall, forward cards, media, ...) are found
// through Unwrap and are not relayed, so in a follower they act on a
// channel that is not running.
package cluster
