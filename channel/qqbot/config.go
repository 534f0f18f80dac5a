package qqbot

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
const Platform = "qq"

// Intent bits of the gateway's Identify (the docs'
// "事件订阅 Intents").
const (
	// IntentDirectMessage delivers DIRECT_MESSAGE_CREATE (guild direct
	// messages).
	IntentDirectMessage int64 = 1 << 12
	// IntentGroupAndC2C delivers GROUP_AT_MESSAGE_CREATE and
	// C2C_MESSAGE_CREATE (QQ groups and one-to-one chats).
	IntentGroupAndC2C int64 = 1 << 25
	// IntentPublicGuildMessages delivers AT_MESSAGE_CREATE (guild channel
	// messages that mention the bot).
	IntentPublicGuildMessages int64 = 1 << 30
)

// DefaultIntents are the intents Identify asks for when Config.Intents is
// zero: group and C2C messages, guild @-messages and guild direct
// messages. An intent the bot is not allowed closes the connection with
// 4014, which ends Run; narrow Config.Intents then.
const DefaultIntents = IntentGroupAndC2C | IntentPublicGuildMessages | IntentDirectMessage

// Defaults of Config.
const (
	// DefaultAPIBase is the OpenAPI server.
	DefaultAPIBase = "https://api.sgroup.qq.com"
	// SandboxAPIBase is the sandbox OpenAPI server.
	SandboxAPIBase = "https://sandbox.api.sgroup.qq.com"
	// DefaultTokenURL is the access-token endpoint.
	DefaultTokenURL = "https://bots.qq.com/app/getAppAccessToken"
	// DefaultCallTimeout is the deadline of every platform call (10 s).
	DefaultCallTimeout = 10 * time.Second
	// DefaultRetryMin and DefaultRetryMax bound the reconnect backoff:
	// 1 s doubling to 60 s, each delay with ±20 % jitter.
	DefaultRetryMin = time.Second
	DefaultRetryMax = 60 * time.Second
	// DefaultTokenRefreshBefore is how long before its expiry a cached
	// access token is replaced. The token endpoint hands out a new token
	// only in the last 60 s of the old one's life (the old one stays valid
	// for those 60 s), so the refresh falls inside that window.
	DefaultTokenRefreshBefore = 50 * time.Second
	// DefaultHealthInterval is how often webhook mode probes the OpenAPI
	// (GET /users/@me) while healthy.
	DefaultHealthInterval = time.Minute
	// DefaultOfflineAfter is the number of consecutive failed webhook
	// health probes after which the channel reports itself offline.
	DefaultOfflineAfter = 3
	// DefaultMaxBodyBytes bounds a webhook request body.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxFrameBytes bounds one gateway frame: a larger one is
	// acknowledged and dropped (logged); one over 16 times the bound ends
	// the connection (twice at the same sequence: the session too).
	DefaultMaxFrameBytes = 1 << 20
	// DefaultPrivateReplyWindow is how long a one-to-one (C2C) message can
	// be replied to (60 min).
	DefaultPrivateReplyWindow = 60 * time.Minute
	// DefaultGroupReplyWindow is how long a group, guild channel or guild
	// direct message can be replied to (5 min).
	DefaultGroupReplyWindow = 5 * time.Minute
	// DefaultMaxReplies is how many replies one group or C2C message
	// takes (5).
	DefaultMaxReplies = 5
	// MaxTextBytes is the text limit of one outgoing message, in UTF-8
	// bytes (a conservative choice: the platform publishes none).
	MaxTextBytes = 2000
)

// Mode selects how events arrive.
type Mode string

// The modes.
const (
	// ModeGateway (the default) connects to the WebSocket gateway and
	// resumes its session after a drop.
	ModeGateway Mode = "gateway"
	// ModeWebhook receives events on the Channel's http.Handler (the
	// callback URL set in the QQ bot console).
	ModeWebhook Mode = "webhook"
)

