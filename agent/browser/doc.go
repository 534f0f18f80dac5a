// Package browser gives the agent a real headless browser: Debian's
// Chromium driven through the DevTools protocol (go-rod), with every
// request it makes checked by the network guard.
//
// # Overview
//
// A [Browser] offers two kinds of browsing:
//
//   - Disposable renders. [Browser.Render] (and the core tool
//     browser_render from [Browser.RenderTool]) loads one URL, runs its
//     JavaScript, waits for the page to settle and returns a [Page]: final
//     URL, title, visible text (innerText, cut to MaxText runes with a
//     marker) and, when asked, a viewport screenshot. Renders take one of
//     Slots slots; a caller waits up to QueueWait for one and then gets
//     [ErrBusy] ("too many disposable browsers running"). The render's own
//     timeout (settle bound plus a fixed overhead) starts once it holds a
//     slot.
//   - Owner-only interactive tabs. [Browser.InteractiveTools] returns
//     browser_open, browser_click, browser_type, browser_scroll,
//     browser_screenshot, browser_read and browser_close. Each conversation
//     (the session key agent.SessionFrom finds in the call's context; no
//     key is [ErrNoSession]) has one tab, kept between turns for Hold after
//     its last action and then closed by an idle sweeper on the Clock. At
//     most MaxTabs tabs are open: a new one closes the longest idle tab, or
//     fails with [ErrTooManyTabs] when all are busy. Every action is
//     bounded by ActionTimeout and logged as one line (action=
//     "browser_action", tool, a hash of the session key, the page's host,
//     the result); typed text is never logged. Screenshots are saved in a
//     folder per conversation under Dir, named by a hash of the session key
//     and deleted after Retention by [Browser.Cleanup] (run hourly by
//     [Browser.Run]).
//
// A page settles when its document is complete, no request (other than
// long-lived streams: WebSocket, EventSource, media) has been in flight
// and the DOM has not changed for 300 ms. The wait is bounded by
// min(RenderOptions.Settle or Config.Settle, MaxSettle) and by the
// caller's context; at the bound the last snapshot that showed anything is
// returned with Page.Settled false, and a page that showed nothing is an
// error.
//
// # Security
//
// Every browsing context this package creates (one per render or tab) is
// given a forward proxy this package runs on 127.0.0.1, with the bypass
// list <-loopback>, which removes Chromium's implicit bypass for loopback.
// The proxy dials every connection (plain HTTP, CONNECT tunnels, WebSocket
// upgrades) through the guard's DialContext, which checks the resolved and
// the connected address, so redirects, frames, sub-resources, XHR,
// WebSockets and DNS rebinding are all covered; a refusal is a 403 the
// page sees as a failed request. Chromium's process-wide --proxy-server
// points at a second listener that refuses everything, so the browser's
// own background requests (update checks, time sync, sign-in) never
// leave, and a request outside the pages' contexts would fail closed.
// Chromium resolves no host names of its own
// (--host-resolver-rules), WebRTC may not use non-proxied UDP, and
// extensions, sync, component updates and background networking are off.
// In addition every document request (the page, each redirect hop, each
// frame) is paused through the DevTools Fetch domain and re-checked with
// Guard.CheckURL, so a refused navigation fails with a [*RefusedError]
// ("refused: <url>: address is not public: …", wrapping
// netguard.ErrBlocked). Only http and https URLs are accepted. A URL that
// turns out to be a download fails with [ErrDownload]; downloads are
// denied. Page text goes to the model fenced with a random tag and marked
// as untrusted content.
//
// # Design: one warm process, an incognito context per page
//
// Starting Chromium costs about half a second and a burst of CPU. Instead
// of a process per render, one Chromium process stays warm and every
// render (and every interactive tab) gets a fresh incognito browser
// context: its own cookies, storage, cache and service workers, disposed
// of when the render ends. This keeps renders isolated from each other
// while saving the start-up; a slot is one concurrent page. The process's
// profile directory (0700, under the system temp folder) holds nothing of
// the pages (incognito contexts live in memory) and is deleted when the
// process stops. The process is replaced when it dies: a call that fails
// because the connection closed or the process exited starts a new one
// and retries the render once, and tabs on the old process report that
// they were lost. It is also recycled after 200 pages, once its open
// pages are closed, which bounds the memory a long-lived browser and its
// driver accumulate.
//
// # Usage
//
//	b, err := browser.New(browser.Config{Logger: log})
//	if err != nil {
//		return err // no local Chromium, or it does not start
//	}
//	defer b.Close()
//	go b.Run(ctx) // screenshot retention
//	if err := b.Register(registry); err != nil {
//		return err
//	}
//
// Register adds browser_render as a core tool and the interactive tools
// as deferred tools for the "owner" tier. Config's zero value is usable;
// each field documents its default. Chromium is never downloaded: Bin or
// a locally installed browser is required.
//
// # Concurrency
//
// A Browser is safe for concurrent use. Renders run in parallel up to
// Slots; actions of one conversation run one at a time, different
// conversations in parallel. Close ends renders and actions in flight.
package browser
