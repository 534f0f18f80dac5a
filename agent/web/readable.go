package web

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

const (
	// maxTokenBytes bounds one HTML token (a script body, a long text
	// run); past it the document is treated as cut there.
	maxTokenBytes = 4 << 20
	// maxTitle bounds the title, in runes.
	maxTitle = 300
	// maxListDepth bounds the nesting of lists that is tracked.
	maxListDepth = 32
	// preferMin is how many runes an <article> or <main> needs to be
	// preferred over the whole body regardless of its share of it.
	preferMin = 500
)

// Readable extracts the title and the readable text of an HTML document:
// scripts, styles, navigation, footers, asides, forms, frames, embedded
// SVG and hidden elements are dropped; an <article> (or else a <main>)
// holding the bulk of the text is preferred over the whole body;
// paragraphs, headings, table rows and list items (indented by nesting,
// "- " or "1. ") become lines; whitespace is collapsed and entities are
// decoded. The title comes from <title>, else og:title or twitter:title;
// when the body has no text the meta description stands in for it.
//
// The encoding is taken from a byte-order mark or a <meta charset>
// declaration; undeclared documents are read as UTF-8 when they are valid
// UTF-8 and as windows-1252 otherwise. The text holds at most maxText runes
// (<= 0 means [DefaultMaxText]). Readable reads r to its end; bound r (as
// Fetch does) when it comes from the network. Malformed HTML is not an
// error; a failing reader is.
func Readable(r io.Reader, maxText int) (title, text string, err error) {
	p, err := readHTML(r, "", maxText)
	if err != nil {
		return "", "", err
	}
	return p.title, p.text, nil
}

// page is what readHTML extracted.
type page struct {
	title, text string
	truncated   bool
}

// readHTML is Readable with the Content-Type header's charset honoured and
// the truncation reported.
func readHTML(r io.Reader, contentType string, maxText int) (page, error) {
	if maxText <= 0 {
		maxText = DefaultMaxText
	}
	dec, err := decodeCharset(r, contentType)
	if err != nil {
		return page{}, err
	}
	z := html.NewTokenizer(dec)
	z.SetMaxBuf(maxTokenBytes)
	x := extractor{limit: maxText + 1}
	if err := x.run(z); err != nil {
		return page{}, err
	}
	return x.result(maxText), nil
}

// Buckets a line can count towards.
const (
	inBody = iota
	inArticle
	inMain
	nBuckets
)

// line is one finished line of text and where it was found.
type line struct {
	text    string
	article bool
	main    bool
}

type listState struct {
	ordered bool
	n       int
}

// extractor turns a token stream into lines. It keeps at most limit runes
// per bucket (body, article, main), so its memory is bounded whatever the
// input size.
type extractor struct {
	limit int

	lines    []line
	count    [nBuckets]int  // runes kept per bucket, newlines included
	overflow [nBuckets]bool // text dropped from a bucket

	cur       strings.Builder
	curRunes  int
	curArt    bool
	curMain   bool
	space     bool   // a space is due before the next word
	sep       string // a separator is due before the next word (table cells)
	prefix    string // list marker for the line's first word
	lists     []listState
	skipName  string // element being dropped, with its nesting depth
	skipDepth int
	article   int
	main      int
	pre       int

	title, ogTitle, twTitle, desc, ogDesc string
}

func (x *extractor) run(z *html.Tokenizer) error {
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			err := z.Err()
			switch {
			case errors.Is(err, io.EOF):
				x.flush()
				return nil
			case errors.Is(err, html.ErrBufferExceeded):
				x.flush()
				x.overflow = [nBuckets]bool{true, true, true}
				return nil
			}
			return err
		case html.TextToken:
			if x.skipDepth > 0 {
				continue
			}
			x.text(z.Text())
		case html.StartTagToken, html.SelfClosingTagToken:
			x.start(z, tt == html.SelfClosingTagToken)
		case html.EndTagToken:
			name, _ := z.TagName()
			x.end(atom.Lookup(name), name)
		}
	}
}

