package browser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/personakit/persona/internal/netguard"
)

// proxy is a forward proxy Chromium is pointed at: every connection it
// opens for the browser goes through the guard's dialer, which checks the
// resolved and the connected address. It speaks plain HTTP (absolute-form
// requests, including upgrades) and CONNECT tunnels; it listens on
// 127.0.0.1 only. A proxy made with a nil guard refuses everything: it
// serves Chromium's own background traffic, which pages never need.
type proxy struct {
	guard     *netguard.Guard // nil: refuse every request
	log       *slog.Logger
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	dialWait  time.Duration

	refused atomic.Int64 // connections the guard refused, for tests and logs

	mu    sync.Mutex
	conns map[net.Conn]struct{} // hijacked connections, closed on shutdown
	wg    sync.WaitGroup        // tunnel goroutines
}

// hopHeaders are the hop-by-hop headers a proxy must not forward.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func startProxy(g *netguard.Guard, log *slog.Logger) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("browser: proxy listen: %w", err)
	}
	p := &proxy{
		guard:    g,
		log:      log,
		ln:       ln,
		dialWait: 15 * time.Second,
		conns:    map[net.Conn]struct{}{},
	}
	p.transport = &http.Transport{
		Proxy:                 nil, // never chain to an environment proxy
		DialContext:           p.dial,
		ForceAttemptHTTP2:     false,
		DisableCompression:    true, // pass the browser's encodings through untouched
		MaxIdleConns:          64,
		IdleConnTimeout:       60 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(ln) // returns ErrServerClosed on close
	}()
	return p, nil
}

// addr is the proxy's address, host:port.
func (p *proxy) addr() string { return p.ln.Addr().String() }

// close stops the proxy and every tunnel it holds open.
func (p *proxy) close() error {
	err := p.srv.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil // later tunnels are refused
	p.mu.Unlock()
	p.transport.CloseIdleConnections()
	p.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// dial connects through the guard and counts refusals.
func (p *proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.dialWait)
	defer cancel()
	c, err := p.guard.DialContext(ctx, network, addr)
	if err != nil && errors.Is(err, netguard.ErrBlocked) {
		p.refused.Add(1)
		p.log.Debug("browser proxy refused", "addr", addr, "err", err)
	}
	return c, err
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case p.guard == nil:
		p.refused.Add(1)
		w.Header().Set("X-Persona-Refused", "browser background traffic")
		http.Error(w, "refused: the browser's own background traffic is not allowed", http.StatusForbidden)
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http" && r.URL.Host != "":
		if isUpgrade(r.Header) {
			p.upgrade(w, r)
			return
		}
		p.forward(w, r)
	default:
		http.Error(w, "browser proxy: only absolute http URLs and CONNECT", http.StatusBadRequest)
	}
}

// fail answers a request the proxy could not carry out. A guard refusal is
// a 403 the browser shows as a failed request; anything else a 502.
func (p *proxy) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, netguard.ErrBlocked) {
		w.Header().Set("X-Persona-Refused", "address is not public")
		http.Error(w, "refused by the browser guard: address is not public", http.StatusForbidden)
		return
	}
	http.Error(w, "browser proxy: upstream failed", http.StatusBadGateway)
}

func (p *proxy) forward(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	removeHopHeaders(out.Header)
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.fail(w, err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	removeHopHeaders(resp.Header)
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush() // streams (event sources) must not wait for a full buffer
		}
		if err != nil {
			return
		}
	}
}

// connect opens a CONNECT tunnel to a checked address.
func (p *proxy) connect(w http.ResponseWriter, r *http.Request) {
	up, err := p.dial(r.Context(), "tcp", r.Host)
	if err != nil {
		p.fail(w, err)
		return
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		http.Error(w, "browser proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = client.Close()
		_ = up.Close()
		return
	}
	p.splice(client, brw.Reader, up)
}

// upgrade carries an HTTP Upgrade (a plain ws:// WebSocket) by writing the
// request to a checked connection and splicing the two afterwards.
func (p *proxy) upgrade(w http.ResponseWriter, r *http.Request) {
	host := r.URL.Host
	if r.URL.Port() == "" {
		host = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	up, err := p.dial(r.Context(), "tcp", host)
	if err != nil {
		p.fail(w, err)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	connHeader := out.Header.Get("Upgrade")
	removeHopHeaders(out.Header)
	out.Header.Set("Connection", "Upgrade")
	out.Header.Set("Upgrade", connHeader)
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		http.Error(w, "browser proxy: cannot upgrade", http.StatusInternalServerError)
		return
	}
	if err := out.Write(up); err != nil {
		_ = client.Close()
		_ = up.Close()
		return
	}
	p.splice(client, brw.Reader, up)
}

// splice copies both ways until either side ends, then closes both. Bytes
// the server already buffered from the client are sent first.
func (p *proxy) splice(client net.Conn, buffered *bufio.Reader, up net.Conn) {
	if !p.track(client) {
		_ = client.Close()
		_ = up.Close()
		return
	}
	if !p.track(up) {
		p.untrack(client)
		_ = client.Close()
		_ = up.Close()
		return
	}
	p.wg.Add(2)
	var once sync.Once
	done := func() {
		once.Do(func() {
			_ = client.Close()
			_ = up.Close()
			p.untrack(client)
			p.untrack(up)
		})
	}
	go func() {
		defer p.wg.Done()
		defer done()
		var src io.Reader = client
		if buffered != nil && buffered.Buffered() > 0 {
			src = io.MultiReader(io.LimitReader(buffered, int64(buffered.Buffered())), client)
		}
		_, _ = io.Copy(up, src)
	}()
	go func() {
		defer p.wg.Done()
		defer done()
		_, _ = io.Copy(client, up)
	}()
}

func isUpgrade(h http.Header) bool {
	if h.Get("Upgrade") == "" {
		return false
	}
	for _, v := range h.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				h.Del(tok)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}
