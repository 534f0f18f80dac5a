package browser_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/browser"
	"github.com/personakit/persona/internal/netguard"
)

// distinctColors counts the colours of an image (up to limit).
func distinctColors(t *testing.T, data []byte, limit int) int {
	t.Helper()
	img, format, err := image.Decode(bytes.NewReader(data))
	require.NoError(t, err)
	require.Contains(t, []string{"png", "jpeg"}, format)
	seen := map[[4]uint32]bool{}
	bounds := img.Bounds()
	require.Positive(t, bounds.Dx())
	require.Positive(t, bounds.Dy())
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 4 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 4 {
			r, g, b, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, b, a}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

func TestRenderTextAndScreenshot(t *testing.T) {
	t.Parallel()
	p, err := shared.Render(context.Background(), site.url("/"), browser.RenderOptions{Screenshot: true})
	require.NoError(t, err)
	require.Equal(t, site.url("/"), p.URL)
	require.Equal(t, site.url("/"), p.FinalURL)
	require.Equal(t, "Test page", p.Title)
	require.True(t, p.Settled)
	require.Contains(t, p.Text, "Hello from the test page")
	require.Contains(t, p.Text, "Second paragraph.")
	require.Contains(t, p.Text, "written by script", "scripts run")
	require.NotContains(t, p.Text, "hidden words", "only visible text")
	require.Equal(t, "image/png", p.ScreenshotType)
	require.Empty(t, p.Note)
	// The red banner and the white page at least: not a blank picture.
	require.GreaterOrEqual(t, distinctColors(t, p.Screenshot, 3), 3)

}

func TestRenderCutsLongText(t *testing.T) {
	t.Parallel()
	p, err := shared.Render(context.Background(), site.url("/long"), browser.RenderOptions{})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(p.Text, "[… page text cut at 8000 characters]"), p.Text[len(p.Text)-60:])
	body, _, _ := strings.Cut(p.Text, "\n[…")
	require.Equal(t, 8000, len([]rune(body)))
}

func TestCutText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "héllo", browser.CutText("héllo", 5, false))
	require.Equal(t, "hé\n[… page text cut at 2 characters]", browser.CutText("héllo", 2, false))
	require.Equal(t, "héllo\n[… page text cut at 9 characters]", browser.CutText("héllo", 9, true), "cut in the page")
	require.Equal(t, "", browser.CutText("", 3, false))
}

func TestRenderNeverFinishes(t *testing.T) {
	t.Parallel()
	t.Run("resource never completes: last snapshot", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		p, err := shared.Render(context.Background(), site.url("/slow-img"), browser.RenderOptions{Settle: 1500 * time.Millisecond})
		require.NoError(t, err)
		t.Logf("returned after %s", time.Since(start))
		require.False(t, p.Settled)
		require.Equal(t, "Slow", p.Title)
		require.Contains(t, p.Text, "Visible before the image")
	})
	t.Run("document never arrives: clean error", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		_, err := shared.Render(context.Background(), site.url("/hang"), browser.RenderOptions{Settle: time.Second})
		t.Logf("returned after %s", time.Since(start))
		require.ErrorContains(t, err, "showed nothing within 1s")
	})
	t.Run("caller's context ends first", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
		defer cancel()
		_, err := shared.Render(ctx, site.url("/hang"), browser.RenderOptions{})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestRenderRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ url, target string }{
		"redirect to private":  {site.url("/redirect-private"), "http://10.0.0.1/"},
		"redirect to metadata": {site.url("/redirect-metadata"), "http://169.254.169.254/latest/meta-data/"},
		"redirect to internal": {site.url("/redirect-internal"), site.internalURL("/")},
		"internal directly":    {site.internalURL("/"), site.internalURL("/")},
		"metadata directly":    {"http://169.254.169.254/", "http://169.254.169.254/"},
		"file scheme":          {"file:///etc/passwd", "file:///etc/passwd"},
		"javascript scheme":    {"javascript:alert(1)", "javascript:alert(1)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := shared.Render(context.Background(), c.url, browser.RenderOptions{})
			require.ErrorIs(t, err, netguard.ErrBlocked)
			var re *browser.RefusedError
			require.ErrorAs(t, err, &re)
			require.Equal(t, c.target, re.URL)
			require.ErrorContains(t, err, "refused: "+c.target+": address is not public")
		})
	}
	require.Zero(t, site.internalHits.Load(), "the internal host saw a request")
}

