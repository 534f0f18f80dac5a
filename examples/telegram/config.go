package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/personakit/persona/channel/telegram"
)

// The environment variables the bot reads (besides the model variables of
// agent/openai.FromEnv).
const (
	envToken         = "PERSONA_TELEGRAM_TOKEN"
	envAPI           = "PERSONA_TELEGRAM_API"
	envWebhookAddr   = "PERSONA_TELEGRAM_WEBHOOK_ADDR"
	envWebhookSecret = "PERSONA_TELEGRAM_WEBHOOK_SECRET"
	envWebhookURL    = "PERSONA_TELEGRAM_WEBHOOK_URL"
	envSoul          = "PERSONA_SOUL"
	envData          = "PERSONA_DATA"
	envOwner         = "PERSONA_OWNER"
	envAliases       = "PERSONA_ALIASES"
	envLogLevel      = "PERSONA_LOG_LEVEL"
)

// defaultDataDir holds the database and the getUpdates offset.
const defaultDataDir = "data/telegram"

// config is the bot's configuration as read from the environment.
type config struct {
	token         string
	api           string
	webhookAddr   string // set: webhook mode
	webhookSecret string
	webhookURL    string

	soul     string // SOUL.md text
	soulFrom string // where it came from, for the banner
	dataDir  string
	owners   []string
	aliases  []string
	level    slog.Level
}

func (c config) mode() telegram.Mode {
	if c.webhookAddr != "" {
		return telegram.ModeWebhook
	}
	return telegram.ModePolling
}

// loadConfig reads and checks the environment. It reports every problem
// at once, each naming its variable; the token never appears in an error.
func loadConfig(getenv func(string) string) (config, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }

	cfg := config{
		token:         get(envToken),
		api:           get(envAPI),
		webhookAddr:   get(envWebhookAddr),
		webhookSecret: get(envWebhookSecret),
		webhookURL:    get(envWebhookURL),
	}
	switch {
	case cfg.token == "":
		bad("%s is required: the bot token from @BotFather (123456789:AA...)", envToken)
	case strings.ContainsAny(cfg.token, " \t/?#%") || !strings.Contains(cfg.token, ":"):
		bad("%s is malformed: want <bot id>:<secret> as issued by @BotFather", envToken)
	}
	if cfg.api == "" {
		cfg.api = telegram.DefaultAPIBase
	} else if u, err := url.Parse(cfg.api); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("%s=%q: want the http(s) base URL of a Bot API server (default %s)", envAPI, cfg.api, telegram.DefaultAPIBase)
	}

	if cfg.webhookAddr == "" {
		if cfg.webhookSecret != "" || cfg.webhookURL != "" {
			bad("%s and %s are only used in webhook mode; set %s (the address to listen on) too, or unset them to poll",
				envWebhookSecret, envWebhookURL, envWebhookAddr)
		}
	} else {
		if err := checkSecret(cfg.webhookSecret); err != nil {
			bad("%s: %w", envWebhookSecret, err)
		}
		if cfg.webhookURL != "" {
			if u, err := url.Parse(cfg.webhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("%s=%q: want the public https:// URL Telegram posts to", envWebhookURL, cfg.webhookURL)
			}
		}
	}

	cfg.soul, cfg.soulFrom = defaultSoul, "built-in SOUL.md (Mira)"
	if path := get(envSoul); path != "" {
		b, err := os.ReadFile(path)
		switch {
		case err != nil:
			bad("%s: %w", envSoul, err)
		case strings.TrimSpace(string(b)) == "":
			bad("%s: %s is empty", envSoul, path)
		default:
			cfg.soul, cfg.soulFrom = string(b), path
		}
	}
	cfg.dataDir = get(envData)
	if cfg.dataDir == "" {
		cfg.dataDir = filepath.FromSlash(defaultDataDir)
	}
	cfg.owners = list(get(envOwner))
	for _, id := range cfg.owners {
		if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
			bad("%s: %q is not a numeric Telegram user id (ask @userinfobot for yours)", envOwner, id)
		}
	}
	cfg.aliases = list(get(envAliases))
	if lv := get(envLogLevel); lv != "" {
		if err := cfg.level.UnmarshalText([]byte(lv)); err != nil {
			bad("%s=%q: want debug, info, warn or error", envLogLevel, lv)
		}
	}
	return cfg, errors.Join(errs...)
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

// list splits a comma-separated variable, dropping blanks.
func list(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
