package netguard_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/internal/netguard"
)

func TestCheckAddrRefuses(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"0.0.0.0":                              "unspecified",
		"0.1.2.3":                              "reserved",
		"10.0.0.1":                             "private",
		"10.255.255.255":                       "private",
		"100.64.0.1":                           "cgnat",
		"100.127.255.254":                      "cgnat",
		"100.100.100.200":                      "metadata",
		"127.0.0.1":                            "loopback",
		"127.255.255.254":                      "loopback",
		"169.254.0.1":                          "link-local",
		"169.254.169.254":                      "metadata",
		"169.254.170.2":                        "metadata",
		"168.63.129.16":                        "metadata",
		"172.16.0.1":                           "private",
		"172.31.255.255":                       "private",
		"192.0.0.8":                            "reserved",
		"192.0.2.1":                            "documentation",
		"192.88.99.1":                          "reserved",
		"192.168.1.1":                          "private",
		"198.18.0.1":                           "benchmark",
		"198.19.255.255":                       "benchmark",
		"198.51.100.7":                         "documentation",
		"203.0.113.9":                          "documentation",
		"224.0.0.1":                            "multicast",
		"239.255.255.250":                      "multicast",
		"240.0.0.1":                            "reserved",
		"255.255.255.255":                      "broadcast",
		"::":                                   "unspecified",
		"::1":                                  "loopback",
		"::127.0.0.1":                          "ipv4-compatible",
		"::8.8.8.8":                            "ipv4-compatible",
		"::ffff:127.0.0.1":                     "ipv4-mapped embedding a blocked IPv4: loopback",
		"::ffff:a9fe:a9fe":                     "ipv4-mapped embedding a blocked IPv4: metadata",
		"::ffff:0:7f00:1":                      "reserved",
		"64:ff9b::7f00:1":                      "nat64 embedding a blocked IPv4: loopback",
		"64:ff9b::a00:1":                       "nat64 embedding a blocked IPv4: private",
		"64:ff9b:1::808:808":                   "local-use nat64",
		"100::1":                               "discard",
		"2001::1":                              "teredo",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2": "teredo",
		"2001:2::1":                            "benchmark",
		"2001:10::1":                           "reserved",
		"2001:db8::1":                          "documentation",
		"3fff::1":                              "documentation",
		"2002:7f00:1::":                        "6to4 embedding a blocked IPv4: loopback",
		"2002:a9fe:a9fe::1":                    "6to4 embedding a blocked IPv4: metadata",
		"2002:c0a8:101::1":                     "6to4 embedding a blocked IPv4: private",
		"fc00::1":                              "private",
		"fd12:3456:789a::1":                    "private",
		"fd00:ec2::254":                        "metadata",
		"fe80::1":                              "link-local",
		"fe80::1%eth0":                         "zoned",
		"fec0::1":                              "site-local",
		"ff02::1":                              "multicast",
		"ff05::1:3":                            "multicast",
		"4000::1":                              "reserved",
		"5f00::1":                              "reserved",
		"1234::1":                              "reserved",
	}
	for s, reason := range cases {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			err := netguard.CheckAddr(netip.MustParseAddr(s))
			require.ErrorIs(t, err, netguard.ErrBlocked)
			require.ErrorContains(t, err, "("+reason+")")
		})
	}
	require.ErrorIs(t, netguard.CheckAddr(netip.Addr{}), netguard.ErrBlocked)
}

func TestCheckAddrPasses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "11.0.0.1", "100.63.255.255",
		"100.128.0.0", "172.15.255.255", "172.32.0.1", "192.167.255.255",
		"192.169.0.1", "198.17.255.255", "198.20.0.1", "223.255.255.255",
		"2606:4700::1111", "2001:4860:4860::8888", "2a00:1450:4001::200e",
		"::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "2001:200::1",
	} {
		require.NoError(t, netguard.CheckAddr(netip.MustParseAddr(s)), s)
	}
}

func TestGuardCheckHonoursAllow(t *testing.T) {
	t.Parallel()
	g := netguard.New(netguard.Config{Allow: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/32"),
		netip.MustParsePrefix("10.1.2.3/16"), // host bits are ignored
	}})
	for _, s := range []string{"127.0.0.1", "::ffff:127.0.0.1", "10.1.0.1", "10.1.255.255", "8.8.8.8"} {
		require.NoError(t, g.Check(netip.MustParseAddr(s)), s)
	}
	for _, s := range []string{"127.0.0.2", "10.2.0.1", "::1", "169.254.169.254", "fe80::1%lo"} {
		require.ErrorIs(t, g.Check(netip.MustParseAddr(s)), netguard.ErrBlocked, s)
	}
	// The package-level check ignores every guard's Allow list.
	require.ErrorIs(t, netguard.CheckAddr(netip.MustParseAddr("127.0.0.1")), netguard.ErrBlocked)
}
