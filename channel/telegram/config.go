package telegram

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/personakit/persona/clock"
)

// Platform is the platform id of the adapter: Channel.Name and
// Event.Platform.
const Platform = "telegram"

// Defaults of Config.
const (
	// DefaultAPIBase is the official Bot API server.
	DefaultAPIBase = "https://api.telegram.org"
	// DefaultPollTimeout is the getUpdates long-poll timeout.
	DefaultPollTimeout = 30 * time.Second
	// DefaultCallTimeout is the deadline of every Bot API call (10 s); a
	// long poll gets PollTimeout on top.
	DefaultCallTimeout = 10 * time.Second
	// DefaultRetryMin and DefaultRetryMax bound the reconnect and NACK
	// backoff: 1 s doubling to 60 s, each delay with ±20 % jitter.
	DefaultRetryMin = time.Second
	DefaultRetryMax = 60 * time.Second
	// DefaultOfflineAfter is the number of consecutive failed polls or
	// health probes after which the channel reports itself offline.
	DefaultOfflineAfter = 3
	// DefaultHealthInterval is how often webhook mode probes the Bot API
	// with getMe while healthy.
	DefaultHealthInterval = time.Minute
	// DefaultWebhookPath is where the webhook server started for
	// WebhookConfig.Addr serves the handler.
	DefaultWebhookPath = "/"
	// DefaultMaxBodyBytes bounds a webhook request body.
	DefaultMaxBodyBytes = 1 << 20
	// MaxTextUTF16 is the Bot API text limit, in UTF-16 code units.
	MaxTextUTF16 = 4096
	// MaxCaptionUTF16 is the Bot API caption limit, in UTF-16 code units.
	MaxCaptionUTF16 = 1024
	// SecretTokenHeader carries the webhook secret on every update Telegram
	// posts.
	SecretTokenHeader = "X-Telegram-Bot-Api-Secret-Token"
)

// DefaultAllowedUpdates are the update types requested when
// Config.AllowedUpdates is nil.
var DefaultAllowedUpdates = []string{"message", "edited_message"}

// Mode selects how updates arrive.
type Mode string

// The modes.
const (
	// ModePolling (the default) long-polls getUpdates and persists the
	// offset through the OffsetStore after every durable enqueue.
	ModePolling Mode = "polling"
	// ModeWebhook receives updates on the Channel's http.Handler; Telegram
	// retries every update the handler does not answer with 200.
	ModeWebhook Mode = "webhook"
)

// Config configures a Channel. Zero fields take the documented defaults.
type Config struct {
	// Token is the bot token from @BotFather ("123456:ABC-..."). Required.
	// It is never logged and never appears in errors.
	Token string
	// APIBase is the Bot API server (default DefaultAPIBase). Point it at a
	// self-hosted telegram-bot-api server or at telegramtest.Server.URL.
	APIBase string
	// HTTPClient makes the Bot API calls (default: a client without an
	// overall timeout; every call has its own deadline, see CallTimeout).
	HTTPClient *http.Client
	// Mode is ModePolling (default) or ModeWebhook.
	Mode Mode
	// PollTimeout is the getUpdates long-poll timeout (default 30 s). It is
	// sent in whole seconds; values under a second become one second.
	PollTimeout time.Duration
	// AllowedUpdates is sent as allowed_updates (getUpdates and
	// setWebhook); nil means DefaultAllowedUpdates.
	AllowedUpdates []string
	// CallTimeout is the deadline of each Bot API call (default 10 s).
	CallTimeout time.Duration
	// RetryMin and RetryMax bound the backoff after failed polls, probes
	// and NACKs (defaults 1 s and 60 s; doubling, ±20 % jitter).
	RetryMin, RetryMax time.Duration
	// OfflineAfter is how many consecutive failed polls (or webhook health
	// probes) make the channel report offline (default 3).
	OfflineAfter int
	// HealthInterval is the getMe probe interval in webhook mode while
	// healthy (default 1 min).
	HealthInterval time.Duration
	// Clock drives every backoff and probe timer (nil = wall clock).
	Clock clock.Clock
	// Logger receives operational log lines (nil = discard).
	Logger *slog.Logger
	// OffsetStore persists the getUpdates offset. When nil, a
	// FileOffsetStore in StateDir is used if StateDir is set, else an
	// in-memory store (Telegram still keeps unconfirmed updates on its
	// side, so nothing is lost, but a restart re-reads recent ones).
	OffsetStore OffsetStore
	// StateDir is the directory of the default FileOffsetStore; created if
	// missing. Ignored when OffsetStore is set.
	StateDir string
	// Webhook configures ModeWebhook; ignored in polling mode.
	Webhook WebhookConfig
}

