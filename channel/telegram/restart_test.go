package telegram_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
	"github.com/personakit/persona/clock"
)

// dedupe stands in for the pipeline's idempotent enqueue: every delivery
// is counted, and a key is processed only the first time.
type dedupe struct {
	mu        sync.Mutex
	delivered map[string]int
	processed map[string]int
}

func newDedupe() *dedupe {
	return &dedupe{delivered: map[string]int{}, processed: map[string]int{}}
}

func (d *dedupe) enqueue(ev channel.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := ev.Key()
	d.delivered[k]++
	if d.processed[k] == 0 { // a repeat is dropped, as by the queue
		d.processed[k]++
	}
}

func (d *dedupe) counts() (delivered, processed map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp := func(m map[string]int) map[string]int {
		out := make(map[string]int, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return cp(d.delivered), cp(d.processed)
}

func (d *dedupe) isProcessed(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.processed[key] > 0
}

// checkedStore wraps an OffsetStore: every save is checked against what
// was processed at that moment, and saves can be "lost" (a crash before
// the write reached the disk).
type checkedStore struct {
	telegram.OffsetStore
	mu         sync.Mutex
	lose       bool
	saves      []int64
	violations []string
	keyOf      map[int64]string // update id → event key
	dd         *dedupe
}

func (s *checkedStore) SaveOffset(ctx context.Context, bot string, off int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves = append(s.saves, off)
	for id, key := range s.keyOf {
		if id < off && !s.dd.isProcessed(key) {
			s.violations = append(s.violations, fmt.Sprintf("offset %d saved before update %d (%s) was accepted", off, id, key))
		}
	}
	if s.lose {
		return nil
	}
	return s.OffsetStore.SaveOffset(ctx, bot, off)
}

func (s *checkedStore) snapshot() ([]int64, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.saves...), append([]string(nil), s.violations...)
}

// The restart check: the adapter fetches updates, the process dies
// between getUpdates and the durable enqueue of the second one, and a new
// process with the same OffsetStore receives every update again from where
// the first left off; counted by Event.Key, each is processed exactly once
// and no offset was saved ahead of an accepted event.
func TestRestartBetweenGetUpdatesAndEnqueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// crash is how the first process's sink handles the second
		// update: it blocks until Run is cancelled, or fails.
		block bool
		// lose drops the first process's offset saves (crash before they
		// reached the disk), so the restart re-reads the accepted update
		// too and the dedupe drops it.
		lose bool
	}{
		{name: "sink blocks, killed", block: true},
		{name: "sink fails, killed"},
		{name: "offset save lost", block: true, lose: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFake(t, telegramtest.Config{})
			dd := newDedupe()
			store := &checkedStore{OffsetStore: telegram.NewMemoryOffsetStore(), dd: dd, keyOf: map[int64]string{}, lose: tc.lose}
			var keys []string
			for i, text := range []string{"one", "two", "three"} {
				m, err := srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: text})
				require.NoError(t, err)
				key := "telegram/" + srv.BotID() + "/group:" + strconv.FormatInt(group.ID, 10) + "/" + strconv.FormatInt(m.MessageID, 10)
				keys = append(keys, key)
				store.keyOf[telegramtest.DefaultFirstUpdateID+int64(i)] = key
			}

			// Process 1 accepts "one" and dies while enqueueing "two".
			reached := make(chan struct{})
			var once sync.Once
			sink1 := newRecSink()
			sink1.SetHandler(func(ctx context.Context, ev channel.Event) error {
				if ev.Text() == "two" {
					once.Do(func() { close(reached) })
					if tc.block {
						<-ctx.Done()
						return ctx.Err()
					}
					return errors.New("enqueue failed: disk full")
				}
				dd.enqueue(ev)
				return nil
			})
			ch1 := newChannel(t, srv, func(c *telegram.Config) { c.OffsetStore = store })
			stop1 := run(t, ch1, sink1)
			select {
			case <-reached:
			case <-time.After(waitTimeout):
				t.Fatal("the first process never reached the second update")
			}
			require.NoError(t, stop1(), "Run after the kill")
			_, processed := dd.counts()
			require.Equal(t, map[string]int{keys[0]: 1}, processed)
			saves, _ := store.snapshot()
			require.Equal(t, []int64{telegramtest.DefaultFirstUpdateID + 1}, saves, "only the accepted update moved the offset")

			// Process 2: same store, a sink that always accepts.
			store.mu.Lock()
			store.lose = false
			store.mu.Unlock()
			sink2 := newRecSink()
			sink2.SetHandler(func(_ context.Context, ev channel.Event) error { dd.enqueue(ev); return nil })
			ch2 := newChannel(t, srv, func(c *telegram.Config) { c.OffsetStore = store })
			run(t, ch2, sink2)
			require.Eventually(t, func() bool {
				_, p := dd.counts()
				return len(p) == 3
			}, waitTimeout, time.Millisecond)

			delivered, processed := dd.counts()
			for _, k := range keys {
				require.Equal(t, 1, processed[k], "processed count of %s", k)
			}
			if tc.lose {
				require.Equal(t, 2, delivered[keys[0]], "the lost save makes Telegram redeliver the accepted update; the dedupe drops it")
			} else {
				require.Equal(t, 1, delivered[keys[0]], "the saved offset skips the accepted update")
			}
			require.Eventually(t, func() bool { // saved right after the accept
				off, ok, err := store.LoadOffset(t.Context(), srv.BotID())
				return err == nil && ok && off == telegramtest.DefaultFirstUpdateID+3
			}, waitTimeout, time.Millisecond)
			_, violations := store.snapshot()
			require.Empty(t, violations)
			// The next long poll confirms everything at the server.
			require.Eventually(t, func() bool { return srv.Pending() == 0 }, waitTimeout, time.Millisecond)
		})
	}
}

