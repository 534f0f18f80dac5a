// Package agent is the generation seam: the [Model] port every model call in
// persona goes through, and the [Runner] that turns an assembled prompt into a
// reply.
//
// # Overview
//
// A [Model] takes a [Request] (messages, optional tools, a purpose such as
// "chat" or "proactive_reply_router") and returns a [Response] with text,
// tool calls and [Usage], including cached prompt tokens. Errors are
// classified with [*Error]: [Transient] errors (timeouts, 429, 5xx) are
// retried by the queue, definitive ones (invalid request, content policy) are
// not. agent/openai implements Model for any OpenAI-compatible endpoint;
// agent/agenttest has a scripted model for tests.
//
// A [Runner] produces the reply of one turn. The default, [SingleCall],
// makes one model call. [Prompt] assembles the request in a fixed order with
// the stable part (persona, history) first, so consecutive turns share a
// byte-identical prefix and upstream prompt caches hit. A [ContextBuilder]
// keeps each session's last rendered history (ContextConfig.HistoryCache),
// so a turn renders only the messages that are new since the last one; the
// request is byte for byte what rendering everything again would give.
//
// # Privacy
//
// No model sees a real platform id. A session's [Scope] holds every id the
// session showed (participants, the chat, the bot, message ids) with a
// stable alias derived from the session's secret (u_…, g_…, m_…), the same
// in every call of every kind. Prompts render ids through it (or through
// an [Aliaser] with the same secret), and [Private] wraps a Model as the
// one boundary every call goes through: with the Scope the context carries
// ([WithScope]), or the one its [ScopeSource] gives for the session the
// context names ([WithSession]), it replaces known ids still typed in a
// request's text, drops remote image URLs, and turns aliases in the answer
// back into ids. A call with no session fails with [ErrNoScope].
//
// # The agent loop
//
// [Loop] is the default tool-loop [Runner]. [NewLoop] takes a
// [LoopConfig] whose zero fields are the defaults below; the pipeline calls
// [Loop.RunLoop] with a [LoopInput] (the [RunInput] plus session key, group
// flag, permission tiers, switched-off tools, the current message text, the
// say callback, "evidence required", the image-job probe and the request
// deadline on the loop's clock). Every step the model either calls one tool
// or finishes with agent_finalize (plain text also finishes):
//
//   - Steps: 20 (owners 32, at most 32); final reply 8,000 characters
//     (owners 20,000); 3 protocol repairs.
//   - Time: finish reserve = min(20 s, ⅓ of the time left at run start);
//     planning deadline = request deadline − reserve. Model calls run under
//     the planning deadline, tools under min(60 s, planning deadline). A
//     model or tool that ignores its context is abandoned at the deadline.
//   - One call per step: the first call of a batch runs, the others get a
//     "not executed" result.
//   - Pre-execution checks, in order: a catalog tool must be loaded and its
//     arguments pass its schema ([ValidateArgs]) → unknown ("does not exist")
//     or denied ("no permission") → lossless coercion ("3" → 3) → an
//     extension-changing tool needs the owner's one-time 6-digit code (10
//     min, [ConfirmStore]) → an identical repeat of the previous call is
//     skipped → quotas (web_search 3; introspection 6 and tools_load 4, which
//     use no steps). A failed check costs one protocol repair.
//   - Results: errors become observations; secrets (configured values and
//     token/key shapes) are masked; output is cut at 8,000 characters with a
//     marker; search/render tools fill the evidence ledger through
//     [ResultTool] or [ReportEvidence]; the remaining budget is attached.
//   - Finish checks, each repaired once: silence (refused while an image job
//     is queued), real line breaks, evidence required but not gathered,
//     links neither fetched nor seen in the conversation, leaked protocol
//     words, empty text.
//   - Forced finish (reported as [FinishReason] forced_steps,
//     forced_repairs, forced_reserve or forced_evidence): only
//     agent_finalize is offered, forced, under the request deadline; if that
//     fails, a digest of the evidence, else the empty-generation fallbacks
//     (pause line, refusal text, queued-image line, silence after say, "I
//     didn't produce a usable reply.").
//
// Tools live in a [Registry]: [Core] tools are always offered, the others
// ([Deferred], the default) appear as one catalog line and are reached
// through tools_load and tools_execute; [Tiers] restricts a tool to
// permission tiers. Across turns a [CarryStore] keeps the last 8 tool calls
// (30 min) and, after a forced finish, up to 12 step summaries (10 min);
// the loop injects both (see [Loop.MemoryBlocks] to place them yourself),
// and group sessions restore loaded tools from a [SnapshotStore] (30 min).
// A silent result has the text [[SILENT]], so the plain Runner interface
// carries it too.
//
// # Implementing
//
// Implement Model with one method, or wrap a function in [ModelFunc]; the
// same for Runner and [RunnerFunc].
//
// # Concurrency
//
// Models and Runners are called from many workers at once and must be safe
// for concurrent use.
package agent
