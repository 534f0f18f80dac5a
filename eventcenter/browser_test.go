package eventcenter_test

import (
	"bytes"
	"fmt"
	"image/png"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// chromiumBin is where the tests expect Chromium (Debian's package).
const chromiumBin = "/usr/bin/chromium"

// xssText is a message text that would run script if it were inserted as
// markup.
const xssText = `<img src=x onerror="window.__xss=1">`

// launchBrowser starts a headless Chromium for the test; a missing browser
// fails the test.
func launchBrowser(t *testing.T) *rod.Browser {
	t.Helper()
	if _, err := os.Stat(chromiumBin); err != nil {
		t.Fatalf("the browser test needs Chromium at %s (Debian: apt-get install chromium): %v", chromiumBin, err)
	}
	l := launcher.New().Bin(chromiumBin).Headless(true).NoSandbox(true).Leakless(false).
		Set("disable-gpu").Set("disable-dev-shm-usage")
	u, err := l.Launch()
	require.NoError(t, err, "launch %s", chromiumBin)
	t.Cleanup(func() {
		l.Kill()
		l.Cleanup()
	})
	b := rod.New().ControlURL(u)
	require.NoError(t, b.Connect())
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// pageProblems collects the page's uncaught exceptions, console errors and
// CSP violations.
type pageProblems struct {
	mu   sync.Mutex
	list []string
}

func (pp *pageProblems) add(s string) {
	pp.mu.Lock()
	pp.list = append(pp.list, s)
	pp.mu.Unlock()
}

func (pp *pageProblems) get() []string {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return append([]string(nil), pp.list...)
}

// openPage opens url in a new tab and watches it for problems.
func openPage(t *testing.T, b *rod.Browser, url string) (*rod.Page, *pageProblems) {
	t.Helper()
	p, err := b.Page(proto.TargetCreateTarget{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	pp := &pageProblems{}
	require.NoError(t, proto.LogEnable{}.Call(p))
	require.NoError(t, proto.RuntimeEnable{}.Call(p))
	go p.EachEvent(
		func(e *proto.RuntimeExceptionThrown) { pp.add("exception: " + e.ExceptionDetails.Text) },
		func(e *proto.LogEntryAdded) {
			// Network errors are the test's own refused requests; CSP
			// violations come as security entries.
			if e.Entry.Level == proto.LogLogEntryLevelError && e.Entry.Source != proto.LogLogEntrySourceNetwork {
				pp.add("log: " + string(e.Entry.Source) + ": " + e.Entry.Text)
			}
		},
		func(e *proto.RuntimeConsoleAPICalled) {
			if e.Type == proto.RuntimeConsoleAPICalledTypeError {
				pp.add("console error")
			}
		},
	)()
	require.NoError(t, p.SetViewport(&proto.EmulationSetDeviceMetricsOverride{Width: 1280, Height: 800, DeviceScaleFactor: 1}))
	require.NoError(t, p.Navigate(url))
	require.NoError(t, p.WaitLoad())
	return p, pp
}

// evalInt, evalStr and evalBool run a JS function on the page.
func evalInt(t *testing.T, p *rod.Page, js string, args ...any) int {
	t.Helper()
	r, err := p.Eval(js, args...)
	require.NoError(t, err, js)
	return r.Value.Int()
}

func evalStr(t *testing.T, p *rod.Page, js string, args ...any) string {
	t.Helper()
	r, err := p.Eval(js, args...)
	require.NoError(t, err, js)
	return r.Value.Str()
}

// waitFor waits up to d for the JS predicate to hold.
func waitFor(t *testing.T, p *rod.Page, d time.Duration, what, js string, args ...any) {
	t.Helper()
	require.NoError(t, p.Timeout(d).Wait(rod.Eval(js, args...)), "waiting for %s", what)
}

const rowCount = `() => document.querySelectorAll('#messages tr[data-id]').length`

func TestBrowser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, clock.Real, eventcenter.Config{Secrets: []string{"pa55word"}, Title: "ops <test>"}, withLedger)
	now := time.Now()
	at := func(s int) time.Time { return now.Add(time.Duration(s-60) * time.Second) }
	var all []string
	for i := range 6 {
		code := []outcome.Code{outcome.Replied, inbound.IgnoredStale, outcome.NoticePoke}[i%3]
		all = append(all, e.record(event(channel.Group, []string{"a", "b"}[i%2], fmt.Sprint("m", i), at(i),
			fmt.Sprintf("message %d pa55word", i)), inbound.Outcome{Code: code, Reason: "reason " + fmt.Sprint(i)}))
	}
	xssID := e.complete(event(channel.Group, "a", "xss", at(10), xssText),
		inbound.Outcome{Code: "dropped_send_rejected", Reason: "kicked",
			Trail: &inbound.Trail{Trigger: "mention", Gates: []string{"bot_enabled"}}})
	all = append(all, xssID)

	b := launchBrowser(t)

	// Without a token: the prompt, no data; the API refuses the page.
	p, problems := openPage(t, b, e.base)
	waitFor(t, p, 10*time.Second, "the token prompt", `() => !document.getElementById('login').hidden`)
	require.Equal(t, 0, evalInt(t, p, rowCount))
	require.True(t, evalStr(t, p, `() => document.getElementById('app').hidden ? 'yes' : 'no'`) == "yes")
	html, err := p.HTML()
	require.NoError(t, err)
	require.NotContains(t, html, "message 1")
	require.Contains(t, html, "ops &lt;test&gt;", "the title is escaped")
	require.Equal(t, 401, evalInt(t, p, `async () => (await fetch('api/messages')).status`))
	require.Equal(t, 401, evalInt(t, p, `async () => (await fetch('api/events')).status`))

	// A wrong token is refused and the prompt stays.
	tokenInput, err := p.Element("#token")
	require.NoError(t, err)
	require.NoError(t, tokenInput.Input("wrong-token-wrong-token"))
	submit, err := p.Element("#login-submit")
	require.NoError(t, err)
	require.NoError(t, submit.Click(proto.InputMouseButtonLeft, 1))
	waitFor(t, p, 5*time.Second, "the refusal", `() => document.getElementById('login-error').textContent.includes('refused')`)
	require.Equal(t, 0, evalInt(t, p, rowCount))

	// The right token shows the messages, newest first, secrets masked.
	require.NoError(t, tokenInput.Input(testToken))
	require.NoError(t, submit.Click(proto.InputMouseButtonLeft, 1))
	waitFor(t, p, 10*time.Second, "the rows", `(n) => document.querySelectorAll('#messages tr[data-id]').length === n`, len(all))
	require.Equal(t, xssID, evalStr(t, p, `() => document.querySelector('#messages tr[data-id]').dataset.id`))
	require.Equal(t, "message 5 ***", evalStr(t, p,
		`(id) => document.querySelector('#messages tr[data-id="' + CSS.escape(id) + '"] td.text').textContent`, all[5]))
	require.NotContains(t, evalStr(t, p, `() => document.body.textContent`), "pa55word")
	waitFor(t, p, 5*time.Second, "the live feed", `() => document.getElementById('live').dataset.state === 'open'`)
	waitFor(t, p, 5*time.Second, "the summary", `() => document.getElementById('summary').textContent.includes('pending')`)

	// Markup in a message is shown as text.
	require.Equal(t, xssText, evalStr(t, p,
		`(id) => document.querySelector('#messages tr[data-id="' + CSS.escape(id) + '"] td.text').textContent`, xssID))
	require.Equal(t, 0, evalInt(t, p, `() => document.querySelectorAll('#messages img, #trail img').length`))
	require.Equal(t, "undefined", evalStr(t, p, `() => typeof window.__xss`))
	require.Equal(t, "dropped", evalStr(t, p,
		`(id) => document.querySelector('#messages tr[data-id="' + CSS.escape(id) + '"]').dataset.family`, xssID))

	// A record completed while the page is open appears at the top within
	// 2 s, without Wake (the poll finds it).
	liveID := e.complete(event(channel.Private, "p", "live", at(-30), "fresh from the pipeline"),
		inbound.Outcome{Code: outcome.Replied})
	waitFor(t, p, 2*time.Second, "the live row",
		`(id) => { const r = document.querySelector('#messages tr[data-id]'); return !!r && r.dataset.id === id }`, liveID)
	require.Equal(t, len(all)+1, evalInt(t, p, rowCount))

	// Filters narrow the list: by code, then by text.
	sel, err := p.Element("#filter-code")
	require.NoError(t, err)
	waitFor(t, p, 5*time.Second, "the code list", `() => document.querySelectorAll('#filter-code option').length > 40`)
	require.NoError(t, sel.Select([]string{string(inbound.IgnoredStale)}, true, rod.SelectorTypeText))
	waitFor(t, p, 5*time.Second, "the code filter", `(c) => { const rs = [...document.querySelectorAll('#messages tr[data-id]')];
		return rs.length === 2 && rs.every(r => r.dataset.code === c) }`, string(inbound.IgnoredStale))
	clear, err := p.Element("#filter-clear")
	require.NoError(t, err)
	require.NoError(t, clear.Click(proto.InputMouseButtonLeft, 1))
	waitFor(t, p, 5*time.Second, "the whole list again", `(n) => document.querySelectorAll('#messages tr[data-id]').length === n`, len(all)+1)
	text, err := p.Element("#filter-text")
	require.NoError(t, err)
	require.NoError(t, text.Input("MESSAGE 3"))
	waitFor(t, p, 5*time.Second, "the text filter", `(id) => { const rs = document.querySelectorAll('#messages tr[data-id]');
		return rs.length === 1 && rs[0].dataset.id === id }`, all[3])
	require.NoError(t, clear.Click(proto.InputMouseButtonLeft, 1))
	waitFor(t, p, 5*time.Second, "the whole list again", `(n) => document.querySelectorAll('#messages tr[data-id]').length === n`, len(all)+1)

	// Clicking a row opens its trail.
	row, err := p.Element(`#messages tr[data-id="` + strings.ReplaceAll(xssID, `"`, `\"`) + `"]`)
	require.NoError(t, err)
	require.NoError(t, row.Click(proto.InputMouseButtonLeft, 1))
	waitFor(t, p, 5*time.Second, "the trail", `(id) => document.getElementById('trail').dataset.loaded === id`, xssID)
	require.Equal(t, "dropped_send_rejected", evalStr(t, p, `() => document.querySelector('#trail [data-field=code]').textContent`))
	require.Equal(t, "kicked", evalStr(t, p, `() => document.querySelector('#trail [data-field=reason]').textContent`))
	require.Equal(t, "mention", evalStr(t, p, `() => document.querySelector('#trail [data-field=trigger]').textContent`))
	require.Equal(t, xssText, evalStr(t, p, `() => document.querySelector('#trail [data-field=text]').textContent`))
	require.Contains(t, evalStr(t, p, `() => document.querySelector('#trail .meaning').textContent`), "rejected the send")
	require.Equal(t, 0, evalInt(t, p, `() => document.querySelectorAll('#trail img').length`))

	// The screenshot is not blank.
	shot, err := p.Screenshot(false, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(shot))
	require.NoError(t, err)
	colours := map[[4]uint32]bool{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 2 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}] = true
		}
	}
	require.Greater(t, len(colours), 50, "the page rendered")

	// On a phone: no table header, rows as cards, the trail full width.
	require.NoError(t, p.SetViewport(&proto.EmulationSetDeviceMetricsOverride{Width: 390, Height: 844,
		DeviceScaleFactor: 2, Mobile: true}))
	waitFor(t, p, 5*time.Second, "the phone layout",
		`() => getComputedStyle(document.querySelector('#messages thead')).display === 'none'`)
	require.Equal(t, 390, evalInt(t, p, `() => Math.round(document.getElementById('trail').getBoundingClientRect().width)`))
	closeBtn, err := p.Element("#trail-close")
	require.NoError(t, err)
	require.NoError(t, closeBtn.Click(proto.InputMouseButtonLeft, 1))
	waitFor(t, p, 5*time.Second, "the trail closed", `() => document.getElementById('trail').hidden`)

	// A reload keeps the session (the token is in sessionStorage).
	require.NoError(t, p.Reload())
	require.NoError(t, p.WaitLoad())
	waitFor(t, p, 10*time.Second, "the rows after a reload",
		`(n) => document.querySelectorAll('#messages tr[data-id]').length === n`, len(all)+1)

	// Signing out forgets the token and shows the prompt again.
	logout, err := p.Element("#logout")
	require.NoError(t, err)
	require.NoError(t, logout.Click(proto.InputMouseButtonLeft, 1))
	waitFor(t, p, 5*time.Second, "the prompt", `() => !document.getElementById('login').hidden`)
	require.Equal(t, 0, evalInt(t, p, rowCount))
	require.Equal(t, "", evalStr(t, p, `() => sessionStorage.getItem('persona-events-token') || ''`))
	require.Empty(t, problems.get(), "no script errors or CSP violations")

	// A token in the address's fragment signs in and leaves the address.
	p2, problems2 := openPage(t, b, e.base+"#token="+url.QueryEscape(testToken))
	waitFor(t, p2, 10*time.Second, "the rows", `(n) => document.querySelectorAll('#messages tr[data-id]').length === n`, len(all)+1)
	require.Equal(t, "", evalStr(t, p2, `() => location.hash`))
	require.Empty(t, problems2.get())
}

