package netguard_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeResolver answers from a fixed table and counts lookups.
type fakeResolver struct {
	answers map[string][]string
	calls   atomic.Int32
}

func newResolver(pairs ...string) *fakeResolver {
	r := &fakeResolver{answers: map[string][]string{}}
	for i := 0; i < len(pairs); i += 2 {
		r.answers[pairs[i]] = strings.Split(pairs[i+1], ",")
	}
	return r
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.calls.Add(1)
	answers, ok := r.answers[strings.ToLower(strings.TrimSuffix(host, "."))]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, len(answers))
	for i, s := range answers {
		out[i] = netip.MustParseAddr(s)
	}
	return out, nil
}

// rebindingResolver answers first on the first lookup and later afterwards.
type rebindingResolver struct {
	first, later netip.Addr
	calls        atomic.Int32
}

func (r *rebindingResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	if r.calls.Add(1) == 1 {
		return []netip.Addr{r.first}, nil
	}
	return []netip.Addr{r.later}, nil
}

// server is an httptest server counting the requests it saw.
type server struct {
	*httptest.Server
	hits atomic.Int32
}

// startServer serves h on 127.0.0.1 (or on addr, when given) until the test
// ends.
func startServer(t *testing.T, addr string, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	if addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("cannot listen on %s: %v", addr, err)
		}
		_ = s.Listener.Close()
		s.Listener = l
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *server) port() string {
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	return port
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }

// get fetches u with c and returns the status and body, closing the body.
func get(t *testing.T, c *http.Client, u string) (int, string, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body), nil
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
