package chantest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/personakit/persona/channel"
)

// Harness starts the adapter under test against its fake platform. Every
// subtest of Conformance calls Start once and gets a fresh environment.
type Harness interface {
	// Start builds a new adapter connected to a new fake platform and
	// returns them. It must not call Run: Conformance does that. Start
	// registers its own teardown with t.Cleanup and fails t on error.
	Start(t *testing.T) Env
}

// HarnessFunc adapts a function to a Harness.
type HarnessFunc func(t *testing.T) Env

// Start calls f.
func (f HarnessFunc) Start(t *testing.T) Env { return f(t) }

// ParallelHarness is implemented by harnesses whose environments are
// independent of each other (no fixed ports, no shared state); Conformance
// then runs its subtests with t.Parallel.
type ParallelHarness interface {
	Harness
	Parallel() bool
}

// Env is one adapter under test with the fake platform it talks to.
type Env struct {
	// Channel is the adapter. Conformance calls Run and Send on it.
	Channel channel.Channel
	// Platform drives the fake platform server.
	Platform PlatformDriver
	// BotID is the bot's own account id on the fake platform; events must
	// carry it and mentions of the bot must use it.
	BotID string
	// Caps says which optional checks apply.
	Caps Capabilities
	// Group is the group chat the suite talks in (zero = group "100200300").
	Group channel.Chat
	// User is the human the suite impersonates; its private chat has
	// ID User.ID (zero = {ID: "4242", Name: "Alice"}).
	User channel.Sender
	// Timeout bounds each subtest (zero = 10 s). It is a deadline for
	// things to happen, never a timing assertion.
	Timeout time.Duration
}

// Capabilities say what the fake platform (and the adapter) support.
type Capabilities struct {
	// Redelivers: when the adapter NACKs an event (the sink returned an
	// error), the platform delivers it again (a polling cursor that did not
	// advance, a webhook retried after a non-2xx answer, a stream without
	// ack). The suite then requires the event to arrive again.
	Redelivers bool
	// Offline: PlatformDriver.SetOffline is supported.
	Offline bool
	// Reject: PlatformDriver.RejectNextSend is supported.
	Reject bool
	// SendMentions: Outgoing.Mentions reach the platform and are reported
	// in Delivered.Mentions.
	SendMentions bool
}

// PlatformDriver is the test's handle on the fake platform server. Its
// methods are called from the test goroutine only.
type PlatformDriver interface {
	// Emit makes the platform push an inbound message to the adapter and
	// returns its message id as the adapter must report it in
	// Event.MessageID. Emit may return before the adapter handled the
	// message. If the fake observes the adapter's NACK synchronously it may
	// return it as an error.
	Emit(ctx context.Context, in Inbound) (messageID string, err error)
	// Received lists the messages the platform accepted from the bot since
	// Start, in order.
	Received(ctx context.Context) ([]Delivered, error)
	// SetOffline takes the platform (connection or account) offline, or
	// brings it back. Called only when Caps.Offline is set.
	SetOffline(ctx context.Context, offline bool) error
	// RejectNextSend makes the platform reject the next send definitively
	// (a permanent status or return code). Called only when Caps.Reject is
	// set.
	RejectNextSend(ctx context.Context) error
}

// Inbound is a message the fake platform pushes to the adapter.
type Inbound struct {
	// Chat is where the message is posted; a private chat's ID is From.ID.
	Chat channel.Chat
	From channel.Sender
	Text string
	// MentionBot puts a mention of the bot before the text.
	MentionBot bool
	// QuoteID makes the message quote (reply to) this message id.
	QuoteID string
}

// Delivered is a message the fake platform received from the bot.
type Delivered struct {
	Chat channel.Chat
	Text string
	// ReplyTo is the quoted message id, "" when none.
	ReplyTo string
	// Mentions are the mentioned user ids.
	Mentions []string
	// MessageID is the id the platform assigned ("" if the fake does not
	// track it); when set it must be among the Receipt's MessageIDs.
	MessageID string
}

