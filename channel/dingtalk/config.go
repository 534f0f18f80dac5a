package dingtalk

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
const Platform = "dingtalk"

// BotMessageTopic is the Stream-mode topic of robot message callbacks, the
// only subscription the adapter registers.
const BotMessageTopic = "/v1.0/im/bot/messages/get"

// Defaults and platform limits.
const (
	// DefaultAPIBase is DingTalk's OpenAPI host: connections/open, the
	// access token, the robot send APIs and the file download API.
	DefaultAPIBase = "https://api.dingtalk.com"
	// DefaultWebhookBase is where DingTalk's session webhooks live
	// (https://oapi.dingtalk.com/robot/sendBySession?session=…).
	DefaultWebhookBase = "https://oapi.dingtalk.com"
	// DefaultCallTimeout is the deadline of every HTTP call and of the
	// WebSocket handshake (10 s).
	DefaultCallTimeout = 10 * time.Second
	// DefaultRetryMin and DefaultRetryMax bound the reconnect backoff and
	// the redelivery of refused events: 1 s doubling to 60 s, each delay
	// with ±20 % jitter.
	DefaultRetryMin = time.Second
	DefaultRetryMax = 60 * time.Second
	// DefaultKeepAlive is how often an open stream is probed with a
	// WebSocket ping; DefaultPongTimeout is how long the pong may take
	// before the connection is given up (the official SDK's 120 s and
	// 5 s).
	DefaultKeepAlive   = 120 * time.Second
	DefaultPongTimeout = 5 * time.Second
	// DefaultDrainTimeout bounds how long a connection the server
	// announced to close (a "disconnect" frame) is still read while its
	// successor is already serving; the server closes it after 10 s.
	DefaultDrainTimeout = 15 * time.Second
	// DefaultMaxFrameBytes is the largest stream frame decoded; larger
	// frames are read to their end, logged and dropped.
	DefaultMaxFrameBytes = 1 << 20
	// DefaultBacklog is how many received messages may wait for the
	// sink; beyond it new messages are refused (LATER) and logged.
	DefaultBacklog = 256
	// DefaultWebhookMargin: a session webhook is not used in the last
	// minute before its expiry (sessionWebhookExpiredTime); the robot
	// API is used instead.
	DefaultWebhookMargin = time.Minute
	// DefaultThrottleRetry is the RetryAfter of a throttling answer that
	// names no delay (the session webhook's "send too fast" errcode, a
	// flow-controlled user of a one-to-one send).
	DefaultThrottleRetry = time.Minute
	// DefaultTokenRefresh: the access token is fetched again when less
	// than this much of its lifetime is left (half the lifetime for a
	// token issued for less than twice as long).
	DefaultTokenRefresh = 5 * time.Minute
	// DefaultUserAgent is sent as "ua" when the stream connection is
	// opened.
	DefaultUserAgent = "persona-dingtalk/1.0"
)

// The platform's limits.
const (
	// MaxTextRunes is the adapter's declared text limit per outgoing
	// message (channel.TextLimiter), in runes.
	MaxTextRunes = 4000
	// MaxMessageBytes is the most UTF-8 bytes one message may carry on
	// the wire (the robot send limit); longer messages are refused before
	// any call.
	MaxMessageBytes = 20000
	// MaxAPIParamBytes is the most a robot API send's msgParam (the
	// message as JSON) may have; longer ones are refused before any
	// call.
	MaxAPIParamBytes = 15000
	// SendsPerMinute is DingTalk's documented limit of messages one robot
	// may send per minute (going over throttles the robot for a while).
	// The adapter does not count: the pipeline's lanes back off on the
	// *channel.RateLimitedError a throttled send returns.
	SendsPerMinute = 20
)

// Config configures a Channel. Zero fields take the documented defaults.
type Config struct {
	// ClientID is the app's Client ID (formerly AppKey; SuiteKey for a
	// third-party app). Required.
	ClientID string
	// ClientSecret is the app's Client Secret (formerly AppSecret).
	// Required. It is never logged and never appears in errors.
	ClientSecret string
	// RobotCode identifies the robot in the send and download APIs and
	// is the bot's id (Event.BotID). For an internal app's robot it is
	// the Client ID, which is the default.
	RobotCode string
	// APIBase is the OpenAPI host (default DefaultAPIBase). Point it at
	// dingtalktest.Server.URL in tests.
	APIBase string
	// WebhookBase is the scheme and host session webhooks must have; a
	// message carrying any other sessionWebhook has it ignored (and the
	// robot API is used to answer). Default: DefaultWebhookBase when
	// APIBase is the default, else APIBase (a fake or a proxy serving
	// both).
	WebhookBase string
	// HTTPClient makes every HTTP call and the WebSocket handshake
	// (default: a client with no overall timeout; every call has its own
	// deadline, see CallTimeout). Its Timeout must be zero.
	HTTPClient *http.Client
	// CallTimeout is the deadline of each HTTP call (default 10 s).
	CallTimeout time.Duration
	// RetryMin and RetryMax bound the reconnect backoff and the
	// redelivery of events the sink refused (defaults 1 s and 60 s;
	// doubling, ±20 % jitter, on Clock).
	RetryMin, RetryMax time.Duration
	// KeepAlive and PongTimeout drive the WebSocket ping of an open
	// stream (defaults 120 s and 5 s, on Clock).
	KeepAlive, PongTimeout time.Duration
	// DrainTimeout bounds the reading of a connection the server
	// announced to close (default 15 s, on Clock).
	DrainTimeout time.Duration
	// MaxFrameBytes bounds a decoded stream frame (default 1 MiB).
	MaxFrameBytes int64
	// Backlog is how many received messages may wait for the sink
	// (default 256).
	Backlog int
	// WebhookMargin is how long before its expiry a session webhook is
	// no longer used (default 1 min).
	WebhookMargin time.Duration
	// ThrottleRetry is the RetryAfter of a throttling answer without a
	// delay of its own (default 1 min).
	ThrottleRetry time.Duration
	// TokenRefresh is how long before its expiry the access token is
	// fetched again (default 5 min).
	TokenRefresh time.Duration
	// Markdown sends every message as a markdown message (DingTalk
	// renders headings, lists, bold and links); by default plain text is
	// sent, and markdown only for a reply that quotes a message (see
	// Channel.Send) or carries pictures.
	Markdown bool
	// PlainReplies sends replies without the quote of the message they
	// answer (Outgoing.ReplyTo is then not shown).
	PlainReplies bool
	// UserAgent is the "ua" sent to connections/open (default
	// DefaultUserAgent); LocalIP is the optional "localIp".
	UserAgent string
	LocalIP   string
	// Clock drives the backoff, keepalive, drain, webhook-expiry and
	// token-expiry timers (nil = wall clock).
	Clock clock.Clock
	// Logger receives operational log lines (nil = discard). Secrets
	// (the client secret, access tokens, connection tickets and session
	// webhook URLs) are never logged.
	Logger *slog.Logger
}

