package persona_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/route"
	"github.com/personakit/persona/store"
)

// The default stages wired together: policy gates, the model-rated router
// with its cooldown, and the audit's group-stop window.

func routerRating(directed string, score float64) string {
	return fmt.Sprintf(`{"candidates":[{"message_id":"c1","relevance":{"directed":%q,"reason":"asked the bot"},"chat_in":{"score":%v,"reason":"fits the topic"}}]}`, directed, score)
}

// audit is an audit model answer; groupStop says whether it sees a stop
// request.
func audit(groupStop bool) string {
	return fmt.Sprintf(`{"closing":{"kind":"none","confidence":0},`+
		`"group_stop":{"requested":%v,"confidence":0.97},"loop":{"hit":false,"confidence":0},`+
		`"safety":{"score":1},"quality":{"ok":true,"problems":[],"send_confidence":0.98},`+
		`"refusal":{"is_refusal":false,"confidence":0}}`, groupStop)
}

func TestPolicyGatesStopBeforeAnyModelCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(agenttest.Reply("hi")), func(o *persona.Options) {
		o.Policy = gate.Policy{BlockedUsers: []string{"bob"}}
	})
	o := h.outcome(h.say(channel.Chat{Kind: channel.Private, ID: "bob"}, bob, "hello?"))
	require.Equal(t, gate.IgnoredBlockedUser, o.Code)
	require.Contains(t, o.Reason, "gate")
	require.Zero(t, h.model.Calls())
}

func TestProactiveReplyThroughTheRouter(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeRouter,
		agenttest.Reply(routerRating("yes", 0.2)), // a question to the bot
		agenttest.Reply(routerRating("no", 0.1)))  // plain chatter
	model.OnPurpose(agent.PurposeAudit, agenttest.Reply(audit(false)))
	model.Otherwise(agenttest.Reply("the answer is 42"))
	h := newHarness(t, model, func(o *persona.Options) { o.NoRouter = false })

	q := h.say(group1, alice, "does anyone know the answer?")
	o := h.outcome(q)
	require.Equal(t, outcome.RepliedProactive, o.Code)
	require.Contains(t, o.Reason, "asked the bot", "the router's decisive reason is the record's reason")
	require.Equal(t, "the answer is 42", h.ch.Sent()[0].Out.Text)
	var purposes []string
	for _, tk := range o.Tokens {
		purposes = append(purposes, tk.Purpose)
	}
	require.Contains(t, purposes, agent.PurposeRouter)
	require.Contains(t, purposes, agent.PurposeChat)

	chatter := h.say(group1, bob, "lunch was good")
	require.Equal(t, route.IgnoredChatScore, h.outcome(chatter).Code)
	require.Len(t, h.ch.Sent(), 1)
}

func TestAuditGroupStopOpensTheStopWindow(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeAudit, agenttest.Reply(audit(true)), agenttest.Reply(audit(false)))
	model.OnPurpose(agent.PurposeRouter, agenttest.Reply(routerRating("yes", 0.9)))
	model.Otherwise(agenttest.Reply("ok, I'll be quiet"))
	h := newHarness(t, model, func(o *persona.Options) { o.NoRouter = false })

	stop := h.say(group1, alice, "please stop talking here", chantest.MentionBot())
	require.Equal(t, outcome.Replied, h.outcome(stop).Code, "the reply to a stop request is still sent")
	h.clk.Advance(time.Minute)
	later := h.say(group1, bob, "anyone up for a game?")
	o := h.outcome(later)
	require.Equal(t, gate.IgnoredStopRequested, o.Code, "unprompted replies stop for 10 minutes")
	h.clk.Advance(10 * time.Minute)
	again := h.say(group1, bob, "anyone up for a game now?")
	require.Equal(t, outcome.RepliedProactive, h.outcome(again).Code)
}

func TestKickedMarksTheGroupUnavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(agenttest.Reply("hello")), nil)
	h.ch.FailNext(1, fmt.Errorf("send: %w", channel.ErrKicked))
	first := h.say(group1, alice, "hi bot", chantest.MentionBot())
	require.Equal(t, "dropped_send_rejected", string(h.outcome(first).Code))
	calls := h.model.Calls()
	next := h.say(group1, alice, "are you still there?", chantest.MentionBot())
	o := h.outcome(next)
	require.Equal(t, gate.IgnoredUnavailableGroup, o.Code, "the gate stops the next message without a model call")
	require.Equal(t, calls, h.model.Calls())
}

