// Package mcptool turns the tools of MCP (Model Context Protocol) servers
// into agent tools, using the official Go SDK
// (github.com/modelcontextprotocol/go-sdk).
//
// # Overview
//
// Each [Server] is either a local command spoken to over stdin/stdout
// (Command, Args, Env, Dir) or a streamable HTTP endpoint (URL, Headers).
// [Open] connects to all of them at once, each within its StartTimeout,
// and lists their tools. [Sources.Register] adds every tool to an
// [agent.Registry] as a deferred catalog tool named "<server>_<tool>"
// (characters outside [A-Za-z0-9_-] become '_', names stay within 64
// characters, clashes get "_2", "_3", … in a fixed order), with the
// tool's description as its purpose, its input schema as parameters, the
// server's CallTimeout and, when set, the server's permission Tiers.
// Schemas the registry cannot read (type arrays, boolean schemas,
// schema-valued additionalProperties, tuple items) are rewritten just
// enough to register; [Sources.Tools] reports which and why.
//
// A call runs on the server's one live session, bounded by CallTimeout,
// the caller's context and [Sources.Close]. The result's text parts are
// joined; images, audio and resources are summarised ("[image image/png,
// 2.0 KiB]"; images also go to [agent.ToolResult.Images]); the text is
// capped at [MaxResultRunes] with a truncation marker. A result flagged
// isError comes back as an error wrapping [ErrToolFailed] with the
// server's text. The loop shows every tool error to the model as an
// observation, so none of them ends a run.
//
// When a session breaks (the process died, the HTTP server went away or
// forgot the session, the output was not JSON-RPC), a call in flight
// fails with [ErrConnectionLost] and the server is reconnected in the
// background:
// at once the first time, then with a backoff that doubles from
// Options.BackoffMin to BackoffMax while attempts fail or sessions die
// young. A call that finds no session connects lazily, or fails at once
// with [ErrUnavailable] while the backoff runs. A request that certainly
// never reached the server (HTTP connection refused, unknown session) is
// retried once on a fresh session; others are not, so a tool never runs
// twice for one call. Registered tools look their session up at call
// time, so after a reconnect they work again without registering anew; a
// tool missing from the new listing fails with [ErrToolGone] ("tool no
// longer offered by server X"). Tools that appear later are registered
// into every registry handed to Register.
//
// Stdio servers inherit only a few environment variables (see
// [Server.Env]), run in a process group of their own, and their stderr
// is logged at debug level and quoted in start errors. A server whose
// stream broke is killed (its whole group) and reaped; Close stops the
// others (stdin closed, SIGTERM, SIGKILL to the group) and reaps them.
// A call that times out or is cancelled is reported to the server by the
// SDK on a best-effort basis. Misbehaving servers are bounded: a frame
// over the SDK's 16 MiB limit or an HTTP JSON body over 32 MiB breaks
// the session with a clear error, tool lists stop at 1,000 tools or 100
// pages, an input schema over 64 KiB is replaced by a plain object
// schema and a description is cut at 4,000 characters.
//
// [Sources.Tools] and [Sources.Status] tell an operator what each server
// offers and whether it is connected.
//
// # Usage
//
//	src, err := mcptool.Open(ctx, []mcptool.Server{
//		{Name: "fs", Command: "mcp-server-filesystem", Args: []string{"/srv/notes"}},
//		{Name: "search", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer …"}, Tiers: []string{"owner"}},
//	}, mcptool.Options{Logger: log})
//	if err != nil {
//		return err // one line per server that failed; see Options.Lenient
//	}
//	defer src.Close()
//	if err := src.Register(registry); err != nil {
//		log.Warn("some MCP tools were not registered", "error", err)
//	}
//
// # Concurrency
//
// Sources and the tools it registers are safe for concurrent use. Calls
// from any number of runs share one session per server; connection
// attempts are single-flight, so concurrent calls during an outage wait
// for the same attempt instead of each starting a process. Timeouts and
// backoff use Options.Clock, so tests drive them with a fake clock.
package mcptool
