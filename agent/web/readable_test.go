package web_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent/web"
)

func readable(t *testing.T, page string, max int) (string, string) {
	t.Helper()
	title, text, err := web.Readable(strings.NewReader(page), max)
	require.NoError(t, err)
	return title, text
}

func TestReadablePrefersArticle(t *testing.T) {
	page := `<!doctype html><html><head><title>  Big   News &amp; More </title>
<script>var tracking = "do not show";</script>
<style>body { color: red }</style></head>
<body>
<header><a href="/">Site name</a></header>
<nav><ul><li>Home</li><li>Sports</li></ul></nav>
<div class="promo">Subscribe now for cheap!</div>
<article>
  <h1>The headline</h1>
  <p>First paragraph with <b>bold</b> and <i>italic</i> words.</p>
  <p>Second   paragraph
     spanning lines.</p>
</article>
<aside>Related: other things</aside>
<footer>© 2025 Example</footer>
</body></html>`
	title, text := readable(t, page, 0)
	require.Equal(t, "Big News & More", title)
	require.Equal(t, "The headline\nFirst paragraph with bold and italic words.\nSecond paragraph spanning lines.", text)
}

func TestReadableMainWhenNoArticle(t *testing.T) {
	page := `<body><div>Cookie banner text</div><main><h2>Docs</h2><p>Install it.</p></main><div>Other</div></body>`
	_, text := readable(t, page, 0)
	require.Equal(t, "Docs\nInstall it.", text)
}

func TestReadableSmallArticleNotPreferred(t *testing.T) {
	long := strings.Repeat("Body sentence that matters. ", 30)
	page := `<body><div><p>` + long + `</p></div><article>Tiny card</article></body>`
	_, text := readable(t, page, 0)
	require.Contains(t, text, "Body sentence that matters.")
	require.Contains(t, text, "Tiny card")
}

func TestReadableDropsInvisibleParts(t *testing.T) {
	page := `<body><p>Visible</p>
<script type="module">alert("x")</script>
<noscript>Enable JS</noscript>
<template><p>Template text</p></template>
<svg><title>Icon title</title><text>svg text</text></svg>
<form><label>Name</label><input name=q><button>Go</button></form>
<iframe src="https://example.com">frame text</iframe>
<div hidden>Hidden div</div>
<span style="display: none">Hidden span</span>
<div aria-hidden="true">Hidden icon text</div>
<p>Also visible</p></body>`
	title, text := readable(t, page, 0)
	require.Equal(t, "", title)
	require.Equal(t, "Visible\nAlso visible", text)
}

func TestReadableNestedSkipsAndSelfClosing(t *testing.T) {
	page := `<body><nav>one<nav>two</nav>still nav</nav><p>after</p>
<svg/><p>after svg</p><script/>hidden script text</script><p>end</p></body>`
	_, text := readable(t, page, 0)
	require.Equal(t, "after\nafter svg\nend", text)
}

func TestReadableEntities(t *testing.T) {
	page := `<p>Fish &amp; chips &lt;tag&gt; caf&eacute; &#8364;5 &#x1F600; &nbsp;&nbsp;spaced&copy;</p>`
	_, text := readable(t, page, 0)
	require.Equal(t, "Fish & chips <tag> café €5 😀 spaced©", text)
}

func TestReadableNestedLists(t *testing.T) {
	page := `<ul>
  <li>Fruit
    <ol><li>Apple</li><li>Pear<ul><li>Conference</li></ul></li></ol>
  </li>
  <li>Vegetables
  <li><p>Paragraph item</p></li>
</ul>`
	_, text := readable(t, page, 0)
	require.Equal(t, "- Fruit\n  1. Apple\n  2. Pear\n    - Conference\n- Vegetables\n- Paragraph item", text)
}

func TestReadableTablesBreaksAndPre(t *testing.T) {
	page := `<table><tr><th>Name</th><th>Age</th></tr><tr><td>Ann</td><td>31</td></tr></table>
<p>line one<br>line two</p><pre>
  indented code
	tab
</pre><p>tail</p>`
	_, text := readable(t, page, 0)
	require.Equal(t, "Name | Age\nAnn | 31\nline one\nline two\n  indented code\n tab\ntail", text)
}

func TestReadableTitleFallbacks(t *testing.T) {
	tests := []struct {
		name, page, title string
	}{
		{"title", `<title>Plain</title><meta property="og:title" content="OG">`, "Plain"},
		{"og", `<meta property="og:title" content=" OG  title "><p>x</p>`, "OG title"},
		{"twitter", `<meta name="twitter:title" content="TW"><p>x</p>`, "TW"},
		{"empty title falls back", `<title> </title><meta property="og:title" content="OG">`, "OG"},
		{"svg title ignored", `<svg><title>icon</title></svg><p>x</p>`, ""},
		{"entities", `<title>A &amp; B &#39;quoted&#39;</title>`, "A & B 'quoted'"},
		{"self-closing", `<title/>Still the title</title><p>x</p>`, "Still the title"},
		{"first title wins", `<title>One</title><title>Two</title>`, "One"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			title, _ := readable(t, tt.page, 0)
			require.Equal(t, tt.title, title)
		})
	}
}

