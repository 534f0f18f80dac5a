package web_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/internal/netguard"
)

// testAddr is where test servers listen: a loopback address other than
// 127.0.0.1, so the guard can allow exactly it and still refuse a redirect
// to 127.0.0.1.
const testAddr = "127.0.0.2"

// fakeDNS answers from a table; unknown names are not found. It never
// touches the network.
type fakeDNS struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr
	lookups atomic.Int32
}

func newDNS(pairs ...string) *fakeDNS {
	d := &fakeDNS{answers: map[string][]netip.Addr{}}
	for i := 0; i < len(pairs); i += 2 {
		d.answers[pairs[i]] = append(d.answers[pairs[i]], netip.MustParseAddr(pairs[i+1]))
	}
	return d
}

func (d *fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	d.lookups.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.answers[strings.ToLower(strings.TrimSuffix(host, "."))]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return a, nil
}

// site is a test web server on testAddr and a Reader allowed to reach it
// (and nothing else non-public) through names in a fake DNS.
type site struct {
	t      *testing.T
	srv    *httptest.Server
	port   string
	mux    *http.ServeMux
	hits   atomic.Int32
	dns    *fakeDNS
	clock  *clock.Fake
	reader *web.Reader
	done   chan struct{} // closed at cleanup: releases handlers that stall
}

func newSite(t *testing.T, cfg web.Config) *site {
	t.Helper()
	ln, err := net.Listen("tcp", testAddr+":0")
	require.NoError(t, err)
	s := &site{t: t, mux: http.NewServeMux(), done: make(chan struct{})}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mux.ServeHTTP(w, r)
	}))
	_ = s.srv.Listener.Close()
	s.srv.Listener = ln
	s.srv.Start()
	t.Cleanup(func() {
		close(s.done)
		s.srv.Close()
	})
	_, s.port, _ = net.SplitHostPort(ln.Addr().String())
	s.dns = newDNS(
		"www.example.com", testAddr,
		"xn--bcher-kva.example", testAddr,
		"intranet.example.com", "192.168.1.10",
		"loop.example.com", "127.0.0.1",
		"mixed.example.com", testAddr,
		"mixed.example.com", "10.0.0.7",
	)
	s.clock = clock.NewFake(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	if cfg.Guard == nil {
		cfg.Guard = netguard.New(netguard.Config{
			Allow:        []netip.Prefix{netip.MustParsePrefix(testAddr + "/32")},
			Resolver:     s.dns,
			MaxRedirects: 20,
		})
	}
	if cfg.Clock == nil {
		cfg.Clock = s.clock
	}
	s.reader = web.New(cfg)
	return s
}

// url returns an address of path on the server under host.
func (s *site) url(host, path string) string {
	return "http://" + host + ":" + s.port + path
}

// handle registers a handler that writes body with the content type.
func (s *site) handle(pattern, contentType, body string) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, _ *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		} else {
			w.Header()["Content-Type"] = nil // no sniffing by the server
		}
		_, _ = w.Write([]byte(body))
	})
}
