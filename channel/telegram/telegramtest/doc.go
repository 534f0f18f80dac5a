// Package telegramtest is an in-process fake of the Telegram Bot API for
// tests of the telegram adapter and of embedders' bots.
//
// # Overview
//
// [New] starts a [Server] on a loopback httptest server; point the
// adapter's APIBase at [Server.URL] and use [Server.Token]. The server
// answers like the Bot API (the {"ok":...} envelope, error_code,
// description, parameters) for getMe, getUpdates, sendMessage, sendPhoto,
// sendVoice, sendAudio, sendVideo, sendDocument, sendAnimation,
// sendChatAction, deleteMessage, getChatMember, getFile, setWebhook,
// deleteWebhook and getWebhookInfo, with parameters as JSON, form,
// multipart or query, and method names in any case.
//
// Inbound: [Server.Push] posts a user message (private or group, with an
// optional "@bot" mention whose entity offsets are UTF-16 code units, a
// reply to a stored message, photo, sticker, voice, audio, video, video
// note, animation or document, with a caption), [Server.PushEdit]
// an edit and [Server.PushRaw] any update JSON. Updates queue with real
// getUpdates semantics: an update is confirmed, and dropped, once a
// getUpdates offset exceeds its update_id; a negative offset keeps only the
// newest; limit and allowed_updates apply; a held long poll returns on a
// new update, on [Server.Wake], when its timeout passes on Config.Clock,
// or with 409 Conflict when a second getUpdates arrives. While a webhook is
// set (setWebhook or [Server.SetWebhook]) getUpdates answers 409 and each
// push is POSTed to the webhook with the secret header; an update leaves
// the queue only on a 2xx answer, and [Server.FlushWebhook] retries.
// [PostWebhook] posts any body to any URL the way Telegram does.
//
// Files: [Server.AddFile] registers the bytes of a file id and returns
// its file_path; getFile then answers {file_id, file_unique_id, file_size,
// file_path} and GET <URL>/file/bot<token>/<file_path> serves the bytes,
// as the Bot API's file server does. An unknown file id gets
// {"ok":false,"error_code":400,"description":"Bad Request: invalid
// file_id"}, a file above Config.MaxDownloadBytes (default 20 MB) "Bad
// Request: file is too big", a wrong token or unknown path 404.
// [Server.RemoveFile] expires a file, [Server.Downloads] lists the paths
// requested and [Server.FailNextDownload] injects a failure (a status, or
// Failure.Drop for a closed connection). Reference the id in an
// [Incoming]'s media:
//
//	srv.AddFile("voice-1", oggBytes)
//	srv.Push(ctx, telegramtest.Incoming{Chat: grp, From: alice,
//		Voice: &telegramtest.File{FileID: "voice-1", FileUniqueID: "v1", Duration: 3}})
//
// Outbound: sends are validated (4096 UTF-16 units, entity bounds, reply
// target present unless allow_sending_without_reply) and recorded:
// [Server.Sent], [Server.WaitSent], [Server.ChatActions], [Server.Calls].
//
// Failures: [Server.FailNextSend] and [Server.FailNext] inject an error
// answer (e.g. 429 with retry_after, 400, 403, 5xx, a malformed body) for
// the next send or call; [Server.KickBot] makes a chat answer 403;
// [Server.SetOffline] takes the whole API down, with 502 pages or closed
// connections ([OfflineMode]).
//
// The Server implements chantest.PlatformDriver, so an adapter runs
// chantest.Conformance against it:
//
//	srv := telegramtest.New(telegramtest.Config{})
//	defer srv.Close()
//	ch, _ := telegram.New(telegram.Config{Token: srv.Token(), APIBase: srv.URL()})
//	go ch.Run(ctx, sink)
//	srv.Push(ctx, telegramtest.Incoming{Chat: grp, From: alice, Text: "hi", MentionBot: true})
//	sent, _ := srv.WaitSent(ctx, 1)
//
// # Implementing
//
// The fake keeps per-chat message ids (as Telegram does), stores every
// message (the user's and the bot's) so replies carry reply_to_message,
// and guesses the type of chats it has not seen from the id (negative:
// group, -100…: supergroup, positive: private). Register members with
// [Server.AddMember] for getChatMember. Everything runs in memory on
// loopback; nothing sleeps: the long-poll hold and message dates use
// Config.Clock.
//
// # Concurrency
//
// A Server is safe for concurrent use. Push, Emit and FlushWebhook deliver
// to a webhook synchronously, one update at a time, on the caller's
// goroutine.
package telegramtest
