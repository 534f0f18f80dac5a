package checkpointtest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/inbound"
)

// Start is the base time of the checkpoints the suite saves. It has a
// sub-millisecond part, so an implementation that keeps coarser times than
// milliseconds fails.
var Start = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

// Run runs the inbound.Checkpoints conformance suite against the
// implementations open returns (a fresh, empty one per subtest).
func Run(t *testing.T, open func(t *testing.T) inbound.Checkpoints) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, c inbound.Checkpoints)
	}{
		{"Missing", testMissing},
		{"RoundTripMillisecond", testRoundTrip},
		{"SaveReplaces", testReplaces},
		{"BotsAreIndependent", testIndependent},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := open(t)
			require.NotNil(t, c, "open returned nil")
			tc.fn(t, c)
		})
	}
}

// load returns bot's checkpoint, failing the test when there is none.
func load(t *testing.T, c inbound.Checkpoints, bot string) time.Time {
	t.Helper()
	at, ok, err := c.LoadCheckpoint(t.Context(), bot)
	require.NoError(t, err)
	require.True(t, ok, "no checkpoint for %q", bot)
	return at
}

// requireMissing asserts bot has no checkpoint.
func requireMissing(t *testing.T, c inbound.Checkpoints, bot string) {
	t.Helper()
	at, ok, err := c.LoadCheckpoint(t.Context(), bot)
	require.NoError(t, err)
	require.False(t, ok, "checkpoint for %q: %s", bot, at)
}

// sameTime asserts two instants are equal at millisecond precision: less
// than a millisecond apart, so that a store may truncate or round to
// milliseconds or keep finer times.
func sameTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	d := got.Sub(want)
	require.True(t, d > -time.Millisecond && d < time.Millisecond, "%s: want %s, got %s", what, want, got)
}

func save(t *testing.T, c inbound.Checkpoints, bot string, at time.Time) {
	t.Helper()
	require.NoError(t, c.SaveCheckpoint(t.Context(), bot, at))
}

func testMissing(t *testing.T, c inbound.Checkpoints) {
	for _, bot := range []string{"bot", "10001", "telegram:bot"} {
		requireMissing(t, c, bot)
	}
	save(t, c, "bot", Start)
	for _, bot := range []string{"10001", "bot2", "bo"} {
		requireMissing(t, c, bot)
	}
}

func testRoundTrip(t *testing.T, c inbound.Checkpoints) {
	shanghai := time.FixedZone("UTC+8", 8*60*60)
	times := map[string]time.Time{
		"now":         Start,
		"sub-ms":      Start.Add(999999 * time.Nanosecond),
		"other zone":  Start.Add(time.Hour).In(shanghai),
		"long ago":    time.Date(2001, 9, 9, 1, 46, 40, 1_000_000, time.UTC),
		"far ahead":   time.Date(2099, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		"epoch+1ms":   time.UnixMilli(1).UTC(),
		"local clock": Start.Add(-36 * time.Hour).Local(),
	}
	for bot, at := range times {
		save(t, c, bot, at)
	}
	for bot, at := range times {
		sameTime(t, at, load(t, c, bot), bot)
	}
}

func testReplaces(t *testing.T, c inbound.Checkpoints) {
	steps := []time.Time{
		Start,
		Start.Add(30 * time.Second),
		Start.Add(-time.Hour), // a replaced clock may go backwards: the last save wins
		Start.Add(-time.Hour + time.Millisecond),
	}
	for i, at := range steps {
		save(t, c, "bot", at)
		sameTime(t, at, load(t, c, "bot"), fmt.Sprintf("after save %d", i))
	}
}

func testIndependent(t *testing.T, c inbound.Checkpoints) {
	bots := []string{"bot", "bot1", "Bot", "bo", "onebot:10001", "telegram/10001", "ünïcode bot", "bot "}
	for i, bot := range bots {
		save(t, c, bot, Start.Add(time.Duration(i)*time.Minute))
	}
	for i, bot := range bots {
		sameTime(t, Start.Add(time.Duration(i)*time.Minute), load(t, c, bot), bot)
	}
	save(t, c, "bot", Start.Add(time.Hour))
	sameTime(t, Start.Add(time.Hour), load(t, c, "bot"), "bot")
	for i, bot := range bots[1:] {
		sameTime(t, Start.Add(time.Duration(i+1)*time.Minute), load(t, c, bot), bot+" after saving bot")
	}
	requireMissing(t, c, "BOT")
}

func testConcurrent(t *testing.T, c inbound.Checkpoints) {
	const (
		workers = 8
		saves   = 20
	)
	at := func(w, i int) time.Time {
		return Start.Add(time.Duration(w)*time.Hour + time.Duration(i)*time.Second)
	}
	var (
		wg   sync.WaitGroup
		errs = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			ctx := t.Context()
			own := fmt.Sprintf("bot-%d", w)
			for i := range saves {
				if err := c.SaveCheckpoint(ctx, own, at(w, i)); err != nil {
					errs <- err
					return
				}
				if err := c.SaveCheckpoint(ctx, "shared", at(w, i)); err != nil {
					errs <- err
					return
				}
				got, ok, err := c.LoadCheckpoint(ctx, own)
				switch {
				case err != nil:
					errs <- err
					return
				case !ok || got.Sub(at(w, i)).Abs() >= time.Millisecond:
					errs <- fmt.Errorf("%s: read %s (ok=%v) right after saving %s", own, got, ok, at(w, i))
					return
				}
				if _, _, err := c.LoadCheckpoint(ctx, "shared"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var written []time.Time
	for w := range workers {
		sameTime(t, at(w, saves-1), load(t, c, fmt.Sprintf("bot-%d", w)), fmt.Sprintf("bot-%d", w))
		for i := range saves {
			written = append(written, at(w, i))
		}
	}
	shared := load(t, c, "shared")
	require.True(t, slices.ContainsFunc(written, func(w time.Time) bool { return shared.Sub(w).Abs() < time.Millisecond }),
		"shared checkpoint %s is none of those saved", shared)
}
