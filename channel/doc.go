// Package channel is the normalised message model every other persona package
// speaks, and the contract a platform adapter implements.
//
// # Overview
//
// An adapter (OneBot, Telegram, QQ, DingTalk, Feishu, WeCom, or an embedder's
// own) turns platform payloads into [Event] values and hands them to a [Sink];
// it turns an [Outgoing] message into a platform call and returns a [Receipt]
// with the platform message ids, or a classified error. Adapters supply facts
// (mentions, quotes, sender role); they never decide whether to reply.
//
// Every event belongs to one session, named by a session key of the form
//
//	<profile>:<platform>:<bot id>:<group|private>:<chat id>
//
// built by [SessionKey] and parsed by [ParseSessionKey]. Profile, platform and
// bot id never contain a colon; the chat id is the rest of the key and may.
// The session is the unit of ordering, history and flags.
//
// # Implementing
//
// A [Channel] has three methods: Name, Run (connect and deliver events until
// the context ends) and Send. Optional capabilities are separate interfaces
// detected by type assertion, like database/sql/driver: [HistoryFetcher],
// [ChatLister], [Typer], [Recaller], [ForwardSender], [MemberLookup],
// [TextLimiter], [AccountRisk] and [MediaFetcher]. [As] finds them through
// wrappers ([Wrapper]).
//
// Media: image, sticker, voice, video and file segments carry a [Media]
// reference (a URL or a platform file id). A [MediaFetcher] turns one into
// content on a worker: the bytes from the platform's own API, or a link the
// caller fetches through its public-address guard (an adapter never fetches
// an address a message handed it). The pipeline fills in Media.Transcript
// and Media.Description and stores them with the message;
// [Event.TextAndSpeech] reads the transcripts with the text.
//
// Ack discipline: Sink.HandleEvent returns only after the event is durable.
// A webhook answers the platform, and a polling cursor advances, only after it
// returned nil; on error the adapter NACKs so the platform redelivers.
//
// Send errors are classified with the sentinels [ErrOffline], [ErrKicked],
// [ErrMediaInvalid] and the typed errors [*RateLimitedError],
// [*RejectedError] and [*MutedError] (matched by [ErrRateLimited],
// [ErrRejected] and [ErrMuted] through errors.Is). Anything else is a
// transient failure. Classification is by status or return code, never by
// message text. The package channel/chantest has an in-memory channel and a
// conformance suite every adapter runs.
//
// # Concurrency
//
// Send may be called from several goroutines at once; Run is called once.
// Event and Outgoing are plain values.
package channel
