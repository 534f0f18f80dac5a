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
// byte-identical prefix and upstream prompt caches hit.
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
