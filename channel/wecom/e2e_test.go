package wecom_test

import (
	"bytes"
	"context"
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
	"github.com/personakit/persona/channel/wecom"
	"github.com/personakit/persona/channel/wecom/wecomtest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// threeChunks is the test model's reply: three chat messages.
const threeChunks = "one" + "[persona-msg]" + "two" + "[persona-msg]" + "three"

// outcomes collects the pipelines' outcome records.
type outcomes struct {
	mu   sync.Mutex
	list []inbound.Outcome
	ch   chan struct{}
}

func newOutcomes() *outcomes { return &outcomes{ch: make(chan struct{}, 64)} }

func (o *outcomes) add(_ string, x inbound.Outcome) {
	o.mu.Lock()
	o.list = append(o.list, x)
	o.mu.Unlock()
	o.ch <- struct{}{}
}

func (o *outcomes) wait(t *testing.T, n int) []inbound.Outcome {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		o.mu.Lock()
		if len(o.list) >= n {
			out := append([]inbound.Outcome(nil), o.list...)
			o.mu.Unlock()
			return out
		}
		o.mu.Unlock()
		select {
		case <-o.ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %d outcomes", n)
		}
	}
}

// pipeline is one running "process": a pipeline over ch in dir.
type pipeline struct {
	p    *persona.Pipeline
	stop func()
}

func startPipeline(t *testing.T, ch channel.Channel, dir string, model agent.Model, oc *outcomes) *pipeline {
	t.Helper()
	log, _ := newLogger()
	p, err := persona.New(persona.Options{
		Channels:     []channel.Channel{ch},
		DataDir:      dir,
		Persona:      "You are Mira.",
		Model:        model,
		NoPacing:     true,
		NoRouter:     true,
		RetryBase:    20 * time.Millisecond,
		RetryCap:     100 * time.Millisecond,
		OfflineRetry: 50 * time.Millisecond,
		ClaimPoll:    10 * time.Millisecond,
		Logger:       log,
		OnOutcome:    oc.add,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(waitTimeout):
				t.Error("pipeline did not stop")
			}
			require.NoError(t, p.Close())
		})
	}
	t.Cleanup(stop)
	return &pipeline{p: p, stop: stop}
}

func texts(sent []wecomtest.Sent) []string {
	out := make([]string, len(sent))
	for i, x := range sent {
		out[i] = x.Text
	}
	return out
}

// TestE2EAppLostAnswerMidReply: a real pipeline answers a user with three
// chunks; WeCom takes the second but the connection breaks before its
// answer. The pipeline tries the turn again: the first chunk is not sent
// again (the ledger), the second is sent again and dropped by WeCom's
// duplicate check, the third goes out — each shown exactly once.
func TestE2EAppLostAnswerMidReply(t *testing.T) {
	t.Parallel()
	e := newEnv(t, wecomtest.ModeApp, nil, nil)
	oc := newOutcomes()
	model := agenttest.New().Otherwise(agenttest.Reply(threeChunks))
	startPipeline(t, e.ch, t.TempDir(), model, oc)
	ctx := tctx(t)
	require.NoError(t, waitOnline(ctx, e))
	e.srv.FailAfter("message/send", 1, wecomtest.Failure{Drop: true})

	_, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "tell me three things"})
	require.NoError(t, err)
	got := oc.wait(t, 1)
	require.Equal(t, outcome.Replied, got[0].Code, got[0].Reason)
	sent, err := e.srv.WaitSent(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"one", "two", "three"}, texts(sent))
	require.Equal(t, 1, e.srv.Duplicates(), "the second chunk was sent twice and shown once")
	require.Len(t, got[0].OutboundIDs, 3)
}

