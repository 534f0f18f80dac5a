package memorytest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
)

// RunSummaries runs the memory.SummaryStore conformance suite against the
// stores open returns (a fresh, empty one per subtest, reading now from
// clk). Messages are written through the store's memory.History.
func RunSummaries(t *testing.T, open func(t *testing.T, clk *clock.Fake) SummaryStore) {
	t.Helper()
	run(t, open, []testCase[SummaryStore]{
		{"RoundTripEveryField", testSummaryRoundTrip},
		{"LatestAndEpochs", testSummaryEpochs},
		{"SaveReplaces", testSummaryReplace},
		{"NotFound", testSummaryNotFound},
		{"MessagesAfter", testSummaryMessagesAfter},
		{"CountAfter", testSummaryCountAfter},
	})
}

func requireSummary(t *testing.T, want, got memory.Summary) {
	t.Helper()
	require.Equal(t, want.SessionKey, got.SessionKey)
	require.Equal(t, want.Epoch, got.Epoch)
	require.Equal(t, want.Text, got.Text)
	require.Equal(t, want.From.Key, got.From.Key)
	sameTime(t, want.From.Time, got.From.Time, "From.Time")
	require.Equal(t, want.From.IsZero(), got.From.IsZero(), "From zero-ness")
	require.Equal(t, want.Watermark.Key, got.Watermark.Key)
	sameTime(t, want.Watermark.Time, got.Watermark.Time, "Watermark.Time")
	require.Equal(t, want.Messages, got.Messages)
	require.Equal(t, want.Version, got.Version)
	require.Equal(t, want.InputHash, got.InputHash)
}

func summaryAt(session string, epoch int) memory.Summary {
	return memory.Summary{SessionKey: session, Epoch: epoch, Text: fmt.Sprintf("summary %d of %s", epoch, session),
		From:      memory.Watermark{Time: Start.Add(time.Duration(epoch-1) * time.Hour), Key: fmt.Sprint("k", epoch-1)},
		Watermark: memory.Watermark{Time: Start.Add(time.Duration(epoch) * time.Hour), Key: fmt.Sprint("k", epoch)},
		Messages:  10 * epoch, Version: 1, InputHash: fmt.Sprint("hash-", epoch)}
}

func save(t *testing.T, st memory.SummaryStore, s memory.Summary) {
	t.Helper()
	require.NoError(t, st.SaveSummary(t.Context(), s))
}

func testSummaryRoundTrip(t *testing.T, h *harness[SummaryStore]) {
	h.clk.Advance(1234 * time.Microsecond)
	first := memory.Summary{SessionKey: sessionA, Epoch: 1, Text: "大家讨论了周末去杭州的计划。\nThey agreed on Saturday.",
		Watermark: memory.Watermark{Time: Start.Add(-time.Minute + 456789*time.Nanosecond), Key: "testchat/bot1/group:g-a/99"},
		Messages:  40, Version: 3, InputHash: "sha256:00ff"}
	save(t, h.st, first)
	got, err := h.st.LatestSummary(t.Context(), sessionA)
	require.NoError(t, err)
	requireSummary(t, first, got)
	require.True(t, got.From.IsZero(), "the first epoch starts at the zero watermark")
	sameTime(t, h.clk.Now(), got.CreatedAt, "CreatedAt")
	sameTime(t, h.clk.Now(), got.UpdatedAt, "UpdatedAt")

	second := first
	second.Epoch, second.From, second.Text = 2, first.Watermark, "epoch two"
	second.Watermark = memory.Watermark{Time: Start.Add(time.Hour + 999*time.Microsecond), Key: "testchat/bot1/group:g-a/140"}
	save(t, h.st, second)
	got, err = h.st.SummaryAt(t.Context(), sessionA, 2)
	require.NoError(t, err)
	requireSummary(t, second, got)
	got, err = h.st.SummaryAt(t.Context(), sessionA, 1)
	require.NoError(t, err)
	requireSummary(t, first, got)
}

