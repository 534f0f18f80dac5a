package channel

import (
	"context"
	"io"
	"time"
)

// Channel is one platform connection (one bot account on one platform).
type Channel interface {
	// Name returns the platform id ("onebot", "telegram", "console", ...).
	Name() string
	// Run connects and delivers events to sink until ctx ends or the channel
	// fails for good. It reconnects on its own after transient failures.
	Run(ctx context.Context, sink Sink) error
	// Send delivers one outgoing message and returns the platform message
	// ids, or a classified error (see the package doc).
	Send(ctx context.Context, out Outgoing) (Receipt, error)
}

// Sink receives events from a channel. persona.Pipeline is the usual Sink.
type Sink interface {
	// HandleEvent returns nil only once the event is durable (stored or
	// journaled). An adapter acknowledges the platform only after that.
	HandleEvent(ctx context.Context, ev Event) error
	// ReportState tells the pipeline about the connection and account state.
	ReportState(ctx context.Context, st State)
}

// SinkFunc adapts a function to a Sink that ignores state reports.
type SinkFunc func(ctx context.Context, ev Event) error

// HandleEvent calls f.
func (f SinkFunc) HandleEvent(ctx context.Context, ev Event) error { return f(ctx, ev) }

// ReportState does nothing.
func (SinkFunc) ReportState(context.Context, State) {}

// State is a channel's health as reported to the pipeline.
type State struct {
	// Platform and BotID identify the account (BotID may be empty until the
	// adapter learned it).
	Platform string
	BotID    string
	// Connected: the transport is up.
	Connected bool
	// Online: the platform says the account is online and good. The pipeline
	// claims work for the channel only while Connected && Online.
	Online bool
	// Reason is a short human explanation for a change.
	Reason string
}

// Outgoing is one message to send. Adapters render it in their platform's
// format; Text is plain text, already split to the channel's limit.
type Outgoing struct {
	Chat Chat
	Text string
	// ReplyTo quotes this platform message id, when set.
	ReplyTo string
	// Mentions are user ids to mention before the text.
	Mentions []string
	// Media are attachments sent with (or instead of) the text.
	Media []Media
	// IdempotencyKey identifies this chunk of this reply: the same on
	// every attempt to send it (a retry, a resumed turn after a crash) and
	// different for any other chunk, even one with the same text in the
	// same chat. Platforms that accept a client-side dedupe key (Feishu's
	// uuid) use it, and adapters that must number their replies (QQ's
	// msg_seq) key them by it.
	IdempotencyKey string
}

// Receipt is a successful send.
type Receipt struct {
	// MessageIDs are the platform ids of the delivered message(s).
	MessageIDs []string
	// Time is the platform's send time when known.
	Time time.Time
}

// TextUnit is the unit a platform measures its text limit in.
type TextUnit int

// The text units.
const (
	Runes TextUnit = iota
	Bytes
	UTF16
)

// TextLimit is the longest text one outgoing message may carry.
type TextLimit struct {
	Unit TextUnit
	Max  int
}

// DefaultTextLimit applies to channels that do not implement TextLimiter.
var DefaultTextLimit = TextLimit{Unit: Runes, Max: 2000}

// TextLimiter is implemented by channels that declare their text limit.
type TextLimiter interface {
	TextLimit() TextLimit
}

// LimitOf returns the channel's declared text limit (looking through
// wrappers, see As), or DefaultTextLimit.
func LimitOf(c Channel) TextLimit {
	if l, ok := As[TextLimiter](c); ok {
		if tl := l.TextLimit(); tl.Max > 0 {
			return tl
		}
	}
	return DefaultTextLimit
}

// Wrapper is implemented by a channel that wraps another one (such as the
// delivery exit a reply's chunks leave through): Unwrap returns the
// wrapped channel.
type Wrapper interface {
	Unwrap() Channel
}

// Forwarder is implemented by a wrapper that implements every optional
// capability on behalf of the channel it wraps, whether that channel has
// it or not: a wrapper that carries the calls somewhere else (package
// cluster's Share hands them to the process that runs the connection),
// and so cannot know from its own methods which of them can succeed.
// As accepts such a wrapper's implementation of a capability only when
// the chain it wraps has the capability too (see As), so a channel that
// cannot show typing still cannot once wrapped.
//
// A forwarder's capabilities must be detected with As: a plain type
// assertion on it finds all of them.
type Forwarder interface {
	Wrapper
	// ForwardsCapabilities marks the wrapper as a forwarder; it does
	// nothing.
	ForwardsCapabilities()
}

// As finds the first channel in c's chain (c, then what Unwrap returns,
// and so on) that implements the capability T, like errors.As: a wrapper
// that implements T itself (the delivery exit's ledgered SendForward)
// is found before the channel it wraps. Optional capabilities (Typer,
// HistoryFetcher, ForwardSender, …) should be detected with As, so that
// they are seen through wrappers.
//
// A Forwarder's own implementation of T counts only when As finds T in
// the chain it wraps (its Unwrap): then the forwarder is returned, as
// any wrapper would be; otherwise no link of the chain has T for real
// and As reports false.
func As[T any](c Channel) (T, bool) {
	var (
		first T    // the outermost link that implements T
		found bool // first is set
	)
	for range 64 { // a chain longer than this is a cycle
		if c == nil {
			break
		}
		if t, ok := c.(T); ok {
			if !found {
				first, found = t, true
			}
			// A forwarder's T waits for a link below it that has T
			// for real; any other link confirms the first one found.
			if _, fwd := c.(Forwarder); !fwd {
				return first, true
			}
		}
		w, ok := c.(Wrapper)
		if !ok {
			break
		}
		c = w.Unwrap()
	}
	var zero T
	return zero, false
}

