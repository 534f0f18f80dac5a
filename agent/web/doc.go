// Package web reads links: it fetches a page through the network guard,
// reduces it to readable text, and offers that to the model as the
// web_fetch tool. It also holds the cheap link check the link trigger uses
// and a per-session list of recently read sources.
//
// # Overview
//
//   - [Reader.Fetch] downloads one http(s) URL through a
//     [netguard.Guard] client (public addresses only, every redirect
//     re-checked), with the body capped at [Config.MaxBytes], the whole
//     fetch at [Config.Timeout] and the redirects at
//     [Config.MaxRedirects]. HTML becomes readable text through
//     [Readable]; plain text, JSON and XML are returned as text; images,
//     PDFs and other binary content are refused with [ErrNotReadable];
//     4xx/5xx answers are a [*StatusError]. Results are cached per
//     process by [CanonicalURL].
//   - [Readable] turns an HTML document into a title and lines of text:
//     scripts, styles, navigation, footers, asides, forms, frames, SVG and
//     hidden elements are dropped, an <article> or <main> holding the bulk
//     of the text is preferred, entities are decoded and the declared
//     charset honoured.
//   - [CanonicalURL] is the key that identifies a resource: case, default
//     ports, fragments, dot segments and tracking parameters do not make
//     two links different.
//   - [Reader.Resolvable] is the link trigger's test (route.Identity's
//     ResolveLink): a plain http(s) URL whose host is a public IP literal or
//     a plausible public DNS name. It does no network I/O; Fetch checks
//     the DNS answers when it connects.
//   - [Reader.Tool] is web_fetch, an agent.ResultTool: the page text is
//     wrapped in markers that flag it as untrusted, and the page is reported
//     as evidence.
//   - [Sources] keeps each session's recently read pages for the prompt's
//     "recent sources" block, and answers [Sources.Seen] so a link is
//     answered once per resource.
//
// # Usage
//
//	reader := web.New(web.Config{})
//	registry.MustRegister(reader.Tool())
//	id := route.Identity{ResolveLink: reader.Resolvable}
//
//	doc, err := reader.Fetch(ctx, "https://example.com/post")
//	if err == nil {
//		sources.Add(session, doc.Source())
//	}
//
// Config.AllowPrivate lets plain fetches reach private and loopback
// addresses. It is dangerous: whoever can send the bot a link can then
// make it read the operator's own network. Leave it off unless the bot
// only ever talks to its operator.
//
// # Concurrency
//
// A Reader is safe for concurrent use once New returns: its guard and HTTP
// client are shared, its cache is guarded by a mutex. Concurrent fetches of
// the same URL are not merged; each does its own request until one of
// them has filled the cache. Sources is safe for concurrent use.
// Readable, CanonicalURL and Excerpt are pure functions.
package web
