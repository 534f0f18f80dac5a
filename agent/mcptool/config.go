package mcptool

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/personakit/persona/clock"
)

// Defaults used when a [Server] or [Options] field is zero.
const (
	DefaultCallTimeout  = 60 * time.Second
	DefaultStartTimeout = 10 * time.Second
	DefaultBackoffMin   = time.Second
	DefaultBackoffMax   = 60 * time.Second
)

// MaxResultRunes caps the text of one tool result; longer text is cut and
// ends with a truncation marker.
const MaxResultRunes = 20000

// ErrConfig is wrapped by every configuration error of [Open].
var ErrConfig = errors.New("mcptool: invalid server config")

// Server configures one MCP server whose tools become agent tools. Exactly
// one of Command (a local process spoken to over stdin/stdout) or URL (a
// streamable HTTP endpoint) must be set.
type Server struct {
	// Name identifies the server and prefixes its tools' names
	// ("<Name>_<tool>"): a letter, then up to 31 letters, digits, '_' or
	// '-'.
	Name string
	// Command is the executable of a stdio server (looked up in PATH when
	// it has no slash).
	Command string
	// Args are the command's arguments.
	Args []string
	// Env adds KEY=VALUE entries to the command's environment. The process
	// inherits only a few variables of ours (PATH, HOME, USER, LOGNAME,
	// SHELL, TERM, LANG, LC_ALL, LC_CTYPE, TMPDIR, TZ) so that secrets in
	// our environment do not leak to third-party servers; pass anything
	// else it needs here.
	Env []string
	// Dir is the command's working directory (default: ours).
	Dir string
	// URL is the endpoint of a streamable HTTP server (http or https).
	URL string
	// Headers are sent with every HTTP request (e.g. Authorization).
	Headers map[string]string
	// Tiers restricts the server's tools to callers holding one of these
	// permission tiers (see agent.Tiers); empty means everyone.
	Tiers []string
	// CallTimeout bounds one tool call (default 60 s).
	CallTimeout time.Duration
	// StartTimeout bounds connecting: starting the process or reaching the
	// URL, the MCP handshake and listing the tools (default 10 s).
	StartTimeout time.Duration
	// Include, when set, is the allowlist of the server's tool names (as
	// the server spells them) to offer; other tools are ignored.
	Include []string
}

// Options configures [Open].
type Options struct {
	// Logger receives connection events and the stderr lines of stdio
	// servers (default: slog.Default()).
	Logger *slog.Logger
	// Clock times call and start timeouts and reconnect backoff (default
	// clock.Real). Stopping a process uses the wall clock either way.
	Clock clock.Clock
	// BackoffMin and BackoffMax bound the delay between reconnect attempts
	// (defaults 1 s and 60 s); the delay doubles after every failure.
	BackoffMin, BackoffMax time.Duration
	// Lenient makes Open succeed even when some servers fail to start: each
	// failure is logged and retried in the background, and the server's
	// tools are registered once it is up. Without it, Open fails when any
	// server fails.
	Lenient bool
	// ClientName is the client name sent in the MCP handshake (default
	// "persona").
	ClientName string
}

var serverNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,31}$`)

var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// withDefaults validates s and fills in its defaults.
func (s Server) withDefaults() (Server, error) {
	bad := func(format string, args ...any) (Server, error) {
		prefix := "server"
		if s.Name != "" {
			prefix = fmt.Sprintf("server %q", s.Name)
		}
		return Server{}, fmt.Errorf("%w: %s: %s", ErrConfig, prefix, fmt.Sprintf(format, args...))
	}
	if !serverNameRE.MatchString(s.Name) {
		return bad("name %q must be a letter followed by up to 31 letters, digits, '_' or '-'", s.Name)
	}
	hasCmd, hasURL := strings.TrimSpace(s.Command) != "", strings.TrimSpace(s.URL) != ""
	switch {
	case hasCmd && hasURL:
		return bad("set either Command (stdio) or URL (HTTP), not both")
	case !hasCmd && !hasURL:
		return bad("set Command (stdio) or URL (HTTP)")
	}
	if hasCmd {
		if len(s.Headers) > 0 {
			return bad("Headers apply to URL servers only")
		}
		for _, kv := range s.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
				return bad("Env entry %q is not KEY=VALUE", kv)
			}
		}
	}
	if hasURL {
		if len(s.Args) > 0 || len(s.Env) > 0 || s.Dir != "" {
			return bad("Args, Env and Dir apply to Command servers only")
		}
		u, err := url.Parse(s.URL)
		if err != nil {
			return bad("URL: %v", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return bad("URL scheme %q is not http or https", u.Scheme)
		}
		if u.Host == "" {
			return bad("URL %q has no host", s.URL)
		}
		for k, v := range s.Headers {
			if !headerNameRE.MatchString(k) {
				return bad("header name %q is not valid", k)
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				return bad("header %s has a line break or NUL in its value", k)
			}
		}
	}
	if s.CallTimeout < 0 || s.StartTimeout < 0 {
		return bad("negative timeout")
	}
	if s.CallTimeout == 0 {
		s.CallTimeout = DefaultCallTimeout
	}
	if s.StartTimeout == 0 {
		s.StartTimeout = DefaultStartTimeout
	}
	for _, name := range s.Include {
		if name == "" {
			return bad("empty name in Include")
		}
	}
	for _, tier := range s.Tiers {
		if strings.TrimSpace(tier) == "" {
			return bad("empty tier")
		}
	}
	return s, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Clock = clock.OrReal(o.Clock)
	if o.BackoffMin < 0 || o.BackoffMax < 0 {
		return o, fmt.Errorf("%w: negative backoff", ErrConfig)
	}
	if o.BackoffMin == 0 {
		o.BackoffMin = DefaultBackoffMin
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.BackoffMax < o.BackoffMin {
		return o, fmt.Errorf("%w: BackoffMax %s is below BackoffMin %s", ErrConfig, o.BackoffMax, o.BackoffMin)
	}
	if o.ClientName == "" {
		o.ClientName = "persona"
	}
	return o, nil
}

// backoff is the delay before the next attempt after n consecutive
// failures: 0 for none, then BackoffMin doubling up to BackoffMax.
func (o Options) backoff(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := o.BackoffMin
	for i := 1; i < n && d < o.BackoffMax; i++ {
		d *= 2
	}
	return min(d, o.BackoffMax)
}
