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

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/internal/botenv"
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
	cfg, cerr := loadConfig(getenv)
	model, modelDesc, merr := pickModel(getenv)
	if err := errors.Join(cerr, merr); err != nil {
		return fmt.Errorf("invalid configuration:\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.level}))

	ch, err := telegram.New(telegram.Config{
		Token:    cfg.token,
		APIBase:  cfg.api,
		Mode:     cfg.mode(),
		StateDir: cfg.dataDir, // the getUpdates offset survives restarts
		Logger:   log.With("component", "telegram"),
		Webhook: telegram.WebhookConfig{
			SecretToken: cfg.webhookSecret,
			URL:         cfg.webhookURL,
			Addr:        cfg.webhookAddr,
		},
	})
	if err != nil {
		return err
	}
	p, err := persona.New(persona.Options{
		Channels: []channel.Channel{ch},
		DataDir:  cfg.dataDir,
		Persona:  cfg.soul,
		Model:    model,
		Owners:   cfg.owners,
		Aliases:  cfg.aliases,
		Memory:   cfg.memory,
		Agent:    cfg.agent,
		Media:    cfg.media,
		Logger:   log.With("component", "persona"),
	})
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()

	banner(stdout, cfg, modelDesc)
	warnings(log, cfg)
	log.Info("bot_starting", "mode", cfg.mode(), "data", cfg.dataDir, "owners", len(cfg.owners), "memory", cfg.memory, "agent", cfg.agent)
	err = p.Run(ctx)
	log.Info("bot_stopped", "err", err)
	if errors.Is(err, telegram.ErrUnauthorized) {
		return fmt.Errorf("the Bot API refused the token; check %s: %w", envToken, err)
	}
	return err
}

// banner tells the operator, on stdout, what runs and how updates arrive.
func banner(w io.Writer, cfg config, modelDesc string) {
	fmt.Fprintln(w, "persona Telegram bot")
	fmt.Fprintln(w, "  model:    "+modelDesc)
	fmt.Fprintln(w, "  persona:  "+cfg.soulFrom)
	fmt.Fprintln(w, "  data:     "+cfg.dataDir)
	fmt.Fprintf(w, "  memory:   %s (%s); agent loop: %s (%s)\n", botenv.OnOff(cfg.memory), envMemory, botenv.OnOff(cfg.agent), envAgent)
	fmt.Fprintln(w, "  media:    "+cfg.mediaDesc)
	api := cfg.api
	if api == telegram.DefaultAPIBase {
		api = "the official Bot API (" + api + ")"
	}
	if cfg.mode() == telegram.ModePolling {
		fmt.Fprintf(w, "  telegram: long polling %s; the offset is kept in the data directory\n", api)
		return
	}
	reg := "not registering it (no " + envWebhookURL + "; it must be set already)"
	if cfg.webhookURL != "" {
		reg = "registering " + cfg.webhookURL + " with setWebhook"
	}
	fmt.Fprintf(w, "  telegram: webhook on %s, %s; Bot API %s\n", cfg.webhookAddr, reg, api)
}

// warnings logs the risky parts of a configuration that still works.
func warnings(log *slog.Logger, cfg config) {
	if cfg.webhookURL != "" && !strings.HasPrefix(cfg.webhookURL, "https://") && cfg.api == telegram.DefaultAPIBase {
		log.Warn("webhook_not_https", "hint", "Telegram only posts to https:// URLs on port 443, 80, 88 or 8443")
	}
	if len(cfg.owners) == 0 {
		log.Info("no_owners", "hint", "set "+envOwner+" to your numeric Telegram user id to get owner rights")
	}
}

// pickModel returns the configured model, or the offline demo model.
func pickModel(getenv func(string) string) (agent.Model, string, error) {
	m, desc, _, err := botenv.Model(getenv)
	return m, desc, err
}
