package postgres_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/internal/pgtest"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/store/postgres"
)

// rawConn opens a plain connection to the schema of url, closed when t
// ends.
func rawConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func recIDs(rs []inbound.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
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

// completeOne enqueues ev, claims it (nothing else may be claimable) and
// completes it with o.
func completeOne(t *testing.T, d *postgres.DB, ev channel.Event, o inbound.Outcome) {
	t.Helper()
	qEnqueue(t, d, ev)
	ls, err := d.Claim(t.Context(), inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, ev.Key(), ls[0].ID)
	require.NoError(t, d.Complete(t.Context(), ls[0], o))
}

func TestRecordsFilters(t *testing.T) {
	clk := clock.NewFake(qt0)
	d := openQueue(t, pgtest.Schema(t), clk)
	ctx := t.Context()

	at := func(s int) time.Time { return qt0.Add(time.Duration(s) * time.Second) }
	evA1 := qEvent(channel.Group, "a", "1", at(1), "Hello WORLD")
	evA2 := qEvent(channel.Group, "a", "2", at(2), "100%_done")
	evB3 := qEvent(channel.Group, "b", "3", at(3), "1000 done")
	evB3.Sender.ID = evA1.Sender.ID
	evB4 := qEvent(channel.Private, "b", "4", at(4), "worldly <img src=x> ÄÖ")
	evA5 := qEvent(channel.Group, "a", "5", at(5), "still waiting")
	evA6 := qEvent(channel.Group, "a", "6", at(6), "being worked on")

	completeOne(t, d, evA1, inbound.Outcome{Code: outcome.Replied, Reason: "mention"})
	completeOne(t, d, evA2, inbound.Outcome{Code: "ignored_sampled_out"})
	_, err := d.Record(ctx, inbound.Item{Event: evB3}, inbound.Outcome{Code: inbound.IgnoredStale})
	require.NoError(t, err)
	completeOne(t, d, evB4, inbound.Outcome{Code: outcome.Replied})
	qEnqueue(t, d, evA6)
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	qEnqueue(t, d, evA5)

	cases := []struct {
		name string
		q    inbound.RecordQuery
		want []string
	}{
		{"all, newest first", inbound.RecordQuery{}, keys(evA6, evA5, evB4, evB3, evA2, evA1)},
		{"session", inbound.RecordQuery{SessionKey: evB3.SessionKey}, keys(evB3)},
		{"private session", inbound.RecordQuery{SessionKey: evB4.SessionKey}, keys(evB4)},
		{"sender", inbound.RecordQuery{SenderID: evA1.Sender.ID}, keys(evB3, evA1)},
		{"code", inbound.RecordQuery{Code: outcome.Replied}, keys(evB4, evA1)},
		{"code and session", inbound.RecordQuery{Code: outcome.Replied, SessionKey: evA1.SessionKey}, keys(evA1)},
		{"text, any case", inbound.RecordQuery{Text: "world"}, keys(evB4, evA1)},
		{"text upper case", inbound.RecordQuery{Text: "HELLO w"}, keys(evA1)},
		{"text with % is literal", inbound.RecordQuery{Text: "0%"}, keys(evA2)},
		{"text with _ is literal", inbound.RecordQuery{Text: "_d"}, keys(evA2)},
		{"text with markup", inbound.RecordQuery{Text: "<IMG"}, keys(evB4)},
		{"non-ASCII letters keep their case", inbound.RecordQuery{Text: "äö"}, nil},
		{"non-ASCII letters as written", inbound.RecordQuery{Text: "ÄÖ"}, keys(evB4)},
		{"text not found", inbound.RecordQuery{Text: "nothing like it"}, nil},
		{"since", inbound.RecordQuery{Since: at(5)}, keys(evA6, evA5)},
		{"until", inbound.RecordQuery{Until: at(3)}, keys(evA2, evA1)},
		{"range", inbound.RecordQuery{Since: at(2), Until: at(4)}, keys(evB3, evA2)},
		{"pending", inbound.RecordQuery{Status: inbound.StatusPending}, keys(evA5)},
		{"leased", inbound.RecordQuery{Status: inbound.StatusLeased}, keys(evA6)},
		{"done", inbound.RecordQuery{Status: inbound.StatusDone}, keys(evB4, evB3, evA2, evA1)},
		{"done in a session", inbound.RecordQuery{Status: inbound.StatusDone, SessionKey: evA1.SessionKey}, keys(evA2, evA1)},
		{"everything at once", inbound.RecordQuery{SessionKey: evA1.SessionKey, SenderID: evA1.Sender.ID,
			Code: outcome.Replied, Text: "hello", Since: at(1), Until: at(2), Status: inbound.StatusDone}, keys(evA1)},
	}
	for _, tc := range cases {
		page, err := d.ListRecords(ctx, tc.q)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, recIDs(page.Records), tc.name)
		require.Empty(t, page.Next, tc.name)
		// Records lists the same, oldest first.
		all, err := d.Records(ctx, tc.q)
		require.NoError(t, err, tc.name)
		want := slices.Clone(tc.want)
		slices.Reverse(want)
		require.Equal(t, want, recIDs(all), tc.name)
	}

	page, err := d.ListRecords(ctx, inbound.RecordQuery{SessionKey: evA1.SessionKey, Code: outcome.Replied})
	require.NoError(t, err)
	r := page.Records[0]
	require.Equal(t, "Hello WORLD", r.Text)
	require.Equal(t, evA1.Sender.ID, r.SenderID)
	require.Equal(t, "mention", r.Outcome.Reason)
	require.Equal(t, inbound.StatusDone, r.Status)
	require.True(t, at(1).Equal(r.EventTime))

	for _, q := range []inbound.RecordQuery{{Code: "Not A Code"}, {Status: "sleeping"}} {
		_, err := d.ListRecords(ctx, q)
		require.ErrorIs(t, err, inbound.ErrInvalidQuery)
		_, err = d.Records(ctx, q)
		require.ErrorIs(t, err, inbound.ErrInvalidQuery)
	}

	counts, err := d.CountOutcomes(ctx)
	require.NoError(t, err)
	require.Equal(t, map[outcome.Code]int{outcome.Replied: 2, "ignored_sampled_out": 1, inbound.IgnoredStale: 1}, counts)
}

