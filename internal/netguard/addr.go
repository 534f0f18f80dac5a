package netguard

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrBlocked is wrapped by every refusal (errors.Is(err, netguard.ErrBlocked)).
var ErrBlocked = errors.New("netguard: address is not public")

// blocked returns an error wrapping ErrBlocked with a formatted detail.
func blocked(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBlocked, fmt.Sprintf(format, args...))
}

// rule names the reason an address range is refused.
type rule struct {
	prefix netip.Prefix
	reason string
}

func rules(pairs ...string) []rule {
	out := make([]rule, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, rule{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return out
}

// The tables are read-only; the first matching rule wins, so the narrow
// ranges (metadata, broadcast) come before the ranges that contain them.
var (
	v4Rules = rules(
		"169.254.169.254/32", "metadata", // AWS, GCP, Azure, OpenStack, ...
		"169.254.170.2/32", "metadata", // AWS ECS task credentials
		"100.100.100.200/32", "metadata", // Alibaba Cloud
		"168.63.129.16/32", "metadata", // Azure WireServer (a public address)
		"255.255.255.255/32", "broadcast",
		"0.0.0.0/32", "unspecified",
		"0.0.0.0/8", "reserved", // "this network"
		"10.0.0.0/8", "private",
		"100.64.0.0/10", "cgnat",
		"127.0.0.0/8", "loopback",
		"169.254.0.0/16", "link-local",
		"172.16.0.0/12", "private",
		"192.0.0.0/24", "reserved", // IETF protocol assignments
		"192.0.2.0/24", "documentation",
		"192.88.99.0/24", "reserved", // 6to4 relay anycast
		"192.168.0.0/16", "private",
		"198.18.0.0/15", "benchmark",
		"198.51.100.0/24", "documentation",
		"203.0.113.0/24", "documentation",
		"224.0.0.0/4", "multicast",
		"240.0.0.0/4", "reserved",
	)
	v6Rules = rules(
		"fd00:ec2::254/128", "metadata", // AWS IMDS over IPv6
		"::/128", "unspecified",
		"::1/128", "loopback",
		"::/96", "ipv4-compatible", // deprecated ::a.b.c.d
		"64:ff9b:1::/48", "local-use nat64",
		"100::/64", "discard",
		"2001:2::/48", "benchmark",
		"2001::/32", "teredo",
		"2001::/23", "reserved", // IETF protocol assignments
		"2001:db8::/32", "documentation",
		"3fff::/20", "documentation",
		"fc00::/7", "private", // unique local
		"fe80::/10", "link-local",
		"fec0::/10", "site-local",
		"ff00::/8", "multicast",
	)
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	global6   = netip.MustParsePrefix("2000::/3")
)

// CheckAddr returns nil when a is a public unicast address, else an error
// wrapping ErrBlocked naming the reason ("loopback", "private", "metadata",
// "6to4 embedding a blocked IPv4 (loopback)", ...). It ignores any Allow
// list; see [Guard.Check].
func CheckAddr(a netip.Addr) error {
	return addrErr(a, reason(a))
}

func addrErr(a netip.Addr, why string) error {
	if why == "" {
		return nil
	}
	return blocked("%s (%s)", a, why)
}

// reason returns why a is refused, or "" when it is public unicast.
func reason(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "invalid"
	case a.Zone() != "":
		return "zoned"
	case a.Is4():
		return match(v4Rules, a)
	case a.Is4In6():
		return embedded("ipv4-mapped", a.Unmap())
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return embedded("nat64", netip.AddrFrom4([4]byte(b[12:])))
	case sixToFour.Contains(a):
		return embedded("6to4", netip.AddrFrom4([4]byte(b[2:6])))
	}
	if why := match(v6Rules, a); why != "" {
		return why
	}
	if !global6.Contains(a) {
		return "reserved"
	}
	return ""
}

func match(rs []rule, a netip.Addr) string {
	for _, r := range rs {
		if r.prefix.Contains(a) {
			return r.reason
		}
	}
	return ""
}

// embedded judges an IPv6 address by the IPv4 address it carries.
func embedded(kind string, v4 netip.Addr) string {
	if why := reason(v4); why != "" {
		return kind + " embedding a blocked IPv4: " + why
	}
	return ""
}
