package store

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBackground: stop before start (Open failed first) and a second stop
// return at once; a started loop runs until stop cancels it; a disabled
// one never runs.
func TestBackground(t *testing.T) {
	t.Parallel()
	var never background
	never.stop()
	never.stop()

	var b background
	ran := make(chan struct{})
	b.start(false, func(ctx context.Context) {
		close(ran)
		<-ctx.Done()
	})
	<-ran
	require.True(t, b.running())
	b.stop()
	b.stop()

	var off background
	off.start(true, func(context.Context) { t.Error("a disabled loop ran") })
	require.False(t, off.running())
	off.stop()
}
