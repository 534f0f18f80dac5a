// Package onebottest is an in-process, protocol-faithful OneBot v11
// implementation for tests: the platform side of channel/onebot, usable by
// embedders' tests too. Everything runs on loopback.
//
// # Overview
//
// [New] returns a [Server] for one bot account (Config.SelfID, default
// 10001000). It speaks all three OneBot transports:
//
//   - forward WebSocket and HTTP API: Server is an http.Handler; serve it
//     with httptest.NewServer. WebSocket paths "/" (API and events), "/api"
//     and "/event"; HTTP API "/:action" with GET or POST and params from the
//     query, a form or a JSON body (strings are coerced). The access token
//     is checked (401 missing, 403 wrong).
//   - reverse WebSocket: [Server.DialReverse] dials the adapter as a
//     Universal client (X-Self-ID, X-Client-Role, Bearer token) and redials
//     every ReconnectInterval after a failure or disconnect.
//   - HTTP POST events: [Server.SetPostURL]; each event is POSTed with
//     X-Self-ID and X-Signature (HMAC-SHA1 with Config.Secret), and
//     retried after a 5xx answer.
//
// Every WebSocket client that receives events first gets a lifecycle
// "connect" event. The fake keeps message history with per-chat seq numbers
// and assigns message ids (every fifth one negative, as NapCat's can be). It
// answers get_login_info, get_status, get_version_info, send_private_msg,
// send_group_msg, send_msg, delete_msg, get_msg, get_group_member_info,
// get_group_list, get_friend_list, get_group_msg_history,
// get_friend_msg_history (parameters per Config.Dialect),
// send_group_forward_msg, send_private_forward_msg, set_input_status,
// set_friend_add_request and the media actions get_image, get_record (with out_format) and get_file,
// with the response envelope {status, retcode, data, echo} (and the
// _async / _rate_limited suffixes); unknown actions get retcode 1404 (HTTP
// 404).
//
// Tests drive it with [Server.EmitMessage] (a user posts; Lost stores it
// without pushing), [Server.EmitFriendRequest] (a user asks to befriend the
// bot: the request stays pending until set_friend_add_request answers its
// flag; an unknown or already answered flag gets RetcodeFailed, approve
// defaults to true, and an approved requester joins the friend list),
// [Server.PushEvent] and [Server.PushRaw] (any payload,
// even invalid JSON), [Server.Heartbeat], [Server.Recall], and script
// failures with [Server.Drop] (close the connections), [Server.SetDown]
// (the implementation is unreachable; messages are only stored),
// [Server.SetOffline] (account offline, announced by a heartbeat),
// [Server.SetLosePushes], [Server.RejectNextSend] (retcode 1400),
// [Server.FailNext] (any retcode for any action), [Server.Stall] (never
// answer an action) and [Server.Kick] (leave a group). What the bot did is
// read back with [Server.Sent], [Server.WaitSent], [Server.Calls],
// [Server.WaitCall], [Server.WaitCalls], [Server.FriendAnswers],
// [Server.History], [Server.Typing] and [Server.Message].
//
// Media for the media actions is registered with [Server.AddMedia]: a
// [MediaFile] holds the bytes and says how the answer carries them (base64,
// an url, or a local path in file, as NapCat, go-cqhttp and the v11 spec
// answer) and which get_record out_format conversions exist; unknown files
// are answered with RetcodeFailed. Messages with image, record, video, file
// or mface segments are emitted like any other (Incoming.Message).
//
// Server implements chantest.PlatformDriver (Emit, Received, SetOffline,
// RejectNextSend), so it plugs into chantest.Conformance directly.
//
// # Implementing
//
// A harness builds a fake and an adapter per test:
//
//	fake := onebottest.New(onebottest.Config{AccessToken: "t"})
//	t.Cleanup(fake.Close)
//	srv := httptest.NewServer(fake)
//	t.Cleanup(srv.Close)
//	ch, _ := onebot.New(onebot.Config{Mode: onebot.ModeForwardWS,
//		URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/", AccessToken: "t"})
//	env := chantest.Env{Channel: ch, Platform: fake, BotID: fake.BotID(),
//		Caps: chantest.Capabilities{Redelivers: true, Offline: true, Reject: true, SendMentions: true}}
//
// # Concurrency
//
// A Server is safe for concurrent use. Pushes are written to every event
// connection and POSTed synchronously on the caller's goroutine; API
// requests are answered on their own goroutines. Close stops everything
// and waits for the fake's goroutines.
package onebottest
