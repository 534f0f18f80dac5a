package netguard_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/internal/netguard"
)

func bypassResolver() *fakeResolver {
	return newResolver(
		"localhost", "127.0.0.1",
		"127.0.0.1.nip.io", "127.0.0.1",
		"metadata.google.internal", "169.254.169.254",
		"mixed.test", "93.184.216.34,10.0.0.1",
		"mixed6.test", "2606:4700::1111,fd00::1",
		"mapped.test", "::ffff:127.0.0.1",
		"v6loop.test", "::1",
		"zoned.test", "fe80::1%eth0",
		"example.com", "93.184.216.34",
		"evil.com", "93.184.216.34",
		"v6.test", "2606:4700::1111",
	)
}

// TestCheckURLRefusesBypasses lists the tricks used to reach internal
// addresses through an "external" URL; each must be refused with ErrBlocked,
// and the reason (when given) must be named.
func TestCheckURLRefusesBypasses(t *testing.T) {
	t.Parallel()
	cases := []struct{ url, reason string }{
		// Plain internal literals.
		{"http://127.0.0.1/", "loopback"},
		{"http://127.0.0.1:8080/admin", "loopback"},
		{"http://127.255.0.1/", "loopback"},
		{"http://10.0.0.1/", "private"},
		{"http://192.168.1.1:8080/", "private"},
		{"http://172.16.0.1/", "private"},
		{"http://100.64.0.1/", "cgnat"},
		{"http://169.254.169.254/latest/meta-data/", "metadata"},
		{"http://100.100.100.200/latest/meta-data/", "metadata"},
		{"http://0.0.0.0/", "unspecified"},
		{"http://0.0.0.0:80/", "unspecified"},
		{"http://224.0.0.1/", "multicast"},
		{"http://255.255.255.255/", "broadcast"},
		{"http://240.0.0.1/", "reserved"},
		{"http://198.18.0.1/", "benchmark"},
		{"http://192.0.2.1/", "documentation"},
		// IPv6 literals and IPv6 forms carrying IPv4.
		{"http://[::1]/", "loopback"},
		{"http://[::1]:8080/", "loopback"},
		{"http://[::]/", "unspecified"},
		{"http://[::ffff:127.0.0.1]/", "ipv4-mapped"},
		{"http://[::ffff:7f00:1]/", "ipv4-mapped"},
		{"http://[0:0:0:0:0:ffff:169.254.169.254]/", "metadata"},
		{"http://[::ffff:a9fe:a9fe]/", "metadata"},
		{"http://[::127.0.0.1]/", "ipv4-compatible"},
		{"http://[::ffff:0:7f00:1]/", "reserved"},
		{"http://[fd00:ec2::254]/", "metadata"},
		{"http://[fe80::1%25eth0]/", "zoned"},
		{"http://[fe80::1]/", "link-local"},
		{"http://[fc00::1]/", "private"},
		{"http://[fd12:3456::1]/", "private"},
		{"http://[fec0::1]/", "site-local"},
		{"http://[ff02::1]/", "multicast"},
		{"http://[2002:7f00:1::]/", "6to4"},
		{"http://[2002:a9fe:a9fe::]/", "6to4"},
		{"http://[64:ff9b::7f00:1]/", "nat64"},
		{"http://[64:ff9b::a9fe:a9fe]/", "nat64"},
		{"http://[64:ff9b:1::a00:1]/", "local-use nat64"},
		{"http://[2001::1]/", "teredo"},
		{"http://[2001:db8::1]/", "documentation"},
		{"http://[100::1]/", "discard"},
		// Numeric spellings other parsers read as 127.0.0.1 (or 0.0.0.0).
		{"http://2130706433/", "non-canonical numeric host"},
		{"http://0x7f000001/", "non-canonical numeric host"},
		{"http://0X7F000001/", "non-canonical numeric host"},
		{"http://017700000001/", "non-canonical numeric host"},
		{"http://0177.0.0.1/", "non-canonical numeric host"},
		{"http://0x7f.0.0.1/", "non-canonical numeric host"},
		{"http://0x7f.1/", "non-canonical numeric host"},
		{"http://127.1/", "non-canonical numeric host"},
		{"http://127.0.1/", "non-canonical numeric host"},
		{"http://127.000.000.001/", "non-canonical numeric host"},
		{"http://0/", "non-canonical numeric host"},
		{"http://0x/", "non-canonical numeric host"},
		{"http://127.0.0.1./", "non-canonical numeric host"},
		{"http://8.8.8.8./", "non-canonical numeric host"},
		{"http://[127.0.0.1]/", "malformed"},
		{"http://１２７.０.０.１/", "invalid host name"},
		{"http://127。0。0。1/", "invalid host name"},
		{"http://%31%32%37.0.0.1/", "malformed"},
		// Names resolving to internal addresses (all answers must pass).
		{"http://localhost/", "loopback"},
		{"http://LOCALHOST:8080/", "loopback"},
		{"http://localhost./", "loopback"},
		{"http://127.0.0.1.nip.io/", "loopback"},
		{"http://metadata.google.internal/computeMetadata/v1/", "metadata"},
		{"http://mixed.test/", "private"},
		{"http://mixed6.test/", "private"},
		{"http://mapped.test/", "loopback"},
		{"http://v6loop.test/", "loopback"},
		{"http://zoned.test/", "zoned"},
		// Userinfo, schemes, empty hosts, ports.
		{"http://user:pass@example.com@127.0.0.1/", "userinfo"},
		{"http://127.0.0.1:80@evil.com/", "userinfo"},
		{"http://evil.com@127.0.0.1/", "userinfo"},
		{"http://user@example.com/", "userinfo"},
		{"http://evil.com\\@127.0.0.1/", "malformed"},
		{"ftp://example.com/", "scheme"},
		{"file:///etc/passwd", "scheme"},
		{"gopher://127.0.0.1:70/_GET%20/", "scheme"},
		{"dict://127.0.0.1:11211/stats", "scheme"},
		{"javascript:alert(1)", "scheme"},
		{"data:text/plain,hello", "scheme"},
		{"//127.0.0.1/", "scheme"},
		{"/etc/passwd", "scheme"},
		{"http:127.0.0.1", "empty host"},
		{"http:/\\127.0.0.1/", "empty host"},
		{"http:///path", "empty host"},
		{"http://:80/", "empty host"},
		{"http://example.com:99999/", "invalid port"},
		{"http://example.com:0/", "invalid port"},
		{"http://exa_mple..com/", "invalid host name"},
	}
	g := netguard.New(netguard.Config{Resolver: bypassResolver()})
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			t.Parallel()
			u, err := g.CheckURL(context.Background(), c.url)
			require.ErrorIs(t, err, netguard.ErrBlocked)
			require.ErrorContains(t, err, c.reason)
			require.Nil(t, u)
		})
	}
}