// WebhookConfig configures webhook mode.
type WebhookConfig struct {
	// SecretToken is the setWebhook secret_token: 1–256 characters from
	// A-Z, a-z, 0-9, _ and -. Required in webhook mode; every request
	// without the matching SecretTokenHeader is answered 401.
	SecretToken string
	// URL is the public HTTPS URL Telegram posts to. When set, Run calls
	// setWebhook with it, the secret and AllowedUpdates; when empty the
	// webhook is assumed to be registered already.
	URL string
	// Addr, when set, makes Run listen on it (e.g. ":8443" or
	// "127.0.0.1:0") and serve the handler at Path. When empty, mount the
	// Channel (an http.Handler) on your own server.
	Addr string
	// Path is the path served on Addr (default "/").
	Path string
	// MaxBodyBytes bounds a request body (default 1 MiB); larger bodies get
	// 413.
	MaxBodyBytes int64
	// MaxConnections is setWebhook's max_connections (0 = Telegram's
	// default of 40).
	MaxConnections int
}

// withDefaults validates cfg and fills in the defaults. Errors never
// contain the token.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	switch {
	case cfg.Token == "":
		bad("Token is required")
	case strings.ContainsAny(cfg.Token, " \t\r\n/?#%"), !strings.Contains(cfg.Token, ":"):
		bad("Token is malformed (want <bot id>:<secret> as issued by @BotFather)")
	}

	if cfg.APIBase == "" {
		cfg.APIBase = DefaultAPIBase
	}
	cfg.APIBase = strings.TrimRight(cfg.APIBase, "/")
	if u, err := url.Parse(cfg.APIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		bad("APIBase %q is not an absolute http(s) URL without query", cfg.APIBase)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}

	switch cfg.Mode {
	case "":
		cfg.Mode = ModePolling
	case ModePolling, ModeWebhook:
	default:
		bad("Mode %q is neither %q nor %q", cfg.Mode, ModePolling, ModeWebhook)
	}

	durations := []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"PollTimeout", &cfg.PollTimeout, DefaultPollTimeout},
		{"CallTimeout", &cfg.CallTimeout, DefaultCallTimeout},
		{"RetryMin", &cfg.RetryMin, DefaultRetryMin},
		{"RetryMax", &cfg.RetryMax, DefaultRetryMax},
		{"HealthInterval", &cfg.HealthInterval, DefaultHealthInterval},
	}
	for _, d := range durations {
		switch {
		case *d.p < 0:
			bad("%s is negative (%s)", d.name, *d.p)
		case *d.p == 0:
			*d.p = d.def
		}
	}
	if cfg.PollTimeout < time.Second {
		cfg.PollTimeout = time.Second
	}
	if cfg.RetryMax < cfg.RetryMin {
		bad("RetryMax (%s) is below RetryMin (%s)", cfg.RetryMax, cfg.RetryMin)
	}
	switch {
	case cfg.OfflineAfter < 0:
		bad("OfflineAfter is negative (%d)", cfg.OfflineAfter)
	case cfg.OfflineAfter == 0:
		cfg.OfflineAfter = DefaultOfflineAfter
	}
	if cfg.AllowedUpdates == nil {
		cfg.AllowedUpdates = DefaultAllowedUpdates
	}
	cfg.AllowedUpdates = slices.Clone(cfg.AllowedUpdates) // keeps [] (all types) distinct from nil
	cfg.Clock = clock.OrReal(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}

	if cfg.Mode == ModeWebhook {
		w := &cfg.Webhook
		if err := validSecret(w.SecretToken); err != nil {
			bad("Webhook.SecretToken: %w", err)
		}
		if w.URL != "" {
			if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("Webhook.URL %q is not an absolute http(s) URL", w.URL)
			}
		}
		if w.Path == "" {
			w.Path = DefaultWebhookPath
		}
		if !strings.HasPrefix(w.Path, "/") {
			bad("Webhook.Path %q does not start with '/'", w.Path)
		}
		switch {
		case w.MaxBodyBytes < 0:
			bad("Webhook.MaxBodyBytes is negative (%d)", w.MaxBodyBytes)
		case w.MaxBodyBytes == 0:
			w.MaxBodyBytes = DefaultMaxBodyBytes
		}
		if w.MaxConnections < 0 || w.MaxConnections > 100 {
			bad("Webhook.MaxConnections %d is outside 0–100", w.MaxConnections)
		}
	}

	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("telegram: invalid config: %w", err)
	}
	return cfg, nil
}

// validSecret checks the setWebhook secret_token rules.
func validSecret(s string) error {
	if s == "" {
		return errors.New("required in webhook mode")
	}
	if len(s) > 256 {
		return fmt.Errorf("%d characters, at most 256 allowed", len(s))
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
		if !ok {
			return errors.New("contains a character outside A-Z, a-z, 0-9, _ and -")
		}
	}
	return nil
}
