package onebot

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/clock"
)

// Mode is the OneBot transport the adapter uses.
type Mode string

// The transports of OneBot v11.
const (
	// ModeReverseWS: the implementation dials us; we serve a WebSocket
	// endpoint and accept one Universal client per bot account. The default.
	ModeReverseWS Mode = "reverse-ws"
	// ModeForwardWS: we dial the implementation's WebSocket server (the
	// universal endpoint "/") and reconnect with backoff.
	ModeForwardWS Mode = "forward-ws"
	// ModeHTTP: we call the implementation's HTTP API and receive events as
	// HTTP POSTs (signed with X-Signature when a secret is set).
	ModeHTTP Mode = "http"
)

// MessageFormat is how outgoing messages are written.
type MessageFormat string

// The two message formats of OneBot v11.
const (
	// FormatArray sends messages as segment arrays (the default).
	FormatArray MessageFormat = "array"
	// FormatString sends messages as CQ-code strings.
	FormatString MessageFormat = "string"
)

// Dialect selects the parameters of the history actions
// get_group_msg_history and get_friend_msg_history, which are extensions
// whose parameters differ between implementations.
type Dialect string

// The history dialects.
const (
	// DialectNapCat (NapCat, LLOneBot; the default): {group_id | user_id,
	// message_seq (0 = latest; the anchor is included), count,
	// reverseOrder: false}.
	DialectNapCat Dialect = "napcat"
	// DialectGoCQHTTP (go-cqhttp): {group_id, message_seq (omitted =
	// latest)}; pages of 19 messages ending at message_seq. go-cqhttp has no
	// get_friend_msg_history, so private history answers 1404.
	DialectGoCQHTTP Dialect = "gocqhttp"
	// DialectLagrange (Lagrange.OneBot): {group_id | user_id, message_id
	// (omitted = latest; the anchor is included), count}.
	DialectLagrange Dialect = "lagrange"
)

// Defaults of Config.
const (
	DefaultPlatform       = "onebot"
	DefaultCallTimeout    = 10 * time.Second
	DefaultHistoryTimeout = 15 * time.Second
	DefaultReadLimit      = 16 << 20
	DefaultBackoffMin     = time.Second
	DefaultBackoffMax     = 60 * time.Second
	DefaultGroupListTTL   = time.Minute
	// TextLimitRunes is the declared text limit per outgoing message
	// (the protocol sets no limit; this one is sized for account safety).
	TextLimitRunes = 900
)

// Config configures a Channel. The zero value is a reverse-WebSocket
// adapter that must be mounted as an http.Handler (no Addr or Listener),
// with no access token.
type Config struct {
	// Mode is the transport (default ModeReverseWS).
	Mode Mode
	// Addr is the address Run listens on for the reverse WebSocket
	// (ModeReverseWS) or the HTTP POST event receiver (ModeHTTP), for
	// example "127.0.0.1:8080". Empty: Run does not listen; mount the
	// Channel (an http.Handler) on a server of your own. Not used by
	// ModeForwardWS.
	Addr string
	// Listener, when set, is used instead of Addr and closed by Run when it
	// returns, so such a Channel runs once. Handy for tests: listen on
	// 127.0.0.1:0 first.
	Listener net.Listener
	// URL is the implementation's address: for ModeForwardWS its WebSocket
	// URL (ws:// or wss://, universal endpoint, e.g. "ws://127.0.0.1:3001/"),
	// for ModeHTTP the base URL of its HTTP API (http:// or https://, e.g.
	// "http://127.0.0.1:5700"). Required for those modes, unused otherwise.
	URL string
	// AccessToken is the OneBot access_token. We send it as
	// "Authorization: Bearer <token>" when we call the implementation and
	// require it from the implementation on the reverse WebSocket. Empty:
	// no token.
	AccessToken string
	// Secret is the HTTP POST secret (ModeHTTP): every event must carry
	// "X-Signature: sha1=<hex HMAC-SHA1(secret, body)>". Empty: signatures
	// are not checked. Setting it in another mode is an error.
	Secret string
	// SelfID is the bot's QQ number. Empty: learned from the connection
	// (X-Self-ID, get_login_info). When set, a connection or event from
	// another account is refused.
	SelfID string
	// Platform is the platform id returned by Name and stamped on events
	// (default "onebot"). It may not contain ':'.
	Platform string
	// MessageFormat is the format of outgoing messages (default
	// FormatArray). Incoming messages are read in either format.
	MessageFormat MessageFormat
	// HistoryDialect selects the history-action parameters (default
	// DialectNapCat).
	HistoryDialect Dialect
	// CallTimeout bounds every API call (default 10 s).
	CallTimeout time.Duration
	// HistoryTimeout bounds history calls (default 15 s).
	HistoryTimeout time.Duration
	// ReadLimit is the largest WebSocket frame or HTTP POST body accepted,
	// in bytes (default 16 MiB). A larger WebSocket frame closes the
	// connection (status 1009); a larger POST body is answered 413.
	ReadLimit int64
	// BackoffMin is the first delay of the reconnect backoff of
	// ModeForwardWS, of the bootstrap retries of ModeHTTP and of the
	// retries of an event the sink refused; it doubles per attempt up to
	// BackoffMax, with ±20 % jitter (default 1 s).
	BackoffMin time.Duration
	// BackoffMax caps the backoff delay before jitter (default 60 s).
	BackoffMax time.Duration
	// GroupListTTL is how long the cached group list (used to tell "kicked"
	// from other send failures) is trusted before a send failure refreshes
	// it (default 1 min).
	GroupListTTL time.Duration
	// MediaRoot is a directory the adapter may read media from when the
	// implementation answers get_image, get_record or get_file with a
	// local path (its own cache directory, shared with this machine or
	// mounted at the same path). Only regular files whose real path (after
	// resolving symlinks) lies inside MediaRoot are read. Empty: local paths
	// are never read, and such media is channel.ErrMediaUnavailable. It
	// must be an absolute path.
	MediaRoot string
	// HTTPClient makes the HTTP API calls (ModeHTTP) and the WebSocket
	// handshake (ModeForwardWS); nil uses a client with no overall timeout
	// (per-call deadlines apply).
	HTTPClient *http.Client
	// Logger receives the adapter's log lines; nil discards them.
	Logger *slog.Logger
	// Clock drives call timeouts, backoff and heartbeat watchdogs; nil is
	// the wall clock.
	Clock clock.Clock
}

