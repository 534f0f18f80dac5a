package inbound

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

var jt0 = time.Date(2026, 5, 6, 7, 8, 9, 123_000_000, time.UTC)

// journalItemN is a distinct, valid item with an empty ID.
func journalItemN(n int) Item {
	return Item{
		Event: channel.Event{
			Platform:  "onebot",
			BotID:     "10001",
			Kind:      channel.KindMessage,
			Chat:      channel.Chat{Kind: channel.Group, ID: "g1"},
			MessageID: fmt.Sprint(n),
			Time:      jt0.Add(time.Duration(n) * time.Second),
			Sender:    channel.Sender{ID: "u1", Name: "Alice"},
			Segments:  []channel.Segment{channel.Text(fmt.Sprint("message ", n))},
			Source:    channel.SourceLive,
		},
		Priority: PriorityOther,
	}
}

func openTestJournal(t *testing.T, path string) *FileJournal {
	t.Helper()
	j, err := OpenJournal(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })
	return j
}

func pendingIDs(t *testing.T, j Journal) []string {
	t.Helper()
	items, err := j.Pending(t.Context())
	require.NoError(t, err)
	ids := []string{}
	for _, it := range items {
		ids = append(ids, it.ID)
	}
	return ids
}

func keyOf(n int) string {
	it := journalItemN(n)
	return it.Event.Key()
}

// fileLines returns the file's lines, requiring each to be a valid record.
func fileLines(t *testing.T, path string) []journalRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var recs []journalRecord
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var rec journalRecord
		require.True(t, decodeRecord(sc.Bytes(), &rec), "line %q", sc.Text())
		recs = append(recs, rec)
	}
	require.NoError(t, sc.Err())
	if len(b) > 0 {
		require.Equal(t, byte('\n'), b[len(b)-1], "the file ends with a complete line")
	}
	return recs
}

func TestFileJournalAppendPendingRemove(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j := openTestJournal(t, path)
	ctx := t.Context()

	require.Empty(t, pendingIDs(t, j))
	for n := 1; n <= 3; n++ {
		require.NoError(t, j.Append(ctx, journalItemN(n)))
	}
	withID := journalItemN(4)
	withID.ID = "custom-id"
	require.NoError(t, j.Append(ctx, withID))
	require.Equal(t, []string{keyOf(1), keyOf(2), keyOf(3), "custom-id"}, pendingIDs(t, j), "append order, ids filled from Key")

	require.NoError(t, j.Remove(ctx, keyOf(2), "unknown", keyOf(2)))
	require.Equal(t, []string{keyOf(1), keyOf(3), "custom-id"}, pendingIDs(t, j))
	require.NoError(t, j.Remove(ctx), "no ids")
	require.NoError(t, j.Remove(ctx, "unknown"), "unknown ids are ignored")

	// Reopen keeps the pending entries, in order.
	require.NoError(t, j.Close())
	j2 := openTestJournal(t, path)
	require.Equal(t, []string{keyOf(1), keyOf(3), "custom-id"}, pendingIDs(t, j2))
	require.NoError(t, j2.Append(ctx, journalItemN(5)))
	require.Equal(t, []string{keyOf(1), keyOf(3), "custom-id", keyOf(5)}, pendingIDs(t, j2))
}

func TestFileJournalRoundTrip(t *testing.T) {
	t.Parallel()
	full := journalItemN(1)
	full.ID = "id-1"
	full.SessionKey = "default:onebot:10001:group:g1"
	full.Priority = PriorityDirect
	full.HistoryOnly = true
	full.AvailableAt = jt0.Add(15 * time.Second)
	full.Event.Seq = 77
	full.Event.ToMe = true
	full.Event.Segments = append(full.Event.Segments, channel.Mention("10001"), channel.Image(channel.Media{URL: "https://x/y.png", Size: 12}))
	full.Event.Quoted = &channel.Quoted{MessageID: "0", Sender: channel.Sender{ID: "bot"}, Text: "earlier", FromBot: true}
	full.Event.Time = time.Date(2026, 5, 6, 7, 8, 9, 123_456_789, time.FixedZone("", 8*3600)).UTC()

	tests := []struct {
		name string
		raw  json.RawMessage
	}{
		{"no raw", nil},
		{"json raw", json.RawMessage(`{"post_type":"message","message_id":-12}`)},
		{"non-json raw", json.RawMessage("\x00\xffnot json {")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "j")
			j := openTestJournal(t, path)
			it := full
			it.Event.Raw = tc.raw
			require.NoError(t, j.Append(t.Context(), it))
			got, err := j.Pending(t.Context())
			require.NoError(t, err)
			require.Equal(t, []Item{it}, got)

			require.NoError(t, j.Close())
			j2 := openTestJournal(t, path)
			got, err = j2.Pending(t.Context())
			require.NoError(t, err)
			require.Equal(t, []Item{it}, got, "after reopen")
		})
	}
}

