package qqbot_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	persona "github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
	"github.com/personakit/persona/inbound"
)

// auditOK is an audit verdict that lets every reply through.
const auditOK = `{"closing":{"kind":"none","confidence":0},"group_stop":{"requested":false,"confidence":0.9},` +
	`"loop":{"hit":false,"confidence":0},"safety":{"score":1},"quality":{"ok":true,"problems":[],"send_confidence":0.99},` +
	`"refusal":{"is_refusal":false,"confidence":0}}`

// threeChunks answers every chat turn with three chunks naming the
// message it answers.
func threeChunks() *agenttest.Model {
	m := agenttest.New().KeepLast(16)
	m.Otherwise(agenttest.Func(func(_ context.Context, req agent.Request) (*agent.Response, error) {
		switch req.Purpose {
		case agent.PurposeChat:
		case agent.PurposeAudit:
			return &agent.Response{Text: auditOK}, nil
		case agent.PurposeClassify:
			return &agent.Response{Text: `{"label":"independent","confidence":0.99}`}, nil
		default:
			return &agent.Response{Text: "{}"}, nil
		}
		return &agent.Response{Text: "first part[persona-msg]second part[persona-msg]third part"}, nil
	}))
	return m
}

type outcomes struct {
	mu   sync.Mutex
	byID map[string]inbound.Outcome
}

func (o *outcomes) get(id string) (inbound.Outcome, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, v := range o.byID {
		if strings.HasSuffix(k, "/"+id) {
			return v, true
		}
	}
	return inbound.Outcome{}, false
}

// startPipeline runs a real persona pipeline over ch.
func startPipeline(t *testing.T, ch channel.Channel) *outcomes {
	t.Helper()
	out := &outcomes{byID: map[string]inbound.Outcome{}}
	p, err := persona.New(persona.Options{
		Channels:     []channel.Channel{ch},
		DataDir:      t.TempDir(),
		Persona:      "You are Mira.",
		Model:        threeChunks(),
		NoPacing:     true,
		NoRouter:     true,
		ClaimPoll:    10 * time.Millisecond,
		RetryBase:    20 * time.Millisecond,
		OfflineRetry: 20 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
		OnOutcome: func(id string, o inbound.Outcome) {
			out.mu.Lock()
			out.byID[id] = o
			out.mu.Unlock()
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, p.Close())
	})
	return out
}

// sentTexts counts the fake's deliveries by text.
func sentTexts(srv *qqbottest.Server) map[string]int {
	n := map[string]int{}
	for _, m := range srv.Sent() {
		n[m.Content]++
	}
	return n
}

func waitAllThree(t *testing.T, srv *qqbottest.Server) {
	t.Helper()
	require.NoError(t, srv.Wait(tctx(t), func() bool {
		n := sentTexts(srv)
		return n["first part"] > 0 && n["second part"] > 0 && n["third part"] > 0
	}), "sent: %+v", srv.Sent())
	time.Sleep(50 * time.Millisecond) // a duplicate, if any, would show now
	require.Equal(t, map[string]int{"first part": 1, "second part": 1, "third part": 1}, sentTexts(srv))
}

// The check, C2C: a real pipeline answers with three chunks; the
// second reaches the chat but its answer is lost as the gateway connection
// drops. The turn is retried after the reconnect; the chunk goes out again
// with the same msg_seq, the platform refuses the copy, and the adapter
// reports it delivered: every chunk reaches the chat exactly once, with
// msg_seq 1, 2, 3.
func TestEndToEndDropMidReplyC2C(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *qqbot.Config) { c.StateDir = t.TempDir(); c.Logger = log })
	// The first send goes through; the second is delivered with its answer
	// lost while the gateway connection drops.
	srv.FailSendAfter(1, qqbottest.Failure{Drop: true, Deliver: true, DropGateway: true})
	out := startPipeline(t, ch)
	require.NoError(t, srv.WaitConnected(tctx(t)))

	p, err := srv.Push(tctx(t), qqbottest.Incoming{Chat: aliceChat, From: alice, Text: "tell me three things"})
	require.NoError(t, err)
	waitAllThree(t, srv)
	for i, m := range srv.Sent() {
		require.Equal(t, p.ID, m.MsgID)
		require.Equal(t, i+1, m.MsgSeq)
	}
	require.GreaterOrEqual(t, len(srv.Resumes()), 1, "the connection dropped and was resumed")
	require.Contains(t, buf.String(), "qq_send_deduplicated", "the second chunk was sent again and refused as a duplicate")
	require.Eventually(t, func() bool {
		o, ok := out.get(p.ID)
		return ok && o.Code == "replied"
	}, waitTimeout, 5*time.Millisecond)
}

// Group: the connection drops between the first and second chunk (the
// second is refused with 304018, the bot is not connected); the turn waits
// for the reconnect and sends the rest, each chunk once.
func TestEndToEndDropBetweenChunksGroup(t *testing.T) {
	t.Parallel()
	srv := newFake(t, qqbottest.Config{})
	ch := newChannel(t, srv, nil)
	srv.FailSendAfter(1, qqbottest.Failure{Status: 400, Code: 304018, Message: "SESSION_NOT_EXIST", DropGateway: true})
	out := startPipeline(t, ch)
	require.NoError(t, srv.WaitConnected(tctx(t)))

	p, err := srv.Push(tctx(t), qqbottest.Incoming{Chat: group, From: alice, Text: "hey"})
	require.NoError(t, err)
	waitAllThree(t, srv)
	require.GreaterOrEqual(t, len(srv.Resumes()), 1)
	for _, m := range srv.Sent() {
		require.Equal(t, p.ID, m.MsgID)
	}
	require.Eventually(t, func() bool {
		o, ok := out.get(p.ID)
		return ok && o.Code == "replied"
	}, waitTimeout, 5*time.Millisecond, fmt.Sprint(out.get(p.ID)))
}
