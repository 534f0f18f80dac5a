// Package telegram is the Telegram Bot API adapter: a [channel.Channel]
// that receives updates by long polling or webhook, normalises them into
// [channel.Event] values, and sends text and media through the Bot API over
// plain net/http.
//
// # Overview
//
// Create a [Channel] with [New] and a [Config]; zero fields take the
// documented defaults. [Channel.Run] calls getMe to learn the bot (its
// numeric user id becomes Event.BotID), then
//
//   - in [ModePolling] (the default) long-polls getUpdates (timeout
//     Config.PollTimeout, allowed_updates Config.AllowedUpdates) and hands
//     each update's events to Sink.HandleEvent in order;
//   - in [ModeWebhook] optionally registers the webhook (setWebhook with the
//     secret token), optionally listens on WebhookConfig.Addr, and delivers
//     what Telegram posts to the Channel, which is an [net/http.Handler].
//
// Normalisation:
//
//   - private chats become channel.Private (chat id = the peer's user id),
//     group and supergroup chats channel.Group (the negative chat id as
//     text); channel posts are not delivered;
//   - MessageID is message_id, which Telegram numbers per chat, so the
//     dedupe key (Event.Key) is chat + message id, never update_id;
//   - Sender is "from" (Name = first + last name, IsBot); for anonymous
//     group admins and linked channels it is sender_chat (an anonymous
//     admin of the group itself gets Role admin); Role is otherwise
//     unknown;
//   - Time is "date";
//   - mention entities naming the bot ("@username", case-insensitive)
//     become a mention segment of the bot id and set ToMe; text_mention
//     entities become a mention segment of their user id; a bot command
//     addressed to the bot ("/start@bot") stays text, preceded by a
//     mention segment of the bot, and sets ToMe. Entity offsets are UTF-16
//     code units; malformed entities are ignored. Mention segments keep the
//     original span in Segment.Text; mentions of other usernames stay text;
//   - reply_to_message becomes a leading quote segment and Event.Quoted
//     (FromBot when the bot wrote it); in forum topics the implicit reply to
//     the topic's creation message is not a quote;
//   - media become segments whose Media carries the file_id (never a URL:
//     a download URL would contain the token) and Size: photo (the
//     largest size) a channel.SegImage (image/jpeg); sticker a
//     channel.SegSticker with MIME image/webp, application/x-tgsticker
//     (is_animated) or video/webm (is_video) and Name = its emoji; voice
//     a channel.SegVoice (mime_type, default audio/ogg; Duration); video,
//     video_note and animation a channel.SegVideo (Duration; an
//     animation's document twin is dropped); audio (a music file: Name
//     from file_name or title, Duration) and document (Name from
//     file_name) a channel.SegFile. The caption is the text. The media of
//     reply_to_message go into Quoted.Segments the same way;
//   - edited_message becomes a KindNotice event with Notice.Type
//     channel.NoticeMessageEdited, TargetMessageID the edited message and the
//     new content as segments (edits never re-trigger a reply);
//     new_chat_members become channel.NoticeGroupIncrease notices;
//   - a message from the bot itself (Telegram does not send those) would
//     be KindSelf; other update types (callback queries, reactions, member
//     updates, ...) and service messages are acknowledged and logged
//     (telegram_update_skipped);
//   - ids are checked against the Bot API's ranges: message_id a positive
//     32-bit integer, user ids positive and chat ids nonzero with at most
//     52 significant bits, a private chat's id positive and a group's,
//     supergroup's or channel's negative. An update with an id out of
//     range or of the wrong JSON type (a string, 1.5, 1e30) anywhere in
//     the message or the one it replies to is invalid: no event, a warning
//     naming the field (telegram_update_invalid), and it is acknowledged
//     (offset, or 200 on the webhook), since redelivery cannot make it
//     valid. An update whose update_id is missing, negative, not an
//     integer or over 52 bits is malformed (400 on the webhook). Send results are checked
//     too (a bad message_id fails the send, telegram_invalid_receipt), and
//     so are the chat, reply, message and user ids callers pass in (a
//     *channel.RejectedError before any call).
//
// [Channel.Send] uses sendMessage (the text verbatim, no parse_mode) with
// reply_parameters for Outgoing.ReplyTo, and sendPhoto, sendVoice,
// sendAudio, sendVideo or sendDocument for media given by file_id or URL.
// Mentions are rendered as text_mention entities over the user's display
// name (see [Channel.Send]). The text limit is 4096 UTF-16 units
// ([Channel.TextLimit]). [Channel.Typing] sends the "typing" chat action,
// [Channel.Recall] deletes a message and [Channel.LookupMember] asks
// getChatMember. [Channel.FetchMedia] (channel.MediaFetcher) turns a
// file_id into its bytes: getFile, then a GET of
// <APIBase>/file/bot<token>/<file_path> handed to the caller as
// MediaContent.Body (the Bot API limits bot downloads to 20 MB,
// [MaxDownloadBytes]).
//
// # Pointing a real bot at it
//
// Create a bot with @BotFather and put its token in Config.Token (never
// logged, never in errors). APIBase defaults to https://api.telegram.org;
// set it to a self-hosted telegram-bot-api server, or to
// telegramtest.Server.URL in tests. In groups a bot with privacy mode on
// (the default) only receives commands, mentions and replies; turn it off
// with BotFather's /setprivacy to see every message.
//
// Long polling needs nothing else, but getUpdates fails with 409 Conflict
// while a webhook is set or another process polls the same bot; the adapter
// logs duplicate_client_conflict and retries (delete a stale webhook with
// deleteWebhook). With Config.StateDir set the offset survives restarts in
// a file.
//
// For a webhook, Telegram needs a public HTTPS URL on port 443, 80, 88 or
// 8443 (usually a reverse proxy in front of the process). Set Mode to
// ModeWebhook, WebhookConfig.SecretToken to a random string of
// [A-Za-z0-9_-] and either WebhookConfig.URL (Run then calls setWebhook) or
// register it yourself; serve the handler with WebhookConfig.Addr (and
// Path), or mount the Channel on your own server. Every request without the
// secret header is refused with 401.
//
// # Implementing
//
// How the adapter meets the channel contract (package channel):
//
// Ack discipline. In polling mode the offset advances, and is saved through
// the [OffsetStore], only after Sink.HandleEvent returned nil for every
// event of an update; a refused event stops the batch, and the same offset
// is polled again after a backoff, so Telegram redelivers it. A crash
// between getUpdates and the enqueue therefore re-reads the update; a crash
// after the enqueue but before the offset reached the store re-reads it
// too, and the pipeline's idempotent enqueue drops the repeat. The webhook
// handler answers 200 only after HandleEvent returned nil, 503 otherwise
// (Telegram retries), and does nothing else first.
//
// Health. Run reports Connected and Online once getMe succeeded, offline
// after Config.OfflineAfter consecutive failed polls (webhook mode: getMe
// probes every HealthInterval), and online again on the first success
// (while offline the poll is a short one, so recovery shows at once).
// Retries wait RetryMin doubling to RetryMax with ±20 % jitter on
// Config.Clock, or the 429 retry_after when longer. A refused token (401,
// 404) ends Run with [ErrUnauthorized].
//
// Errors. Every call has the CallTimeout deadline (the long poll gets
// PollTimeout on top). Send fails fast with channel.ErrOffline while Run
// reports offline. Bot API errors are [*APIError] values classified by
// status only: 429 rate limited with retry_after, 400 a definitive
// rejection (and channel.ErrMediaInvalid for media), 403 a definitive
// rejection that also matches channel.ErrKicked, 401/404 offline; 5xx,
// 409 and network errors are transient. FetchMedia reports an invalid or
// expired file_id (getFile 400) and a vanished file (download 404) as
// channel.ErrMediaUnavailable, and a file larger than
// MediaRequest.MaxBytes as channel.ErrMediaTooLarge before downloading
// it. Transport errors have the token cut out, also where a transport
// repeats the URL in its own message.
//
// Not supported: uploading local files (send a URL or file_id),
// forum-topic threads on send, channel posts, Outgoing.IdempotencyKey (the
// Bot API has no client-side dedupe key), and message history (Telegram
// bots cannot fetch it, so there is no HistoryFetcher).
//
// # Concurrency
//
// A Channel is safe for concurrent use: Send and the capabilities may be
// called from any goroutine, also while Run is active, and ServeHTTP
// handles concurrent requests (Telegram opens up to max_connections), each
// calling Sink.HandleEvent on its own goroutine. Run may be active only
// once at a time; in polling mode it calls the sink from its own goroutine,
// one event after the other.
package telegram