func TestRecordsPaging(t *testing.T) {
	clk := clock.NewFake(qt0)
	d := openQueue(t, pgtest.Schema(t), clk)
	ctx := t.Context()

	// 120 records over two sessions; groups of three share an event time,
	// so the id breaks ties across page ends.
	type rec struct {
		id string
		at time.Time
	}
	var want []rec
	for i := range 120 {
		ev := qEvent(channel.Group, []string{"a", "b"}[i%2], fmt.Sprintf("m%03d", i), qt0.Add(time.Duration(i/3)*time.Second), "text")
		_, err := d.Record(ctx, inbound.Item{Event: ev}, inbound.Outcome{Code: outcome.Replied})
		require.NoError(t, err)
		want = append(want, rec{ev.Key(), ev.Time})
	}
	slices.SortFunc(want, func(a, b rec) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return strings.Compare(b.id, a.id)
	})
	var wantIDs []string
	for _, r := range want {
		wantIDs = append(wantIDs, r.id)
	}

	for _, limit := range []int{1, 7, 50, 119, 120, 500} {
		var got []string
		q := inbound.RecordQuery{Limit: limit}
		pages := 0
		for {
			page, err := d.ListRecords(ctx, q)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page.Records), limit)
			got = append(got, recIDs(page.Records)...)
			pages++
			if page.Next == "" {
				break
			}
			require.Len(t, page.Records, limit, "only the last page is short")
			q.Before = page.Next
			if limit == 7 && pages == 3 {
				// A newer record arriving while paging does not disturb
				// the pages still to come.
				newer := qEvent(channel.Group, "a", "new", qt0.Add(time.Hour), "late")
				_, err := d.Record(ctx, inbound.Item{Event: newer}, inbound.Outcome{Code: outcome.Replied})
				require.NoError(t, err)
			}
		}
		if limit <= 7 {
			// The late record came after the first pages of limit 7.
			require.Equal(t, wantIDs, got, "limit %d: every record once, in order", limit)
			continue
		}
		require.Equal(t, wantIDs, got[1:], "limit %d: the late record leads", limit)
		require.Equal(t, (len(got)+limit-1)/limit, pages, "limit %d", limit)
	}

	// Filters hold across pages.
	var got []string
	q := inbound.RecordQuery{SessionKey: qEvent(channel.Group, "b", "x", qt0, "").SessionKey, Limit: 11}
	for {
		page, err := d.ListRecords(ctx, q)
		require.NoError(t, err)
		got = append(got, recIDs(page.Records)...)
		if page.Next == "" {
			break
		}
		q.Before = page.Next
	}
	require.Len(t, got, 60)
	for _, id := range got {
		require.Contains(t, id, "group:b/")
	}

	// The default page, and the cap.
	page, err := d.ListRecords(ctx, inbound.RecordQuery{})
	require.NoError(t, err)
	require.Len(t, page.Records, inbound.DefaultRecordPage)
	require.NotEmpty(t, page.Next)
	for i := range inbound.MaxRecordPage {
		ev := qEvent(channel.Group, "c", fmt.Sprint(i), qt0.Add(time.Duration(i)*time.Millisecond), "x")
		_, err := d.Record(ctx, inbound.Item{Event: ev}, inbound.Outcome{Code: outcome.Replied})
		require.NoError(t, err)
	}
	page, err = d.ListRecords(ctx, inbound.RecordQuery{Limit: 10_000})
	require.NoError(t, err)
	require.Len(t, page.Records, inbound.MaxRecordPage)
	require.NotEmpty(t, page.Next)
	page, err = d.ListRecords(ctx, inbound.RecordQuery{Limit: 10_000, Before: page.Next})
	require.NoError(t, err)
	require.Len(t, page.Records, 121)
	require.Empty(t, page.Next)

	// Bad cursors.
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{"!!!", "a b", b64("no separator"), b64("notanumber:id"), b64("123:"), b64(":id")} {
		_, err := d.ListRecords(ctx, inbound.RecordQuery{Before: c})
		require.ErrorIs(t, err, inbound.ErrInvalidQuery, "cursor %q", c)
	}
	// A well-formed cursor of a record that does not exist is a position.
	page, err = d.ListRecords(ctx, inbound.RecordQuery{Before: b64("0:zzz")})
	require.NoError(t, err)
	require.Empty(t, page.Records)
}

