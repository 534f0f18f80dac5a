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
//   - Capabilities. The channel Share returns is a channel.Forwarder:
//     it implements every optional capability that needs the connection
//     (reading history, listing chats, looking members up, fetching
//     media, typing, recall, answering friend requests, forward cards),
//     and channel.As finds one only when the wrapped channel has it, so
//     a channel without a capability stays without it. The holder calls
//     its channel directly; a follower's call is relayed like a send (a
//     row of the same table with the call's kind and arguments as JSON,
//     the answer or the error stored for it), so that backfill, gates
//     that read member roles, pictures and voice, typing and forward
//     cards work in any process. A media fetch crosses as the bytes the
//     holder read from the channel's body, at most the caller's
//     MaxBytes (DefaultMaxMedia when it set none; more fails with
//     channel.ErrMediaTooLarge), or as the URL the channel gave. A call
//     has no idempotency key: every call is a request of its own, and
//     its answer is deleted soon after ([ReadKeep]). The capabilities
//     that need no connection (the text limit, account risk) are the
//     wrapped channel's, found through Unwrap.
//
//   - Idempotency. A send with an idempotency key has one row per key:
//     asking again for a chunk that was delivered returns the stored
//     receipt and sends nothing; a chunk that is still pending or being
//     sent is waited for; one that failed, was withdrawn or is
//     unconfirmed is asked again.
//
//   - Failing safely. A follower fails fast with channel.ErrOffline when
//     no process holds the connection or the holder is not online. A send
//     (or call) the holder has not taken within Options.PendingTimeout
//     (30 s), or whose caller gave up while it was still pending, is
//     withdrawn and can never be made later; it fails with
//     channel.ErrOffline. A send the holder had taken when it died has an
//     unknown fate: the next holder marks it unconfirmed, and the follower
//     gets channel.ErrUnconfirmed, which tells the delivery ledger to keep
//     the chunk's intent and look for it in the chat rather than send it
//     twice; so does a forward card, a recall or a friend request answer.
//     A read (history, chats, a member, media) or a typing indicator the
//     holder had taken when it died has no effect to be unsure of: it
//     fails with channel.ErrOffline, and may be asked again. The errors
//     of the holder's calls cross like those of its sends.
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
// and Share returns it unchanged.
package cluster
