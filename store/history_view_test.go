package store

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/memory"
)

// RecentView lends the cached window itself: the same entries as Recent,
// no copy, a capacity that ends at the length, and a lent window that no
// later write changes (a new row, an edit, a recall mark).
func TestRecentViewLendsTheCachedWindow(t *testing.T) {
	t.Parallel()
	d := open(t, nil)
	ctx := t.Context()
	session := channel.SessionKey("", "test", "bot", channel.Chat{Kind: channel.Group, ID: "g"})
	say := func(i int, text string) {
		ev := testEvent(channel.Group, "g", fmt.Sprint(i), t0.Add(time.Duration(i)*time.Second), text)
		require.NoError(t, d.Append(ctx, memory.Entry{Event: ev}))
	}
	for i := range 5 {
		say(i, fmt.Sprint("message ", i))
	}
	want, err := d.Recent(ctx, session, 4)
	require.NoError(t, err)
	v1, err := d.RecentView(ctx, session, 4)
	require.NoError(t, err)
	require.Equal(t, want, v1)
	v2, err := d.RecentView(ctx, session, 4)
	require.NoError(t, err)
	require.Same(t, &v1[0], &v2[0], "a cached window is lent, not copied")
	require.Equal(t, len(v1), cap(v1), "appending to a view cannot reach the cache")
	c1, err := d.Recent(ctx, session, 4)
	require.NoError(t, err)
	require.NotSame(t, &v1[0], &c1[0], "Recent still copies")
	snapshot := slices.Clone(v1)

	say(5, "message 5")                                                   // appended to the window
	say(2, "message 2, edited")                                           // an update inside it
	require.NoError(t, d.MarkRecalled(ctx, v1[3].Key, t0.Add(time.Hour))) // a recall mark
	require.Equal(t, snapshot, v1, "a lent window never changes")

	say(6, "message 6") // appended: the window's array now has room to spare
	v3, err := d.RecentView(ctx, session, 4)
	require.NoError(t, err)
	want, err = d.Recent(ctx, session, 4)
	require.NoError(t, err)
	require.Equal(t, want, v3)
	require.Equal(t, "message 6", v3[3].Event.Text())
	require.Equal(t, "message 5", v3[2].Event.Text())
	require.False(t, v3[1].RecalledAt.IsZero())
	v2e, err := d.RecentView(ctx, session, 5)
	require.NoError(t, err)
	require.Equal(t, "message 2, edited", v2e[0].Event.Text())

	// A view's capacity ends at its length, so the caller's append and the
	// cache's next one land in different arrays.
	require.Equal(t, len(v3), cap(v3))
	v3 = append(v3, memory.Entry{Key: "mine"})
	say(7, "message 7")
	require.Equal(t, "mine", v3[4].Key, "the cache does not write into a caller's append")
	v4, err := d.RecentView(ctx, session, 5)
	require.NoError(t, err)
	require.NotContains(t, v4, memory.Entry{Key: "mine"})
	require.Equal(t, "message 7", v4[4].Event.Text())
}

// Lent windows are read while the writer applies new rows, edits and
// recall marks to the same sessions (run with -race).
func TestRecentViewUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	d := open(t, nil)
	ctx := t.Context()
	const sessions, rounds = 4, 60
	key := func(s int) string {
		return channel.SessionKey("", "test", "bot", channel.Chat{Kind: channel.Group, ID: fmt.Sprint("g", s)})
	}
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Go(func() {
			for i := range rounds {
				ev := testEvent(channel.Group, fmt.Sprint("g", s), fmt.Sprint(i), t0.Add(time.Duration(i)*time.Second), fmt.Sprint(i))
				if i%7 != 3 {
					require.NoError(t, d.Append(ctx, memory.Entry{Event: ev}))
					continue
				}
				// An edit of an earlier row and a recall mark.
				old := testEvent(channel.Group, fmt.Sprint("g", s), fmt.Sprint(i-2), t0.Add(time.Duration(i-2)*time.Second), "edited")
				require.NoError(t, d.Append(ctx, memory.Entry{Event: old}))
				require.NoError(t, d.MarkRecalled(ctx, old.Key(), t0))
			}
		})
		wg.Go(func() {
			for range rounds {
				v, err := d.RecentView(ctx, key(s), 10)
				require.NoError(t, err)
				copied := slices.Clone(v)
				for i := 1; i < len(v); i++ {
					require.False(t, v[i].Event.Time.Before(v[i-1].Event.Time), "a view is in order")
				}
				require.Equal(t, copied, v)
			}
		})
	}
	wg.Wait()
	for s := range sessions {
		checkRecent(t, d, key(s), 10)
	}
	checkCacheExact(t, d)
}
