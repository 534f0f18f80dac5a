// Package qqbottest is an in-process fake of the QQ official bot
// platform (QQ 机器人开放平台) for tests of the qqbot adapter and of
// embedders' bots, written from the platform's documentation
// (tencent-connect/bot-docs).
//
// # Overview
//
// [New] starts a [Server] on a loopback httptest server. Point the
// adapter's APIBase at [Server.URL] and its TokenURL at [Server.TokenURL],
// with [Server.AppID] and [Server.Secret] as credentials. It serves:
//
//   - POST /app/getAppAccessToken: {"appId","clientSecret"} →
//     {"access_token","expires_in":"7200"} (a string, as in the docs); a
//     request in the last 60 s of a token's life gets a new token, the old
//     one staying valid until it expires; wrong credentials get 401 with
//     code 100016;
//   - the OpenAPI with "Authorization: QQBot <token>" (otherwise 401, code
//     11244): GET /gateway, /gateway/bot and /users/@me; POST
//     /v2/groups/{group_openid}/messages, /v2/users/{openid}/messages,
//     /channels/{channel_id}/messages and /dms/{guild_id}/messages; POST
//     /v2/{groups|users}/{id}/files (rich media, answering a file_info);
//   - the WebSocket gateway at /websocket/: Hello (op 10) with
//     Config.HeartbeatInterval, Identify (op 2, token "QQBot <token>",
//     intents, shard) answered with READY, Resume (op 6) answered with
//     the missed dispatches and RESUMED (or op 9 for an unknown session,
//     close 4007 for a sequence it never sent), heartbeats (op 1)
//     answered with op 11; a bad token closes with 4004, intents beyond
//     Config.Intents with 4014, a bad shard with 4010, an unknown op with
//     4001, an unparsable frame with 4002.
//
// Sends follow the passive-reply rules: a msg_id must be a message the
// fake pushed to that chat (else 400, code 304026), younger than the
// reply window (C2C 60 min, others 5 min; else 304027); on group and C2C
// routes msg_seq (default 1) must be new for the msg_id (else 40054005,
// "消息被去重") and a msg_id takes at most 5 replies (else
// CodeReplyLimit, a stand-in: the platform's code is not documented;
// 22009 is its frequency limit). A send without msg_id is
// an active message: 400 with 40034102 unless Config.AllowActive. Empty
// messages get 50006.
//
// Inbound: [Server.Push] posts a user message (group @-message, C2C
// message, guild channel @-message with "<@!bot>" markup, quote and
// seq_in_channel, or guild direct message, with attachments);
// [Server.PushDispatch] any dispatch; [Server.PushFrame] raw bytes on the
// live connection. Dispatches carry increasing s per session and are kept
// for Resume; while no connection is up they wait in the session (and
// before the first session, for it). With [Server.SetWebhook] events are
// POSTed instead, signed like the platform's callbacks
// (X-Signature-Ed25519 over X-Signature-Timestamp ‖ body with the key
// derived from the secret, X-Bot-Appid, User-Agent QQBot-Callback); an
// event stays queued until the bot answers 2xx without {"op":12,"d":1},
// and [Server.FlushWebhook] retries. [Server.ValidateWebhook] performs
// the callback-URL validation (op 13) and checks the answer.
//
// Outbound: [Server.Sent] and [Server.WaitSent] list what the bot sent;
// [Server.Calls] every request. Failures: [Server.FailNextSend] injects an
// error answer (a status, a code, Retry-After, or a dropped connection,
// optionally after delivering the message: a lost answer);
// [Server.SetOffline] takes everything down (502 pages, dropped and
// refused gateway connections); [Server.DropConnection], [Server.SendOp]
// (op 7 Reconnect, op 9 Invalid Session) and [Server.ForgetSessions]
// script the gateway; [Server.RevokeTokens] expires every token.
//
// The Server implements chantest.PlatformDriver:
//
//	srv := qqbottest.New(qqbottest.Config{})
//	defer srv.Close()
//	ch, _ := qqbot.New(qqbot.Config{AppID: srv.AppID(), Secret: srv.Secret(),
//		APIBase: srv.URL(), TokenURL: srv.TokenURL()})
//	go ch.Run(ctx, sink)
//	p, _ := srv.Push(ctx, qqbottest.Incoming{Chat: grp, From: alice, Text: "hi"})
//	sent, _ := srv.WaitSent(ctx, 1)
//
// # Implementing
//
// Chats are named as the adapter names them: a QQ group by its
// group_openid, a guild channel "channel:<channel_id>", a C2C chat by the
// user's openid, a guild direct message by the user's id (the fake makes
// up the direct-message guild id). The fake keeps every pushed message
// for the reply checks, every session's dispatches for Resume, and runs
// on the loopback interface only; token expiry, reply windows and message
// times read Config.Clock, so nothing sleeps.
//
// # Concurrency
//
// A Server is safe for concurrent use. Push, Emit and FlushWebhook deliver
// to a webhook synchronously, one event at a time, on the caller's
// goroutine; gateway frames are written by one goroutine per connection.
package qqbottest
