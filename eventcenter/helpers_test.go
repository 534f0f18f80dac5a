package eventcenter_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/store"
)

const testToken = "operator-token-0123456789"

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is a center on a real store, served by a test server under /ops/.
type env struct {
	t      *testing.T
	db     *store.DB
	clk    clock.Clock
	fake   *clock.Fake // nil with the real clock
	center *eventcenter.Center
	srv    *httptest.Server
	base   string // the server URL with the mount point, ending in "/"

	mu  sync.Mutex
	log []string // "METHOD path?query status" of each request answered
}

// statusWriter remembers the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logged wraps h to record each request and the status it got (as the
// request ends, or as the answer starts for a stream).
func (e *env) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		e.mu.Lock()
		e.log = append(e.log, fmt.Sprintf("%s %s %d", r.Method, r.URL.RequestURI(), sw.status))
		e.mu.Unlock()
	})
}

// requests returns the requests answered so far whose line contains sub.
func (e *env) requests(sub string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, l := range e.log {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// newEnv opens a store in a temporary directory and mounts a center on it
// at /ops/ with http.StripPrefix. cfg's Records, Token and Clock are
// filled in unless set; opts may change cfg with the store at hand.
func newEnv(t *testing.T, clk clock.Clock, cfg eventcenter.Config, opts ...func(*store.DB, *eventcenter.Config)) *env {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "persona.db"), store.Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	for _, o := range opts {
		o(db, &cfg)
	}
	if cfg.Records == nil {
		cfg.Records = db
	}
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	if cfg.Clock == nil {
		cfg.Clock = clk
	}
	c, err := eventcenter.New(cfg)
	require.NoError(t, err)
	e := &env{t: t, db: db, clk: clk, center: c}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", e.logged(c)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(c.Close) // before srv.Close: open feeds end
	e.srv, e.base = srv, srv.URL+"/ops/"
	e.fake, _ = clk.(*clock.Fake)
	return e
}

// event builds a group (or private) message event.
func event(kind channel.ChatKind, chat, id string, at time.Time, text string) channel.Event {
	ev := channel.Event{
		Platform: "test", BotID: "bot", Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: kind, ID: chat}, MessageID: id, Time: at,
		Sender:   channel.Sender{ID: "u" + id, Name: "User " + id},
		Segments: []channel.Segment{channel.Text(text)},
	}
	ev.SessionKey = channel.SessionKey("", ev.Platform, ev.BotID, ev.Chat)
	return ev
}

// record stores ev as done from the start with outcome o.
func (e *env) record(ev channel.Event, o inbound.Outcome) string {
	e.t.Helper()
	ok, err := e.db.Record(context.Background(), inbound.Item{Event: ev}, o)
	require.NoError(e.t, err)
	require.True(e.t, ok)
	return ev.Key()
}

// complete enqueues ev, claims it and completes it with o (nothing else
// may be pending).
func (e *env) complete(ev channel.Event, o inbound.Outcome) string {
	e.t.Helper()
	ctx := context.Background()
	_, err := e.db.Enqueue(ctx, inbound.Item{Event: ev})
	require.NoError(e.t, err)
	ls, err := e.db.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(e.t, err)
	require.Len(e.t, ls, 1)
	require.NoError(e.t, e.db.Complete(ctx, ls[0], o))
	return ev.Key()
}

// request sends a request to the mounted center with the given bearer
// token ("" = none).
func (e *env) request(method, path, token string, hdr ...string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.base+path, nil)
	require.NoError(e.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	return resp
}

// getJSON GETs path with the token, requires the status and decodes the
// body into v (when not nil). It returns the raw body.
func (e *env) getJSON(path string, status int, v any) string {
	e.t.Helper()
	resp := e.request(http.MethodGet, path, testToken)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	require.Equal(e.t, status, resp.StatusCode, "GET %s: %s", path, b)
	require.Equal(e.t, "application/json; charset=utf-8", resp.Header.Get("Content-Type"))
	requireSecurityHeaders(e.t, resp)
	if v != nil {
		require.NoError(e.t, json.Unmarshal(b, v), string(b))
	}
	return string(b)
}

// requireSecurityHeaders checks the headers every answer carries.
func requireSecurityHeaders(t *testing.T, resp *http.Response) {
	t.Helper()
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'")
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
}

// sseEvent is one parsed server-sent event, or a comment.
type sseEvent struct {
	Event, ID, Data, Comment string
}

// feed is an open live feed.
type feed struct {
	resp   *http.Response
	events chan sseEvent
	cancel context.CancelFunc
}

// openFeed opens /api/events (path may carry a query) with the token and
// the extra headers, and parses its events in the background.
func (e *env) openFeed(query string, hdr ...string) *feed {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"api/events"+query, nil)
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		cancel()
		e.t.Fatalf("feed: %d %s", resp.StatusCode, b)
	}
	require.Equal(e.t, "text/event-stream; charset=utf-8", resp.Header.Get("Content-Type"))
	f := &feed{resp: resp, events: make(chan sseEvent, 64), cancel: cancel}
	go parseSSE(resp.Body, f.events)
	e.t.Cleanup(func() {
		cancel()
		_ = resp.Body.Close()
	})
	return f
}

// parseSSE reads events from r into out until r ends, then closes out.
func parseSSE(r io.Reader, out chan<- sseEvent) {
	defer close(out)
	sc := bufio.NewScanner(r)
	var ev sseEvent
	var data []string
	have := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if have {
				ev.Data = strings.Join(data, "\n")
				out <- ev
			}
			ev, data, have = sseEvent{}, nil, false
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		have = true
		switch field {
		case "":
			ev.Comment = value
		case "event":
			ev.Event = value
		case "id":
			ev.ID = value
		case "data":
			data = append(data, value)
		}
	}
}

// next returns the next event that is not a comment (or, with comments,
// any), failing after a while.
func (f *feed) next(t *testing.T, comments bool) sseEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-f.events:
			require.True(t, ok, "the feed ended")
			if ev.Comment != "" && !comments {
				continue
			}
			return ev
		case <-timeout:
			t.Fatal("no event within 5 s")
		}
	}
}

// message returns the next record event's message.
func (f *feed) message(t *testing.T) (string, eventcenter.Message) {
	t.Helper()
	for {
		ev := f.next(t, false)
		if ev.Event != "" {
			continue
		}
		var m eventcenter.Message
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &m), ev.Data)
		return ev.ID, m
	}
}

// waitEnd waits until the stream ends, failing after a while.
func (f *feed) waitEnd(t *testing.T) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-f.events:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the feed did not end within 5 s")
		}
	}
}

// ready returns the cursor of the feed's ready event.
func (f *feed) ready(t *testing.T) string {
	t.Helper()
	ev := f.next(t, false)
	require.Equal(t, "ready", ev.Event)
	var r struct{ Cursor string }
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &r))
	require.Equal(t, ev.ID, r.Cursor)
	return r.Cursor
}

// quiet requires that no record event arrives within d (comments are
// skipped).
func (f *feed) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-f.events:
			if !ok {
				return
			}
			if ev.Comment == "" {
				t.Fatalf("unexpected event %+v", ev)
			}
		case <-timeout:
			return
		}
	}
}

func ids(ms []eventcenter.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func keys(evs ...channel.Event) []string {
	out := make([]string, len(evs))
	for i := range evs {
		out[i] = evs[i].Key()
	}
	return out
}

// withLedger makes the center read the store's delivery ledger.
func withLedger(db *store.DB, cfg *eventcenter.Config) { cfg.Ledger = db }
