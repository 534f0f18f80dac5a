package persona_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store"
)

var (
	alice   = channel.Sender{ID: "alice", Name: "Alice"}
	bob     = channel.Sender{ID: "bob", Name: "Bob"}
	dmAlice = channel.Chat{Kind: channel.Private, ID: "alice"}
	group1  = channel.Chat{Kind: channel.Group, ID: "100"}
)

// harness runs one pipeline over a chantest channel and collects outcomes.
type harness struct {
	t     *testing.T
	ch    *chantest.Channel
	model *agenttest.Model
	p     *persona.Pipeline
	db    *store.DB
	clk   *clock.Fake

	mu       sync.Mutex
	outcomes map[string]inbound.Outcome
	changed  chan struct{}
}

func newHarness(t *testing.T, model *agenttest.Model, tweak func(*persona.Options)) *harness {
	t.Helper()
	h := &harness{t: t, model: model, outcomes: map[string]inbound.Outcome{}, changed: make(chan struct{}, 1)}
	h.clk = clock.NewFake(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	h.ch = chantest.New(chantest.Config{Clock: h.clk})
	db, err := store.Open(t.TempDir()+"/persona.db", store.Options{Clock: h.clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	h.db = db
	opt := persona.Options{
		Channels: []channel.Channel{h.ch},
		DB:       db,
		DataDir:  t.TempDir(),
		Persona:  "You are Mira.",
		Model:    model,
		Clock:    h.clk,
		NoPacing: true,
		NoRouter: true, // tests that rate unprompted messages turn it back on
		OnOutcome: func(id string, o inbound.Outcome) {
			h.mu.Lock()
			h.outcomes[id] = o
			h.mu.Unlock()
			select {
			case h.changed <- struct{}{}:
			default:
			}
		},
	}
	if tweak != nil {
		tweak(&opt)
	}
	p, err := persona.New(opt)
	require.NoError(t, err)
	h.p = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, p.Close())
	})
	return h
}

func (h *harness) say(chat channel.Chat, from channel.Sender, text string, opts ...chantest.SayOption) channel.Event {
	h.t.Helper()
	ev, err := h.ch.Say(h.t.Context(), chat, from, text, opts...)
	require.NoError(h.t, err)
	return ev
}

// reconnectAfterSnooze waits until ev's turn, whose send found the
// channel offline, is back in the queue with no attempt charged (why says
// what that shows), then takes the channel offline and online again and
// moves the clock until the reply is sent.
func (h *harness) reconnectAfterSnooze(ev channel.Event, why string) {
	h.t.Helper()
	ctx := h.t.Context()
	require.Eventually(h.t, func() bool {
		r, err := h.p.Lookup(ctx, ev.Key())
		return err == nil && r.Status == inbound.StatusPending && r.Attempts == 0
	}, 10*time.Second, 5*time.Millisecond, why)
	h.ch.SetOnline(ctx, false)
	h.ch.SetOnline(ctx, true)
	h.advanceUntil(persona.DefaultOfflineRetry, func() bool { return h.has(ev) })
}

// advanceUntil moves the fake clock forward in steps, waking the
// dispatcher each time, until cond holds.
func (h *harness) advanceUntil(step time.Duration, cond func() bool) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		if cond() {
			return true
		}
		h.clk.Advance(step)
		h.p.Wake()
		return cond()
	}, 20*time.Second, 2*time.Millisecond)
}

func (h *harness) has(ev channel.Event) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.outcomes[ev.Key()]
	return ok
}

// outcome waits for the terminal record of an event.
func (h *harness) outcome(ev channel.Event) inbound.Outcome {
	h.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		h.mu.Lock()
		o, ok := h.outcomes[ev.Key()]
		h.mu.Unlock()
		if ok {
			return o
		}
		select {
		case <-h.changed:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			h.t.Fatalf("no outcome for %s", ev.Key())
		}
	}
}

