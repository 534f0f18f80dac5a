package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent/openai"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
	"github.com/personakit/persona/internal/botrun"
	"github.com/personakit/persona/internal/botrun/botruntest"
	"github.com/personakit/persona/internal/logbuf"
)

// waitFor and startBot are the shared bot test helpers (botruntest).
func waitFor(t *testing.T, buf *logbuf.Buffer, re string) []string {
	t.Helper()
	return botruntest.WaitFor(t, buf, re)
}

func startBot(t *testing.T, env map[string]string) *botruntest.Bot {
	t.Helper()
	return botruntest.Start(t, run, env)
}

func newFake(t *testing.T) *telegramtest.Server {
	srv := telegramtest.New(telegramtest.Config{})
	t.Cleanup(srv.Close)
	return srv
}

func envFor(t *testing.T, srv *telegramtest.Server) map[string]string {
	return map[string]string{
		envToken:    srv.Token(),
		envAPI:      srv.URL(),
		envData:     t.TempDir(),
		envOwner:    "777",
		envLogLevel: "debug",
	}
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), botruntest.WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// requireEcho checks the offline demo reply: two messages to chat, the
// first quoting quote (0 = none), the second never.
func requireEcho(t *testing.T, sent []telegramtest.SentMessage, chat, quote int64, said string) {
	t.Helper()
	require.Len(t, sent, 2)
	for _, m := range sent {
		require.Equal(t, "sendMessage", m.Method)
		require.Equal(t, chat, m.Chat.ID)
	}
	require.Contains(t, sent[0].Text, "(offline demo) You said")
	require.Contains(t, sent[0].Text, said)
	require.Equal(t, quote, sent[0].ReplyTo, "reply_parameters of the first chunk")
	require.Equal(t, "(no model configured)", sent[1].Text)
	require.Zero(t, sent[1].ReplyTo, "only the first chunk quotes")
}

// TestPollingEndToEnd runs the bot against the Bot API fake in polling
// mode: a private message is answered through sendMessage, then a group
// @-mention with the quote on the first chunk only, and the getUpdates
// offset lands in the data directory.
func TestPollingEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	env := envFor(t, srv)
	b := startBot(t, env)
	waitFor(t, b.Stdout, `model: +offline demo model: no model is configured`)
	waitFor(t, b.Stdout, `memory: +on \(PERSONA_MEMORY\); agent loop: off \(PERSONA_AGENT\)`)
	waitFor(t, b.Stdout, `telegram: long polling http://127\.0\.0\.1:\d+`)
	ctx := tctx(t)

	alice := telegramtest.User{ID: 5555, FirstName: "Alice"}
	_, err := srv.Push(ctx, telegramtest.Incoming{Chat: telegramtest.Chat{ID: alice.ID, Type: telegramtest.ChatPrivate}, From: alice, Text: "hello there"})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	requireEcho(t, sent, alice.ID, 0, "hello there")

	group := telegramtest.Chat{ID: -1001234567890, Type: telegramtest.ChatSupergroup, Title: "Cooking"}
	m, err := srv.Push(ctx, telegramtest.Incoming{Chat: group, From: alice, Text: "what's for dinner?", MentionBot: true})
	require.NoError(t, err)
	sent, err = srv.WaitSent(ctx, 4)
	require.NoError(t, err)
	requireEcho(t, sent[2:], group.ID, m.MessageID, "what's for dinner?")

	offset := filepath.Join(env[envData], "telegram-"+srv.BotID()+".offset")
	require.Eventually(t, func() bool { _, err := os.Stat(offset); return err == nil }, botruntest.WaitTimeout, 10*time.Millisecond, "offset file %s", offset)

	// A restart on the same data directory answers new messages only.
	require.NoError(t, b.Stop())
	b = startBot(t, env)
	waitFor(t, b.Stderr, `msg=telegram_state .*online=true`)
	_, err = srv.Push(ctx, telegramtest.Incoming{Chat: telegramtest.Chat{ID: alice.ID, Type: telegramtest.ChatPrivate}, From: alice, Text: "back again"})
	require.NoError(t, err)
	sent, err = srv.WaitSent(ctx, 6)
	require.NoError(t, err)
	requireEcho(t, sent[4:], alice.ID, 0, "back again")
	time.Sleep(200 * time.Millisecond)
	require.Len(t, srv.Sent(), 6, "nothing is answered twice")
}

