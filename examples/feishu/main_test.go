package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
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

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), botruntest.WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func envFor(t *testing.T, srv *feishutest.Server) map[string]string {
	return map[string]string{
		envAppID:     srv.AppID(),
		envAppSecret: srv.AppSecret(),
		envDomain:    srv.URL(),
		envData:      t.TempDir(),
		envOwner:     "ou_owner_1",
		envLogLevel:  "debug",
	}
}

var (
	alice = feishutest.User{OpenID: "ou_84aad35d084aa403a838cf73ee18467", Name: "Alice"}
	group = "oc_5ce6d572455d361153b7xx51da133945"
)

// requireEcho checks the offline demo reply: two messages, the first
// replying to quote ("" = a plain send), the second never.
func requireEcho(t *testing.T, sent []feishutest.SentMessage, quote, said string) {
	t.Helper()
	require.Len(t, sent, 2)
	require.Contains(t, sent[0].Text, "(offline demo) You said")
	require.Contains(t, sent[0].Text, said)
	require.Equal(t, quote, sent[0].ParentID, "the first chunk replies to the message")
	require.Equal(t, "(no model configured)", sent[1].Text)
	require.Empty(t, sent[1].ParentID, "only the first chunk replies")
	require.NotEmpty(t, sent[0].UUID, "every chunk carries its send uuid")
	require.NotEqual(t, sent[0].UUID, sent[1].UUID)
}

// TestLongConnectionEndToEnd runs the bot on the long connection against
// the fake: a private message and a group @-mention are answered.
func TestLongConnectionEndToEnd(t *testing.T) {
	t.Parallel()
	srv := feishutest.New(feishutest.Config{})
	t.Cleanup(srv.Close)
	env := envFor(t, srv)
	env[envMode] = "ws"
	b := startBot(t, env)
	waitFor(t, b.Stdout, `model: +offline demo model: no model is configured`)
	waitFor(t, b.Stdout, `feishu: +long connection to 127\.0\.0\.1:\d+ for app `+srv.AppID())
	waitFor(t, b.Stderr, `msg=feishu_state .*online=true`)
	ctx := tctx(t)

	_, err := srv.Push(ctx, feishutest.Incoming{From: alice, Text: "hello there"})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	requireEcho(t, sent, "", "hello there") // private replies do not quote
	require.Equal(t, srv.P2PChatID(alice.OpenID), sent[0].ChatID)

	p, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "what's for dinner?", MentionBot: true})
	require.NoError(t, err)
	sent, err = srv.WaitSent(ctx, 4)
	require.NoError(t, err)
	requireEcho(t, sent[2:], p.MessageID, "what's for dinner?")
	require.Equal(t, group, sent[2].ChatID)

	// Nothing else goes out (no duplicate chunk), and the secret was
	// never printed.
	time.Sleep(200 * time.Millisecond)
	require.Len(t, srv.Sent(), 4)
	require.NotContains(t, b.Stdout.String()+b.Stderr.String(), srv.AppSecret())
}

// TestWebhookEndToEnd runs the bot in webhook mode (encrypted and signed
// callbacks) on PERSONA_HTTP_ADDR: the console's URL verification
// passes, and a group @-mention is answered.
func TestWebhookEndToEnd(t *testing.T) {
	t.Parallel()
	srv := feishutest.New(feishutest.Config{EncryptKey: "e2e encrypt key"})
	t.Cleanup(srv.Close)
	env := envFor(t, srv)
	env[envHTTPAddr] = "127.0.0.1:0"
	env[envVerificationToken] = srv.VerificationToken()
	env[envEncryptKey] = srv.EncryptKey()
	b := startBot(t, env)
	waitFor(t, b.Stdout, `feishu: +event callbacks \(encrypted and signed\) for app `+srv.AppID())
	u := waitFor(t, b.Stdout, `http: +serving callbacks at (http://127\.0\.0\.1:\d+/)`)[1]
	waitFor(t, b.Stderr, `msg=feishu_state .*online=true`)
	srv.SetCallback(u + "feishu/events")
	ctx := tctx(t)
	require.NoError(t, srv.VerifyCallback(ctx))

	p, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, Text: "are you there?", MentionBot: true})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	requireEcho(t, sent, p.MessageID, "are you there?")
	time.Sleep(200 * time.Millisecond)
	require.Len(t, srv.Sent(), 2)
	out := b.Stdout.String() + b.Stderr.String()
	for _, secret := range []string{srv.AppSecret(), srv.EncryptKey(), srv.VerificationToken()} {
		require.NotContains(t, out, secret)
	}
}

