package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/internal/botenv"
	"github.com/personakit/persona/internal/botrun"
)

// The environment variables the bot reads (besides the shared ones read
// by internal/botrun).
const (
	envAppID    = "PERSONA_QQ_APP_ID"
	envSecret   = "PERSONA_QQ_SECRET"
	envMode     = "PERSONA_QQ_MODE"
	envSandbox  = "PERSONA_QQ_SANDBOX"
	envIntents  = "PERSONA_QQ_INTENTS"
	envMarkdown = "PERSONA_QQ_MARKDOWN"
	envActive   = "PERSONA_QQ_ACTIVE_MESSAGES"
	envAPI      = "PERSONA_QQ_API"
	envTokenURL = "PERSONA_QQ_TOKEN_URL"
	envData     = botenv.EnvData
	envOwner    = botenv.EnvOwner
	envLogLevel = botenv.EnvLogLevel
	envHTTPAddr = botrun.EnvHTTPAddr
)

// defaultDataDir holds the database, the gateway session and the reply
// ledger.
const defaultDataDir = "data/qqbot"

// intentNames are the values of PERSONA_QQ_INTENTS.
var intentNames = map[string]int64{
	"group_c2c": qqbot.IntentGroupAndC2C,
	"guild_at":  qqbot.IntentPublicGuildMessages,
	"guild_dm":  qqbot.IntentDirectMessage,
}

// config is the platform part of the configuration.
type config struct {
	appID, secret string
	mode          qqbot.Mode
	sandbox       bool
	intents       int64
	intentList    string
	markdown      bool
	active        bool
	api, tokenURL string
}

// readConfig reads and checks the QQ variables; problems go to env, and
// the secret never appears in one.
func readConfig(env *botrun.Env) config {
	cfg := config{
		appID:    env.Require(envAppID),
		secret:   env.Require(envSecret),
		sandbox:  env.Bool(envSandbox, false),
		markdown: env.Bool(envMarkdown, false),
		active:   env.Bool(envActive, false),
		api:      env.Get(envAPI),
		tokenURL: env.Get(envTokenURL),
	}
	if cfg.appID != "" && !plain(cfg.appID) {
		env.Bad("%s=%q: want the numeric AppID from the QQ bot console", envAppID, cfg.appID)
	}
	if strings.ContainsAny(cfg.secret, " \t") {
		env.Bad("%s contains white space: want the AppSecret from the QQ bot console", envSecret)
	}
	switch m := strings.ToLower(env.Get(envMode)); m {
	case "", "gateway", "websocket", "ws":
		cfg.mode = qqbot.ModeGateway
	case "webhook":
		cfg.mode = qqbot.ModeWebhook
	default:
		env.Bad("%s=%q: want gateway (default) or webhook", envMode, m)
	}
	list := env.Get(envIntents)
	if list == "" {
		list = "group_c2c,guild_at,guild_dm"
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.ToLower(strings.TrimSpace(n))
		bit, ok := intentNames[n]
		if !ok {
			env.Bad("%s: unknown intent %q (want group_c2c, guild_at and/or guild_dm)", envIntents, n)
			continue
		}
		if cfg.intents&bit == 0 {
			names = append(names, n)
		}
		cfg.intents |= bit
	}
	cfg.intentList = strings.Join(names, ",")
	if cfg.api == "" {
		cfg.api = qqbot.DefaultAPIBase
		if cfg.sandbox {
			cfg.api = qqbot.SandboxAPIBase
		}
	} else if !httpURL(cfg.api) {
		env.Bad("%s=%q: want the http(s) base URL of the OpenAPI (default %s)", envAPI, cfg.api, qqbot.DefaultAPIBase)
	}
	if cfg.tokenURL == "" {
		cfg.tokenURL = qqbot.DefaultTokenURL
	} else if !httpURL(cfg.tokenURL) {
		env.Bad("%s=%q: want the http(s) URL of the token endpoint (default %s)", envTokenURL, cfg.tokenURL, qqbot.DefaultTokenURL)
	}
	return cfg
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func plain(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && r != '-' && r != '_' {
			return false
		}
	}
	return s != "" && len(s) <= 64
}

// checkOwner accepts openids (as the bot sees its owner in groups or
// private chats) and guild user ids.
func checkOwner(id string) error {
	if !plain(id) {
		return fmt.Errorf("%q is not a QQ openid or guild user id (the sender id the bot logs for your messages)", id)
	}
	return nil
}