// Defaults of Env.
var (
	DefaultGroup = channel.Chat{Kind: channel.Group, ID: "100200300"}
	DefaultUser  = channel.Sender{ID: "4242", Name: "Alice"}
)

// DefaultTimeout bounds each conformance subtest when Env.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Conformance runs the duties every adapter owes as subtests against the
// adapter and fake platform that h starts: normalisation of group and private
// messages, mentions, quotes, text round trips, sends and receipts, reply-to,
// ack discipline (a NACKed event is not lost), prompt shutdown, concurrent
// sends, and (when supported) offline and rejection classification.
func Conformance(t *testing.T, h Harness) {
	t.Helper()
	parallel := false
	if p, ok := h.(ParallelHarness); ok {
		parallel = p.Parallel()
	}
	for _, c := range conformanceChecks {
		t.Run(c.name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			c.check(t, newSession(t, h))
		})
	}
}

var conformanceChecks = []struct {
	name  string
	check func(t *testing.T, s *session)
}{
	{"Name", checkName},
	{"ReportsOnline", checkReportsOnline},
	{"GroupMessage", checkGroupMessage},
	{"PrivateMessage", checkPrivateMessage},
	{"MentionBot", checkMentionBot},
	{"Quote", checkQuote},
	{"TextRoundTrip", checkTextRoundTrip},
	{"Send", checkSend},
	{"ReplyTo", checkReplyTo},
	{"SendMentions", checkSendMentions},
	{"NackedEventNotLost", checkNack},
	{"RunStopsOnCancel", checkRunStops},
	{"ConcurrentSends", checkConcurrentSends},
	{"Offline", checkOffline},
	{"Rejected", checkRejected},
}

func checkName(t *testing.T, s *session) {
	name := s.env.Channel.Name()
	require.NotEmpty(t, name, "Name")
	require.NotContains(t, name, ":", "Name is part of session keys and may not contain ':'")
}

func checkReportsOnline(t *testing.T, s *session) {
	s.run(t)
	st := s.sink.States()
	i := slices.IndexFunc(st, func(x channel.State) bool { return x.Connected && x.Online })
	require.GreaterOrEqual(t, i, 0, "states: %+v", st)
	require.Equal(t, s.env.Channel.Name(), st[i].Platform, "State.Platform")
	if st[i].BotID != "" {
		require.Equal(t, s.env.BotID, st[i].BotID, "State.BotID")
	}
}

func checkGroupMessage(t *testing.T, s *session) {
	s.run(t)
	in := Inbound{Chat: s.env.Group, From: s.env.User, Text: "hello group"}
	id, ev := s.emit(t, in)
	s.checkEvent(t, ev, in, id)
	require.Equal(t, in.Text, ev.Text(), "Event.Text")
}

func checkPrivateMessage(t *testing.T, s *session) {
	s.run(t)
	in := Inbound{Chat: s.private(), From: s.env.User, Text: "hello bot"}
	id, ev := s.emit(t, in)
	s.checkEvent(t, ev, in, id)
	require.Equal(t, in.Text, ev.Text(), "Event.Text")
}

func checkMentionBot(t *testing.T, s *session) {
	s.run(t)
	in := Inbound{Chat: s.env.Group, From: s.env.User, Text: "are you there", MentionBot: true}
	id, ev := s.emit(t, in)
	s.checkEvent(t, ev, in, id)
	require.True(t, ev.Mentions(s.env.BotID), "no mention segment of the bot id %q in %+v", s.env.BotID, ev.Segments)
	require.Contains(t, ev.Text(), in.Text)
}

func checkQuote(t *testing.T, s *session) {
	s.run(t)
	first, _ := s.emit(t, Inbound{Chat: s.env.Group, From: s.env.User, Text: "first"})
	in := Inbound{Chat: s.env.Group, From: s.env.User, Text: "about that", QuoteID: first}
	id, ev := s.emit(t, in)
	s.checkEvent(t, ev, in, id)
	require.Equal(t, first, ev.QuoteID(), "Event.QuoteID")
	require.Contains(t, ev.Text(), in.Text)
}