// withDefaults validates cfg and fills in its defaults.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if cfg.Mode == "" {
		cfg.Mode = ModeReverseWS
	}
	if cfg.Platform == "" {
		cfg.Platform = DefaultPlatform
	}
	if strings.Contains(cfg.Platform, ":") {
		bad("Platform %q may not contain ':'", cfg.Platform)
	}
	if cfg.MessageFormat == "" {
		cfg.MessageFormat = FormatArray
	}
	if cfg.HistoryDialect == "" {
		cfg.HistoryDialect = DialectNapCat
	}
	switch cfg.MessageFormat {
	case FormatArray, FormatString:
	default:
		bad("MessageFormat %q is neither %q nor %q", cfg.MessageFormat, FormatArray, FormatString)
	}
	switch cfg.HistoryDialect {
	case DialectNapCat, DialectGoCQHTTP, DialectLagrange:
	default:
		bad("HistoryDialect %q is not one of %q, %q, %q", cfg.HistoryDialect, DialectNapCat, DialectGoCQHTTP, DialectLagrange)
	}
	if cfg.SelfID != "" {
		if n, err := strconv.ParseInt(cfg.SelfID, 10, 64); err != nil || n <= 0 {
			bad("SelfID %q is not a positive QQ number", cfg.SelfID)
		} else {
			cfg.SelfID = strconv.FormatInt(n, 10) // as events give it
		}
	}
	if cfg.MediaRoot != "" {
		if !filepath.IsAbs(cfg.MediaRoot) {
			bad("MediaRoot %q is not an absolute path", cfg.MediaRoot)
		}
		cfg.MediaRoot = filepath.Clean(cfg.MediaRoot)
	}
	if cfg.Addr != "" && cfg.Listener != nil {
		bad("set Addr or Listener, not both")
	}
	switch cfg.Mode {
	case ModeReverseWS:
		if cfg.URL != "" {
			bad("URL is not used by %s (the implementation dials us; set Addr or Listener)", cfg.Mode)
		}
		if cfg.Secret != "" {
			bad("Secret is only used by %s (HTTP POST signatures)", ModeHTTP)
		}
	case ModeForwardWS:
		if cfg.Addr != "" || cfg.Listener != nil {
			bad("%s dials URL; Addr and Listener are not used", cfg.Mode)
		}
		if cfg.Secret != "" {
			bad("Secret is only used by %s (HTTP POST signatures)", ModeHTTP)
		}
		checkURL(&errs, cfg.URL, "ws", "wss")
	case ModeHTTP:
		checkURL(&errs, cfg.URL, "http", "https")
	default:
		bad("Mode %q is not one of %q, %q, %q", cfg.Mode, ModeReverseWS, ModeForwardWS, ModeHTTP)
	}
	durations := []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"CallTimeout", &cfg.CallTimeout, DefaultCallTimeout},
		{"HistoryTimeout", &cfg.HistoryTimeout, DefaultHistoryTimeout},
		{"BackoffMin", &cfg.BackoffMin, DefaultBackoffMin},
		{"BackoffMax", &cfg.BackoffMax, DefaultBackoffMax},
		{"GroupListTTL", &cfg.GroupListTTL, DefaultGroupListTTL},
	}
	for _, d := range durations {
		switch {
		case *d.p < 0:
			bad("%s is negative (%s)", d.name, *d.p)
		case *d.p == 0:
			*d.p = d.def
		}
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		bad("BackoffMax %s is below BackoffMin %s", cfg.BackoffMax, cfg.BackoffMin)
	}
	switch {
	case cfg.ReadLimit < 0:
		bad("ReadLimit is negative (%d)", cfg.ReadLimit)
	case cfg.ReadLimit == 0:
		cfg.ReadLimit = DefaultReadLimit
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("onebot: invalid config: %w", err)
	}
	return cfg, nil
}

func checkURL(errs *[]error, raw string, schemes ...string) {
	if raw == "" {
		*errs = append(*errs, fmt.Errorf("URL is required (%s://host:port)", schemes[0]))
		return
	}
	u, err := url.Parse(raw)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("URL %q: %w", raw, err))
		return
	}
	for _, s := range schemes {
		if u.Scheme == s && u.Host != "" {
			return
		}
	}
	*errs = append(*errs, fmt.Errorf("URL %q: want a %s URL with a host", raw, strings.Join(schemes, " or ")))
}
