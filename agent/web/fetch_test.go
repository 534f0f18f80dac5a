package web_test

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/internal/netguard"
)

const articlePage = `<html><head><title>Hello page</title></head><body>
<nav>Menu</nav><article><h1>Hello</h1><p>World &amp; friends.</p></article></body></html>`

func TestFetchHTML(t *testing.T) {
	s := newSite(t, web.Config{})
	s.handle("/post", "text/html; charset=utf-8", articlePage)
	d, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/post#section"))
	require.NoError(t, err)
	require.Equal(t, s.url("www.example.com", "/post#section"), d.URL)
	require.Equal(t, s.url("www.example.com", "/post"), d.FinalURL)
	require.Equal(t, "Hello page", d.Title)
	require.Equal(t, "Hello\nWorld & friends.", d.Text)
	require.Equal(t, "text/html", d.ContentType)
	require.False(t, d.Truncated)
	require.Equal(t, s.clock.Now(), d.FetchedAt)
}

func TestFetchPlainTextAndJSON(t *testing.T) {
	s := newSite(t, web.Config{})
	s.handle("/notes.txt", "text/plain; charset=utf-8", "line one\r\n\r\n\r\n\r\nline two\t \x07\n")
	s.handle("/data.json", "application/json", `{"name":"persona","tags":["a","b"]}`)
	s.handle("/feed", "application/rss+xml", `<rss><channel><title>Feed</title></channel></rss>`)

	d, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/notes.txt"))
	require.NoError(t, err)
	require.Equal(t, "line one\n\nline two", d.Text)
	require.Equal(t, "text/plain", d.ContentType)
	require.Empty(t, d.Title)

	d, err = s.reader.Fetch(context.Background(), s.url("www.example.com", "/data.json"))
	require.NoError(t, err)
	require.Equal(t, `{"name":"persona","tags":["a","b"]}`, d.Text)
	require.Equal(t, "application/json", d.ContentType)

	d, err = s.reader.Fetch(context.Background(), s.url("www.example.com", "/feed"))
	require.NoError(t, err)
	require.Contains(t, d.Text, "<title>Feed</title>")
}

func TestFetchCharsetFromHeader(t *testing.T) {
	s := newSite(t, web.Config{})
	// "新闻" / "今天天气很好" in GBK, declared only in the header.
	s.handle("/gbk", "text/html; charset=GBK", "<title>\xd0\xc2\xce\xc5</title><p>\xbd\xf1\xcc\xec\xcc\xec\xc6\xf8\xba\xdc\xba\xc3</p>")
	s.handle("/latin", "text/plain; charset=ISO-8859-1", "na\xefve caf\xe9")
	d, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/gbk"))
	require.NoError(t, err)
	require.Equal(t, "新闻", d.Title)
	require.Equal(t, "今天天气很好", d.Text)
	d, err = s.reader.Fetch(context.Background(), s.url("www.example.com", "/latin"))
	require.NoError(t, err)
	require.Equal(t, "naïve café", d.Text)
}

func TestFetchGzip(t *testing.T) {
	s := newSite(t, web.Config{})
	s.mux.HandleFunc("/gz", func(w http.ResponseWriter, r *http.Request) {
		require.Contains(t, r.Header.Get("Accept-Encoding"), "gzip")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = zw.Write([]byte(articlePage))
		_ = zw.Close()
	})
	d, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/gz"))
	require.NoError(t, err)
	require.Equal(t, "Hello page", d.Title)
}