func testSummaryEpochs(t *testing.T, h *harness[SummaryStore]) {
	for _, e := range []int{2, 1, 3} {
		save(t, h.st, summaryAt(sessionA, e))
	}
	save(t, h.st, summaryAt(sessionB, 7))
	got, err := h.st.LatestSummary(t.Context(), sessionA)
	require.NoError(t, err)
	requireSummary(t, summaryAt(sessionA, 3), got)
	got, err = h.st.LatestSummary(t.Context(), sessionB)
	require.NoError(t, err)
	requireSummary(t, summaryAt(sessionB, 7), got)
	for e := 1; e <= 3; e++ {
		got, err := h.st.SummaryAt(t.Context(), sessionA, e)
		require.NoError(t, err)
		requireSummary(t, summaryAt(sessionA, e), got)
	}
}

func testSummaryReplace(t *testing.T, h *harness[SummaryStore]) {
	save(t, h.st, summaryAt(sessionA, 1))
	save(t, h.st, summaryAt(sessionA, 2))
	h.clk.Advance(time.Minute)
	s := summaryAt(sessionA, 2)
	s.Text, s.Messages, s.Version, s.InputHash = "recomputed", 25, 2, "hash-new"
	s.Watermark = memory.Watermark{Time: Start.Add(3 * time.Hour), Key: "k-new"}
	save(t, h.st, s)
	got, err := h.st.SummaryAt(t.Context(), sessionA, 2)
	require.NoError(t, err)
	requireSummary(t, s, got)
	sameTime(t, h.clk.Now(), got.UpdatedAt, "UpdatedAt")
	require.False(t, got.CreatedAt.After(got.UpdatedAt), "CreatedAt %s after UpdatedAt %s", got.CreatedAt, got.UpdatedAt)
	latest, err := h.st.LatestSummary(t.Context(), sessionA)
	require.NoError(t, err)
	requireSummary(t, s, latest)
	got, err = h.st.SummaryAt(t.Context(), sessionA, 1)
	require.NoError(t, err)
	requireSummary(t, summaryAt(sessionA, 1), got)
}

func testSummaryNotFound(t *testing.T, h *harness[SummaryStore]) {
	_, err := h.st.LatestSummary(t.Context(), sessionA)
	require.True(t, errors.Is(err, memory.ErrNotFound), "want memory.ErrNotFound, got %v", err)
	save(t, h.st, summaryAt(sessionA, 1))
	_, err = h.st.SummaryAt(t.Context(), sessionA, 2)
	require.True(t, errors.Is(err, memory.ErrNotFound), "want memory.ErrNotFound, got %v", err)
	_, err = h.st.SummaryAt(t.Context(), sessionB, 1)
	require.True(t, errors.Is(err, memory.ErrNotFound), "want memory.ErrNotFound, got %v", err)
	_, err = h.st.LatestSummary(t.Context(), sessionB)
	require.True(t, errors.Is(err, memory.ErrNotFound), "want memory.ErrNotFound, got %v", err)
}

// summaryHistory writes a session's history: five messages (two of them
// at the same time), a notice and a recalled message, plus a message of
// another session. It returns the chat messages' keys in history order.
func summaryHistory(t *testing.T, h *harness[SummaryStore]) []string {
	t.Helper()
	evs := []channel.Event{
		message(groupA, "a", "u1", "", "one", Start),
		message(groupA, "b", "u2", "", "two", Start.Add(time.Second)),
		message(groupA, "c", "u1", "", "three", Start.Add(2*time.Second)),
		message(groupA, "d", "u2", "", "four", Start.Add(2*time.Second)),
		message(groupA, "e", "u1", "", "five", Start.Add(3*time.Second)),
	}
	// Appended out of order, like a backfill.
	keys := appendEvents(t, h.st, evs[4], evs[0], evs[2], evs[1], evs[3])
	keys = []string{keys[1], keys[3], keys[2], keys[4], keys[0]}
	notice := channel.Event{Platform: platform, BotID: bot, Kind: channel.KindNotice, Chat: groupA, SessionKey: sessionA,
		Time: Start.Add(1500 * time.Millisecond), Sender: channel.Sender{ID: "u2"},
		Notice: &channel.Notice{Type: channel.NoticePoke, Operator: "u2", UserID: bot}}
	appendEvents(t, h.st, notice, message(groupB, "x", "u1", "", "elsewhere", Start.Add(time.Second)))
	require.NoError(t, h.st.MarkRecalled(t.Context(), keys[1], Start.Add(time.Minute)))
	return keys
}