func TestRenderRefusesSubresourcesThroughProxy(t *testing.T) {
	t.Parallel()
	before := shared.ProxyRefused()
	p, err := shared.Render(context.Background(), site.url("/subres"), browser.RenderOptions{})
	require.NoError(t, err)
	require.Contains(t, p.Text, "xhr: failed")
	require.NotContains(t, p.Text, "secret")
	require.Positive(t, site.okImageHits.Load(), "the allowed image loads")
	require.Zero(t, site.internalHits.Load(), "the image and the XHR to 127.0.0.2 must not arrive")
	require.GreaterOrEqual(t, shared.ProxyRefused()-before, int64(1), "the proxy's guard refused them")
}

func TestRenderRefusesDownload(t *testing.T) {
	t.Parallel()
	_, err := shared.Render(context.Background(), site.url("/download"), browser.RenderOptions{})
	require.ErrorIs(t, err, browser.ErrDownload)
}

func TestRenderBadInput(t *testing.T) {
	t.Parallel()
	_, err := shared.Render(context.Background(), "", browser.RenderOptions{})
	require.ErrorContains(t, err, "empty URL")
	_, err = shared.Render(context.Background(), "http://exa mple.com/", browser.RenderOptions{})
	require.Error(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = shared.Render(ctx, site.url("/"), browser.RenderOptions{})
	require.ErrorIs(t, err, context.Canceled)
}

func TestRenderTool(t *testing.T) {
	t.Parallel()
	tool := shared.RenderTool()
	require.Equal(t, browser.ToolRender, tool.Spec().Name)
	rt, ok := tool.(agent.ResultTool)
	require.True(t, ok)

	args, _ := json.Marshal(map[string]any{"url": site.url("/"), "screenshot": true})
	res, err := rt.CallResult(context.Background(), args)
	require.NoError(t, err)
	require.Contains(t, res.Text, "URL: "+site.url("/"))
	require.Contains(t, res.Text, "Final URL: "+site.url("/"))
	require.Contains(t, res.Text, "Title: Test page")
	require.Contains(t, res.Text, "untrusted content")
	require.Contains(t, res.Text, "Hello from the test page")
	require.Len(t, res.Evidence, 1)
	require.Equal(t, site.url("/"), res.Evidence[0].URL)
	require.Equal(t, "Test page", res.Evidence[0].Title)
	require.Contains(t, res.Evidence[0].Excerpt, "Hello from the test page")
	require.Len(t, res.Images, 1)
	data, ok := strings.CutPrefix(res.Images[0], "data:image/png;base64,")
	require.True(t, ok)
	img, err := base64.StdEncoding.DecodeString(data)
	require.NoError(t, err)
	require.GreaterOrEqual(t, distinctColors(t, img, 3), 3)

	// No screenshot asked: no image. The fence's tag is random, so the
	// page cannot close it.
	text, err := tool.Call(context.Background(), json.RawMessage(`{"url":"`+site.url("/")+`"}`))
	require.NoError(t, err)
	require.NotContains(t, text, "screenshot")
	require.NotEqual(t, fenceTag(t, res.Text), fenceTag(t, text))

	for _, bad := range []string{`{}`, `{"url":""}`, `{"url":3}`, `[`} {
		_, err := rt.CallResult(context.Background(), json.RawMessage(bad))
		require.Error(t, err, bad)
	}
	_, err = rt.CallResult(context.Background(), json.RawMessage(`{"url":"http://10.0.0.1/"}`))
	require.ErrorContains(t, err, "refused: http://10.0.0.1/: address is not public")
}

// procGone reports whether the process has exited (a zombie counts).
func procGone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
}

// fenceTag returns the tag of the untrusted-content fence in text.
func fenceTag(t *testing.T, text string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n<<<page-")
	require.True(t, ok, text)
	tag, _, _ := strings.Cut(rest, "\n")
	require.Len(t, tag, 12)
	require.Contains(t, text, "\npage-"+tag+">>>")
	return tag
}

func TestRenderReplacesCrashedBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t, browser.Config{}, nil)
	const conv = "crash-conversation"
	mustCall(t, b, conv, browser.ToolOpen, map[string]string{"url": site.url("/")})
	old := b.PID()
	require.Positive(t, old)
	require.NoError(t, syscall.Kill(old, syscall.SIGKILL))

	p, err := b.Render(context.Background(), site.url("/"), browser.RenderOptions{})
	require.NoError(t, err)
	require.Contains(t, p.Text, "Hello from the test page")
	fresh := b.PID()
	require.Positive(t, fresh)
	require.NotEqual(t, old, fresh)
	require.Eventually(t, func() bool { return procGone(old) }, 10*time.Second, 20*time.Millisecond)

	// The conversation's tab died with it: a clear error, then a new tab.
	_, err = call(t, b, conv, browser.ToolRead, nil)
	require.ErrorContains(t, err, "the browser restarted and this tab was lost")
	_, err = call(t, b, conv, browser.ToolRead, nil)
	require.ErrorIs(t, err, browser.ErrNoTab)
	mustCall(t, b, conv, browser.ToolOpen, map[string]string{"url": site.url("/")})
	require.Contains(t, mustCall(t, b, conv, browser.ToolRead, nil).Text, "Hello from the test page")
	mustCall(t, b, conv, browser.ToolClose, nil)

}

func TestRenderRecyclesChromium(t *testing.T) {
	t.Parallel()
	// A tiny screenshot limit too: the picture is dropped with a note.
	b := newBrowser(t, browser.Config{MaxScreenshot: 100}, nil)
	b.SetRecycleAfter(2)
	const conv = "recycle-conversation"
	mustCall(t, b, conv, browser.ToolOpen, map[string]string{"url": site.url("/")})
	old := b.PID()
	for i := 0; i < 3 && b.PID() == old; i++ {
		p, err := b.Render(context.Background(), site.url("/"), browser.RenderOptions{Screenshot: true})
		require.NoError(t, err)
		require.Nil(t, p.Screenshot)
		require.Equal(t, "screenshot dropped: bigger than 100 bytes even as JPEG", p.Note)
	}
	require.NotEqual(t, old, b.PID(), "a fresh Chromium took over")
	// The old one drains: it keeps serving the open tab until it closes.
	require.False(t, procGone(old))
	require.Contains(t, mustCall(t, b, conv, browser.ToolRead, nil).Text, "Hello from the test page")
	mustCall(t, b, conv, browser.ToolClose, nil)
	require.Eventually(t, func() bool { return procGone(old) }, 10*time.Second, 20*time.Millisecond)
}

func TestRenderHonoursSlots(t *testing.T) {
	t.Parallel()
	b := newBrowser(t, browser.Config{}, nil)
	require.Equal(t, browser.DefaultSlots, b.Slots())
	const calls = 10
	var wg sync.WaitGroup
	errs := make([]error, calls)
	titles := make([]string, calls)
	for i := range calls {
		wg.Go(func() {
			p, err := b.Render(context.Background(), site.url("/count?i="+itoa(i)), browser.RenderOptions{})
			errs[i] = err
			if err == nil {
				titles[i] = p.Title
			}
		})
	}
	wg.Wait()
	for i := range calls {
		require.NoError(t, errs[i], "call %d", i)
		require.Equal(t, "Count "+itoa(i), titles[i])
	}
	require.LessOrEqual(t, b.MaxRenderPages(), int64(b.Slots()), "pages open at once")
	require.GreaterOrEqual(t, b.MaxRenderPages(), int64(2), "renders did run side by side")
	require.LessOrEqual(t, site.countMax.Load(), int64(b.Slots()), "requests in flight at the server")
	require.Zero(t, b.SlotsInUse())
}

func TestPoolQueueWait(t *testing.T) {
	t.Parallel()
	fc := newFake()
	p := browser.NewPoolForTest(1, 20*time.Second, fc)
	release, err := browser.Acquire(p, context.Background())
	require.NoError(t, err)

	// Full: the next caller waits up to the queue wait, then gives up.
	done := make(chan error, 1)
	go func() {
		_, err := browser.Acquire(p, context.Background())
		done <- err
	}()
	require.Eventually(t, func() bool { return fc.Pending() == 1 }, 5*time.Second, time.Millisecond)
	fc.Advance(19 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("gave up early: %v", err)
	default:
	}
	fc.Advance(time.Second)
	err = <-done
	require.ErrorIs(t, err, browser.ErrBusy)
	require.ErrorContains(t, err, "too many disposable browsers running")

	// A slot freed while waiting is taken.
	go func() {
		r, err := browser.Acquire(p, context.Background())
		if err == nil {
			r()
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return fc.Pending() == 1 }, 5*time.Second, time.Millisecond)
	release()
	require.NoError(t, <-done)

	// The caller's context ends the wait.
	release, err = browser.Acquire(p, context.Background())
	require.NoError(t, err)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := browser.Acquire(p, ctx)
		done <- err
	}()
	require.Eventually(t, func() bool { return fc.Pending() == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