// Config configures a Channel. Zero fields take the documented defaults.
type Config struct {
	// AppID is the bot's AppID from the QQ bot console. Required; it is
	// also Event.BotID.
	AppID string
	// Secret is the bot's AppSecret. Required: it buys access tokens and
	// is the seed of the webhook's Ed25519 key. It is never logged and
	// never appears in errors, and neither is an access token.
	Secret string
	// Mode is ModeGateway (default) or ModeWebhook.
	Mode Mode
	// APIBase is the OpenAPI server (default DefaultAPIBase; SandboxAPIBase
	// for the sandbox; a qqbottest.Server's URL in tests).
	APIBase string
	// TokenURL is the access-token endpoint (default DefaultTokenURL).
	TokenURL string
	// HTTPClient makes every HTTP call and dials the gateway (default: a
	// client without an overall timeout; every call has CallTimeout).
	HTTPClient *http.Client
	// Intents are the gateway intents (default DefaultIntents).
	Intents int64
	// CallTimeout is the deadline of each platform call (default 10 s).
	CallTimeout time.Duration
	// RetryMin and RetryMax bound the reconnect and NACK backoff (defaults
	// 1 s and 60 s; doubling, ±20 % jitter, on Clock).
	RetryMin, RetryMax time.Duration
	// TokenRefreshBefore is how long before expiry a cached access token
	// is replaced (default 50 s).
	TokenRefreshBefore time.Duration
	// HealthInterval is the webhook-mode probe interval (default 1 min).
	HealthInterval time.Duration
	// OfflineAfter is how many consecutive failed webhook probes make the
	// channel report offline (default 3).
	OfflineAfter int
	// MaxBodyBytes bounds a webhook request body (default 1 MiB; larger
	// bodies get 413).
	MaxBodyBytes int64
	// MaxFrameBytes bounds a gateway frame (default 1 MiB): a larger one
	// is dropped with a warning, its dispatch acknowledged; one over 16
	// times the bound cannot be read and ends the connection, and when
	// that happens twice at the same resume sequence the adapter
	// identifies anew (a new session: what the old one had not delivered
	// is lost).
	MaxFrameBytes int64
	// Markdown sends text as markdown (msg_type 2, markdown.content)
	// instead of plain text (msg_type 0). The bot needs the markdown
	// permission for it.
	Markdown bool
	// ActiveMessages lets Send post an active (non-reply) message when no
	// inbound message of the chat can be replied to any more. The platform
	// stopped offering active messages on 2025-04-21 (it answers them with
	// 40034102); leave it off unless the bot still has them. Off, such a
	// send fails with a *channel.RejectedError naming the reason.
	ActiveMessages bool
	// PrivateReplyWindow, GroupReplyWindow and MaxReplies are the passive
	// reply rules: how long after an inbound message a reply may use it
	// (C2C 60 min; groups, guild channels and guild direct messages 5
	// min) and how many replies one group or C2C message takes (5).
	PrivateReplyWindow time.Duration
	GroupReplyWindow   time.Duration
	MaxReplies         int
	// StateDir keeps the gateway session (its id and the resume sequence)
	// and the reply ledger (recent inbound message ids and the msg_seq
	// given to each outgoing chunk) in a file, so a restart resumes the
	// session and never gives a msg_seq to a second chunk. Created if
	// missing. Empty: kept in memory only.
	StateDir string
	// Clock drives every backoff, heartbeat, token expiry and reply window
	// (nil = wall clock).
	Clock clock.Clock
	// Logger receives operational log lines (nil = discard).
	Logger *slog.Logger
}

// withDefaults validates cfg and fills in the defaults. Errors never
// contain the secret.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	switch {
	case cfg.AppID == "":
		bad("AppID is required")
	case !plainID(cfg.AppID):
		bad("AppID %q is not a plain identifier", cfg.AppID)
	}
	if cfg.Secret == "" {
		bad("Secret is required")
	} else if strings.ContainsAny(cfg.Secret, " \t\r\n") {
		bad("Secret contains white space")
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = ModeGateway
	case ModeGateway, ModeWebhook:
	default:
		bad("Mode %q is neither %q nor %q", cfg.Mode, ModeGateway, ModeWebhook)
	}
	if cfg.APIBase == "" {
		cfg.APIBase = DefaultAPIBase
	}
	cfg.APIBase = strings.TrimRight(cfg.APIBase, "/")
	if !httpURL(cfg.APIBase) {
		bad("APIBase %q is not an absolute http(s) URL without query", cfg.APIBase)
	}
	if cfg.TokenURL == "" {
		cfg.TokenURL = DefaultTokenURL
	}
	if !httpURL(cfg.TokenURL) {
		bad("TokenURL %q is not an absolute http(s) URL without query", cfg.TokenURL)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Intents == 0 {
		cfg.Intents = DefaultIntents
	}
	if cfg.Intents < 0 || cfg.Intents >= 1<<31 {
		bad("Intents %d is outside the 31 intent bits", cfg.Intents)
	}

	durations := []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"CallTimeout", &cfg.CallTimeout, DefaultCallTimeout},
		{"RetryMin", &cfg.RetryMin, DefaultRetryMin},
		{"RetryMax", &cfg.RetryMax, DefaultRetryMax},
		{"TokenRefreshBefore", &cfg.TokenRefreshBefore, DefaultTokenRefreshBefore},
		{"HealthInterval", &cfg.HealthInterval, DefaultHealthInterval},
		{"PrivateReplyWindow", &cfg.PrivateReplyWindow, DefaultPrivateReplyWindow},
		{"GroupReplyWindow", &cfg.GroupReplyWindow, DefaultGroupReplyWindow},
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
	ints := []struct {
		name string
		p    *int64
		def  int64
	}{
		{"MaxBodyBytes", &cfg.MaxBodyBytes, DefaultMaxBodyBytes},
		{"MaxFrameBytes", &cfg.MaxFrameBytes, DefaultMaxFrameBytes},
	}
	for _, n := range ints {
		switch {
		case *n.p < 0:
			bad("%s is negative (%d)", n.name, *n.p)
		case *n.p == 0:
			*n.p = n.def
		}
	}
	switch {
	case cfg.OfflineAfter < 0:
		bad("OfflineAfter is negative (%d)", cfg.OfflineAfter)
	case cfg.OfflineAfter == 0:
		cfg.OfflineAfter = DefaultOfflineAfter
	}
	switch {
	case cfg.MaxReplies < 0:
		bad("MaxReplies is negative (%d)", cfg.MaxReplies)
	case cfg.MaxReplies == 0:
		cfg.MaxReplies = DefaultMaxReplies
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("qqbot: invalid config: %w", err)
	}
	return cfg, nil
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.RawQuery == "" && u.Fragment == ""
}

// plainID reports whether s is a non-empty run of ASCII letters, digits,
// '-' and '_' (an AppID, a file-name-safe key).
func plainID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}