func TestFetchSniffsMissingContentType(t *testing.T) {
	s := newSite(t, web.Config{})
	s.handle("/page", "", "<!DOCTYPE html><title>Sniffed</title><p>ok</p>")
	s.handle("/png", "", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	d, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/page"))
	require.NoError(t, err)
	require.Equal(t, "Sniffed", d.Title)
	require.Equal(t, "text/html", d.ContentType)

	_, err = s.reader.Fetch(context.Background(), s.url("www.example.com", "/png"))
	require.ErrorIs(t, err, web.ErrNotReadable)
	require.ErrorContains(t, err, "not a readable page (content type image/png)")
}

func TestFetchBinaryRefused(t *testing.T) {
	s := newSite(t, web.Config{})
	for path, ct := range map[string]string{
		"/img": "image/jpeg", "/doc.pdf": "application/pdf", "/bin": "application/octet-stream",
		"/song": "audio/mpeg", "/zip": "application/zip", "/events": "text/event-stream",
		"/logo.svg": "image/svg+xml",
	} {
		s.handle(path, ct, "\x00\x01binary")
		_, err := s.reader.Fetch(context.Background(), s.url("www.example.com", path))
		require.ErrorIs(t, err, web.ErrNotReadable, path)
		require.ErrorContains(t, err, "(content type "+ct+")", path)
	}
}

func TestFetchBinaryServedAsText(t *testing.T) {
	s := newSite(t, web.Config{})
	s.handle("/fake.html", "text/html", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	s.handle("/fake.txt", "text/plain", "%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj")
	_, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/fake.html"))
	require.ErrorContains(t, err, "not a readable page (content type image/png)")
	_, err = s.reader.Fetch(context.Background(), s.url("www.example.com", "/fake.txt"))
	require.ErrorContains(t, err, "not a readable page (content type application/pdf)")
}

func TestFetchHTTPErrors(t *testing.T) {
	s := newSite(t, web.Config{})
	s.mux.HandleFunc("/gone", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "nope", http.StatusNotFound) })
	s.mux.HandleFunc("/boom", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusServiceUnavailable) })
	for path, code := range map[string]int{"/gone": 404, "/boom": 503} {
		_, err := s.reader.Fetch(context.Background(), s.url("www.example.com", path))
		var se *web.StatusError
		require.ErrorAs(t, err, &se)
		require.Equal(t, code, se.Code)
		require.ErrorContains(t, err, fmt.Sprintf("HTTP %d", code))
	}
}

func TestFetchBodyCutAtMaxBytes(t *testing.T) {
	s := newSite(t, web.Config{MaxBytes: 64 << 10, MaxText: 100000})
	stopped := make(chan int, 1)
	s.mux.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<title>Endless</title>"))
		chunk := []byte(strings.Repeat("<p>more text</p>", 256))
		written := 0
		// Bounded: at most 64 MiB, and it stops when the client goes away.
		for written < 64<<20 && r.Context().Err() == nil {
			n, err := w.Write(chunk)
			written += n
			if err != nil {
				break
			}
		}
		stopped <- written
	})
	d, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/endless"))
	require.NoError(t, err)
	require.True(t, d.Truncated)
	require.Equal(t, "Endless", d.Title)
	require.Contains(t, d.Text, "more text")
	// 64 KiB of "<p>more text</p>" is about 4096 lines of 9 runes.
	require.Less(t, utf8.RuneCountInString(d.Text), 64<<10)
	select {
	case written := <-stopped:
		require.Less(t, written, 64<<20, "the server was stopped early by the client")
	case <-time.After(10 * time.Second):
		t.Fatal("server kept streaming after Fetch returned")
	}
}

func TestFetchTextCutAtMaxText(t *testing.T) {
	s := newSite(t, web.Config{MaxText: 50})
	s.handle("/long", "text/html", "<p>"+strings.Repeat("abc ", 500)+"</p>")
	s.handle("/long.txt", "text/plain", strings.Repeat("xyz ", 500))
	for _, p := range []string{"/long", "/long.txt"} {
		d, err := s.reader.Fetch(context.Background(), s.url("www.example.com", p))
		require.NoError(t, err)
		require.True(t, d.Truncated, p)
		require.LessOrEqual(t, utf8.RuneCountInString(d.Text), 50, p)
	}
}

func TestFetchTimeout(t *testing.T) {
	s := newSite(t, web.Config{Timeout: 150 * time.Millisecond})
	s.mux.HandleFunc("/slow-headers", func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
	})
	s.mux.HandleFunc("/slow-body", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<p>start"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
	})
	for _, p := range []string{"/slow-headers", "/slow-body"} {
		_, err := s.reader.Fetch(context.Background(), s.url("www.example.com", p))
		require.Error(t, err, p)
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded), "%s: %v", p, err)
	}
}

