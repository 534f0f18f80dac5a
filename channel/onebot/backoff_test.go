package onebot_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/onebot"
)

// TestBackoffSchedule: 1 s doubling to 60 s, ±20 % jitter, no overflow.
func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i, w := range want {
		w *= time.Second
		require.Equal(t, w, onebot.BackoffDelay(time.Second, time.Minute, i+1, 0), "attempt %d", i+1)
		require.Equal(t, w*8/10, onebot.BackoffDelay(time.Second, time.Minute, i+1, -1))
		require.Equal(t, w*12/10, onebot.BackoffDelay(time.Second, time.Minute, i+1, 1))
		require.Equal(t, w*12/10, onebot.BackoffDelay(time.Second, time.Minute, i+1, 7), "jitter is clamped")
	}
	require.Equal(t, time.Minute, onebot.BackoffDelay(time.Second, time.Minute, 1000, 0))
	require.Equal(t, time.Second, onebot.BackoffDelay(time.Second, time.Minute, 0, 0))
}
