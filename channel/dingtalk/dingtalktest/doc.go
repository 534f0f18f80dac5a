// Package dingtalktest is an in-process fake of DingTalk's Stream mode and
// robot APIs for tests of the dingtalk adapter and of embedders' bots.
//
// # Overview
//
// [New] starts a [Server] on a loopback httptest server; point the
// adapter's APIBase at [Server.URL] and give it [Server.ClientID] and
// [Server.ClientSecret]. The server speaks the wire protocol the
// documentation describes:
//
//   - POST /v1.0/gateway/connections/open checks the credentials and the
//     subscriptions and answers {endpoint, ticket}; the ticket is valid
//     for Config.TicketTTL (90 s) and for one connection only;
//   - GET /connect?ticket=… upgrades to the stream WebSocket. Frames are
//     JSON text {specVersion, type, headers, data} with data a
//     JSON-encoded string; the server records every acknowledgement
//     ([Server.Acks], [Server.WaitAck]) and answers WebSocket pings
//     (unless [Server.Freeze]d);
//   - POST /v1.0/oauth2/accessToken answers {accessToken, expireIn} for
//     the app key and secret; the token expires after Config.TokenTTL
//     and [Server.RevokeTokens] invalidates all of them;
//   - POST /robot/sendBySession?session=… is a conversation's session
//     webhook (text or markdown, with an "at" of atUserIds and
//     atDingtalkIds), valid for Config.SessionTTL after the last message
//     of the conversation, answering {"errcode":0,"errmsg":"ok"};
//   - POST /v1.0/robot/groupMessages/send and
//     /v1.0/robot/oToMessages/batchSend take sampleText or
//     sampleMarkdown with the access token and answer a processQueryKey
//     (and the invalid and flow-controlled user lists);
//   - POST /v1.0/robot/messageFiles/download answers a downloadUrl for a
//     download code registered with [Server.AddFile]; the link is served
//     by the fake without credentials, like DingTalk's storage links.
//
// Inbound: [Server.Push] sends a robot message callback as DingTalk does
// (private or group, @-mention of the robot with isInAtList and the
// leading space, other atUsers, a quoted reply, text, picture, richText,
// audio, video or file) with the conversation's session webhook;
// [Server.PushCallback], [Server.PushFrame], [Server.PushRaw] and
// [Server.PushBinary] send anything else. [Server.Ping] sends a SYSTEM
// ping and checks the echoed opaque; [Server.Disconnect] announces a
// connection's close and closes it Config.DisconnectGrace later;
// [Server.Drop] cuts every connection. Like DingTalk, the fake does not
// deliver a robot message again, whatever the acknowledgement said.
//
// Outbound: sends are validated and recorded ([Server.Sent],
// [Server.WaitSent]). Failures: [Server.FailNext] injects an answer for
// a call (any status, errcode or code, a dropped connection before or
// after delivery, a hung request); [Server.RejectNextSend] a definitive
// rejection; [Server.KickBot] answers a group's sends as for a robot
// removed from it; [Server.SetInvalidUser] lists a user as invalid;
// Config.SendsPerMinute throttles the robot (errcode 130101 from a
// webhook, 403 Forbidden.AccessDenied.QpsLimitForApi from the API);
// [Server.SetOffline] closes the stream and answers every call 503.
//
// The Server implements chantest.PlatformDriver, so an adapter runs
// chantest.Conformance against it:
//
//	srv := dingtalktest.New(dingtalktest.Config{})
//	defer srv.Close()
//	ch, _ := dingtalk.New(dingtalk.Config{ClientID: srv.ClientID(),
//		ClientSecret: srv.ClientSecret(), APIBase: srv.URL()})
//	go ch.Run(ctx, sink)
//	srv.WaitAccepted(ctx, 1)
//	srv.Push(ctx, dingtalktest.Incoming{Group: true, ConversationID: "cid1",
//		From: dingtalktest.User{StaffID: "4242", Nick: "Alice"}, Text: "hi", MentionBot: true})
//	sent, _ := srv.WaitSent(ctx, 1)
//
// # Implementing
//
// Nothing to implement: the Server is a concrete fake. Conversations are
// created by the messages pushed to them and the sends to them; a private
// chat's conversation is the user's one-to-one chat with the robot. Where
// DingTalk documents no error code (an expired session, a rejected
// message), the fake uses the constants it exports. Everything runs in
// memory on loopback; nothing sleeps: expiries read Config.Clock.
//
// # Concurrency
//
// A Server is safe for concurrent use. Push methods write to the newest
// open connection that was not announced to close and return once the
// frame is written, before the client handled it.
package dingtalktest
