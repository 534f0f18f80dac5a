package wecom

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/personakit/persona/clock"
)

// Platform is the platform id of the adapter: Channel.Name and
// Event.Platform.
const Platform = "wecom"

// Mode selects the WeCom product the Channel speaks for.
type Mode string

// The modes.
const (
	// ModeApp is a self-built app (自建应用): messages arrive as encrypted
	// XML callbacks on the Channel's http.Handler, replies go out through
	// /cgi-bin/message/send with an access token from the corp id and the
	// app secret. Only private chats reach an app.
	ModeApp Mode = "app"
	// ModeAIBot is an AI bot (智能机器人) in API mode with a callback URL:
	// messages arrive as encrypted JSON callbacks on the Channel's
	// http.Handler, replies are passive stream answers that WeCom polls,
	// or the callback's one-time response_url.
	ModeAIBot Mode = "aibot"
	// ModeAIBotWS is an AI bot in API mode with the long connection
	// (长连接): the Channel dials WeCom's WebSocket, subscribes with the
	// bot id and secret, receives messages as frames and answers them
	// (aibot_respond_msg) or sends on its own (aibot_send_msg).
	ModeAIBotWS Mode = "aibot-ws"
)

// Defaults of Config.
const (
	// DefaultAPIBase is WeCom's server API.
	DefaultAPIBase = "https://qyapi.weixin.qq.com"
	// DefaultWSURL is the AI-bot long-connection endpoint.
	DefaultWSURL = "wss://openws.work.weixin.qq.com"
	// DefaultCallTimeout bounds every API call and every acknowledged
	// frame (10 s).
	DefaultCallTimeout = 10 * time.Second
	// DefaultRetryMin and DefaultRetryMax bound the reconnect, token and
	// redelivery backoff: 1 s doubling to 60 s, each delay ±20 %.
	DefaultRetryMin = time.Second
	DefaultRetryMax = 60 * time.Second
	// DefaultOfflineAfter is the number of consecutive failed calls (or
	// connection attempts) after which the channel reports itself offline.
	DefaultOfflineAfter = 3
	// DefaultPingInterval is the long connection's heartbeat.
	DefaultPingInterval = 30 * time.Second
	// DefaultReplayWindow is how far a callback's timestamp may be from
	// the clock before the callback is refused as a replay.
	DefaultReplayWindow = 5 * time.Minute
	// DefaultMaxBodyBytes bounds a callback request body.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultDuplicateCheck is how long after an attempt whose answer was
	// lost a private-chat chunk is still sent again with message/send's
	// duplicate check (WeCom drops a message identical to one sent to the
	// same user within duplicate_check_interval), so that it arrives
	// once. See Config.DuplicateCheck.
	DefaultDuplicateCheck = 30 * time.Minute
	// MaxDuplicateCheck is the longest interval WeCom accepts (4 h).
	MaxDuplicateCheck = 4 * time.Hour
	// DefaultStreamIdle is how long a callback-mode stream waits for the
	// next chunk before it is finished.
	DefaultStreamIdle = 8 * time.Second
	// DefaultStreamMaxAge is how long after the user's message a stream
	// stays open at most: WeCom stops polling 6 minutes after the message.
	DefaultStreamMaxAge = 5*time.Minute + 30*time.Second
	// DefaultMaxMediaBytes bounds an AI-bot media download when the
	// request sets no MaxBytes.
	DefaultMaxMediaBytes = 20 << 20
)

// Platform limits.
const (
	// MaxTextBytes is the text limit of one message, in UTF-8 bytes
	// (message/send text content; the chunk size of every mode).
	MaxTextBytes = 2048
	// MaxStreamBytes bounds the content of an AI-bot stream or markdown
	// message (UTF-8 bytes).
	MaxStreamBytes = 20480
	// ResponseURLLifetime is how long an AI-bot response_url may be used
	// (once).
	ResponseURLLifetime = time.Hour
)

