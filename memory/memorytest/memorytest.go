package memorytest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// Start is the fake clock's start time in every subtest.
var Start = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// SearchStore is what [RunSearch] needs: a history to write messages
// through and the search over them.
type SearchStore interface {
	memory.History
	memory.HistorySearch
}

// SummaryStore is what [RunSummaries] needs: a history to write messages
// through and the summary store reading them.
type SummaryStore interface {
	memory.History
	memory.SummaryStore
}

// testCase is one named subtest of a suite over a port P.
type testCase[P any] struct {
	name string
	fn   func(t *testing.T, h *harness[P])
}

// harness bundles a store under test with its fake clock.
type harness[P any] struct {
	st  P
	clk *clock.Fake
}

// run runs every case as a parallel subtest on a fresh store.
func run[P any](t *testing.T, open func(t *testing.T, clk *clock.Fake) P, cases []testCase[P]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(Start)
			st := open(t, clk)
			require.NotNil(t, any(st), "open returned nil")
			tc.fn(t, &harness[P]{st: st, clk: clk})
		})
	}
}

// ms truncates t to the millisecond, in UTC; the zero time stays zero.
func ms(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// sameTime asserts two instants are equal at millisecond precision (a
// store may keep more), and that a zero time stays zero.
func sameTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.Equalf(t, want.IsZero(), got.IsZero(), "%s: zero-ness: want %s, got %s", what, want, got)
	require.Truef(t, ms(want).Equal(ms(got)), "%s: want %s, got %s", what, want, got)
}

// The chats and sessions the suites write to.
var (
	groupA   = channel.Chat{Kind: channel.Group, ID: "g-a"}
	groupB   = channel.Chat{Kind: channel.Group, ID: "g-b"}
	sessionA = channel.SessionKey("", platform, bot, groupA)
	sessionB = channel.SessionKey("", platform, bot, groupB)
)

const (
	platform = "testchat"
	bot      = "bot1"
)

// message is a text message event in chat from sender at the given time.
func message(chat channel.Chat, id, sender, name, text string, at time.Time) channel.Event {
	ev := channel.Event{
		Platform: platform, BotID: bot, Kind: channel.KindMessage, Chat: chat, MessageID: id, Time: at,
		Sender:   channel.Sender{ID: sender, Name: name},
		Segments: []channel.Segment{channel.Text(text)},
	}
	ev.SessionKey = channel.SessionKey("", platform, bot, chat)
	return ev
}

// entryOf is the history entry of ev, its direction from its kind.
func entryOf(ev channel.Event) memory.Entry {
	dir := memory.In
	switch ev.Kind {
	case channel.KindSelf:
		dir = memory.Out
	case channel.KindNotice:
		dir = memory.Notice
	}
	return memory.Entry{Key: ev.Key(), SessionKey: ev.SessionKey, Direction: dir, Event: ev}
}

// appendEvents appends the events as entries and returns their keys.
func appendEvents(t *testing.T, h memory.History, evs ...channel.Event) []string {
	t.Helper()
	keys := make([]string, len(evs))
	for i, ev := range evs {
		e := entryOf(ev)
		require.NoError(t, h.Append(t.Context(), e))
		keys[i] = e.Key
	}
	return keys
}
