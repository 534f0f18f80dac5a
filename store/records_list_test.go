package store

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// listIDs lists the ids of records, in order.
func listIDs(rs []inbound.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// completeOne enqueues ev, claims it (alone: nothing else may be pending)
// and completes it with o.
func completeOne(t testing.TB, d *DB, ev channel.Event, o inbound.Outcome) {
	t.Helper()
	enqueue(t, d, ev)
	ls, err := d.Claim(t.Context(), inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, ev.Key(), ls[0].ID)
	require.NoError(t, d.Complete(t.Context(), ls[0], o))
}

func TestListRecordsFilters(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()

	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	evA1 := testEvent(channel.Group, "a", "1", at(1), "Hello WORLD")
	evA2 := testEvent(channel.Group, "a", "2", at(2), "100%_done")
	evB3 := testEvent(channel.Group, "b", "3", at(3), "1000 done")
	evB3.Sender.ID = evA1.Sender.ID
	evB4 := testEvent(channel.Private, "b", "4", at(4), "worldly <img src=x>")
	evA5 := testEvent(channel.Group, "a", "5", at(5), "still waiting")
	evA6 := testEvent(channel.Group, "a", "6", at(6), "being worked on")
	evA7 := testEvent(channel.Group, "a", "7", at(7), "held in memory")

	completeOne(t, d, evA1, inbound.Outcome{Code: outcome.Replied, Reason: "mention"})
	completeOne(t, d, evA2, inbound.Outcome{Code: "ignored_sampled_out"})
	_, err := d.Record(ctx, inbound.Item{Event: evB3}, inbound.Outcome{Code: inbound.IgnoredStale})
	require.NoError(t, err)
	completeOne(t, d, evB4, inbound.Outcome{Code: outcome.Replied})
	// evA6 is leased with its claim stored, evA7 with its claim held in
	// memory only, evA5 waits.
	enqueue(t, d, evA6)
	ls, err := d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	enqueue(t, d, evA7)
	ls, err = d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w", HoldBelow: inbound.PriorityDirect})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.True(t, ls[0].Held)
	enqueue(t, d, evA5)

	key := func(evs ...channel.Event) []string {
		out := make([]string, len(evs))
		for i := range evs {
			out[i] = evs[i].Key()
		}
		return out
	}
	cases := []struct {
		name string
		q    inbound.RecordQuery
		want []string
	}{
		{"all, newest first", inbound.RecordQuery{}, key(evA7, evA6, evA5, evB4, evB3, evA2, evA1)},
		{"session", inbound.RecordQuery{SessionKey: evB3.SessionKey}, key(evB3)},
		{"private session", inbound.RecordQuery{SessionKey: evB4.SessionKey}, key(evB4)},
		{"sender", inbound.RecordQuery{SenderID: evA1.Sender.ID}, key(evB3, evA1)},
		{"code", inbound.RecordQuery{Code: outcome.Replied}, key(evB4, evA1)},
		{"code and session", inbound.RecordQuery{Code: outcome.Replied, SessionKey: evA1.SessionKey}, key(evA1)},
		{"text, any case", inbound.RecordQuery{Text: "world"}, key(evB4, evA1)},
		{"text upper case", inbound.RecordQuery{Text: "HELLO w"}, key(evA1)},
		{"text with % is literal", inbound.RecordQuery{Text: "0%"}, key(evA2)},
		{"text with _ is literal", inbound.RecordQuery{Text: "_d"}, key(evA2)},
		{"text with markup", inbound.RecordQuery{Text: "<IMG"}, key(evB4)},
		{"text not found", inbound.RecordQuery{Text: "nothing like it"}, nil},
		{"since", inbound.RecordQuery{Since: at(5)}, key(evA7, evA6, evA5)},
		{"until", inbound.RecordQuery{Until: at(3)}, key(evA2, evA1)},
		{"range", inbound.RecordQuery{Since: at(2), Until: at(4)}, key(evB3, evA2)},
		{"pending", inbound.RecordQuery{Status: inbound.StatusPending}, key(evA5)},
		{"leased, stored or held", inbound.RecordQuery{Status: inbound.StatusLeased}, key(evA7, evA6)},
		{"done", inbound.RecordQuery{Status: inbound.StatusDone}, key(evB4, evB3, evA2, evA1)},
		{"done in a session", inbound.RecordQuery{Status: inbound.StatusDone, SessionKey: evA1.SessionKey}, key(evA2, evA1)},
		{"everything at once", inbound.RecordQuery{SessionKey: evA1.SessionKey, SenderID: evA1.Sender.ID,
			Code: outcome.Replied, Text: "hello", Since: at(1), Until: at(2), Status: inbound.StatusDone}, key(evA1)},
	}
	for _, tc := range cases {
		page, err := d.ListRecords(ctx, tc.q)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, nilIfEmpty(listIDs(page.Records)), tc.name)
		require.Empty(t, page.Next, tc.name)
	}

	// The records carry what the listing shows.
	page, err := d.ListRecords(ctx, inbound.RecordQuery{SessionKey: evA1.SessionKey, Code: outcome.Replied})
	require.NoError(t, err)
	r := page.Records[0]
	require.Equal(t, "Hello WORLD", r.Text)
	require.Equal(t, evA1.Sender.ID, r.SenderID)
	require.Equal(t, "mention", r.Outcome.Reason)
	require.Equal(t, inbound.StatusDone, r.Status)
	require.True(t, at(1).Equal(r.EventTime))
	page, err = d.ListRecords(ctx, inbound.RecordQuery{Status: inbound.StatusLeased})
	require.NoError(t, err)
	for _, r := range page.Records {
		require.Equal(t, inbound.StatusLeased, r.Status, "the held claim is shown as the index has it")
		require.Equal(t, 1, r.Attempts)
	}

	// Bad filters.
	for _, q := range []inbound.RecordQuery{{Code: "Not A Code"}, {Status: "sleeping"}} {
		_, err := d.ListRecords(ctx, q)
		require.ErrorIs(t, err, ErrInvalid)
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestListRecordsPaging(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()

	// 120 records over two sessions; groups of three share an event time,
	// so the id breaks ties across page ends.
	var want []string
	for i := range 120 {
		ev := testEvent(channel.Group, []string{"a", "b"}[i%2], fmt.Sprintf("m%03d", i),
			t0.Add(time.Duration(i/3)*time.Second), "text")
		_, err := d.Record(ctx, inbound.Item{Event: ev}, inbound.Outcome{Code: outcome.Replied})
		require.NoError(t, err)
		want = append(want, ev.Key())
	}
	// Newest first, the id descending within an event time.
	slices.SortFunc(want, func(a, b string) int {
		ra, _ := d.Lookup(ctx, a)
		rb, _ := d.Lookup(ctx, b)
		if c := rb.EventTime.Compare(ra.EventTime); c != 0 {
			return c
		}
		return strings.Compare(b, a)
	})

	for _, limit := range []int{1, 7, 50, 119, 120, 500} {
		var got []string
		q := inbound.RecordQuery{Limit: limit}
		pages := 0
		for {
			page, err := d.ListRecords(ctx, q)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page.Records), limit)
			got = append(got, listIDs(page.Records)...)
			pages++
			if page.Next == "" {
				break
			}
			require.Len(t, page.Records, limit, "only the last page is short")
			q.Before = page.Next
			if limit == 7 && pages == 3 {
				// A record that arrives while paging, newer than the
				// cursor, does not disturb the pages still to come.
				newer := testEvent(channel.Group, "a", "new", t0.Add(time.Hour), "late")
				_, err := d.Record(ctx, inbound.Item{Event: newer}, inbound.Outcome{Code: outcome.Replied})
				require.NoError(t, err)
			}
		}
		if limit == 7 {
			require.Equal(t, want, got, "limit %d: every record once, in order", limit)
			continue
		}
		// From limit 50 on the late record (an hour newer) leads the list.
		if got[0] != want[0] {
			require.Equal(t, want, got[1:], "limit %d", limit)
		} else {
			require.Equal(t, want, got, "limit %d", limit)
		}
		wantPages := (len(got) + limit - 1) / limit
		require.Equal(t, wantPages, pages, "limit %d", limit)
	}

	// Filters hold across pages.
	var got []string
	q := inbound.RecordQuery{SessionKey: testEvent(channel.Group, "b", "x", t0, "").SessionKey, Limit: 11}
	for {
		page, err := d.ListRecords(ctx, q)
		require.NoError(t, err)
		got = append(got, listIDs(page.Records)...)
		if page.Next == "" {
			break
		}
		q.Before = page.Next
	}
	require.Len(t, got, 60)
	for _, id := range got {
		require.Contains(t, id, "group:b/")
	}

	// The default page is 50.
	page, err := d.ListRecords(ctx, inbound.RecordQuery{})
	require.NoError(t, err)
	require.Len(t, page.Records, inbound.DefaultRecordPage)
	require.NotEmpty(t, page.Next)
}