// waitOnline waits until the adapter can send (app mode: a token).
func waitOnline(ctx context.Context, e *env) error {
	for e.srv.TokensIssued() == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// switchHook routes callbacks to the adapter of the "process" running now.
type switchHook struct {
	cur    atomic.Pointer[wecom.Channel]
	before func(w http.ResponseWriter, r *http.Request) bool // true: handled
}

func (h *switchHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.before != nil && h.before(w, r) {
		return
	}
	h.cur.Load().ServeHTTP(w, r)
}

// TestE2EAIBotRetriedCallbackAfterCrash: the process dies right after it
// queued a message and before WeCom got the answer; WeCom posts the
// callback again to the restarted process. The turn runs once, its
// stream carries each chunk once, and the message has one outcome.
func TestE2EAIBotRetriedCallbackAfterCrash(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	srv := wecomtest.New(wecomtest.Config{Mode: wecomtest.ModeAIBot, Clock: clk})
	t.Cleanup(srv.Close)
	dir, state := t.TempDir(), t.TempDir()
	newCh := func() *wecom.Channel {
		cfg := adapterConfig(srv)
		cfg.Clock, cfg.StateDir = clk, state
		ch, err := wecom.New(cfg)
		require.NoError(t, err)
		return ch
	}
	oc := newOutcomes()
	ch1 := newCh()
	hook := &switchHook{}
	hook.cur.Store(ch1)
	hs := httptest.NewServer(hook)
	t.Cleanup(hs.Close)
	srv.SetCallbackURL(hs.URL + "/wecom")

	// Process 1 queues the message, then dies before answering: its model
	// never answers (it waits for the end of its process).
	blocked := agenttest.New().Otherwise(agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	p1 := startPipeline(t, ch1, dir, blocked, oc)
	model2 := agenttest.New().Otherwise(agenttest.Reply(threeChunks))
	var crashed atomic.Bool
	hook.before = func(w http.ResponseWriter, r *http.Request) bool {
		if crashed.Load() {
			return false
		}
		rec := httptest.NewRecorder()
		ch1.ServeHTTP(rec, r)                                 // enqueued durably…
		if rec.Code != http.StatusOK || rec.Body.Len() == 0 { // not running yet, or not the message
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return true
		}
		crashed.Store(true)
		p1.stop() // …and the process dies before the answer leaves
		ch2 := newCh()
		hook.cur.Store(ch2)
		startPipeline(t, ch2, dir, model2, oc)
		waitRunning(ch2, srv) // WeCom's retry comes seconds later
		dropConn(w)
		return true
	}
	ctx := tctx(t)
	waitServing(t, srv)
	m, err := srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "are you there?"})
	require.NoError(t, err)
	var lost bool
	for _, d := range srv.Deliveries() {
		lost = lost || d.Status == 0
	}
	require.True(t, lost, "an answer was lost and WeCom posted the callback again")

	// The stream fills; it finishes once the idle time passed.
	waitStreamContent(t, srv, m.ID, "one\n\ntwo\n\nthree")
	clk.Advance(wecom.DefaultStreamIdle)
	v, err := srv.WaitStream(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, "one\n\ntwo\n\nthree", v.Content)
	got := oc.wait(t, 1)
	time.Sleep(50 * time.Millisecond) // a second outcome would show up here
	require.Len(t, oc.wait(t, 1), 1, "one outcome for the message")
	require.Equal(t, outcome.Replied, got[0].Code, got[0].Reason)
	require.Equal(t, 1, model2.Calls(), "the turn ran once to the end")
}

// TestE2EAIBotCrashMidReply: the process dies after the first chunk
// reached the stream, before the pipeline recorded it; the restarted
// process (same data and state directories) goes on with the reply. The
// stream shows each chunk once.
func TestE2EAIBotCrashMidReply(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	srv := wecomtest.New(wecomtest.Config{Mode: wecomtest.ModeAIBot, Clock: clk})
	t.Cleanup(srv.Close)
	dir, state := t.TempDir(), t.TempDir()
	newCh := func() *wecom.Channel {
		cfg := adapterConfig(srv)
		cfg.Clock, cfg.StateDir = clk, state
		ch, err := wecom.New(cfg)
		require.NoError(t, err)
		return ch
	}
	oc := newOutcomes()
	ch1 := newCh()
	hook := &switchHook{}
	hook.cur.Store(ch1)
	hs := httptest.NewServer(hook)
	t.Cleanup(hs.Close)
	srv.SetCallbackURL(hs.URL + "/wecom")

	reached := make(chan struct{})
	dying := &dyingChannel{Channel: ch1, after: "one", reached: reached}
	model := agenttest.New().Otherwise(agenttest.Reply(threeChunks))
	p1 := startPipeline(t, dying, dir, model, oc)
	ctx := tctx(t)
	waitServing(t, srv)
	m, err := srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "three things please"})
	require.NoError(t, err)
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the first chunk was never sent")
	}
	p1.stop()

	ch2 := newCh()
	hook.cur.Store(ch2)
	startPipeline(t, ch2, dir, model, oc)
	waitStreamContent(t, srv, m.ID, "one\n\ntwo\n\nthree")
	clk.Advance(wecom.DefaultStreamIdle)
	v, err := srv.WaitStream(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, "one\n\ntwo\n\nthree", v.Content)
	got := oc.wait(t, 1)
	require.True(t, got[0].Code.Replied(), "%s: %s", got[0].Code, got[0].Reason)
}

