// Package dingtalk is the DingTalk (钉钉) robot adapter: a
// [channel.Channel] that receives robot messages over a Stream-mode
// connection (a WebSocket the bot dials, so no public address is needed)
// and answers through the conversation's session webhook or the robot
// OpenAPI, over plain net/http and github.com/coder/websocket.
//
// # Overview
//
// Create a [Channel] with [New] and a [Config] holding the app's Client ID
// and Client Secret; zero fields take the documented defaults.
// [Channel.Run] opens a Stream connection (POST
// /v1.0/gateway/connections/open subscribing the robot message topic
// [BotMessageTopic], then a WebSocket to the returned endpoint with its
// single-use ticket) and hands every robot message to Sink.HandleEvent.
// DingTalk delivers to a robot the messages of its one-to-one chats and,
// in groups, the messages that @-mention it.
//
// Normalisation of a robot message (the callback's data):
//
//   - conversationType "2" becomes a channel.Group chat whose id is the
//     conversationId (the openConversationId of the robot API);
//     conversationType "1" a channel.Private chat whose id is the peer's
//     user id;
//   - the sender's id is senderStaffId (the user id within the
//     organisation), else senderId; Sender.Name is senderNick; roles and
//     levels are not known (isAdmin is about the organisation, not the
//     group, and is not used);
//   - MessageID is msgId (the dedupe key); Time is createAt, else the
//     frame's time;
//   - Event.BotID is the robot code (Config.RobotCode, by default the
//     Client ID): chatbotUserId contains ':' and cannot be part of a
//     session key;
//   - isInAtList becomes a leading mention segment of the bot and sets
//     ToMe; the other atUsers become mention segments of their staff id
//     (else dingtalk id). DingTalk removes the robot's own "@name" from
//     the text, which keeps the leading space where it was;
//   - text is a text segment; picture a channel.SegImage whose Media
//     carries the downloadCode (else pictureDownloadCode) as FileID;
//     richText its text items and pictures in order; audio a
//     channel.SegVoice with DingTalk's own speech recognition as
//     Media.Transcript (so the pipeline does not transcribe it again);
//     video a channel.SegVideo (duration, video/<videoType>); file a
//     channel.SegFile (fileName). Other msgtypes are acknowledged and
//     logged (dingtalk_message_skipped);
//   - a reply carries text.isReplyMsg and text.repliedMsg (not in the
//     official documentation, but sent by DingTalk): it becomes a
//     leading quote segment and Event.Quoted;
//   - a message whose sender is the robot itself would be KindSelf
//     (DingTalk does not echo the robot's messages);
//   - the sessionWebhook and its sessionWebhookExpiredTime are kept per
//     conversation for the answers; only webhooks on
//     Config.WebhookBase (https://oapi.dingtalk.com) are used.
//
// Malformed data (invalid JSON or UTF-8, a missing msgId or sender, an
// unknown conversationType, ids with control characters or longer than
// 512 bytes) is logged (dingtalk_message_malformed) and dropped, never
// delivered half; frames that are not JSON, lack a type, or exceed
// Config.MaxFrameBytes are logged and dropped and the connection
// survives; unknown topics are answered 404.
//
// [Channel.Send] posts to the conversation's session webhook while it is
// valid (text or markdown, mentions as "@id" with at.atUserIds) and
// otherwise uses the robot OpenAPI with the app's access token
// (groupMessages/send, oToMessages/batchSend; sampleText or
// sampleMarkdown). DingTalk robots cannot quote a message, so a reply
// opens with a markdown blockquote of the message it answers. The text
// limit is 4000 runes ([MaxTextRunes], [Channel.TextLimit]). A robot may
// send about [SendsPerMinute] (20) messages a minute; the adapter does
// not count, it returns the platform's throttling answer as a
// *channel.RateLimitedError and the pipeline's lanes back off.
// [Channel.FetchMedia] (channel.MediaFetcher) turns a download code into
// a short-lived download link with the robot file download API.
//
// # Usage
//
// In the DingTalk developer console (open-dev.dingtalk.com) create an
// internal app, add the robot capability with message receiving mode
// "Stream", publish it, and put its Client ID and Client Secret in
// Config. Sending outside a conversation's session webhook (a reply more
// than about 90 minutes after the last message, or to a chat that has
// not written) needs the app permission to send robot messages
// (qyapi_robot_sendmsg). No callback URL is needed: the adapter dials
// out to api.dingtalk.com and wss-open-connection.dingtalk.com on port
// 443.
//
//	ch, err := dingtalk.New(dingtalk.Config{ClientID: id, ClientSecret: secret})
//	if err != nil { ... }
//	p, err := persona.New(persona.Options{Channels: []channel.Channel{ch}, ...})
//
// Point Config.APIBase at dingtalktest.Server.URL to run against the
// in-process fake.
//
// How the adapter meets the channel contract (package channel):
//
// Ack discipline. A robot message is acknowledged (code 200) only after
// Sink.HandleEvent returned nil. A refused message is answered 500 with
// the data status LATER, the protocol's "not processed, deliver again".
// DingTalk documents robot messages as fire-and-forget (it does not
// deliver them again, unlike events), so the adapter keeps the refused
// message and offers it to the sink again after a backoff (RetryMin
// doubling to RetryMax), in order, until it is accepted
// (dingtalk_event_redelivered). Messages wait for the sink in a local,
// in-memory queue of Config.Backlog, and a refused message holds up the
// ones behind it. The pipeline's idempotent enqueue drops a message it
// already has.
//
// Since DingTalk never delivers a robot message again, this queue is the
// only copy, and some messages are lost (each one is logged):
//
//   - beyond the backlog: a message that arrives while Config.Backlog
//     messages already wait (for instance behind one the sink keeps
//     refusing) is answered LATER and lost (dingtalk_backlog_full);
//   - at shutdown: when Run ends, the message being offered and those
//     still queued are offered to the sink once more, in order, with a
//     context detached from Run's and a 5 s deadline for all of them
//     (dingtalk_flushing); each one still refused, or not offered in
//     time, is lost (dingtalk_event_dropped). The queue is not persisted,
//     so a crash loses all of it.
//
// Health. Run reports Connected and Online while a connection is up and
// offline as soon as it is lost; Send fails fast with channel.ErrOffline
// meanwhile. Pings are answered with their opaque data; a WebSocket ping
// every KeepAlive without a pong within PongTimeout gives the connection
// up. A "disconnect" frame (the server rotates connections) makes Run
// connect again at once while the old connection drains. Lost
// connections and failed attempts are retried after RetryMin doubling to
// RetryMax with ±20 % jitter on Config.Clock (or the platform's
// Retry-After when longer), also when connections/open is throttled (403
// Forbidden.AccessDenied.QpsLimit…, 429); credentials refused by
// connections/open (401, or 400/403 that is not a rate limit) end Run
// with [ErrUnauthorized].
//
// Errors. Every HTTP call and the WebSocket handshake have the
// CallTimeout deadline (10 s). Send errors are [*APIError] values
// classified by HTTP status and platform code only (see [APIError]):
// throttling (429, 403 Forbidden.AccessDenied.QpsLimit…, errcode 130101
// or 410100, a flow-controlled user) is a *channel.RateLimitedError;
// 400/403/404 and other errcodes are definitive rejections, those of a
// robot removed from the group also channel.ErrKicked; media other than
// image links are channel.ErrMediaInvalid; errcode -1 (system busy), 5xx
// and network errors are transient. Credentials the token endpoint
// refuses (401, or 400/403 that is not a rate limit) give
// [ErrUnauthorized], which is channel.ErrOffline, never a rejection. DingTalk has no error for a muted robot that the adapter
// could recognise, so channel.ErrMuted is never returned. The access
// token is fetched with the client id and secret (oauth2/accessToken),
// cached and fetched again TokenRefresh before it expires or when a call
// answers 401. The client secret, access tokens, connection tickets and
// session webhook URLs never appear in logs or errors (the client secret
// and the current access token are always redacted; of the others, the
// 256 most recent).
//
// Receipts. A session webhook answers no message id, so its receipt holds
// an id derived from Outgoing.IdempotencyKey (the delivery ledger's
// fingerprint), the same on every attempt of a chunk; the OpenAPI's
// receipt is its processQueryKey. DingTalk robots cannot read a chat's
// history, so there is no HistoryFetcher: a chunk whose fate a crash left
// unknown is settled by the pipeline from what it recorded, never sent
// twice. There is no typing indicator either.
//
// # Concurrency
//
// A Channel is safe for concurrent use: Send and FetchMedia may be called
// from any goroutine, also while Run is active. Run may be active only
// once at a time; it calls the sink from one goroutine, one message after
// the other, while its readers keep answering pings.
package dingtalk