func TestListRecordsPageCap(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, inbound.MaxRecordPage+5)
	for i := range inbound.MaxRecordPage + 5 {
		wg.Go(func() {
			ev := testEvent(channel.Group, "a", fmt.Sprint(i), t0.Add(time.Duration(i)*time.Millisecond), "x")
			_, err := d.Record(ctx, inbound.Item{Event: ev}, inbound.Outcome{Code: outcome.Replied})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	page, err := d.ListRecords(ctx, inbound.RecordQuery{Limit: 10_000})
	require.NoError(t, err)
	require.Len(t, page.Records, inbound.MaxRecordPage)
	require.NotEmpty(t, page.Next)
	page, err = d.ListRecords(ctx, inbound.RecordQuery{Limit: 10_000, Before: page.Next})
	require.NoError(t, err)
	require.Len(t, page.Records, 5)
	require.Empty(t, page.Next)
}

func TestListRecordsBadCursor(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{"!!!", "a b", b64("no separator"), b64("notanumber:id"), b64("123:"), b64(":id")} {
		_, err := d.ListRecords(t.Context(), inbound.RecordQuery{Before: c})
		require.ErrorIs(t, err, ErrInvalid, "cursor %q", c)
	}
	// A well-formed cursor of a record that does not exist is a position.
	page, err := d.ListRecords(t.Context(), inbound.RecordQuery{Before: encodeListCursor(ms(t0), "zzz")})
	require.NoError(t, err)
	require.Empty(t, page.Records)
}

func TestCompletedAfter(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()

	head, err := d.FeedHead(ctx)
	require.NoError(t, err)
	require.Empty(t, head)
	recs, cur, err := d.CompletedAfter(ctx, "", 10)
	require.NoError(t, err)
	require.Empty(t, recs)
	require.Empty(t, cur, "no record: the cursor stays")

	// Three items claimed together; the clock does not move, so two of them
	// complete in the same millisecond. Completion order is not event order.
	var evs []channel.Event
	for i := range 3 {
		ev := testEvent(channel.Group, fmt.Sprint("c", i), fmt.Sprint(i), t0.Add(time.Duration(i)*time.Second), "x")
		enqueue(t, d, ev)
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
	// A record that is done from the start joins the feed too.
	rec := testEvent(channel.Group, "c9", "9", t0, "x")
	_, err = d.Record(ctx, inbound.Item{Event: rec}, inbound.Outcome{Code: inbound.IgnoredStale})
	require.NoError(t, err)
	clk.Advance(time.Millisecond)
	require.NoError(t, d.Complete(ctx, byID[evs[1].Key()], inbound.Outcome{Code: outcome.Replied}))
	order := []string{evs[2].Key(), evs[0].Key(), rec.Key(), evs[1].Key()}

	recs, cur, err = d.CompletedAfter(ctx, "", 0)
	require.NoError(t, err)
	require.Equal(t, order, listIDs(recs))
	require.Equal(t, "4", cur)
	require.Equal(t, outcome.Code("ignored_sampled_out"), recs[1].Outcome.Code)
	head, err = d.FeedHead(ctx)
	require.NoError(t, err)
	require.Equal(t, cur, head)

	// One at a time, from each cursor: no repeats, no gaps, even across the
	// records completed in the same millisecond.
	var got []string
	cur = ""
	for {
		recs, next, err := d.CompletedAfter(ctx, cur, 1)
		require.NoError(t, err)
		if len(recs) == 0 {
			require.Equal(t, cur, next)
			break
		}
		require.Len(t, recs, 1)
		require.NotEqual(t, cur, next)
		got = append(got, recs[0].ID)
		cur = next
	}
	require.Equal(t, order, got)

	// The feed continues after the head as new records complete.
	enqueue(t, d, testEvent(channel.Group, "c5", "5", t0, "x"))
	ls, err = d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	require.NoError(t, d.Complete(ctx, ls[0], inbound.Outcome{Code: outcome.Replied}))
	recs, cur, err = d.CompletedAfter(ctx, head, 10)
	require.NoError(t, err)
	require.Equal(t, []string{ls[0].ID}, listIDs(recs))
	require.Equal(t, "5", cur)

	// The read goes through the completion index.
	require.Contains(t, queryPlan(t, d, sqlCompletedAfter, 0, 10), "inbound_items_completed")
	require.Contains(t, queryPlan(t, d,
		`SELECT max(completed_seq) FROM inbound_items WHERE completed_seq IS NOT NULL`), "inbound_items_completed")

	for _, c := range []string{"x", "-1", "1.5", "9999999999999999999999"} {
		_, same, err := d.CompletedAfter(ctx, c, 10)
		require.ErrorIs(t, err, ErrInvalid, "cursor %q", c)
		require.Equal(t, c, same)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	d := open(t, clk)
	ctx := t.Context()

	tokens := func(pairs ...any) []inbound.Tokens {
		var out []inbound.Tokens
		for i := 0; i < len(pairs); i += 2 {
			n := pairs[i+1].(int)
			out = append(out, inbound.Tokens{Purpose: pairs[i].(string), Model: "m", Input: n, CachedInput: n / 2, Output: n / 10})
		}
		return out
	}
	// Before the range.
	completeOne(t, d, testEvent(channel.Group, "a", "0", t0, "x"),
		inbound.Outcome{Code: outcome.Replied, Tokens: tokens("reply", 1000)})
	clk.Advance(time.Hour)
	since := clk.Now()
	completeOne(t, d, testEvent(channel.Group, "a", "1", t0, "x"),
		inbound.Outcome{Code: outcome.Replied, Tokens: tokens("reply", 100, "review", 40)})
	clk.Advance(time.Minute)
	completeOne(t, d, testEvent(channel.Group, "a", "2", t0, "x"),
		inbound.Outcome{Code: outcome.Replied, Tokens: tokens("reply", 200, "reply", 300, "router", 20)})
	_, err := d.Record(ctx, inbound.Item{Event: testEvent(channel.Group, "a", "3", t0, "x")},
		inbound.Outcome{Code: inbound.IgnoredStale})
	require.NoError(t, err)
	clk.Advance(time.Minute)
	completeOne(t, d, testEvent(channel.Group, "a", "4", t0, "x"),
		inbound.Outcome{Code: "ignored_sampled_out", Tokens: tokens("router", 10)})
	clk.Advance(time.Minute)
	until := clk.Now()
	// At the end of the range: not counted.
	completeOne(t, d, testEvent(channel.Group, "a", "5", t0, "x"),
		inbound.Outcome{Code: outcome.Replied, Tokens: tokens("reply", 5000)})
	// Live items: one waiting, one leased (stored), one held in memory.
	for i := range 3 {
		enqueue(t, d, testEvent(channel.Group, fmt.Sprint("live", i), "l", t0, "x"))
	}
	_, err = d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w"})
	require.NoError(t, err)
	_, err = d.Claim(ctx, inbound.Limits{Max: 1, Owner: "w", HoldBelow: inbound.PriorityDirect})
	require.NoError(t, err)

	s, err := d.Summarize(ctx, since, until)
	require.NoError(t, err)
	require.True(t, since.Equal(s.Since))
	require.True(t, until.Equal(s.Until))
	require.Equal(t, map[outcome.Code]int{outcome.Replied: 2, inbound.IgnoredStale: 1, "ignored_sampled_out": 1}, s.Outcomes)
	require.Equal(t, []inbound.TokenTotal{
		{Purpose: "reply", Calls: 3, Input: 600, CachedInput: 300, Output: 60},
		{Purpose: "review", Calls: 1, Input: 40, CachedInput: 20, Output: 4},
		{Purpose: "router", Calls: 2, Input: 30, CachedInput: 15, Output: 3},
	}, s.Tokens)
	require.Equal(t, 3, s.Pending)

	// Open ends count everything.
	s, err = d.Summarize(ctx, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.Equal(t, 4, s.Outcomes[outcome.Replied])
	require.Equal(t, 5, s.Tokens[0].Calls)
	require.Equal(t, 6600, s.Tokens[0].Input)

	// An empty range.
	s, err = d.Summarize(ctx, until.Add(time.Hour), until.Add(2*time.Hour))
	require.NoError(t, err)
	require.Empty(t, s.Outcomes)
	require.Empty(t, s.Tokens)
	require.Equal(t, 3, s.Pending, "pending whatever the range")

	_, err = d.Summarize(ctx, until, since)
	require.ErrorIs(t, err, ErrInvalid)
}

// queryPlan returns the details of q's query plan, one step a line.
func queryPlan(t *testing.T, d *DB, q string, args ...any) string {
	t.Helper()
	rows, err := d.rdb.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	var steps []string
	for rows.Next() {
		var (
			id, parent, unused int
			detail             string
		)
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		steps = append(steps, detail)
	}
	require.NoError(t, rows.Err())
	return strings.Join(steps, "\n")
}

// BenchmarkRecordReader measures the event center's reads on a log of
// 20,000 records over 50 sessions: a listing page (the whole log, one
// session, a text filter), the live feed's read of one record after a
// cursor, and a summary of everything.
func BenchmarkRecordReader(b *testing.B) {
	d := open(b, clock.NewFake(t0))
	ctx := b.Context()
	const n = 20_000
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				ev := testEvent(channel.Group, fmt.Sprint("s", i%50), fmt.Sprint(i), t0.Add(time.Duration(i)*time.Second),
					fmt.Sprintf("message number %d", i))
				_, err := d.Record(ctx, inbound.Item{Event: ev}, inbound.Outcome{Code: outcome.Replied,
					Tokens: []inbound.Tokens{{Purpose: "reply", Input: 100, CachedInput: 50, Output: 10}}})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	session := testEvent(channel.Group, "s7", "x", t0, "").SessionKey
	b.Run("list-all", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.ListRecords(ctx, inbound.RecordQuery{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("list-session", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.ListRecords(ctx, inbound.RecordQuery{SessionKey: session}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("list-text", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.ListRecords(ctx, inbound.RecordQuery{Text: "NUMBER 1234"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("completed-after", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := d.CompletedAfter(ctx, "19000", 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("summarize", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.Summarize(ctx, time.Time{}, time.Time{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
