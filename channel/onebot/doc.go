// Package onebot is the OneBot v11 adapter: a [channel.Channel] for QQ bots
// run through a OneBot v11 implementation such as NapCat, Lagrange.OneBot,
// LLOneBot or go-cqhttp.
//
// # Overview
//
// [New] takes a [Config] whose zero value means "reverse WebSocket, mount
// the handler yourself"; New validates it and returns clear errors. The
// three transports of the protocol are supported:
//
//   - [ModeReverseWS] (default): the implementation dials us. Run listens on
//     Config.Addr or Config.Listener, or the [Channel] (an http.Handler) is
//     mounted on a server of yours. The handshake must carry the access
//     token ("Authorization: Bearer <token>", go-cqhttp's "Token <token>"
//     or ?access_token=; 401 when missing, 403 when wrong), X-Self-ID and
//     "X-Client-Role: Universal". One client per account: a second one is
//     refused with 409 and logged as duplicate_client_conflict (unless the
//     first no longer answers a ping, in which case it is replaced).
//   - [ModeForwardWS]: we dial Config.URL (the universal endpoint "/") with
//     the Bearer token and redial after a failure with backoff: 1 s doubling
//     to 60 s with ±20 % jitter on the injected clock, reset after a
//     successful connection.
//   - [ModeHTTP]: API calls are POSTed to Config.URL + "/<action>"; events
//     arrive as HTTP POSTs on the Channel's handler, which checks
//     X-Signature (HMAC-SHA1 of the body with Config.Secret; 401 missing,
//     403 wrong) and answers 204 only after sink.HandleEvent returned nil,
//     503 when it failed (so an implementation that retries can), 400 for
//     malformed JSON, 204 for an event that can never become valid (logged
//     as invalid_event) and 413 for a body over Config.ReadLimit. It never
//     sends quick operations.
//
// Events are normalised into [channel.Event]: private and group messages
// (segment arrays and CQ-code strings alike), the bot's own messages
// (post_type message_sent, or user_id = self id) as channel.KindSelf, the
// notices group_recall, friend_recall, notify/poke, group_increase and
// friend_add as channel.KindNotice, and friend requests (post_type
// "request", request_type "friend") as a channel.NoticeFriendRequest
// notice in the private chat with the requester (Notice.UserID and
// Operator: the requester; Flag and Comment: the request's flag and
// comment). A friend request has no message id; its dedupe key hashes its
// content with the payload's time, so a redelivery keeps it. Group join
// requests and invitations (request_type "group") are not supported: they
// are logged (request_ignored, debug level) and dropped. The sender's
// card (else nickname), role and level fill channel.Sender; a group's
// message_seq becomes Event.Seq; a reply segment becomes a quote segment
// (and Event.Quoted when the quoted message was seen or sent recently); an
// at segment of the bot becomes a mention and sets ToMe. group_decrease (kick_me) and group_ban of
// the bot are remembered for send classification. Heartbeats (status.online
// and status.good) and get_status decide whether the account is
// "effectively online"; a heartbeat missing for twice its interval counts
// as offline. State changes go to sink.ReportState.
//
// Send renders channel.Outgoing as a reply segment (ReplyTo) first, at
// segments (Mentions), the text, and image/record/video/file segments
// (Media, by MIME type), in the array format or, with FormatString, as a
// CQ-code string ([RenderCQ]). Errors are classified for the pipeline (see
// channel.Classify) by retcode and state, never by message text: not
// connected or account offline → channel.ErrOffline (fail fast); retcode
// 1400/1404 → *channel.RejectedError; a group missing from the bot's group
// list (cached, refreshed at most once per GroupListTTL) →
// channel.ErrKicked; a ban of the bot in force → *channel.MutedError;
// anything else (other retcodes, [ErrTimeout], [ErrConnectionLost]) is a
// plain retryable error wrapping an [*APIError] where the implementation
// answered.
//
// Every API call has a deadline on the injected clock (10 s; history
// 15 s), WebSocket calls are matched by a unique counter echo, and a call
// that times out or whose connection drops is removed at once
// ([Channel.PendingCalls]). The optional capabilities are
// channel.HistoryFetcher (get_group_msg_history / get_friend_msg_history in
// the NapCat, go-cqhttp or Lagrange parameter [Dialect]; the cursor is the
// oldest message's message_seq or message_id), channel.ChatLister
// (get_group_list + get_friend_list), channel.Recaller (delete_msg),
// channel.ForwardSender (send_group_forward_msg / send_private_forward_msg),
// channel.MemberLookup (get_group_member_info), channel.Typer (NapCat's
// set_input_status, private chats), channel.TextLimiter (900 runes),
// channel.AccountRisk, channel.MediaFetcher (see Media) and
// channel.RequestResponder ([Channel.AnswerFriendRequest]:
// set_friend_add_request with the notice's flag and approve, no remark; a
// notice without a flag is refused before any call). [Channel.Call] makes
// any other action and [Channel.GetMessage] wraps get_msg.
//
// # Media
//
// Image, record, video and file segments become channel.SegImage,
// SegVoice, SegVideo and SegFile with a channel.Media: url (or a file
// that is an http(s) URL) as URL, file_id or file as FileID, name,
// file_name or file as Name, file_size or size as Size (OneBot declares
// no MIME type). Images marked as stickers (sub_type 1; go-cqhttp's
// subType 1) and NapCat's market faces (mface: url, and summary such as
// "[开心]" as Name) become channel.SegSticker. Quoted messages (from the
// cache or get_msg) are converted the same way.
//
// [Channel.FetchMedia] (channel.MediaFetcher) gets the content: an
// image's or sticker's http(s) URL, and a video's or file's, is handed
// back as MediaContent.URL for the caller to fetch through its own
// address guard (the adapter never downloads an address a message gave
// it); otherwise it asks the implementation: get_image, get_record (with
// out_format = MediaRequest.Format, so QQ's silk voice comes back as mp3
// or wav where the implementation can convert) or NapCat's get_file. The
// answer's base64 becomes MediaContent.Body, its url MediaContent.URL, and
// its file (a path on the implementation's machine) is read only when
// Config.MediaRoot is set and the file's real path lies inside it. Sizes
// declared over MediaRequest.MaxBytes are channel.ErrMediaTooLarge; a file
// the implementation no longer has (retcode 100 or 102), an unsupported
// action (1404) or a local path that may not be read is
// channel.ErrMediaUnavailable; timeouts and a lost connection may be
// retried.
//
// Bad input never panics: malformed frames, unknown events and events for
// another account are logged (malformed_frame, unknown_event, invalid_event)
// and skipped, and the WebSocket stays open. A friend request without a
// flag, with a flag or comment that is not a string, or without a valid
// user_id is invalid like an event with a bad id (logged as invalid_event;
// over HTTP answered 204). Ids are checked against the
// protocol's ranges: message_id must be a nonzero 32-bit integer (negative
// ones are fine), self_id, user_id, group_id, target_id and operator_id
// positive 64-bit integers (0 only where it means "none": a private
// message's group_id, an operator_id, the user_id of a whole-group mute, the
// self_id of a meta event sent before the login), message_seq a non-negative
// integer, each given as a JSON number without a fraction or an exponent. An
// event with any other id (a string, 1e30, 1.5, -1 as a group, 2^31 as a
// message id) is invalid: it is logged as invalid_event with the field and
// the reason and never reaches the sink; over HTTP it is answered 204, since
// redelivery cannot make it valid. The same checks apply to the answers of
// get_msg, the history calls (a bad item is logged as invalid_history_item
// and left out), the group and friend lists (invalid_list_item),
// get_group_member_info, get_login_info and the send receipts (a bad
// message_id fails the send, logged as invalid_receipt), and to the ids
// callers pass in (a chat, reply or mention out of range is a
// *channel.RejectedError before any call); at and reply segments with ids
// out of range are dropped.
//
// A frame over Config.ReadLimit closes the WebSocket with status 1009 (the
// protocol cannot skip a partial frame) and is logged as frame_too_large;
// the connection is then re-established by whichever side dials.
//
// Package onebottest is an in-process OneBot v11 implementation (all three
// transports) for the adapter's tests and the embedder's.
//
// # Pointing an implementation at the adapter
//
// Reverse WebSocket (Config{Addr: "127.0.0.1:8080", AccessToken: T}); the
// adapter answers on every path, so any URL path works:
//
//   - NapCat: network config → "WebSocket client" (websocketClients) with
//     url "ws://127.0.0.1:8080/onebot/v11/ws", token T, messagePostFormat
//     "array"; reportSelfMessage true lets the bot's own messages arrive as
//     channel.KindSelf.
//   - Lagrange.OneBot: an Implementations entry {"Type":
//     "ReverseWebSocket", "Host": "127.0.0.1", "Port": 8080, "Suffix":
//     "/onebot/v11/ws", "AccessToken": T}.
//   - go-cqhttp: servers → ws-reverse with universal:
//     ws://127.0.0.1:8080/onebot/v11/ws (the universal client is required;
//     separate API/Event clients are refused with 400) and access-token T.
//
// Forward WebSocket (Config{Mode: ModeForwardWS, URL:
// "ws://127.0.0.1:3001/", AccessToken: T}):
//
//   - NapCat: "WebSocket server" (websocketServers) on 127.0.0.1:3001 with
//     token T.
//   - Lagrange.OneBot: {"Type": "ForwardWebSocket", "Host": "127.0.0.1",
//     "Port": 3001, "AccessToken": T}.
//   - go-cqhttp: servers → ws with address 127.0.0.1:6700 (then URL
//     "ws://127.0.0.1:6700/").
//
// HTTP (Config{Mode: ModeHTTP, URL: "http://127.0.0.1:3000", Addr:
// "127.0.0.1:8080", AccessToken: T, Secret: S}):
//
//   - NapCat: an "HTTP server" (httpServers) on 127.0.0.1:3000 with token T
//     and an "HTTP client" (httpClients) posting to
//     http://127.0.0.1:8080/onebot/event; NapCat signs the posts with that
//     client's token, so set it to S.
//   - Lagrange.OneBot: {"Type": "Http", "Port": 3000, "AccessToken": T} and
//     {"Type": "HttpPost", "Host": "127.0.0.1", "Port": 8080, "Suffix":
//     "/onebot/event", "Secret": S}.
//   - go-cqhttp: servers → http with address 127.0.0.1:3000 and post: [{url:
//     http://127.0.0.1:8080/onebot/event, secret: S}], access-token T.
//
// Set Config.HistoryDialect to match the implementation (DialectNapCat for
// NapCat and LLOneBot, DialectLagrange, DialectGoCQHTTP). Configuration keys
// differ between versions of these projects; check their documentation.
//
// # Implementing
//
// Embedders use the adapter as it is: construct it with New, hand it to the
// pipeline (which calls Run and Send), and test against
// onebottest.Server, which also implements chantest.PlatformDriver:
//
//	fake := onebottest.New(onebottest.Config{AccessToken: "t"})
//	api := httptest.NewServer(fake)                        // forward WS + HTTP API
//	ch, err := onebot.New(onebot.Config{Mode: onebot.ModeForwardWS,
//		URL: "ws" + strings.TrimPrefix(api.URL, "http") + "/", AccessToken: "t"})
//
// The wire helpers are exported for tools and fakes: [Segment], [Message]
// (reads both formats), [ParseCQ], [RenderCQ], [EscapeText],
// [EscapeParam], [Unescape], [Sign] and [VerifySignature].
//
// # Concurrency
//
// A Channel is safe for concurrent use: Send, the capabilities, Call and
// ServeHTTP may run on any goroutine while Run is active. Run is called
// once at a time (a concurrent second Run returns [ErrRunning]). WebSocket
// events are delivered to the sink in arrival order on one goroutine; a
// WebSocket push cannot be NACKed to the implementation, so an event the
// sink refuses is retried by the adapter with backoff until it is accepted
// or Run ends, holding back the events behind it. HTTP POST events are
// delivered on the request's goroutine. State reports go to
// sink.ReportState in order on a goroutine of their own, so a slow sink
// never stalls a WebSocket reader. Run returns only after every
// connection, in-flight event and state report is done; its last report is
// the disconnected "stopped" state.
package onebot
