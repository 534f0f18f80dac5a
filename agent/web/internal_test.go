package web

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/internal/netguard"
)

func TestPrivatePrefixes(t *testing.T) {
	contains := func(a string) bool {
		ip := netip.MustParseAddr(a)
		for _, p := range privatePrefixes {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	for _, a := range []string{"10.1.2.3", "172.31.255.255", "192.168.0.1", "127.0.0.1", "100.64.0.1",
		"100.100.100.199", "100.100.100.201", "100.127.255.255", "fc00::1", "fd12:3456::1", "fd00:ec3::1", "::1"} {
		require.True(t, contains(a), a)
	}
	for _, a := range []string{"100.100.100.200", "fd00:ec2::254", "fd00:ec2::1", "169.254.169.254",
		"169.254.170.2", "8.8.8.8", "100.128.0.0", "fe80::1", "172.32.0.1"} {
		require.False(t, contains(a), a)
	}
	// The holes are metadata services by netguard's own rules.
	for _, a := range []string{"100.100.100.200", "fd00:ec2::254"} {
		require.ErrorContains(t, netguard.CheckAddr(netip.MustParseAddr(a)), "metadata")
	}
}

func TestExclude(t *testing.T) {
	got := exclude(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/10"))
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9"), netip.MustParsePrefix("10.64.0.0/10")}, got)
	require.Empty(t, exclude(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")))
}
