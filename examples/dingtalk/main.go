// Command dingtalk is a reference DingTalk (钉钉) bot: the whole persona
// pipeline behind the Stream-mode robot adapter (channel/dingtalk). It
// dials out to DingTalk, so it needs no public address.
//
//	PERSONA_DINGTALK_CLIENT_ID=dingxxxx PERSONA_DINGTALK_CLIENT_SECRET=... go run ./examples/dingtalk
//
// It is configured by environment variables:
//
//   - PERSONA_DINGTALK_CLIENT_ID: the app's Client ID (formerly AppKey)
//     from the DingTalk developer console (required).
//   - PERSONA_DINGTALK_CLIENT_SECRET: the app's Client Secret (formerly
//     AppSecret) (required; never logged).
//   - PERSONA_DINGTALK_ROBOT_CODE: the robot's RobotCode (default: the
//     Client ID, which it is for an internal app's robot).
//   - PERSONA_DINGTALK_API: the OpenAPI base URL (default
//     https://api.dingtalk.com; a test fake serves the session webhooks
//     too).
//   - PERSONA_DINGTALK_MARKDOWN: send every message as markdown (off by
//     default: plain text).
//   - PERSONA_DINGTALK_QUOTE: a reply opens with a quote of the message it
//     answers, since DingTalk robots cannot reference one (on by
//     default).
//   - PERSONA_MODEL_BASE_URL, PERSONA_MODEL_API_KEY (or OPENAI_API_KEY),
//     PERSONA_MODEL: the OpenAI-compatible model, as for examples/console;
//     without them an offline demo model echoes.
//   - PERSONA_SOUL: path to a SOUL.md (default: the built-in Mira).
//   - PERSONA_DATA: data directory (default ./data/dingtalk).
//   - PERSONA_OWNER, PERSONA_ALIASES: comma-separated owner user ids
//     (DingTalk userId) and names the bot answers to.
//   - PERSONA_LOG_LEVEL: debug, info (default), warn or error; logs go to
//     stderr.
//   - PERSONA_MEMORY, PERSONA_AGENT, PERSONA_MODEL_VISION, PERSONA_MEDIA,
//     PERSONA_TRANSCRIBE_MODEL: as for the other reference bots (memory
//     and media on, agent loop and vision off by default). DingTalk
//     transcribes voice messages itself; its transcript is used.
//
// The switches take 1/0, true/false, on/off or yes/no (any case); any
// other value stops the bot at start.
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

	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/internal/botrun"
)

//go:embed SOUL.md
var defaultSoul string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dingtalk:", err)
		os.Exit(1)
	}
}

// run is main without the process globals, so the bot is testable: it
// serves until ctx ends (then returns nil) or fails.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	return botrun.Run(ctx, getenv, stdout, stderr, platform())
}

// platform is the DingTalk part of the shared runner.
func platform() botrun.Platform {
	return botrun.Platform{Title: "persona DingTalk bot", DataDir: defaultDataDir, Soul: defaultSoul,
		SoulName: "built-in SOUL.md (Mira)", Owner: checkOwner, Setup: setup, MapError: mapError}
}

// setup reads the DingTalk variables and builds the adapter.
func setup(env *botrun.Env, s *botrun.Start) (*botrun.Setup, error) {
	cfg := readConfig(env)
	if !env.OK() {
		return nil, nil
	}
	ch, err := dingtalk.New(dingtalk.Config{
		ClientID:     cfg.clientID,
		ClientSecret: cfg.secret,
		RobotCode:    cfg.robotCode,
		APIBase:      cfg.api,
		Markdown:     cfg.markdown,
		PlainReplies: !cfg.quote,
		Clock:        s.Clock,
		Logger:       s.Log.With("component", "dingtalk"),
	})
	if err != nil {
		return nil, err
	}
	return &botrun.Setup{Channel: ch, Banner: banner(cfg, ch), Warn: func(log *slog.Logger) { warnings(log, cfg) }}, nil
}

// banner tells the operator what the adapter connects to.
func banner(cfg config, ch *dingtalk.Channel) []string {
	api := cfg.api
	if api == dingtalk.DefaultAPIBase {
		api = "the DingTalk OpenAPI (" + api + ")"
	}
	format := "plain text"
	if cfg.markdown {
		format = "markdown"
	}
	if cfg.quote {
		format += ", replies quote the message they answer"
	}
	return []string{
		fmt.Sprintf("  dingtalk: Stream mode through %s, app %s, robot %s", api, cfg.clientID, ch.BotID()),
		"            answers through each conversation's session webhook, else the robot API; " + format,
	}
}

// warnings logs the risky parts of a configuration that still works.
func warnings(log *slog.Logger, cfg config) {
	if strings.HasPrefix(cfg.api, "http://") {
		log.Warn("dingtalk_api_not_https", "hint", envAPI+" is plain http: the client secret and tokens travel unencrypted (fine for a local test fake only)")
	}
}

// mapError explains a refusal of the credentials.
func mapError(err error) error {
	if errors.Is(err, dingtalk.ErrUnauthorized) {
		return fmt.Errorf("DingTalk refused the app credentials; check %s and %s (and that the app is published with the robot in Stream mode): %w",
			envClientID, envClientSecret, err)
	}
	return err
}
