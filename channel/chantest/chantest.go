package chantest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Defaults of Config.
const (
	DefaultPlatform = "chantest"
	DefaultBotID    = "bot"
)

// DefaultHistoryPage is the page size FetchHistory uses when the query
// gives none.
const DefaultHistoryPage = 100

var (
	// ErrSendFailed is the transient error FailNext injects when it is given
	// a nil error.
	ErrSendFailed = errors.New("chantest: injected send failure")
	// ErrNoMember is returned by LookupMember for a member that was never
	// set with SetMember.
	ErrNoMember = errors.New("chantest: no such member")
	// ErrRunning is returned by Run when another Run of the same Channel is
	// still active.
	ErrRunning = errors.New("chantest: already running")
)

// Config configures a Channel. The zero value is usable.
type Config struct {
	// Platform is the platform id returned by Name and stamped on events
	// (default "chantest").
	Platform string
	// BotID is the bot's own account id (default "bot").
	BotID string
	// Clock stamps event, send, typing and recall times (nil = wall clock).
	Clock clock.Clock
	// Limit is the declared text limit. When Max > 0, Send rejects longer
	// texts with a *channel.RejectedError (code "text_too_long"); the zero
	// value declares nothing, so channel.LimitOf reports the default.
	Limit channel.TextLimit
	// Discard keeps no record of what passes through: Sent stays empty and
	// the chats have no history to fetch. For benchmarks, whose message
	// counts would otherwise grow both without bound.
	Discard bool
}

// Sent is one successful Send as captured by the Channel.
type Sent struct {
	// Out is the message as passed to Send.
	Out channel.Outgoing
	// Receipt is what Send returned.
	Receipt channel.Receipt
	// At is the clock time of the send.
	At time.Time
}

// Typing is one call of the Typing capability.
type Typing struct {
	Chat channel.Chat
	At   time.Time
}

// Recall is one successful call of the Recall capability.
type Recall struct {
	Chat      channel.Chat
	MessageID string
	At        time.Time
}

// Channel is an in-memory channel.Channel for tests and examples. Events
// enter through Inject or Say and go to the Sink given to Run; sends are
// captured and listed by Sent and WaitSent. It implements the optional
// capabilities Typer, HistoryFetcher, ChatLister, Recaller, MemberLookup and
// TextLimiter over the messages it has seen.
//
// A Channel starts online. It is safe for concurrent use.
type Channel struct {
	platform string
	botID    string
	clk      clock.Clock
	limit    channel.TextLimit
	discard  bool

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every state change
	sink     channel.Sink  // non-nil while Run is active
	running  bool
	online   bool
	failN    int
	failErr  error
	nextIn   int
	nextOut  int
	nextHist int
	sent     []Sent
	typing   []Typing
	recalls  []Recall
	answers  []FriendAnswer
	chats    []channel.Chat             // in first-seen order
	history  map[channel.Chat][]histMsg // per chat, in arrival order
	known    map[histKey]struct{}       // the messages in history
	members  map[memberKey]channel.Member
}

// histKey names a message in the history.
type histKey struct {
	chat channel.Chat
	id   string
}

type histMsg struct {
	seq int
	ev  channel.Event
}

type memberKey struct {
	chat   channel.Chat
	userID string
}

// Compile-time checks of the capabilities.
var (
	_ channel.Channel        = (*Channel)(nil)
	_ channel.Typer          = (*Channel)(nil)
	_ channel.HistoryFetcher = (*Channel)(nil)
	_ channel.ChatLister     = (*Channel)(nil)
	_ channel.Recaller       = (*Channel)(nil)
	_ channel.MemberLookup   = (*Channel)(nil)
	_ channel.TextLimiter    = (*Channel)(nil)
)

// New returns an online Channel configured by cfg.
func New(cfg Config) *Channel {
	return &Channel{
		platform: cmp.Or(cfg.Platform, DefaultPlatform),
		botID:    cmp.Or(cfg.BotID, DefaultBotID),
		clk:      clock.OrReal(cfg.Clock),
		limit:    cfg.Limit,
		discard:  cfg.Discard,
		changed:  make(chan struct{}),
		online:   true,
		history:  make(map[channel.Chat][]histMsg),
		known:    make(map[histKey]struct{}),
		members:  make(map[memberKey]channel.Member),
	}
}

// Name returns the platform id.
func (c *Channel) Name() string { return c.platform }

// BotID returns the bot's own account id.
func (c *Channel) BotID() string { return c.botID }

// TextLimit returns the configured limit (zero when none was configured).
func (c *Channel) TextLimit() channel.TextLimit { return c.limit }

