package browser_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/personakit/persona/agent/browser"
	"github.com/personakit/persona/internal/netguard"
)

// chromiumBin is where CI installs Chromium.
const chromiumBin = "/usr/bin/chromium"

// Shared by the tests: one Browser (one warm Chromium) for the renders
// that leave it as it is, and the pages the tests load. Tests that kill,
// recycle or time a Chromium, or move a clock, start their own (newBrowser)
// so that every test can run in parallel.
var (
	shared *browser.Browser
	site   *testSite
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if st, err := os.Stat(chromiumBin); err != nil || st.IsDir() {
		// Not a skip: CI installs Chromium, so its absence is a failure.
		fmt.Fprintf(os.Stderr, "FAIL: Chromium is required at %s for these tests (apt-get install chromium): %v\n", chromiumBin, err)
		return 1
	}
	site = newTestSite()
	defer site.close()
	dir, err := os.MkdirTemp("", "browser-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	shared, err = browser.New(browser.Config{Bin: chromiumBin, Guard: testGuard(), Dir: dir, Settle: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: starting the browser:", err)
		return 1
	}
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		code = 1
	}
	return code
}

// newBrowser starts a Browser of the test's own, closed when the test
// ends. Zero fields of cfg get the test defaults: the test Chromium and
// guard, a temporary Dir, and a log into logs (when given).
func newBrowser(t *testing.T, cfg browser.Config, logs *syncBuffer) *browser.Browser {
	t.Helper()
	if cfg.Bin == "" {
		cfg.Bin = chromiumBin
	}
	if cfg.Guard == nil {
		cfg.Guard = testGuard()
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	b, err := browser.New(cfg)
	if err != nil {
		t.Fatalf("starting a browser: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("closing the browser: %v", err)
		}
	})
	return b
}

// testGuard lets only 127.0.0.1 through: 127.0.0.2 stands for an internal
// host the browser must not reach.
func testGuard() *netguard.Guard {
	return netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// testSite is the pages the tests load: an allowed server on 127.0.0.1 and
// an "internal" one on 127.0.0.2 that must never see a request.
type testSite struct {
	srv      *httptest.Server
	internal *httptest.Server
	stop     chan struct{}

	internalHits atomic.Int64
	okImageHits  atomic.Int64
	countNow     atomic.Int64
	countMax     atomic.Int64
	holding      atomic.Int64
}

func newTestSite() *testSite {
	s := &testSite{stop: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		panic(err)
	}
	s.internal = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.internalHits.Add(1)
		w.Header().Set("Access-Control-Allow-Origin", "*")
		fmt.Fprint(w, "secret")
	}))
	s.internal.Listener = ln
	s.internal.Start()
	return s
}

func (s *testSite) close() {
	close(s.stop)
	s.srv.Close()
	s.internal.Close()
}

func (s *testSite) url(path string) string { return s.srv.URL + path }

// internalURL is an address on 127.0.0.2, which the guard refuses.
func (s *testSite) internalURL(path string) string { return s.internal.URL + path }

// block waits until the request or the site ends.
func (s *testSite) block(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.stop:
	}
}

func html(w http.ResponseWriter, title, body string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><html><head><meta charset=utf-8><title>%s</title></head><body>%s</body></html>", title, body)
}

func (s *testSite) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		html(w, "Test page", `<div style="background:#c03;color:#fff;padding:40px;font:32px sans-serif">Hello from the test page</div>`+
			`<p>Second paragraph.</p><p style="display:none">hidden words</p><script>document.write("<p>written by script</p>")</script>`)
	case "/long":
		html(w, "Long", "<p>"+strings.Repeat("ab ", 6000)+"</p>")
	case "/slow-img":
		html(w, "Slow", `<h1>Visible before the image</h1><img src="/never.png">`)
	case "/never.png", "/hang":
		s.block(r)
	case "/redirect-private":
		http.Redirect(w, r, "http://10.0.0.1/", http.StatusFound)
	case "/redirect-metadata":
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	case "/redirect-internal":
		http.Redirect(w, r, s.internalURL("/"), http.StatusFound)
	case "/subres":
		in := s.internalURL("")
		html(w, "Subresources", `<p id=out>xhr: pending</p><img src="/ok.png"><img src="`+in+`/pixel.png">`+
			`<script>fetch("`+in+`/data").then(r => r.ok ? r.text() : Promise.reject(r.status))`+
			`.then(t => { document.getElementById("out").textContent = "xhr: got " + t },`+
			` () => { document.getElementById("out").textContent = "xhr: failed" })</script>`)
	case "/ok.png":
		s.okImageHits.Add(1)
		w.Header().Set("Content-Type", "image/gif")
		_, _ = w.Write(gif1x1)
	case "/download":
		w.Header().Set("Content-Disposition", `attachment; filename="data.bin"`)
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write([]byte("binary"))
	case "/count":
		n := s.countNow.Add(1)
		for {
			m := s.countMax.Load()
			if n <= m || s.countMax.CompareAndSwap(m, n) {
				break
			}
		}
		// A slow server: overlapping renders would show up in countMax.
		select {
		case <-time.After(150 * time.Millisecond):
		case <-s.stop:
		}
		s.countNow.Add(-1)
		html(w, "Count "+r.URL.Query().Get("i"), "<p>count page "+r.URL.Query().Get("i")+"</p>")
	case "/hold":
		html(w, "Hold", `<h1>held page</h1><img src="/hold.png">`)
	case "/hold.png":
		s.holding.Add(1)
		defer s.holding.Add(-1)
		s.block(r)
	case "/form":
		html(w, "Form", `<input id=name placeholder="your name"> <button id=greet onclick="`+
			`document.getElementById('out').textContent = 'Hello, ' + document.getElementById('name').value + '!'">Greet me</button>`+
			`<p id=out>nobody greeted</p><a id=meta href="http://169.254.169.254/latest/meta-data/">cloud metadata</a>`+
			`<form action="/echo" method=get><input id=q name=q><input type=submit value=Search></form>`+
			`<div style="height:3000px">tall</div><p>bottom of the form page</p>`)
	case "/noise":
		// Random pixels: a PNG of them is big, a JPEG much smaller.
		html(w, "Noise", `<canvas id=c width=1280 height=800></canvas><script>`+
			`const x = document.getElementById("c").getContext("2d"), d = x.createImageData(1280, 800);`+
			`for (let i = 0; i < d.data.length; i++) d.data[i] = i % 4 == 3 ? 255 : (Math.random() * 256) | 0;`+
			`x.putImageData(d, 0, 0)</script>`)
	case "/echo":
		html(w, "Echo", "<p>you searched for "+template(r.URL.Query().Get("q"))+"</p>")
	default:
		http.NotFound(w, r)
	}
}

// template escapes text for HTML.
func template(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}

// gif1x1 is a transparent 1×1 GIF.
var gif1x1 = []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")

// itoa is strconv.Itoa.
func itoa(i int) string { return strconv.Itoa(i) }
