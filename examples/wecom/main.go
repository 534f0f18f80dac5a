// Command wecom is a reference WeCom (企业微信) bot: the whole persona
// pipeline behind the WeCom adapter (channel/wecom), as a self-built app
// or an AI bot (智能机器人).
//
//	PERSONA_WECOM_MODE=aibot-ws PERSONA_WECOM_BOT_ID=… PERSONA_WECOM_SECRET=… go run ./examples/wecom
//
// It is configured by environment variables:
//
//   - PERSONA_WECOM_MODE: app (a self-built app: encrypted XML callbacks,
//     replies through message/send), aibot (an AI bot with a callback URL:
//     encrypted JSON callbacks answered with streams) or aibot-ws (an AI
//     bot on the long connection; no public address needed). Required.
//   - PERSONA_WECOM_TOKEN, PERSONA_WECOM_AES_KEY: the callback's Token and
//     EncodingAESKey (app and aibot; never logged).
//   - PERSONA_WECOM_CORP_ID, PERSONA_WECOM_AGENT_ID: the corp id and the
//     app's AgentId (app).
//   - PERSONA_WECOM_SECRET: the app's Secret (app) or the AI bot's Secret
//     (aibot-ws); never logged.
//   - PERSONA_WECOM_BOT_ID: the AI bot's Bot ID (required in aibot-ws;
//     optional in aibot, where callbacks of another bot are then refused).
//   - PERSONA_WECOM_BOT_NAME: the AI bot's name, so that "@name" in group
//     messages is read as a mention (optional).
//   - PERSONA_WECOM_API, PERSONA_WECOM_WS_URL: the API base (default
//     https://qyapi.weixin.qq.com) and the long-connection URL (default
//     wss://openws.work.weixin.qq.com), for proxies and tests.
//   - PERSONA_HTTP_ADDR: where app and aibot mode serve the callback URL
//     (default 127.0.0.1:8080; every path is served).
//   - PERSONA_MODEL_BASE_URL, PERSONA_MODEL_API_KEY (or OPENAI_API_KEY),
//     PERSONA_MODEL: the OpenAI-compatible model, as for examples/console;
//     without them an offline demo model echoes.
//   - PERSONA_SOUL: path to a SOUL.md (default: the built-in Mira).
//   - PERSONA_DATA: data directory (default ./data/wecom); it also keeps
//     the AI bot's open streams across restarts.
//   - PERSONA_OWNER, PERSONA_ALIASES: comma-separated owner UserIDs and
//     names the bot answers to.
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
		fmt.Fprintln(os.Stderr, "wecom:", err)
		os.Exit(1)
	}
}

// run is main without the process globals, so the bot is testable: it
// serves until ctx ends (then returns nil) or fails.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	return botrun.Run(ctx, getenv, stdout, stderr, platform())
}