// roundTripTexts are the texts the suite sends both ways: CJK, emoji
// (with modifiers, a ZWJ sequence and a flag) and a 1,000-rune mix.
func roundTripTexts() []struct{ name, text string } {
	pattern := []rune("中文テキスト한국어😀abc")
	long := make([]rune, 0, 1000)
	for len(long) < 1000 {
		long = append(long, pattern[len(long)%len(pattern)])
	}
	return []struct{ name, text string }{
		{"CJK", "你好，世界！日本語のテキスト、한국어 텍스트"},
		{"Emoji", "emoji 👋🏽 👨‍👩‍👧‍👦 🇯🇵 ❤️ end"},
		{"Long1000Runes", string(long)},
	}
}

func checkTextRoundTrip(t *testing.T, s *session) {
	s.run(t)
	limit := channel.LimitOf(s.env.Channel)
	for _, tc := range roundTripTexts() {
		t.Run(tc.name, func(t *testing.T) {
			in := Inbound{Chat: s.env.Group, From: s.env.User, Text: tc.text}
			id, ev := s.emit(t, in)
			s.checkEvent(t, ev, in, id)
			require.Equal(t, tc.text, ev.Text(), "inbound text")

			if n := TextLen(tc.text, limit.Unit); n > limit.Max {
				t.Logf("outbound skipped: %d units over the channel's limit %d", n, limit.Max)
				return
			}
			rc, err := s.env.Channel.Send(s.ctx, channel.Outgoing{Chat: s.env.Group, Text: tc.text})
			require.NoError(t, err, "Send")
			d := s.deliveredOnce(t, s.env.Group, tc.text)
			checkReceipt(t, rc, d)
		})
	}
}

func checkSend(t *testing.T, s *session) {
	s.run(t)
	for _, chat := range []channel.Chat{s.env.Group, s.private()} {
		text := "conformance send to " + chat.String()
		rc, err := s.env.Channel.Send(s.ctx, channel.Outgoing{Chat: chat, Text: text})
		require.NoError(t, err, "Send to %s", chat)
		d := s.deliveredOnce(t, chat, text)
		checkReceipt(t, rc, d)
		require.Empty(t, d.ReplyTo, "ReplyTo of a send without one")
	}
}

func checkReplyTo(t *testing.T, s *session) {
	s.run(t)
	id, _ := s.emit(t, Inbound{Chat: s.env.Group, From: s.env.User, Text: "question"})
	text := "answer to " + id
	rc, err := s.env.Channel.Send(s.ctx, channel.Outgoing{Chat: s.env.Group, Text: text, ReplyTo: id})
	require.NoError(t, err, "Send")
	d := s.deliveredOnce(t, s.env.Group, text)
	checkReceipt(t, rc, d)
	require.Equal(t, id, d.ReplyTo, "Delivered.ReplyTo")
}

func checkSendMentions(t *testing.T, s *session) {
	if !s.env.Caps.SendMentions {
		t.Skip("Caps.SendMentions not set")
	}
	s.run(t)
	text := "hello with a mention"
	rc, err := s.env.Channel.Send(s.ctx, channel.Outgoing{Chat: s.env.Group, Text: text, Mentions: []string{s.env.User.ID}})
	require.NoError(t, err, "Send")
	got, err := s.env.Platform.Received(s.ctx)
	require.NoError(t, err, "Received")
	var hits []Delivered
	for _, d := range got {
		if d.Chat == s.env.Group && strings.Contains(d.Text, text) {
			hits = append(hits, d)
		}
	}
	require.Len(t, hits, 1, "deliveries containing %q: %+v", text, got)
	checkReceipt(t, rc, hits[0])
	require.Contains(t, hits[0].Mentions, s.env.User.ID, "Delivered.Mentions")
}

