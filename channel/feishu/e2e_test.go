package feishu_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// These tests run a real persona.Pipeline (SQLite store, ledger, sender)
// on the adapter against the fake platform, with the scripted model and
// one fake clock for the platform, the adapter and the pipeline.

// handlerSwap is the callback server's handler, replaced when a new bot
// process starts.
type handlerSwap struct{ h atomic.Pointer[http.Handler] }

func (s *handlerSwap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := s.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	http.Error(w, "no bot process", http.StatusBadGateway)
}

// botProc is one bot process: an adapter and a pipeline over a data
// directory.
type botProc struct {
	ch   *feishu.Channel
	p    *persona.Pipeline
	stop func()

	mu       sync.Mutex
	outcomes map[string]inbound.Outcome
}

// startBot starts a bot process; in webhook mode it takes over swap.
func startBot(t *testing.T, srv *feishutest.Server, clk *clock.Fake, dir string, model agent.Model, mode feishu.Mode, swap *handlerSwap) *botProc {
	t.Helper()
	ch, err := feishu.New(feishu.Config{AppID: srv.AppID(), AppSecret: srv.AppSecret(), BaseURL: srv.URL(), Mode: mode,
		VerificationToken: srv.VerificationToken(), EncryptKey: srv.EncryptKey(), Clock: clk})
	require.NoError(t, err)
	b := &botProc{ch: ch, outcomes: map[string]inbound.Outcome{}}
	p, err := persona.New(persona.Options{
		Channels: []channel.Channel{ch},
		DataDir:  dir,
		Persona:  "You are Mira.",
		Model:    model,
		Clock:    clk,
		NoPacing: true,
		NoRouter: true,
		// The scripted model answers generation only: no pre-send audit.
		AuditDisabled: func(string) bool { return true },
		Logger:        testLogger(t),
		OnOutcome: func(id string, o inbound.Outcome) {
			b.mu.Lock()
			b.outcomes[id] = o
			b.mu.Unlock()
		},
	})
	require.NoError(t, err)
	b.p = p
	if swap != nil {
		var h http.Handler = ch
		swap.h.Store(&h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	b.stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
			require.NoError(t, p.Close())
		})
	}
	t.Cleanup(b.stop)
	return b
}

func (b *botProc) outcome(key string) (inbound.Outcome, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.outcomes[key]
	return o, ok
}

// advanceUntil moves the clock in steps, waking the pipeline, until cond
// holds.
func advanceUntil(t *testing.T, clk *clock.Fake, p *persona.Pipeline, step time.Duration, cond func() bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		if cond() {
			return true
		}
		clk.Advance(step)
		p.Wake()
		return cond()
	}, 30*time.Second, 2*time.Millisecond)
}

// waitActive waits until the bot answers callbacks: an event of a type
// the adapter does not handle is acknowledged only while Run is active.
func waitActive(t *testing.T, srv *feishutest.Server) {
	t.Helper()
	other := []byte(`{"schema":"2.0","header":{"event_id":"probe","event_type":"im.chat.updated_v1","token":"` +
		srv.VerificationToken() + `","app_id":"` + srv.AppID() + `"},"event":{}}`)
	require.Eventually(t, func() bool { return srv.PushRaw(t.Context(), other) == nil }, waitTimeout, 5*time.Millisecond)
}

// chatCalls counts the model's generation requests.
func chatCalls(m *agenttest.Model) int {
	n := 0
	for _, r := range m.Requests() {
		if r.Purpose == agent.PurposeChat {
			n++
		}
	}
	return n
}

func texts(sent []feishutest.SentMessage) []string {
	out := []string{}
	for _, m := range sent {
		out = append(out, m.Text)
	}
	return out
}

func keyOf(srv *feishutest.Server, chat channel.Chat, id string) string {
	ev := channel.Event{Platform: feishu.Platform, BotID: srv.BotID(), Chat: chat, MessageID: id}
	return ev.Key()
}

