package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/personakit/persona/channel/wecom"
	"github.com/personakit/persona/internal/botenv"
	"github.com/personakit/persona/internal/botrun"
)

// The environment variables the bot reads (besides the shared ones of
// internal/botrun).
const (
	envMode     = "PERSONA_WECOM_MODE"
	envToken    = "PERSONA_WECOM_TOKEN"
	envAESKey   = "PERSONA_WECOM_AES_KEY"
	envCorpID   = "PERSONA_WECOM_CORP_ID"
	envAgentID  = "PERSONA_WECOM_AGENT_ID"
	envSecret   = "PERSONA_WECOM_SECRET"
	envBotID    = "PERSONA_WECOM_BOT_ID"
	envBotName  = "PERSONA_WECOM_BOT_NAME"
	envAPI      = "PERSONA_WECOM_API"
	envWSURL    = "PERSONA_WECOM_WS_URL"
	envHTTPAddr = botrun.EnvHTTPAddr
	envData     = botenv.EnvData
	envOwner    = botenv.EnvOwner
	envLogLevel = botenv.EnvLogLevel
)

// defaultDataDir holds the database and the AI bot's open streams.
const defaultDataDir = "data/wecom"

// config is the platform part of the configuration, as read from the
// environment (the shared part is read by the runner).
type config struct {
	mode           wecom.Mode
	token, aesKey  string
	corpID         string
	agentID        int64
	secret         string
	botID, botName string
	api, wsURL     string
}

// readConfig reads and checks the WeCom variables; problems go to env.
// The secret, token and key never appear in a problem.
func readConfig(env *botrun.Env) config {
	cfg := config{botID: env.Get(envBotID), botName: strings.TrimPrefix(env.Get(envBotName), "@")}
	switch m := strings.ToLower(env.Get(envMode)); m {
	case "app":
		cfg.mode = wecom.ModeApp
	case "aibot":
		cfg.mode = wecom.ModeAIBot
	case "aibot-ws", "aibot_ws", "ws":
		cfg.mode = wecom.ModeAIBotWS
	case "":
		env.Bad("%s is required: app (a self-built app), aibot (an AI bot with a callback URL) or aibot-ws (an AI bot on the long connection)", envMode)
	default:
		env.Bad("%s=%q: want app, aibot or aibot-ws", envMode, env.Get(envMode))
	}
	callback := func() {
		cfg.token = env.Require(envToken)
		cfg.aesKey = env.Require(envAESKey)
		if cfg.aesKey != "" && len(cfg.aesKey) != 43 {
			env.Bad("%s: want the 43-character EncodingAESKey the console shows (got %d characters)", envAESKey, len(cfg.aesKey))
		}
	}
	switch cfg.mode {
	case wecom.ModeApp:
		callback()
		cfg.corpID = env.Require(envCorpID)
		if cfg.corpID != "" && strings.ContainsAny(cfg.corpID, " /?#&:") {
			env.Bad("%s=%q: want the corp id (我的企业 → 企业ID, ww…)", envCorpID, cfg.corpID)
		}
		if s := env.Require(envAgentID); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 {
				env.Bad("%s=%q: want the app's AgentId, a positive number", envAgentID, s)
			}
			cfg.agentID = n
		}
		cfg.secret = env.Require(envSecret)
	case wecom.ModeAIBot:
		callback()
	case wecom.ModeAIBotWS:
		if cfg.botID == "" {
			env.Bad("%s is required in aibot-ws mode: the AI bot's Bot ID", envBotID)
		}
		cfg.secret = env.Require(envSecret)
	}
	if cfg.botID != "" && strings.ContainsAny(cfg.botID, " /:") {
		env.Bad("%s=%q: want the AI bot's Bot ID", envBotID, cfg.botID)
	}
	if cfg.mode == wecom.ModeApp && cfg.botID != "" {
		env.Bad("%s is for the AI bot modes; an app is named by %s", envBotID, envAgentID)
	}
	cfg.api = env.Get(envAPI)
	if cfg.api == "" {
		cfg.api = wecom.DefaultAPIBase
	} else if u, err := url.Parse(cfg.api); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		env.Bad("%s=%q: want the http(s) base URL of the WeCom API (default %s)", envAPI, cfg.api, wecom.DefaultAPIBase)
	}
	cfg.wsURL = env.Get(envWSURL)
	if cfg.wsURL != "" && cfg.mode != wecom.ModeAIBotWS {
		env.Bad("%s is only used in aibot-ws mode", envWSURL)
	}
	if cfg.wsURL == "" {
		cfg.wsURL = wecom.DefaultWSURL
	} else if u, err := url.Parse(cfg.wsURL); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		env.Bad("%s=%q: want a wss:// URL (default %s)", envWSURL, cfg.wsURL, wecom.DefaultWSURL)
	}
	return cfg
}