// TestUnauthorized: wrong credentials stop the bot with an error that
// names the variables.
func TestUnauthorized(t *testing.T) {
	t.Parallel()
	srv := feishutest.New(feishutest.Config{})
	t.Cleanup(srv.Close)
	env := envFor(t, srv)
	env[envMode] = "ws"
	env[envAppSecret] = "not-the-secret"
	var stdout, stderr bytes.Buffer
	err := run(tctx(t), func(k string) string { return env[k] }, &stdout, &stderr)
	require.ErrorIs(t, err, feishu.ErrUnauthorized)
	require.ErrorContains(t, err, envAppSecret)
	require.NotContains(t, err.Error()+stdout.String()+stderr.String(), "not-the-secret")
}

// TestBadConfig: every invalid or missing variable is a clear error that
// names it, returned before anything is created or started.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"nothing set", map[string]string{}, []string{"PERSONA_FEISHU_APP_ID is required", "PERSONA_FEISHU_APP_SECRET is required",
			"PERSONA_FEISHU_VERIFICATION_TOKEN is required in webhook mode"}},
		{"app id", map[string]string{envAppID: "my-app", envAppSecret: "s", envMode: "ws"}, []string{`PERSONA_FEISHU_APP_ID="my-app": want the app's cli_… id`}},
		{"unknown mode", map[string]string{envAppID: "cli_1", envAppSecret: "s", envMode: "poll"}, []string{`PERSONA_FEISHU_MODE="poll": want webhook`}},
		{"bad domain", map[string]string{envAppID: "cli_1", envAppSecret: "s", envMode: "ws", envDomain: "feishu.cn"}, []string{`PERSONA_FEISHU_DOMAIN="feishu.cn": want feishu, lark`}},
		{"owner not an open_id", map[string]string{envAppID: "cli_1", envAppSecret: "s", envMode: "ws", envOwner: "ou_ok, 12345"}, []string{`PERSONA_OWNER: "12345" is not an open_id`}},
		{"all at once", map[string]string{envMode: "ws", envLogLevel: "loud"}, []string{"PERSONA_FEISHU_APP_ID is required", "PERSONA_LOG_LEVEL"}},
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
			require.NotContains(t, err.Error(), `"s"`, "the secret's value never appears")
			require.NoDirExists(t, data, "nothing is created for a bad configuration")
			require.Empty(t, stdout.String())
		})
	}
}

// TestConfigDefaults: webhook mode on open.feishu.cn unless told
// otherwise; lark and custom hosts are accepted.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	read := func(vars map[string]string) (config, error) {
		env := botrun.NewEnv(func(k string) string { return vars[k] })
		cfg := readConfig(env)
		return cfg, env.Err()
	}
	cfg, err := read(map[string]string{envAppID: "cli_1", envAppSecret: "s", envVerificationToken: "t"})
	require.NoError(t, err)
	require.Equal(t, feishu.ModeWebhook, cfg.mode)
	require.Equal(t, feishu.FeishuBaseURL, cfg.baseURL)

	cfg, err = read(map[string]string{envAppID: "cli_1", envAppSecret: "s", envMode: "WS", envDomain: "Lark"})
	require.NoError(t, err)
	require.Equal(t, feishu.ModeWebSocket, cfg.mode)
	require.Equal(t, feishu.LarkBaseURL, cfg.baseURL)

	cfg, err = read(map[string]string{envAppID: "cli_1", envAppSecret: "s", envMode: "ws", envDomain: "https://open.example.com/"})
	require.NoError(t, err)
	require.Equal(t, "https://open.example.com", cfg.baseURL)
}

// TestSoulIsTheOneBotOne keeps the built-in persona in step with the
// other reference bots'.
func TestSoulIsTheOneBotOne(t *testing.T) {
	t.Parallel()
	other, err := os.ReadFile(filepath.Join("..", "onebot", "SOUL.md"))
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(other)), strings.TrimSpace(defaultSoul))
}