// dropped are elements whose content is never readable text.
func dropped(a atom.Atom) bool {
	switch a {
	case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg, atom.Math,
		atom.Nav, atom.Footer, atom.Aside, atom.Form, atom.Iframe, atom.Frameset,
		atom.Noframes, atom.Noembed, atom.Object, atom.Canvas, atom.Audio, atom.Video,
		atom.Button, atom.Select, atom.Textarea, atom.Dialog, atom.Map:
		return true
	}
	return false
}

// void elements never have content or an end tag.
func void(a atom.Atom) bool {
	switch a {
	case atom.Area, atom.Base, atom.Br, atom.Col, atom.Embed, atom.Hr, atom.Img,
		atom.Input, atom.Link, atom.Meta, atom.Param, atom.Source, atom.Track,
		atom.Wbr, atom.Keygen:
		return true
	}
	return false
}

// optionalEnd elements may lack their end tag, so a hidden one cannot be
// skipped by counting tags.
func optionalEnd(a atom.Atom) bool {
	switch a {
	case atom.P, atom.Li, atom.Dt, atom.Dd, atom.Tr, atom.Td, atom.Th, atom.Thead,
		atom.Tbody, atom.Tfoot, atom.Option, atom.Optgroup, atom.Rt, atom.Rp,
		atom.Colgroup, atom.Caption, atom.Html, atom.Body:
		return true
	}
	return false
}

// block elements start and end a line.
func block(a atom.Atom) bool {
	switch a {
	case atom.P, atom.Div, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6,
		atom.Section, atom.Header, atom.Blockquote, atom.Figure, atom.Figcaption,
		atom.Table, atom.Tr, atom.Caption, atom.Dl, atom.Dt, atom.Dd, atom.Address,
		atom.Details, atom.Summary, atom.Center, atom.Fieldset, atom.Legend,
		atom.Body, atom.Hgroup, atom.Ul, atom.Ol, atom.Li, atom.Pre, atom.Article,
		atom.Main, atom.Br, atom.Hr:
		return true
	}
	return false
}

func (x *extractor) start(z *html.Tokenizer, selfClosing bool) {
	raw, hasAttr := z.TagName()
	a := atom.Lookup(raw)
	if x.skipDepth > 0 {
		if string(raw) == x.skipName && opens(a, selfClosing) {
			x.skipDepth++
		}
		return
	}
	var hidden bool
	var meta metaAttrs
	// Attributes matter on <meta> and on elements that can be skipped
	// when hidden; reading them costs allocations in the tokenizer.
	if hasAttr && (a == atom.Meta || (!void(a) && !optionalEnd(a))) {
		hidden, meta = readAttrs(z, a == atom.Meta)
	}
	switch {
	case a == atom.Meta:
		x.meta(meta)
		return
	case a == atom.Title: // "<title/>" opens a title too
		x.readTitle(z)
		return
	case dropped(a) || (hidden && !void(a) && !optionalEnd(a)):
		if !void(a) && opens(a, selfClosing) {
			x.skipName, x.skipDepth = string(raw), 1
		}
		x.space = x.cur.Len() > 0
		return
	}
	if block(a) {
		x.flush()
	}
	switch a {
	case atom.Article:
		x.article++
	case atom.Main:
		x.main++
	case atom.Pre:
		x.pre++
	case atom.Ul, atom.Ol:
		if len(x.lists) < maxListDepth {
			x.lists = append(x.lists, listState{ordered: a == atom.Ol})
		}
	case atom.Li:
		x.prefix = x.listMarker()
	case atom.Td, atom.Th:
		if x.cur.Len() > 0 {
			x.sep = " | "
		}
	case atom.Img:
		x.space = x.space || x.cur.Len() > 0
	}
}

// opens reports whether a start tag opens an element that needs an end
// tag. Only foreign elements (svg, math) honour a self-closing "/>"; on
// HTML elements it is ignored: "<nav/>" opens a nav and "<script/>" still
// has raw content.
func opens(a atom.Atom, selfClosing bool) bool {
	return !selfClosing || (a != atom.Svg && a != atom.Math)
}

