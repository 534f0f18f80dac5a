package feishu_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
	"github.com/personakit/persona/internal/logbuf"
)

// waitTimeout bounds every wait in these tests; it is a deadline for
// things to happen, never a timing assertion.
const waitTimeout = 10 * time.Second

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

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

// recSink is the Recorder the adapter under test reports to, with wait
// helpers.
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
	r.wait(t, "a state report", func(_, _ []channel.Event, sts []channel.State) bool {
		return len(sts) > 0 && sts[len(sts)-1].Online == online
	})
}

// run starts ch.Run and returns a stop function that cancels it and
// returns Run's error. The cleanup stops it too.
func run(t *testing.T, ch *feishu.Channel, sink channel.Sink) (stop func() error) {
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

// newFake starts a fake platform closed at cleanup; refused events are
// delivered again after 20 ms unless cfg says otherwise.
func newFake(t *testing.T, cfg feishutest.Config) *feishutest.Server {
	t.Helper()
	if cfg.RetryDelays == nil {
		cfg = fastFake(cfg)
	}
	srv := feishutest.New(cfg)
	t.Cleanup(srv.Close)
	return srv
}

// newChannel builds an adapter for srv in mode; fn adjusts the config.
// In webhook mode it mounts the adapter on a loopback server and points
// the fake's callback at it.
func newChannel(t *testing.T, srv *feishutest.Server, mode feishu.Mode, fn func(*feishu.Config)) *feishu.Channel {
	t.Helper()
	cfg := feishu.Config{AppID: srv.AppID(), AppSecret: srv.AppSecret(), BaseURL: srv.URL(), Mode: mode,
		VerificationToken: srv.VerificationToken(), EncryptKey: srv.EncryptKey(),
		RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond}
	if fn != nil {
		fn(&cfg)
	}
	ch, err := feishu.New(cfg)
	require.NoError(t, err)
	if mode == feishu.ModeWebhook {
		hook := httptest.NewServer(ch)
		t.Cleanup(hook.Close)
		srv.SetCallback(hook.URL + "/events")
	}
	return ch
}

var (
	alice = feishutest.User{OpenID: "ou_84aad35d084aa403a838cf73ee18467", UnionID: "on_8ed6aa67826108097d9ee143816345", UserID: "e33ggbyz", Name: "Alice"}
	bob   = feishutest.User{OpenID: "ou_155184d1e73cbfb8973e5a9e698e74f2", Name: "Bob"}
	group = "oc_5ce6d572455d361153b7xx51da133945"
)
