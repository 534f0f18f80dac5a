// Package feishutest is an in-process fake of the Feishu / Lark Open
// Platform for tests of the feishu adapter and of embedders' bots. It
// speaks the real wire protocols over loopback: the Open API's JSON over
// HTTP, encrypted and signed event callbacks, and the long connection's
// WebSocket of binary protobuf frames.
//
// # Overview
//
// [New] starts a [Server] on a loopback httptest server; point the
// adapter's BaseURL at [Server.URL] and give it [Server.AppID],
// [Server.AppSecret], [Server.VerificationToken] and [Server.EncryptKey].
// The server answers, with the platform's {"code","msg","data"} envelope
// and codes:
//
//   - POST /open-apis/auth/v3/tenant_access_token/internal: a token valid
//     for Config.TokenTTL on Config.Clock (code 10014 for wrong
//     credentials); every other API checks it (99991661 missing, 99991663
//     invalid or expired: [Server.ExpireTokens]);
//   - GET /open-apis/bot/v3/info: the bot, "bot" beside "code";
//   - POST /open-apis/im/v1/messages?receive_id_type=chat_id|open_id and
//     POST /open-apis/im/v1/messages/{id}/reply: text, post and image
//     messages, validated (content JSON of its type, 150 KB text / 30 KB
//     post, uuid ≤ 50 characters, reply target present and not recalled,
//     the bot in the group: 230002 after [Server.KickBot], 230035 after
//     [Server.MuteChat]) and stored as the platform stores them (mentions
//     as @_user_N keys with a mentions list). A uuid seen in the last
//     hour answers with the message it produced, without a new one: the
//     API's "at most one message per uuid per hour";
//   - GET /open-apis/im/v1/messages?container_id_type=chat: a chat's
//     history, paged (page_size ≤ 50, page_token), with the app's own
//     messages as sender_type "app" with the app id;
//   - GET /open-apis/im/v1/messages/{id}/resources/{key}?type=image|file:
//     the bytes of [Server.AddResource] or of an [Incoming]'s Image
//     (234003 when the key is not in the message, 230110 when the message
//     was recalled);
//   - POST /callback/ws/endpoint and GET /ws: the long connection (code
//     514 for wrong credentials, 1000040350 over Config.MaxConnections).
//
// Inbound: [Server.Push] stores a user's message (text with mentions, a
// post, an image, or any type and content) and delivers its
// im.message.receive_v1 event, built after the documentation's sample:
// POSTed to the callback URL ([Server.SetCallback]) with
// X-Lark-Request-Timestamp and -Nonce, encrypted ({"encrypt": …}) and
// signed (X-Lark-Signature) when the app has an Encrypt Key; or, without a
// callback URL, as a data frame on the newest long connection
// (fragmented above Config.FragmentSize). An event not acknowledged (a
// non-200 answer or code, no answer within Config.DeliveryTimeout, a
// dropped connection, [Server.LoseNextAck]) is delivered again on the
// Config.RetryDelays schedule of Config.Clock (Feishu's 15 s, 5 min,
// 1 h, 6 h by default), with the same event_id. [Server.PushRaw] delivers
// any payload; [Server.VerifyCallback] sends the console's URL
// verification. [Server.Deliveries] lists every attempt.
//
// The long connection answers pings with pongs carrying its ClientConfig
// ([Server.SetPongs] turns them off), records the answers to data frames
// ([Server.Acks]), can be dropped ([Server.DropConnections]) or refused
// ([Server.RefuseNextHandshake]), and takes raw frames for bad-input
// tests ([Server.SendRawFrame]).
//
// Outbound: [Server.Sent], [Server.WaitSent] and [Server.Calls] show what
// the bot sent and asked. Failures are scripted: [Server.FailNext] and
// [Server.FailNextSend] answer a call with a status and code (or drop the
// connection, optionally after storing the message: a lost answer),
// [Server.StallNextSend] holds a send until the client gives up,
// [Server.OnSent] runs a function between storing a message and
// answering, and [Server.SetOffline] takes the whole platform down (503
// answers, connections closed and refused, no deliveries).
//
// The Server implements chantest.PlatformDriver, so the adapter runs
// chantest.Conformance against it:
//
//	srv := feishutest.New(feishutest.Config{})
//	defer srv.Close()
//	ch, _ := feishu.New(feishu.Config{AppID: srv.AppID(), AppSecret: srv.AppSecret(),
//		BaseURL: srv.URL(), Mode: feishu.ModeWebSocket})
//	go ch.Run(ctx, sink)
//	srv.Push(ctx, feishutest.Incoming{ChatID: "oc_1", From: feishutest.User{OpenID: "ou_1"}, Text: "hi", MentionBot: true})
//	sent, _ := srv.WaitSent(ctx, 1)
//
// # Implementing
//
// The fake was written from the platform's documentation (the event and
// message API references, the event-subscription guide's encryption and
// signature rules) and the wire format of the official SDKs' long
// connection; its codec and crypto ([Encrypt], [Sign], [EncodeFrame],
// [DecodeFrame]) are its own, independent of package feishu. It keeps
// chats (groups by chat_id, one private chat per user with its own
// chat_id) and their messages, users and their names, tokens and uuids,
// all in memory; nothing sleeps: timestamps, token expiry and redelivery
// run on Config.Clock, and only the wait for an answer is in real time.
//
// # Concurrency
//
// A Server is safe for concurrent use. Push and PushRaw wait for the
// first delivery attempt; attempts run on goroutines of their own.
package feishutest