// Config configures a Channel. Zero fields take the documented defaults;
// which fields are required depends on Mode.
type Config struct {
	// Mode is ModeApp, ModeAIBot or ModeAIBotWS. Required.
	Mode Mode

	// Token and EncodingAESKey are the callback's "Token" and
	// "EncodingAESKey" from the admin console (ModeApp and ModeAIBot).
	// Never logged.
	Token          string
	EncodingAESKey string

	// CorpID is the enterprise's corp id (ModeApp): the receiver id of
	// every callback and the corpid of gettoken.
	CorpID string
	// AgentID is the app's AgentId (ModeApp); it is Event.BotID.
	AgentID int64
	// Secret is the app's Secret (ModeApp) or the bot's Secret
	// (ModeAIBotWS). Never logged, never in errors.
	Secret string
	// APIBase is WeCom's API server (default DefaultAPIBase); tests point
	// it at wecomtest.Server.URL. An AI bot's response_url must be on the
	// same scheme and host.
	APIBase string
	// DuplicateCheck bounds message/send's duplicate check (ModeApp; 0 =
	// DefaultDuplicateCheck, at most MaxDuplicateCheck, negative = off).
	// WeCom compares content, so the check is never set on a first
	// attempt (it would drop a different reply that says the same thing);
	// it is set only when a part whose earlier attempt got no answer is
	// sent again, with the shortest interval covering that attempt (the
	// time since it began plus three CallTimeouts). A repeat later than
	// DuplicateCheck after the earlier attempt, with the check off, or to
	// a group chat (appchat/send has no check) is not sent again: it
	// counts as delivered.
	DuplicateCheck time.Duration

	// BotID is the AI bot's id (ModeAIBotWS: required, the bot_id of the
	// subscription; ModeAIBot: optional, when set callbacks for another
	// aibotid are refused; when empty the callbacks' aibotid is used).
	BotID string
	// BotName is the AI bot's display name: "@BotName" in a group message
	// becomes a mention of the bot instead of text. Optional.
	BotName string
	// WSURL is the long-connection endpoint (ModeAIBotWS; default
	// DefaultWSURL).
	WSURL string
	// PingInterval is the long connection's heartbeat (default 30 s); two
	// unanswered pings close the connection.
	PingInterval time.Duration
	// StreamIdle and StreamMaxAge finish callback-mode streams (ModeAIBot;
	// defaults DefaultStreamIdle and DefaultStreamMaxAge).
	StreamIdle, StreamMaxAge time.Duration
	// StateDir keeps the open streams of ModeAIBot in a file, so that a
	// restarted process goes on answering WeCom's polls (optional).
	StateDir string

	// HTTPClient makes the API calls (default: a client without an overall
	// timeout; each call has CallTimeout).
	HTTPClient *http.Client
	// MediaAllow lets AI-bot media downloads reach these non-public
	// prefixes (tests: 127.0.0.0/8). Media links arrive in messages, so
	// they are fetched through a public-address guard.
	MediaAllow []netip.Prefix
	// CallTimeout bounds each API call and acknowledged frame (10 s).
	CallTimeout time.Duration
	// RetryMin and RetryMax bound every backoff (defaults 1 s and 60 s;
	// doubling, ±20 % jitter).
	RetryMin, RetryMax time.Duration
	// OfflineAfter is how many consecutive failures make the channel
	// report offline (default 3).
	OfflineAfter int
	// ReplayWindow refuses callbacks whose timestamp is further than this
	// from the clock (default 5 min).
	ReplayWindow time.Duration
	// MaxBodyBytes bounds a callback body (default 1 MiB; larger: 413).
	MaxBodyBytes int64
	// Clock drives every timer and time check (nil = wall clock).
	Clock clock.Clock
	// Logger receives operational log lines (nil = discard).
	Logger *slog.Logger
	// Random supplies the random prefix of encrypted replies (nil =
	// crypto/rand).
	Random io.Reader
}