func TestFetchCallerContextCancel(t *testing.T) {
	s := newSite(t, web.Config{})
	entered := make(chan struct{})
	s.mux.HandleFunc("/hang", func(_ http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	_, err := s.reader.Fetch(ctx, s.url("www.example.com", "/hang"))
	require.ErrorIs(t, err, context.Canceled)
}

func TestFetchRedirects(t *testing.T) {
	s := newSite(t, web.Config{MaxRedirects: 3})
	s.handle("/target", "text/html", "<title>Target</title>")
	redirect := func(path, to string) {
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, http.StatusFound) })
	}
	redirect("/ok", "/target")
	redirect("/to-loopback", "http://127.0.0.1:"+s.port+"/target")
	redirect("/to-private", "http://10.1.2.3/target")
	redirect("/to-metadata", "http://169.254.169.254/latest/meta-data/")
	redirect("/to-metadata6", "http://[fd00:ec2::254]/latest/meta-data/")
	redirect("/to-mapped", "http://[::ffff:127.0.0.1]:"+s.port+"/target")
	redirect("/to-decimal", "http://2130706433:"+s.port+"/target")
	redirect("/to-private-name", "http://intranet.example.com/target")
	redirect("/to-loop-name", "http://loop.example.com:"+s.port+"/target")
	redirect("/to-mixed-name", "http://mixed.example.com:"+s.port+"/target")
	redirect("/to-file", "file:///etc/passwd")
	redirect("/loop", "/loop")

	d, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/ok"))
	require.NoError(t, err)
	require.Equal(t, "Target", d.Title)
	require.Equal(t, s.url("www.example.com", "/target"), d.FinalURL)

	for _, p := range []string{"/to-loopback", "/to-private", "/to-metadata", "/to-metadata6", "/to-mapped",
		"/to-decimal", "/to-private-name", "/to-loop-name", "/to-mixed-name", "/to-file"} {
		before := s.hits.Load()
		_, err := s.reader.Fetch(context.Background(), s.url("www.example.com", p))
		require.ErrorIs(t, err, netguard.ErrBlocked, p)
		require.Equal(t, before+1, s.hits.Load(), "%s: only the redirecting request reached a server", p)
	}

	_, err = s.reader.Fetch(context.Background(), s.url("www.example.com", "/loop"))
	require.ErrorContains(t, err, "stopped after 3 redirects")
}

func TestFetchNoRedirects(t *testing.T) {
	s := newSite(t, web.Config{MaxRedirects: -1})
	s.mux.HandleFunc("/r", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/x", http.StatusMovedPermanently) })
	_, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/r"))
	var se *web.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusMovedPermanently, se.Code)
}

func TestFetchRefusesBeforeConnecting(t *testing.T) {
	s := newSite(t, web.Config{})
	tests := []struct {
		url  string
		want error
	}{
		{"ftp://www.example.com/file", web.ErrInvalidURL},
		{"javascript:alert(1)", web.ErrInvalidURL},
		{"http://user:pw@www.example.com/", web.ErrInvalidURL},
		{"", web.ErrInvalidURL},
		{"http:///path", web.ErrInvalidURL},
		{"http://127.0.0.1:" + s.port + "/", netguard.ErrBlocked},
		{"http://2130706433/", netguard.ErrBlocked},
		{"http://0x7f.1/", netguard.ErrBlocked},
		{"http://[::1]/", netguard.ErrBlocked},
		{"http://169.254.169.254/", netguard.ErrBlocked},
		{"http://intranet.example.com/", netguard.ErrBlocked},
	}
	for _, tt := range tests {
		_, err := s.reader.Fetch(context.Background(), tt.url)
		require.ErrorIs(t, err, tt.want, tt.url)
	}
	require.Zero(t, s.hits.Load())
	_, err := s.reader.Fetch(context.Background(), "http://unknown-name.example.org/")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
}

func TestFetchIDNHost(t *testing.T) {
	s := newSite(t, web.Config{})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("host " + r.Host))
	})
	d, err := s.reader.Fetch(context.Background(), s.url("Bücher.example", "/"))
	require.NoError(t, err)
	require.Equal(t, "host xn--bcher-kva.example:"+s.port, d.Text)
}

func TestFetchAllowPrivate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/meta" {
			http.Redirect(w, r, "http://169.254.169.254/latest/", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("private ok"))
	}))
	t.Cleanup(srv.Close)

	_, err := web.New(web.Config{}).Fetch(context.Background(), srv.URL+"/")
	require.ErrorIs(t, err, netguard.ErrBlocked)

	r := web.New(web.Config{AllowPrivate: true})
	d, err := r.Fetch(context.Background(), srv.URL+"/")
	require.NoError(t, err)
	require.Equal(t, "private ok", d.Text)
	_, err = r.Fetch(context.Background(), srv.URL+"/meta")
	require.ErrorIs(t, err, netguard.ErrBlocked, "metadata stays refused")
	require.False(t, r.Resolvable(srv.URL+"/"), "the link trigger ignores AllowPrivate")
}