// TestMemoryOffAgentOn: PERSONA_MEMORY=off and PERSONA_AGENT=yes reach the
// pipeline (the banner and the start log say so) and the bot still
// answers, now through the agent loop.
func TestMemoryOffAgentOn(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	env := envFor(t, srv)
	env[envMemory], env[envAgent] = "off", "Yes"
	b := startBot(t, env)
	waitFor(t, b.Stdout, `memory: +off \(PERSONA_MEMORY\); agent loop: on \(PERSONA_AGENT\)`)
	waitFor(t, b.Stderr, `msg=bot_starting .*memory=false agent=true`)
	ctx := tctx(t)
	carol := telegramtest.User{ID: 7777, FirstName: "Carol"}
	_, err := srv.Push(ctx, telegramtest.Incoming{Chat: telegramtest.Chat{ID: carol.ID, Type: telegramtest.ChatPrivate}, From: carol, Text: "agent hello"})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	requireEcho(t, sent, carol.ID, 0, "agent hello")
}

// TestWebhookEndToEnd: with PERSONA_TELEGRAM_WEBHOOK_ADDR the bot
// registers the webhook URL and secret, listens, refuses posts without the
// secret and answers what Telegram posts.
func TestWebhookEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	env := envFor(t, srv)
	env[envWebhookAddr] = "127.0.0.1:0"
	env[envWebhookSecret] = "s3cret_-token"
	env[envWebhookURL] = "https://bot.example/telegram"
	b := startBot(t, env)
	addr := waitFor(t, b.Stderr, `msg=telegram_webhook_listening .*addr=(\S+)`)[1]
	waitFor(t, b.Stdout, `telegram: webhook on 127\.0\.0\.1:0, registering https://bot\.example/telegram with setWebhook`)
	hook, secret := srv.Webhook()
	require.Equal(t, "https://bot.example/telegram", hook)
	require.Equal(t, "s3cret_-token", secret)
	ctx := tctx(t)

	// Without the secret: refused.
	status, _, err := telegramtest.PostWebhook(ctx, "http://"+addr+"/", "wrong", []byte(`{"update_id":1}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, status)

	// Telegram (the fake) posts to where the reverse proxy would forward.
	srv.SetWebhook("http://"+addr+"/telegram", secret)
	bob := telegramtest.User{ID: 6666, FirstName: "Bob"}
	_, err = srv.Push(ctx, telegramtest.Incoming{Chat: telegramtest.Chat{ID: bob.ID, Type: telegramtest.ChatPrivate}, From: bob, Text: "via webhook"})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	requireEcho(t, sent, bob.ID, 0, "via webhook")
	require.Zero(t, srv.Pending(), "the update was acknowledged")
}

// TestWrongToken: a token the Bot API refuses ends the bot with an error
// naming the variable, without the token in it.
func TestWrongToken(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	env := envFor(t, srv)
	env[envToken] = "42:not-the-right-secret"
	ctx := tctx(t)
	var stdout, stderr logbuf.Buffer
	err := run(ctx, func(k string) string { return env[k] }, &stdout, &stderr)
	require.ErrorIs(t, err, telegram.ErrUnauthorized)
	require.ErrorContains(t, err, "check PERSONA_TELEGRAM_TOKEN")
	require.NotContains(t, err.Error(), "not-the-right-secret")
	require.NotContains(t, stderr.String(), "not-the-right-secret")
}

// TestBadConfig: every invalid or missing variable is a clear error that
// names it, returned before anything is created or started.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	const tok = "123456789:AAtest"
	missing := filepath.Join(t.TempDir(), "no-such-SOUL.md")
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"no token", map[string]string{}, []string{"PERSONA_TELEGRAM_TOKEN is required"}},
		{"malformed token", map[string]string{envToken: "not a token"}, []string{"PERSONA_TELEGRAM_TOKEN is malformed"}},
		{"bad API URL", map[string]string{envToken: tok, envAPI: "api.telegram.org"}, []string{`PERSONA_TELEGRAM_API="api.telegram.org"`}},
		{"webhook without secret", map[string]string{envToken: tok, envWebhookAddr: ":8443"}, []string{"PERSONA_TELEGRAM_WEBHOOK_SECRET: required in webhook mode"}},
		{"webhook secret with bad characters", map[string]string{envToken: tok, envWebhookAddr: ":8443", envWebhookSecret: "a b"}, []string{"PERSONA_TELEGRAM_WEBHOOK_SECRET: only A-Z"}},
		{"webhook secret too long", map[string]string{envToken: tok, envWebhookAddr: ":8443", envWebhookSecret: strings.Repeat("x", 257)}, []string{"at most 256"}},
		{"bad webhook URL", map[string]string{envToken: tok, envWebhookAddr: ":8443", envWebhookSecret: "s", envWebhookURL: "bot.example/hook"}, []string{`PERSONA_TELEGRAM_WEBHOOK_URL="bot.example/hook"`}},
		{"webhook settings without ADDR", map[string]string{envToken: tok, envWebhookSecret: "s", envWebhookURL: "https://bot.example/"}, []string{"set PERSONA_TELEGRAM_WEBHOOK_ADDR"}},
		{"owner is a username", map[string]string{envToken: tok, envOwner: "@alice"}, []string{`PERSONA_OWNER: "@alice" is not a numeric Telegram user id`}},
		{"bad log level", map[string]string{envToken: tok, envLogLevel: "chatty"}, []string{`PERSONA_LOG_LEVEL="chatty"`}},
		{"bad memory switch", map[string]string{envToken: tok, envMemory: "maybe"}, []string{`PERSONA_MEMORY="maybe": want on or off`}},
		{"bad agent switch", map[string]string{envToken: tok, envAgent: "2"}, []string{`PERSONA_AGENT="2": want on or off`}},
		{"missing SOUL", map[string]string{envToken: tok, envSoul: missing}, []string{"PERSONA_SOUL:", "no-such-SOUL.md"}},
		{"bad model URL", map[string]string{envToken: tok, openai.EnvBaseURL: "localhost:11434"}, []string{"model (PERSONA_MODEL_BASE_URL"}},
		{"all at once", map[string]string{envOwner: "x", envWebhookAddr: ":8443"}, []string{"PERSONA_TELEGRAM_TOKEN is required", "PERSONA_OWNER", "PERSONA_TELEGRAM_WEBHOOK_SECRET"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := filepath.Join(t.TempDir(), "data")
			tc.env[envData] = data
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), func(k string) string { return tc.env[k] }, &stdout, &stderr)
			require.Error(t, err)
			require.Contains(t, err.Error(), "invalid configuration")
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "AAtest", "the token never appears in errors")
			require.NoDirExists(t, data, "nothing is created for a bad configuration")
			require.Empty(t, stdout.String())
		})
	}
}

// TestConfigDefaults: with only a token, the bot long-polls the official
// Bot API (the shared defaults are internal/botrun's).
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	vars := map[string]string{envToken: "123456789:AAtest"}
	env := botrun.NewEnv(func(k string) string { return vars[k] })
	cfg := readConfig(env)
	require.NoError(t, env.Err())
	require.Equal(t, telegram.ModePolling, cfg.mode())
	require.Equal(t, telegram.DefaultAPIBase, cfg.api)

	vars[envWebhookAddr], vars[envWebhookSecret] = "127.0.0.1:8443", "s"
	env = botrun.NewEnv(func(k string) string { return vars[k] })
	cfg = readConfig(env)
	require.NoError(t, env.Err())
	require.Equal(t, telegram.ModeWebhook, cfg.mode())
}
