package browser

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/internal/netguard"
)

// proxyFixture is a proxy whose guard allows 127.0.0.1 only, an origin on
// 127.0.0.1 and an internal host on 127.0.0.2 that must see nothing.
type proxyFixture struct {
	px           *proxy
	origin       *httptest.Server
	tlsOrigin    *httptest.Server
	internal     *httptest.Server
	internalHits atomic.Int64
	seen         atomic.Value // last request headers at the origin
}

func newProxyFixture(t *testing.T) *proxyFixture {
	t.Helper()
	f := &proxyFixture{}
	g := netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	px, err := startProxy(g, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, px.close()) })
	f.px = px
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.seen.Store(r.Header.Clone())
		if r.URL.Path == "/ws" {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer func() { _ = c.CloseNow() }()
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			_ = c.Write(r.Context(), typ, append([]byte("echo: "), msg...))
			return
		}
		fmt.Fprint(w, "origin says hi")
	})
	f.origin = httptest.NewServer(handler)
	t.Cleanup(f.origin.Close)
	f.tlsOrigin = httptest.NewTLSServer(handler)
	t.Cleanup(f.tlsOrigin.Close)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	f.internal = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f.internalHits.Add(1)
		fmt.Fprint(w, "secret")
	}))
	f.internal.Listener = ln
	f.internal.Start()
	t.Cleanup(f.internal.Close)
	return f
}

// client goes through the proxy; for https it trusts the test origin.
func (f *proxyFixture) client(tlsServer *httptest.Server) *http.Client {
	proxyURL := &url.URL{Scheme: "http", Host: f.px.addr()}
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
	if tlsServer != nil {
		tr = tlsServer.Client().Transport.(*http.Transport).Clone()
		tr.Proxy = http.ProxyURL(proxyURL)
	}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func get(t *testing.T, c *http.Client, u string, h http.Header) (int, string, http.Header, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header, err
}

func TestProxyForwardsPlainHTTP(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t)
	status, body, _, err := get(t, f.client(nil), f.origin.URL+"/page", http.Header{
		"Connection":          {"X-Private"},
		"X-Private":           {"hop only"},
		"Proxy-Authorization": {"Basic c2VjcmV0"},
		"X-Kept":              {"yes"},
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "origin says hi", body)
	seen := f.seen.Load().(http.Header)
	require.Equal(t, "yes", seen.Get("X-Kept"))
	require.Empty(t, seen.Get("X-Private"), "hop-by-hop headers stop at the proxy")
	require.Empty(t, seen.Get("Proxy-Authorization"))
	require.Zero(t, f.px.refused.Load())
}

func TestProxyRefusesPlainHTTP(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t)
	for _, u := range []string{f.internal.URL + "/", "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/"} {
		status, _, h, err := get(t, f.client(nil), u, nil)
		require.NoError(t, err, u)
		require.Equal(t, http.StatusForbidden, status, u)
		require.Equal(t, "address is not public", h.Get("X-Persona-Refused"))
	}
	require.Zero(t, f.internalHits.Load())
	require.EqualValues(t, 3, f.px.refused.Load())
}

func TestProxyTunnelsCONNECT(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t)
	status, body, _, err := get(t, f.client(f.tlsOrigin), f.tlsOrigin.URL+"/secure", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "origin says hi", body)

	// Refused tunnels: the internal host, a private and a metadata address.
	for _, target := range []string{f.internal.Listener.Addr().String(), "10.0.0.1:443", "169.254.169.254:443"} {
		c, err := net.Dial("tcp", f.px.addr())
		require.NoError(t, err)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, target)
		_ = resp.Body.Close()
		_ = c.Close()
	}
	require.Zero(t, f.internalHits.Load())
}

func TestProxyCarriesWebSocket(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(f.origin.URL, "http") + "/ws"
	c, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: f.client(nil)})
	require.NoError(t, err)
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	defer func() { _ = c.CloseNow() }()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("ping")))
	_, msg, err := c.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, "echo: ping", string(msg))

	// To a refused address the upgrade fails.
	_, resp, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(f.internal.URL, "http")+"/ws",
		&websocket.DialOptions{HTTPClient: f.client(nil)})
	require.Error(t, err)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	require.Zero(t, f.internalHits.Load())
}

func TestProxyRejectsOtherRequests(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t)
	// Origin-form: the proxy is not a web server.
	status, _, _, err := get(t, http.DefaultClient, "http://"+f.px.addr()+"/", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, status)
}

func TestProxyCloseEndsTunnels(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t)
	target := f.origin.Listener.Addr().String()
	c, err := net.Dial("tcp", f.px.addr())
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_ = resp.Body.Close() // a CONNECT answer has no body; the tunnel stays

	require.NoError(t, f.px.close())
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = br.ReadByte()
	require.Error(t, err, "the tunnel was closed")
	_, err = net.Dial("tcp", f.px.addr())
	require.Error(t, err)
}

func TestVoidProxyRefusesEverything(t *testing.T) {
	t.Parallel()
	f := newProxyFixture(t)
	void, err := startProxy(nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer func() { require.NoError(t, void.close()) }()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: void.addr()})}}
	status, _, h, err := get(t, c, f.origin.URL+"/", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "browser background traffic", h.Get("X-Persona-Refused"))

	conn, err := net.Dial("tcp", void.addr())
	require.NoError(t, err)
	defer conn.Close()
	target := f.origin.Listener.Addr().String()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.EqualValues(t, 2, void.refused.Load())
}