func checkNack(t *testing.T, s *session) {
	s.run(t)
	s.sink.FailNext(1)
	inA := Inbound{Chat: s.env.Group, From: s.env.User, Text: "refused once"}
	idA, err := s.env.Platform.Emit(s.ctx, inA)
	if idA == "" {
		require.NoError(t, err, "Emit")
		require.NotEmpty(t, idA, "Emit returned no message id")
	}
	nacked := s.waitEvent(t, "the refused delivery of "+idA, true, idA)

	inB := Inbound{Chat: s.env.Group, From: s.env.User, Text: "accepted"}
	idB, err := s.env.Platform.Emit(s.ctx, inB)
	require.NoError(t, err, "Emit after a NACK")
	evB := s.waitEvent(t, "the message after the NACK", false, idB)
	s.checkEvent(t, evB, inB, idB)

	if !s.env.Caps.Redelivers {
		t.Log("Caps.Redelivers not set: only checked that the adapter survives a NACK")
		return
	}
	again := s.waitEvent(t, "the redelivery of "+idA, false, idA)
	s.checkEvent(t, again, inA, idA)
	require.Equal(t, nacked.Key(), again.Key(), "Key of the redelivered event")
}

func checkRunStops(t *testing.T, s *session) {
	s.run(t)
	s.stop()
	select {
	case err := <-s.runDone:
		s.runDone <- err // for the cleanup
		if err != nil {
			require.ErrorIs(t, err, context.Canceled, "Run after cancel")
		}
	case <-s.ctx.Done():
		require.Fail(t, "Run did not return after its context was cancelled")
	}
}