func TestFetchCache(t *testing.T) {
	s := newSite(t, web.Config{CacheTTL: time.Minute, CacheSize: 2})
	s.handle("/a", "text/html", "<title>A</title>")
	s.handle("/b", "text/html", "<title>B</title>")
	s.handle("/c", "text/html", "<title>C</title>")
	ctx := context.Background()
	fetch := func(u string) *web.Document {
		d, err := s.reader.Fetch(ctx, u)
		require.NoError(t, err)
		return d
	}
	first := fetch(s.url("www.example.com", "/a"))
	require.Equal(t, int32(1), s.hits.Load())
	first.Title = "mutated by the caller"

	s.clock.Advance(30 * time.Second)
	again := fetch(s.url("WWW.Example.com", "/a?utm_source=chat#top"))
	require.Equal(t, int32(1), s.hits.Load(), "same canonical URL: served from the cache")
	require.Equal(t, "A", again.Title, "the cache keeps its own copy")
	require.Equal(t, s.url("WWW.Example.com", "/a?utm_source=chat#top"), again.URL)
	require.Equal(t, first.FetchedAt, again.FetchedAt)

	s.clock.Advance(31 * time.Second)
	fetch(s.url("www.example.com", "/a"))
	require.Equal(t, int32(2), s.hits.Load(), "expired after the TTL")

	fetch(s.url("www.example.com", "/b"))
	fetch(s.url("www.example.com", "/c")) // evicts /a, the least recently used
	require.Equal(t, int32(4), s.hits.Load())
	fetch(s.url("www.example.com", "/c"))
	require.Equal(t, int32(4), s.hits.Load())
	fetch(s.url("www.example.com", "/a"))
	require.Equal(t, int32(5), s.hits.Load())

	// Errors are not cached.
	s.mux.HandleFunc("/flaky", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "x", 500) })
	_, err := s.reader.Fetch(ctx, s.url("www.example.com", "/flaky"))
	require.Error(t, err)
	_, err = s.reader.Fetch(ctx, s.url("www.example.com", "/flaky"))
	require.Error(t, err)
	require.Equal(t, int32(7), s.hits.Load())
}

func TestFetchNoCache(t *testing.T) {
	s := newSite(t, web.Config{CacheTTL: -1})
	s.handle("/a", "text/plain", "a")
	for range 3 {
		_, err := s.reader.Fetch(context.Background(), s.url("www.example.com", "/a"))
		require.NoError(t, err)
	}
	require.Equal(t, int32(3), s.hits.Load())
}

func TestFetchConcurrent(t *testing.T) {
	s := newSite(t, web.Config{CacheSize: 4})
	for i := range 8 {
		s.handle(fmt.Sprintf("/p%d", i), "text/html", fmt.Sprintf("<title>P%d</title><p>body %d</p>", i, i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 4 {
				i := (g + j) % 8
				d, err := s.reader.Fetch(context.Background(), s.url("www.example.com", fmt.Sprintf("/p%d", i)))
				if err != nil {
					errs <- err
					continue
				}
				if d.Title != fmt.Sprintf("P%d", i) {
					errs <- fmt.Errorf("got %q for /p%d", d.Title, i)
				}
				d.Text = "scribble" // callers own their copy
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestStatusErrorMessage(t *testing.T) {
	err := &web.StatusError{URL: "https://example.com/x", Code: 404, Status: "404 Not Found"}
	require.Equal(t, "web: https://example.com/x answered HTTP 404 Not Found", err.Error())
}

func TestAllowPrivateKeepsMetadataRefused(t *testing.T) {
	r := web.New(web.Config{AllowPrivate: true})
	for _, u := range []string{
		"http://169.254.169.254/", "http://169.254.170.2/v2/credentials", "http://100.100.100.200/latest/meta-data/",
		"http://[fd00:ec2::254]/latest/meta-data/", "http://[fd00:ec2::1]/", "http://168.63.129.16/",
		"http://[fe80::1]/", "http://0.0.0.0/", "http://[::ffff:169.254.169.254]/",
	} {
		_, err := r.Fetch(context.Background(), u)
		require.ErrorIs(t, err, netguard.ErrBlocked, u)
	}
}