func TestFileJournalPendingReturnsCopies(t *testing.T) {
	t.Parallel()
	j := openTestJournal(t, filepath.Join(t.TempDir(), "j"))
	it := journalItemN(1)
	require.NoError(t, j.Append(t.Context(), it))
	it.Event.Segments[0].Text = "changed by the caller"
	got, err := j.Pending(t.Context())
	require.NoError(t, err)
	require.Equal(t, "message 1", got[0].Event.Text())
	got[0].Event.Segments[0].Text = "changed again"
	got, err = j.Pending(t.Context())
	require.NoError(t, err)
	require.Equal(t, "message 1", got[0].Event.Text())
}

func TestFileJournalAppendSameIDReplacesInPlace(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	j := openTestJournal(t, path)
	ctx := t.Context()
	require.NoError(t, j.Append(ctx, journalItemN(1)))
	require.NoError(t, j.Append(ctx, journalItemN(2)))
	again := journalItemN(1)
	again.Priority = PriorityDirect
	require.NoError(t, j.Append(ctx, again))

	check := func(j Journal) {
		items, err := j.Pending(ctx)
		require.NoError(t, err)
		require.Len(t, items, 2)
		require.Equal(t, keyOf(1), items[0].ID, "keeps its place")
		require.Equal(t, PriorityDirect, items[0].Priority, "latest content")
	}
	check(j)
	require.NoError(t, j.Close())
	check(openTestJournal(t, path))
}

func TestFileJournalTornTail(t *testing.T) {
	t.Parallel()
	line, err := encodeRecord(journalRecord{Op: opAdd, ID: "torn", Item: &journalItem{Event: journalItemN(9).Event}})
	require.NoError(t, err)
	tests := []struct {
		name string
		tail []byte
	}{
		{"half a line", line[:len(line)/2]},
		{"complete json without newline", line[:len(line)-1]},
		{"garbage line", []byte("{\"op\":\"add\",\"id\":\n")},
		{"zero fill", make([]byte, 300)},
		{"garbage line then fragment", []byte("}}}\n{\"op\"")},
		{"unknown op", []byte("{\"op\":\"frobnicate\"}\n")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "j")
			j := openTestJournal(t, path)
			ctx := t.Context()
			require.NoError(t, j.Append(ctx, journalItemN(1)))
			require.NoError(t, j.Append(ctx, journalItemN(2)))
			require.NoError(t, j.Remove(ctx, keyOf(1)))
			require.NoError(t, j.Close())

			// A crash in the middle of the next write.
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write(tc.tail)
			require.NoError(t, err)
			require.NoError(t, f.Close())

			j2 := openTestJournal(t, path)
			require.Equal(t, []string{keyOf(2)}, pendingIDs(t, j2), "the torn line is ignored")
			require.NoError(t, j2.Append(ctx, journalItemN(3)))
			require.NoError(t, j2.Close())
			require.Len(t, fileLines(t, path), 4, "the tail was cut before appending")

			j3 := openTestJournal(t, path)
			require.Equal(t, []string{keyOf(2), keyOf(3)}, pendingIDs(t, j3))
		})
	}
}

