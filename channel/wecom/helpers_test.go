package wecom_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/wecom"
	"github.com/personakit/persona/channel/wecom/wecomtest"
	"github.com/personakit/persona/internal/logbuf"
)

// waitTimeout bounds every wait in these tests; it is a deadline for
// things to happen, never a timing assertion.
const waitTimeout = 10 * time.Second

// loopback lets AI-bot media downloads reach the fake on 127.0.0.1.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

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

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// recSink is the Recorder the adapter reports to, with wait helpers.
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
func run(t *testing.T, ch *wecom.Channel, sink channel.Sink) (stop func() error) {
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

// env is an adapter wired to a fake.
type env struct {
	srv  *wecomtest.Server
	ch   *wecom.Channel
	hook *httptest.Server // the adapter's callback URL (callback modes)
}

// newEnv starts a fake in mode and an adapter for it; fns adjust the
// configs.
func newEnv(t *testing.T, mode wecomtest.Mode, fake func(*wecomtest.Config), adapter func(*wecom.Config)) *env {
	t.Helper()
	fcfg := wecomtest.Config{Mode: mode}
	if fake != nil {
		fake(&fcfg)
	}
	srv := wecomtest.New(fcfg)
	t.Cleanup(srv.Close)
	cfg := adapterConfig(srv)
	if adapter != nil {
		adapter(&cfg)
	}
	ch, err := wecom.New(cfg)
	require.NoError(t, err)
	e := &env{srv: srv, ch: ch}
	if mode != wecomtest.ModeAIBotWS {
		var h atomic.Pointer[wecom.Channel]
		h.Store(ch)
		e.hook = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.Load().ServeHTTP(w, r) }))
		t.Cleanup(e.hook.Close)
		srv.SetCallbackURL(e.hook.URL + "/wecom")
	}
	return e
}

// adapterConfig is the adapter's config for a fake, with fast retries.
func adapterConfig(srv *wecomtest.Server) wecom.Config {
	cfg := wecom.Config{
		Mode:       wecom.Mode(srv.Mode()),
		APIBase:    srv.URL(),
		MediaAllow: loopback,
		RetryMin:   5 * time.Millisecond,
		RetryMax:   50 * time.Millisecond,
	}
	switch srv.Mode() {
	case wecomtest.ModeApp:
		cfg.Token, cfg.EncodingAESKey = srv.Token(), srv.EncodingAESKey()
		cfg.CorpID, cfg.AgentID, cfg.Secret = srv.CorpID(), srv.AgentID(), srv.Secret()
	case wecomtest.ModeAIBot:
		cfg.Token, cfg.EncodingAESKey = srv.Token(), srv.EncodingAESKey()
		cfg.BotName = srv.BotName()
	case wecomtest.ModeAIBotWS:
		cfg.BotID, cfg.Secret, cfg.BotName, cfg.WSURL = srv.BotID(), srv.BotSecret(), srv.BotName(), srv.WSURL()
	}
	return cfg
}

var (
	alice = channel.Chat{Kind: channel.Private, ID: "alice"}
	room  = channel.Chat{Kind: channel.Group, ID: "wrOgAAAAchat0001"}
)

// httptestServer serves h on a loopback server closed at cleanup and
// returns its URL.
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL
}