// TestBrowserFeedReconnects drops the page's live feed twice: once with
// its session cookie still valid (the browser reconnects by itself with
// Last-Event-ID), once after the cookie expired (the feed is refused; the
// page buys a new cookie with its token and resumes after the last event
// it saw). Records completed while the feed was down appear either way.
// The center runs on a fake clock: the cookie expires without waiting.
func TestBrowserFeedReconnects(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	e := newEnv(t, clk, eventcenter.Config{SessionTTL: time.Hour})
	first := e.record(event(channel.Group, "g", "0", clk.Now(), "first"), inbound.Outcome{Code: outcome.Replied})
	b := launchBrowser(t)
	p, problems := openPage(t, b, e.base+"#token="+url.QueryEscape(testToken))
	waitFor(t, p, 10*time.Second, "the rows", `(id) => { const r = document.querySelector('#messages tr[data-id]');
		return !!r && r.dataset.id === id }`, first)
	waitFor(t, p, 5*time.Second, "the live feed", `() => document.getElementById('live').dataset.state === 'open'`)
	atTop := `(id) => { const r = document.querySelector('#messages tr[data-id]'); return !!r && r.dataset.id === id }`

	// A live record, so the page has a cursor to resume from.
	live := e.record(event(channel.Group, "g", "1", clk.Now(), "live"), inbound.Outcome{Code: outcome.Replied})
	e.center.Wake()
	waitFor(t, p, 5*time.Second, "the live row", atTop, live)

	// The connection drops; the cookie is still good.
	e.srv.CloseClientConnections()
	down1 := e.record(event(channel.Group, "g", "2", clk.Now(), "while down"), inbound.Outcome{Code: outcome.Replied})
	e.center.Wake()
	waitFor(t, p, 10*time.Second, "the row completed while the feed was down", atTop, down1)

	// The cookie expires, then the connection drops: the reconnect is
	// refused and the page resumes with a new cookie.
	clk.Advance(2 * time.Hour)
	e.srv.CloseClientConnections()
	down2 := e.record(event(channel.Group, "g", "3", clk.Now(), "after expiry"), inbound.Outcome{Code: outcome.Replied})
	e.center.Wake()
	waitFor(t, p, 15*time.Second, "the row completed while the cookie was expired", atTop, down2)
	waitFor(t, p, 5*time.Second, "the live feed again", `() => document.getElementById('live').dataset.state === 'open'`)
	require.Equal(t, 4, evalInt(t, p, rowCount), "each record once")
	require.Len(t, e.requests("GET /api/events? 401"), 1, "the reconnect with the expired cookie was refused")
	require.Len(t, e.requests("POST /api/session 200"), 2, "and the page bought a new cookie")
	require.Eventually(t, func() bool { return e.center.Feeds() == 1 }, 5*time.Second, 10*time.Millisecond,
		"the resumed feed is open, the dropped ones ended")
	require.Empty(t, problems.get())
}