// notifyLocked wakes everyone waiting for a change. c.mu must be held.
func (c *Channel) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// stateLocked is the state while Run is active: the transport is up and
// the account is online unless SetOnline(false) took it offline.
func (c *Channel) stateLocked(reason string) channel.State {
	return channel.State{
		Platform:  c.platform,
		BotID:     c.botID,
		Connected: true,
		Online:    c.online,
		Reason:    reason,
	}
}

// Run records sink, reports the connection state to it and blocks until ctx
// ends; it then reports the disconnect and returns nil. Run may be called
// again after it returned; a concurrent second Run returns ErrRunning.
func (c *Channel) Run(ctx context.Context, sink channel.Sink) error {
	if sink == nil {
		return errors.New("chantest: Run with a nil sink")
	}
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrRunning
	}
	c.running = true
	c.sink = sink
	reason := "connected"
	if !c.online {
		reason = "connected, account offline"
	}
	st := c.stateLocked(reason)
	c.notifyLocked()
	c.mu.Unlock()

	sink.ReportState(ctx, st)
	<-ctx.Done()

	c.mu.Lock()
	c.running = false
	c.sink = nil
	st = c.stateLocked("stopped")
	st.Connected, st.Online = false, false
	c.notifyLocked()
	c.mu.Unlock()

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	sink.ReportState(sctx, st)
	return nil
}

// SetOnline takes the account offline (false) or back online (true) and,
// while Run is active, reports the new state to the sink (Connected stays
// true, Online follows). While offline, Send and the capabilities fail with
// channel.ErrOffline.
func (c *Channel) SetOnline(ctx context.Context, online bool) {
	c.mu.Lock()
	c.online = online
	reason := "account offline"
	if online {
		reason = "account online"
	}
	st := c.stateLocked(reason)
	sink := c.sink
	c.notifyLocked()
	c.mu.Unlock()
	if sink != nil {
		sink.ReportState(ctx, st)
	}
}

// Online reports whether the channel is online.
func (c *Channel) Online() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.online
}

