package eventcenter_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store"
)

// waitTimers waits until the fake clock has at least n timers armed: the
// feed is waiting for its poll and heartbeat.
func waitTimers(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return clk.Pending() >= n }, 5*time.Second, time.Millisecond)
}

func TestFeedDeliversNewRecords(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{Secrets: []string{"s3cret"}})
	e.record(event(channel.Group, "g", "0", t0, "before the feed"), inbound.Outcome{Code: outcome.Replied})

	f := e.openFeed("")
	start := f.ready(t)
	require.Equal(t, "1", start, "the feed starts after the newest record")
	require.Equal(t, 1, e.center.Feeds())

	// A record completed later arrives on Wake, without any poll.
	id1 := e.complete(event(channel.Group, "g", "1", t0.Add(time.Second), "new one s3cret"),
		inbound.Outcome{Code: outcome.Replied, Reason: "mention"})
	e.center.Wake()
	cur1, m := f.message(t)
	require.Equal(t, id1, m.ID)
	require.Equal(t, "new one ***", m.Text)
	require.Equal(t, outcome.Replied, m.Code)
	require.Equal(t, "replied", m.Family)
	require.Equal(t, "done", m.Status)
	require.Equal(t, "2", cur1)

	// Two records at once, in completion order, each with its own cursor.
	id2 := e.record(event(channel.Private, "p", "2", t0, "<b>two</b>"), inbound.Outcome{Code: inbound.IgnoredStale})
	id3 := e.complete(event(channel.Group, "g", "3", t0, "three"), inbound.Outcome{Code: "ignored_sampled_out"})
	e.center.Wake()
	cur2, m2 := f.message(t)
	cur3, m3 := f.message(t)
	require.Equal(t, []string{id2, id3}, []string{m2.ID, m3.ID})
	require.Equal(t, "<b>two</b>", m2.Text)
	require.Equal(t, []string{"3", "4"}, []string{cur2, cur3})

	// The poll finds records without a Wake too.
	id4 := e.record(event(channel.Group, "g", "4", t0, "four"), inbound.Outcome{Code: outcome.Replied})
	waitTimers(t, clk, 2)
	clk.Advance(eventcenter.DefaultPoll)
	_, m4 := f.message(t)
	require.Equal(t, id4, m4.ID)
}

func TestFeedFilters(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{})
	a := event(channel.Group, "a", "1", t0, "Hello there")
	f := e.openFeed("?code=replied&session=" + strings.ReplaceAll(a.SessionKey, ":", "%3A") + "&text=HELLO")
	f.ready(t)
	e.record(event(channel.Group, "b", "2", t0, "hello"), inbound.Outcome{Code: outcome.Replied})      // other session
	e.record(event(channel.Group, "a", "3", t0, "hello"), inbound.Outcome{Code: inbound.IgnoredStale}) // other code
	e.record(event(channel.Group, "a", "4", t0, "bye"), inbound.Outcome{Code: outcome.Replied})        // other text
	want := e.record(a, inbound.Outcome{Code: outcome.Replied})
	e.center.Wake()
	cur, m := f.message(t)
	require.Equal(t, want, m.ID)
	require.Equal(t, "4", cur, "the cursor moved past the records left out")

	// The event time range and the state filter too.
	f = e.openFeed(fmt.Sprintf("?since=%d&status=done", t0.Add(time.Minute).UnixMilli()))
	f.ready(t)
	e.record(event(channel.Group, "a", "5", t0, "old"), inbound.Outcome{Code: outcome.Replied})
	want = e.record(event(channel.Group, "a", "6", t0.Add(time.Hour), "new"), inbound.Outcome{Code: outcome.Replied})
	e.center.Wake()
	_, m = f.message(t)
	require.Equal(t, want, m.ID)

	resp := e.request(http.MethodGet, "api/events?code=Bad-Code", testToken)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestFeedResumes(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{})
	var recs []string
	for i := range 4 {
		recs = append(recs, e.record(event(channel.Group, "g", fmt.Sprint(i), t0, "x"), inbound.Outcome{Code: outcome.Replied}))
	}

	// Last-Event-ID: only the records after it.
	f := e.openFeed("", "Last-Event-ID", "2")
	require.Equal(t, "2", f.ready(t))
	for _, want := range recs[2:] {
		_, m := f.message(t)
		require.Equal(t, want, m.ID)
	}
	f.quiet(t, 100*time.Millisecond)

	// The header wins over after=; after= alone works too, "" is the start.
	f = e.openFeed("?after=0", "Last-Event-ID", "3")
	f.ready(t)
	_, m := f.message(t)
	require.Equal(t, recs[3], m.ID)
	f = e.openFeed("?after=")
	require.Empty(t, f.ready(t))
	for _, want := range recs {
		_, m := f.message(t)
		require.Equal(t, want, m.ID)
	}

	// A cursor past the end waits for new records.
	f = e.openFeed("", "Last-Event-ID", "4")
	f.ready(t)
	id := e.record(event(channel.Group, "g", "new", t0, "x"), inbound.Outcome{Code: outcome.Replied})
	e.center.Wake()
	cur, m := f.message(t)
	require.Equal(t, id, m.ID)
	require.Equal(t, "5", cur)

	// A malformed cursor is refused before the stream starts.
	for _, hdr := range [][]string{{"Last-Event-ID", "abc"}, {"Last-Event-ID", "-3"}} {
		resp := e.request(http.MethodGet, "api/events", testToken, hdr...)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%v", hdr)
		require.Contains(t, string(b), "error")
	}
}

