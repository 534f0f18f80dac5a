package memorytest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// RunHistory runs the memory.History conformance suite (and the
// memory.RecentViewer cases when the store implements it) against the
// stores open returns: a fresh, empty one per subtest, reading now from
// clk.
func RunHistory(t *testing.T, open func(t *testing.T, clk *clock.Fake) memory.History) {
	t.Helper()
	run(t, open, []testCase[memory.History]{
		{"RoundTripEveryField", testHistoryRoundTrip},
		{"RecentNewestOldestFirst", testHistoryRecentOrder},
		{"RecentLimit", testHistoryRecentLimit},
		{"AppendSameKeyUpdates", testHistoryAppendUpdates},
		{"MarkRecalled", testHistoryMarkRecalled},
		{"RecentViewMatchesRecent", testHistoryRecentView},
		{"ConcurrentAppendAndRecent", testHistoryConcurrent},
	})
}

// requireEntry asserts got is want as a store keeps it: event time at
// millisecond precision, every other field as written.
func requireEntry(t *testing.T, want, got memory.Entry) {
	t.Helper()
	require.Equal(t, want.Key, got.Key)
	require.Equal(t, want.SessionKey, got.SessionKey)
	require.Equal(t, want.Direction, got.Direction)
	sameTime(t, want.RecalledAt, got.RecalledAt, want.Key+" RecalledAt")
	sameTime(t, want.Event.Time, got.Event.Time, want.Key+" Event.Time")
	we, ge := want.Event, got.Event
	we.Time, ge.Time = time.Time{}, time.Time{}
	require.Equal(t, we, ge, "event of %s", want.Key)
}

func keysOf(es []memory.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key
	}
	return out
}

func recent(t *testing.T, h memory.History, session string, limit int) []memory.Entry {
	t.Helper()
	es, err := h.Recent(t.Context(), session, limit)
	require.NoError(t, err)
	return es
}

func testHistoryRoundTrip(t *testing.T, h *harness[memory.History]) {
	in := channel.Event{
		Platform: platform, Profile: "night-owl", BotID: bot, Kind: channel.KindMessage, Chat: groupA,
		SessionKey: sessionA, MessageID: "-42", Seq: 7, Time: Start.Add(123456789 * time.Nanosecond),
		Sender: channel.Sender{ID: "u1", Name: "小明 \"Ming\"", Role: channel.RoleAdmin, Level: 3, LevelKnown: true},
		Segments: []channel.Segment{
			channel.Quote("40"), channel.Mention(bot), channel.Text("早上好 good morning\n"),
			{Type: channel.SegLink, URL: "https://example.com/a?b=c", Text: "a link"},
			{Type: channel.SegFace, FaceID: "14"},
		},
		Quoted: &channel.Quoted{MessageID: "40", Sender: channel.Sender{ID: bot, Name: "Bot", IsBot: true},
			Text: "earlier", Segments: []channel.Segment{channel.Text("earlier")}, FromBot: true},
		ToMe: true, Source: channel.SourceBackfill, Raw: json.RawMessage(`{"post_type":"message","n":1}`),
	}
	out := channel.Event{
		Platform: platform, BotID: bot, Kind: channel.KindSelf, Chat: groupA, SessionKey: sessionA,
		MessageID: "43", Time: Start.Add(time.Second), Sender: channel.Sender{ID: bot, Name: "Bot"},
		Segments: []channel.Segment{channel.Text("hello")}, Source: channel.SourceLive,
	}
	notice := channel.Event{
		Platform: platform, BotID: bot, Kind: channel.KindNotice, Chat: groupA, SessionKey: sessionA,
		Time: Start.Add(2 * time.Second), Sender: channel.Sender{ID: "u2"},
		Notice: &channel.Notice{Type: channel.NoticePoke, Operator: "u2", UserID: bot},
	}
	want := []memory.Entry{entryOf(in), entryOf(out), entryOf(notice)}
	for _, e := range want {
		require.NoError(t, h.st.Append(t.Context(), e))
	}
	got := recent(t, h.st, sessionA, 10)
	require.Len(t, got, 3)
	for i := range want {
		requireEntry(t, want[i], got[i])
	}
	require.Empty(t, recent(t, h.st, sessionB, 10), "another session")
}

func testHistoryRecentOrder(t *testing.T, h *harness[memory.History]) {
	// Appended out of event-time order (a backfill), in two sessions.
	offsets := []int{3, 0, 4, 1, 2}
	want := make([]string, len(offsets))
	for _, o := range offsets {
		ev := message(groupA, fmt.Sprint(o), "u1", "", fmt.Sprintf("message %d", o), Start.Add(time.Duration(o)*time.Minute))
		want[o] = appendEvents(t, h.st, ev)[0]
		appendEvents(t, h.st, message(groupB, fmt.Sprint(o), "u1", "", "other", Start.Add(time.Duration(o)*time.Minute)))
	}
	require.Equal(t, want, keysOf(recent(t, h.st, sessionA, 5)))
	require.Equal(t, want[2:], keysOf(recent(t, h.st, sessionA, 3)), "the newest three, oldest first")
	require.Equal(t, want[4:], keysOf(recent(t, h.st, sessionA, 1)))
	for _, e := range recent(t, h.st, sessionB, 10) {
		require.Equal(t, sessionB, e.SessionKey)
	}
}