// Running reports whether Run is active.
func (c *Channel) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// FailNext makes the next n sends fail with err (ErrSendFailed when err is
// nil), without capturing them. It replaces any earlier FailNext.
func (c *Channel) FailNext(n int, err error) {
	if err == nil {
		err = ErrSendFailed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failN, c.failErr = max(n, 0), err
}

// Inject delivers ev to the sink of the running Run and returns the sink's
// error, so a caller sees a NACK. It waits for Run to start, or returns
// ctx's error if ctx ends first. Empty fields are filled: Platform and BotID
// from the Config, Time from the clock, Kind message, Source live, and for
// messages (not notices) a unique MessageID ("in-1", ...). Messages are kept
// in the chat history whatever the sink answers, like a platform keeps them.
func (c *Channel) Inject(ctx context.Context, ev channel.Event) error {
	_, err := c.inject(ctx, ev)
	return err
}

func (c *Channel) inject(ctx context.Context, ev channel.Event) (channel.Event, error) {
	c.mu.Lock()
	c.fillLocked(&ev)
	c.mu.Unlock()

	sink, err := c.waitSink(ctx)
	if err != nil {
		return ev, err
	}
	c.mu.Lock()
	if ev.Kind != channel.KindNotice && ev.MessageID != "" && !c.discard {
		c.rememberLocked(ev)
	}
	c.mu.Unlock()
	return ev, sink.HandleEvent(ctx, ev)
}

func (c *Channel) fillLocked(ev *channel.Event) {
	ev.Platform = cmp.Or(ev.Platform, c.platform)
	ev.BotID = cmp.Or(ev.BotID, c.botID)
	ev.Kind = cmp.Or(ev.Kind, channel.KindMessage)
	ev.Source = cmp.Or(ev.Source, channel.SourceLive)
	if ev.Time.IsZero() {
		ev.Time = c.clk.Now()
	}
	if ev.MessageID == "" && ev.Kind != channel.KindNotice {
		c.nextIn++
		ev.MessageID = "in-" + strconv.Itoa(c.nextIn)
	}
}

// waitSink blocks until Run is active and returns its sink.
func (c *Channel) waitSink(ctx context.Context) (channel.Sink, error) {
	for {
		c.mu.Lock()
		sink, ch := c.sink, c.changed
		c.mu.Unlock()
		if sink != nil {
			return sink, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("chantest: waiting for Run: %w", context.Cause(ctx))
		}
	}
}

// rememberLocked adds a message to its chat's history once (a redelivery of
// the same message id is not added again).
func (c *Channel) rememberLocked(ev channel.Event) {
	msgs, seen := c.history[ev.Chat]
	if !seen {
		c.chats = append(c.chats, ev.Chat)
	}
	k := histKey{ev.Chat, ev.MessageID}
	if _, ok := c.known[k]; ok {
		return
	}
	c.known[k] = struct{}{}
	c.nextHist++
	ev.Segments = slices.Clone(ev.Segments)
	c.history[ev.Chat] = append(msgs, histMsg{seq: c.nextHist, ev: ev})
}

// SayOption adjusts the event Say builds. Options run after the Config
// defaults are filled in, so ev.BotID is known.
type SayOption func(ev *channel.Event)

// MentionBot makes the message mention the bot: a mention segment of the
// bot id before the text, and ToMe set as a platform would.
func MentionBot() SayOption {
	return func(ev *channel.Event) {
		ev.Segments = append([]channel.Segment{channel.Mention(ev.BotID)}, ev.Segments...)
		ev.ToMe = true
	}
}

// MentionUser adds a mention segment of userID before the text.
func MentionUser(userID string) SayOption {
	return func(ev *channel.Event) {
		ev.Segments = append([]channel.Segment{channel.Mention(userID)}, ev.Segments...)
	}
}

// QuoteOf makes the message quote (reply to) the given message id. Apply it
// after mention options to get the usual "quote, mention, text" order.
func QuoteOf(messageID string) SayOption {
	return func(ev *channel.Event) {
		ev.Segments = append([]channel.Segment{channel.Quote(messageID)}, ev.Segments...)
	}
}

// WithMessageID sets the platform message id (instead of a generated one).
func WithMessageID(id string) SayOption {
	return func(ev *channel.Event) { ev.MessageID = id }
}

// WithTime sets the event time (instead of the clock's now).
func WithTime(t time.Time) SayOption {
	return func(ev *channel.Event) { ev.Time = t }
}

// WithSeq sets the per-chat sequence number.
func WithSeq(seq int64) SayOption {
	return func(ev *channel.Event) { ev.Seq = seq }
}

// WithSegments appends segments (images, links, ...) after the text.
func WithSegments(segs ...channel.Segment) SayOption {
	return func(ev *channel.Event) { ev.Segments = append(ev.Segments, segs...) }
}

// WithSource sets the event source (default live).
func WithSource(s channel.Source) SayOption {
	return func(ev *channel.Event) { ev.Source = s }
}

// Say injects a text message from `from` in chat and returns the event as
// delivered (with its generated message id) and the sink's error. An empty
// text adds no text segment.
func (c *Channel) Say(ctx context.Context, chat channel.Chat, from channel.Sender, text string, opts ...SayOption) (channel.Event, error) {
	ev := channel.Event{Chat: chat, Sender: from}
	if text != "" {
		ev.Segments = []channel.Segment{channel.Text(text)}
	}
	c.mu.Lock()
	c.fillLocked(&ev)
	c.mu.Unlock()
	for _, o := range opts {
		o(&ev)
	}
	return c.inject(ctx, ev)
}

// Send captures out and returns a receipt with a new message id ("out-1",
// ...). It fails with channel.ErrOffline while offline, with the FailNext
// error while one is armed, and with a *channel.RejectedError for an invalid
// chat, an empty message or a text over the configured limit.
func (c *Channel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return channel.Receipt{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.online {
		return channel.Receipt{}, channel.ErrOffline
	}
	if c.failN > 0 {
		c.failN--
		return channel.Receipt{}, c.failErr
	}
	switch {
	case !out.Chat.Kind.Valid() || out.Chat.ID == "":
		return channel.Receipt{}, &channel.RejectedError{Code: "bad_chat", Reason: fmt.Sprintf("invalid chat %q", out.Chat)}
	case out.Text == "" && len(out.Media) == 0:
		return channel.Receipt{}, &channel.RejectedError{Code: "empty_message", Reason: "no text and no media"}
	case c.limit.Max > 0 && TextLen(out.Text, c.limit.Unit) > c.limit.Max:
		return channel.Receipt{}, &channel.RejectedError{Code: "text_too_long",
			Reason: fmt.Sprintf("%d units over the limit of %d", TextLen(out.Text, c.limit.Unit), c.limit.Max)}
	}
	c.nextOut++
	now := c.clk.Now()
	rc := channel.Receipt{MessageIDs: []string{"out-" + strconv.Itoa(c.nextOut)}, Time: now}
	if !c.discard {
		out.Mentions = slices.Clone(out.Mentions)
		out.Media = slices.Clone(out.Media)
		c.sent = append(c.sent, Sent{Out: out, Receipt: rc, At: now})
		c.rememberLocked(c.selfEvent(out, rc))
	}
	c.notifyLocked()
	return channel.Receipt{MessageIDs: slices.Clone(rc.MessageIDs), Time: now}, nil
}

// selfEvent is the history entry of a sent message.
func (c *Channel) selfEvent(out channel.Outgoing, rc channel.Receipt) channel.Event {
	ev := channel.Event{
		Platform:  c.platform,
		BotID:     c.botID,
		Kind:      channel.KindSelf,
		Chat:      out.Chat,
		MessageID: rc.MessageIDs[0],
		Time:      rc.Time,
		Sender:    channel.Sender{ID: c.botID, IsBot: true},
		Source:    channel.SourceLive,
	}
	if out.ReplyTo != "" {
		ev.Segments = append(ev.Segments, channel.Quote(out.ReplyTo))
	}
	for _, id := range out.Mentions {
		ev.Segments = append(ev.Segments, channel.Mention(id))
	}
	if out.Text != "" {
		ev.Segments = append(ev.Segments, channel.Text(out.Text))
	}
	for _, m := range out.Media {
		ev.Segments = append(ev.Segments, channel.Segment{Type: mediaType(m.MIME), Media: &m})
	}
	return ev
}

func mediaType(mime string) channel.SegmentType {
	switch {
	case strings.HasPrefix(mime, "image/"):
		return channel.SegImage
	case strings.HasPrefix(mime, "audio/"):
		return channel.SegVoice
	case strings.HasPrefix(mime, "video/"):
		return channel.SegVideo
	}
	return channel.SegFile
}

// TextLen measures s in unit: runes, UTF-8 bytes or UTF-16 code units.
func TextLen(s string, unit channel.TextUnit) int {
	switch unit {
	case channel.Bytes:
		return len(s)
	case channel.UTF16:
		n := 0
		for _, r := range s {
			n += utf16.RuneLen(r)
		}
		return n
	}
	return utf8.RuneCountInString(s)
}

// Sent returns a copy of the successful sends, in order.
func (c *Channel) Sent() []Sent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sentLocked()
}

func (c *Channel) sentLocked() []Sent {
	out := make([]Sent, len(c.sent))
	for i, s := range c.sent {
		s.Out.Mentions = slices.Clone(s.Out.Mentions)
		s.Out.Media = slices.Clone(s.Out.Media)
		s.Receipt.MessageIDs = slices.Clone(s.Receipt.MessageIDs)
		out[i] = s
	}
	return out
}

// WaitSent blocks until at least n sends succeeded and returns them all, or
// returns what was sent so far with ctx's error.
func (c *Channel) WaitSent(ctx context.Context, n int) ([]Sent, error) {
	for {
		c.mu.Lock()
		if len(c.sent) >= n {
			s := c.sentLocked()
			c.mu.Unlock()
			return s, nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			s := c.Sent()
			return s, fmt.Errorf("chantest: %d of %d sends: %w", len(s), n, context.Cause(ctx))
		}
	}
}

// Typing records a typing indicator for chat.
func (c *Channel) Typing(ctx context.Context, chat channel.Chat) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.online {
		return channel.ErrOffline
	}
	c.typing = append(c.typing, Typing{Chat: chat, At: c.clk.Now()})
	c.notifyLocked()
	return nil
}

