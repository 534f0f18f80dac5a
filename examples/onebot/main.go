// Command onebot is a reference QQ bot: the whole persona pipeline behind
// the OneBot v11 adapter (channel/onebot), for NapCat, Lagrange.OneBot,
// LLOneBot or go-cqhttp.
//
//	PERSONA_ONEBOT_TOKEN=change-me go run ./examples/onebot
//
// It is configured by environment variables:
//
//   - PERSONA_ONEBOT_MODE: reverse-ws (default; the implementation dials
//     us), forward-ws (we dial the implementation) or http (we call its HTTP
//     API and it POSTs events to us).
//   - PERSONA_ONEBOT_ADDR: where reverse-ws listens for the WebSocket and
//     http listens for the event POSTs (default 127.0.0.1:8080; any path is
//     accepted, so ws://HOST:PORT/ works).
//   - PERSONA_ONEBOT_URL: the implementation's forward WebSocket URL
//     (ws://host:port/) or HTTP API base URL (http://host:port).
//   - PERSONA_ONEBOT_TOKEN: the OneBot access token (both directions).
//   - PERSONA_ONEBOT_SECRET: the HTTP POST secret (http mode; X-Signature).
//   - PERSONA_ONEBOT_DIALECT: napcat (default), lagrange or gocqhttp, the
//     parameters of the history calls used for backfill after a reconnect.
//   - PERSONA_ONEBOT_MEDIA_ROOT: an absolute directory where the
//     implementation keeps its files, when it answers get_image and
//     get_record with local paths on this machine (unset: such answers are
//     refused; URLs and base64 answers work either way).
//   - PERSONA_MODEL_BASE_URL, PERSONA_MODEL_API_KEY (or OPENAI_API_KEY),
//     PERSONA_MODEL: the OpenAI-compatible model, as for examples/console;
//     without them an offline demo model echoes.
//   - PERSONA_SOUL: path to a SOUL.md (default: the built-in Mira).
//   - PERSONA_DATA: data directory (default ./data/onebot).
//   - PERSONA_OWNER, PERSONA_ALIASES: comma-separated owner QQ numbers and
//     names the bot answers to.
//   - PERSONA_LOG_LEVEL: debug, info (default), warn or error; logs go to
//     stderr.
//   - PERSONA_MEMORY: long-term memory (recalled facts and history in the
//     prompt, summaries, fact extraction after replies); on by default.
//   - PERSONA_AGENT: the agent tool loop instead of one model call per
//     reply; off by default.
//   - PERSONA_MODEL_VISION: the model takes pictures (off by default: then
//     pictures reach it as "[image]").
//   - PERSONA_MEDIA: pictures, stickers and voice fetched into the media
//     cache in the data directory; on by default.
//   - PERSONA_TRANSCRIBE_MODEL: a speech-to-text model on the model's
//     server (e.g. whisper-1); unset, voice clips are not transcribed.
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
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/internal/botrun"
)

//go:embed SOUL.md
var defaultSoul string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "onebot:", err)
		os.Exit(1)
	}
}

// run is main without the process globals, so the bot is testable: it
// serves until ctx ends (then returns nil) or fails.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	return botrun.Run(ctx, getenv, stdout, stderr, platform())
}

// platform is the OneBot part of the shared runner.
func platform() botrun.Platform {
	return botrun.Platform{Title: "persona OneBot v11 bot", DataDir: defaultDataDir, Soul: defaultSoul,
		SoulName: "built-in SOUL.md (Mira)", Owner: checkOwner, Setup: setup}
}

// setup reads the OneBot variables and builds the adapter (listening first
// in reverse-ws and http mode).
func setup(env *botrun.Env, s *botrun.Start) (*botrun.Setup, error) {
	cfg := readConfig(env)
	if !env.OK() {
		return nil, nil
	}
	var ln net.Listener
	if cfg.listen != "" {
		var err error
		if ln, err = net.Listen("tcp", cfg.listen); err != nil {
			return nil, fmt.Errorf("%s=%s: %w", envAddr, cfg.listen, err)
		}
	}
	closeLn := func() {
		if ln != nil {
			_ = ln.Close() // normally closed by the adapter already
		}
	}
	ch, err := onebot.New(onebot.Config{
		Mode:           cfg.mode,
		Listener:       ln,
		URL:            cfg.url,
		AccessToken:    cfg.token,
		Secret:         cfg.secret,
		HistoryDialect: cfg.dialect,
		MediaRoot:      cfg.mediaRoot,
		Logger:         s.Log.With("component", "onebot"),
	})
	if err != nil {
		closeLn()
		return nil, err
	}
	return &botrun.Setup{Channel: ch, Banner: []string{banner(cfg, ln)}, Warn: func(log *slog.Logger) { warnings(log, cfg) },
		Close: closeLn}, nil
}

// banner tells the operator where to point the OneBot implementation.
func banner(cfg config, ln net.Listener) string {
	token := "no access token (set " + envToken + ")"
	if cfg.token != "" {
		token = "the access token from " + envToken
	}
	switch cfg.mode {
	case onebot.ModeReverseWS:
		return fmt.Sprintf("  onebot:   reverse WebSocket: point the implementation's WebSocket client at %s with %s", botrun.HostURL("ws", ln.Addr()), token)
	case onebot.ModeForwardWS:
		return fmt.Sprintf("  onebot:   forward WebSocket: dialling %s with %s", cfg.url, token)
	}
	sig := "unsigned (set " + envSecret + ")"
	if cfg.secret != "" {
		sig = "signed with " + envSecret
	}
	return fmt.Sprintf("  onebot:   HTTP: calling the API at %s with %s; point the implementation's HTTP POST at %s (%s)",
		cfg.url, token, botrun.HostURL("http", ln.Addr()), sig)
}

// warnings logs the risky parts of a configuration that still works.
func warnings(log *slog.Logger, cfg config) {
	if cfg.token == "" {
		log.Warn("no_access_token", "hint", "anyone who can reach the implementation or this bot can act for the other; set "+envToken)
	}
	if cfg.mode == onebot.ModeHTTP && cfg.secret == "" {
		log.Warn("unsigned_http_events", "hint", "event POSTs are not verified; set "+envSecret+" and the same secret in the implementation")
	}
}
