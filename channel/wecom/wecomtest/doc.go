// Package wecomtest is an in-process fake of WeCom (企业微信) for tests of
// the wecom adapter and of embedders' bots: a self-built app's API and
// callbacks, and an AI bot's callbacks or long connection.
//
// # Overview
//
// [New] starts a [Server] on a loopback httptest server in one [Mode]:
//
//   - [ModeApp]: [Server.URL] serves gettoken (corpid and corpsecret
//     checked, tokens with expires_in from Config.TokenLifetime, 40013 /
//     40001 for wrong credentials), message/send (access token checked:
//     40014 unknown, 42001 expired; agentid; text up to 2048 bytes, else
//     45002; recipients out of range in invaliduser, 81013 when none is
//     left; enable_duplicate_check with duplicate_check_interval drops a
//     message identical to one sent to the same user within the interval
//     and answers with the first one's msgid), appchat/send and media/get
//     ([Server.AddMedia]; 40007 for an unknown media_id). User messages are
//     posted to the callback URL ([Server.SetCallbackURL]) as encrypted,
//     signed XML callbacks, with the receiver id the corp id.
//   - [ModeAIBot]: messages are posted as encrypted JSON callbacks
//     (receiver id ""), each with a one-time response_url on the fake
//     (/cgi-bin/aibot/response, valid for an hour). The passive answer is
//     checked and decrypted; a stream answer is then polled with stream
//     refresh callbacks every Config.PollInterval (or by the test,
//     [Server.PollStream], with Config.ManualPoll) until it finishes or
//     six minutes pass; what it shows is the latest content.
//   - [ModeAIBotWS]: [Server.WSURL] is the long connection: the first frame
//     must be aibot_subscribe with the bot id and secret; pings are
//     acknowledged; messages are pushed as aibot_msg_callback frames with
//     fresh req_ids; aibot_respond_msg answers a callback's req_id with a
//     stream (846605 for a req_id the fake did not issue or older than six
//     minutes, 846608 once the stream finished); aibot_send_msg writes to
//     a chat that talked to the bot ([Server.KnowChat] for earlier
//     history). A second subscription gets the first connection a
//     disconnected_event and closes it ([Server.Supersede] does the same).
//
// AI-bot media ([Server.AddAIBotMedia]) are served encrypted at a link
// valid for five minutes: with the message's aeskey on the long
// connection, with the EncodingAESKey on callbacks.
//
// Inbound: [Server.Push] delivers a user message ([Incoming]: text,
// picture, voice, file, quote); a callback answered with a non-2xx status
// or not at all is posted again up to Config.Retries times, as WeCom does.
// In an AI bot's group every message is an @-message of the bot ("@<BotName>
// " before the text), since WeCom delivers no others. [Server.PushRaw]
// posts any plaintext correctly encrypted, and [Server.SealCallback] with
// [Server.PostCallback] let a test tamper with a request.
//
// Outbound: [Server.Sent] and [Server.WaitSent] list what the bot
// delivered, as a chat shows it (a stream once, with its latest content).
//
// Failures: [Server.FailNext] and [Server.FailAfter] inject an errcode, an
// HTTP status or a dropped connection (Failure.Drop: the request takes
// effect, the answer is lost) for a given call; [Server.KickUser],
// [Server.ExpireTokens], [Server.SetOffline] (502 everywhere, long
// connections closed and refused), [Server.Disconnect] and
// [Server.SilencePings] script the rest.
//
// The Server implements chantest.PlatformDriver, so the adapter runs
// chantest.Conformance against it.
//
// # Implementing
//
// The fake's crypto is written apart from the adapter's (so a mistake in
// one is caught by the other) and checked against the official test
// vectors. Message ids are 64-bit numbers for apps and base64 strings
// (without "/" and "+") for AI bots; access tokens and req_ids are
// random. Expiries (tokens, media, response_urls, the stream window) use
// Config.Clock; only the automatic stream polls pace themselves in real
// time.
//
// # Concurrency
//
// A Server is safe for concurrent use. Push and Emit deliver on the
// caller's goroutine and return once a delivery was accepted (or all
// attempts failed).
package wecomtest
