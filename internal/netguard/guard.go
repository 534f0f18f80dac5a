package netguard

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Resolver resolves host names. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Guard. The zero value is valid.
type Config struct {
	// Allow lets these prefixes through although they are not public. It
	// exists for tests (an httptest server on 127.0.0.1) and for an
	// operator who deliberately serves media from a private host; empty in
	// production.
	Allow []netip.Prefix
	// Resolver resolves host names (nil = a fresh &net.Resolver{}). Tests
	// inject one to simulate DNS rebinding.
	Resolver Resolver
	// Timeout bounds one whole request made with Client, redirects
	// included (0 = 30 s).
	Timeout time.Duration
	// MaxRedirects bounds redirects followed by Client (0 = 5; negative =
	// none followed: the client returns the redirect response itself).
	MaxRedirects int
	// DialTimeout bounds one TCP connect (0 = 10 s).
	DialTimeout time.Duration
}

// Guard refuses non-public addresses; see the package documentation. Create
// one with New.
type Guard struct {
	allow        []netip.Prefix
	resolver     Resolver
	timeout      time.Duration
	maxRedirects int
	dialer       *net.Dialer
	transport    *http.Transport
}

// New returns a Guard for cfg, with its own dialer and HTTP transport.
func New(cfg Config) *Guard {
	g := &Guard{
		resolver:     cfg.Resolver,
		timeout:      cfg.Timeout,
		maxRedirects: cfg.MaxRedirects,
	}
	for _, p := range cfg.Allow {
		if p.IsValid() {
			g.allow = append(g.allow, p.Masked())
		}
	}
	if g.resolver == nil {
		g.resolver = &net.Resolver{}
	}
	if g.timeout == 0 {
		g.timeout = 30 * time.Second
	}
	if g.maxRedirects == 0 {
		g.maxRedirects = 5
	}
	dialTimeout := cfg.DialTimeout
	if dialTimeout == 0 {
		dialTimeout = 10 * time.Second
	}
	g.dialer = &net.Dialer{Timeout: dialTimeout, Control: g.control}
	g.transport = &http.Transport{
		Proxy:                 nil, // a proxy would resolve and connect on our behalf, unchecked
		DialContext:           g.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return g
}

// Check is CheckAddr honouring the guard's Allow list. An IPv4-mapped
// address is allowed when its IPv4 form is.
func (g *Guard) Check(a netip.Addr) error {
	return addrErr(a, g.reason(a))
}

func (g *Guard) reason(a netip.Addr) string {
	if a.IsValid() && a.Zone() == "" {
		for _, p := range g.allow {
			if p.Contains(a) || p.Contains(a.Unmap()) {
				return ""
			}
		}
	}
	return reason(a)
}

// CheckURL parses raw and returns it when it is an http or https URL
// without userinfo whose host is a canonical IPv4 dotted quad, a bracketed
// IPv6 literal or an ASCII host name, and whose address (every resolved
// address, for a name) passes Check. Refusals wrap ErrBlocked; a failed
// lookup or an ended ctx is returned as is.
func (g *Guard) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed URL: %w", ErrBlocked, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, blocked("scheme %q not allowed", u.Scheme)
	}
	if u.User != nil {
		return nil, blocked("userinfo not allowed")
	}
	host := u.Hostname()
	if host == "" {
		return nil, blocked("empty host")
	}
	if p := u.Port(); p != "" {
		if _, err := parsePort(p); err != nil {
			return nil, err
		}
	}
	bracketed := strings.HasPrefix(u.Host, "[")
	a, isIP, err := parseHost(host)
	switch {
	case err != nil:
		return nil, err
	case isIP && bracketed != a.Is6():
		// "[127.0.0.1]", or an IPv6 literal without brackets.
		return nil, blocked("non-canonical numeric host %q", host)
	case isIP:
		if err := g.Check(a); err != nil {
			return nil, err
		}
	default:
		if _, err := g.resolve(ctx, "ip", host); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// DialContext dials like net.Dialer, for the networks tcp, tcp4 and tcp6,
// but checks the address it connects to: it resolves a host name through
// the Resolver, refuses unless every answer passes Check, and connects to
// the checked addresses by IP literal, in order, until one connect
// succeeds. Use it as http.Transport.DialContext.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var lookup string
	switch network {
	case "tcp", "tcp4", "tcp6":
		lookup = "ip" + strings.TrimPrefix(network, "tcp")
	default:
		return nil, blocked("network %q not allowed", network)
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBlocked, err)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return nil, err
	}
	a, isIP, err := parseHost(host)
	if err != nil {
		return nil, err
	}
	ips := []netip.Addr{a.Unmap()}
	if isIP {
		if err := g.Check(a); err != nil {
			return nil, err
		}
	} else if ips, err = g.resolve(ctx, lookup, host); err != nil {
		return nil, err
	}
	var firstErr error
	for _, ip := range ips {
		if (network == "tcp4" && !ip.Is4()) || (network == "tcp6" && !ip.Is6()) {
			continue
		}
		conn, err := g.dialer.DialContext(ctx, network, netip.AddrPortFrom(ip, port).String())
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if firstErr == nil {
		firstErr = &net.AddrError{Err: "no suitable address for " + network, Addr: host}
	}
	return nil, firstErr
}

