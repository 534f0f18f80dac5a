// Package feishu is the Feishu / Lark adapter: a [channel.Channel] that
// receives im.message.receive_v1 events by event callback (webhook) or
// long connection, normalises them into [channel.Event] values, and sends
// text through the Open API over plain net/http.
//
// # Overview
//
// Create a [Channel] with [New] and a [Config]; zero fields take the
// documented defaults. [Channel.Run] gets a tenant access token with
// AppID and AppSecret and asks the bot info API for the bot's open_id,
// which becomes Event.BotID (mentions of the bot carry it), then
//
//   - in [ModeWebhook] (the default) delivers what Feishu POSTs to the
//     Channel, an [net/http.Handler] to mount at the request URL of the
//     app's event subscription, and probes the Open API for health;
//   - in [ModeWebSocket] opens the long connection (长连接): POST
//     /callback/ws/endpoint with AppID and AppSecret, a WebSocket of
//     binary protobuf frames ([Frame], hand-coded: [MarshalFrame],
//     [UnmarshalFrame]), pings at the server's interval, and one answer
//     per event. No public address is needed; Feishu offers it to
//     self-built apps only.
//
// BaseURL selects the platform: [FeishuBaseURL] (open.feishu.cn, the
// default) or [LarkBaseURL] (open.larksuite.com).
//
// Callbacks (webhook mode). The URL verification is answered with its
// challenge (also while Run is not active) once its token matches
// Config.VerificationToken. With Config.EncryptKey set, bodies must be
// {"encrypt": …}: base64 of an IV and AES-256-CBC ciphertext under
// SHA-256 of the key, PKCS#7-padded ([Decrypt]), and every event must be
// signed: X-Lark-Signature = hex SHA-256 of X-Lark-Request-Timestamp,
// X-Lark-Request-Nonce, the key and the raw body ([Signature]), with the
// timestamp within Config.ReplayWindow (5 minutes by default, either way,
// on Config.Clock; only the URL verification may come unsigned, and any
// other unsigned request gets one uniform 401, whatever its decrypted
// body, so that the answers reveal nothing of the plaintext). The
// window bounds each request's own timestamp, so it refuses a captured
// request replayed later. Feishu retries a callback that is not answered
// 200 within 3 s after 15 s, 5 min, 1 h and 6 h. See [Channel.ServeHTTP]
// for every status.
//
// Normalisation of im.message.receive_v1:
//
//   - chat_type p2p becomes channel.Private with the sender's open_id as
//     the chat id; group and topic_group channel.Group with the chat_id;
//   - MessageID is message_id and Time its create_time; the event's
//     event_id (the platform's dedupe id) is in Raw. A redelivered event
//     (same event_id) carries the same message, so its Event.Key is the
//     same and the pipeline enqueues it once;
//   - Sender.ID is the sender's open_id; Sender.Name is filled from
//     mentions of that user the adapter has seen (events carry no sender
//     names); IsBot for sender_type "app";
//   - text: each mention key of the mentions list (@_user_1, …) becomes a
//     mention segment of that open_id with "@Name" as its text; a
//     mention of the bot's open_id sets ToMe; "@_all" stays text "@all";
//   - post (rich text): the title on its own line, paragraphs separated
//     by newlines, text and code, links (the text, then a link segment),
//     at elements as mentions, img as images, media as videos, emotion
//     as faces;
//   - image, file, audio (voice, with its duration), media (video) and
//     sticker messages become segments whose Media.FileID is a
//     [MediaRef] "<message_id>/<image_key or file_key>" (the resource
//     API needs both); other message types a text placeholder such as
//     "[interactive]";
//   - parent_id becomes a leading quote segment, and Event.Quoted when
//     the adapter saw the quoted message (FromBot for its own sends);
//   - a message from the bot's own open_id would be KindSelf (Feishu
//     does not push those; the history API lists them as sender_type
//     app with the app id, which FetchHistory reports as KindSelf);
//   - other event types, legacy schema 1.0 events, events of another
//     app and invalid messages (ids missing, content not the JSON of its
//     type, an unknown chat_type) are acknowledged and logged
//     (feishu_event_skipped, feishu_event_invalid): redelivery cannot
//     make them valid. Bodies that are not JSON or not UTF-8 are refused
//     (400, or code 400 on the long connection).
//
// [Channel.Send] posts a text message (mentions first as <at
// user_id="ou_…">Name</at>), or a post when the text contains '<' (the text
// type would read markup in it, such as <at user_id="all">); the first
// message of an Outgoing with ReplyTo goes through the reply API, the
// others to the chat (chat_id for groups, open_id for private chats).
// Every message carries the send uuid [SendUUID](Outgoing.IdempotencyKey)
// — the key of that chunk, unique per turn and slot and the same on every
// attempt to send it — so the platform sends at most one message per
// chunk within an hour however often a lost answer makes the pipeline
// retry it. The text limit is 4000 runes ([Channel.TextLimit]).
// [Channel.FetchMedia] (channel.MediaFetcher) downloads received media
// from the resource API with the tenant token and hands the stream over
// as MediaContent.Body. [Channel.FetchHistory] (channel.HistoryFetcher)
// reads a chat's messages, newest first, so the delivery ledger can
// settle a chunk whose send was cut off by a crash.
//
// # Usage
//
// In the developer console (open.feishu.cn/app, or open.larksuite.com/app
// for Lark) create a self-built app, add the Bot capability, grant the
// scopes im:message:send_as_bot (send), im:message.p2p_msg:readonly
// (private messages), im:message.group_at_msg:readonly (group messages
// that mention the bot; the sensitive im:message.group_msg to receive
// every group message) and im:message:readonly (media downloads and
// history), subscribe to the event im.message.receive_v1, publish a
// version, and copy the App ID and App Secret into Config. Then either
//
//   - webhook: Events & Callbacks → Event Configuration → "send events
//     to developer server", request URL https://<host>/<path> served by
//     the Channel; copy the Verification Token (and set an Encrypt Key,
//     recommended) from Encryption Strategy into Config; or
//   - long connection: choose "receive events through persistent
//     connection" (the console checks that a client is connected when
//     saving: start Run first) and set Mode to ModeWebSocket.
//
// How the adapter meets the channel contract (package channel):
//
// Ack discipline. A callback is answered 200 only after Sink.HandleEvent
// returned nil, 500 otherwise (Feishu redelivers); a long-connection
// event frame is answered (code 200, with biz_rt) only after HandleEvent
// returned nil, code 500 otherwise. Nothing else happens before the
// answer.
//
// Health. Run reports Connected and Online once the bot is known
// (webhook) or the long connection is up; offline after OfflineAfter
// failed probes (webhook) or as soon as the connection drops, and while
// offline Send fails fast with channel.ErrOffline. The connection is
// given up after three ping intervals without a frame from the server
// (time the reader waits for room in the 64-event queue of a slow sink,
// logged as feishu_ws_queue_full, does not count).
// Reconnects and startup retries wait RetryMin doubling to RetryMax with
// ±20 % jitter on Config.Clock. A refusal of the credentials ends Run
// with [ErrUnauthorized]; the endpoint's connection limit (another client
// of the app) is logged as duplicate_client_conflict and retried.
//
// Errors. Every Open API call has the CallTimeout deadline (history
// calls 15 s). The tenant token is cached, replaced 10 minutes before it
// expires, and replaced at once (and the call repeated once) when the
// platform refuses it; neither it nor the app secret is ever logged or
// put in an error, nor is the long connection's URL (it holds a ticket).
// Send errors are [*APIError] values classified by HTTP status and code
// (see its doc): rate limits with the x-ogw-ratelimit-reset wait,
// kicked, muted, definitive rejections, media rejections; anything else
// is transient.
//
// Not supported: uploading images (Media must be an image_key the app
// uploaded), card messages, recalling messages, typing indicators
// (Feishu has none for bots), and chat listing (so no reconnect
// backfill). A private chat's history can be read only once the adapter
// has seen that chat since it started.
//
// # Concurrency
//
// A Channel is safe for concurrent use: Send and the capabilities may be
// called from any goroutine, also while Run is active, and ServeHTTP
// handles concurrent requests, each calling Sink.HandleEvent on its own
// goroutine. Run may be active only once at a time; on the long
// connection it calls the sink from one goroutine, one event after the
// other.
package feishu
