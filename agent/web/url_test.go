package web_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/internal/netguard"
	"github.com/personakit/persona/route"
)

func TestResolvable(t *testing.T) {
	r := web.New(web.Config{})
	tests := []struct {
		url  string
		want bool
	}{
		// Public names and addresses.
		{"https://example.com/", true},
		{"http://example.com", true},
		{"https://www.example.org/path?q=1#frag", true},
		{"HTTPS://EXAMPLE.COM/UPPER", true},
		{"https://sub.domain.co.uk:8443/x", true},
		{"https://example.com./trailing-dot", true},
		{"https://bücher.de/", true},
		{"https://xn--bcher-kva.de/", true},
		{"https://例子.中国/", true},
		{"https://example.xn--fiqs8s/", true},
		{"http://8.8.8.8/", true},
		{"http://1.1.1.1:8080/dns", true},
		{"http://[2606:4700:4700::1111]/", true},
		{"  https://example.com/padded  ", true},
		{"https://my-site_name.example.com/", true},
		// Loopback, private and metadata literals.
		{"http://127.0.0.1/", false},
		{"http://127.0.0.1:8080/admin", false},
		{"http://10.0.0.1/", false},
		{"http://172.16.5.4/", false},
		{"http://192.168.1.1/", false},
		{"http://100.64.0.1/", false},
		{"http://169.254.169.254/latest/meta-data/", false},
		{"http://[fd00:ec2::254]/", false},
		{"http://0.0.0.0/", false},
		{"http://[::1]/", false},
		{"http://[::ffff:127.0.0.1]/", false},
		{"http://[::ffff:7f00:1]/", false},
		{"http://[64:ff9b::a00:1]/", false},
		{"http://[fe80::1%25eth0]/", false},
		{"http://[127.0.0.1]/", false},
		{"http://%31%32%37.0.0.1/", false},
		// Numeric tricks.
		{"http://127.1/", false},
		{"http://0x7f000001/", false},
		{"http://0x7f.0.0.1/", false},
		{"http://2130706433/", false},
		{"http://017700000001/", false},
		{"http://0177.0.0.1/", false},
		{"http://127.0.0.1./", false},
		{"http://1.2.3.4.5/", false},
		// Local and internal names.
		{"http://localhost/", false},
		{"http://LOCALHOST:3000/", false},
		{"http://app.localhost/", false},
		{"http://metadata.google.internal/computeMetadata/v1/", false},
		{"http://metadata/", false},
		{"http://foo.local/", false},
		{"http://a.internal/", false},
		{"http://x.home.arpa/", false},
		{"http://printer.lan/", false},
		{"http://1.0.0.127.in-addr.arpa/", false},
		{"http://kubernetes.default.svc/", false},
		{"http://api.default.svc.cluster.local/", false},
		{"http://intranet/", false},
		{"http://example/", false},
		{"http://example.c0m/", false},
		{"http://example.c/", false},
		// Not plain http(s) links.
		{"http://user@example.com/", false},
		{"http://user:pass@example.com/", false},
		{"ftp://example.com/file", false},
		{"javascript:alert(1)", false},
		{"data:text/html,hi", false},
		{"file:///etc/passwd", false},
		{"mailto:someone@example.com", false},
		{"//example.com/no-scheme", false},
		{"example.com", false},
		{"http://", false},
		{"http:///path", false},
		{"http:example.com", false},
		{"http://exa mple.com/", false},
		{"http://example.com:0/", false},
		{"http://example.com:99999/", false},
		{"http://-.example.com/", true}, // syntactically a name; DNS decides
		{"", false},
		{"https://example.com/" + strings.Repeat("a", 9000), false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, r.Resolvable(tt.url), "%q", tt.url)
	}
}

func TestResolvableDoesNoLookups(t *testing.T) {
	dns := newDNS()
	r := web.New(web.Config{Guard: netguard.New(netguard.Config{Resolver: dns})})
	for _, u := range []string{"https://example.com/", "http://foo.bar.baz/", "http://8.8.8.8/", "http://localhost/"} {
		r.Resolvable(u)
	}
	require.Zero(t, dns.lookups.Load())
}

