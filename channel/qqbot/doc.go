// Package qqbot is the adapter for the QQ official bot platform (QQ
// 机器人开放平台, the OpenAPI at api.sgroup.qq.com): a [channel.Channel]
// that receives QQ group @-messages, one-to-one (C2C) messages, guild
// channel @-messages and guild direct messages from the WebSocket gateway
// or as signed webhook callbacks, and answers them with passive replies.
// Platform id "qq".
//
// # Overview
//
// Create a [Channel] with [New] and a [Config] with the bot's AppID and
// AppSecret from the QQ bot console; zero fields take the documented
// defaults. [Channel.Run] then
//
//   - in [ModeGateway] (the default) asks GET /gateway for the gateway
//     URL, connects, waits for Hello, sends Identify ("QQBot <token>",
//     intents [DefaultIntents]: GROUP_AND_C2C_EVENT, PUBLIC_GUILD_MESSAGES
//     and DIRECT_MESSAGE, shard [0,1]) or, with a saved session, Resume
//     (session id and sequence), heartbeats every heartbeat_interval with
//     the last accepted sequence, and hands each message event to
//     Sink.HandleEvent;
//   - in [ModeWebhook] serves the callbacks on the Channel, which is an
//     [net/http.Handler]: every request's Ed25519 signature is checked,
//     the console's callback-URL validation (op 13) is answered, and each
//     dispatch is acknowledged only after HandleEvent returned.
//
// The platform announced the end of the WebSocket gateway for new bots
// (late 2024) in favour of webhooks; both work as long as the platform
// serves them.
//
// Access token: POST of the AppID and secret to the token endpoint; the
// token is cached and shared by every call, replaced
// [Config.TokenRefreshBefore] (50 s) before it expires (the endpoint hands
// out a new token only in the last 60 s of the old one), and fetched anew
// once when a call is answered 401, 11243 or 11244. Neither the secret
// nor a token is ever logged or put in an error.
//
// Normalisation (Event.BotID is the AppID):
//
//   - GROUP_AT_MESSAGE_CREATE: a channel.Group chat named by group_openid,
//     the sender by member_openid (an openid per group), a leading mention
//     segment of the bot and ToMe (the platform delivers only messages
//     that @ the bot, with the @ stripped and its space left, which is
//     trimmed);
//   - C2C_MESSAGE_CREATE: a channel.Private chat named by user_openid, the
//     sender's id too, ToMe;
//   - AT_MESSAGE_CREATE: a channel.Group chat "channel:<channel_id>"
//     ([ChannelChatPrefix]), the sender by author.id with its nick or
//     username and the role from the default role ids (4 owner, 2 and 5
//     admin, else member); "<@id>" and "<@!id>" become mention segments
//     (the bot's user id, from READY or GET /users/@me, becomes a mention
//     of the AppID and sets ToMe); &amp; &lt; &gt; are unescaped;
//     seq_in_channel (or seq) is Event.Seq; message_reference is a quote;
//     a message of the bot itself is KindSelf;
//   - DIRECT_MESSAGE_CREATE: a channel.Private chat named by author.id,
//     ToMe; the direct-message guild id is kept to reply;
//   - attachments: image/* a channel.SegImage, "voice" a SegVoice,
//     video/* a SegVideo, others a SegFile, each with Media{URL, Size,
//     Name, MIME} (https:// added when the platform leaves it out).
//     [Channel.FetchMedia] hands the URL over as MediaContent.URL: the
//     platform's media are plain CDN links, fetched by the caller
//     through its public-address guard;
//   - Event.Time is the message's timestamp, Event.MessageID its id; the
//     platform may push a message twice, and the pipeline's idempotent
//     enqueue (Event.Key) drops the repeat;
//   - other event types are acknowledged and logged (qq_event_skipped);
//     a message event that is not valid (a missing or malformed id, no
//     author, d not an object) is acknowledged and dropped with a warning
//     (qq_event_invalid); a frame that is not a payload, or of an unknown
//     op, is dropped (qq_frame_dropped).
//
// Sending ([Channel.Send]): QQ bots can only reply. Each message carries
// the msg_id of an inbound message of the chat: Outgoing.ReplyTo when it
// can still be replied to, else the newest that can (C2C 60 min; groups,
// guild channels and direct messages 5 min; at most [Config.MaxReplies],
// 5, replies to one group or C2C message). When none can, Send fails with
// a *channel.RejectedError whose Code names the reason
// ([RejectNoInbound], [RejectWindowExpired], [RejectReplyLimit]); with
// [Config.ActiveMessages] it sends an active message instead, which the
// platform stopped offering on 2025-04-21 (it answers 40034102). Text is
// msg_type 0, or markdown with [Config.Markdown]; the text limit is 2000
// UTF-8 bytes ([Channel.TextLimit]; a conservative choice, the platform
// publishes none).
//
// msg_seq, and why no chunk goes out twice: on group and C2C routes every
// reply to one msg_id needs a msg_seq the platform has not seen with it
// (it refuses a repeat with 40054005). The adapter does not derive it from
// the chunk's idempotency key (a hash cannot promise two chunks of one
// reply different numbers in the small range the platform expects, nor
// count the five replies); it keeps a reply ledger: per inbound message,
// the last msg_seq given out, and per message of an outgoing chunk (its
// text, each medium), named by Outgoing.IdempotencyKey (unique to one
// chunk of one reply: its turn, slot and content), the msg_id and
// msg_seq it got, written before the platform call, and its platform id
// once delivered. When the delivery ledger sends a chunk again (its send
// failed: a transport error, a 5xx, a lost answer), the parts already
// delivered are skipped and the others go out with their msg_id and
// msg_seq, so if the platform already has one, it refuses the copy and
// Send reports it delivered instead of posting it twice. A msg_seq is
// never given to a second part. These records outlive the inbound
// messages (a day past the reply window, at most 4096); when the replied
// message is past its window, a part that may have been delivered fails
// with [RejectDeliveryUnknown] rather than going to a newer message. With
// [Config.StateDir] the ledger (and the gateway session) is a file, so
// this holds across restarts; without, it lasts as long as the process.
//
// # Implementing
//
// How the adapter meets the channel contract (package channel):
//
// Ack discipline. The gateway's resume sequence advances, and is saved
// in StateDir, only after Sink.HandleEvent returned nil for a message
// event (events without one advance it at once). A refused event closes
// the connection; after a backoff the adapter resumes with the last
// accepted sequence and the platform delivers the event again. A crash
// between the delivery and the accept re-reads it after the restart's
// Resume, and the pipeline's idempotent enqueue drops a repeat. The
// webhook handler answers {"op":12,"d":0} with 200 only after HandleEvent
// returned nil, and 503 with {"op":12,"d":1} otherwise, so the platform
// retries.
//
// Reconnects. Close codes are read as the docs' table says: 4009 and
// other drops resume; 4001, 4002, 4006, 4007 and 4900–4913 identify anew
// (so does op 9, Invalid Session); 4004 fetches a new token; 4010–4014,
// 4914 and 4915 end Run with a [*GatewayError]. Op 7 (Reconnect) closes
// and resumes. A heartbeat not acknowledged by the time the next is due
// closes the connection. Every reconnect waits RetryMin (1 s) doubling to
// RetryMax (60 s) with ±20 % jitter on Config.Clock; a connection that
// reached READY or RESUMED starts the backoff over.
//
// Health. Run reports Connected and Online on READY or RESUMED and
// offline when the connection ends; webhook mode probes GET /users/@me
// every HealthInterval and reports offline after OfflineAfter failures.
// Send fails fast with channel.ErrOffline while offline.
//
// Errors. Every call has the CallTimeout (10 s) deadline. Answers are
// [*APIError] values classified by HTTP status and business code, never
// by message text (see its doc), a 2xx answer with a business code too
// (201/202 "async success" and review notices are successes): 429, 22009
// (a frequency limit, per the docs' error codes) and 20028 rate limited; 401
// after the token retry offline; a gone channel, guild or group kicked;
// 5xx and the "retry" codes transient; other 4xx definitive rejections.
//
// Not supported: message history (the platform has none for bots, so
// there is no channel.HistoryFetcher and the pipeline skips backfill),
// typing indicators, recall, member lookup, keyboards and ark cards,
// replies to events (event_id), uploads of local files (media are sent by
// http(s) URL), and sharding (one shard, [0,1]).
//
// # Concurrency
//
// A Channel is safe for concurrent use: Send and FetchMedia may be called
// from any goroutine, also while Run is active, and ServeHTTP handles
// concurrent requests, each calling Sink.HandleEvent on its own
// goroutine. Run may be active only once at a time; in gateway mode it
// calls the sink from its own goroutine, one event after the other.
package qqbot