func TestRecordsOutcomeRoundTrip(t *testing.T) {
	clk := clock.NewFake(qt0)
	d := openQueue(t, pgtest.Schema(t), clk)
	ctx := t.Context()
	ev := qEvent(channel.Group, "g", "1", qt0, "hi")
	o := inbound.Outcome{
		Code: outcome.RepliedProactive, Reason: "router allowed", Stage: inbound.StageEchoPersisted,
		OutboundIDs: []string{"m1", "m2"}, Kind: "proactive",
		Timings: inbound.Timings{GatesDone: qt0.Add(time.Millisecond), GenerationStart: qt0.Add(2 * time.Millisecond),
			GenerationEnd: qt0.Add(3 * time.Millisecond), FirstSend: qt0.Add(4 * time.Millisecond), FirstAck: qt0.Add(5 * time.Millisecond)},
		Tokens: []inbound.Tokens{{Purpose: "reply", Model: "m", Input: 10, CachedInput: 4, Output: 7}, {Purpose: "router", Input: 3}},
		Trail: &inbound.Trail{Trigger: "mention", Gates: []string{"admission", "dedupe"}, Command: "help",
			Router: &inbound.RouterTrail{Directed: "yes", ChatIn: 0.1 + 0.2, ChatInPass: true, Reply: true, Code: outcome.Replied, Reason: "r"},
			Review: []inbound.ReviewStep{{Generation: 1, Send: false, Code: "review_rejected", Reason: "dup", Rewritten: true},
				{Generation: 2, Send: true, Regenerate: true}},
			Notes: []string{"voice clip not transcribed", "ünïcode ✓"}},
	}
	completeOne(t, d, ev, o)
	r, err := d.Lookup(ctx, ev.Key())
	require.NoError(t, err)
	got := r.Outcome
	require.Equal(t, o.Trail, got.Trail)
	require.Equal(t, o.Tokens, got.Tokens)
	require.Equal(t, o.OutboundIDs, got.OutboundIDs)
	for _, p := range [][2]time.Time{{o.Timings.GatesDone, got.Timings.GatesDone},
		{o.Timings.GenerationStart, got.Timings.GenerationStart}, {o.Timings.GenerationEnd, got.Timings.GenerationEnd},
		{o.Timings.FirstSend, got.Timings.FirstSend}, {o.Timings.FirstAck, got.Timings.FirstAck}} {
		require.True(t, p[0].Equal(p[1]), "%s != %s", p[0], p[1])
	}
	got.Timings = o.Timings
	require.Equal(t, o, got)

	// An outcome without a trail reads back without one; a recorded item
	// keeps what Record stored.
	rec := qEvent(channel.Group, "g", "2", qt0, "x")
	_, err = d.Record(ctx, inbound.Item{Event: rec}, inbound.Outcome{Code: inbound.IgnoredStale})
	require.NoError(t, err)
	r, err = d.Lookup(ctx, rec.Key())
	require.NoError(t, err)
	require.Nil(t, r.Outcome.Trail)
	require.Nil(t, r.Outcome.Tokens)
	require.Equal(t, inbound.IgnoredStale, r.Outcome.Code)
}