// Typings returns the recorded typing calls, in order.
func (c *Channel) Typings() []Typing {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.typing)
}

// Recall deletes a message the channel has seen (sent or injected) from its
// chat's history. An unknown message fails with a *channel.RejectedError
// (code "not_found").
func (c *Channel) Recall(ctx context.Context, chat channel.Chat, messageID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.online {
		return channel.ErrOffline
	}
	msgs := c.history[chat]
	i := slices.IndexFunc(msgs, func(m histMsg) bool { return m.ev.MessageID == messageID })
	if i < 0 {
		return &channel.RejectedError{Code: "not_found", Reason: fmt.Sprintf("no message %q in %s", messageID, chat)}
	}
	c.history[chat] = slices.Delete(msgs, i, i+1)
	delete(c.known, histKey{chat, messageID})
	c.recalls = append(c.recalls, Recall{Chat: chat, MessageID: messageID, At: c.clk.Now()})
	c.notifyLocked()
	return nil
}

// Recalls returns the successful recalls, in order.
func (c *Channel) Recalls() []Recall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.recalls)
}

// FriendAnswer is one answer to a friend request (AnswerFriendRequest).
type FriendAnswer struct {
	Flag   string
	Accept bool
}

// AnswerFriendRequest records the answer to the friend request n names
// (channel.RequestResponder). An empty flag fails with a
// *channel.RejectedError; an offline channel with channel.ErrOffline.
func (c *Channel) AnswerFriendRequest(ctx context.Context, n channel.Notice, accept bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.online {
		return channel.ErrOffline
	}
	if n.Flag == "" {
		return &channel.RejectedError{Code: "bad_request", Reason: "friend request without a flag"}
	}
	c.answers = append(c.answers, FriendAnswer{Flag: n.Flag, Accept: accept})
	c.notifyLocked()
	return nil
}

