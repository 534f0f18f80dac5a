// Package agenttest provides a scripted [agent.Model] for tests, benchmarks
// and offline examples: no network, no latency, fully deterministic.
//
// # Overview
//
// [New] takes the answers in order, one [Step] per Generate call:
//
//	m := agenttest.New(
//		agenttest.ToolCall("web_search", `{"q":"weather"}`),
//		agenttest.Reply("It's sunny.", agenttest.WithUsage(agent.Usage{InputTokens: 900, CachedInputTokens: 768})),
//	)
//
// Steps are [Reply], [ReplyWithUsage], [ToolCall], [ToolCalls], [Echo],
// [Fail] (return an error such as an [*agent.Error]) and [Func] (compute
// the answer, or block on ctx to simulate a slow model). Requests with a
// purpose scripted by [Model.OnPurpose] (say the proactive router) take
// their own steps first, so a test need not know how calls interleave. When
// the script runs out, Generate fails with [ErrExhausted] unless
// [Model.Otherwise] set a fallback step used for every later call:
//
//	m := agenttest.New().Otherwise(agenttest.Echo())
//
// Every request is recorded as a deep copy: [Model.Requests], [Model.Last]
// and [Model.Calls] let a test assert what the code under test sent, and
// [Model.Pending] that the script was used up. [Model.KeepLast] bounds the
// recording for long benchmarks.
//
// # Implementing
//
// Nothing to implement: Model is a concrete fake. For a one-off model, wrap
// a function in [agent.ModelFunc] or use a single [Func] step with
// Otherwise.
//
// # Concurrency
//
// A Model is safe for concurrent use. Steps are handed out in call order
// under a mutex; the step itself (including a [Func]) runs without the lock,
// so concurrent calls see their steps in arrival order but may finish in any
// order. A call whose context is already done returns ctx.Err() without
// consuming a step.
package agenttest
