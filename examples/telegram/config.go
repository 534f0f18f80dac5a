package main

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/internal/botenv"
	"github.com/personakit/persona/internal/botrun"
)

// The environment variables the bot reads (besides the model variables of
// agent/openai.FromEnv).
const (
	envToken         = "PERSONA_TELEGRAM_TOKEN"
	envAPI           = "PERSONA_TELEGRAM_API"
	envWebhookAddr   = "PERSONA_TELEGRAM_WEBHOOK_ADDR"
	envWebhookSecret = "PERSONA_TELEGRAM_WEBHOOK_SECRET"
	envWebhookURL    = "PERSONA_TELEGRAM_WEBHOOK_URL"
	envSoul          = botenv.EnvSoul
	envData          = botenv.EnvData
	envOwner         = botenv.EnvOwner
	envAliases       = botenv.EnvAliases
	envLogLevel      = botenv.EnvLogLevel
	envMemory        = botenv.EnvMemory
	envAgent         = botenv.EnvAgent
)

// defaultDataDir holds the database and the getUpdates offset.
const defaultDataDir = "data/telegram"

// config is the platform part of the configuration, as read from the
// environment (the shared part is read by the runner, internal/botrun).
type config struct {
	token         string
	api           string
	webhookAddr   string // set: webhook mode
	webhookSecret string
	webhookURL    string
}

func (c config) mode() telegram.Mode {
	if c.webhookAddr != "" {
		return telegram.ModeWebhook
	}
	return telegram.ModePolling
}

// readConfig reads and checks the Telegram variables; problems go to env,
// and the token never appears in one.
func readConfig(env *botrun.Env) config {
	cfg := config{
		token:         env.Get(envToken),
		api:           env.Get(envAPI),
		webhookAddr:   env.Get(envWebhookAddr),
		webhookSecret: env.Get(envWebhookSecret),
		webhookURL:    env.Get(envWebhookURL),
	}
	switch {
	case cfg.token == "":
		env.Bad("%s is required: the bot token from @BotFather (123456789:AA...)", envToken)
	case strings.ContainsAny(cfg.token, " \t/?#%") || !strings.Contains(cfg.token, ":"):
		env.Bad("%s is malformed: want <bot id>:<secret> as issued by @BotFather", envToken)
	}
	if cfg.api == "" {
		cfg.api = telegram.DefaultAPIBase
	} else if u, err := url.Parse(cfg.api); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		env.Bad("%s=%q: want the http(s) base URL of a Bot API server (default %s)", envAPI, cfg.api, telegram.DefaultAPIBase)
	}
	if cfg.webhookAddr == "" {
		if cfg.webhookSecret != "" || cfg.webhookURL != "" {
			env.Bad("%s and %s are only used in webhook mode; set %s (the address to listen on) too, or unset them to poll",
				envWebhookSecret, envWebhookURL, envWebhookAddr)
		}
	} else {
		if err := checkSecret(cfg.webhookSecret); err != nil {
			env.Bad("%s: %w", envWebhookSecret, err)
		}
		if cfg.webhookURL != "" {
			if u, err := url.Parse(cfg.webhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				env.Bad("%s=%q: want the public https:// URL Telegram posts to", envWebhookURL, cfg.webhookURL)
			}
		}
	}
	return cfg
}

// checkSecret applies the setWebhook secret_token rules.
func checkSecret(s string) error {
	if s == "" {
		return fmt.Errorf("required in webhook mode (1-256 characters of A-Z, a-z, 0-9, _ and -; Telegram sends it in %s)", telegram.SecretTokenHeader)
	}
	if len(s) > 256 {
		return fmt.Errorf("%d characters, at most 256 allowed", len(s))
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
		if !ok {
			return errors.New("only A-Z, a-z, 0-9, _ and - are allowed")
		}
	}
	return nil
}

// checkOwner accepts only positive numeric account ids.
func checkOwner(id string) error {
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
		return fmt.Errorf("%q is not a numeric Telegram user id (ask @userinfobot for yours)", id)
	}
	return nil
}