// dyingChannel sends through the adapter and then dies (blocks until its
// process ends) after the chunk with text after reached the platform.
type dyingChannel struct {
	*wecom.Channel
	after   string
	reached chan struct{}
	once    sync.Once
}

func (d *dyingChannel) Send(ctx context.Context, out channel.Outgoing) (channel.Receipt, error) {
	rc, err := d.Channel.Send(ctx, out)
	if err == nil && out.Text == d.after {
		d.once.Do(func() { close(d.reached) })
		<-ctx.Done() // killed before the receipt is recorded
		return channel.Receipt{}, ctx.Err()
	}
	return rc, err
}

// waitStreamContent waits until the (automatically polled) stream of
// msgID shows want.
func waitStreamContent(t *testing.T, srv *wecomtest.Server, msgID, want string) wecomtest.StreamView {
	t.Helper()
	var v wecomtest.StreamView
	require.Eventually(t, func() bool {
		var ok bool
		v, ok = srv.StreamOf(msgID)
		return ok && v.Content == want
	}, waitTimeout, 5*time.Millisecond, "stream content %q, last seen %q", want, v.Content)
	return v
}

// TestE2EWSConnectionDropMidReply: on the long connection the connection
// breaks while the second chunk is on its way (WeCom showed it, the
// acknowledgement is lost). The adapter redials, the pipeline tries
// again, and no chunk is shown twice.
func TestE2EWSConnectionDropMidReply(t *testing.T) {
	t.Parallel()
	e := newEnv(t, wecomtest.ModeAIBotWS, nil, nil)
	oc := newOutcomes()
	model := agenttest.New().Otherwise(agenttest.Reply(threeChunks))
	startPipeline(t, e.ch, t.TempDir(), model, oc)
	ctx := tctx(t)
	require.NoError(t, e.srv.WaitSubscribed(ctx))
	e.srv.FailNext("aibot_send_msg", wecomtest.Failure{Drop: true})

	m, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "go"})
	require.NoError(t, err)
	got := oc.wait(t, 1)
	require.True(t, got[0].Code.Replied(), "%s: %s", got[0].Code, got[0].Reason)
	sent, err := e.srv.WaitSent(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, []string{"one", "two", "three"}, texts(sent))
	require.Equal(t, "aibot_respond_msg", sent[0].Op)
	require.Equal(t, m.ID, sent[0].ReplyTo)
	require.GreaterOrEqual(t, e.srv.Dials(), 2, "the connection was redialed")
	time.Sleep(50 * time.Millisecond)
	require.Len(t, e.srv.Sent(), 3)
}

// dropConn closes the client's connection without an answer.
func dropConn(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// waitServing waits until the adapter behind srv's callback URL accepts
// callbacks (Run is active): an enter_chat event is answered 200.
func waitServing(t *testing.T, srv *wecomtest.Server) {
	t.Helper()
	ev := []byte(`{"msgid":"enter","aibotid":"` + srv.BotID() + `","chattype":"single","from":{"userid":"alice"},` +
		`"msgtype":"event","event":{"eventtype":"enter_chat"}}`)
	require.Eventually(t, func() bool {
		status, _, err := srv.PushRaw(t.Context(), ev)
		return err == nil && status == http.StatusOK
	}, waitTimeout, 2*time.Millisecond, "the adapter never served callbacks")
}

// waitRunning waits (bounded) until ch accepts callbacks: an enter_chat
// event sealed by srv is answered 200.
func waitRunning(ch *wecom.Channel, srv *wecomtest.Server) {
	ev := []byte(`{"msgid":"enter","aibotid":"` + srv.BotID() + `","chattype":"single","from":{"userid":"alice"},` +
		`"msgtype":"event","event":{"eventtype":"enter_chat"}}`)
	for range 5000 {
		q, body := srv.SealCallback(ev)
		req := httptest.NewRequest(http.MethodPost, "/wecom?"+q.Encode(), bytes.NewReader(body))
		rec := httptest.NewRecorder()
		ch.ServeHTTP(rec, req)
		if rec.Code == http.StatusOK {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