func testHistoryRecentLimit(t *testing.T, h *harness[memory.History]) {
	require.Empty(t, recent(t, h.st, sessionA, 10), "empty session")
	var keys []string
	for i := range 7 {
		keys = append(keys, appendEvents(t, h.st, message(groupA, fmt.Sprint(i), "u", "", "x", Start.Add(time.Duration(i)*time.Second)))...)
	}
	require.Equal(t, keys, keysOf(recent(t, h.st, sessionA, 100)), "fewer than the limit")
	require.Equal(t, keys, keysOf(recent(t, h.st, sessionA, 7)))
	require.Equal(t, keys[1:], keysOf(recent(t, h.st, sessionA, 6)))
	require.Empty(t, recent(t, h.st, sessionA, 0), "limit 0")
	require.Empty(t, recent(t, h.st, sessionA, -1), "negative limit")
	require.Empty(t, recent(t, h.st, "no such session", 5))
}

func testHistoryAppendUpdates(t *testing.T, h *harness[memory.History]) {
	ev := message(groupA, "1", "u1", "A", "first text", Start)
	appendEvents(t, h.st, ev, message(groupA, "2", "u2", "B", "second", Start.Add(time.Second)))
	ev.Segments = []channel.Segment{channel.Text("edited text")}
	ev.Sender.Name = "A2"
	e := entryOf(ev)
	require.NoError(t, h.st.Append(t.Context(), e))
	require.NoError(t, h.st.Append(t.Context(), e), "idempotent")
	got := recent(t, h.st, sessionA, 10)
	require.Len(t, got, 2, "an update adds no row")
	requireEntry(t, e, got[0])
	require.Equal(t, "edited text", got[0].Event.Text())
}

func testHistoryMarkRecalled(t *testing.T, h *harness[memory.History]) {
	keys := appendEvents(t, h.st,
		message(groupA, "1", "u1", "", "one", Start), message(groupA, "2", "u1", "", "two", Start.Add(time.Second)))
	at := Start.Add(time.Minute + 987654321*time.Nanosecond)
	require.NoError(t, h.st.MarkRecalled(t.Context(), keys[0], at))
	got := recent(t, h.st, sessionA, 10)
	require.Len(t, got, 2, "a recalled entry stays in the transcript")
	sameTime(t, at, got[0].RecalledAt, "RecalledAt")
	require.True(t, got[1].RecalledAt.IsZero(), "other entries untouched")
	// A recall notice may name a message that was never stored.
	require.NoError(t, h.st.MarkRecalled(t.Context(), "never/stored", at))
}

func testHistoryRecentView(t *testing.T, h *harness[memory.History]) {
	v, ok := h.st.(memory.RecentViewer)
	if !ok {
		t.Skip("the History does not implement memory.RecentViewer")
	}
	for i := range 6 {
		appendEvents(t, h.st, message(groupA, fmt.Sprint(i), "u", "", fmt.Sprint("m", i), Start.Add(time.Duration(i)*time.Second)))
	}
	for _, limit := range []int{1, 4, 6, 50} {
		// Twice: the second read may come from a cache the first filled.
		for range 2 {
			view, err := v.RecentView(t.Context(), sessionA, limit)
			require.NoError(t, err)
			want := recent(t, h.st, sessionA, limit)
			require.Len(t, view, len(want))
			for i := range want {
				requireEntry(t, want[i], view[i])
			}
			require.Equal(t, len(view), cap(view), "capacity ends at the length")
			_ = append(view, memory.Entry{Key: "appended"})
		}
	}
	view, err := v.RecentView(t.Context(), sessionA, 0)
	require.NoError(t, err)
	require.Empty(t, view)
	// Appending to a view did not change what the store holds.
	got, err := v.RecentView(t.Context(), sessionA, 50)
	require.NoError(t, err)
	require.Len(t, got, 6)
	require.NotContains(t, keysOf(got), "appended")
	// A later Append shows in the next view.
	k := appendEvents(t, h.st, message(groupA, "new", "u", "", "new", Start.Add(time.Minute)))[0]
	got, err = v.RecentView(t.Context(), sessionA, 2)
	require.NoError(t, err)
	require.Equal(t, k, got[1].Key)
}

func testHistoryConcurrent(t *testing.T, h *harness[memory.History]) {
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each*2)
	for w := range writers {
		chat := channel.Chat{Kind: channel.Group, ID: fmt.Sprint("c", w%2)}
		wg.Go(func() {
			for i := range each {
				ev := message(chat, fmt.Sprintf("%d-%d", w, i), fmt.Sprint("u", w), "", "hi",
					Start.Add(time.Duration(i*writers+w)*time.Millisecond))
				if err := h.st.Append(t.Context(), entryOf(ev)); err != nil {
					errs <- err
				}
				es, err := h.st.Recent(t.Context(), ev.SessionKey, 10)
				if err != nil {
					errs <- err
				} else if len(es) == 0 {
					errs <- fmt.Errorf("recent of %s empty after an append", ev.SessionKey)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for c := range 2 {
		session := channel.SessionKey("", platform, bot, channel.Chat{Kind: channel.Group, ID: fmt.Sprint("c", c)})
		es := recent(t, h.st, session, 1000)
		require.Len(t, es, writers/2*each)
		for i := 1; i < len(es); i++ {
			require.True(t, es[i-1].Event.Time.Before(es[i].Event.Time), "oldest first")
		}
	}
}
