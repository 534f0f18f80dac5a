// Command feishu is a reference Feishu / Lark bot: the whole persona
// pipeline behind the Feishu adapter (channel/feishu).
//
//	PERSONA_FEISHU_APP_ID=cli_… PERSONA_FEISHU_APP_SECRET=… PERSONA_FEISHU_MODE=ws go run ./examples/feishu
//
// It is configured by environment variables:
//
//   - PERSONA_FEISHU_APP_ID, PERSONA_FEISHU_APP_SECRET: the app's
//     credentials from the developer console (required; the secret is
//     never logged).
//   - PERSONA_FEISHU_MODE: webhook (default: Feishu POSTs events to this
//     bot, served on PERSONA_HTTP_ADDR) or ws (the bot opens the long
//     connection; no public address needed, self-built apps only).
//   - PERSONA_FEISHU_VERIFICATION_TOKEN: the event subscription's
//     Verification Token (required in webhook mode).
//   - PERSONA_FEISHU_ENCRYPT_KEY: the event subscription's Encrypt Key
//     (optional, recommended in webhook mode: callbacks are then
//     encrypted and signed, and unsigned or stale ones are refused).
//   - PERSONA_FEISHU_DOMAIN: feishu (default, open.feishu.cn), lark
//     (open.larksuite.com), or the base URL of another Open Platform host.
//   - PERSONA_HTTP_ADDR: where webhook mode listens (default
//     127.0.0.1:8080; every path is served).
//   - PERSONA_MODEL_BASE_URL, PERSONA_MODEL_API_KEY (or OPENAI_API_KEY),
//     PERSONA_MODEL: the OpenAI-compatible model, as for examples/console;
//     without them an offline demo model echoes.
//   - PERSONA_SOUL: path to a SOUL.md (default: the built-in Mira).
//   - PERSONA_DATA: data directory (default ./data/feishu).
//   - PERSONA_OWNER, PERSONA_ALIASES: comma-separated owner open_ids
//     (ou_…) and names the bot answers to.
//   - PERSONA_LOG_LEVEL: debug, info (default), warn or error; logs go to
//     stderr.
//   - PERSONA_MEMORY, PERSONA_AGENT, PERSONA_MODEL_VISION, PERSONA_MEDIA,
//     PERSONA_TRANSCRIBE_MODEL: as for the other reference bots.
//
// SIGINT or SIGTERM stops it gracefully: in-flight turns are released to
// the durable queue and picked up again on the next start.
package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/personakit/persona/internal/botrun"
)

//go:embed SOUL.md
var defaultSoul string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "feishu:", err)
		os.Exit(1)
	}
}

// run is main without the process globals, so the bot is testable: it
// serves until ctx ends (then returns nil) or fails.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	return botrun.Run(ctx, getenv, stdout, stderr, platform())
}
