package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/internal/netguard"
)

// Defaults for the zero fields of [Config].
const (
	// DefaultMaxBytes is the body cap of one fetch (2 MiB).
	DefaultMaxBytes = 2 << 20
	// DefaultMaxText is the text cap of one document, in runes.
	DefaultMaxText = 8000
	// DefaultTimeout bounds one fetch.
	DefaultTimeout = 15 * time.Second
	// DefaultMaxRedirects bounds the redirects one fetch follows.
	DefaultMaxRedirects = 10
	// DefaultCacheTTL is how long a fetched document is reused.
	DefaultCacheTTL = 10 * time.Minute
	// DefaultCacheSize is how many documents the cache holds.
	DefaultCacheSize = 256
	// DefaultUserAgent identifies the reader to web servers.
	DefaultUserAgent = "Mozilla/5.0 (compatible; persona-web/1.0; +https://github.com/personakit/persona)"
)

// Errors returned by [Reader.Fetch]. Refusals by the network guard wrap
// netguard.ErrBlocked instead; HTTP error statuses are [*StatusError].
var (
	// ErrInvalidURL wraps every refusal of a malformed or non-http(s) URL.
	ErrInvalidURL = errors.New("web: invalid URL")
	// ErrNotReadable is wrapped when the response is not a page to read
	// (an image, a PDF, an archive, ...).
	ErrNotReadable = errors.New("web: not a readable page")
)

func invalidURL(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidURL, fmt.Sprintf(format, args...))
}

// StatusError is an HTTP error status (4xx or 5xx) answered for a page, or
// a redirect that was not followed.
type StatusError struct {
	// URL is the URL that answered with the status.
	URL string
	// Code is the status code, e.g. 404.
	Code int
	// Status is the status line, e.g. "404 Not Found".
	Status string
}

// Error names the URL and the status line.
func (e *StatusError) Error() string {
	return fmt.Sprintf("web: %s answered HTTP %s", e.URL, e.Status)
}

// Config configures a [Reader]. The zero value is valid.
type Config struct {
	// Guard keeps requests on the public internet (nil = a guard built
	// from the fields below). A supplied guard's Allow list and redirect
	// limit apply as they are; MaxRedirects below is enforced as well.
	Guard *netguard.Guard
	// AllowPrivate lets the default guard reach private, loopback, CGNAT
	// and unique-local addresses (10/8, 172.16/12, 192.168/16, 127/8,
	// 100.64/10, fc00::/7, ::1). DANGEROUS: anyone who can send the bot a
	// link can then make it read the operator's own network. Link-local
	// addresses and the cloud metadata services (169.254.169.254,
	// 100.100.100.200, fd00:ec2::254, ...) stay refused. It is ignored
	// when Guard is set, and Resolvable never honours it.
	AllowPrivate bool
	// Allow lets these prefixes through although they are not public (a
	// host of your own the bot should read, a test server on loopback),
	// for fetches and for Resolvable's check of IP literals, so a link to
	// them triggers a read. Ignored when Guard is set.
	Allow []netip.Prefix
	// MaxBytes caps the body read per fetch (0 = DefaultMaxBytes); the
	// body is cut there and the document marked Truncated.
	MaxBytes int64
	// MaxText caps the returned text in runes (0 = DefaultMaxText).
	MaxText int
	// Timeout bounds one fetch, redirects and body included (0 =
	// DefaultTimeout).
	Timeout time.Duration
	// MaxRedirects bounds the redirects followed (0 = DefaultMaxRedirects;
	// negative = none).
	MaxRedirects int
	// UserAgent is sent with every request (empty = DefaultUserAgent).
	UserAgent string
	// Clock stamps documents and expires the cache (nil = clock.Real).
	Clock clock.Clock
	// CacheTTL is how long a fetched document is reused (0 =
	// DefaultCacheTTL; negative = no cache).
	CacheTTL time.Duration
	// CacheSize is how many documents the cache holds (0 =
	// DefaultCacheSize; negative = no cache).
	CacheSize int
}

// Document is a fetched page reduced to readable text.
type Document struct {
	// URL is the URL that was asked for.
	URL string `json:"url"`
	// FinalURL is the URL read after redirects.
	FinalURL string `json:"final_url"`
	// Title is the page title (may be empty).
	Title string `json:"title,omitempty"`
	// Text is the readable text, at most Config.MaxText runes.
	Text string `json:"text"`
	// ContentType is the media type of the response, e.g. "text/html".
	ContentType string `json:"content_type"`
	// Truncated reports that the body or the text was cut at its cap.
	Truncated bool `json:"truncated,omitempty"`
	// FetchedAt is when the page was read (a cached document keeps the
	// time of the original read).
	FetchedAt time.Time `json:"fetched_at"`
}

// Reader fetches pages and reduces them to readable text. Create one with
// [New]; it is safe for concurrent use.
type Reader struct {
	guard        *netguard.Guard // fetches
	linkGuard    *netguard.Guard // IP literals in Resolvable
	client       *http.Client
	clock        clock.Clock
	maxBytes     int64
	maxText      int
	timeout      time.Duration
	maxRedirects int
	userAgent    string
	cache        *cache
}