// A refused event is not acknowledged: the offset stays, and the same
// update is fetched again only after the backoff on the injected clock.
func TestNackBacksOffAndRedelivers(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	store := telegram.NewMemoryOffsetStore()
	log, buf := newLogger()
	ch := newChannel(t, srv, func(c *telegram.Config) {
		c.Clock, c.OffsetStore, c.Logger = clk, store, log
		c.RetryMin, c.RetryMax = time.Second, 4*time.Second
	})
	var mu sync.Mutex
	refuse := 2
	sink := newRecSink()
	sink.SetHandler(func(context.Context, channel.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse > 0 {
			refuse--
			return errors.New("store unavailable")
		}
		return nil
	})
	run(t, ch, sink)
	sink.waitOnline(t, true)
	_, err := srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: "hello"})
	require.NoError(t, err)

	for attempt := 1; attempt <= 2; attempt++ {
		sink.wait(t, "a refusal", func(_, refused []channel.Event, _ []channel.State) bool { return len(refused) == attempt })
		require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond, "backoff timer")
		polls := srv.CallCount("getUpdates")
		_, saved, err := store.LoadOffset(t.Context(), srv.BotID())
		require.NoError(t, err)
		require.False(t, saved, "no offset saved after a NACK")
		require.Equal(t, 1, srv.Pending(), "the update is still unconfirmed at Telegram")
		clk.Advance(time.Duration(attempt) * 500 * time.Millisecond)
		require.Equal(t, 1, clk.Pending(), "attempt %d: retried before the backoff", attempt)
		require.Equal(t, polls, srv.CallCount("getUpdates"))
		clk.Advance(4 * time.Second)
	}
	ev := sink.waitEvents(t, 1)[0]
	require.Equal(t, "hello", ev.Text())
	require.Eventually(t, func() bool {
		off, ok, _ := store.LoadOffset(t.Context(), srv.BotID())
		return ok && off == telegramtest.DefaultFirstUpdateID+1
	}, waitTimeout, time.Millisecond)
	require.Contains(t, buf.String(), "telegram_event_nacked")
	require.Contains(t, buf.String(), "store unavailable")
}

func TestStateDirPersistsOffset(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state", "tg")
	srv := newFake(t, telegramtest.Config{})
	for _, text := range []string{"a", "b"} {
		_, err := srv.Push(t.Context(), telegramtest.Incoming{Chat: group, From: alice, Text: text})
		require.NoError(t, err)
	}
	ch := newChannel(t, srv, func(c *telegram.Config) { c.StateDir = dir })
	sink := newRecSink()
	stop := run(t, ch, sink)
	sink.waitEvents(t, 2)
	file := filepath.Join(dir, "telegram-"+srv.BotID()+".offset")
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(file)
		return err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(telegramtest.DefaultFirstUpdateID+2)
	}, waitTimeout, time.Millisecond)
	require.NoError(t, stop())

	// A new process starts polling at the saved offset.
	calls := len(srv.Calls())
	ch2 := newChannel(t, srv, func(c *telegram.Config) { c.StateDir = dir })
	run(t, ch2, newRecSink())
	require.NoError(t, srv.WaitCalls(t.Context(), "getUpdates", countCalls(srv.Calls()[:calls], "getUpdates")+1))
	var first telegramtest.Call
	for _, c := range srv.Calls()[calls:] {
		if c.Method == "getUpdates" {
			first = c
			break
		}
	}
	require.JSONEq(t, strconv.Itoa(telegramtest.DefaultFirstUpdateID+2), string(first.Params["offset"]))
}

func countCalls(calls []telegramtest.Call, method string) int {
	n := 0
	for _, c := range calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

func TestFileOffsetStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := telegram.NewFileOffsetStore(dir)
	require.NoError(t, err)
	ctx := t.Context()

	_, ok, err := s.LoadOffset(ctx, "42")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, s.SaveOffset(ctx, "42", 10001))
	require.NoError(t, s.SaveOffset(ctx, "42", 10002))
	require.NoError(t, s.SaveOffset(ctx, "43", -5))
	off, ok, err := s.LoadOffset(ctx, "42")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(10002), off)
	off, _, _ = s.LoadOffset(ctx, "43")
	require.Equal(t, int64(-5), off)
	b, err := os.ReadFile(s.Path("42"))
	require.NoError(t, err)
	require.Equal(t, "10002\n", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary files are left behind")

	require.NoError(t, os.WriteFile(s.Path("42"), []byte("garbage"), 0o600))
	_, _, err = s.LoadOffset(ctx, "42")
	require.ErrorContains(t, err, "corrupt")
	for _, bad := range []string{"", "../x", "a/b", "1 2"} {
		require.Error(t, s.SaveOffset(ctx, bad, 1), "%q", bad)
		_, _, err := s.LoadOffset(ctx, bad)
		require.Error(t, err, "%q", bad)
	}
	_, err = telegram.NewFileOffsetStore("")
	require.Error(t, err)

	m := telegram.NewMemoryOffsetStore()
	require.NoError(t, m.SaveOffset(ctx, "1", 7))
	off, ok, err = m.LoadOffset(ctx, "1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(7), off)
}
