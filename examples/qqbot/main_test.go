package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
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

func newFake(t *testing.T) *qqbottest.Server {
	srv := qqbottest.New(qqbottest.Config{})
	t.Cleanup(srv.Close)
	return srv
}

func envFor(t *testing.T, srv *qqbottest.Server) map[string]string {
	return map[string]string{
		envAppID:    srv.AppID(),
		envSecret:   srv.Secret(),
		envAPI:      srv.URL(),
		envTokenURL: srv.TokenURL(),
		envData:     t.TempDir(),
		envOwner:    "0A1B2C3D4E5F60718293A4B5C6D7E8F9",
		envLogLevel: "debug",
	}
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), botruntest.WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// requireEcho checks the offline demo reply: two passive replies to msgID
// with msg_seq 1 and 2.
func requireEcho(t *testing.T, sent []qqbottest.SentMessage, chat channel.Chat, msgID, said string) {
	t.Helper()
	require.Len(t, sent, 2)
	for i, m := range sent {
		require.Equal(t, chat, m.Chat)
		require.Equal(t, msgID, m.MsgID, "a passive reply")
		require.Equal(t, i+1, m.MsgSeq)
	}
	require.Contains(t, sent[0].Content, "(offline demo) You said")
	require.Contains(t, sent[0].Content, said)
	require.Equal(t, "(no model configured)", sent[1].Content)
}

var (
	groupChat = channel.Chat{Kind: channel.Group, ID: "C9F778FE6ADF9D1D1DBE395BF744A33A"}
	alice     = channel.Sender{ID: "E4F4AEA33253A2797FB897C50B81D7ED", Name: "Alice"}
)

// TestGatewayEndToEnd runs the bot against the platform fake over the
// gateway: a group @-message and a C2C message are answered with passive
// replies; a restart on the same data directory resumes the session.
func TestGatewayEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	env := envFor(t, srv)
	b := startBot(t, env)
	waitFor(t, b.Stdout, `persona QQ official bot`)
	waitFor(t, b.Stdout, `qqbot: +gateway WebSocket of http://127\.0\.0\.1:\d+, intents group_c2c,guild_at,guild_dm`)
	waitFor(t, b.Stderr, `msg=qq_state .*online=true`)
	ctx := tctx(t)

	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: groupChat, From: alice, Text: "hello there"})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	requireEcho(t, sent, groupChat, p.ID, "hello there")

	private := channel.Chat{Kind: channel.Private, ID: alice.ID}
	p2, err := srv.Push(ctx, qqbottest.Incoming{Chat: private, From: alice, Text: "just us"})
	require.NoError(t, err)
	sent, err = srv.WaitSent(ctx, 4)
	require.NoError(t, err)
	requireEcho(t, sent[2:], private, p2.ID, "just us")

	state := filepath.Join(env[envData], "qq-"+srv.AppID()+".state.json")
	require.FileExists(t, state)
	require.NoError(t, b.Stop())
	b = startBot(t, env)
	waitFor(t, b.Stderr, `msg=qq_gateway_resume`)
	waitFor(t, b.Stderr, `msg=qq_state .*online=true`)
	require.Len(t, srv.Identifies(), 1, "the restart resumed the session")
	p3, err := srv.Push(ctx, qqbottest.Incoming{Chat: private, From: alice, Text: "back again"})
	require.NoError(t, err)
	sent, err = srv.WaitSent(ctx, 6)
	require.NoError(t, err)
	require.Equal(t, p3.ID, sent[4].MsgID)
	time.Sleep(200 * time.Millisecond)
	require.Len(t, srv.Sent(), 6, "nothing is answered twice")
	require.NotContains(t, b.Stderr.String()+b.Stdout.String(), srv.Secret())
	require.NotContains(t, b.Stderr.String(), srv.CurrentToken())
}

