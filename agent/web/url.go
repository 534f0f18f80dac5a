package web

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/idna"

	"github.com/personakit/persona/internal/netguard"
)

// maxURLLen bounds the URLs Resolvable and Fetch accept; longer ones are
// refused before any parsing work.
const maxURLLen = 8192

// errNameOK is what nameChecker's resolver answers: the guard reached the
// DNS step, so every syntactic rule for the host name passed.
var errNameOK = errors.New("web: host name passed the syntax checks")

// refusingResolver never resolves: it lets [netguard.Guard.CheckURL] run
// its syntax checks on a host name without any network I/O.
type refusingResolver struct{}

func (refusingResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return nil, errNameOK
}

// nameChecker applies the guard's own host-name rules (plain ASCII labels,
// no numeric spellings that parsers read as IPv4) without resolving.
var nameChecker = netguard.New(netguard.Config{Resolver: refusingResolver{}})

// blockedNames are host names that only ever point inside a network.
var blockedNames = []string{
	"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback",
	"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
	"kubernetes", "kubernetes.default", "kubernetes.default.svc",
	"wpad", "broadcasthost",
}

// blockedSuffixes are DNS suffixes reserved for local or private use, or
// that never resolve publicly.
var blockedSuffixes = []string{
	".localhost", ".local", ".localdomain", ".internal", ".intranet",
	".lan", ".home", ".corp", ".private", ".home.arpa", ".arpa",
	".svc", ".cluster.local", ".test", ".invalid", ".example", ".onion",
	".alt",
}

// target is a parsed URL ready for a request: http(s), no userinfo, host in
// ASCII (IDN converted to punycode), fragment dropped.
type target struct {
	u       *url.URL
	literal bool // the host is an IP literal
}

// parseTarget parses raw as an http(s) URL and normalises its host. It does
// no network I/O. Errors wrap ErrInvalidURL.
func parseTarget(raw string) (*target, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, invalidURL("empty URL")
	}
	if len(raw) > maxURLLen {
		return nil, invalidURL("URL longer than %d bytes", maxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalidURL("%v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, invalidURL("scheme %q is not http or https", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, invalidURL("not a hierarchical URL")
	}
	if u.User != nil {
		return nil, invalidURL("user info in URL")
	}
	host := u.Hostname()
	if host == "" {
		return nil, invalidURL("no host")
	}
	_, literalErr := netip.ParseAddr(host)
	t := &target{u: u, literal: literalErr == nil}
	if !t.literal {
		ascii, err := asciiHost(host)
		if err != nil {
			return nil, invalidURL("host %q: %v", host, err)
		}
		if ascii != host {
			if p := u.Port(); p != "" {
				u.Host = net.JoinHostPort(ascii, p)
			} else {
				u.Host = ascii
			}
		}
	}
	u.Fragment, u.RawFragment = "", ""
	return t, nil
}

// asciiHost lower-cases a host name and converts an internationalised one
// to its punycode form.
func asciiHost(host string) (string, error) {
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 {
			return idna.Lookup.ToASCII(host)
		}
	}
	return strings.ToLower(host), nil
}

// check applies g's rules to t without network I/O: an IP literal is judged
// by g (and so honours its Allow list), a host name by the guard's syntax
// rules only. The DNS answer is checked later, when the request dials.
func (t *target) check(g *netguard.Guard) error {
	s := t.u.String()
	if t.literal {
		_, err := g.CheckURL(context.Background(), s)
		return err
	}
	_, err := nameChecker.CheckURL(context.Background(), s)
	if errors.Is(err, errNameOK) {
		return nil
	}
	if err == nil { // the resolver always fails; be strict if that changes
		return errors.New("web: host name check gave no verdict")
	}
	return err
}

// Resolvable reports whether raw is worth reading as a link: an http(s) URL
// without userinfo whose host is a public IP literal or a plausible public
// DNS name (at least one dot, an alphabetic or punycode top-level label,
// not localhost, not a local/internal suffix such as .local, .internal,
// .home.arpa or .localhost, not a cloud metadata name). Numeric host
// spellings that some parsers read as IPv4 (2130706433, 0x7f000001,
// 017700000001, 127.1) are refused.
//
// It does no network I/O, so route.Identity.ResolveLink can call it while
// classifying a message; the DNS answer is checked by Fetch. IP literals
// are judged by the configured Guard (its Allow list applies) but never by
// AllowPrivate: a stranger's link to a private address does not trigger a
// read.
func (r *Reader) Resolvable(raw string) bool {
	t, err := parseTarget(raw)
	if err != nil {
		return false
	}
	if !t.literal && !plausiblePublicName(t.u.Hostname()) {
		return false
	}
	return t.check(r.linkGuard) == nil
}