func (x *extractor) end(a atom.Atom, raw []byte) {
	if x.skipDepth > 0 {
		if string(raw) == x.skipName {
			x.skipDepth--
		}
		return
	}
	if block(a) {
		x.flush()
	}
	switch a {
	case atom.Article:
		x.article = max(0, x.article-1)
	case atom.Main:
		x.main = max(0, x.main-1)
	case atom.Pre:
		x.pre = max(0, x.pre-1)
	case atom.Ul, atom.Ol:
		if len(x.lists) > 0 {
			x.lists = x.lists[:len(x.lists)-1]
		}
	case atom.Td, atom.Th:
		x.space = x.cur.Len() > 0
	}
}

// listMarker returns the marker of the next item of the innermost list.
func (x *extractor) listMarker() string {
	if len(x.lists) == 0 {
		return "- "
	}
	indent := strings.Repeat("  ", len(x.lists)-1)
	l := &x.lists[len(x.lists)-1]
	if !l.ordered {
		return indent + "- "
	}
	l.n++
	return indent + strconv.Itoa(l.n) + ". "
}

type metaAttrs struct {
	key, content string
}

// readAttrs reads a tag's attributes: whether it hides the element, and
// for a <meta>, its name/property and content.
func readAttrs(z *html.Tokenizer, isMeta bool) (hidden bool, m metaAttrs) {
	for {
		k, v, more := z.TagAttr()
		switch string(k) {
		case "hidden":
			hidden = true
		case "aria-hidden":
			hidden = hidden || strings.EqualFold(strings.TrimSpace(string(v)), "true")
		case "style":
			hidden = hidden || hidesStyle(v)
		case "name", "property":
			if isMeta && m.key == "" {
				m.key = strings.ToLower(strings.TrimSpace(string(v)))
			}
		case "content":
			if isMeta {
				m.content = string(v)
			}
		}
		if !more {
			return hidden, m
		}
	}
}

// hidesStyle reports whether an inline style hides the element.
func hidesStyle(v []byte) bool {
	s := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return unicode.ToLower(r)
	}, string(v))
	return strings.Contains(s, "display:none") || strings.Contains(s, "visibility:hidden")
}

func (x *extractor) meta(m metaAttrs) {
	c := collapse(m.content, maxTitle*4)
	if c == "" {
		return
	}
	set := func(p *string) {
		if *p == "" {
			*p = c
		}
	}
	switch m.key {
	case "og:title":
		set(&x.ogTitle)
	case "twitter:title":
		set(&x.twTitle)
	case "description":
		set(&x.desc)
	case "og:description", "twitter:description":
		set(&x.ogDesc)
	}
}

// readTitle consumes the text of a <title> element (the tokenizer reads it
// as one escapable raw-text token, then the end tag).
func (x *extractor) readTitle(z *html.Tokenizer) {
	switch z.Next() {
	case html.TextToken:
		if x.title == "" {
			x.title = collapse(string(z.Text()), maxTitle)
		}
	case html.EndTagToken:
	case html.ErrorToken:
		// The error stays with the tokenizer; run sees it next.
	}
}

// text adds a text token to the current line.
func (x *extractor) text(b []byte) {
	if x.pre > 0 {
		x.preText(b)
		return
	}
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		switch {
		case isSpace(r):
			x.space = x.cur.Len() > 0
		case invisible(r):
		default:
			x.word(r)
		}
	}
}

// preText adds preformatted text: spaces kept, newlines end lines.
func (x *extractor) preText(b []byte) {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		switch {
		case r == '\n':
			x.flush()
		case r == '\t' || r == ' ':
			x.put(' ')
		case isSpace(r) || invisible(r):
		default:
			x.word(r)
		}
	}
}

// word writes a visible rune, preceded by the pending marker, separator or
// space.
func (x *extractor) word(r rune) {
	if x.cur.Len() == 0 {
		if x.prefix != "" {
			for _, p := range x.prefix {
				x.put(p)
			}
			x.prefix = ""
		}
		x.space, x.sep = false, ""
	}
	if x.sep != "" {
		for _, p := range x.sep {
			x.put(p)
		}
		x.sep, x.space = "", false
	}
	if x.space {
		x.put(' ')
		x.space = false
	}
	x.put(r)
}

