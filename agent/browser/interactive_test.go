package browser_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/browser"
	"github.com/personakit/persona/clock"
)

func newFake() *clock.Fake { return clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) }

// tools returns b's interactive tools by name.
func tools(t *testing.T, b *browser.Browser) map[string]agent.ResultTool {
	t.Helper()
	out := map[string]agent.ResultTool{}
	for _, tl := range b.InteractiveTools() {
		rt, ok := tl.(agent.ResultTool)
		require.True(t, ok, tl.Spec().Name)
		out[tl.Spec().Name] = rt
	}
	return out
}

// call runs an interactive tool of b in the conversation key.
func call(t *testing.T, b *browser.Browser, key, name string, args any) (agent.ToolResult, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	ctx := context.Background()
	if key != "" {
		ctx = agent.WithSession(ctx, key)
	}
	return tools(t, b)[name].CallResult(ctx, raw)
}

func mustCall(t *testing.T, b *browser.Browser, key, name string, args any) agent.ToolResult {
	t.Helper()
	res, err := call(t, b, key, name, args)
	require.NoError(t, err, name)
	return res
}

func TestInteractive(t *testing.T) {
	t.Parallel()
	fc := newFake()
	logs := &syncBuffer{}
	dir := t.TempDir()
	// A screenshot limit a noisy PNG exceeds: it is taken as JPEG.
	b := newBrowser(t, browser.Config{Clock: fc, MaxTabs: 2, Dir: dir, MaxScreenshot: 1 << 20}, logs)
	const typed = "Ada Lovelace"
	const convA = "telegram:chat-4242"
	const convB = "telegram:chat-777"
	defer func() {
		// Whatever happened, leave no tab behind for the other tests.
		for _, k := range []string{convA, convB, "c1"} {
			_, _ = call(t, b, k, browser.ToolClose, nil)
		}
	}()

	t.Run("open, type, click, read", func(t *testing.T) {
		res := mustCall(t, b, convA, browser.ToolOpen, map[string]string{"url": site.url("/form")})
		require.Contains(t, res.Text, "Title: Form")
		require.Contains(t, res.Text, "nobody greeted")
		require.Contains(t, res.Text, "untrusted content")
		require.Len(t, res.Evidence, 1)

		res = mustCall(t, b, convA, browser.ToolType, map[string]any{"selector": "#name", "text": typed})
		require.Contains(t, res.Text, "Typed 12 characters.")
		require.NotContains(t, res.Text, typed)

		res = mustCall(t, b, convA, browser.ToolClick, map[string]string{"text": "greet me"})
		require.Contains(t, res.Text, "Clicked.")

		res = mustCall(t, b, convA, browser.ToolRead, nil)
		require.Contains(t, res.Text, "Hello, "+typed+"!")
		require.Contains(t, res.Text, "URL: "+site.url("/form"))

		// By selector, and typing replaces the old value.
		mustCall(t, b, convA, browser.ToolType, map[string]any{"selector": "#name", "text": "Grace"})
		mustCall(t, b, convA, browser.ToolClick, map[string]string{"selector": "#greet"})
		require.Contains(t, mustCall(t, b, convA, browser.ToolRead, nil).Text, "Hello, Grace!")
	})

	t.Run("submit navigates", func(t *testing.T) {
		res := mustCall(t, b, convA, browser.ToolType, map[string]any{"selector": "#q", "text": "kittens", "submit": true})
		require.Contains(t, res.Text, "pressed Enter")
		require.Contains(t, res.Text, "Title: Echo")
		require.Contains(t, mustCall(t, b, convA, browser.ToolRead, nil).Text, "you searched for kittens")
	})

	t.Run("scroll and screenshot", func(t *testing.T) {
		mustCall(t, b, convA, browser.ToolOpen, map[string]string{"url": site.url("/form")})
		res := mustCall(t, b, convA, browser.ToolScroll, map[string]any{"direction": "down", "pixels": 500})
		require.Contains(t, res.Text, "now 500 of")
		res = mustCall(t, b, convA, browser.ToolScroll, map[string]any{"direction": "bottom"})
		require.NotContains(t, res.Text, "now 0 of")
		res = mustCall(t, b, convA, browser.ToolScroll, map[string]any{"direction": "top"})
		require.Contains(t, res.Text, "now 0 of")
		_, err := call(t, b, convA, browser.ToolScroll, map[string]any{"direction": "sideways"})
		require.ErrorContains(t, err, "direction must be")

		res = mustCall(t, b, convA, browser.ToolScreenshot, nil)
		require.Len(t, res.Images, 1)
		data, ok := strings.CutPrefix(res.Images[0], "data:image/png;base64,")
		require.True(t, ok)
		img, err := base64.StdEncoding.DecodeString(data)
		require.NoError(t, err)
		require.GreaterOrEqual(t, distinctColors(t, img, 2), 2)

		// Saved in the conversation's folder, named by a hash.
		folder := filepath.Join(dir, browser.SessionHash(convA))
		files, err := os.ReadDir(folder)
		require.NoError(t, err)
		require.Len(t, files, 1)
		require.Contains(t, res.Text, filepath.Join(folder, files[0].Name()))
		require.NotContains(t, folder, "chat-4242")
		st, err := os.Stat(folder)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	})

	t.Run("a big screenshot is taken as JPEG", func(t *testing.T) {
		mustCall(t, b, convA, browser.ToolOpen, map[string]string{"url": site.url("/noise")})
		res := mustCall(t, b, convA, browser.ToolScreenshot, nil)
		require.Contains(t, res.Text, "screenshot taken as JPEG")
		data, ok := strings.CutPrefix(res.Images[0], "data:image/jpeg;base64,")
		require.True(t, ok)
		img, err := base64.StdEncoding.DecodeString(data)
		require.NoError(t, err)
		require.LessOrEqual(t, len(img), 1<<20)
		require.GreaterOrEqual(t, distinctColors(t, img, 100), 100)
		t.Logf("%s, %d bytes", res.Text, len(img))
	})

	t.Run("errors", func(t *testing.T) {
		mustCall(t, b, convA, browser.ToolOpen, map[string]string{"url": site.url("/form")})
		_, err := call(t, b, convA, browser.ToolClick, map[string]string{"selector": "#nope"})
		require.ErrorContains(t, err, `no element matches selector "#nope"`)
		_, err = call(t, b, convA, browser.ToolClick, map[string]string{"text": "no such words anywhere"})
		require.ErrorContains(t, err, "no element matches text")
		_, err = call(t, b, convA, browser.ToolClick, map[string]string{"selector": "##bad"})
		require.ErrorContains(t, err, "bad selector")
		_, err = call(t, b, convA, browser.ToolClick, map[string]string{})
		require.ErrorContains(t, err, "give a selector or the text")
		_, err = call(t, b, convA, browser.ToolType, map[string]string{"text": "x"})
		require.ErrorContains(t, err, "selector is required")
		_, err = call(t, b, convA, browser.ToolOpen, map[string]string{"url": "http://10.0.0.1/"})
		require.ErrorContains(t, err, "refused: http://10.0.0.1/: address is not public")
		_, err = call(t, b, convA, browser.ToolOpen, map[string]string{"url": site.url("/redirect-metadata")})
		require.ErrorContains(t, err, "refused: http://169.254.169.254/latest/meta-data/")
		// A click that navigates to a refused address.
		mustCall(t, b, convA, browser.ToolOpen, map[string]string{"url": site.url("/form")})
		_, err = call(t, b, convA, browser.ToolClick, map[string]string{"text": "cloud metadata"})
		require.ErrorContains(t, err, "refused: http://169.254.169.254/latest/meta-data/: address is not public")
		// The tab survives refusals and errors.
		mustCall(t, b, convA, browser.ToolOpen, map[string]string{"url": site.url("/form")})

		// No conversation: no tab.
		for _, name := range []string{browser.ToolOpen, browser.ToolRead, browser.ToolClose} {
			_, err = call(t, b, "", name, map[string]string{"url": site.url("/")})
			require.ErrorIs(t, err, browser.ErrNoSession, name)
		}
		// A conversation without a tab must open one first.
		_, err = call(t, b, "conversation-without-tab", browser.ToolRead, nil)
		require.ErrorIs(t, err, browser.ErrNoTab)
	})

	t.Run("two conversations get two tabs; full, the longest idle makes room", func(t *testing.T) {
		mustCall(t, b, convB, browser.ToolOpen, map[string]string{"url": site.url("/")})
		require.Equal(t, 2, b.TabCount())
		require.Contains(t, mustCall(t, b, convB, browser.ToolRead, nil).Text, "Title: Test page")
		require.Contains(t, mustCall(t, b, convA, browser.ToolRead, nil).Text, "Title: Form")

		// MaxTabs is 2: B, idle the longest, gives way to C.
		fc.Advance(time.Second)
		mustCall(t, b, convA, browser.ToolRead, nil)
		mustCall(t, b, "c1", browser.ToolOpen, map[string]string{"url": site.url("/")})
		require.Equal(t, 2, b.TabCount())
		_, err := call(t, b, convB, browser.ToolRead, nil)
		require.ErrorIs(t, err, browser.ErrNoTab)
		require.Contains(t, mustCall(t, b, convA, browser.ToolRead, nil).Text, "Title: Form")

		res := mustCall(t, b, "c1", browser.ToolClose, nil)
		require.Contains(t, res.Text, "Closed")
		require.Equal(t, 1, b.TabCount())
		res = mustCall(t, b, "c1", browser.ToolClose, nil)
		require.Contains(t, res.Text, "No browser tab was open")
	})

	t.Run("hold expiry closes the tab", func(t *testing.T) {
		require.Equal(t, 1, b.TabCount())
		fc.Advance(browser.DefaultHold - time.Second)
		require.Equal(t, 1, b.TabCount(), "still within the hold")
		// An action starts the hold anew.
		mustCall(t, b, convA, browser.ToolRead, nil)
		fc.Advance(browser.DefaultHold + b.SweepEvery())
		require.Eventually(t, func() bool {
			if b.TabCount() == 0 {
				return true
			}
			fc.Advance(b.SweepEvery())
			return false
		}, 10*time.Second, 10*time.Millisecond)
		_, err := call(t, b, convA, browser.ToolRead, nil)
		require.ErrorIs(t, err, browser.ErrNoTab)
	})

	t.Run("one log line per action, no typed text, no session key", func(t *testing.T) {
		out := logs.String()
		require.Contains(t, out, "action=browser_action")
		require.Contains(t, out, "tool=browser_type")
		require.Contains(t, out, "tool=browser_click")
		require.Contains(t, out, "session="+browser.SessionHash(convA)[:12])
		require.Contains(t, out, "host=127.0.0.1:")
		require.Contains(t, out, "result=error")
		require.NotContains(t, out, typed)
		require.NotContains(t, out, "Grace")
		require.NotContains(t, out, "kittens")
		require.NotContains(t, out, "chat-4242")
	})
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fc := newFake()
	b := browser.NewIdleForTest(browser.Config{Dir: dir, Clock: fc, Retention: 48 * time.Hour})
	folder := filepath.Join(dir, browser.SessionHash("conv"))
	require.NoError(t, os.MkdirAll(folder, 0o700))
	now := fc.Now()
	write := func(dir, name string, age time.Duration) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
		require.NoError(t, os.Chtimes(p, now.Add(-age), now.Add(-age)))
		return p
	}
	old := write(folder, "shot-old.png", 49*time.Hour)
	fresh := write(folder, "shot-new.jpg", 47*time.Hour)
	foreign := write(folder, "notes.txt", 100*time.Hour)
	otherDir := filepath.Join(dir, "not-ours")
	require.NoError(t, os.MkdirAll(otherDir, 0o700))
	otherFile := write(otherDir, "shot-x.png", 100*time.Hour)
	emptyFolder := filepath.Join(dir, browser.SessionHash("gone"))
	require.NoError(t, os.MkdirAll(emptyFolder, 0o700))
	write(emptyFolder, "shot-a.png", 72*time.Hour)

	require.NoError(t, b.Cleanup(now))
	require.NoFileExists(t, old)
	require.FileExists(t, fresh)
	require.FileExists(t, foreign, "only our screenshots are deleted")
	require.FileExists(t, otherFile, "only our folders are searched")
	require.NoDirExists(t, emptyFolder, "an emptied folder goes")

	require.NoError(t, b.Cleanup(now.Add(2*time.Hour)))
	require.NoFileExists(t, fresh)
	require.DirExists(t, folder, "a folder with other files stays")

	// Run cleans at once and then every hour on the clock.
	write(folder, "shot-later.png", 47*time.Hour+30*time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	require.Eventually(t, func() bool { return fc.Pending() >= 1 }, 5*time.Second, time.Millisecond)
	require.FileExists(t, filepath.Join(folder, "shot-later.png"))
	fc.Advance(time.Hour)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(folder, "shot-later.png"))
		return os.IsNotExist(err)
	}, 5*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	// A missing folder is nothing to clean.
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, b.Cleanup(now))
}

func TestRegister(t *testing.T) {
	t.Parallel()
	reg := agent.NewRegistry()
	require.NoError(t, shared.Register(reg))
	require.Equal(t, []string{
		browser.ToolRender, browser.ToolOpen, browser.ToolClick, browser.ToolType, browser.ToolScroll,
		browser.ToolScreenshot, browser.ToolRead, browser.ToolClose,
	}, reg.Names())
	require.ErrorIs(t, shared.Register(reg), agent.ErrToolDuplicate)
	require.Error(t, shared.Register(nil))
	for _, tl := range shared.InteractiveTools() {
		var schema map[string]any
		require.NoError(t, json.Unmarshal(tl.Spec().Parameters, &schema), tl.Spec().Name)
		require.Equal(t, "object", schema["type"])
	}
}
