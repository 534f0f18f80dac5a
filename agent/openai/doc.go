// Package openai implements [agent.Model] for any OpenAI-compatible Chat
// Completions endpoint (OpenAI, Azure-style proxies, vLLM, Ollama, LiteLLM,
// DeepSeek, …) and [agent.Transcriber] for the matching
// /audio/transcriptions endpoint, on top of the official openai-go SDK.
//
// # Overview
//
// [New] takes one [Config] (base URL, API key, model name, per-call timeout,
// optional HTTP client and per-purpose model names) and returns a [*Model].
// [FromEnv] builds a Config from PERSONA_MODEL_BASE_URL,
// PERSONA_MODEL_API_KEY (or OPENAI_API_KEY) and PERSONA_MODEL:
//
//	cfg, ok := openai.FromEnv(os.Getenv)
//	if !ok {
//		// no model configured: use agenttest or fail
//	}
//	cfg.PurposeModels = map[string]string{agent.PurposeRouter: "small-model"}
//	m, err := openai.New(cfg)
//
// Each [Model.Generate] call is one POST /chat/completions request. An
// [agent.Request] maps onto the wire format as follows: system, user,
// assistant and tool messages keep their roles; user image parts become
// image_url content parts with their detail; assistant tool calls and tool
// results (tool_call_id) round-trip; tools are function definitions whose
// parameters are the tool's JSON Schema; ToolChoice "" lets the model
// choose, "none" forbids tools and a tool name forces that function;
// MaxTokens, Temperature and JSON (response_format json_object) are sent
// when set. Message.CacheBreakpoint is not sent: these endpoints cache
// stable prompt prefixes on their own, and the cached prompt tokens they
// report (usage.prompt_tokens_details.cached_tokens) come back in
// [agent.Usage].CachedInputTokens.
//
// The SDK's own retries are disabled: a failed call returns at once with an
// [*agent.Error] and the inbound queue decides when to retry the turn.
// Errors are classified as follows:
//
//   - 429: [agent.KindRateLimited], RetryAfter from retry-after-ms or
//     Retry-After (seconds or HTTP date)
//   - 5xx, 409 and broken connections or malformed bodies (non-JSON, no
//     choices): [agent.KindServer]
//   - 401, 403: [agent.KindAuth]
//   - error code context_length_exceeded: [agent.KindContextOverflow]
//   - error code content_filter / content_policy_violation, or a
//     finish_reason of content_filter: [agent.KindContentPolicy]
//   - other 4xx: [agent.KindInvalidRequest], as are requests that cannot be
//     encoded (unknown role, tool schema that is not a JSON object)
//   - an expired deadline (Config.Timeout or the caller's) or 408:
//     [agent.KindTimeout]; a canceled context: [agent.KindUnknown] wrapping
//     [context.Canceled]
//
// The provider's error message is kept in [agent.Error].Message.
//
// Config.Vision declares that the model takes images: [Model.AcceptsImages]
// reports it ([agent.ImageInput]), so the pipeline sends pictures only to
// a model that can see them. A user message with Parts goes out as an
// array of content parts: a text part with Content (when not empty), then
// one image_url part per Part with its URL and detail.
//
// # Speech to text
//
// [NewTranscriber] takes a [TranscriberConfig] (base URL, API key, model,
// default [DefaultTranscriptionModel], optional language and prompt,
// timeout, HTTP client) and returns a [*Transcriber]. Each
// [Transcriber.Transcribe] call is one multipart POST
// /audio/transcriptions whose file part carries [agent.Audio].Name as its
// file name (servers pick the decoder by the extension) and MIME as its
// content type, and returns the "text" of the JSON answer. Its errors are
// classified like the chat model's. Neither constructor reads the process
// environment: the SDK services are built from explicit options only
// (openai-go's NewClient would pick up OPENAI_API_KEY, OPENAI_BASE_URL and
// more).
//
// # Implementing
//
// Nothing here is meant to be implemented; to talk to a provider with a
// different wire format, implement [agent.Model] directly (or wrap a
// function in [agent.ModelFunc]). For tests, use agent/agenttest rather than
// an HTTP fake.
//
// # Concurrency
//
// A [*Model] is immutable after [New], and a [*Transcriber] after
// [NewTranscriber]; both are safe for concurrent use, and calls share the
// configured HTTP client and its connection pool.
package openai
