package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/clock"
)

func Example() {
	// A page server on loopback; the guard lets only it through.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = fmt.Fprint(w, `<title>Release notes</title><nav>Home | Blog</nav>
<article><h1>Version 2</h1><p>Faster &amp; smaller.</p><ul><li>New cache</li><li>Fewer bugs</li></ul></article>`)
	}))
	defer srv.Close()
	reader := web.New(web.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})

	doc, err := reader.Fetch(context.Background(), srv.URL+"/notes?utm_source=chat")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(doc.Title)
	fmt.Println(doc.Text)
	fmt.Println(reader.Resolvable("http://localhost/admin"), reader.Resolvable("https://example.com/post"))
	// Output:
	// Release notes
	// Version 2
	// Faster & smaller.
	// - New cache
	// - Fewer bugs
	// false true
}

func ExampleReadable() {
	title, text, err := web.Readable(strings.NewReader(
		`<title>Recipe</title><script>track()</script><main><h2>Pancakes</h2><ol><li>Mix</li><li>Fry</li></ol></main><footer>©</footer>`), 0)
	fmt.Println(title, err)
	fmt.Println(text)
	// Output:
	// Recipe <nil>
	// Pancakes
	// 1. Mix
	// 2. Fry
}

func ExampleCanonicalURL() {
	u, ok := web.CanonicalURL("HTTPS://Example.com:443/a/../post?utm_source=x&b=2&a=1#comments")
	fmt.Println(u, ok)
	// Output: https://example.com/post?a=1&b=2 true
}

func ExampleSources() {
	clk := clock.NewFake(time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC))
	sources := web.NewSources(clk, 30*time.Minute, 8)
	sources.Add("chat-1", web.Source{URL: "https://example.com/post?utm_source=x", Title: "A post"})
	sources.Add("chat-1", web.Source{URL: "https://example.com/other", Title: "Another"})
	for _, s := range sources.Recent("chat-1", clk.Now()) {
		fmt.Println(s.Title, s.URL)
	}
	fmt.Println(sources.Seen("chat-1", "https://EXAMPLE.com/post", clk.Now()))
	fmt.Println(sources.Seen("chat-1", "https://example.com/post", clk.Now().Add(time.Hour)))
	// Output:
	// Another https://example.com/other
	// A post https://example.com/post?utm_source=x
	// true
	// false
}