// put appends r to the current line when a bucket the line counts towards
// still has room; otherwise it records the overflow.
func (x *extractor) put(r rune) {
	if x.cur.Len() == 0 {
		x.curArt, x.curMain = x.article > 0, x.main > 0
	}
	n := x.curRunes
	room := false
	if x.count[inBody]+n < x.limit {
		room = true
	} else {
		x.overflow[inBody] = true
	}
	if x.curArt {
		if x.count[inArticle]+n < x.limit {
			room = true
		} else {
			x.overflow[inArticle] = true
		}
	}
	if x.curMain {
		if x.count[inMain]+n < x.limit {
			room = true
		} else {
			x.overflow[inMain] = true
		}
	}
	if !room {
		return
	}
	if r == utf8.RuneError {
		x.cur.WriteString("\uFFFD")
	} else {
		x.cur.WriteRune(r)
	}
	x.curRunes++
}

// flush ends the current line.
func (x *extractor) flush() {
	x.space, x.sep = false, ""
	if x.cur.Len() == 0 {
		return
	}
	s := strings.TrimRight(x.cur.String(), " ")
	n := utf8.RuneCountInString(s) + 1 // the newline that joins it
	x.cur.Reset()
	x.curRunes = 0
	if s == "" {
		return
	}
	x.lines = append(x.lines, line{text: s, article: x.curArt, main: x.curMain})
	x.count[inBody] += n
	if x.curArt {
		x.count[inArticle] += n
	}
	if x.curMain {
		x.count[inMain] += n
	}
}

// result picks the bucket to return and joins its lines.
func (x *extractor) result(maxText int) page {
	b := inBody
	body := x.count[inBody]
	switch {
	case prefer(x.count[inArticle], body):
		b = inArticle
	case prefer(x.count[inMain], body):
		b = inMain
	}
	var sb strings.Builder
	for _, l := range x.lines {
		if (b == inArticle && !l.article) || (b == inMain && !l.main) {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(l.text)
	}
	text, cut := truncateRunes(sb.String(), maxText)
	p := page{text: text, truncated: cut || x.overflow[b]}
	if p.text == "" {
		p.text, p.truncated = truncateRunes(firstNonEmpty(x.desc, x.ogDesc), maxText)
	}
	p.title = firstNonEmpty(x.title, x.ogTitle, x.twTitle)
	return p
}

// prefer reports whether a part with n runes is worth preferring over a
// body of total runes.
func prefer(n, total int) bool {
	return n > 0 && (n >= preferMin || 4*n >= total)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// isSpace reports whether r separates words (ASCII and Unicode spaces,
// no-break spaces included).
func isSpace(r rune) bool {
	return unicode.IsSpace(r) || r == '\u00a0' || r == '\u202f' || r == '\u2007'
}

// invisible reports whether r renders as nothing and is dropped: control
// characters, zero-width characters, the byte-order mark and soft hyphens.
func invisible(r rune) bool {
	switch r {
	case '\u00ad', '\u200b', '\u200c', '\u200d', '\u2060', '\ufeff':
		return true
	}
	return unicode.IsControl(r) || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// collapse collapses whitespace, drops invisible characters and keeps at
// most max runes.
func collapse(s string, max int) string {
	var b strings.Builder
	space := false
	n := 0
	for _, r := range s {
		switch {
		case isSpace(r):
			space = b.Len() > 0
		case invisible(r):
		default:
			if n >= max {
				return b.String()
			}
			if space {
				b.WriteByte(' ')
				n++
				space = false
			}
			b.WriteRune(r)
			n++
		}
	}
	return b.String()
}

// truncateRunes cuts s to at most max runes, at a word boundary when one
// is near, and reports whether it cut.
func truncateRunes(s string, max int) (string, bool) {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s, false
	}
	i, n := 0, 0
	for i < len(s) && n < max {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
	}
	cut := s[:i]
	if j := strings.LastIndexAny(cut, " \n"); j > 0 && j >= len(cut)-40 {
		cut = cut[:j]
	}
	return strings.TrimRight(cut, " \n"), true
}
