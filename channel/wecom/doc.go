// Package wecom is the WeCom (企业微信) adapter: a [channel.Channel] for a
// self-built app (自建应用) or an AI bot (智能机器人), over plain net/http
// and, for the AI bot's long connection, github.com/coder/websocket.
//
// # Overview
//
// Create a [Channel] with [New] and a [Config] whose Mode picks the
// product and transport:
//
//   - [ModeApp]: WeCom posts encrypted XML callbacks to the Channel (a
//     [net/http.Handler]); the bot answers through /cgi-bin/message/send
//     with an access token fetched from the corp id and the app secret.
//     Only one-to-one chats reach an app: every event is a private chat
//     (chat id = the user's UserID). Sends to a group chat go to
//     /cgi-bin/appchat/send (a chat the app created).
//   - [ModeAIBot]: WeCom posts encrypted JSON callbacks for group
//     @-messages and private messages to the Channel; the bot answers each
//     one passively with a stream that WeCom polls, or once through the
//     callback's response_url.
//   - [ModeAIBotWS]: [Channel.Run] keeps the AI bot's long connection
//     (wss://openws.work.weixin.qq.com), subscribed with the bot id and
//     secret; messages arrive as frames, answers go back on the same
//     connection.
//
// Callback crypto ([Crypter]) is the scheme of WeCom's official
// WXBizMsgCrypt libraries: the signature is the SHA-1 of the sorted token,
// timestamp, nonce and ciphertext; the ciphertext is AES-256-CBC (key =
// base64 of the EncodingAESKey plus "=", IV = its first 16 bytes, PKCS#7
// padding to 32 bytes) over 16 random bytes, a 4-byte big-endian length,
// the message and the receiver id — the corp id for apps, "" for AI
// bots, checked on every message.
//
// Normalisation:
//
//   - Event.BotID is the AgentID (app) or the AI bot's id (Config.BotID,
//     or the aibotid of the first callback); MessageID is MsgId / msgid
//     (WeCom's dedupe key); Time is CreateTime / create_time; Sender.ID is
//     the UserID (WeCom sends no names). Every message is ToMe: an app's
//     chats are private, and an AI bot gets group messages only when it is
//     @-mentioned.
//   - App messages: text; image (channel.SegImage, Media.FileID = MediaId,
//     Media.URL = PicUrl); voice (channel.SegVoice, FileID = MediaId, MIME
//     from Format, Media.Transcript = Recognition when the app has speech
//     recognition on); video; link (channel.SegLink); location (a text
//     line). Events (subscribe, enter_agent, menus …) are acknowledged and
//     logged, never delivered.
//   - AI-bot messages: text; image and file (their encrypted link in
//     Media.URL); voice (WeCom transcribes it: Media.Transcript); mixed
//     (text and images in order). In a group, "@<Config.BotName>" becomes
//     a mention segment of the bot (the space after it is dropped); without
//     a BotName, or when the name is not in the text, a mention of the bot
//     leads the message. A quote carries only the quoted content: it is
//     Event.Quoted, and when a recent message of the chat (one seen or
//     sent by this process) has exactly that text, a quote segment with
//     its id (FromBot for the bot's own). Events (enter_chat, feedback …)
//     and stream refreshes are not delivered.
//   - WeCom never echoes the bot's own messages, so there is no KindSelf
//     event; there is no history API (no HistoryFetcher).
//
// Sending ([Channel.Send]): text of at most 2048 UTF-8 bytes per message
// ([Channel.TextLimit], [MaxTextBytes], the pipeline's chunk size in every
// mode).
//
//   - App: message/send {touser, msgtype text, agentid, safe 0}, one call
//     for the text and one per attachment. WeCom's duplicate check
//     compares content, so it is never set on a first attempt (two
//     replies that say the same thing are two messages); a part whose
//     answer was lost is sent again with enable_duplicate_check and the
//     shortest duplicate_check_interval covering the earlier attempt, and
//     WeCom drops it if the first one arrived. Media go by media_id
//     (Media.FileID); ReplyTo and Mentions have no equivalent and are left
//     out. The receipt is the msgid.
//   - AI bot, callbacks: the answer to a message callback opens a stream
//     whose id [StreamID] derives from the message id (finish false,
//     empty). Send appends the chunk to a stream — the one of the message
//     in Outgoing.ReplyTo, else the chat's stream in progress, else its
//     oldest open empty one — and WeCom's refresh polls get the stream's
//     chunks joined by a blank line. A stream is complete when no chunk
//     came for [Config.StreamIdle] (8 s; the pipeline paces chunks at
//     most 6 s apart), when it would exceed [MaxStreamBytes] (20,480
//     bytes), or [Config.StreamMaxAge] (5 min 30 s) after the message —
//     WeCom stops polling at 6 minutes; the next poll then gets finish
//     true. A chunk that no open stream can take goes, once per message,
//     through the response_url (a markdown message, valid for an hour);
//     with none left the send is a *channel.RejectedError "no_reply_path":
//     an AI bot on callbacks cannot write on its own. Receipts are
//     "<stream id>#<n>". With [Config.StateDir] the streams survive a
//     restart (a file rewritten after every change, outside the lock,
//     coalesced), so a restarted process
//     goes on answering WeCom's polls with the chunks sent before.
//   - AI bot, long connection: a chunk answers the quoted message
//     (ReplyTo), else — unless the bot wrote to the chat within StreamIdle,
//     which makes it a continuation — the chat's oldest unanswered message
//     (aibot_respond_msg with its req_id: a stream finished at once;
//     receipt: the stream id); otherwise it is a message of its own
//     (aibot_send_msg, markdown, to a user's or group's chat id; receipt:
//     the frame's req_id). Each chunk is one message, as on every other
//     platform.
//
// Media ([Channel.FetchMedia], channel.MediaFetcher): an app's MediaId is
// downloaded with media/get and the access token (MediaContent.Body); an
// AI bot's link is downloaded through a public-address guard and
// decrypted with the message's aeskey or the EncodingAESKey
// ([DecryptMedia]), then handed over as MediaContent.Body.
//
// # Usage
//
// App: in the admin console (应用管理 → the app) note the AgentId and
// Secret and the corp id (我的企业), set 接收消息 → API 接收 with the URL
// where the Channel is served, a Token and an EncodingAESKey, and add the
// server's public IP to the app's trusted IPs (企业可信IP; otherwise every
// send fails with errcode 60020). Then
//
//	ch, err := wecom.New(wecom.Config{Mode: wecom.ModeApp, CorpID: corp, AgentID: 1000002,
//		Secret: secret, Token: token, EncodingAESKey: key})
//	http.Handle("/wecom", ch)
//	go ch.Run(ctx, pipeline)
//
// AI bot: create it in 智能机器人 with API mode; either set its callback
// URL with a Token and EncodingAESKey (ModeAIBot, served like the app) or
// use the long connection with its Bot ID and Secret (ModeAIBotWS, no
// public URL needed). The two are exclusive for one bot.
//
// The URL verification (GET) is answered whenever the Channel is served;
// message callbacks only while Run is active (503 otherwise, and WeCom
// retries).
//
// # Implementing
//
// How the adapter meets the channel contract (package channel):
//
// Ack discipline. A callback is answered only after Sink.HandleEvent
// returned: 200 (with the passive answer for an AI bot) when it accepted
// the event, 503 when it refused, so that WeCom posts it again (it
// retries three times). Requests that fail a check never reach the sink:
// a wrong signature or a timestamp outside [Config.ReplayWindow] (5 min)
// is 401, a ciphertext that does not decrypt to the expected layout and
// receiver id is 403, a malformed body or plaintext 400 (see
// [Channel.ServeHTTP]); a retried callback is delivered again and the
// pipeline's idempotent enqueue drops the repeat, and the AI bot answers
// it with the same stream (dropped only when no delivery of the message
// was accepted, also when a retry overtakes a slow first one). The long connection has no acknowledgement
// for received messages and no redelivery: a refused message is handed
// to the sink again after a backoff, holding back the ones behind it (at
// most 256 wait; more are logged and dropped).
//
// Health. ModeApp's Run fetches the access token (reporting online on
// success, offline after [Config.OfflineAfter] consecutive failures) and
// replaces it before it expires; the token is cached, shared by
// concurrent callers, fetched again once when WeCom says it expired
// (40014, 42001), and never logged or put in an error. ModeAIBotWS
// reports online once subscribed, answers nothing while the connection
// is down (channel.ErrOffline), pings every [Config.PingInterval] and
// redials after two unanswered pings or any failure, with backoff
// ([Config.RetryMin] doubling to [Config.RetryMax], ±20 % jitter, on
// [Config.Clock]). Refused credentials (errcode 40001, 40013, 40056 or
// 40091 on aibot_subscribe) end Run with [ErrUnauthorized]; any other
// refusal of the subscription (busy, rate limited …) is retried with
// the backoff; a newer connection for the same bot ends Run with
// [ErrSuperseded].
// ModeAIBot has nothing to watch and is online while Run is active.
//
// Errors. Every API call and every acknowledged frame has the
// [Config.CallTimeout] deadline (10 s). WeCom errors are [*APIError]
// values classified by errcode only (see its doc): 45009 and 45033 rate
// limited, -1 transient, credentials offline, 81013 and a recipient in
// invaliduser kicked, other codes a definitive rejection with the
// errcode.
//
// Exactly once. The IdempotencyKey of a [channel.Outgoing] (unique per
// turn and reply slot, the same on every attempt of that chunk) is
// remembered per chunk: a repeat of a delivered chunk gets its receipt
// back; of an app message whose text or attachments were partly
// delivered, only the rest is sent; and a part whose answer was lost is
// sent again only where WeCom applies it once (message/send to a user
// with the duplicate check, within [Config.DuplicateCheck] of the
// earlier attempt; a stream answer on the same req_id). Otherwise
// (appchat/send to a group, the duplicate check off or too late,
// aibot_send_msg, a response_url) it counts as delivered and is not sent
// twice. Chunks with different keys are always sent, even with the same
// text.
//
// Not supported: uploads (media go by media_id), quotes and mentions in
// app messages, template cards, message history, typing indicators,
// recall.
//
// # Concurrency
//
// A Channel is safe for concurrent use: Send and FetchMedia may be called
// from any goroutine, also while Run is active, and ServeHTTP handles
// concurrent requests, each calling Sink.HandleEvent on its own
// goroutine. Run may be active only once at a time; on the long
// connection it calls the sink from one goroutine, in the order the
// messages arrived.
package wecom