func TestDirectPrivateMessageIsAnswered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(agenttest.Reply("hi Alice![persona-msg]how are you?")), nil)
	ev := h.say(dmAlice, alice, "hello there")
	o := h.outcome(ev)
	require.Equal(t, outcome.Replied, o.Code)
	require.Equal(t, inbound.StageAcknowledged, o.Stage)
	require.Len(t, o.OutboundIDs, 2)

	sent := h.ch.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, "hi Alice!", sent[0].Out.Text)
	require.Equal(t, "how are you?", sent[1].Out.Text)
	require.Empty(t, sent[0].Out.ReplyTo, "no quote in a private chat")

	req := h.model.Last()
	require.Equal(t, agent.RoleSystem, req.Messages[0].Role)
	require.Contains(t, req.Messages[0].Content, "You are Mira.")
	current := req.Messages[len(req.Messages)-1].Content
	require.Contains(t, current, "Alice")
	require.Contains(t, current, "hello there")
	require.NotContains(t, current, "alice", "real ids never reach the model")

	rec, err := h.p.Lookup(t.Context(), ev.Key())
	require.NoError(t, err)
	require.Equal(t, inbound.StatusDone, rec.Status)
	require.Equal(t, 1, rec.Attempts)
	require.Equal(t, outcome.Replied, rec.Outcome.Code)

	// The bot's reply is in history and reaches the next prompt.
	h.model.Otherwise(agenttest.Reply("sure"))
	h.outcome(h.say(dmAlice, alice, "and again"))
	var hist []string
	for _, m := range lastChat(h.model).Messages {
		hist = append(hist, string(m.Role)+"|"+m.Content)
	}
	joined := strings.Join(hist, "\n")
	require.Contains(t, joined, "assistant|hi Alice!")
	require.Contains(t, joined, "assistant|how are you?")
	require.Contains(t, joined, "hello there")
}

// lastChat returns the model's last generation request (not the router,
// audit or dedup calls).
func lastChat(m *agenttest.Model) agent.Request {
	reqs := m.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Purpose == agent.PurposeChat {
			return reqs[i]
		}
	}
	return agent.Request{}
}

func TestGroupMessages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(agenttest.Reply("one[persona-msg]two")), nil)
	chatter := h.say(group1, bob, "nice weather today")
	require.Equal(t, gate.IgnoredProactiveOff, h.outcome(chatter).Code)
	require.Zero(t, h.model.Calls())

	at := h.say(group1, alice, "what do you think?", chantest.MentionBot())
	o := h.outcome(at)
	require.Equal(t, outcome.Replied, o.Code)
	sent := h.ch.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, at.MessageID, sent[0].Out.ReplyTo, "the first chunk quotes the trigger")
	require.Empty(t, sent[1].Out.ReplyTo, "only the first chunk quotes")
}

func TestHandleEventRejectsMalformedEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(), nil)
	ctx := t.Context()
	now := h.clk.Now()
	for name, ev := range map[string]channel.Event{
		"no chat id":    {Platform: "chantest", BotID: "bot", Kind: channel.KindMessage, Chat: channel.Chat{Kind: channel.Group}, MessageID: "1", Time: now},
		"no message id": {Platform: "chantest", BotID: "bot", Kind: channel.KindMessage, Chat: group1, Time: now},
		"no bot id":     {Platform: "chantest", Kind: channel.KindMessage, Chat: group1, MessageID: "1", Time: now},
		"bad chat kind": {Platform: "chantest", BotID: "bot", Kind: channel.KindMessage, Chat: channel.Chat{Kind: "channel", ID: "1"}, MessageID: "1", Time: now},
	} {
		err := h.p.HandleEvent(ctx, ev)
		require.ErrorIs(t, err, channel.ErrInvalidEvent, name)
	}
	require.EqualValues(t, 4, h.p.Stats().Rejected.Load())
	recs, err := h.db.Records(ctx, store.RecordQuery{})
	require.NoError(t, err)
	require.Empty(t, recs, "nothing half-formed was stored")
}

func TestRedeliveryIsANoOp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(agenttest.Reply("once")), nil)
	ev := h.say(dmAlice, alice, "hi")
	require.Equal(t, outcome.Replied, h.outcome(ev).Code)
	require.NoError(t, h.ch.Inject(t.Context(), ev))
	require.NoError(t, h.p.HandleEvent(t.Context(), ev))
	require.EqualValues(t, 2, h.p.Stats().Duplicates.Load())
	require.EqualValues(t, 1, h.p.Stats().Enqueued.Load())
	recs, err := h.db.Records(t.Context(), store.RecordQuery{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, 1, h.model.Calls())
	require.Len(t, h.ch.Sent(), 1)
}

