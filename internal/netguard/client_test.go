package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/internal/netguard"
)

func TestClientDefeatsDNSRebinding(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "", ok)
	r := &rebindingResolver{
		first: netip.MustParseAddr("93.184.216.34"),
		later: netip.MustParseAddr("127.0.0.1"),
	}
	g := netguard.New(netguard.Config{Resolver: r})
	target := "http://rebind.test:" + srv.port() + "/"

	_, err := g.CheckURL(context.Background(), target)
	require.NoError(t, err, "the first answer is public")

	_, _, err = get(t, g.Client(), target)
	require.ErrorIs(t, err, netguard.ErrBlocked)
	require.ErrorContains(t, err, "loopback")
	require.Zero(t, srv.hits.Load(), "the loopback server must see nothing")
	require.EqualValues(t, 2, r.calls.Load())
}

func TestClientRedirects(t *testing.T) {
	t.Parallel()
	// A second loopback address stands for an internal host the redirect
	// must not reach; only 127.0.0.1 is allowed.
	internal := startServer(t, "127.0.0.2:0", ok)
	internalURL := "http://127.0.0.2:" + internal.port() + "/"
	res := newResolver("internal.test", "127.0.0.2", "media.test", "127.0.0.1")

	for name, location := range map[string]string{
		"private":          "http://10.0.0.1/",
		"metadata":         "http://169.254.169.254/latest/meta-data/",
		"internal host":    internalURL,
		"internal name":    "http://internal.test:" + internal.port() + "/",
		"numeric trick":    "http://2130706433:" + internal.port() + "/",
		"mapped":           "http://[::ffff:127.0.0.2]:" + internal.port() + "/",
		"file":             "file:///etc/passwd",
		"gopher":           "gopher://127.0.0.1:70/_x",
		"userinfo":         "http://user:pw@media.test/",
		"relative to ipv6": "//[::1]/",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, "", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, location, http.StatusFound)
			})
			g := netguard.New(netguard.Config{Allow: loopback, Resolver: res})
			_, _, err := get(t, g.Client(), srv.URL+"/start")
			require.ErrorIs(t, err, netguard.ErrBlocked)
			require.EqualValues(t, 1, srv.hits.Load())
		})
	}
	require.Zero(t, internal.hits.Load())
	// The internal server is reachable at all: the refusals above are the
	// guard's doing.
	status, _, err := get(t, http.DefaultClient, internalURL)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
}

func TestClientFollowsAllowedRedirect(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/start" {
			http.Redirect(w, r, "http://media.test:"+r.URL.Query().Get("port")+"/final", http.StatusMovedPermanently)
			return
		}
		ok(w, r)
	})
	g := netguard.New(netguard.Config{Allow: loopback, Resolver: newResolver("media.test", "127.0.0.1")})
	status, body, err := get(t, g.Client(), srv.URL+"/start?port="+srv.port())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "ok", body)
	require.EqualValues(t, 2, srv.hits.Load())
}

func TestClientRedirectLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		max  int
		hits int32
	}{{0, 6}, {3, 4}, {1, 2}} {
		srv := startServer(t, "", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/again", http.StatusFound)
		})
		g := netguard.New(netguard.Config{Allow: loopback, MaxRedirects: c.max})
		_, _, err := get(t, g.Client(), srv.URL)
		require.ErrorContains(t, err, "stopped after")
		require.NotErrorIs(t, err, netguard.ErrBlocked)
		require.Equal(t, c.hits, srv.hits.Load(), "MaxRedirects %d", c.max)
	}

	// Negative: no redirect is followed; the redirect itself is returned.
	srv := startServer(t, "", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/again", http.StatusFound)
	})
	g := netguard.New(netguard.Config{Allow: loopback, MaxRedirects: -1})
	status, _, err := get(t, g.Client(), srv.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusFound, status)
	require.EqualValues(t, 1, srv.hits.Load())
}

func TestClientTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := startServer(t, "", func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server closes
	g := netguard.New(netguard.Config{Allow: loopback, Timeout: 200 * time.Millisecond})
	_, _, err := get(t, g.Client(), srv.URL)
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	require.True(t, ue.Timeout(), "%v", err)
	require.NotErrorIs(t, err, netguard.ErrBlocked)
}

// Not parallel: it sets environment variables.
func TestClientIgnoresProxyEnvironment(t *testing.T) {
	proxy := startServer(t, "", ok)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"} {
		t.Setenv(k, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	target := startServer(t, "", ok)
	g := netguard.New(netguard.Config{Allow: loopback, Resolver: newResolver("media.test", "127.0.0.1")})
	c := g.Client()

	tr, isTransport := c.Transport.(*http.Transport)
	require.True(t, isTransport)
	require.Nil(t, tr.Proxy)
	status, _, err := get(t, c, "http://media.test:"+target.port()+"/a.png")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 1, target.hits.Load())
	require.Zero(t, proxy.hits.Load())
}

func TestClientShape(t *testing.T) {
	t.Parallel()
	g := netguard.New(netguard.Config{})
	a, b := g.Client(), g.Client()
	require.NotSame(t, a, b)
	require.Same(t, a.Transport, b.Transport)
	require.NotSame(t, http.DefaultTransport, a.Transport)
	require.Equal(t, 30*time.Second, a.Timeout)
	require.NotNil(t, a.CheckRedirect)
	require.Equal(t, time.Second, netguard.New(netguard.Config{Timeout: time.Second}).Client().Timeout)
	require.NotSame(t, a.Transport, netguard.New(netguard.Config{}).Client().Transport)
}

func TestDialContext(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "", ok)
	port := srv.port()
	res := newResolver("media.test", "127.0.0.1", "mixed.test", "127.0.0.1,10.0.0.1", "v6only.test", "::1")
	open := netguard.New(netguard.Config{Allow: loopback, Resolver: res})
	strict := netguard.New(netguard.Config{Resolver: res})
	ctx := context.Background()

	for _, addr := range []string{"127.0.0.1:" + port, "media.test:" + port} {
		conn, err := open.DialContext(ctx, "tcp", addr)
		require.NoError(t, err, addr)
		require.Equal(t, "127.0.0.1:"+port, conn.RemoteAddr().String())
		require.NoError(t, conn.Close())
	}
	conn, err := open.DialContext(ctx, "tcp4", "media.test:"+port)
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	for _, c := range []struct {
		g             *netguard.Guard
		network, addr string
	}{
		{strict, "tcp", "127.0.0.1:" + port},
		{strict, "tcp", "media.test:" + port},
		{strict, "tcp", "[::ffff:127.0.0.1]:" + port},
		{open, "tcp", "mixed.test:" + port},
		{open, "tcp", "127.1:" + port},
		{open, "tcp", "2130706433:" + port},
		{open, "tcp", "[fe80::1%lo]:" + port},
		{open, "tcp", "v6only.test:" + port},
		{open, "udp", "127.0.0.1:" + port},
		{open, "unix", "/tmp/x.sock"},
		{open, "tcp", "127.0.0.1:0"},
		{open, "tcp", "127.0.0.1:http"},
		{open, "tcp", "127.0.0.1"},
	} {
		conn, err := c.g.DialContext(ctx, c.network, c.addr)
		require.ErrorIs(t, err, netguard.ErrBlocked, "%s %s", c.network, c.addr)
		require.Nil(t, conn)
	}

	// No usable address family is a dial error, not a refusal.
	_, err = open.DialContext(ctx, "tcp6", "media.test:"+port)
	require.Error(t, err)
	require.NotErrorIs(t, err, netguard.ErrBlocked)

	// A closed port is an ordinary connect error.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = open.DialContext(ctx, "tcp", closed)
	var opErr *net.OpError
	require.True(t, errors.As(err, &opErr), "%v", err)
	require.NotErrorIs(t, err, netguard.ErrBlocked)
}
