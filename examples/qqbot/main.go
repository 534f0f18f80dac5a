// Command qqbot is a reference QQ bot on the QQ official bot platform (QQ
// 机器人开放平台): the whole persona pipeline behind the QQ official bot
// adapter (channel/qqbot). It answers @-messages in QQ groups, one-to-one
// (C2C) messages, guild channel @-messages and guild direct messages.
//
//	PERSONA_QQ_APP_ID=102000001 PERSONA_QQ_SECRET=… go run ./examples/qqbot
//
// It is configured by environment variables:
//
//   - PERSONA_QQ_APP_ID, PERSONA_QQ_SECRET: the bot's AppID and AppSecret
//     from the QQ bot console (required; the secret is never logged).
//   - PERSONA_QQ_MODE: gateway (default; the bot connects to the WebSocket
//     gateway and needs no public address) or webhook (the platform posts
//     signed callbacks to PERSONA_HTTP_ADDR, default 127.0.0.1:8080,
//     behind the HTTPS callback URL set in the console).
//   - PERSONA_QQ_SANDBOX: use the sandbox OpenAPI; off by default.
//   - PERSONA_QQ_INTENTS: gateway mode, the events to subscribe to, a
//     comma-separated list of group_c2c (QQ groups and C2C), guild_at
//     (guild channel @-messages) and guild_dm (guild direct messages);
//     default all three. The bot must have been granted each.
//   - PERSONA_QQ_MARKDOWN: send replies as markdown (needs the markdown
//     permission); off by default.
//   - PERSONA_QQ_ACTIVE_MESSAGES: when no message can be replied to any
//     more, send an active message instead of giving up (the platform
//     stopped offering them in April 2025); off by default.
//   - PERSONA_QQ_API, PERSONA_QQ_TOKEN_URL: override the OpenAPI base and
//     the token endpoint (tests).
//   - the shared variables of every reference bot (model, PERSONA_SOUL,
//     PERSONA_DATA, default ./data/qqbot, PERSONA_OWNER as openids,
//     PERSONA_ALIASES, PERSONA_LOG_LEVEL, PERSONA_MEMORY, PERSONA_AGENT,
//     PERSONA_MODEL_VISION, PERSONA_MEDIA, PERSONA_TRANSCRIBE_MODEL).
//
// The gateway session and the reply ledger (which msg_seq each sent chunk
// used) live in the data directory, so a restart resumes the session and
// never sends a chunk twice. SIGINT or SIGTERM stops the bot gracefully.
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
	"syscall"

	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/internal/botrun"
)

//go:embed SOUL.md
var defaultSoul string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "qqbot:", err)
		os.Exit(1)
	}
}

// run is main without the process globals, so the bot is testable: it
// serves until ctx ends (then returns nil) or fails.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	return botrun.Run(ctx, getenv, stdout, stderr, platform())
}

// platform is the QQ part of the shared runner.
func platform() botrun.Platform {
	return botrun.Platform{Title: "persona QQ official bot", DataDir: defaultDataDir, Soul: defaultSoul,
		SoulName: "built-in SOUL.md (Mira)", Owner: checkOwner, Setup: setup,
		MapError: func(err error) error {
			var ge *qqbot.GatewayError
			switch {
			case errors.Is(err, qqbot.ErrUnauthorized):
				return fmt.Errorf("the platform refused the credentials; check %s and %s: %w", envAppID, envSecret, err)
			case errors.As(err, &ge) && (ge.Code == 4013 || ge.Code == 4014):
				return fmt.Errorf("the gateway refused the intents; set %s to the events the bot was granted: %w", envIntents, err)
			}
			return err
		}}
}

// setup reads the QQ variables and builds the adapter.
func setup(env *botrun.Env, s *botrun.Start) (*botrun.Setup, error) {
	cfg := readConfig(env)
	if !env.OK() {
		return nil, nil
	}
	ch, err := qqbot.New(qqbot.Config{
		AppID:          cfg.appID,
		Secret:         cfg.secret,
		Mode:           cfg.mode,
		APIBase:        cfg.api,
		TokenURL:       cfg.tokenURL,
		Intents:        cfg.intents,
		Markdown:       cfg.markdown,
		ActiveMessages: cfg.active,
		StateDir:       s.DataDir, // the session and the reply ledger survive restarts
		Clock:          s.Clock,
		Logger:         s.Log.With("component", "qqbot"),
	})
	if err != nil {
		return nil, err
	}
	out := &botrun.Setup{Channel: ch, Banner: []string{banner(cfg)}, Warn: func(log *slog.Logger) { warnings(log, cfg) }}
	if cfg.mode == qqbot.ModeWebhook {
		out.Handler = ch
	}
	return out, nil
}

// banner tells the operator how the bot is connected.
func banner(cfg config) string {
	if cfg.mode == qqbot.ModeWebhook {
		return fmt.Sprintf("  qqbot:    webhook: point the console's callback URL (HTTPS, port 80/443/8080/8443) at the address below; OpenAPI %s", cfg.api)
	}
	return fmt.Sprintf("  qqbot:    gateway WebSocket of %s, intents %s; session and reply ledger in the data directory", cfg.api, cfg.intentList)
}

// warnings logs the risky parts of a configuration that still works.
func warnings(log *slog.Logger, cfg config) {
	if cfg.active {
		log.Warn("active_messages_on", "hint", "the platform refuses active messages (40034102) unless the bot still has them; such sends fail as rejected")
	}
}
