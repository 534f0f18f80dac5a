package browser_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/browser"
)

func TestNewBadBinary(t *testing.T) {
	t.Parallel()
	_, err := browser.New(browser.Config{Bin: "/nonexistent/chromium"})
	require.ErrorContains(t, err, "Chromium binary")
	_, err = browser.New(browser.Config{Bin: t.TempDir()})
	require.ErrorContains(t, err, "not an executable file")
}

// A Browser of its own: one slot, a short real queue wait, closed while a
// render runs.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	b, err := browser.New(browser.Config{Bin: chromiumBin, Guard: testGuard(), Slots: 1,
		QueueWait: 300 * time.Millisecond, Dir: t.TempDir()})
	require.NoError(t, err)

	before := site.holding.Load()
	done := make(chan error, 1)
	go func() {
		_, err := b.Render(context.Background(), site.url("/hold"), browser.RenderOptions{Settle: 50 * time.Second})
		done <- err
	}()
	require.Eventually(t, func() bool { return site.holding.Load() > before }, 20*time.Second, 10*time.Millisecond)

	// The only slot is taken: the queue wait runs out.
	_, err = b.Render(context.Background(), site.url("/"), browser.RenderOptions{})
	require.ErrorIs(t, err, browser.ErrBusy)
	require.ErrorContains(t, err, "too many disposable browsers running")

	// Close ends the render in flight.
	require.NoError(t, b.Close())
	require.Error(t, <-done)

	_, err = b.Render(context.Background(), site.url("/"), browser.RenderOptions{})
	require.ErrorIs(t, err, browser.ErrClosed)
	ctx := agent.WithSession(context.Background(), "after-close")
	for _, tl := range b.InteractiveTools() {
		if tl.Spec().Name != browser.ToolOpen {
			continue
		}
		_, err := tl.Call(ctx, json.RawMessage(`{"url":"`+site.url("/")+`"}`))
		require.ErrorIs(t, err, browser.ErrClosed)
	}
	require.ErrorIs(t, b.Close(), browser.ErrClosed)
}
