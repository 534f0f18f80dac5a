// Package memory is what the bot remembers: the chat history of
// every session (the bot's own messages included), summary checkpoints that
// fold old history, long-term facts extracted from it, and recall that
// picks the evidence for the prompt.
//
// # Overview
//
// Four layers, each backed by the store (package store implements every
// port here on SQLite; there is no second in-memory copy that could
// disagree with it):
//
//  1. Recent history: [History] is the transcript port. [RecentAfter] gives
//     the stable history after the current summary checkpoint. A History
//     that keeps recent entries in memory can lend them without a copy
//     ([RecentViewer], read through [RecentOf]).
//  2. Summary checkpoints: a [Summarizer] folds old history into a
//     [Summary] with a [Watermark]. It advances in whole epochs (50
//     messages, once 100 follow the watermark) so the prompt prefix stays
//     stable between advances, and recomputes a checkpoint only when its
//     folded input (hash) or the summary Version changes, never on a config
//     reload. The checkpoint goes before the cache breakpoint.
//  3. Long-term facts: an [Extractor] enqueues a durable job (JobStore) for
//     every [Eligible] user message; its workers claim jobs with leases
//     (2 workers, lease 3 min, 8 attempts, retry 15 s doubling to 16 min),
//     ask the model (agent.PurposeMemory) with the message, recent context
//     and up to 40 related facts, and apply at most 5 candidates together
//     with the job's completion: importance ≥ 0.45, inferred facts need
//     confidence ≥ 0.90, episodes expire after 90 days, every fact keeps its
//     source message ids. One [Fact] is active per (scope, scope owner,
//     subject, key); a different content supersedes it (version + 1), the
//     same content refreshes it, so a retried job never duplicates a fact.
//  4. Recall: a [Recaller] filters facts structurally (active, not
//     expired, this chat's facts, the participants' user facts learned here
//     or in their private chat on the same platform; other groups only with
//     RecallConfig.CrossGroup, other platforms only with CrossChannel, both
//     off; sensitive facts never leave their chat; ≤ 200), scores them by
//     BM25 against the turn's text, adds a recency bonus 1/(1 + age/30 d)
//     and an episode penalty, always includes up to 8 core facts about the
//     speaker (confidence and importance ≥ 0.9), and picks up to 24 facts
//     and history snippets by MMR (λ 0.7) within a token budget (2,400).
//     History snippets come from full-text search of this chat's history
//     (recalled messages and hidden users excluded; the store searches a
//     chat's newest 20,000 messages). Recall never returns what the
//     prompt's history window already holds: [Query.ExcludeHistory] sets
//     Query.Before and Query.Exclude from the window, and a fact whose
//     every source message is in the window is left out too. The bot's own
//     replies are snippets only for the memory_search tool
//     (Query.OwnMessages). Selected facts get last_verified_at touched in
//     the background.
//
// # Privacy
//
// No model call of memory shows a real id. Extraction and summaries
// render through the session's agent.Scope (ExtractConfig.Scopes,
// SummaryConfig.Scopes): every person as "Name (u_…)", the bot as "the
// bot (u_…)", and the ids of the chat, its people and its messages typed
// in text as their aliases; the call carries the Scope (agent.WithScope), so an agent.Private model
// scrubs and restores with the same aliases. The model names the subject
// of a fact by its alias; it is mapped back to the real id (an already
// restored id of a known participant is accepted too) and content,
// evidence and summaries are stored with real ids, since recall renders
// them for other sessions. Without a ScopeSource each component renders
// through a Scope of its own with a random secret: still no ids, just not
// the session's aliases.
//
// The memory block of the prompt is [RenderLines]: one complete item per
// line (a fact, "(core)" for the speaker's core facts, or an earlier
// message), without title or bullets, which the pipeline's block adds.
//
// Text search is SQLite FTS4 over Go-tokenized text ([Tokenize]): runs of
// CJK characters become overlapping bigrams (one character stays a
// unigram), other words are lower-cased, and queries are tokenized the same
// way, so a Chinese or Japanese query finds unspaced text. A one-character
// CJK word inside a longer run is only found through the bigrams it is part
// of.
//
// "Forget me" is FactStore.ForgetUser: the user's facts are marked
// forgotten with their content erased (gone from recall at once), pending
// and running extraction jobs about the user are cancelled (a running job's
// result is dropped), and optionally the user's messages are hidden from
// memory search while staying in the transcript. [ForgetReply] renders the
// counts for the confirmation, never the content.
//
// What the pipeline calls:
//
//   - per turn: Summarizer.Checkpoint (before the cache breakpoint),
//     Recaller.Recall with the history window excluded and [RenderLines]
//     (the memory block's lines, after the breakpoint), and [SearchTool]
//     for the agent loop's memory_search tool;
//   - after a reply (detached, never blocking it): Extractor.Enqueue for
//     the user's message and Summarizer.Refresh for the session;
//   - for the process lifetime: Extractor.Run.
//
// # Implementing
//
// Implement the ports in ports.go ([FactStore], [HistorySearch],
// [JobStore], [SummaryStore]; [Store] is all of them) to back memory with
// another database. History.Append must be idempotent on Entry.Key.
// JobStore follows the lease design of inbound.Queue: every claim counts an
// attempt and increments a fencing token, and CompleteJob must apply the
// changes and mark the job done atomically, or report [ErrLeaseLost] and
// write nothing. ApplyChanges/CompleteJob must keep one active fact per key
// (supersede, or refresh on equal content). Every component takes a
// clock.Clock (nil = real) and a *slog.Logger (nil = discard); config
// zero values mean the defaults (the Default… constants).
//
// # Concurrency
//
// History, the store ports, Recaller, Extractor and Summarizer are safe for
// concurrent use. Extractor.Run starts its workers and returns when ctx
// ends; several processes may run extractors against one store (leases
// keep a job with one worker at a time). Recaller.Wait waits for the
// background last_verified_at updates. Summarizer.Refresh of the same
// session should not run concurrently with itself (two calls may both
// spend a model call; the later save wins).
package memory