func TestCheckURLPassesPublic(t *testing.T) {
	t.Parallel()
	g := netguard.New(netguard.Config{Resolver: bypassResolver()})
	for _, raw := range []string{
		"http://8.8.8.8/",
		"https://8.8.8.8:8443/dns-query?name=x",
		"https://[2606:4700::1111]/",
		"http://[::ffff:8.8.8.8]/",
		"http://[64:ff9b::808:808]/",
		"http://example.com/media/a.jpg?x=1#frag",
		"HTTPS://Example.COM./",
		"https://v6.test:8443/",
	} {
		u, err := g.CheckURL(context.Background(), raw)
		require.NoError(t, err, raw)
		require.NotEmpty(t, u.Host, raw)
	}
}

func TestCheckURLLookupFailureIsNotBlocked(t *testing.T) {
	t.Parallel()
	g := netguard.New(netguard.Config{Resolver: bypassResolver()})
	_, err := g.CheckURL(context.Background(), "http://nxdomain.test/")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
	require.NotErrorIs(t, err, netguard.ErrBlocked)
}

func TestCheckURLHonoursAllow(t *testing.T) {
	t.Parallel()
	g := netguard.New(netguard.Config{
		Allow:    []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), loopback[0]},
		Resolver: newResolver("media.lan", "10.9.8.7", "other.lan", "10.9.8.7,10.10.0.1"),
	})
	for _, raw := range []string{"http://127.0.0.1:8080/x", "http://10.9.1.1/", "http://media.lan/a.png"} {
		_, err := g.CheckURL(context.Background(), raw)
		require.NoError(t, err, raw)
	}
	for _, raw := range []string{"http://127.0.0.2/", "http://10.10.0.1/", "http://other.lan/", "http://[::1]/", "http://2130706433/"} {
		_, err := g.CheckURL(context.Background(), raw)
		require.ErrorIs(t, err, netguard.ErrBlocked, raw)
	}
}
