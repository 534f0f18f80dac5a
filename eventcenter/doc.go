// Package eventcenter is the operator's window on the event log: an
// http.Handler that serves a page, a JSON API and a live feed of the
// records every inbound message ends with, and the trail that explains
// each outcome.
//
// # Overview
//
// [New] returns a [*Center] reading an [inbound.RecordReader] (the store
// implements it). Mount it anywhere, for example
//
//	mux.Handle("/events/", http.StripPrefix("/events", center))
//
// Every path below is relative to the mount point, and the page uses
// relative URLs only, so it works under any prefix (the mount path must
// end with "/"; the page is served at the mount point itself).
//
//   - GET / — the page: HTML, one script and one style sheet, embedded, no
//     build step and nothing loaded from elsewhere. It holds no data: it
//     asks for the token and fetches everything through the API.
//   - GET /api/messages?session=&code=&sender=&text=&since=&until=&status=&before=&limit=
//     — a [MessagePage]: the records newest event first, filtered by
//     session key, outcome code, sender id, a piece of the text
//     (case-insensitive for ASCII letters), event time (since ≤ t < until,
//     RFC 3339 or unix milliseconds) and queue state (pending, leased,
//     done); next is the before= cursor of the following page; limit is 1
//     to 500 (default 50). A bad parameter is a 400 with a JSON error.
//   - GET /api/messages/{id} — a [Detail], the whole trail of one record:
//     its fields, the outcome code with its meaning ([Meaning]), reason,
//     trigger, the gates passed and the one that stopped it, command,
//     router rating, review verdicts, delivery stage and the delivery
//     ledger's per-chunk slots with platform ids and times (with
//     Config.Ledger), timings as offsets from the enqueue, tokens per
//     purpose with the cached share, attempts and the last error. 404 for
//     an unknown id (escape the id as one path segment: it contains "/").
//   - GET /api/summary?since=&until= — a [Summary]: counts per outcome code
//     and tokens per purpose of the records completed in the range
//     (default: the last 24 hours), and the items pending now.
//   - GET /api/codes — the outcome catalogue ([Codes]).
//   - GET /api/events?session=&code=&sender=&text=&since=&until=&status=&after=
//     — the live feed, a text/event-stream. It opens with an event of
//     type "ready" whose id and data ({"cursor": …}) are the start cursor,
//     then sends one default ("message") event per record completed after
//     it, in completion order, filtered like the listing: id is the cursor
//     after that record, data the record as a [Message]. It starts at the
//     Last-Event-ID header (a browser's reconnect), else at after= ("" =
//     the first record ever), else at the newest record now. A heartbeat
//     comment goes out every Config.Heartbeat (15 s), and new records
//     arrive within Config.Poll (250 ms), at once after [Center.Wake].
//   - POST /api/session, DELETE /api/session — see Authentication.
//
// Texts shown (message text, reasons, errors, the trail's notes) have every
// Config.Secrets string and the token replaced by "***". Raw platform
// payloads are never read. Every answer carries a Content-Security-Policy
// that allows only the center's own script, style and API (no inline
// script or style, no frames), X-Content-Type-Options: nosniff and
// Cache-Control: no-store. The page inserts every piece of data with
// textContent, never as markup.
//
// # Authentication
//
// Every /api/ path needs the operator token (Config.Token, at least 16
// characters): "Authorization: Bearer <token>", compared in constant time
// through SHA-256 digests so neither content nor length leaks. Without it
// the answer is 401 with a WWW-Authenticate challenge. The page shell
// itself is served to anyone; it shows a token prompt and no data.
//
// Since an EventSource cannot send headers, the page exchanges the token
// for a session cookie: POST /api/session with the bearer token sets an
// HttpOnly, SameSite=Strict cookie (Secure over TLS) that the API accepts
// in place of the header for Config.SessionTTL (one hour). The cookie has
// no Path attribute, so the browser scopes it to the API's directory
// wherever the center is mounted. A cookie never buys another cookie, and
// a request with a wrong bearer token is refused whatever cookie it
// carries. DELETE /api/session ends the cookie. The page keeps the token in
// sessionStorage (one tab, gone when it closes), sends it as the bearer
// header on every fetch, and buys a new cookie when the feed is refused.
// A token may also be given once in the address's fragment,
// ".../#token=<token>": fragments never reach a server, and the page
// removes it from the address at once.
//
// # The page's elements
//
// Tests and tools find the page's parts by these stable ids and data
// attributes:
//
//   - #login (the prompt section, hidden once signed in), #token (its
//     input), #login-submit, #login-error, #logout;
//   - #app (the listing, hidden until signed in), #filters with
//     #filter-code (a select of the codes), #filter-session,
//     #filter-sender, #filter-text and #filter-clear; #notice (errors);
//   - #messages tbody tr[data-id] — one row per record, newest first (live
//     ones are put at the top), with data-code, data-family (replied,
//     ignored, dropped, notice, other, or none while not done) and
//     data-status; its cells are td.time, td.chat, td.sender, td.text and
//     td.code (holding span.badge); #empty, #more (the next page);
//   - #live, whose data-state is off, connecting, open or closed;
//   - #summary (the last 24 hours' counts);
//   - #trail, the panel a click on a row opens: data-id is the record
//     shown, data-loaded is set to it once its trail has arrived; inside,
//     #trail-title, #trail-close, #trail-body, .meaning, and
//     [data-field=…] on the main values (status, code, reason, attempts,
//     last_error, session, sender, text, trigger, gates, stopped_by,
//     command, router_reply, stage, outbound_ids).
//
// # Usage
//
// The root package mounts the center, gives it the store as Records and
// Ledger, calls Wake whenever it records an outcome, and calls Close when
// its HTTP server shuts down (http.Server.RegisterOnShutdown(center.Close)):
// Shutdown waits for streaming responses, which never go idle by
// themselves. See ExampleNew.
//
// # Concurrency
//
// A Center is safe for concurrent use. Each open live feed is one handler
// goroutine that reads one record per CompletedAfter call (so each event
// has its own resume cursor), waits on a timer of Config.Clock, the wake
// channel, the request's context and Close, and returns when any of the
// last two ends or a write fails (each write has a 30 s deadline); nothing
// outlives the request. [Center.Feeds] counts the open feeds. Wake never
// blocks: it closes a channel every feed waiting at that moment selects
// on, and a feed takes the channel before each read, so a Wake is never
// lost.
package eventcenter