// privatePrefixes are what AllowPrivate lets through: the private,
// loopback, CGNAT and unique-local ranges, with holes for the metadata
// services that live inside them (Alibaba Cloud's 100.100.100.200, AWS's
// fd00:ec2::254), which stay refused.
var privatePrefixes = slices.Concat(
	[]netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("fc00::/8"),
		netip.MustParsePrefix("::1/128"),
	},
	exclude(netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("100.100.100.200/32")),
	exclude(netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("fd00:ec2::/32")),
)

// exclude returns prefixes that together cover parent except hole (which
// must lie inside parent): for every bit between the two lengths, the
// sibling of hole's ancestor at that length.
func exclude(parent, hole netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	addr := hole.Addr()
	for bits := parent.Bits() + 1; bits <= hole.Bits(); bits++ {
		b := addr.AsSlice()
		b[(bits-1)/8] ^= 0x80 >> ((bits - 1) % 8)
		sibling, _ := netip.AddrFromSlice(b)
		out = append(out, netip.PrefixFrom(sibling, bits).Masked())
	}
	return out
}

// New returns a Reader for cfg.
func New(cfg Config) *Reader {
	r := &Reader{
		clock:        clock.OrReal(cfg.Clock),
		maxBytes:     cfg.MaxBytes,
		maxText:      cfg.MaxText,
		timeout:      cfg.Timeout,
		maxRedirects: cfg.MaxRedirects,
		userAgent:    cfg.UserAgent,
	}
	if r.maxBytes <= 0 {
		r.maxBytes = DefaultMaxBytes
	}
	if r.maxText <= 0 {
		r.maxText = DefaultMaxText
	}
	if r.timeout <= 0 {
		r.timeout = DefaultTimeout
	}
	if r.maxRedirects == 0 {
		r.maxRedirects = DefaultMaxRedirects
	}
	if r.userAgent == "" {
		r.userAgent = DefaultUserAgent
	}
	r.guard, r.linkGuard = cfg.Guard, cfg.Guard
	if r.guard == nil {
		gc := netguard.Config{Timeout: r.timeout, MaxRedirects: r.maxRedirects, Allow: slices.Clone(cfg.Allow)}
		r.linkGuard = netguard.New(gc)
		if cfg.AllowPrivate {
			gc.Allow = append(gc.Allow, privatePrefixes...)
			r.guard = netguard.New(gc)
		} else {
			r.guard = r.linkGuard
		}
	}
	r.client = r.guard.Client()
	r.client.Timeout = r.timeout
	guardCheck := r.client.CheckRedirect
	r.client.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if r.maxRedirects < 0 {
			return http.ErrUseLastResponse
		}
		if len(via) > r.maxRedirects {
			return fmt.Errorf("web: stopped after %d redirects", r.maxRedirects)
		}
		if guardCheck != nil {
			return guardCheck(req, via)
		}
		return nil
	}
	ttl, size := cfg.CacheTTL, cfg.CacheSize
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	if size == 0 {
		size = DefaultCacheSize
	}
	if ttl > 0 && size > 0 {
		r.cache = newCache(ttl, size)
	}
	return r
}

// Fetch reads rawURL and returns its readable text. HTML is reduced with
// the rules of [Readable] (its charset from the Content-Type header or the
// page); plain text, JSON and XML are returned as text. Images, PDFs,
// audio, video and other binary content give an error wrapping
// [ErrNotReadable]; 4xx and 5xx answers give a [*StatusError]; addresses
// the guard refuses give an error wrapping netguard.ErrBlocked. The body
// read is capped at MaxBytes, the time at Timeout and the redirects at
// MaxRedirects. Successful reads are cached by [CanonicalURL] for
// CacheTTL; the returned Document is the caller's own copy.
func (r *Reader) Fetch(ctx context.Context, rawURL string) (*Document, error) {
	t, err := parseTarget(rawURL)
	if err != nil {
		return nil, err
	}
	if err := t.check(r.guard); err != nil {
		return nil, fmt.Errorf("web: refused %s: %w", t.u, err)
	}
	key, cacheable := CanonicalURL(t.u.String())
	cacheable = cacheable && r.cache != nil
	asked := strings.TrimSpace(rawURL)
	if cacheable {
		if d, ok := r.cache.get(key, r.clock.Now()); ok {
			d.URL = asked
			return &d, nil
		}
	}
	d, err := r.fetch(ctx, t.u.String())
	if err != nil {
		return nil, err
	}
	d.URL = asked
	if cacheable {
		r.cache.put(key, *d, r.clock.Now())
	}
	return d, nil
}

