package main

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/internal/botenv"
	"github.com/personakit/persona/internal/botrun"
)

// The environment variables the bot reads (besides the model variables of
// agent/openai.FromEnv).
const (
	envMode    = "PERSONA_ONEBOT_MODE"
	envAddr    = "PERSONA_ONEBOT_ADDR"
	envURL     = "PERSONA_ONEBOT_URL"
	envToken   = "PERSONA_ONEBOT_TOKEN"
	envSecret  = "PERSONA_ONEBOT_SECRET"
	envDialect = "PERSONA_ONEBOT_DIALECT"
	// envMediaRoot is a directory of the implementation's files this bot
	// may read (onebot.Config.MediaRoot), when both run on one machine.
	envMediaRoot = "PERSONA_ONEBOT_MEDIA_ROOT"
	envSoul      = botenv.EnvSoul
	envData      = botenv.EnvData
	envOwner     = botenv.EnvOwner
	envAliases   = botenv.EnvAliases
	envLogLevel  = botenv.EnvLogLevel
	envMemory    = botenv.EnvMemory
	envAgent     = botenv.EnvAgent
)

// Defaults of the bot.
const (
	defaultAddr    = "127.0.0.1:8080"
	defaultDataDir = "data/onebot"
)

// config is the platform part of the configuration, as read from the
// environment (the shared part is read by the runner, internal/botrun).
type config struct {
	mode    onebot.Mode
	listen  string // address to listen on; "" in forward-ws mode
	url     string
	token   string
	secret  string
	dialect onebot.Dialect
	// mediaRoot is onebot.Config.MediaRoot ("" = local paths refused).
	mediaRoot string
}

// readConfig reads and checks the OneBot variables; problems go to env.
func readConfig(env *botrun.Env) config {
	cfg := config{
		mode:   onebot.Mode(strings.ToLower(env.Get(envMode))),
		listen: env.Get(envAddr),
		url:    env.Get(envURL),
		token:  env.Get(envToken),
		secret: env.Get(envSecret),
	}
	switch cfg.mode {
	case "":
		cfg.mode = onebot.ModeReverseWS
	case onebot.ModeReverseWS, onebot.ModeForwardWS, onebot.ModeHTTP:
	default:
		env.Bad("%s=%q: want %s, %s or %s", envMode, env.Get(envMode), onebot.ModeReverseWS, onebot.ModeForwardWS, onebot.ModeHTTP)
	}
	switch cfg.mode {
	case onebot.ModeReverseWS:
		if cfg.url != "" {
			env.Bad("%s is not used in %s mode (the implementation dials %s); unset it or set %s=%s", envURL, cfg.mode, envAddr, envMode, onebot.ModeForwardWS)
		}
		if cfg.secret != "" {
			env.Bad("%s is only used in %s mode (it signs HTTP POST events); the reverse WebSocket uses %s", envSecret, onebot.ModeHTTP, envToken)
		}
	case onebot.ModeForwardWS:
		if cfg.listen != "" {
			env.Bad("%s is not used in %s mode (the bot dials %s)", envAddr, cfg.mode, envURL)
		}
		if cfg.secret != "" {
			env.Bad("%s is only used in %s mode (it signs HTTP POST events); the forward WebSocket uses %s", envSecret, onebot.ModeHTTP, envToken)
		}
		checkURL(env, cfg.url, cfg.mode, "ws", "wss")
	case onebot.ModeHTTP:
		checkURL(env, cfg.url, cfg.mode, "http", "https")
	}
	if cfg.mode != onebot.ModeForwardWS && cfg.listen == "" {
		cfg.listen = defaultAddr
	}
	switch d := onebot.Dialect(strings.ToLower(env.Get(envDialect))); d {
	case "":
	case onebot.DialectNapCat, onebot.DialectLagrange, onebot.DialectGoCQHTTP:
		cfg.dialect = d
	default:
		env.Bad("%s=%q: want %s, %s or %s", envDialect, env.Get(envDialect), onebot.DialectNapCat, onebot.DialectLagrange, onebot.DialectGoCQHTTP)
	}
	if root := env.Get(envMediaRoot); root != "" {
		if !filepath.IsAbs(root) {
			env.Bad("%s=%q: want an absolute path", envMediaRoot, root)
		} else {
			cfg.mediaRoot = root
		}
	}
	return cfg
}

// checkURL checks the URL variable of a mode that dials the implementation.
func checkURL(env *botrun.Env, raw string, mode onebot.Mode, schemes ...string) {
	example := "ws://127.0.0.1:3001/"
	if mode == onebot.ModeHTTP {
		example = "http://127.0.0.1:3000"
	}
	if raw == "" {
		env.Bad("%s is required in %s mode (e.g. %s)", envURL, mode, example)
		return
	}
	u, err := url.Parse(raw)
	if err == nil && u.Host != "" {
		for _, s := range schemes {
			if u.Scheme == s {
				return
			}
		}
	}
	env.Bad("%s=%q: %s mode needs a %s URL (e.g. %s)", envURL, raw, mode, strings.Join(schemes, ":// or ")+"://", example)
}

// checkOwner accepts only positive numeric account ids.
func checkOwner(id string) error {
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
		return fmt.Errorf("%q is not a QQ number", id)
	}
	return nil
}