func TestFileJournalCorruptMiddle(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	j := openTestJournal(t, path)
	require.NoError(t, j.Append(t.Context(), journalItemN(1)))
	require.NoError(t, j.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	good := append([]byte(nil), b...)
	require.NoError(t, os.WriteFile(path, append(append([]byte("not json\n"), good...), good...), 0o600))

	_, err = OpenJournal(path)
	require.ErrorIs(t, err, ErrJournalCorrupt)
	require.ErrorContains(t, err, "line 1")
}

func TestFileJournalBlankLinesAndEmptyFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	j := openTestJournal(t, path)
	require.Empty(t, pendingIDs(t, j))
	require.NoError(t, j.Append(t.Context(), journalItemN(1)))
	require.NoError(t, j.Close())

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("\n\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	j2 := openTestJournal(t, path)
	require.NoError(t, j2.Append(t.Context(), journalItemN(2)))
	require.NoError(t, j2.Close())
	require.Equal(t, []string{keyOf(1), keyOf(2)}, pendingIDs(t, openTestJournal(t, path)))
}

func TestFileJournalCompaction(t *testing.T) {
	t.Parallel()
	size := func(t *testing.T, path string) int64 {
		info, err := os.Stat(path)
		require.NoError(t, err)
		return info.Size()
	}

	t.Run("empty after the last remove", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "j")
		j := openTestJournal(t, path)
		ctx := t.Context()
		for n := range 3 {
			require.NoError(t, j.Append(ctx, journalItemN(n)))
		}
		require.NoError(t, j.Remove(ctx, keyOf(0), keyOf(1)))
		require.Len(t, fileLines(t, path), 4, "3 adds and a tombstone, no compaction yet")
		require.NoError(t, j.Remove(ctx, keyOf(2)))
		require.Zero(t, size(t, path))
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1, "no temporary file left")

		// The journal keeps working on the compacted file.
		require.NoError(t, j.Append(ctx, journalItemN(7)))
		require.NoError(t, j.Close())
		require.Equal(t, []string{keyOf(7)}, pendingIDs(t, openTestJournal(t, path)))
	})

	t.Run("past the threshold when mostly dead", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "j")
		j := openTestJournal(t, path)
		j.compactAt = 2048
		ctx := t.Context()
		for n := range 10 {
			require.NoError(t, j.Append(ctx, journalItemN(n)))
		}
		require.Greater(t, size(t, path), int64(2048))
		// Removing a few leaves the file mostly live: no compaction.
		require.NoError(t, j.Remove(ctx, keyOf(0), keyOf(1)))
		require.Len(t, fileLines(t, path), 11)
		// Removing most: compacted down to the live adds.
		require.NoError(t, j.Remove(ctx, keyOf(2), keyOf(3), keyOf(4), keyOf(5), keyOf(6)))
		recs := fileLines(t, path)
		require.Len(t, recs, 3)
		for _, r := range recs {
			require.Equal(t, opAdd, r.Op)
		}
		require.Equal(t, []string{keyOf(7), keyOf(8), keyOf(9)}, pendingIDs(t, j))

		require.NoError(t, j.Append(ctx, journalItemN(10)))
		require.NoError(t, j.Remove(ctx, keyOf(8)))
		require.NoError(t, j.Close())
		require.Equal(t, []string{keyOf(7), keyOf(9), keyOf(10)}, pendingIDs(t, openTestJournal(t, path)))
	})
}

func TestFileJournalClosedAndCancelled(t *testing.T) {
	t.Parallel()
	j, err := OpenJournal(filepath.Join(t.TempDir(), "j"))
	require.NoError(t, err)
	require.NoError(t, j.Append(t.Context(), journalItemN(1)))

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, j.Append(cancelled, journalItemN(2)), context.Canceled)
	_, err = j.Pending(cancelled)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, j.Remove(cancelled, keyOf(1)), context.Canceled)

	require.NoError(t, j.Close())
	require.NoError(t, j.Close(), "Close twice")
	ctx := t.Context()
	require.ErrorIs(t, j.Append(ctx, journalItemN(2)), ErrJournalClosed)
	_, err = j.Pending(ctx)
	require.ErrorIs(t, err, ErrJournalClosed)
	require.ErrorIs(t, j.Remove(ctx, keyOf(1)), ErrJournalClosed)
}

func TestOpenJournalErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name string
		path string
	}{
		{"a directory", dir},
		{"missing parent", filepath.Join(dir, "missing", "j")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := OpenJournal(tc.path)
			require.Error(t, err)
		})
	}
}

func TestFileJournalConcurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j")
	j := openTestJournal(t, path)
	j.compactAt = 4096 // compactions happen while others append
	ctx := t.Context()
	const workers, each = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				n := w*each + i
				errs <- j.Append(ctx, journalItemN(n))
				if i%2 == 1 { // remove every other own entry
					errs <- j.Remove(ctx, keyOf(n-1))
				}
				if _, err := j.Pending(ctx); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	want := pendingIDs(t, j)
	require.Len(t, want, workers*each/2)
	require.NoError(t, j.Close())
	require.Equal(t, want, pendingIDs(t, openTestJournal(t, path)))
}