// heldQuotaFlags holds every write of the model-call counters until
// release is closed, and notes when such a write has been stored.
type heldQuotaFlags struct {
	*store.DB
	entered chan struct{} // closed when the first counter write arrives
	release chan struct{}
	once    sync.Once
	stored  atomic.Bool
}

func (f *heldQuotaFlags) hold(fs ...gate.Flag) bool {
	for _, fl := range fs {
		if fl.Name == "model_calls" {
			f.once.Do(func() { close(f.entered) })
			<-f.release
			return true
		}
	}
	return false
}

func (f *heldQuotaFlags) SetFlag(ctx context.Context, fl gate.Flag) error {
	held := f.hold(fl)
	err := f.DB.SetFlag(ctx, fl)
	f.stored.Store(f.stored.Load() || (held && err == nil))
	return err
}

func (f *heldQuotaFlags) SetFlags(ctx context.Context, fs []gate.Flag) error {
	held := f.hold(fs...)
	err := f.DB.SetFlags(ctx, fs)
	f.stored.Store(f.stored.Load() || (held && err == nil))
	return err
}

// TestModelCallCountStoredBeforeTheOutcome: the count of a turn's model
// call is written while the turn generates and delivers, but the turn's
// outcome is recorded only once the count is stored.
func TestModelCallCountStoredBeforeTheOutcome(t *testing.T) {
	t.Parallel()
	var flags *heldQuotaFlags
	countedAtOutcome := make(chan bool, 1)
	h := newHarness(t, agenttest.New(agenttest.Reply("hello Alice")), func(o *persona.Options) {
		flags = &heldQuotaFlags{DB: o.DB.(*store.DB), entered: make(chan struct{}), release: make(chan struct{})}
		o.Flags = flags
		o.Policy.Quota = gate.Quotas{User: 1000} // model calls are counted only under a quota
		record := o.OnOutcome
		o.OnOutcome = func(id string, out inbound.Outcome) {
			select {
			case countedAtOutcome <- flags.stored.Load():
			default:
			}
			record(id, out)
		}
	})
	var released sync.Once
	release := func() { released.Do(func() { close(flags.release) }) }
	t.Cleanup(release) // before the harness stops the pipeline, if a check failed
	ev := h.say(dmAlice, alice, "hi")
	<-flags.entered
	require.Eventually(t, func() bool { return len(h.ch.Sent()) == 1 }, 20*time.Second, time.Millisecond,
		"the reply goes out while the count is still being written")
	require.Never(t, func() bool { return h.has(ev) }, 100*time.Millisecond, 5*time.Millisecond,
		"no outcome while the count is held")
	release()
	require.Equal(t, outcome.Replied, h.outcome(ev).Code)
	require.True(t, <-countedAtOutcome, "the count was stored before the outcome was recorded")
}

// TestAttemptDurableBeforeModelCall: when a model is first called for a
// turn, its claim is in the row. A direct message's claim is stored when it
// is claimed; an unprompted one's is held in memory by the store (it often
// ends in the gates, see store.DB.Claim) and stored once the gates pass,
// before the router's call.
func TestAttemptDurableBeforeModelCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		purpose string
		chat    channel.Chat
		opts    []chantest.SayOption
		want    outcome.Code
	}{
		{"direct", agent.PurposeChat, dmAlice, nil, outcome.Replied},
		{"unprompted", agent.PurposeRouter, group1, nil, route.IgnoredChatScore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var path atomic.Pointer[string]
			type row struct {
				status   string
				attempts int
				err      error
			}
			seen := make(chan row, 1)
			model := agenttest.New()
			model.Otherwise(agenttest.Func(func(ctx context.Context, req agent.Request) (*agent.Response, error) {
				if req.Purpose == tc.purpose {
					var r row
					raw, err := sql.Open("sqlite3", *path.Load())
					if err == nil {
						r.err = raw.QueryRowContext(ctx, `SELECT status, attempts FROM inbound_items`).Scan(&r.status, &r.attempts)
						_ = raw.Close()
					} else {
						r.err = err
					}
					select {
					case seen <- r:
					default:
					}
				}
				if req.Purpose == agent.PurposeRouter {
					return &agent.Response{Text: routerRating("no", 0.1)}, nil
				}
				return &agent.Response{Text: "hi there"}, nil
			}))
			h := newHarness(t, model, func(o *persona.Options) { o.NoRouter = false })
			p := h.db.Path()
			path.Store(&p)
			ev := h.say(tc.chat, alice, "hello", tc.opts...)
			require.Equal(t, tc.want, h.outcome(ev).Code)
			r := <-seen
			require.NoError(t, r.err)
			require.Equal(t, "leased", r.status, "the claim is in the row when the model is called")
			require.Equal(t, 1, r.attempts)
		})
	}
}