// withDefaults validates cfg and fills in the defaults. Errors never
// contain the client secret.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	cfg.ClientID = strings.TrimSpace(cfg.ClientID)
	switch {
	case cfg.ClientID == "":
		bad("ClientID is required (the app's Client ID / AppKey)")
	case strings.ContainsAny(cfg.ClientID, " \t\r\n\"\\/?#"):
		bad("ClientID %q contains a character an app key never has", cfg.ClientID)
	}
	switch {
	case cfg.ClientSecret == "":
		bad("ClientSecret is required (the app's Client Secret / AppSecret)")
	case strings.ContainsAny(cfg.ClientSecret, " \t\r\n"):
		bad("ClientSecret contains white space")
	}
	if cfg.RobotCode == "" {
		cfg.RobotCode = cfg.ClientID
	}
	if strings.ContainsAny(cfg.RobotCode, " \t\r\n:") {
		bad("RobotCode %q contains white space or ':' (it is the bot id of session keys)", cfg.RobotCode)
	}

	defaultAPI := cfg.APIBase == "" || strings.TrimRight(cfg.APIBase, "/") == DefaultAPIBase
	if cfg.APIBase == "" {
		cfg.APIBase = DefaultAPIBase
	}
	cfg.APIBase = strings.TrimRight(cfg.APIBase, "/")
	if !validBase(cfg.APIBase, true) {
		bad("APIBase %q is not an absolute http(s) URL without query", cfg.APIBase)
	}
	if cfg.WebhookBase == "" {
		if defaultAPI {
			cfg.WebhookBase = DefaultWebhookBase
		} else if u, err := url.Parse(cfg.APIBase); err == nil {
			cfg.WebhookBase = u.Scheme + "://" + u.Host
		}
	}
	cfg.WebhookBase = strings.TrimRight(cfg.WebhookBase, "/")
	if !validBase(cfg.WebhookBase, false) {
		bad("WebhookBase %q is not a scheme and host (https://oapi.dingtalk.com)", cfg.WebhookBase)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	} else if cfg.HTTPClient.Timeout != 0 {
		bad("HTTPClient has a Timeout; leave it zero (every call has its own deadline, and the stream connection outlives any timeout)")
	}

	durations := []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"CallTimeout", &cfg.CallTimeout, DefaultCallTimeout},
		{"RetryMin", &cfg.RetryMin, DefaultRetryMin},
		{"RetryMax", &cfg.RetryMax, DefaultRetryMax},
		{"KeepAlive", &cfg.KeepAlive, DefaultKeepAlive},
		{"PongTimeout", &cfg.PongTimeout, DefaultPongTimeout},
		{"DrainTimeout", &cfg.DrainTimeout, DefaultDrainTimeout},
		{"WebhookMargin", &cfg.WebhookMargin, DefaultWebhookMargin},
		{"ThrottleRetry", &cfg.ThrottleRetry, DefaultThrottleRetry},
		{"TokenRefresh", &cfg.TokenRefresh, DefaultTokenRefresh},
	}
	for _, d := range durations {
		switch {
		case *d.p < 0:
			bad("%s is negative (%s)", d.name, *d.p)
		case *d.p == 0:
			*d.p = d.def
		}
	}
	if cfg.RetryMax < cfg.RetryMin {
		bad("RetryMax (%s) is below RetryMin (%s)", cfg.RetryMax, cfg.RetryMin)
	}
	switch {
	case cfg.MaxFrameBytes < 0:
		bad("MaxFrameBytes is negative (%d)", cfg.MaxFrameBytes)
	case cfg.MaxFrameBytes == 0:
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	switch {
	case cfg.Backlog < 0:
		bad("Backlog is negative (%d)", cfg.Backlog)
	case cfg.Backlog == 0:
		cfg.Backlog = DefaultBacklog
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("dingtalk: invalid config: %w", err)
	}
	return cfg, nil
}

// validBase checks an http(s) base URL; with path false it must be only
// a scheme and a host.
func validBase(s string, path bool) bool {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return false
	}
	return path || u.Path == ""
}
