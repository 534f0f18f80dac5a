package onebot_test

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
)

// waitTimeout bounds every wait in these tests; it is a deadline for
// things to happen, never a timing assertion.
const waitTimeout = 10 * time.Second

// logRec is one captured log line.
type logRec struct {
	msg   string
	level slog.Level
	attrs map[string]any
}

// logs captures log records for assertions and prints them when the test
// fails.
type logs struct {
	mu      sync.Mutex
	recs    []logRec
	changed chan struct{}
}

func newLogs(t *testing.T, name string) (*logs, *slog.Logger) {
	l := &logs{changed: make(chan struct{})}
	t.Cleanup(func() {
		if t.Failed() {
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, r := range l.recs {
				t.Logf("[%s] %s %s %v", name, r.level, r.msg, r.attrs)
			}
		}
	})
	return l, slog.New(&logHandler{l: l})
}

func (l *logs) add(r logRec) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	close(l.changed)
	l.changed = make(chan struct{})
}

// all returns the records with the given message.
func (l *logs) all(msg string) []logRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logRec
	for _, r := range l.recs {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// wait waits until at least n records with the given message exist.
func (l *logs) wait(t *testing.T, msg string, n int) []logRec {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		if got := l.all(msg); len(got) >= n {
			return got
		}
		select {
		case <-ch:
		case <-ctx.Done():
			require.Failf(t, "timed out", "waiting for %d log lines %q", n, msg)
		}
	}
}

type logHandler struct {
	l     *logs
	attrs []slog.Attr
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{msg: r.Message, level: r.Level, attrs: map[string]any{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Any()
		return true
	})
	h.l.add(rec)
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{l: h.l, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }

// sink is the Recorder the adapter under test reports to, with this
// package's wait helpers.
type sink struct{ *chantest.Recorder }

func newSink() *sink { return &sink{chantest.NewRecorder()} }

// wait waits until cond holds for the accepted events and the state
// reports (see [chantest.Recorder.Wait]).
func (s *sink) wait(t *testing.T, what string, cond func(evs []channel.Event, sts []channel.State) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	err := s.Wait(ctx, func(evs, _ []channel.Event, sts []channel.State) bool { return cond(evs, sts) })
	if err != nil {
		require.Failf(t, "timed out", "waiting for %s; events %d, states %+v", what, len(s.Events()), s.States())
	}
}

// waitEvent waits for an accepted event matching pred.
func (s *sink) waitEvent(t *testing.T, what string, pred func(channel.Event) bool) channel.Event {
	t.Helper()
	var got channel.Event
	s.wait(t, what, func(evs []channel.Event, _ []channel.State) bool {
		for _, e := range evs {
			if pred(e) {
				got = e
				return true
			}
		}
		return false
	})
	return got
}

// waitMessage waits for the accepted event with the given message id.
func (s *sink) waitMessage(t *testing.T, id string) channel.Event {
	t.Helper()
	return s.waitEvent(t, "message "+id, func(e channel.Event) bool { return e.MessageID == id && e.Kind != channel.KindNotice })
}

// waitState waits for a state report from index from on that matches.
func (s *sink) waitState(t *testing.T, what string, from int, pred func(channel.State) bool) {
	t.Helper()
	s.wait(t, what, func(_ []channel.Event, sts []channel.State) bool {
		return from <= len(sts) && slices.ContainsFunc(sts[from:], pred)
	})
}

func (s *sink) stateCount() int { return len(s.States()) }

func isUp(st channel.State) bool { return st.Connected && st.Online }

// rig is an adapter wired to a fake over one transport.
type rig struct {
	ch   *onebot.Channel
	fake *onebottest.Server
	logs *logs
	flog *logs
	// url is where the implementation reaches the adapter (reverse WS:
	// ws://…, HTTP: the event receiver), "" for forward WS.
	url string
}

// transport builds a rig for a mode. The adapter config gets the test
// logger and, for the transports, fast backoff unless set.
type transport struct {
	name  string
	build func(t *testing.T, fcfg onebottest.Config, cfg onebot.Config) rig
}

var transports = []transport{
	{"ReverseWS", reverseRig},
	{"ForwardWS", forwardRig},
	{"HTTP", httpRig},
}

func prepare(t *testing.T, fcfg *onebottest.Config, cfg *onebot.Config) (*logs, *logs) {
	al, alog := newLogs(t, "adapter")
	fl, flog := newLogs(t, "fake")
	if cfg.Logger == nil {
		cfg.Logger = alog
	}
	if fcfg.Logger == nil {
		fcfg.Logger = flog
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin, cfg.BackoffMax = 20*time.Millisecond, 200*time.Millisecond
	}
	if fcfg.ReconnectInterval == 0 {
		fcfg.ReconnectInterval = 20 * time.Millisecond
	}
	return al, fl
}

// reverseRig: the adapter listens on its own loopback listener; the fake
// dials it as a reverse WebSocket client.
func reverseRig(t *testing.T, fcfg onebottest.Config, cfg onebot.Config) rig {
	al, fl := prepare(t, &fcfg, &cfg)
	fake := onebottest.New(fcfg)
	t.Cleanup(fake.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	cfg.Mode, cfg.Listener = onebot.ModeReverseWS, ln
	ch, err := onebot.New(cfg)
	require.NoError(t, err)
	u := "ws://" + ln.Addr().String() + "/onebot/v11/ws"
	fake.DialReverse(t.Context(), u)
	return rig{ch: ch, fake: fake, logs: al, flog: fl, url: u}
}

// forwardRig: the fake serves the forward WebSocket; the adapter dials it.
func forwardRig(t *testing.T, fcfg onebottest.Config, cfg onebot.Config) rig {
	al, fl := prepare(t, &fcfg, &cfg)
	fake := onebottest.New(fcfg)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	cfg.Mode, cfg.URL = onebot.ModeForwardWS, "ws"+strings.TrimPrefix(srv.URL, "http")+"/"
	ch, err := onebot.New(cfg)
	require.NoError(t, err)
	return rig{ch: ch, fake: fake, logs: al, flog: fl}
}

// httpRig: the fake serves the HTTP API and posts events to the adapter,
// which is mounted on an httptest server.
func httpRig(t *testing.T, fcfg onebottest.Config, cfg onebot.Config) rig {
	al, fl := prepare(t, &fcfg, &cfg)
	if fcfg.Secret == "" && cfg.Secret == "" {
		fcfg.Secret, cfg.Secret = "test-secret", "test-secret"
	}
	fake := onebottest.New(fcfg)
	api := httptest.NewServer(fake)
	t.Cleanup(api.Close)
	t.Cleanup(fake.Close)
	cfg.Mode, cfg.URL = onebot.ModeHTTP, api.URL
	ch, err := onebot.New(cfg)
	require.NoError(t, err)
	events := httptest.NewServer(ch)
	t.Cleanup(events.Close)
	fake.SetPostURL(events.URL + "/onebot/event")
	return rig{ch: ch, fake: fake, logs: al, flog: fl, url: events.URL + "/onebot/event"}
}

// run starts Run with a fresh sink and waits until the adapter reports
// connected and online. Run is stopped (and must return nil) at cleanup.
func (r rig) run(t *testing.T) *sink {
	t.Helper()
	s := newSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.ch.Run(ctx, s) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(waitTimeout):
			t.Error("Run did not return after cancel")
		}
	})
	s.waitState(t, "connected and online", 0, isUp)
	if r.ch.Mode() != onebot.ModeHTTP {
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()
		require.NoError(t, r.fake.WaitConnected(ctx))
	}
	return s
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}