func TestReadableDescriptionWhenBodyEmpty(t *testing.T) {
	page := `<head><title>App</title><meta name="description" content="A single page app about cats."></head><body><div id="root"></div><script>render()</script></body>`
	title, text := readable(t, page, 0)
	require.Equal(t, "App", title)
	require.Equal(t, "A single page app about cats.", text)

	page = `<head><meta property="og:description" content="OG desc"></head><body></body>`
	_, text = readable(t, page, 0)
	require.Equal(t, "OG desc", text)

	page = `<head><meta name="description" content="unused"></head><body><p>Real text</p></body>`
	_, text = readable(t, page, 0)
	require.Equal(t, "Real text", text)
}

func TestReadableMaxText(t *testing.T) {
	page := "<p>" + strings.Repeat("word ", 1000) + "</p><p>" + strings.Repeat("字", 500) + "</p>"
	for _, max := range []int{1, 7, 50, 2000, 4000} {
		_, text := readable(t, page, max)
		require.LessOrEqual(t, utf8.RuneCountInString(text), max)
		require.NotEmpty(t, text)
	}
	_, text := readable(t, "<p>"+strings.Repeat("字", 30)+"</p>", 10)
	require.Equal(t, strings.Repeat("字", 10), text)
	_, text = readable(t, page, 0)
	require.LessOrEqual(t, utf8.RuneCountInString(text), web.DefaultMaxText)
}

func TestReadableCharsetFromMeta(t *testing.T) {
	// "中文标题" and "你好，世界" in GBK.
	gbkTitle := "\xd6\xd0\xce\xc4\xb1\xea\xcc\xe2"
	gbkBody := "\xc4\xe3\xba\xc3\xa3\xac\xca\xc0\xbd\xe7"
	page := `<html><head><meta charset="gbk"><title>` + gbkTitle + `</title></head><body><p>` + gbkBody + `</p></body></html>`
	title, text := readable(t, page, 0)
	require.Equal(t, "中文标题", title)
	require.Equal(t, "你好，世界", text)

	latin := `<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1"><p>caf` + "\xe9" + ` cr` + "\xe8" + `me</p>`
	_, text = readable(t, latin, 0)
	require.Equal(t, "café crème", text)
}

func TestReadableCharsetUndeclared(t *testing.T) {
	// Valid UTF-8 after a long ASCII prefix, no declaration: read as UTF-8.
	page := "<p>" + strings.Repeat("a ", 40000) + "</p><p>naïve – ok</p>"
	_, text := readable(t, page, 100000)
	require.True(t, strings.HasSuffix(text, "naïve – ok"), text[len(text)-40:])

	// Invalid UTF-8 without declaration: windows-1252.
	_, text = readable(t, "<p>caf\xe9</p>", 0)
	require.Equal(t, "café", text)

	// A UTF-8 page mislabelled latin-1 in its meta is still read as UTF-8.
	_, text = readable(t, `<meta charset="iso-8859-1"><p>naïve</p>`, 0)
	require.Equal(t, "naïve", text)
}

func TestReadableInvisibleCharacters(t *testing.T) {
	_, text := readable(t, "<p>zero\u200bwidth\u00adsoft\ufeff \x01ctl\u202eRTL</p>", 0)
	require.Equal(t, "zerowidthsoft ctlRTL", text)
}

func TestReadableMalformed(t *testing.T) {
	for _, page := range []string{
		"", "<", "<p", "</p></div></article></main>", "<article><p>unclosed", "<<<>>>",
		"<script>never closed", "<title>no end", "<!-- comment", "<nav>open forever<p>x",
		"<ul><ul><ul><li>deep", strings.Repeat("<ol>", 200) + "<li>x", "\x00\xff\xfe",
	} {
		title, text, err := web.Readable(strings.NewReader(page), 100)
		require.NoError(t, err, "%q", page)
		require.True(t, utf8.ValidString(title) && utf8.ValidString(text), "%q", page)
	}
	_, text := readable(t, "<article><p>unclosed", 0)
	require.Equal(t, "unclosed", text)
}

type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n > 0 {
		n := copy(p, strings.Repeat("<p>x</p>", 1+len(p)/8)[:min(len(p), f.n)])
		f.n -= n
		return n, nil
	}
	return 0, errors.New("connection reset")
}

func TestReadableReaderError(t *testing.T) {
	_, _, err := web.Readable(&failingReader{n: 100}, 0)
	require.ErrorContains(t, err, "connection reset")
	_, _, err = web.Readable(&failingReader{n: 200 << 10}, 0)
	require.ErrorContains(t, err, "connection reset")
}

func TestReadableHugeTokenIsBounded(t *testing.T) {
	// One 6 MiB text run: the tokenizer's buffer cap ends the document.
	r := io.MultiReader(strings.NewReader("<title>T</title><p>"), strings.NewReader(strings.Repeat("x", 6<<20)))
	title, text, err := web.Readable(r, 10)
	require.NoError(t, err)
	require.Equal(t, "T", title)
	require.LessOrEqual(t, utf8.RuneCountInString(text), 10)
}