func testSummaryMessagesAfter(t *testing.T, h *harness[SummaryStore]) {
	keys := summaryHistory(t, h)
	after := func(w memory.Watermark, limit int) []memory.Message {
		ms, err := h.st.MessagesAfter(t.Context(), sessionA, w, limit)
		require.NoError(t, err)
		return ms
	}
	msgKeys := func(ms []memory.Message) []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			require.Equal(t, sessionA, m.SessionKey)
			require.NotEqual(t, memory.Notice, m.Direction, "notices are excluded")
			out[i] = m.Key
		}
		return out
	}
	all := after(memory.Watermark{}, 100)
	require.Equal(t, keys, msgKeys(all), "from the start, oldest first, no notice")
	for i, m := range all {
		require.Equal(t, i == 1, m.Recalled, "%s Recalled", m.Key)
	}
	require.Equal(t, "two", all[1].Text, "a recalled message keeps its text")
	sameTime(t, Start.Add(time.Second), all[1].Time, "Time")
	require.Equal(t, keys[:2], msgKeys(after(memory.Watermark{}, 2)), "the oldest limit")
	require.Equal(t, keys[1:], msgKeys(after(memory.Watermark{Time: Start, Key: keys[0]}, 100)), "strictly after")
	require.Equal(t, keys[3:], msgKeys(after(memory.Watermark{Time: Start.Add(2 * time.Second), Key: keys[2]}, 100)),
		"a watermark between two messages of the same time")
	require.Equal(t, keys[2:], msgKeys(after(memory.Watermark{Time: Start.Add(time.Second), Key: keys[1]}, 100)))
	require.Equal(t, keys[2:3], msgKeys(after(memory.Watermark{Time: Start.Add(time.Second), Key: keys[1]}, 1)))
	require.Empty(t, after(memory.Watermark{Time: Start.Add(3 * time.Second), Key: keys[4]}, 100))
	require.Empty(t, after(memory.Watermark{}, 0), "limit 0")
	ms, err := h.st.MessagesAfter(t.Context(), "no such session", memory.Watermark{}, 10)
	require.NoError(t, err)
	require.Empty(t, ms)
}

func testSummaryCountAfter(t *testing.T, h *harness[SummaryStore]) {
	count := func(session string, w memory.Watermark) int {
		n, err := h.st.CountAfter(t.Context(), session, w)
		require.NoError(t, err)
		return n
	}
	require.Zero(t, count(sessionA, memory.Watermark{}))
	keys := summaryHistory(t, h)
	require.Equal(t, 5, count(sessionA, memory.Watermark{}), "notices are not counted, recalled messages are")
	require.Equal(t, 4, count(sessionA, memory.Watermark{Time: Start, Key: keys[0]}))
	require.Equal(t, 2, count(sessionA, memory.Watermark{Time: Start.Add(2 * time.Second), Key: keys[2]}))
	require.Equal(t, 1, count(sessionA, memory.Watermark{Time: Start.Add(2 * time.Second), Key: keys[3]}))
	require.Zero(t, count(sessionA, memory.Watermark{Time: Start.Add(3 * time.Second), Key: keys[4]}))
	require.Equal(t, 1, count(sessionB, memory.Watermark{}))
	// Counting agrees with listing from every watermark.
	all, err := h.st.MessagesAfter(t.Context(), sessionA, memory.Watermark{}, 100)
	require.NoError(t, err)
	for i, m := range all {
		require.Equal(t, len(all)-i-1, count(sessionA, memory.Watermark{Time: m.Time, Key: m.Key}), "after %s", m.Key)
	}
}
