package mcptool

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
)

// maxJSONBody caps one application/json response of an HTTP server; event
// streams are capped per event by the SDK instead.
const maxJSONBody = 32 << 20

var errBodyTooLarge = fmt.Errorf("mcptool: HTTP response larger than %d bytes", maxJSONBody)

// newHTTPClient returns the client of one HTTP server: its own connection
// pool (closed with the server), the configured headers on every request,
// and a size cap on JSON responses. It has no overall timeout because the
// server's event stream is long-lived; calls are bounded by their context.
func newHTTPClient(headers map[string]string) (*http.Client, *http.Transport) {
	var base *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		base = dt.Clone()
	} else {
		base = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	return &http.Client{Transport: &headerTransport{base: base, headers: headers}}, base
}

type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

// RoundTrip adds the configured headers (never replacing one the SDK set)
// and caps JSON response bodies.
func (h *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range h.headers {
			if req.Header.Get(k) == "" {
				req.Header.Set(k, v)
			}
		}
	}
	resp, err := h.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		resp.Body = &cappedBody{rc: resp.Body, left: maxJSONBody}
	}
	return resp, nil
}

// cappedBody fails a read past its limit instead of buffering without end.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One more byte tells a body of exactly the limit from a longer one.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, errBodyTooLarge
		}
		if err == nil {
			return 0, nil
		}
		if errors.Is(err, io.EOF) {
			return 0, io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
