package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/internal/botenv"
	"github.com/personakit/persona/internal/botrun"
)

// The environment variables the bot reads (besides the shared ones of
// internal/botrun).
const (
	envAppID             = "PERSONA_FEISHU_APP_ID"
	envAppSecret         = "PERSONA_FEISHU_APP_SECRET"
	envMode              = "PERSONA_FEISHU_MODE"
	envVerificationToken = "PERSONA_FEISHU_VERIFICATION_TOKEN"
	envEncryptKey        = "PERSONA_FEISHU_ENCRYPT_KEY"
	envDomain            = "PERSONA_FEISHU_DOMAIN"
	envHTTPAddr          = botrun.EnvHTTPAddr
	envData              = botenv.EnvData
	envOwner             = botenv.EnvOwner
	envLogLevel          = botenv.EnvLogLevel
)

// defaultDataDir holds the database.
const defaultDataDir = "data/feishu"

// config is the platform part of the configuration, as read from the
// environment (the shared part is read by the runner).
type config struct {
	appID, appSecret string
	mode             feishu.Mode
	token, key       string
	baseURL          string
}

// readConfig reads and checks the Feishu variables; problems go to env.
// The secret, token and key never appear in a problem.
func readConfig(env *botrun.Env) config {
	cfg := config{
		appID:     env.Require(envAppID),
		appSecret: env.Require(envAppSecret),
		token:     env.Get(envVerificationToken),
		key:       env.Get(envEncryptKey),
	}
	if cfg.appID != "" && (!strings.HasPrefix(cfg.appID, "cli_") || strings.ContainsAny(cfg.appID, " /?#%:")) {
		env.Bad("%s=%q: want the app's cli_… id (Credentials & Basic Info)", envAppID, cfg.appID)
	}
	switch m := strings.ToLower(env.Get(envMode)); m {
	case "", "webhook":
		cfg.mode = feishu.ModeWebhook
	case "ws", "websocket", "long-connection":
		cfg.mode = feishu.ModeWebSocket
	default:
		env.Bad("%s=%q: want webhook (events POSTed to %s) or ws (the long connection)", envMode, env.Get(envMode), envHTTPAddr)
	}
	if cfg.mode == feishu.ModeWebhook && cfg.token == "" {
		env.Bad("%s is required in webhook mode (Events & Callbacks → Encryption Strategy)", envVerificationToken)
	}
	switch d := env.Get(envDomain); strings.ToLower(d) {
	case "", "feishu":
		cfg.baseURL = feishu.FeishuBaseURL
	case "lark", "larksuite":
		cfg.baseURL = feishu.LarkBaseURL
	default:
		u, err := url.Parse(d)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			env.Bad("%s=%q: want feishu, lark or the https:// base URL of an Open Platform host", envDomain, d)
		}
		cfg.baseURL = strings.TrimRight(d, "/")
	}
	return cfg
}

// platform is the Feishu part of the shared runner.
func platform() botrun.Platform {
	return botrun.Platform{
		Title:    "persona Feishu / Lark bot",
		DataDir:  defaultDataDir,
		Soul:     defaultSoul,
		SoulName: "built-in SOUL.md (Mira)",
		Owner:    checkOwner,
		Setup:    setup,
		MapError: func(err error) error {
			if errors.Is(err, feishu.ErrUnauthorized) {
				return fmt.Errorf("the platform refused the app credentials; check %s and %s: %w", envAppID, envAppSecret, err)
			}
			return err
		},
	}
}

// setup reads the Feishu variables and builds the adapter; in webhook
// mode it is also the handler the runner serves on PERSONA_HTTP_ADDR.
func setup(env *botrun.Env, s *botrun.Start) (*botrun.Setup, error) {
	cfg := readConfig(env)
	if !env.OK() {
		return nil, nil
	}
	ch, err := feishu.New(feishu.Config{
		AppID:             cfg.appID,
		AppSecret:         cfg.appSecret,
		BaseURL:           cfg.baseURL,
		Mode:              cfg.mode,
		VerificationToken: cfg.token,
		EncryptKey:        cfg.key,
		Clock:             s.Clock,
		Logger:            s.Log.With("component", "feishu"),
	})
	if err != nil {
		return nil, err
	}
	st := &botrun.Setup{Channel: ch, Banner: []string{banner(cfg)}, Warn: func(log *slog.Logger) { warnings(log, cfg) }}
	if cfg.mode == feishu.ModeWebhook {
		st.Handler = ch
	}
	return st, nil
}

// banner tells the operator how events arrive.
func banner(cfg config) string {
	host := cfg.baseURL
	if u, err := url.Parse(cfg.baseURL); err == nil {
		host = u.Host
	}
	if cfg.mode == feishu.ModeWebSocket {
		return fmt.Sprintf("  feishu:   long connection to %s for app %s", host, cfg.appID)
	}
	enc := "unencrypted (set " + envEncryptKey + ")"
	if cfg.key != "" {
		enc = "encrypted and signed"
	}
	return fmt.Sprintf("  feishu:   event callbacks (%s) for app %s on %s; set the request URL in the developer console", enc, cfg.appID, host)
}

// warnings logs the risky parts of a configuration that still works.
func warnings(log *slog.Logger, cfg config) {
	if cfg.mode == feishu.ModeWebhook && cfg.key == "" {
		log.Warn("feishu_callbacks_unsigned", "hint", "callbacks are checked by their verification token only; set an Encrypt Key in the console and "+envEncryptKey)
	}
}

// checkOwner accepts open_ids (ou_…), the ids events carry.
func checkOwner(id string) error {
	if !strings.HasPrefix(id, "ou_") || len(id) < 4 || strings.ContainsAny(id, " /:") {
		return fmt.Errorf("%q is not an open_id (ou_…); a user's open_id is in the bot's logs (sender) or the console's API explorer", id)
	}
	return nil
}
