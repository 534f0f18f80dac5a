package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/personakit/persona/agent/web"
)

// benchPage builds a news-like page of about size bytes: a head with
// scripts and styles, navigation, an article of paragraphs, lists and
// tables, and a footer.
func benchPage(size int) string {
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>Benchmark &amp; page</title>`)
	b.WriteString(`<meta property="og:title" content="Benchmark"><style>` + strings.Repeat(".c{color:red}", 200) + `</style>`)
	b.WriteString(`<script>` + strings.Repeat("var x = 1 < 2 && 3 > 2;", 200) + `</script></head><body>`)
	b.WriteString(`<nav><ul>` + strings.Repeat(`<li><a href="/section">Section</a></li>`, 40) + `</ul></nav><main><article>`)
	for i := 0; b.Len() < size-2000; i++ {
		fmt.Fprintf(&b, `<h2 id="s%d">Heading %d</h2>`, i, i)
		fmt.Fprintf(&b, `<p class="para">Paragraph %d with <a href="https://example.com/%d">a link</a>, <b>bold</b> text, `+
			`caf&eacute; &mdash; entities &amp; &#x4E2D;&#x6587; characters, and enough words to look like prose in an article.</p>`, i, i)
		if i%5 == 0 {
			b.WriteString(`<ul><li>first item</li><li>second item<ol><li>nested</li></ol></li></ul>`)
		}
		if i%7 == 0 {
			b.WriteString(`<table><tr><th>Key</th><th>Value</th></tr><tr><td>a</td><td>1</td></tr></table>`)
		}
		if i%9 == 0 {
			b.WriteString(`<aside>Related links</aside><div hidden>hidden text</div><svg><path d="M0 0"/></svg>`)
		}
	}
	b.WriteString(`</article></main><footer>` + strings.Repeat("Footer link ", 50) + `</footer></body></html>`)
	return b.String()
}

func BenchmarkReadable(b *testing.B) {
	page := benchPage(200 << 10)
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		title, text, err := web.Readable(strings.NewReader(page), web.DefaultMaxText)
		if err != nil || title == "" || text == "" {
			b.Fatalf("title %q, %d bytes of text, err %v", title, len(text), err)
		}
	}
}

func BenchmarkCanonicalURL(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := web.CanonicalURL("HTTPS://Example.COM:443/a/./b/../c?utm_source=x&z=1&a=2#frag"); !ok {
			b.Fatal("refused")
		}
	}
}

func BenchmarkResolvable(b *testing.B) {
	r := web.New(web.Config{})
	b.ReportAllocs()
	for b.Loop() {
		if !r.Resolvable("https://www.example.com/path/to/page?q=1") {
			b.Fatal("refused")
		}
	}
}