func checkConcurrentSends(t *testing.T, s *session) {
	s.run(t)
	const workers, each = 4, 3
	var mu sync.Mutex
	var receipts []channel.Receipt
	g, gctx := errgroup.WithContext(s.ctx)
	for w := range workers {
		g.Go(func() error {
			for i := range each {
				text := fmt.Sprintf("concurrent %d-%d", w, i)
				rc, err := s.env.Channel.Send(gctx, channel.Outgoing{Chat: s.env.Group, Text: text})
				if err != nil {
					return fmt.Errorf("Send %q: %w", text, err)
				}
				mu.Lock()
				receipts = append(receipts, rc)
				mu.Unlock()
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	ids := map[string]bool{}
	for _, rc := range receipts {
		require.NotEmpty(t, rc.MessageIDs, "Receipt.MessageIDs")
		for _, id := range rc.MessageIDs {
			require.False(t, ids[id], "message id %q returned twice", id)
			ids[id] = true
		}
	}
	for w := range workers {
		for i := range each {
			s.deliveredOnce(t, s.env.Group, fmt.Sprintf("concurrent %d-%d", w, i))
		}
	}
}

func checkOffline(t *testing.T, s *session) {
	if !s.env.Caps.Offline {
		t.Skip("Caps.Offline not set")
	}
	s.run(t)
	seen := len(s.sink.States())
	require.NoError(t, s.env.Platform.SetOffline(s.ctx, true), "SetOffline(true)")
	s.waitState(t, "an offline state report", seen, func(st channel.State) bool { return !st.Connected || !st.Online })

	_, err := s.env.Channel.Send(s.ctx, channel.Outgoing{Chat: s.env.Group, Text: "while offline"})
	require.Error(t, err, "Send while offline")
	require.Equal(t, channel.ClassOffline, channel.Classify(err), "class of %v", err)

	seen = len(s.sink.States())
	require.NoError(t, s.env.Platform.SetOffline(s.ctx, false), "SetOffline(false)")
	s.waitState(t, "an online state report", seen, func(st channel.State) bool { return st.Connected && st.Online })
	text := "back online"
	rc, err := s.env.Channel.Send(s.ctx, channel.Outgoing{Chat: s.env.Group, Text: text})
	require.NoError(t, err, "Send after coming back online")
	checkReceipt(t, rc, s.deliveredOnce(t, s.env.Group, text))
}

func checkRejected(t *testing.T, s *session) {
	if !s.env.Caps.Reject {
		t.Skip("Caps.Reject not set")
	}
	s.run(t)
	require.NoError(t, s.env.Platform.RejectNextSend(s.ctx), "RejectNextSend")
	_, err := s.env.Channel.Send(s.ctx, channel.Outgoing{Chat: s.env.Group, Text: "to be rejected"})
	require.Error(t, err, "Send")
	require.Equal(t, channel.ClassRejected, channel.Classify(err), "class of %v", err)
	require.True(t, channel.Classify(err).Definitive())

	text := "after a rejection"
	rc, err := s.env.Channel.Send(s.ctx, channel.Outgoing{Chat: s.env.Group, Text: text})
	require.NoError(t, err, "Send after a rejection")
	checkReceipt(t, rc, s.deliveredOnce(t, s.env.Group, text))
	got, err := s.env.Platform.Received(s.ctx)
	require.NoError(t, err, "Received")
	for _, d := range got {
		require.NotEqual(t, "to be rejected", d.Text, "the platform kept a rejected message")
	}
}

func checkReceipt(t *testing.T, rc channel.Receipt, d Delivered) {
	t.Helper()
	require.NotEmpty(t, rc.MessageIDs, "Receipt.MessageIDs")
	for _, id := range rc.MessageIDs {
		require.NotEmpty(t, id, "empty id in Receipt.MessageIDs %q", rc.MessageIDs)
	}
	if d.MessageID != "" {
		require.Contains(t, rc.MessageIDs, d.MessageID, "the platform's id of the delivered message")
	}
}

// session is one subtest's environment plus the running adapter.
type session struct {
	env     Env
	ctx     context.Context // the subtest deadline
	sink    *Recorder
	stop    context.CancelFunc
	runDone chan error
	// waitCtx is ctx, also cancelled with a runEnded cause when Run
	// returns: waits stop on either.
	waitCtx context.Context
	ended   context.CancelCauseFunc
}

// runEnded is the cancel cause of session.waitCtx when Run returned.
type runEnded struct{ err error }

func (e runEnded) Error() string { return fmt.Sprintf("Run returned %v", e.err) }

func newSession(t *testing.T, h Harness) *session {
	env := h.Start(t)
	require.NotNil(t, env.Channel, "Env.Channel")
	require.NotNil(t, env.Platform, "Env.Platform")
	require.NotEmpty(t, env.BotID, "Env.BotID")
	if env.Group == (channel.Chat{}) {
		env.Group = DefaultGroup
	}
	if env.User == (channel.Sender{}) {
		env.User = DefaultUser
	}
	env.Timeout = cmp.Or(env.Timeout, DefaultTimeout)
	ctx, cancel := context.WithTimeout(t.Context(), env.Timeout)
	t.Cleanup(cancel)
	waitCtx, ended := context.WithCancelCause(ctx)
	t.Cleanup(func() { ended(nil) })
	return &session{env: env, ctx: ctx, sink: NewRecorder(), waitCtx: waitCtx, ended: ended}
}

func (s *session) private() channel.Chat {
	return channel.Chat{Kind: channel.Private, ID: s.env.User.ID}
}

// run starts Run and waits for the first connected and online state.
func (s *session) run(t *testing.T) {
	t.Helper()
	runCtx, stop := context.WithCancel(s.ctx)
	s.stop = stop
	s.runDone = make(chan error, 1)
	go func() {
		err := s.env.Channel.Run(runCtx, s.sink)
		s.runDone <- err
		s.ended(runEnded{err})
	}()
	t.Cleanup(func() {
		stop()
		// Bounded by a fresh deadline: the subtest's may be spent.
		wait, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.env.Timeout)
		defer cancel()
		select {
		case err := <-s.runDone:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v after its context was cancelled; want nil or context.Canceled", err)
			}
		case <-wait.Done():
			t.Error("Run did not return after its context was cancelled")
		}
	})
	s.waitState(t, "a connected and online state report", 0, func(st channel.State) bool { return st.Connected && st.Online })
}

// emit makes the platform push in and waits for the accepted event.
func (s *session) emit(t *testing.T, in Inbound) (string, channel.Event) {
	t.Helper()
	id, err := s.env.Platform.Emit(s.ctx, in)
	require.NoError(t, err, "Emit")
	require.NotEmpty(t, id, "Emit returned no message id")
	return id, s.waitEvent(t, "message "+id, false, id)
}

// waitEvent waits for a message event with the given id: a refused
// delivery attempt when refused is set, else an accepted one.
func (s *session) waitEvent(t *testing.T, what string, refused bool, id string) channel.Event {
	t.Helper()
	var ev channel.Event
	s.wait(t, what, func(accepted, nacked []channel.Event, _ []channel.State) bool {
		list := accepted
		if refused {
			list = nacked
		}
		for _, e := range list {
			if e.MessageID == id && e.Kind == channel.KindMessage {
				ev = e
				return true
			}
		}
		return false
	})
	return ev
}

// waitState waits for a state report, at index from or later, that
// satisfies ok.
func (s *session) waitState(t *testing.T, what string, from int, ok func(channel.State) bool) {
	t.Helper()
	s.wait(t, what, func(_, _ []channel.Event, st []channel.State) bool {
		return from <= len(st) && slices.ContainsFunc(st[from:], ok)
	})
}

// wait blocks until cond (see [Recorder.Wait]) holds, failing on the
// subtest deadline or when Run returns early.
func (s *session) wait(t *testing.T, what string, cond func(accepted, refused []channel.Event, st []channel.State) bool) {
	t.Helper()
	if s.sink.Wait(s.waitCtx, cond) == nil {
		return
	}
	var ended runEnded
	if errors.As(context.Cause(s.waitCtx), &ended) {
		require.Failf(t, "Run returned early", "waiting for %s: Run returned %v", what, ended.err)
	}
	require.Failf(t, "timed out", "waiting for %s (%d events accepted, states %+v)", what, len(s.sink.Events()), s.sink.States())
}

// checkEvent checks the normalisation of an emitted message.
func (s *session) checkEvent(t *testing.T, ev channel.Event, in Inbound, id string) {
	t.Helper()
	require.NoError(t, ev.Validate(), "Event.Validate")
	require.Equal(t, s.env.Channel.Name(), ev.Platform, "Event.Platform")
	require.Equal(t, s.env.BotID, ev.BotID, "Event.BotID")
	require.Equal(t, channel.KindMessage, ev.Kind, "Event.Kind")
	require.Equal(t, in.Chat, ev.Chat, "Event.Chat")
	require.Equal(t, id, ev.MessageID, "Event.MessageID")
	require.False(t, ev.Time.IsZero(), "Event.Time")
	require.Equal(t, in.From.ID, ev.Sender.ID, "Event.Sender.ID")
	require.Contains(t, []channel.Source{"", channel.SourceLive}, ev.Source, "Event.Source")
	require.True(t, strings.HasSuffix(ev.Key(), "/"+id), "Event.Key %q is not built from the message id %q", ev.Key(), id)
}

// deliveredOnce requires exactly one delivery of text in chat and returns it.
func (s *session) deliveredOnce(t *testing.T, chat channel.Chat, text string) Delivered {
	t.Helper()
	got, err := s.env.Platform.Received(s.ctx)
	require.NoError(t, err, "Received")
	var hits []Delivered
	for _, d := range got {
		if d.Chat == chat && d.Text == text {
			hits = append(hits, d)
		}
	}
	require.Len(t, hits, 1, "deliveries of %q to %s among %d received", text, chat, len(got))
	return hits[0]
}
