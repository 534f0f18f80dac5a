package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
)

// sqlRecentDirect is Recent answered by SQL alone: the query Recent ran
// before the history cache, bypassing both caches (payloads decoded here).
func sqlRecentDirect(t testing.TB, d *DB, session string, limit int) []memory.Entry {
	t.Helper()
	rows, err := d.rdb.QueryContext(context.Background(), `
SELECT id, direction, payload, recalled_at FROM message_events WHERE session_key = ?
ORDER BY event_time DESC, rowid DESC LIMIT ?`, session, limit)
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	var out []memory.Entry
	for rows.Next() {
		var (
			e        = memory.Entry{SessionKey: session}
			dir      string
			payload  []byte
			recalled sql.NullInt64
		)
		require.NoError(t, rows.Scan(&e.Key, &dir, &payload, &recalled))
		e.Direction = memory.Direction(dir)
		e.RecalledAt = fromNullMs(recalled)
		require.NoError(t, json.Unmarshal(payload, &e.Event))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	slices.Reverse(out)
	return out
}

// checkRecent compares Recent with the direct SQL read.
func checkRecent(t testing.TB, d *DB, session string, limit int, msg ...any) {
	t.Helper()
	got, err := d.Recent(context.Background(), session, limit)
	require.NoError(t, err)
	want := sqlRecentDirect(t, d, session, limit)
	if len(want) == 0 {
		require.Empty(t, got, msg...)
		return
	}
	require.Equal(t, want, got, msg...)
}

// checkCacheExact compares every cached window with SQL.
func checkCacheExact(t testing.TB, d *DB) {
	t.Helper()
	c := d.hist
	c.mu.Lock()
	wins := map[string][]memory.Entry{}
	complete := map[string]bool{}
	for k, s := range c.sessions {
		require.Len(t, s.pos, len(s.ents), k)
		for i := 1; i < len(s.pos); i++ {
			require.True(t, s.pos[i-1].before(s.pos[i]), "%s: window out of order at %d", k, i)
		}
		wins[k], complete[k] = s.ents, s.complete
	}
	nkeys, total := len(c.keys), c.total
	c.mu.Unlock()
	n := 0
	for k, w := range wins {
		n += len(w)
		want := sqlRecentDirect(t, d, k, len(w)+1)
		if !complete[k] {
			require.Len(t, want, len(w)+1, "an incomplete window of %s is not the whole session", k)
			want = want[1:]
		}
		got := w
		if len(want) == 0 {
			require.Empty(t, got, k)
			continue
		}
		require.Equal(t, want, got, k)
	}
	require.Equal(t, n, total)
	require.Equal(t, n, nkeys)
}

func histSessionKey(i int) string {
	return channel.SessionKey("", "test", "bot", channel.Chat{Kind: channel.Group, ID: fmt.Sprint("g", i)})
}

// histModel drives random transcript writes and reads and checks every
// read against SQL.
type histModel struct {
	t        *testing.T
	rng      *rand.Rand
	clk      *clock.Fake
	sessions int
	keys     int
	known    []string
}

func (m *histModel) event(key string) channel.Event {
	r := m.rng
	s := r.IntN(m.sessions)
	ev := testEvent(channel.Group, fmt.Sprint("g", s), key, t0.Add(time.Duration(r.IntN(200))*time.Second),
		fmt.Sprint("text ", r.Int()))
	switch r.IntN(4) {
	case 0:
		ev.Kind = channel.KindSelf
	case 1:
		ev.Kind = channel.KindNotice
	}
	if r.IntN(5) == 0 {
		ev.Time = time.Time{} // the store's clock
	}
	return ev
}

func (m *histModel) key() string {
	if len(m.known) > 0 && m.rng.IntN(2) == 0 {
		return m.known[m.rng.IntN(len(m.known))] // a re-delivery
	}
	k := fmt.Sprint("k", m.rng.IntN(m.keys))
	if !slices.Contains(m.known, k) {
		m.known = append(m.known, k)
	}
	return k
}

func (m *histModel) step(d *DB) {
	t, r, ctx := m.t, m.rng, context.Background()
	m.clk.Advance(time.Duration(r.IntN(3)) * time.Millisecond)
	switch op := r.IntN(10); {
	case op < 3:
		k := m.key()
		ev := m.event(k)
		it := inbound.Item{ID: k, SessionKey: ev.SessionKey, Event: ev}
		_, err := d.Enqueue(ctx, it)
		require.NoError(t, err)
	case op < 4:
		k := m.key()
		ev := m.event(k)
		it := inbound.Item{ID: k, SessionKey: ev.SessionKey, Event: ev}
		_, err := d.Record(ctx, it, inbound.Outcome{Code: outcome.Replied})
		require.NoError(t, err)
	case op < 6:
		k := m.key()
		ev := m.event(k)
		e := memory.Entry{Key: k, Event: ev}
		switch r.IntN(4) {
		case 0:
			e.Direction = memory.Out
		case 1:
			e.RecalledAt = t0.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
		}
		require.NoError(t, d.Append(ctx, e))
	case op < 7:
		k := "unknown"
		if len(m.known) > 0 && r.IntN(4) > 0 {
			k = m.known[r.IntN(len(m.known))]
		}
		require.NoError(t, d.MarkRecalled(ctx, k, t0.Add(time.Duration(r.IntN(1000))*time.Millisecond)))
	default:
		limit := 1 + r.IntN(40)
		if r.IntN(3) == 0 {
			limit = 1 + r.IntN(700)
		}
		checkRecent(t, d, histSessionKey(r.IntN(m.sessions)), limit)
	}
}

func TestHistCacheModel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                         string
		win, entries, sessions, keys int
		steps                        int
		opts                         []func(*Options)
	}{
		{"default bounds", 0, 0, 0, 1500, 6000, nil},
		{"tiny bounds", 16, 40, 2, 200, 3000, nil},
		{"window bound", 24, 1000, 10, 400, 3000, []func(*Options){direct}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			clk := clock.NewFake(t0)
			path := filepath.Join(t.TempDir(), "h.db")
			o := Options{Clock: clk}
			for _, f := range tc.opts {
				f(&o)
			}
			openDB := func() *DB {
				d, err := Open(path, o)
				require.NoError(t, err)
				if tc.win > 0 {
					d.hist.winMax, d.hist.entriesMax, d.hist.sessionsMax = tc.win, tc.entries, tc.sessions
				}
				return d
			}
			m := &histModel{t: t, rng: rand.New(rand.NewPCG(seed, 7)), clk: clk, sessions: 4, keys: tc.keys}
			d := openDB()
			for i := range tc.steps {
				if i == tc.steps/2 {
					checkCacheExact(t, d)
					require.NoError(t, d.Close())
					d = openDB()
				}
				m.step(d)
			}
			checkCacheExact(t, d)
			for s := range m.sessions {
				for _, limit := range []int{1, 10, 100, 400, 600, 2000} {
					checkRecent(t, d, histSessionKey(s), limit)
				}
			}
			d.hist.mu.Lock()
			hits := d.hist.hits
			d.hist.mu.Unlock()
			require.Positive(t, hits, "the cache answered")
			require.NoError(t, d.Close())
		})
	}
}

