package telegram_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
	"github.com/personakit/persona/internal/logbuf"
)

// waitTimeout bounds every wait in these tests; it is a deadline for
// things to happen, never a timing assertion.
const waitTimeout = 10 * time.Second

func newLogger() (*slog.Logger, *logbuf.Buffer) {
	buf := &logbuf.Buffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// waitLog waits until the log contains s.
func waitLog(t *testing.T, buf *logbuf.Buffer, s string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), s) }, waitTimeout, time.Millisecond,
		"log line %q never appeared; log:\n%s", s, buf)
}

// recSink is the Recorder the adapter under test reports to, with this
// package's wait helpers. A handler set with SetHandler decides what
// HandleEvent returns (the event is recorded as accepted only on nil).
type recSink struct{ *chantest.Recorder }

func newRecSink() *recSink { return &recSink{chantest.NewRecorder()} }

// wait blocks until cond holds (see [chantest.Recorder.Wait]).
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
	r.wait(t, "a state report", func(_, _ []channel.Event, sts []channel.State) bool {
		return len(sts) > 0 && sts[len(sts)-1].Online == online
	})
}

// run starts ch.Run and returns a stop function that cancels it and
// returns Run's error. The cleanup stops it too.
func run(t *testing.T, ch *telegram.Channel, sink channel.Sink) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ch.Run(ctx, sink) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(waitTimeout):
				err = errors.New("Run did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// newFake starts a fake Bot API server closed at cleanup.
func newFake(t *testing.T, cfg telegramtest.Config) *telegramtest.Server {
	t.Helper()
	srv := telegramtest.New(cfg)
	t.Cleanup(srv.Close)
	return srv
}

// newChannel builds an adapter for srv; fn adjusts the config.
func newChannel(t *testing.T, srv *telegramtest.Server, fn func(*telegram.Config)) *telegram.Channel {
	t.Helper()
	// A one-second long poll bounds the wait when a test's Wake misses
	// the poll it meant.
	cfg := telegram.Config{Token: srv.Token(), APIBase: srv.URL(), PollTimeout: time.Second,
		RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond}
	if fn != nil {
		fn(&cfg)
	}
	ch, err := telegram.New(cfg)
	require.NoError(t, err)
	return ch
}

var (
	alice = telegramtest.User{ID: 4242, FirstName: "Alice", Username: "alice"}
	bob   = telegramtest.User{ID: 5353, FirstName: "Bob", LastName: "Builder"}
	group = telegramtest.Chat{ID: -1001234567890, Type: telegramtest.ChatSupergroup, Title: "Test group"}
)