// feedUntil reads CompletedAfter(cursor, limit) until it returns want
// records: a write transaction open anywhere on the server (another
// test's) holds the feed back while it runs.
func feedUntil(t *testing.T, d *postgres.DB, cursor string, limit, want int) ([]inbound.Record, string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		recs, next, err := d.CompletedAfter(t.Context(), cursor, limit)
		require.NoError(t, err)
		if len(recs) >= want {
			require.Len(t, recs, want)
			return recs, next
		}
		require.True(t, time.Now().Before(deadline), "the feed gave %d records of %d", len(recs), want)
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCompletedAfterFeed(t *testing.T) {
	clk := clock.NewFake(qt0)
	url := pgtest.Schema(t)
	d := openQueue(t, url, clk)
	ctx := t.Context()

	head, err := d.FeedHead(ctx)
	require.NoError(t, err)
	require.Empty(t, head)
	recs, cur, err := d.CompletedAfter(ctx, "", 10)
	require.NoError(t, err)
	require.Empty(t, recs)
	require.Empty(t, cur)

	// Three items claimed together complete in an order that is not their
	// event order, two in the same millisecond.
	var evs []channel.Event
	for i := range 3 {
		ev := qEvent(channel.Group, fmt.Sprint("c", i), fmt.Sprint(i), qt0.Add(time.Duration(i)*time.Second), "x")
		qEnqueue(t, d, ev)
		evs = append(evs, ev)
	}
	ls, err := d.Claim(ctx, inbound.Limits{Max: 3, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 3)
	byID := map[string]inbound.Lease{}
	for _, l := range ls {
		byID[l.ID] = l
	}
	require.NoError(t, d.Complete(ctx, byID[evs[2].Key()], inbound.Outcome{Code: outcome.Replied}))
	require.NoError(t, d.Complete(ctx, byID[evs[0].Key()], inbound.Outcome{Code: "ignored_sampled_out"}))
	rec := qEvent(channel.Group, "c9", "9", qt0, "x")
	_, err = d.Record(ctx, inbound.Item{Event: rec}, inbound.Outcome{Code: inbound.IgnoredStale})
	require.NoError(t, err)
	clk.Advance(time.Millisecond)
	require.NoError(t, d.Complete(ctx, byID[evs[1].Key()], inbound.Outcome{Code: outcome.Replied}))
	order := keys(evs[2], evs[0], rec, evs[1])

	recs, cur = feedUntil(t, d, "", 0, len(order))
	require.Equal(t, order, recIDs(recs))
	require.Equal(t, outcome.Code("ignored_sampled_out"), recs[1].Outcome.Code)
	head, err = d.FeedHead(ctx)
	require.NoError(t, err)
	require.Equal(t, cur, head)

	// One at a time: no repeats, no gaps.
	var got []string
	cur = ""
	for range order {
		recs, next := feedUntil(t, d, cur, 1, 1)
		require.NotEqual(t, cur, next)
		got = append(got, recs[0].ID)
		cur = next
	}
	require.Equal(t, order, got)
	recs, next, err := d.CompletedAfter(ctx, cur, 1)
	require.NoError(t, err)
	require.Empty(t, recs)
	require.Equal(t, cur, next, "no record: the cursor stays")

	// A transaction still running when a later one completes a record
	// holds the feed back until it ends: what it completes must not sort
	// before what a reader was already given.
	conn := rawConn(t, url)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	var xid string
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid))
	completeOne(t, d, qEvent(channel.Group, "c5", "5", qt0, "x"), inbound.Outcome{Code: outcome.Replied})
	recs, next, err = d.CompletedAfter(ctx, head, 10)
	require.NoError(t, err)
	require.Empty(t, recs, "held back by the open transaction")
	require.Equal(t, head, next)
	h2, err := d.FeedHead(ctx)
	require.NoError(t, err)
	require.Equal(t, head, h2)
	require.NoError(t, tx.Rollback(ctx))
	recs, next = feedUntil(t, d, head, 10, 1)
	require.Equal(t, keys(qEvent(channel.Group, "c5", "5", qt0, "x")), recIDs(recs))
	require.NotEqual(t, head, next)

	for _, c := range []string{"x", "-1", "1.5.3", "-1.2", "1.-2", "9999999999999999999999.1", "12"} {
		_, same, err := d.CompletedAfter(ctx, c, 10)
		require.ErrorIs(t, err, inbound.ErrInvalidQuery, "cursor %q", c)
		require.Equal(t, c, same)
	}
}