// TestHistCacheConcurrent runs writers and readers of the same sessions
// side by side (run it with -race); afterwards the cache matches SQL.
func TestHistCacheConcurrent(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		opts []func(*Options)
	}{{"group commit", nil}, {"direct", []func(*Options){direct}}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			d := open(t, clock.Real, mode.opts...)
			ctx := t.Context()
			const sessions, keys, writers, readers, steps = 3, 60, 4, 4, 300
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(w), 1))
					for range steps {
						k := fmt.Sprint("k", r.IntN(keys))
						ev := testEvent(channel.Group, fmt.Sprint("g", r.IntN(sessions)), k,
							t0.Add(time.Duration(r.IntN(50))*time.Second), fmt.Sprint("w", w, " ", r.Int()))
						var err error
						switch r.IntN(4) {
						case 0:
							_, err = d.Enqueue(ctx, inbound.Item{ID: k, SessionKey: ev.SessionKey, Event: ev})
						case 1:
							err = d.MarkRecalled(ctx, k, t0.Add(time.Duration(r.IntN(1000))*time.Millisecond))
						default:
							err = d.Append(ctx, memory.Entry{Key: k, Event: ev})
						}
						require.NoError(t, err)
					}
				})
			}
			for i := range readers {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(i), 2))
					for range steps {
						limit := 1 + r.IntN(80)
						got, err := d.Recent(ctx, histSessionKey(r.IntN(sessions)), limit)
						require.NoError(t, err)
						require.LessOrEqual(t, len(got), limit)
						seen := map[string]bool{}
						for j, e := range got {
							require.False(t, seen[e.Key], "duplicate %s", e.Key)
							seen[e.Key] = true
							if j > 0 {
								require.False(t, e.Event.Time.Before(got[j-1].Event.Time), "order")
							}
						}
						// The slice is the caller's.
						got = append(got[:0], memory.Entry{Key: "scribble"})
						_ = got
					}
				})
			}
			wg.Wait()
			checkCacheExact(t, d)
			for s := range sessions {
				for _, limit := range []int{1, 7, 80, 400} {
					checkRecent(t, d, histSessionKey(s), limit)
				}
			}
		})
	}
}