func TestResolvableHonoursGuardAllow(t *testing.T) {
	g := netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}})
	r := web.New(web.Config{Guard: g})
	require.True(t, r.Resolvable("http://10.9.1.2/"))
	require.False(t, r.Resolvable("http://10.8.1.2/"))
	require.False(t, r.Resolvable("http://169.254.169.254/"))
}

func TestResolvableAsLinkResolver(t *testing.T) {
	r := web.New(web.Config{})
	var resolver route.LinkResolver = r.Resolvable
	require.True(t, resolver("https://example.com/a"))
	require.False(t, resolver("http://localhost/a"))
}

func TestCanonicalURL(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"https://example.com", "https://example.com/", true},
		{"HTTPS://Example.COM/Path", "https://example.com/Path", true},
		{"http://example.com:80/a", "http://example.com/a", true},
		{"https://example.com:443/a", "https://example.com/a", true},
		{"http://example.com:443/a", "http://example.com:443/a", true},
		{"https://example.com:8443/a", "https://example.com:8443/a", true},
		{"https://example.com:0443/a", "https://example.com/a", true},
		{"https://example.com/a#section", "https://example.com/a", true},
		{"https://example.com./a", "https://example.com/a", true},
		{"https://example.com/a/./b/../c", "https://example.com/a/c", true},
		{"https://example.com/a/b/..", "https://example.com/a/", true},
		{"https://example.com/../x", "https://example.com/x", true},
		{"https://example.com/a%2fb%c3%a9", "https://example.com/a%2Fb%C3%A9", true},
		{"https://example.com/?b=2&a=1", "https://example.com/?a=1&b=2", true},
		{"https://example.com/?utm_source=x&id=7&utm_medium=y", "https://example.com/?id=7", true},
		{"https://example.com/?UTM_Campaign=x&id=7", "https://example.com/?id=7", true},
		{"https://example.com/p?fbclid=abc", "https://example.com/p", true},
		{"https://example.com/p?gclid=1&msclkid=2&yclid=3&igshid=4&mc_eid=5", "https://example.com/p", true},
		{"https://item.taobao.com/item.htm?id=1&spm=a.b.c&scm=1", "https://item.taobao.com/item.htm?id=1", true},
		{"https://www.bilibili.com/video/BV1?spm_id_from=333&vd_source=abc&p=2", "https://www.bilibili.com/video/BV1?p=2", true},
		{"https://example.com/?a=1&&b=2&", "https://example.com/?a=1&b=2", true},
		{"https://example.com/?q=a%2bb", "https://example.com/?q=a%2Bb", true},
		{"https://example.com/?ref=main", "https://example.com/?ref=main", true},
		{"https://bücher.de/x", "https://xn--bcher-kva.de/x", true},
		{"http://[2001:DB8:0:0::1]:80/", "http://[2001:db8::1]/", true},
		{"http://8.8.8.8:80", "http://8.8.8.8/", true},
		{"  https://example.com/trim  ", "https://example.com/trim", true},
		{"ftp://example.com/", "", false},
		{"mailto:a@example.com", "", false},
		{"javascript:alert(1)", "", false},
		{"https://user:pw@example.com/", "", false},
		{"example.com/no-scheme", "", false},
		{"https://", "", false},
		{"", "", false},
		{"http://example.com:99999/", "", false},
	}
	for _, tt := range tests {
		got, ok := web.CanonicalURL(tt.in)
		require.Equal(t, tt.ok, ok, "%q", tt.in)
		require.Equal(t, tt.want, got, "%q", tt.in)
	}
}

func TestCanonicalURLIdempotent(t *testing.T) {
	for _, in := range []string{
		"HTTPS://Example.COM:443/a/../b/./c?z=1&utm_x=2&a=%2f#f",
		"http://bücher.de/%7euser?b&a",
		"http://[::1]:8080/",
	} {
		once, ok := web.CanonicalURL(in)
		require.True(t, ok, in)
		twice, ok := web.CanonicalURL(once)
		require.True(t, ok, once)
		require.Equal(t, once, twice)
	}
}