// withDefaults validates cfg and fills in the defaults. Errors name the
// field and never contain a secret.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	callback := func() {
		if cfg.Token == "" {
			bad("Token is required (the callback Token)")
		} else if strings.ContainsAny(cfg.Token, " \t\r\n") {
			bad("Token contains white space")
		}
		if _, err := decodeEncodingAESKey(cfg.EncodingAESKey); err != nil {
			bad("EncodingAESKey: must be the 43 characters the console shows")
		}
	}
	switch cfg.Mode {
	case ModeApp:
		callback()
		if cfg.CorpID == "" || strings.ContainsAny(cfg.CorpID, " \t\r\n/?#&") {
			bad("CorpID is required (the corp id, ww…)")
		}
		if cfg.AgentID <= 0 {
			bad("AgentID is required (the app's AgentId, a positive number)")
		}
		if cfg.Secret == "" {
			bad("Secret is required (the app's Secret)")
		}
		switch {
		case cfg.DuplicateCheck == 0:
			cfg.DuplicateCheck = DefaultDuplicateCheck
		case cfg.DuplicateCheck > MaxDuplicateCheck:
			bad("DuplicateCheck %s is longer than WeCom's maximum of %s", cfg.DuplicateCheck, MaxDuplicateCheck)
		case cfg.DuplicateCheck > 0 && cfg.DuplicateCheck < time.Second:
			bad("DuplicateCheck %s is shorter than a second", cfg.DuplicateCheck)
		}
	case ModeAIBot:
		callback()
	case ModeAIBotWS:
		if cfg.BotID == "" {
			bad("BotID is required (the AI bot's Bot ID)")
		}
		if cfg.Secret == "" {
			bad("Secret is required (the AI bot's Secret for the long connection)")
		}
		if cfg.WSURL == "" {
			cfg.WSURL = DefaultWSURL
		} else if u, err := url.Parse(cfg.WSURL); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
			bad("WSURL %q is not a ws:// or wss:// URL", cfg.WSURL)
		}
	case "":
		bad("Mode is required (app, aibot or aibot-ws)")
	default:
		bad("Mode %q is unknown (want app, aibot or aibot-ws)", cfg.Mode)
	}
	if strings.ContainsAny(cfg.BotID, ":/ \t\r\n") {
		bad("BotID %q contains ':', '/' or white space", cfg.BotID)
	}
	if cfg.APIBase == "" {
		cfg.APIBase = DefaultAPIBase
	} else if u, err := url.Parse(cfg.APIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		bad("APIBase %q is not an http(s) base URL", cfg.APIBase)
	}
	cfg.APIBase = strings.TrimRight(cfg.APIBase, "/")
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	durations := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"CallTimeout", &cfg.CallTimeout, DefaultCallTimeout},
		{"RetryMin", &cfg.RetryMin, DefaultRetryMin},
		{"RetryMax", &cfg.RetryMax, DefaultRetryMax},
		{"PingInterval", &cfg.PingInterval, DefaultPingInterval},
		{"ReplayWindow", &cfg.ReplayWindow, DefaultReplayWindow},
		{"StreamIdle", &cfg.StreamIdle, DefaultStreamIdle},
		{"StreamMaxAge", &cfg.StreamMaxAge, DefaultStreamMaxAge},
	}
	for _, x := range durations {
		switch {
		case *x.d == 0:
			*x.d = x.def
		case *x.d < 0:
			bad("%s is negative", x.name)
		}
	}
	if cfg.RetryMax < cfg.RetryMin {
		bad("RetryMax %s is below RetryMin %s", cfg.RetryMax, cfg.RetryMin)
	}
	if cfg.StreamMaxAge > 6*time.Minute {
		bad("StreamMaxAge %s is beyond the 6 minutes WeCom polls a stream", cfg.StreamMaxAge)
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = DefaultOfflineAfter
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("wecom: invalid config: %w", err)
	}
	return cfg, nil
}