// TestHistCacheBounds checks that the cache stays within its bounds and
// answers correctly across evictions.
func TestHistCacheBounds(t *testing.T) {
	t.Parallel()
	d := open(t, clock.NewFake(t0))
	d.hist.winMax, d.hist.entriesMax, d.hist.sessionsMax = 10, 25, 3
	ctx := t.Context()
	const sessions = 6
	for i := range 30 {
		for s := range sessions {
			ev := testEvent(channel.Group, fmt.Sprint("g", s), fmt.Sprint(i), t0.Add(time.Duration(i)*time.Second), fmt.Sprint(i))
			require.NoError(t, d.Append(ctx, memory.Entry{Event: ev}))
		}
		for s := range sessions {
			checkRecent(t, d, histSessionKey(s), 1+(i+s)%12)
			d.hist.mu.Lock()
			require.LessOrEqual(t, len(d.hist.sessions), 3)
			require.LessOrEqual(t, d.hist.total, 25)
			for _, hs := range d.hist.sessions {
				require.LessOrEqual(t, len(hs.ents), 10)
			}
			d.hist.mu.Unlock()
		}
	}
	checkCacheExact(t, d)
	// A limit beyond the window reads SQL (the session has more rows).
	checkRecent(t, d, histSessionKey(0), 20)
	checkRecent(t, d, histSessionKey(0), 1000)
	checkCacheExact(t, d)
}

// TestHistCacheInstallGuard checks that a read is not installed when a
// write touching it was applied, or is committing, meanwhile.
func TestHistCacheInstallGuard(t *testing.T) {
	t.Parallel()
	c := newHistCache()
	row := func(key, session string, t int64) histEntry {
		return histEntry{histPos: histPos{t: t, rowid: t}, e: memory.Entry{Key: key, SessionKey: session, Direction: memory.In}}
	}
	// A write to the session after the read began.
	_, tk, ok := c.get("a", 10, false)
	require.False(t, ok)
	c.upsert(row("k2", "a", 2), true)
	c.install("a", tk, []histEntry{row("k1", "a", 1)}, true)
	_, _, ok = c.get("a", 10, false)
	require.False(t, ok, "stale read not installed")

	// A key of the read moved to another session.
	_, tk, _ = c.get("a", 10, false)
	c.upsert(row("k1", "b", 3), true)
	c.install("a", tk, []histEntry{row("k1", "a", 1), row("k2", "a", 2)}, true)
	_, _, ok = c.get("a", 10, false)
	require.False(t, ok)

	// A recall mark of a key of the read.
	_, tk, _ = c.get("a", 10, false)
	c.recalled("k2", t0)
	c.install("a", tk, []histEntry{row("k2", "a", 2)}, true)
	_, _, ok = c.get("a", 10, false)
	require.False(t, ok)

	// Unrelated writes do not refuse it.
	_, tk, _ = c.get("a", 10, false)
	c.upsert(row("k9", "z", 9), true)
	c.install("a", tk, []histEntry{row("k2", "a", 2)}, true)
	got, _, ok := c.get("a", 10, false)
	require.True(t, ok)
	require.Len(t, got, 1)

	// A batch between COMMIT and its hooks holds the install back until
	// its hooks ran; they touch the read, so it is refused.
	_, tk, _ = c.get("b", 10, false)
	c.begin()
	installed := make(chan struct{})
	go func() {
		c.install("b", tk, []histEntry{row("k1", "b", 3)}, true)
		close(installed)
	}()
	select {
	case <-installed:
		t.Fatal("install did not wait for the commit in progress")
	case <-time.After(20 * time.Millisecond):
	}
	c.upsert(row("k5", "b", 5), true)
	c.end(false)
	<-installed
	_, _, ok = c.get("b", 10, false)
	require.False(t, ok)

	// A failed commit empties the cache.
	c.begin()
	c.end(true)
	_, _, ok = c.get("a", 10, false)
	require.False(t, ok)
}