// fetch does the request for an already checked URL.
func (r *Reader) fetch(ctx context.Context, u string) (*Document, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, invalidURL("%v", err)
	}
	req.Header.Set("User-Agent", r.userAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, r.requestError(u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	final := resp.Request.URL.String()
	if resp.StatusCode >= 300 {
		return nil, &StatusError{URL: final, Code: resp.StatusCode, Status: resp.Status}
	}
	declared := resp.Header.Get("Content-Type")
	mediaType, _, _ := mime.ParseMediaType(declared)
	mediaType = strings.ToLower(mediaType)
	kind := classify(mediaType)
	if kind == kindBinary {
		return nil, notReadable(mediaType)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, r.maxBytes+1))
	if err != nil {
		return nil, r.requestError(final, err)
	}
	cut := int64(len(body)) > r.maxBytes
	if cut {
		body = body[:r.maxBytes]
	}
	sniffed, _, _ := mime.ParseMediaType(http.DetectContentType(body))
	switch {
	case kind == kindUnknown:
		mediaType, declared = sniffed, sniffed
		if kind = classify(mediaType); kind == kindUnknown || kind == kindBinary {
			return nil, notReadable(mediaType)
		}
	case binarySignature(sniffed):
		// An image or archive served as text/html.
		return nil, notReadable(sniffed)
	}
	d := &Document{FinalURL: final, ContentType: mediaType, FetchedAt: r.clock.Now()}
	var p page
	if kind == kindHTML {
		p, err = readHTML(bytes.NewReader(body), declared, r.maxText)
	} else {
		p, err = readPlain(bytes.NewReader(body), declared, r.maxText)
	}
	if err != nil {
		return nil, fmt.Errorf("web: read %s: %w", final, err)
	}
	d.Title, d.Text, d.Truncated = p.title, p.text, p.truncated || cut
	return d, nil
}

// requestError describes a failed request for u without repeating the
// URL, naming the redirect target when the failure happened there.
func (r *Reader) requestError(u string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.URL != u {
			u += " (redirected to " + ue.URL + ")"
		}
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("web: fetch %s: timed out after %s: %w", u, r.timeout, err)
	}
	return fmt.Errorf("web: fetch %s: %w", u, err)
}

func notReadable(mediaType string) error {
	if mediaType == "" {
		mediaType = "unknown"
	}
	return fmt.Errorf("%w (content type %s)", ErrNotReadable, mediaType)
}

// Kinds of response body.
const (
	kindUnknown = iota // no usable Content-Type: sniff
	kindHTML
	kindText
	kindBinary
)

// classify sorts a media type into the kinds Fetch handles.
func classify(mediaType string) int {
	switch {
	case mediaType == "":
		return kindUnknown
	case mediaType == "text/html" || mediaType == "application/xhtml+xml":
		return kindHTML
	case mediaType == "text/event-stream":
		return kindBinary // never ends
	case strings.HasPrefix(mediaType, "image/"): // image/svg+xml is XML, but a picture
		return kindBinary
	case strings.HasPrefix(mediaType, "text/"),
		mediaType == "application/json", strings.HasSuffix(mediaType, "+json"),
		mediaType == "application/xml", strings.HasSuffix(mediaType, "+xml"),
		mediaType == "application/javascript", mediaType == "application/x-ndjson":
		return kindText
	}
	return kindBinary
}

// binarySignature reports whether a sniffed media type comes from the
// magic bytes of a binary format. A generic application/octet-stream is
// not enough: legacy-encoded text can sniff as that.
func binarySignature(sniffed string) bool {
	for _, p := range []string{"image/", "audio/", "video/", "font/"} {
		if strings.HasPrefix(sniffed, p) {
			return true
		}
	}
	switch sniffed {
	case "application/pdf", "application/zip", "application/x-gzip", "application/x-rar-compressed",
		"application/wasm", "application/vnd.ms-fontobject", "application/postscript", "application/ogg":
		return true
	}
	return false
}

// readPlain returns a text body as text: decoded to UTF-8, line endings
// normalised, control characters dropped, runs of blank lines collapsed.
func readPlain(r io.Reader, contentType string, maxText int) (page, error) {
	dec, err := decodeCharset(r, contentType)
	if err != nil {
		return page{}, err
	}
	// The caller caps the body (Fetch reads at most MaxBytes).
	b, err := io.ReadAll(dec)
	if err != nil {
		return page{}, err
	}
	text, cut := truncateRunes(cleanPlain(string(b)), maxText)
	return page{text: text, truncated: cut}, nil
}

// cleanPlain normalises plain text for the model.
func cleanPlain(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	var b strings.Builder
	b.Grow(len(s))
	blank := 0
	for ln := range strings.Lines(s) {
		ln = strings.TrimSuffix(ln, "\n")
		ln = strings.Map(func(r rune) rune {
			switch {
			case r == '\t':
				return r
			case invisible(r):
				return -1
			}
			return r
		}, ln)
		ln = strings.TrimRightFunc(ln, isSpace)
		if ln == "" {
			blank++
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
			if blank > 0 {
				b.WriteByte('\n')
			}
		}
		blank = 0
		b.WriteString(ln)
	}
	return b.String()
}
