package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/personakit/persona"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/internal/botenv"
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

// config is the bot's configuration as read from the environment.
type config struct {
	mode    onebot.Mode
	listen  string // address to listen on; "" in forward-ws mode
	url     string
	token   string
	secret  string
	dialect onebot.Dialect
	// mediaRoot is onebot.Config.MediaRoot ("" = local paths refused).
	mediaRoot string

	soul     string // SOUL.md text
	soulFrom string // where it came from, for the banner
	dataDir  string
	owners   []string
	aliases  []string
	level    slog.Level
	memory   bool // long-term memory (persona.Options.Memory)
	agent    bool // the agent tool loop (persona.Options.Agent)
	// media is persona.Options.Media; mediaDesc says what it does.
	media     persona.MediaOptions
	mediaDesc string
}

// loadConfig reads and checks the environment. It reports every problem
// at once, each naming its variable.
func loadConfig(getenv func(string) string) (config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }

	cfg := config{
		mode:   onebot.Mode(strings.ToLower(get(envMode))),
		listen: get(envAddr),
		url:    get(envURL),
		token:  get(envToken),
		secret: get(envSecret),
	}
	switch cfg.mode {
	case "":
		cfg.mode = onebot.ModeReverseWS
	case onebot.ModeReverseWS, onebot.ModeForwardWS, onebot.ModeHTTP:
	default:
		bad("%s=%q: want %s, %s or %s", envMode, getenv(envMode), onebot.ModeReverseWS, onebot.ModeForwardWS, onebot.ModeHTTP)
	}
	switch cfg.mode {
	case onebot.ModeReverseWS:
		if cfg.url != "" {
			bad("%s is not used in %s mode (the implementation dials %s); unset it or set %s=%s", envURL, cfg.mode, envAddr, envMode, onebot.ModeForwardWS)
		}
		if cfg.secret != "" {
			bad("%s is only used in %s mode (it signs HTTP POST events); the reverse WebSocket uses %s", envSecret, onebot.ModeHTTP, envToken)
		}
	case onebot.ModeForwardWS:
		if cfg.listen != "" {
			bad("%s is not used in %s mode (the bot dials %s)", envAddr, cfg.mode, envURL)
		}
		if cfg.secret != "" {
			bad("%s is only used in %s mode (it signs HTTP POST events); the forward WebSocket uses %s", envSecret, onebot.ModeHTTP, envToken)
		}
		checkURL(&errs, cfg.url, cfg.mode, "ws", "wss")
	case onebot.ModeHTTP:
		checkURL(&errs, cfg.url, cfg.mode, "http", "https")
	}
	if cfg.mode != onebot.ModeForwardWS && cfg.listen == "" {
		cfg.listen = defaultAddr
	}

	switch d := onebot.Dialect(strings.ToLower(get(envDialect))); d {
	case "":
	case onebot.DialectNapCat, onebot.DialectLagrange, onebot.DialectGoCQHTTP:
		cfg.dialect = d
	default:
		bad("%s=%q: want %s, %s or %s", envDialect, getenv(envDialect), onebot.DialectNapCat, onebot.DialectLagrange, onebot.DialectGoCQHTTP)
	}

	if root := get(envMediaRoot); root != "" {
		if !filepath.IsAbs(root) {
			bad("%s=%q: want an absolute path", envMediaRoot, root)
		} else {
			cfg.mediaRoot = root
		}
	}

	common, cerrs := botenv.Load(getenv, botenv.Defaults{Soul: defaultSoul, SoulName: "built-in SOUL.md (Mira)",
		DataDir: defaultDataDir, Owner: checkOwner})
	errs = append(errs, cerrs...)
	cfg.soul, cfg.soulFrom, cfg.dataDir = common.Soul, common.SoulFrom, common.DataDir
	cfg.owners, cfg.aliases, cfg.level = common.Owners, common.Aliases, common.Level
	cfg.memory, cfg.agent = common.Memory, common.Agent
	cfg.media, cfg.mediaDesc = common.Media, common.MediaDesc
	return cfg, errors.Join(errs...)
}

// checkURL checks the URL variable of a mode that dials the implementation.
func checkURL(errs *[]error, raw string, mode onebot.Mode, schemes ...string) {
	example := "ws://127.0.0.1:3001/"
	if mode == onebot.ModeHTTP {
		example = "http://127.0.0.1:3000"
	}
	if raw == "" {
		*errs = append(*errs, fmt.Errorf("%s is required in %s mode (e.g. %s)", envURL, mode, example))
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
	*errs = append(*errs, fmt.Errorf("%s=%q: %s mode needs a %s URL (e.g. %s)", envURL, raw, mode, strings.Join(schemes, ":// or ")+"://", example))
}

// checkOwner accepts only positive numeric account ids.
func checkOwner(id string) error {
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
		return fmt.Errorf("%q is not a QQ number", id)
	}
	return nil
}