// sendObserver is the harness's channel with a look at the store at the
// moment of every send.
type sendObserver struct {
	*chantest.Channel
	onSend func()
}

func (c *sendObserver) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	c.onSend()
	return c.Channel.Send(ctx, out)
}

// TestHeldClaimStoredBeforeResumedSend: an unprompted message's claim is
// held in memory by the store; a turn that resumes sending a saved draft
// (no model call this time) stores it before the send too.
func TestHeldClaimStoredBeforeResumedSend(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeRouter, agenttest.Reply(routerRating("yes", 0.9)))
	model.OnPurpose(agent.PurposeAudit, agenttest.Reply(audit(false)))
	model.Otherwise(agenttest.Reply("the answer is 42"))
	type row struct {
		status   string
		attempts int
		err      error
	}
	var (
		path atomic.Pointer[string]
		mu   sync.Mutex
		rows []row
	)
	h := newHarness(t, model, func(o *persona.Options) {
		o.NoRouter = false
		o.Channels = []channel.Channel{&sendObserver{Channel: o.Channels[0].(*chantest.Channel), onSend: func() {
			var r row
			raw, err := sql.Open("sqlite3", *path.Load())
			if err == nil {
				r.err = raw.QueryRow(`SELECT status, attempts FROM inbound_items`).Scan(&r.status, &r.attempts)
				_ = raw.Close()
			} else {
				r.err = err
			}
			mu.Lock()
			rows = append(rows, r)
			mu.Unlock()
		}}}
	})
	p := h.db.Path()
	path.Store(&p)
	h.ch.FailNext(1, channel.ErrOffline)
	ev := h.say(group1, alice, "does anyone know the answer?")
	h.reconnectAfterSnooze(ev, "offline snoozes the turn, its draft saved")
	require.Equal(t, outcome.RepliedProactive, h.outcome(ev).Code)
	chats := 0
	for _, r := range model.Requests() {
		if r.Purpose == agent.PurposeChat {
			chats++
		}
	}
	require.Equal(t, 1, chats, "one generation; the second send resumes the draft")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, rows, 2)
	for _, r := range rows {
		require.NoError(t, r.err)
		require.Equal(t, "leased", r.status, "the claim is in the row when a chunk is sent")
		require.Equal(t, 1, r.attempts)
	}
}

// The review's private closing check dates the bot's last message by the
// transcript, replies to newer messages included: a message delivered late
// (older than the bot's last reply) is still judged for a goodbye.
func TestPrivateClosingCheckSeesRepliesToNewerMessages(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeAudit,
		agenttest.Reply(`{"closing":{"kind":"stop","confidence":0.96},"safety":{"score":1},"refusal":{"is_refusal":false,"confidence":0}}`))
	model.Otherwise(agenttest.Reply("ok"))
	h := newHarness(t, model, nil)

	first := h.say(dmAlice, alice, "hi")
	require.Equal(t, outcome.Replied, h.outcome(first).Code)
	audits := func() int {
		n := 0
		for _, r := range model.Requests() {
			if r.Purpose == agent.PurposeAudit {
				n++
			}
		}
		return n
	}
	require.Zero(t, audits(), "no earlier bot message: nothing to judge")

	h.clk.Advance(time.Minute)
	late := h.say(dmAlice, alice, "ok bye, stop now", chantest.WithTime(first.Time.Add(-time.Second)))
	o := h.outcome(late)
	require.Equal(t, 1, audits(), "the bot's reply to the newer message opens the closing window")
	require.Equal(t, outbound.CodeStopRequested(), o.Code)
}