func TestPrivateAdmission(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(agenttest.Reply("hello owner")), func(o *persona.Options) {
		o.PrivateAdmission = gate.AdmitOwnerOnly
		o.Owners = []string{"alice"}
	})
	denied := h.say(channel.Chat{Kind: channel.Private, ID: "bob"}, bob, "hi")
	o := h.outcome(denied)
	require.Equal(t, outcome.IgnoredPrivateAdmission, o.Code)
	require.Contains(t, o.Reason, "owner")
	require.Equal(t, outcome.Replied, h.outcome(h.say(dmAlice, alice, "hi")).Code)
	require.Equal(t, 1, h.model.Calls())
}

func TestSelfAndNoticeEventsNeverEnterTheQueue(t *testing.T) {
	t.Parallel()
	// A notice the bot does not act on (here: poke replies are off) is
	// recorded at once and never queued.
	h := newHarness(t, agenttest.New(), func(o *persona.Options) { o.Notices.NoPokeReply = true })
	ctx := t.Context()
	now := h.clk.Now()
	self := channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindSelf, Chat: group1, MessageID: "s1", Time: now,
		Sender: channel.Sender{ID: "bot"}, Segments: []channel.Segment{channel.Text("I said this")}}
	require.NoError(t, h.ch.Inject(ctx, self))
	poke := channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindNotice, Chat: group1, Time: now,
		Sender: bob, Notice: &channel.Notice{Type: channel.NoticePoke, Operator: "bob", UserID: "bot"}}
	require.NoError(t, h.ch.Inject(ctx, poke))
	require.Equal(t, outcome.NoticePoke, h.outcome(poke).Code)

	recs, err := h.db.Records(ctx, store.RecordQuery{})
	require.NoError(t, err)
	require.Len(t, recs, 1, "only the notice has a record")
	hist, err := h.db.Recent(ctx, channel.SessionKey("", "chantest", "bot", group1), 10)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	require.Zero(t, h.model.Calls())
}

func TestTransientFailuresRetryThenDrop(t *testing.T) {
	t.Parallel()
	calls := make(chan struct{}, 10)
	model := agenttest.New()
	model.Otherwise(agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) {
		calls <- struct{}{}
		return nil, &agent.Error{Kind: agent.KindServer, Status: 502, Message: "bad gateway"}
	}))
	h := newHarness(t, model, nil)
	ev := h.say(dmAlice, alice, "hi")
	for attempt, delay := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second} {
		<-calls
		require.Eventually(t, func() bool {
			r, err := h.p.Lookup(t.Context(), ev.Key())
			return err == nil && r.Status == inbound.StatusPending && r.Attempts == attempt+1
		}, 10*time.Second, 5*time.Millisecond)
		r, err := h.p.Lookup(t.Context(), ev.Key())
		require.NoError(t, err)
		require.Equal(t, h.clk.Now().Add(delay), r.AvailableAt, "attempt %d", attempt+1)
		require.Contains(t, r.LastError, "bad gateway")
		h.clk.Advance(delay)
		h.p.Wake()
	}
	<-calls
	o := h.outcome(ev)
	require.Equal(t, inbound.DroppedRetriesExhausted, o.Code)
	require.Contains(t, o.Reason, "5 attempts")
	require.Empty(t, h.ch.Sent())
}

func TestDefinitiveGenerationFailure(t *testing.T) {
	t.Parallel()
	bad := &agent.Error{Kind: agent.KindContentPolicy, Status: 400, Message: "refused"}
	model := agenttest.New()
	model.Otherwise(agenttest.Fail(bad))
	h := newHarness(t, model, func(o *persona.Options) { o.Router = nil })
	o := h.outcome(h.say(dmAlice, alice, "hi"))
	require.Equal(t, outcome.RepliedError, o.Code)
	require.Equal(t, persona.ErrorLine, h.ch.Sent()[0].Out.Text)
}

func TestDefinitiveSendRejection(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(agenttest.Reply("hello")), nil)
	h.ch.FailNext(1, &channel.RejectedError{Code: "403", Reason: "bot was blocked by the user"})
	o := h.outcome(h.say(dmAlice, alice, "hi"))
	require.Equal(t, outbound.DroppedSendRejected, o.Code)
	require.Contains(t, o.Reason, "blocked")
	require.Equal(t, 1, h.model.Calls(), "a definitive rejection is not retried")
}

func TestOfflineSendWaitsForReconnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(agenttest.Reply("back online")), nil)
	h.ch.FailNext(1, channel.ErrOffline)
	ev := h.say(dmAlice, alice, "hi")
	h.reconnectAfterSnooze(ev, "offline snoozes without charging an attempt")
	o := h.outcome(ev)
	require.Equal(t, outcome.Replied, o.Code)
	require.Len(t, h.ch.Sent(), 1)
	require.Equal(t, 1, h.model.Calls(), "the resumed turn sends its saved draft without regenerating")
}

// leaseQueue can make lease renewal fail and counts the bookkeeping calls
// made for leases.
type leaseQueue struct {
	inbound.Queue
	mu          sync.Mutex
	lose        bool
	bookkeeping int
}

func (q *leaseQueue) Extend(ctx context.Context, l *inbound.Lease, d time.Duration) error {
	q.mu.Lock()
	lose := q.lose
	q.mu.Unlock()
	if lose {
		return inbound.ErrLeaseLost
	}
	return q.Queue.Extend(ctx, l, d)
}

func (q *leaseQueue) count() {
	q.mu.Lock()
	q.bookkeeping++
	q.mu.Unlock()
}

func (q *leaseQueue) Complete(ctx context.Context, l inbound.Lease, o inbound.Outcome) error {
	q.count()
	return q.Queue.Complete(ctx, l, o)
}

func (q *leaseQueue) Retry(ctx context.Context, l inbound.Lease, at time.Time, cause error) error {
	q.count()
	return q.Queue.Retry(ctx, l, at, cause)
}

func (q *leaseQueue) Snooze(ctx context.Context, l inbound.Lease, at time.Time, reason string) error {
	q.count()
	return q.Queue.Snooze(ctx, l, at, reason)
}

func (q *leaseQueue) Release(ctx context.Context, l inbound.Lease) error {
	q.count()
	return q.Queue.Release(ctx, l)
}

func TestLostLeaseCancelsTheTurn(t *testing.T) {
	t.Parallel()
	started, returned := make(chan struct{}), make(chan struct{})
	var startOnce, returnOnce sync.Once
	model := agenttest.New()
	model.Otherwise(agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		startOnce.Do(func() { close(started) })
		<-ctx.Done()
		returnOnce.Do(func() { close(returned) })
		return nil, ctx.Err()
	}))
	lq := &leaseQueue{}
	t.Cleanup(func() { // runs after the pipeline has stopped
		lq.mu.Lock()
		defer lq.mu.Unlock()
		require.Zero(t, lq.bookkeeping, "a turn that lost its lease leaves the item alone")
	})
	h := newHarness(t, model, func(o *persona.Options) {
		lq.Queue = o.DB
		o.Queue = lq
	})
	ev := h.say(dmAlice, alice, "hi")
	<-started
	h.advanceUntil(time.Minute, func() bool { // renewals succeed
		r, err := h.p.Lookup(t.Context(), ev.Key())
		return err == nil && r.Status == inbound.StatusLeased && h.clk.Now().Sub(r.EnqueuedAt) > 5*time.Minute
	})
	select {
	case <-returned:
		t.Fatal("turn cancelled while its lease was renewed")
	default:
	}
	lq.mu.Lock()
	lq.lose = true
	lq.mu.Unlock()
	h.advanceUntil(time.Minute, func() bool {
		select {
		case <-returned:
			return true
		default:
			return false
		}
	})
	require.Empty(t, h.ch.Sent(), "a turn that lost its lease sends nothing")
}

// flakyQueue fails Enqueue a number of times, as a briefly unavailable
// database would.
type flakyQueue struct {
	inbound.Queue
	mu    sync.Mutex
	fails int
}

func (q *flakyQueue) Enqueue(ctx context.Context, it inbound.Item) (bool, error) {
	q.mu.Lock()
	if q.fails > 0 {
		q.fails--
		q.mu.Unlock()
		return false, errors.New("database is locked")
	}
	q.mu.Unlock()
	return q.Queue.Enqueue(ctx, it)
}

