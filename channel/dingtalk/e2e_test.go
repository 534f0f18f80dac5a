package dingtalk_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
)

// pipelineRig is a real persona.Pipeline behind the adapter and the fake,
// all on one fake clock.
type pipelineRig struct {
	clk *clock.Fake
	srv *dingtalktest.Server
	ch  *dingtalk.Channel
	p   *persona.Pipeline

	mu       sync.Mutex
	outcomes map[string]inbound.Outcome
}

func newPipelineRig(t *testing.T, model *agenttest.Model, onDelivered func(*pipelineRig, dingtalktest.SentMessage)) *pipelineRig {
	t.Helper()
	pr := &pipelineRig{clk: clock.NewFake(t0), outcomes: map[string]inbound.Outcome{}}
	pr.srv = newFake(t, dingtalktest.Config{Clock: pr.clk, OnDelivered: func(m dingtalktest.SentMessage) {
		if onDelivered != nil {
			onDelivered(pr, m)
		}
	}})
	log, buf := newLogger()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("adapter log:\n%s", buf)
		}
	})
	pr.ch = newChannel(t, pr.srv, func(c *dingtalk.Config) {
		c.Logger = log
		c.Clock = pr.clk
		c.RetryMin, c.RetryMax = time.Second, time.Minute
		c.KeepAlive = 24 * time.Hour // no pings racing the clock steps
	})
	p, err := persona.New(persona.Options{
		Channels: []channel.Channel{pr.ch},
		DataDir:  t.TempDir(),
		Persona:  "You are Mira, a regular in this chat.",
		Model:    model,
		Clock:    pr.clk,
		NoPacing: true,
		NoRouter: true,
		Logger:   slog.New(slog.DiscardHandler),
		OnOutcome: func(id string, o inbound.Outcome) {
			pr.mu.Lock()
			pr.outcomes[id] = o
			pr.mu.Unlock()
		},
	})
	require.NoError(t, err)
	pr.p = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, p.Close())
	})
	require.NoError(t, pr.srv.WaitAccepted(tctx(t), 1))
	return pr
}

// advanceUntil moves the clock in one-second steps, waking the pipeline,
// until cond holds.
func (pr *pipelineRig) advanceUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		if cond() {
			return true
		}
		pr.clk.Advance(time.Second)
		pr.p.Wake()
		return cond()
	}, 30*time.Second, 2*time.Millisecond, what)
}

func texts(ms []dingtalktest.SentMessage) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Text)
	}
	return out
}

// TestPipelineReply: a private message to the robot goes through the
// whole pipeline and is answered, chunk by chunk, through the session
// webhook; the message's record is replied.
func TestPipelineReply(t *testing.T) {
	t.Parallel()
	pr := newPipelineRig(t, agenttest.New(agenttest.Reply("你好 Alice！[persona-msg]有什么事？")), nil)
	ctx := tctx(t)
	p, err := pr.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "你好"})
	require.NoError(t, err)
	pr.advanceUntil(t, "the reply", func() bool { return len(pr.srv.Sent()) >= 2 })
	sent := pr.srv.Sent()
	require.Equal(t, []string{"你好 Alice！", "有什么事？"}, texts(sent))
	for _, m := range sent {
		require.Equal(t, dingtalktest.ViaWebhook, m.Via)
		require.Equal(t, alice.StaffID, m.Peer)
	}
	a, err := pr.srv.WaitAck(ctx, p.FrameID)
	require.NoError(t, err)
	require.Equal(t, 200, a.Code)
	key := "dingtalk/" + pr.srv.BotID() + "/private:" + alice.StaffID + "/" + p.MsgID
	pr.advanceUntil(t, "the outcome", func() bool {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		_, ok := pr.outcomes[key]
		return ok
	})
	rec, err := pr.p.Lookup(ctx, key)
	require.NoError(t, err)
	require.Equal(t, inbound.StatusDone, rec.Status)
}

// TestPipelineDropMidReply: DingTalk goes away (stream cut, every call
// failing) right after the first chunk of a three-chunk reply was
// delivered. The adapter reports offline and fails the next chunk; once
// DingTalk is back and the stream reconnected, the pipeline resumes the
// reply from its delivery ledger: every chunk reaches the chat exactly
// once, in order.
func TestPipelineDropMidReply(t *testing.T) {
	t.Parallel()
	var once sync.Once
	pr := newPipelineRig(t, agenttest.New(agenttest.Reply("one[persona-msg]two[persona-msg]three")),
		func(pr *pipelineRig, m dingtalktest.SentMessage) {
			if m.Text == "one" {
				once.Do(func() { _ = pr.srv.SetOffline(context.Background(), true) })
			}
		})
	ctx := tctx(t)
	_, err := pr.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "tell me three things"})
	require.NoError(t, err)
	pr.advanceUntil(t, "the first chunk", func() bool { return len(pr.srv.Sent()) >= 1 })

	// While DingTalk is down the reply stalls at one chunk.
	for range 5 {
		pr.clk.Advance(time.Second)
		pr.p.Wake()
		time.Sleep(5 * time.Millisecond) // let a wrongly resumed send show up; not a timing assertion
	}
	require.Equal(t, []string{"one"}, texts(pr.srv.Sent()))

	require.NoError(t, pr.srv.SetOffline(ctx, false))
	pr.advanceUntil(t, "the rest of the reply", func() bool { return len(pr.srv.Sent()) >= 3 })
	for range 10 { // more time changes nothing
		pr.clk.Advance(5 * time.Second)
		pr.p.Wake()
	}
	require.Equal(t, []string{"one", "two", "three"}, texts(pr.srv.Sent()), "every chunk exactly once")
	require.NoError(t, pr.srv.WaitAccepted(ctx, 2), "the stream was reconnected")
}

// TestPipelineStreamDropMidReply: only the stream drops after the first
// chunk (the HTTP APIs stay up), so the next chunk either fails fast
// (ErrOffline) or still goes out; in both cases no chunk is sent twice.
func TestPipelineStreamDropMidReply(t *testing.T) {
	t.Parallel()
	var once sync.Once
	pr := newPipelineRig(t, agenttest.New(agenttest.Reply("alpha[persona-msg]beta[persona-msg]gamma")),
		func(pr *pipelineRig, m dingtalktest.SentMessage) {
			if m.Text == "alpha" {
				once.Do(pr.srv.Drop)
			}
		})
	ctx := tctx(t)
	_, err := pr.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "go"})
	require.NoError(t, err)
	pr.advanceUntil(t, "the whole reply", func() bool { return len(pr.srv.Sent()) >= 3 })
	for range 10 {
		pr.clk.Advance(5 * time.Second)
		pr.p.Wake()
	}
	require.Equal(t, []string{"alpha", "beta", "gamma"}, texts(pr.srv.Sent()))
}