// plausiblePublicName reports whether an ASCII host name could be a public
// DNS name.
func plausiblePublicName(host string) bool {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	dot := strings.LastIndexByte(name, '.')
	if dot <= 0 || slices.Contains(blockedNames, name) {
		return false
	}
	for _, s := range blockedSuffixes {
		if strings.HasSuffix(name, s) {
			return false
		}
	}
	return plausibleTLD(name[dot+1:])
}

// plausibleTLD accepts letters-only labels of two or more characters and
// punycode labels (xn--...).
func plausibleTLD(tld string) bool {
	if rest, ok := strings.CutPrefix(tld, "xn--"); ok {
		return rest != "" && strings.IndexFunc(rest, func(r rune) bool {
			return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-'
		}) < 0
	}
	return len(tld) >= 2 && strings.IndexFunc(tld, func(r rune) bool { return r < 'a' || r > 'z' }) < 0
}

// trackingParams are query parameters that identify a click, a campaign or
// a share rather than the resource; CanonicalURL drops them. Keys starting
// with "utm_" are dropped too.
var trackingParams = map[string]bool{
	"fbclid": true, "gclid": true, "gclsrc": true, "dclid": true, "gbraid": true,
	"wbraid": true, "msclkid": true, "yclid": true, "twclid": true, "ttclid": true,
	"li_fat_id": true, "igshid": true, "igsh": true, "mc_cid": true, "mc_eid": true,
	"_hsenc": true, "_hsmi": true, "mkt_tok": true, "oly_anon_id": true, "oly_enc_id": true,
	"vero_id": true, "_openstat": true, "spm": true, "scm": true, "spm_id_from": true,
	"vd_source": true, "share_source": true, "share_medium": true, "share_from": true,
	"from_spmid": true, "unique_k": true, "ref_src": true, "ref_url": true,
}

// isTracking reports whether a raw query key is a tracking parameter.
func isTracking(rawKey string) bool {
	key, err := url.QueryUnescape(rawKey)
	if err != nil {
		key = rawKey
	}
	key = strings.ToLower(key)
	return strings.HasPrefix(key, "utm_") || trackingParams[key]
}

// CanonicalURL returns the key under which a web resource is de-duplicated:
// scheme and host lower-cased (an internationalised host in punycode, a
// trailing dot dropped), the default port dropped, "." and ".." path
// segments resolved, an empty path written "/", percent-escapes in
// upper case, the fragment dropped, tracking parameters (utm_*, fbclid,
// gclid, spm, ...) dropped and the remaining query parameters sorted. It
// reports false for anything that is not an http(s) URL with a host and
// without userinfo.
func CanonicalURL(raw string) (string, bool) {
	t, err := parseTarget(raw)
	if err != nil {
		return "", false
	}
	u := t.u
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return "", false
	}
	if t.literal && strings.Contains(host, ":") {
		if a, err := netip.ParseAddr(host); err == nil {
			host = a.String() // one spelling per IPv6 address
		}
		host = "[" + strings.ReplaceAll(host, "%", "%25") + "]"
	}
	port := ""
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return "", false
		}
		if defaultPort[u.Scheme] != n {
			port = strconv.FormatUint(n, 10)
		}
	}
	var b strings.Builder
	b.Grow(len(raw))
	b.WriteString(u.Scheme)
	b.WriteString("://")
	b.WriteString(host)
	if port != "" {
		b.WriteByte(':')
		b.WriteString(port)
	}
	path := upperEscapes(removeDotSegments(u.EscapedPath()))
	if path == "" {
		path = "/"
	}
	b.WriteString(path)
	if q := canonicalQuery(u.RawQuery); q != "" {
		b.WriteByte('?')
		b.WriteString(q)
	}
	return b.String(), true
}

// defaultPort is the port a scheme implies.
var defaultPort = map[string]uint64{"http": 80, "https": 443}

// canonicalQuery drops empty and tracking parameters from a raw query and
// sorts the rest, keeping each parameter's original encoding.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	kept := parts[:0]
	for _, p := range parts {
		if p == "" {
			continue
		}
		key, _, _ := strings.Cut(p, "=")
		if isTracking(key) {
			continue
		}
		kept = append(kept, upperEscapes(p))
	}
	slices.Sort(kept)
	return strings.Join(kept, "&")
}

// removeDotSegments resolves "." and ".." segments of an absolute path as
// RFC 3986 section 5.2.4 describes.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	segs := strings.Split(p, "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	res := strings.Join(out, "/")
	if strings.HasPrefix(p, "/") && !strings.HasPrefix(res, "/") {
		res = "/" + res
	}
	return res
}

// upperEscapes writes the hex digits of percent-escapes in upper case.
func upperEscapes(s string) string {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s
	}
	b := []byte(s)
	for ; i+2 < len(b); i++ {
		if b[i] == '%' && isHex(b[i+1]) && isHex(b[i+2]) {
			b[i+1], b[i+2] = upperHex(b[i+1]), upperHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func upperHex(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
