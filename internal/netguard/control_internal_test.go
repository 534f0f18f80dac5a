package netguard

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// The dialer's Control hook refuses a blocked socket address even if a
// candidate got past the checks before it.
func TestControlHook(t *testing.T) {
	t.Parallel()
	strict := New(Config{})
	allow := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	for _, addr := range []string{"127.0.0.1:80", "10.0.0.1:443", "[::1]:80", "[fe80::1%eth0]:80", "[::ffff:169.254.169.254]:80"} {
		require.ErrorIs(t, strict.control("tcp", addr, nil), ErrBlocked, addr)
	}
	require.ErrorIs(t, strict.control("tcp", "not an address", nil), ErrBlocked)
	require.NoError(t, strict.control("tcp4", "8.8.8.8:443", nil))
	require.NoError(t, strict.control("tcp6", "[2606:4700::1111]:443", nil))
	require.NoError(t, allow.control("tcp4", "127.0.0.1:80", nil))
	require.ErrorIs(t, allow.control("tcp4", "127.0.0.2:80", nil), ErrBlocked)

	// The hook is installed: the guard's dialer, used directly (as a
	// resolver path that skipped the checks would), cannot connect to a
	// loopback listener.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	_, err = strict.dialer.DialContext(context.Background(), "tcp", l.Addr().String())
	require.ErrorIs(t, err, ErrBlocked)
	conn, err := allow.dialer.DialContext(context.Background(), "tcp", l.Addr().String())
	require.NoError(t, err)
	require.NoError(t, conn.Close())
}