// TestConnectionDropMidReply: the long connection drops (and the platform
// goes down) right after the first of three chunks reached the chat; the
// second fails, the turn waits for the reconnect, and the rest of the
// saved draft goes out: every chunk exactly once, the model called once.
func TestConnectionDropMidReply(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newFake(t, feishutest.Config{Clock: clk})
	model := agenttest.New().OnPurpose(agent.PurposeChat, agenttest.Reply("part one[persona-msg]part two[persona-msg]part three"))
	b := startBot(t, srv, clk, t.TempDir(), model, feishu.ModeWebSocket, nil)
	ctx := tctx(t)
	require.NoError(t, srv.WaitConnected(ctx, 1))

	var once sync.Once
	srv.OnSent(func(feishutest.SentMessage) {
		once.Do(func() { _ = srv.SetOffline(ctx, true) })
	})
	p, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "tell me three things", MentionBot: true})
	if err != nil {
		// The reply can be quicker than the event's answer, which the
		// drop then cuts off: Feishu delivers the event again, and the
		// pipeline's idempotent enqueue drops the copy.
		require.ErrorIs(t, err, feishutest.ErrNotAcknowledged)
	}
	key := keyOf(srv, channel.Chat{Kind: channel.Group, ID: group}, p.MessageID)

	_, err = srv.WaitSent(ctx, 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := b.p.Lookup(ctx, key)
		return err == nil && r.Status == inbound.StatusPending
	}, waitTimeout, time.Millisecond, "the turn is back in the queue")
	require.Len(t, srv.Sent(), 1)
	require.NoError(t, srv.SetOffline(ctx, false))
	advanceUntil(t, clk, b.p, time.Second, func() bool { _, ok := b.outcome(key); return ok && srv.Pending() == 0 })

	o, _ := b.outcome(key)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	sent := srv.Sent()
	require.Equal(t, []string{"part one", "part two", "part three"}, texts(sent))
	require.Equal(t, p.MessageID, sent[0].ParentID, "the first chunk quotes the trigger")
	require.Empty(t, sent[1].ParentID)
	require.Empty(t, sent[2].ParentID)
	require.Equal(t, 1, chatCalls(model), "the resumed turn sends its saved draft")
	_, accepted := srv.Connections()
	require.GreaterOrEqual(t, accepted, 2, "the adapter reconnected")
}

// TestLostAnswerIsDeduplicatedByUUID: the platform stores the second chunk
// but its answer is lost; the retried turn sends the chunk again with the
// same uuid and the platform keeps one message.
func TestLostAnswerIsDeduplicatedByUUID(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newFake(t, feishutest.Config{Clock: clk})
	swap := &handlerSwap{}
	hook := httptest.NewServer(swap)
	t.Cleanup(hook.Close)
	srv.SetCallback(hook.URL)
	model := agenttest.New().OnPurpose(agent.PurposeChat, agenttest.Reply("first[persona-msg]second[persona-msg]third"))
	b := startBot(t, srv, clk, t.TempDir(), model, feishu.ModeWebhook, swap)
	ctx := tctx(t)

	var once sync.Once
	srv.OnSent(func(feishutest.SentMessage) {
		once.Do(func() { srv.FailNextSend(feishutest.Failure{Drop: true, StoreFirst: true}) })
	})
	waitActive(t, srv)
	p, err := srv.Push(ctx, feishutest.Incoming{From: alice, Text: "hi"})
	require.NoError(t, err)
	key := keyOf(srv, channel.Chat{Kind: channel.Private, ID: alice.OpenID}, p.MessageID)
	advanceUntil(t, clk, b.p, time.Second, func() bool { _, ok := b.outcome(key); return ok })

	o, _ := b.outcome(key)
	require.Equal(t, outcome.Replied, o.Code, o.Reason)
	sent := srv.Sent()
	require.Equal(t, []string{"first", "second", "third"}, texts(sent))
	var uuids []string
	for _, c := range callsOf(srv, "send", "reply") {
		uuids = append(uuids, sendBody(t, c)["uuid"].(string))
	}
	require.Len(t, uuids, 4, "the second chunk was sent twice")
	require.Equal(t, uuids[1], uuids[2], "with the same uuid")
	require.Equal(t, sent[1].UUID, uuids[1])
	require.Equal(t, 1, chatCalls(model))
}