// control is the dialer's Control hook: the last check, on the address the
// socket is about to connect to.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBlocked, err)
	}
	return g.Check(ap.Addr())
}

// Client returns a new *http.Client that shares the guard's transport
// (dialing through DialContext, with no proxy), re-checks every redirect
// target with CheckURL, stops after MaxRedirects redirects and bounds each
// request by Timeout.
func (g *Guard) Client() *http.Client {
	return &http.Client{
		Transport:     g.transport,
		CheckRedirect: g.checkRedirect,
		Timeout:       g.timeout,
	}
}

func (g *Guard) checkRedirect(req *http.Request, via []*http.Request) error {
	if g.maxRedirects < 0 {
		return http.ErrUseLastResponse
	}
	if len(via) > g.maxRedirects {
		return fmt.Errorf("netguard: stopped after %d redirects", g.maxRedirects)
	}
	_, err := g.CheckURL(req.Context(), req.URL.String())
	return err
}

// resolve looks host up and returns its addresses (IPv4-mapped answers
// unmapped) when every one passes Check.
func (g *Guard) resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	ips, err := g.resolver.LookupNetIP(ctx, network, host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	ips = slices.Clone(ips)
	for i, ip := range ips {
		ips[i] = ip.Unmap()
		if why := g.reason(ips[i]); why != "" {
			return nil, blocked("host %q resolves to %s (%s)", host, ips[i], why)
		}
	}
	return ips, nil
}

// parseHost classifies host (without brackets) as an IP literal (isIP) or
// a host name to resolve. It refuses numeric spellings other than canonical
// IP literals, and names that are not plain ASCII host names.
func parseHost(host string) (a netip.Addr, isIP bool, err error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, true, nil
	}
	if len(host) > 253 {
		return a, false, blocked("host name too long")
	}
	name := strings.TrimSuffix(host, ".")
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || strings.IndexFunc(label, notHostChar) >= 0 {
			return a, false, blocked("invalid host name %q", host)
		}
	}
	if numeric(name[strings.LastIndexByte(name, '.')+1:]) {
		// What inet_aton and WHATWG URL parsers read as IPv4: "2130706433",
		// "0x7f.1", "0177.0.0.1", "127.1", "127.0.0.1.".
		return a, false, blocked("non-canonical numeric host %q", host)
	}
	return a, false, nil
}

func notHostChar(r rune) bool {
	return !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", r)
}

// numeric reports whether label is decimal, octal or 0x-hexadecimal
// digits, as a final label that makes a parser read the host as IPv4.
func numeric(label string) bool {
	digits := "0123456789"
	if len(label) >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X') {
		label, digits = label[2:], "0123456789abcdefABCDEF"
		if label == "" {
			return true
		}
	}
	return label != "" && strings.Trim(label, digits) == ""
}

func parsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 {
		return 0, blocked("invalid port %q", s)
	}
	return uint16(p), nil
}