func TestEnqueueFailureGoesToTheJournal(t *testing.T) {
	t.Parallel()
	var fq *flakyQueue
	h := newHarness(t, agenttest.New(agenttest.Reply("got it")), func(o *persona.Options) {
		fq = &flakyQueue{Queue: o.DB, fails: 2}
		o.Queue = fq
		// Without history fetching, so that only the journal can bring the
		// message back (a backfill would find it too).
		o.Channels[0] = o.Channels[0].(*chantest.Channel).Bare()
	})
	ev := h.say(dmAlice, alice, "are you there?")
	require.EqualValues(t, 1, h.p.Stats().Journaled.Load(), "accepted through the journal")
	h.advanceUntil(2*time.Second, func() bool { return h.has(ev) })
	o := h.outcome(ev)
	require.Equal(t, outcome.Replied, o.Code)
	r, err := h.p.Lookup(t.Context(), ev.Key())
	require.NoError(t, err)
	require.Equal(t, channel.SourceJournal, r.Source)
}

func TestTwoPipelinesInOneProcess(t *testing.T) {
	t.Parallel()
	a := newHarness(t, agenttest.New(agenttest.Reply("from A")), nil)
	b := newHarness(t, agenttest.New(agenttest.Reply("from B")), nil)
	evA := a.say(dmAlice, alice, "hi A")
	evB := b.say(dmAlice, alice, "hi B")
	require.Equal(t, outcome.Replied, a.outcome(evA).Code)
	require.Equal(t, outcome.Replied, b.outcome(evB).Code)
	require.Equal(t, "from A", a.ch.Sent()[0].Out.Text)
	require.Equal(t, "from B", b.ch.Sent()[0].Out.Text)
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	_, err := persona.New(persona.Options{DataDir: t.TempDir()})
	require.ErrorIs(t, err, persona.ErrNoModel)
	_, err = persona.New(persona.Options{Model: agenttest.New()})
	require.ErrorContains(t, err, "DataDir")
	_, err = persona.New(persona.Options{Model: agenttest.New(), DataDir: t.TempDir(), PrivateAdmission: "friends"})
	require.ErrorContains(t, err, "PrivateAdmission")
	_, err = persona.New(persona.Options{Model: agenttest.New(), DataDir: t.TempDir(), Lease: time.Minute, RenewEvery: 2 * time.Minute})
	require.ErrorContains(t, err, "RenewEvery")
	_ = fmt.Sprint()
}

// TestClaimedAheadLeaseIsRenewed: a lease that waited in the claim-ahead
// buffer past its expiry (the only worker was stuck in a long turn) is
// renewed before its turn starts, and the message is answered once.
func TestClaimedAheadLeaseIsRenewed(t *testing.T) {
	t.Parallel()
	started, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	model := agenttest.New()
	model.Otherwise(agenttest.Func(func(ctx context.Context, req agent.Request) (*agent.Response, error) {
		if req.Purpose == agent.PurposeChat {
			first := false
			once.Do(func() { first = true })
			if first {
				close(started)
				select {
				case <-unblock:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		return &agent.Response{Text: "noted"}, nil
	}))
	h := newHarness(t, model, func(o *persona.Options) { o.Workers = 1 })
	u1 := channel.Sender{ID: "u1", Name: "One"}
	u2 := channel.Sender{ID: "u2", Name: "Two"}
	a := h.say(channel.Chat{Kind: channel.Private, ID: "u1"}, u1, "first")
	<-started
	b := h.say(channel.Chat{Kind: channel.Private, ID: "u2"}, u2, "second")
	require.Eventually(t, func() bool {
		r, err := h.db.Lookup(t.Context(), b.Key())
		return err == nil && r.Status == inbound.StatusLeased
	}, 10*time.Second, time.Millisecond, "b is claimed ahead")
	h.clk.Advance(inbound.DefaultLease + time.Minute) // b's lease expires in the buffer
	close(unblock)
	require.Equal(t, outcome.Replied, h.outcome(a).Code)
	require.Equal(t, outcome.Replied, h.outcome(b).Code)
	toU2 := 0
	for _, s := range h.ch.Sent() {
		if s.Out.Chat.ID == "u2" {
			toU2++
		}
	}
	require.Equal(t, 1, toU2, "one reply to b")
	r, err := h.db.Lookup(t.Context(), b.Key())
	require.NoError(t, err)
	require.Equal(t, 1, r.Attempts, "b ran once, on its renewed lease")
}
