// Command telegram is a reference Telegram bot: the whole persona pipeline
// behind the Bot API adapter (channel/telegram).
//
//	PERSONA_TELEGRAM_TOKEN=123456789:AA... go run ./examples/telegram
//
// It is configured by environment variables:
//
//   - PERSONA_TELEGRAM_TOKEN: the bot token from @BotFather (required;
//     never logged).
//   - PERSONA_TELEGRAM_API: the Bot API base URL (default
//     https://api.telegram.org; a self-hosted telegram-bot-api server or a
//     test fake).
//   - PERSONA_TELEGRAM_WEBHOOK_ADDR: when set, webhook mode, listening on
//     this address (e.g. 127.0.0.1:8443 behind an HTTPS reverse proxy);
//     otherwise long polling with getUpdates, the offset kept in the data
//     directory.
//   - PERSONA_TELEGRAM_WEBHOOK_SECRET: the webhook secret token (required
//     in webhook mode; 1-256 of A-Z a-z 0-9 _ -). Every request without it
//     in X-Telegram-Bot-Api-Secret-Token is refused.
//   - PERSONA_TELEGRAM_WEBHOOK_URL: the public HTTPS URL Telegram posts to;
//     when set the bot registers it (setWebhook) on every start, otherwise
//     it must be registered already.
//   - PERSONA_MODEL_BASE_URL, PERSONA_MODEL_API_KEY (or OPENAI_API_KEY),
//     PERSONA_MODEL: the OpenAI-compatible model, as for examples/console;
//     without them an offline demo model echoes.
//   - PERSONA_SOUL: path to a SOUL.md (default: the built-in Mira).
//   - PERSONA_DATA: data directory (default ./data/telegram).
//   - PERSONA_OWNER, PERSONA_ALIASES: comma-separated owner user ids and
//     names the bot answers to.
//   - PERSONA_LOG_LEVEL: debug, info (default), warn or error; logs go to
//     stderr.
//   - PERSONA_MEMORY: long-term memory (recalled facts and history in the
//     prompt, summaries, fact extraction after replies); on by default.
//   - PERSONA_AGENT: the agent tool loop instead of one model call per
//     reply; off by default.
//   - PERSONA_MODEL_VISION: the model takes pictures (off by default: then
//     photos reach it as "[image]").
//   - PERSONA_MEDIA: photos, stickers and voice notes fetched (getFile)
//     into the media cache in the data directory; on by default.
//   - PERSONA_TRANSCRIBE_MODEL: a speech-to-text model on the model's
//     server (e.g. whisper-1); unset, voice notes are not transcribed.
//
// PERSONA_MEMORY, PERSONA_AGENT, PERSONA_MODEL_VISION and PERSONA_MEDIA take 1/0, true/false, on/off or yes/no
// (any case); any other value stops the bot at start.
//
// SIGINT or SIGTERM stops it gracefully: in-flight turns are released to
// the durable queue and picked up again on the next start.
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/internal/botrun"
)

//go:embed SOUL.md
var defaultSoul string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "telegram:", err)
		os.Exit(1)
	}
}

// run is main without the process globals, so the bot is testable: it
// serves until ctx ends (then returns nil) or fails.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	return botrun.Run(ctx, getenv, stdout, stderr, platform())
}

// platform is the Telegram part of the shared runner.
func platform() botrun.Platform {
	return botrun.Platform{Title: "persona Telegram bot", DataDir: defaultDataDir, Soul: defaultSoul,
		SoulName: "built-in SOUL.md (Mira)", Owner: checkOwner, Setup: setup,
		MapError: func(err error) error {
			if errors.Is(err, telegram.ErrUnauthorized) {
				return fmt.Errorf("the Bot API refused the token; check %s: %w", envToken, err)
			}
			return err
		}}
}

// setup reads the Telegram variables and builds the adapter.
func setup(env *botrun.Env, s *botrun.Start) (*botrun.Setup, error) {
	cfg := readConfig(env)
	if !env.OK() {
		return nil, nil
	}
	ch, err := telegram.New(telegram.Config{
		Token:    cfg.token,
		APIBase:  cfg.api,
		Mode:     cfg.mode(),
		StateDir: s.DataDir, // the getUpdates offset survives restarts
		Logger:   s.Log.With("component", "telegram"),
		Webhook: telegram.WebhookConfig{
			SecretToken: cfg.webhookSecret,
			URL:         cfg.webhookURL,
			Addr:        cfg.webhookAddr,
		},
	})
	if err != nil {
		return nil, err
	}
	return &botrun.Setup{Channel: ch, Banner: []string{banner(cfg)}, Warn: func(log *slog.Logger) { warnings(log, cfg) }}, nil
}

// banner tells the operator how updates arrive.
func banner(cfg config) string {
	api := cfg.api
	if api == telegram.DefaultAPIBase {
		api = "the official Bot API (" + api + ")"
	}
	if cfg.mode() == telegram.ModePolling {
		return fmt.Sprintf("  telegram: long polling %s; the offset is kept in the data directory", api)
	}
	reg := "not registering it (no " + envWebhookURL + "; it must be set already)"
	if cfg.webhookURL != "" {
		reg = "registering " + cfg.webhookURL + " with setWebhook"
	}
	return fmt.Sprintf("  telegram: webhook on %s, %s; Bot API %s", cfg.webhookAddr, reg, api)
}

// warnings logs the risky parts of a configuration that still works.
func warnings(log *slog.Logger, cfg config) {
	if cfg.webhookURL != "" && !strings.HasPrefix(cfg.webhookURL, "https://") && cfg.api == telegram.DefaultAPIBase {
		log.Warn("webhook_not_https", "hint", "Telegram only posts to https:// URLs on port 443, 80, 88 or 8443")
	}
}