// TestRetriedCallbackAfterCrash: the process dies while the turn is being
// generated; Feishu retries the callback (its first answer was lost) to
// the restarted process. The event is queued once, answered once.
func TestRetriedCallbackAfterCrash(t *testing.T) {
	t.Parallel()
	clk := newClock()
	srv := newFake(t, feishutest.Config{Clock: clk, EncryptKey: "crash key", RetryDelays: feishutest.DefaultRetryDelays})
	swap := &handlerSwap{}
	hook := httptest.NewServer(swap)
	t.Cleanup(hook.Close)
	srv.SetCallback(hook.URL)
	dir := t.TempDir()
	generating := make(chan struct{})
	var calls atomic.Int32
	model := agenttest.New()
	model.Otherwise(agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		if calls.Add(1) == 1 {
			close(generating)
			<-ctx.Done() // the process dies mid-generation
			return nil, ctx.Err()
		}
		return &agent.Response{Text: "hello again[persona-msg]still here", FinishReason: "stop"}, nil
	}))
	b1 := startBot(t, srv, clk, dir, model, feishu.ModeWebhook, swap)
	ctx := tctx(t)
	waitActive(t, srv)

	srv.LoseNextAck()
	pushed := make(chan feishutest.Pushed, 1)
	go func() {
		p, _ := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "are you there", MentionBot: true})
		pushed <- p
	}()
	select {
	case <-generating:
	case <-ctx.Done():
		t.Fatal("the turn never started")
	}
	b1.stop() // the crash: the turn goes back to the queue

	b2 := startBot(t, srv, clk, dir, model, feishu.ModeWebhook, swap)
	chat := channel.Chat{Kind: channel.Group, ID: group}
	// Feishu retries the callback 15 s later; the restarted process
	// answers the queued turn meanwhile.
	p := <-pushed
	advanceUntil(t, clk, b2.p, time.Second, func() bool {
		_, ok := b2.outcome(keyOf(srv, chat, p.MessageID))
		return ok && srv.Pending() == 0
	})
	for range 30 { // more time passes: nothing else happens
		clk.Advance(time.Second)
		b2.p.Wake()
	}
	require.Equal(t, []string{"hello again", "still here"}, texts(srv.Sent()))
	require.Equal(t, int32(2), calls.Load(), "generated once more after the crash, not again for the retried callback")
	var d []feishutest.Delivery
	for _, x := range srv.Deliveries() {
		if x.EventID == p.EventID {
			d = append(d, x)
		}
	}
	require.Len(t, d, 2)
	require.True(t, d[0].Lost)
	require.True(t, d[1].Acked())
	require.Equal(t, d[0].EventID, d[1].EventID)
	r, err := b2.p.Lookup(ctx, keyOf(srv, chat, p.MessageID))
	require.NoError(t, err)
	require.Equal(t, inbound.StatusDone, r.Status)
}

// TestCrashBetweenChunksReconciles: the process dies while the second
// chunk's send is under way. The restarted process settles the chunk
// through the message history: found there (the platform stored it) it
// is not sent again; absent, it is sent once.
func TestCrashBetweenChunksReconciles(t *testing.T) {
	t.Parallel()
	for name, stored := range map[string]bool{"Stored": true, "NotStored": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			srv := newFake(t, feishutest.Config{Clock: clk})
			dir := t.TempDir()
			model := agenttest.New().OnPurpose(agent.PurposeChat, agenttest.Reply("alpha[persona-msg]beta[persona-msg]gamma"))
			b1 := startBot(t, srv, clk, dir, model, feishu.ModeWebSocket, nil)
			ctx := tctx(t)
			require.NoError(t, srv.WaitConnected(ctx, 1))
			var stalled <-chan struct{}
			var once sync.Once
			ready := make(chan struct{})
			srv.OnSent(func(feishutest.SentMessage) {
				once.Do(func() {
					stalled = srv.StallNextSend(stored)
					close(ready)
				})
			})
			p, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "three words", MentionBot: true})
			require.NoError(t, err)
			<-ready
			<-stalled
			b1.stop() // the crash, with the second chunk's fate unknown

			b2 := startBot(t, srv, clk, dir, model, feishu.ModeWebSocket, nil)
			key := keyOf(srv, channel.Chat{Kind: channel.Group, ID: group}, p.MessageID)
			advanceUntil(t, clk, b2.p, time.Second, func() bool { _, ok := b2.outcome(key); return ok })
			require.Equal(t, []string{"alpha", "beta", "gamma"}, texts(srv.Sent()))
			require.Equal(t, 1, chatCalls(model))
			require.GreaterOrEqual(t, srv.CallCount("list"), 1, "the history was read to settle the chunk")
		})
	}
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