// TestCompletedAfterAcrossProcesses: completions from several stores at
// once, read by a feed that follows them, come out each exactly once.
func TestCompletedAfterAcrossProcesses(t *testing.T) {
	url := pgtest.Schema(t)
	clk := clock.NewFake(qt0)
	dbs := []*postgres.DB{openQueue(t, url, clk), openQueue(t, url, clk), openQueue(t, url, clk)}
	ctx := t.Context()
	const n = 90
	for i := range n {
		qEnqueue(t, dbs[i%3], qEvent(channel.Group, fmt.Sprint("s", i), fmt.Sprint(i), qt0, "x"))
	}
	var (
		wg       sync.WaitGroup
		finished = make(chan struct{})
		seen     []string
		readErr  error
	)
	go func() {
		defer close(finished)
		cur := ""
		for len(seen) < n {
			recs, next, err := dbs[0].CompletedAfter(ctx, cur, 7)
			if err != nil {
				readErr = err
				return
			}
			if len(recs) == 0 {
				time.Sleep(5 * time.Millisecond) // poll, as a live feed does
			}
			seen = append(seen, recIDs(recs)...)
			cur = next
		}
	}()
	for _, d := range dbs {
		for range 2 {
			wg.Go(func() {
				for {
					ls, err := d.Claim(ctx, inbound.Limits{Max: 2, Owner: "w"})
					if err != nil {
						t.Error(err)
						return
					}
					if len(ls) == 0 {
						return
					}
					for _, l := range ls {
						if err := d.Complete(ctx, l, inbound.Outcome{Code: outcome.Replied}); err != nil {
							t.Error(err)
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("the feed did not see every completion")
	}
	require.NoError(t, readErr)
	require.Len(t, seen, n)
	slices.Sort(seen)
	require.Len(t, slices.Compact(seen), n, "no record twice")
}

func TestSummarizeRecords(t *testing.T) {
	clk := clock.NewFake(qt0)
	d := openQueue(t, pgtest.Schema(t), clk)
	ctx := t.Context()
	tokens := func(pairs ...any) []inbound.Tokens {
		var out []inbound.Tokens
		for i := 0; i < len(pairs); i += 2 {
			n := pairs[i+1].(int)
			out = append(out, inbound.Tokens{Purpose: pairs[i].(string), Model: "m", Input: n, CachedInput: n / 2, Output: n / 10})
		}
		return out
	}
	completeOne(t, d, qEvent(channel.Group, "a", "0", qt0, "x"), inbound.Outcome{Code: outcome.Replied, Tokens: tokens("reply", 1000)})
	clk.Advance(time.Hour)
	since := clk.Now()
	completeOne(t, d, qEvent(channel.Group, "a", "1", qt0, "x"),
		inbound.Outcome{Code: outcome.Replied, Tokens: tokens("reply", 100, "review", 40)})
	clk.Advance(time.Minute)
	completeOne(t, d, qEvent(channel.Group, "a", "2", qt0, "x"),
		inbound.Outcome{Code: outcome.Replied, Tokens: tokens("reply", 200, "reply", 300, "Router", 20)})
	_, err := d.Record(ctx, inbound.Item{Event: qEvent(channel.Group, "a", "3", qt0, "x")}, inbound.Outcome{Code: inbound.IgnoredStale})
	require.NoError(t, err)
	clk.Advance(time.Minute)
	completeOne(t, d, qEvent(channel.Group, "a", "4", qt0, "x"),
		inbound.Outcome{Code: "ignored_sampled_out", Tokens: tokens("Router", 10)})
	clk.Advance(time.Minute)
	until := clk.Now()
	completeOne(t, d, qEvent(channel.Group, "a", "5", qt0, "x"), inbound.Outcome{Code: outcome.Replied, Tokens: tokens("reply", 5000)})
	for i := range 2 {
		qEnqueue(t, d, qEvent(channel.Group, fmt.Sprint("live", i), "l", qt0, "x"))
	}
	_, err = d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)

	s, err := d.Summarize(ctx, since, until)
	require.NoError(t, err)
	require.True(t, since.Equal(s.Since))
	require.True(t, until.Equal(s.Until))
	require.Equal(t, map[outcome.Code]int{outcome.Replied: 2, inbound.IgnoredStale: 1, "ignored_sampled_out": 1}, s.Outcomes)
	require.Equal(t, []inbound.TokenTotal{
		{Purpose: "Router", Calls: 2, Input: 30, CachedInput: 15, Output: 3}, // byte order: upper case first
		{Purpose: "reply", Calls: 3, Input: 600, CachedInput: 300, Output: 60},
		{Purpose: "review", Calls: 1, Input: 40, CachedInput: 20, Output: 4},
	}, s.Tokens)
	require.Equal(t, 2, s.Pending)

	s, err = d.Summarize(ctx, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.Equal(t, 4, s.Outcomes[outcome.Replied])
	require.Equal(t, "reply", s.Tokens[1].Purpose)
	require.Equal(t, 5, s.Tokens[1].Calls)
	require.Equal(t, 6600, s.Tokens[1].Input)

	s, err = d.Summarize(ctx, until.Add(time.Hour), until.Add(2*time.Hour))
	require.NoError(t, err)
	require.Empty(t, s.Outcomes)
	require.Empty(t, s.Tokens)
	require.Equal(t, 2, s.Pending, "pending whatever the range")

	_, err = d.Summarize(ctx, until, since)
	require.ErrorIs(t, err, inbound.ErrInvalidQuery)
}

func TestNewestEventTimes(t *testing.T) {
	clk := clock.NewFake(qt0)
	d := openQueue(t, pgtest.Schema(t), clk)
	ctx := t.Context()
	_, ok, err := d.NewestEventTime(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	a1 := qEvent(channel.Group, "a", "1", qt0.Add(time.Second), "x")
	a2 := qEvent(channel.Group, "a", "2", qt0.Add(3*time.Second), "x")
	b1 := qEvent(channel.Group, "b", "3", qt0.Add(5*time.Second), "x")
	qEnqueue(t, d, a1, a2, b1)
	at, ok, err := d.NewestEventTime(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, b1.Time.Equal(at))
	at, ok, err = d.NewestSessionEventTime(ctx, a1.SessionKey, qt0.Add(3*time.Second))
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, a1.Time.Equal(at), "strictly before")
	_, ok, err = d.NewestSessionEventTime(ctx, a1.SessionKey, qt0)
	require.NoError(t, err)
	require.False(t, ok)
}