func TestFeedHeartbeat(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{})
	f := e.openFeed("")
	f.ready(t)
	waitTimers(t, clk, 2) // the poll and the heartbeat
	clk.Advance(eventcenter.DefaultHeartbeat - time.Millisecond)
	f.quiet(t, 50*time.Millisecond)
	waitTimers(t, clk, 2)
	clk.Advance(time.Millisecond)
	ev := f.next(t, true)
	require.Equal(t, "heartbeat", ev.Comment)
	// And again, a heartbeat period later.
	waitTimers(t, clk, 2)
	clk.Advance(eventcenter.DefaultHeartbeat)
	require.Equal(t, "heartbeat", f.next(t, true).Comment)
}

func TestFeedPollsOnTheRealClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, clock.Real, eventcenter.Config{Poll: 20 * time.Millisecond})
	f := e.openFeed("")
	f.ready(t)
	id := e.record(event(channel.Group, "g", "1", time.Now(), "x"), inbound.Outcome{Code: outcome.Replied})
	// No Wake: the poll finds it (f.message allows 5 s; the poll is 20 ms).
	_, m := f.message(t)
	require.Equal(t, id, m.ID)
}

// hiddenHead is a record reader without FeedHead.
type hiddenHead struct{ inbound.RecordReader }

func TestFeedHeadWithoutFeedHeader(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{}, func(db *store.DB, cfg *eventcenter.Config) {
		cfg.Records = hiddenHead{db}
	})
	for i := range 3 {
		e.record(event(channel.Group, "g", fmt.Sprint(i), t0, "x"), inbound.Outcome{Code: outcome.Replied})
	}
	f := e.openFeed("")
	require.Equal(t, "3", f.ready(t), "found by paging through the feed")
	id := e.record(event(channel.Group, "g", "new", t0, "x"), inbound.Outcome{Code: outcome.Replied})
	e.center.Wake()
	_, m := f.message(t)
	require.Equal(t, id, m.ID)
}

func TestFeedStopsCleanly(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	e := newEnv(t, clk, eventcenter.Config{})

	// A cancelled request context ends the handler.
	ctx, cancel := context.WithCancel(t.Context())
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.center.ServeHTTP(rec, req)
	}()
	require.Eventually(t, func() bool { return e.center.Feeds() == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the feed did not end with its request")
	}
	require.Equal(t, 0, e.center.Feeds())
	require.Contains(t, rec.Body.String(), "event: ready")

	// A client that goes away ends its handler.
	f := e.openFeed("")
	f.ready(t)
	require.Equal(t, 1, e.center.Feeds())
	f.cancel()
	require.Eventually(t, func() bool { return e.center.Feeds() == 0 }, 5*time.Second, time.Millisecond)

	// Close ends every feed: the client sees the stream end.
	f1, f2 := e.openFeed(""), e.openFeed("")
	f1.ready(t)
	f2.ready(t)
	require.Equal(t, 2, e.center.Feeds())
	e.center.Close()
	for _, f := range []*feed{f1, f2} {
		f.waitEnd(t)
	}
	require.Eventually(t, func() bool { return e.center.Feeds() == 0 }, 5*time.Second, time.Millisecond)
	e.center.Close() // idempotent
	resp := e.request(http.MethodGet, "api/events", testToken)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	// The rest of the API still answers.
	e.getJSON("api/summary", http.StatusOK, nil)
}
