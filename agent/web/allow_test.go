package web_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent/web"
)

// TestConfigAllow: Config.Allow lets the listed non-public prefixes
// through (fetches and the link check of IP literals) and nothing else.
func TestConfigAllow(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "internal wiki")
	}))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]

	open := web.New(web.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	doc, err := open.Fetch(t.Context(), srv.URL)
	require.NoError(t, err)
	require.Equal(t, "internal wiki", doc.Text)
	require.True(t, open.Resolvable(srv.URL))
	require.False(t, open.Resolvable("http://10.0.0.1/"), "only what Allow lists")
	_, err = open.Fetch(t.Context(), "http://127.0.0.2:"+port)
	require.Error(t, err, "127.0.0.2 is not in 127.0.0.1/32")

	closed := web.New(web.Config{})
	_, err = closed.Fetch(t.Context(), srv.URL)
	require.Error(t, err)
	require.False(t, closed.Resolvable(srv.URL))
}
