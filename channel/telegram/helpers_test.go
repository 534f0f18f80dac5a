package telegram_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
)

// waitTimeout bounds every wait in these tests; it is a deadline for
// things to happen, never a timing assertion.
const waitTimeout = 10 * time.Second

// logBuf collects log output for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLogger() (*slog.Logger, *logBuf) {
	buf := &logBuf{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// waitLog waits until the log contains s.
func waitLog(t *testing.T, buf *logBuf, s string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), s) }, waitTimeout, time.Millisecond,
		"log line %q never appeared; log:\n%s", s, buf)
}

// recSink records events and states; handle, when set, decides what
// HandleEvent returns (the event is recorded only when it returns nil).
type recSink struct {
	mu      sync.Mutex
	changed chan struct{}
	handle  func(ctx context.Context, ev channel.Event) error
	events  []channel.Event
	refused []channel.Event
	states  []channel.State
}

func newRecSink() *recSink { return &recSink{changed: make(chan struct{})} }

func (r *recSink) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recSink) HandleEvent(ctx context.Context, ev channel.Event) error {
	if r.handle != nil {
		if err := r.handle(ctx, ev); err != nil {
			r.mu.Lock()
			r.refused = append(r.refused, ev)
			r.notifyLocked()
			r.mu.Unlock()
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	r.notifyLocked()
	return nil
}

func (r *recSink) ReportState(_ context.Context, st channel.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, st)
	r.notifyLocked()
}

func (r *recSink) Events() []channel.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recSink) States() []channel.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states)
}

// wait blocks until cond (called with the sink locked) holds.
func (r *recSink) wait(t *testing.T, what string, cond func(r *recSink) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	for {
		r.mu.Lock()
		ok, ch := cond(r), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			r.mu.Lock()
			defer r.mu.Unlock()
			require.Failf(t, "timed out", "waiting for %s; events %d, refused %d, states %+v", what, len(r.events), len(r.refused), r.states)
		}
	}
}

func (r *recSink) waitEvents(t *testing.T, n int) []channel.Event {
	t.Helper()
	r.wait(t, "events", func(r *recSink) bool { return len(r.events) >= n })
	return r.Events()
}

func (r *recSink) waitOnline(t *testing.T, online bool) {
	t.Helper()
	r.wait(t, "a state report", func(r *recSink) bool {
		return len(r.states) > 0 && r.states[len(r.states)-1].Online == online
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
