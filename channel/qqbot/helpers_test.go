package qqbot_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
	"github.com/personakit/persona/internal/logbuf"
)

// waitTimeout bounds every wait in these tests; it is a deadline for
// things to happen, never a timing assertion.
const waitTimeout = 10 * time.Second

// The chats the tests talk in.
var (
	group     = channel.Chat{Kind: channel.Group, ID: "C9F778FE6ADF9D1D1DBE395BF744A33A"}
	guildChan = channel.Chat{Kind: channel.Group, ID: "channel:100010"}
	alice     = channel.Sender{ID: "E4F4AEA33253A2797FB897C50B81D7ED", Name: "Alice"}
	aliceChat = channel.Chat{Kind: channel.Private, ID: alice.ID}
	bob       = channel.Sender{ID: "1234", Name: "bob"}
)

func newLogger() (*slog.Logger, *logbuf.Buffer) {
	buf := &logbuf.Buffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newFake(t *testing.T, cfg qqbottest.Config) *qqbottest.Server {
	t.Helper()
	srv := qqbottest.New(cfg)
	t.Cleanup(srv.Close)
	return srv
}

// fastConfig points an adapter at the fake with quick real-clock retries.
func fastConfig(srv *qqbottest.Server) qqbot.Config {
	return qqbot.Config{
		AppID: srv.AppID(), Secret: srv.Secret(), APIBase: srv.URL(), TokenURL: srv.TokenURL(),
		RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		HealthInterval: 20 * time.Millisecond, OfflineAfter: 1,
	}
}

func newChannel(t *testing.T, srv *qqbottest.Server, mod func(*qqbot.Config)) *qqbot.Channel {
	t.Helper()
	cfg := fastConfig(srv)
	if mod != nil {
		mod(&cfg)
	}
	ch, err := qqbot.New(cfg)
	require.NoError(t, err)
	return ch
}

// serveWebhook mounts ch on a loopback server and points the fake's
// webhook at it.
func serveWebhook(t *testing.T, srv *qqbottest.Server, ch *qqbot.Channel) string {
	t.Helper()
	var h atomic.Pointer[qqbot.Channel]
	h.Store(ch)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.Load().ServeHTTP(w, r) }))
	t.Cleanup(hook.Close)
	srv.SetWebhook(hook.URL + "/qq")
	return hook.URL + "/qq"
}

// run starts Run in the background; the returned stop cancels it and
// returns its error.
func run(t *testing.T, ch *qqbot.Channel, sink channel.Sink) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ch.Run(ctx, sink) }()
	var stopped atomic.Bool
	var result error
	stop := func() error {
		if stopped.Swap(true) {
			return result
		}
		cancel()
		select {
		case result = <-done:
		case <-time.After(waitTimeout):
			t.Error("Run did not return after cancel")
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// recSink is the Recorder with this package's wait helpers.
type recSink struct{ *chantest.Recorder }

func newRecSink() *recSink { return &recSink{chantest.NewRecorder()} }

func (r *recSink) wait(t *testing.T, what string, cond func(events, refused []channel.Event, states []channel.State) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := r.Wait(ctx, cond); err != nil {
		require.Failf(t, "timed out", "waiting for %s; events %d, refused %d, states %+v", what, len(r.Events()), len(r.Refused()), r.States())
	}
}

func (r *recSink) waitEvents(t *testing.T, n int) []channel.Event {
	t.Helper()
	r.wait(t, "events", func(evs, _ []channel.Event, _ []channel.State) bool { return len(evs) >= n })
	return r.Events()
}

func (r *recSink) waitOnline(t *testing.T, online bool) {
	t.Helper()
	r.wait(t, "state", func(_, _ []channel.Event, st []channel.State) bool {
		return len(st) > 0 && st[len(st)-1].Online == online
	})
}