// FriendAnswers returns the answers to friend requests, in order.
func (c *Channel) FriendAnswers() []FriendAnswer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.answers)
}

// SetMember sets (or replaces) what LookupMember returns for m.UserID in
// chat.
func (c *Channel) SetMember(chat channel.Chat, m channel.Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members[memberKey{chat, m.UserID}] = m
}

// LookupMember returns the member set with SetMember, or an error wrapping
// ErrNoMember.
func (c *Channel) LookupMember(ctx context.Context, chat channel.Chat, userID string) (channel.Member, error) {
	if err := ctx.Err(); err != nil {
		return channel.Member{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.online {
		return channel.Member{}, channel.ErrOffline
	}
	m, ok := c.members[memberKey{chat, userID}]
	if !ok {
		return channel.Member{}, fmt.Errorf("%w: %s in %s", ErrNoMember, userID, chat)
	}
	return m, nil
}

// ListChats returns every chat that has had a message (injected or sent), in
// first-seen order.
func (c *Channel) ListChats(ctx context.Context) ([]channel.Chat, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.online {
		return nil, channel.ErrOffline
	}
	return slices.Clone(c.chats), nil
}

// FetchHistory returns one page of the chat's messages (injected and sent,
// minus recalled ones), newest first by time and then by arrival. The cursor
// names the oldest message of the previous page, so messages arriving
// between pages do not shift later pages. Next is set only when older
// messages remain. Events come back with Source backfill.
func (c *Channel) FetchHistory(ctx context.Context, q channel.HistoryQuery) (channel.HistoryPage, error) {
	if err := ctx.Err(); err != nil {
		return channel.HistoryPage{}, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultHistoryPage
	}
	var after *histMsg // exclusive upper bound from the cursor
	if q.Cursor != "" {
		ns, seq, ok := strings.Cut(q.Cursor, "/")
		n, err1 := strconv.ParseInt(ns, 10, 64)
		s, err2 := strconv.Atoi(seq)
		if !ok || err1 != nil || err2 != nil {
			return channel.HistoryPage{}, &channel.RejectedError{Code: "bad_cursor", Reason: fmt.Sprintf("cursor %q", q.Cursor)}
		}
		after = &histMsg{seq: s, ev: channel.Event{Time: time.Unix(0, n)}}
	}

	c.mu.Lock()
	if !c.online {
		c.mu.Unlock()
		return channel.HistoryPage{}, channel.ErrOffline
	}
	msgs := slices.Clone(c.history[q.Chat])
	c.mu.Unlock()

	newerFirst := func(a, b histMsg) int {
		if x := b.ev.Time.Compare(a.ev.Time); x != 0 {
			return x
		}
		return cmp.Compare(b.seq, a.seq)
	}
	slices.SortFunc(msgs, newerFirst)
	var page channel.HistoryPage
	var last histMsg
	for _, m := range msgs {
		if after != nil && newerFirst(*after, m) >= 0 {
			continue // not older than the cursor
		}
		if len(page.Events) == limit {
			page.Next = strconv.FormatInt(last.ev.Time.UnixNano(), 10) + "/" + strconv.Itoa(last.seq)
			break
		}
		ev := m.ev
		ev.Source = channel.SourceBackfill
		page.Events = append(page.Events, ev)
		last = m
	}
	return page, nil
}

// Bare returns a view of c with only the three channel.Channel methods, for
// tests of code paths taken when a channel has no optional capabilities.
func (c *Channel) Bare() channel.Channel { return bare{c} }

type bare struct{ c *Channel }

func (b bare) Name() string                                     { return b.c.Name() }
func (b bare) Run(ctx context.Context, sink channel.Sink) error { return b.c.Run(ctx, sink) }
func (b bare) Send(ctx context.Context, o channel.Outgoing) (channel.Receipt, error) {
	return b.c.Send(ctx, o)
}