// TestWebhookEndToEnd: in webhook mode the bot serves signed callbacks on
// PERSONA_HTTP_ADDR, answers the console's validation and replies to what
// the platform posts.
func TestWebhookEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	env := envFor(t, srv)
	env[envMode] = "webhook"
	env[envHTTPAddr] = "127.0.0.1:0"
	b := startBot(t, env)
	waitFor(t, b.Stdout, `qqbot: +webhook: point the console's callback URL`)
	url := waitFor(t, b.Stdout, `http: +serving callbacks at (http://\S+)`)[1]
	waitFor(t, b.Stderr, `msg=qq_state .*online=true`)
	ctx := tctx(t)

	require.NoError(t, srv.ValidateWebhook(ctx, url+"qq"))
	resp, err := srv.PostWebhook(ctx, url, []byte(`{"op":0}`), map[string]string{"X-Signature-Ed25519": strings.Repeat("00", 64)})
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)

	srv.SetWebhook(url + "qq")
	p, err := srv.Push(ctx, qqbottest.Incoming{Chat: groupChat, From: alice, Text: "via webhook"})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	requireEcho(t, sent, groupChat, p.ID, "via webhook")
	require.Zero(t, srv.PendingWebhook())
}

// TestWrongSecret: credentials the platform refuses end the bot with an
// error naming the variables, without the secret in it.
func TestWrongSecret(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	env := envFor(t, srv)
	env[envSecret] = "not-the-right-secret"
	var stdout, stderr logbuf.Buffer
	err := run(tctx(t), func(k string) string { return env[k] }, &stdout, &stderr)
	require.ErrorIs(t, err, qqbot.ErrUnauthorized)
	require.ErrorContains(t, err, "check PERSONA_QQ_APP_ID and PERSONA_QQ_SECRET")
	require.NotContains(t, err.Error(), "not-the-right-secret")
	require.NotContains(t, stderr.String(), "not-the-right-secret")
}

// TestBadConfig: every invalid or missing variable is a clear error that
// names it, before anything is created.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	ok := map[string]string{envAppID: "102000001", envSecret: "s3cretvalue"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range ok {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"nothing", map[string]string{}, []string{"PERSONA_QQ_APP_ID is required", "PERSONA_QQ_SECRET is required"}},
		{"bad app id", with(envAppID, "10 20"), []string{`PERSONA_QQ_APP_ID="10 20"`}},
		{"bad mode", with(envMode, "poll"), []string{`PERSONA_QQ_MODE="poll"`}},
		{"bad intent", with(envIntents, "group_c2c,everything"), []string{`unknown intent "everything"`}},
		{"bad switch", with(envMarkdown, "maybe"), []string{"PERSONA_QQ_MARKDOWN"}},
		{"bad API", with(envAPI, "api.sgroup.qq.com"), []string{`PERSONA_QQ_API="api.sgroup.qq.com"`}},
		{"bad owner", with(envOwner, "@alice"), []string{`PERSONA_OWNER`, `"@alice" is not a QQ openid`}},
		{"secret with a space", with(envSecret, "s3cret value"), []string{"PERSONA_QQ_SECRET contains white space"}},
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
			require.NotContains(t, err.Error(), "s3cret")
			require.NoDirExists(t, data, "nothing is created for a bad configuration")
			require.Empty(t, stdout.String())
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	vars := map[string]string{envAppID: "102000001", envSecret: "x"}
	env := botrun.NewEnv(func(k string) string { return vars[k] })
	cfg := readConfig(env)
	require.NoError(t, env.Err())
	require.Equal(t, qqbot.ModeGateway, cfg.mode)
	require.Equal(t, qqbot.DefaultIntents, cfg.intents)
	require.Equal(t, qqbot.DefaultAPIBase, cfg.api)
	require.Equal(t, qqbot.DefaultTokenURL, cfg.tokenURL)

	vars[envSandbox], vars[envIntents], vars[envMode] = "yes", "group_c2c", "webhook"
	env = botrun.NewEnv(func(k string) string { return vars[k] })
	cfg = readConfig(env)
	require.NoError(t, env.Err())
	require.Equal(t, qqbot.SandboxAPIBase, cfg.api)
	require.Equal(t, qqbot.IntentGroupAndC2C, cfg.intents)
	require.Equal(t, qqbot.ModeWebhook, cfg.mode)
}
