package feishu

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/personakit/persona/clock"
)

// Platform is the platform id of the adapter: Channel.Name and
// Event.Platform.
const Platform = "feishu"

// The Open Platform hosts: Feishu (mainland China) and Lark (the
// international edition). Both serve the same API under /open-apis.
const (
	FeishuBaseURL = "https://open.feishu.cn"
	LarkBaseURL   = "https://open.larksuite.com"
)

// Defaults and limits.
const (
	// DefaultCallTimeout is the deadline of every Open API call.
	DefaultCallTimeout = 10 * time.Second
	// DefaultRetryMin and DefaultRetryMax bound the reconnect and retry
	// backoff: 1 s doubling to 60 s, each delay with ±20 % jitter.
	DefaultRetryMin = time.Second
	DefaultRetryMax = 60 * time.Second
	// DefaultReplayWindow is how far the X-Lark-Request-Timestamp of a
	// signed callback may be from the adapter's clock, either way.
	DefaultReplayWindow = 5 * time.Minute
	// DefaultMaxBodyBytes bounds a callback body and a reassembled
	// long-connection event.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultOfflineAfter is the number of consecutive failed health
	// probes (webhook mode) after which the channel reports offline.
	DefaultOfflineAfter = 3
	// DefaultHealthInterval is how often webhook mode probes the Open
	// API (bot info) while healthy.
	DefaultHealthInterval = time.Minute
	// DefaultPingInterval is the long connection's ping interval until
	// the server's ClientConfig says otherwise (the SDKs' default).
	DefaultPingInterval = 2 * time.Minute
	// MaxTextRunes is the declared text limit of one message (well under the
	// platform's 150 KB body cap).
	MaxTextRunes = 4000
	// MaxUUIDLength is the longest send uuid the Open API accepts.
	MaxUUIDLength = 50
)

// Callback request headers.
const (
	HeaderRequestTimestamp = "X-Lark-Request-Timestamp"
	HeaderRequestNonce     = "X-Lark-Request-Nonce"
	HeaderSignature        = "X-Lark-Signature"
)

// Mode selects how events arrive.
type Mode string

// The modes.
const (
	// ModeWebhook (the default) receives event callbacks on the Channel's
	// http.Handler at the request URL configured in the developer console.
	ModeWebhook Mode = "webhook"
	// ModeWebSocket opens the long connection (长连接): no public address
	// is needed; self-built apps only.
	ModeWebSocket Mode = "ws"
)

// Config configures a Channel. Zero fields take the documented defaults.
type Config struct {
	// AppID and AppSecret are the app's credentials from the developer
	// console (Credentials & Basic Info). Required. The secret, and the
	// tenant access token obtained with it, are never logged and never
	// appear in errors.
	AppID     string
	AppSecret string // never logged, never in errors
	// BaseURL is the Open Platform host: FeishuBaseURL (default),
	// LarkBaseURL, or a fake's URL in tests.
	BaseURL string
	// Mode is ModeWebhook (default) or ModeWebSocket.
	Mode Mode
	// VerificationToken is the Verification Token of the app's event
	// subscription (Events & Callbacks → Encryption Strategy). Webhook
	// mode requires it: every callback must carry it.
	VerificationToken string
	// EncryptKey is the Encrypt Key of the event subscription. When set,
	// callbacks must be encrypted and signed (X-Lark-Signature within
	// ReplayWindow); recommended for webhook mode.
	EncryptKey string
	// ReplayWindow bounds the age (and the clock skew) of a signed
	// callback's timestamp (default 5 min).
	ReplayWindow time.Duration
	// MaxBodyBytes bounds a callback body and a reassembled event
	// (default 1 MiB).
	MaxBodyBytes int64
	// HTTPClient makes the Open API calls (default: a client of its own
	// with no overall timeout; every call has CallTimeout).
	HTTPClient *http.Client
	// CallTimeout is the deadline of each Open API call (default 10 s).
	CallTimeout time.Duration
	// RetryMin and RetryMax bound the backoff of reconnects and startup
	// retries (defaults 1 s and 60 s; doubling, ±20 % jitter).
	RetryMin, RetryMax time.Duration
	// OfflineAfter is how many consecutive failed health probes make
	// webhook mode report offline (default 3).
	OfflineAfter int
	// HealthInterval is the health probe interval of webhook mode
	// (default 1 min).
	HealthInterval time.Duration
	// PingInterval is the long connection's ping interval before the
	// server sends its own (default 2 min).
	PingInterval time.Duration
	// Clock drives every backoff, ping, probe and the replay window (nil =
	// wall clock).
	Clock clock.Clock
	// Logger receives operational log lines (nil = discard).
	Logger *slog.Logger
}

// withDefaults validates cfg and fills in the defaults. Errors never
// contain the secret.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	cfg.AppID = strings.TrimSpace(cfg.AppID)
	if cfg.AppID == "" {
		bad("AppID is required")
	} else if strings.ContainsAny(cfg.AppID, " \t\r\n/?#%:") {
		bad("AppID %q is malformed (want the cli_… id from the developer console)", cfg.AppID)
	}
	if cfg.AppSecret == "" {
		bad("AppSecret is required")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = FeishuBaseURL
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("BaseURL %q is not an http(s) URL", cfg.BaseURL)
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = ModeWebhook
	case ModeWebhook, ModeWebSocket:
	default:
		bad("Mode %q is neither %q nor %q", cfg.Mode, ModeWebhook, ModeWebSocket)
	}
	if cfg.Mode == ModeWebhook && cfg.VerificationToken == "" {
		bad("VerificationToken is required in webhook mode")
	}
	positive := func(name string, d *time.Duration, def time.Duration) {
		switch {
		case *d == 0:
			*d = def
		case *d < 0:
			bad("%s is negative", name)
		}
	}
	positive("ReplayWindow", &cfg.ReplayWindow, DefaultReplayWindow)
	positive("CallTimeout", &cfg.CallTimeout, DefaultCallTimeout)
	positive("RetryMin", &cfg.RetryMin, DefaultRetryMin)
	positive("RetryMax", &cfg.RetryMax, DefaultRetryMax)
	positive("HealthInterval", &cfg.HealthInterval, DefaultHealthInterval)
	positive("PingInterval", &cfg.PingInterval, DefaultPingInterval)
	if cfg.RetryMax < cfg.RetryMin {
		bad("RetryMax (%s) is shorter than RetryMin (%s)", cfg.RetryMax, cfg.RetryMin)
	}
	switch {
	case cfg.MaxBodyBytes == 0:
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	case cfg.MaxBodyBytes < 0:
		bad("MaxBodyBytes is negative")
	}
	switch {
	case cfg.OfflineAfter == 0:
		cfg.OfflineAfter = DefaultOfflineAfter
	case cfg.OfflineAfter < 0:
		bad("OfflineAfter is negative")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("feishu: invalid config: %w", err)
	}
	return cfg, nil
}
