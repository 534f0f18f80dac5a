package dingtalk_test

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
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
	"github.com/personakit/persona/internal/logbuf"
)

// waitTimeout bounds every wait in these tests; it is a deadline for
// things to happen, never a timing assertion.
const waitTimeout = 10 * time.Second

func tctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newLogger() (*slog.Logger, *logbuf.Buffer) {
	buf := &logbuf.Buffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// waitLog waits until the log has at least n records with message msg
// and returns them.
func waitLog(t *testing.T, buf *logbuf.Buffer, msg string, n int) []map[string]any {
	t.Helper()
	var recs []map[string]any
	require.Eventually(t, func() bool {
		var err error
		recs, err = buf.Records(msg)
		require.NoError(t, err)
		return len(recs) >= n
	}, waitTimeout, time.Millisecond, "%d log records %q never appeared; log:\n%s", n, msg, buf)
	return recs
}

// logDelay reads the "delay" attribute of a JSON log record.
func logDelay(t *testing.T, rec map[string]any) time.Duration {
	t.Helper()
	v, ok := rec["delay"].(float64)
	require.True(t, ok, "no delay in %v", rec)
	return time.Duration(v)
}

// recSink is the Recorder the adapter under test reports to.
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

// waitMessage waits for the accepted event with the message id.
func (r *recSink) waitMessage(t *testing.T, id string) channel.Event {
	t.Helper()
	var ev channel.Event
	r.wait(t, "message "+id, func(evs, _ []channel.Event, _ []channel.State) bool {
		for _, e := range evs {
			if e.MessageID == id {
				ev = e
				return true
			}
		}
		return false
	})
	return ev
}

// waitState waits for a state report at index from or later that
// satisfies ok, and returns the number of reports seen.
func (r *recSink) waitState(t *testing.T, what string, from int, ok func(channel.State) bool) int {
	t.Helper()
	n := 0
	r.wait(t, what, func(_, _ []channel.Event, sts []channel.State) bool {
		n = len(sts)
		for _, st := range sts[min(from, len(sts)):] {
			if ok(st) {
				return true
			}
		}
		return false
	})
	return n
}

func isUp(st channel.State) bool   { return st.Connected && st.Online }
func isDown(st channel.State) bool { return !st.Connected && !st.Online }

// run starts ch.Run and returns a stop function that cancels it and
// returns Run's error. The cleanup stops it too.
func run(t *testing.T, ch *dingtalk.Channel, sink channel.Sink) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
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
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return stop
}

// newFake starts a fake DingTalk closed at cleanup.
func newFake(t *testing.T, cfg dingtalktest.Config) *dingtalktest.Server {
	t.Helper()
	srv := dingtalktest.New(cfg)
	t.Cleanup(srv.Close)
	return srv
}

// newChannel builds an adapter for srv with fast retries; fn adjusts the
// config.
func newChannel(t *testing.T, srv *dingtalktest.Server, fn func(*dingtalk.Config)) *dingtalk.Channel {
	t.Helper()
	// Tests move fake clocks by minutes and hours; a keepalive ping whose
	// pong timer such a jump fires would cut the connection, so only
	// TestKeepAlive pings.
	cfg := dingtalk.Config{ClientID: srv.ClientID(), ClientSecret: srv.ClientSecret(), APIBase: srv.URL(),
		RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond, KeepAlive: 1000 * time.Hour}
	if fn != nil {
		fn(&cfg)
	}
	ch, err := dingtalk.New(cfg)
	require.NoError(t, err)
	return ch
}

// rig is an adapter running against a fake.
type rig struct {
	srv  *dingtalktest.Server
	ch   *dingtalk.Channel
	sink *recSink
	logs *logbuf.Buffer
	stop func() error
}

// chLogger is a logger writing to the rig's log.
func (r *rig) chLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// start runs an adapter against a new fake and waits until it is
// connected.
func start(t *testing.T, scfg dingtalktest.Config, fn func(*dingtalk.Config)) *rig {
	t.Helper()
	srv := newFake(t, scfg)
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *dingtalk.Config) {
		c.Logger = log
		if fn != nil {
			fn(c)
		}
	})
	r := &rig{srv: srv, ch: ch, sink: newRecSink(), logs: buf}
	r.stop = run(t, ch, r.sink)
	r.sink.waitState(t, "connected", 0, isUp)
	require.NoError(t, srv.WaitAccepted(tctx(t), 1))
	return r
}

var (
	alice = dingtalktest.User{StaffID: "manager4242", Nick: "Alice"}
	bob   = dingtalktest.User{StaffID: "staff5353", Nick: "Bob"}
)

const groupID = "cidGroupAbc123=="

// noSecrets requires that none of the secrets appears in s.
func noSecrets(t *testing.T, s string, secrets ...string) {
	t.Helper()
	for _, x := range secrets {
		if x != "" {
			require.NotContains(t, s, x, "a secret leaked")
		}
	}
}

func has(s, sub string) bool { return strings.Contains(s, sub) }