// HistoryQuery asks for one page of a chat's history, newest first.
type HistoryQuery struct {
	Chat Chat
	// Cursor continues from a previous page's Next; "" starts at the newest.
	Cursor string
	// Limit is the page size (the backfill uses 100).
	Limit int
}

// HistoryPage is one page of history, newest first.
type HistoryPage struct {
	Events []Event
	// Next is the cursor for the next (older) page; "" means no more.
	Next string
}

// HistoryFetcher is implemented by channels that can pull past messages
// (reconnect backfill, gap refetch, ledger reconciliation).
type HistoryFetcher interface {
	FetchHistory(ctx context.Context, q HistoryQuery) (HistoryPage, error)
}

// ChatLister is implemented by channels that can list their groups and
// recent private contacts (backfill discovery).
type ChatLister interface {
	ListChats(ctx context.Context) ([]Chat, error)
}

// Typer is implemented by channels that can show a typing indicator.
type Typer interface {
	// Typing shows the indicator once; callers refresh it every few seconds.
	Typing(ctx context.Context, chat Chat) error
}

// Recaller is implemented by channels that can delete a sent message.
type Recaller interface {
	Recall(ctx context.Context, chat Chat, messageID string) error
}

// ForwardNode is one entry of a merged-forward card.
type ForwardNode struct {
	Name   string
	UserID string
	Text   string
}

// ForwardSender is implemented by channels that can send a merged-forward
// card (OneBot).
type ForwardSender interface {
	SendForward(ctx context.Context, chat Chat, nodes []ForwardNode) (Receipt, error)
}

// Member is a group member as returned by MemberLookup.
type Member struct {
	UserID     string
	Name       string
	Role       Role
	Level      int
	LevelKnown bool
}

// MemberLookup is implemented by channels that can look up a group member.
type MemberLookup interface {
	LookupMember(ctx context.Context, chat Chat, userID string) (Member, error)
}

// AccountRisk is implemented by channels whose platform bans accounts for
// content or frequency; the audit then checks account safety.
type AccountRisk interface {
	AccountRisk() bool
}

// MediaRequest says what the pipeline wants from a media reference.
type MediaRequest struct {
	// Type is the segment type the reference came from (image, sticker,
	// voice, video, file).
	Type SegmentType
	// Format asks for a voice clip converted to this audio format ("mp3",
	// "wav", …) where the platform can convert it (OneBot get_record's
	// out_format); "" or a platform that cannot convert returns the clip
	// as stored, and the MIME type of MediaContent says what it is.
	Format string
	// MaxBytes is the most the caller will read. A fetcher that knows the
	// size up front may refuse a larger file at once with ErrMediaTooLarge.
	MaxBytes int64
}

// MediaContent is what FetchMedia found. Exactly one of Body and URL is
// set.
type MediaContent struct {
	// Body streams the bytes from the platform's own API (a trusted
	// address the adapter was configured with). The caller closes it and
	// reads at most MediaRequest.MaxBytes of it.
	Body io.ReadCloser
	// URL is an address on the internet where the bytes are (a platform's
	// CDN link). The caller fetches it itself, through its public-address
	// guard: an adapter never fetches an address it was handed by a
	// message.
	URL string
	// MIME is the type the platform declared ("" = unknown; the caller
	// sniffs the bytes either way).
	MIME string
	// Size is the declared size in bytes (0 = unknown).
	Size int64
}

// MediaFetcher is the capability of channels that can get the content of
// the media their events reference (OneBot get_image/get_record, Telegram
// getFile). chat is the conversation the reference came from. A channel
// without it still has its media fetched when the reference carries an
// http(s) URL.
//
// FetchMedia must honour ctx and return promptly: it runs on a turn's
// worker, never on the adapter's own goroutine. ErrMediaUnavailable (or an
// error wrapping it) says the platform no longer has the media, or never
// will give it: the caller stops asking. Any other error may be retried.
type MediaFetcher interface {
	FetchMedia(ctx context.Context, chat Chat, m Media, req MediaRequest) (MediaContent, error)
}

// RequestResponder is implemented by channels that can answer friend
// requests (a [NoticeFriendRequest] notice): accept or refuse the request
// the notice's Flag names.
type RequestResponder interface {
	AnswerFriendRequest(ctx context.Context, n Notice, accept bool) error
}

// Shareable is implemented by a channel that several processes may run at
// once: each process receives what the platform pushes to it (webhook or
// callback requests, which a load balancer may send to any of them) and
// sends with plain HTTP API calls, so there is no connection that only
// one process may hold, and Send works in any process, whichever one
// received the message it answers (a channel that can only reply to
// messages it saw itself is not shareable). Shareable reports whether
// that holds in the mode the channel was configured with. Package
// cluster runs a channel that is not shareable in one process at a time
// and relays the others' sends to it; a shareable one runs everywhere as
// it is.
type Shareable interface {
	Shareable() bool
}