// platform is the WeCom part of the shared runner.
func platform() botrun.Platform {
	return botrun.Platform{
		Title:    "persona WeCom bot",
		DataDir:  defaultDataDir,
		Soul:     defaultSoul,
		SoulName: "built-in SOUL.md (Mira)",
		Owner:    checkOwner,
		Setup:    setup,
		MapError: func(err error) error {
			switch {
			case errors.Is(err, wecom.ErrUnauthorized):
				return fmt.Errorf("WeCom refused the credentials; check %s, %s and %s (app) or %s and %s (AI bot): %w",
					envCorpID, envAgentID, envSecret, envBotID, envSecret, err)
			case errors.Is(err, wecom.ErrSuperseded):
				return fmt.Errorf("another process opened the AI bot's long connection; run one bot per Bot ID: %w", err)
			}
			return err
		},
	}
}

// setup reads the WeCom variables and builds the adapter; in the callback
// modes it is also the handler the runner serves on PERSONA_HTTP_ADDR.
func setup(env *botrun.Env, s *botrun.Start) (*botrun.Setup, error) {
	cfg := readConfig(env)
	if !env.OK() {
		return nil, nil
	}
	ch, err := wecom.New(wecom.Config{
		Mode:           cfg.mode,
		Token:          cfg.token,
		EncodingAESKey: cfg.aesKey,
		CorpID:         cfg.corpID,
		AgentID:        cfg.agentID,
		Secret:         cfg.secret,
		BotID:          cfg.botID,
		BotName:        cfg.botName,
		APIBase:        cfg.api,
		WSURL:          cfg.wsURL,
		StateDir:       s.DataDir, // the AI bot's open streams survive a restart
		Clock:          s.Clock,
		Logger:         s.Log.With("component", "wecom"),
	})
	if err != nil {
		return nil, err
	}
	st := &botrun.Setup{Channel: ch, Banner: []string{banner(cfg)}, Warn: func(log *slog.Logger) { warnings(log, cfg) }}
	if cfg.mode != wecom.ModeAIBotWS {
		st.Handler = ch
	}
	return st, nil
}

// banner tells the operator how messages arrive and leave.
func banner(cfg config) string {
	api := "the WeCom API"
	if cfg.api != wecom.DefaultAPIBase {
		api = cfg.api
	}
	switch cfg.mode {
	case wecom.ModeApp:
		return fmt.Sprintf("  wecom:    self-built app %d of corp %s: callbacks on %s, replies through %s (message/send)",
			cfg.agentID, cfg.corpID, envHTTPAddr, api)
	case wecom.ModeAIBot:
		id := cfg.botID
		if id == "" {
			id = "(id from the first callback)"
		}
		return fmt.Sprintf("  wecom:    AI bot %s: callbacks on %s, answered with streams (response_url through %s)", id, envHTTPAddr, api)
	}
	host := cfg.wsURL
	if u, err := url.Parse(cfg.wsURL); err == nil {
		host = u.Host
	}
	return fmt.Sprintf("  wecom:    AI bot %s: long connection to %s", cfg.botID, host)
}

// warnings logs the risky parts of a configuration that still works.
func warnings(log *slog.Logger, cfg config) {
	switch {
	case cfg.mode == wecom.ModeApp:
		log.Info("wecom_trusted_ip", "hint", "WeCom accepts message/send only from the app's trusted IPs (企业可信IP); errcode 60020 means this server's IP is missing")
	case cfg.botName == "":
		log.Warn("wecom_bot_name_unset", "hint", "set "+envBotName+" to the AI bot's name, so that \"@name\" in group messages is read as a mention, not text")
	}
}

// checkOwner accepts WeCom UserIDs (letters, digits, _ - . @, at most 64).
func checkOwner(id string) error {
	if len(id) > 64 || strings.ContainsAny(id, " :/,") {
		return fmt.Errorf("%q is not a WeCom UserID (通讯录 → the member → 账号)", id)
	}
	return nil
}
