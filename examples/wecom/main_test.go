package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/wecom/wecomtest"
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

// newFake starts a fake in mode, closed at cleanup.
func newFake(t *testing.T, mode wecomtest.Mode) *wecomtest.Server {
	t.Helper()
	srv := wecomtest.New(wecomtest.Config{Mode: mode})
	t.Cleanup(srv.Close)
	return srv
}

// envFor is the environment of a bot talking to srv.
func envFor(t *testing.T, srv *wecomtest.Server) map[string]string {
	env := map[string]string{
		envMode:     string(srv.Mode()),
		envAPI:      srv.URL(),
		envData:     t.TempDir(),
		envOwner:    "alice",
		envLogLevel: "debug",
		envHTTPAddr: "127.0.0.1:0",
	}
	switch srv.Mode() {
	case wecomtest.ModeApp:
		env[envToken], env[envAESKey] = srv.Token(), srv.EncodingAESKey()
		env[envCorpID], env[envAgentID], env[envSecret] = srv.CorpID(), strconv.FormatInt(srv.AgentID(), 10), srv.Secret()
	case wecomtest.ModeAIBot:
		env[envToken], env[envAESKey], env[envBotName] = srv.Token(), srv.EncodingAESKey(), srv.BotName()
	case wecomtest.ModeAIBotWS:
		delete(env, envHTTPAddr)
		env[envBotID], env[envSecret], env[envBotName], env[envWSURL] = srv.BotID(), srv.BotSecret(), srv.BotName(), srv.WSURL()
	}
	return env
}

// serving waits for the callback URL in the banner and points srv at it,
// then for the adapter to report online: the banner comes before the
// channel runs, and until Run is active callbacks are answered 503.
func serving(t *testing.T, b *botruntest.Bot, srv *wecomtest.Server) {
	t.Helper()
	m := waitFor(t, b.Stdout, `http: +serving callbacks at (http://127\.0\.0\.1:\d+/)`)
	srv.SetCallbackURL(m[1] + "wecom")
	waitFor(t, b.Stderr, `msg=wecom_state .*online=true`)
}

// requireEcho checks the offline demo reply: two chunks.
func requireEcho(t *testing.T, texts []string, said string) {
	t.Helper()
	require.Len(t, texts, 2)
	require.Contains(t, texts[0], "(offline demo) You said")
	require.Contains(t, texts[0], said)
	require.Equal(t, "(no model configured)", texts[1])
}

// TestAppEndToEnd runs the bot as a self-built app against the fake: a
// user's message is answered through message/send.
func TestAppEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t, wecomtest.ModeApp)
	b := startBot(t, envFor(t, srv))
	waitFor(t, b.Stdout, `model: +offline demo model`)
	waitFor(t, b.Stdout, `wecom: +self-built app \d+ of corp `+srv.CorpID())
	serving(t, b, srv)
	ctx := tctx(t)
	_, err := srv.Push(ctx, wecomtest.Incoming{Chat: channel.Chat{Kind: channel.Private, ID: "alice"}, Text: "你好 Mira"})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	requireEcho(t, []string{sent[0].Text, sent[1].Text}, "你好 Mira")
	for _, x := range sent {
		require.Equal(t, "message/send", x.Op)
		require.Equal(t, "alice", x.Chat.ID)
	}
	require.Contains(t, b.Stderr.String(), "wecom_trusted_ip")
	require.NotContains(t, b.Stderr.String(), srv.Secret())
	for _, tok := range srv.IssuedTokens() {
		require.NotContains(t, b.Stderr.String(), tok)
	}
}

// TestAIBotCallbackEndToEnd runs the bot as an AI bot on callbacks: a
// group @-message is answered with a stream WeCom polls.
func TestAIBotCallbackEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t, wecomtest.ModeAIBot)
	b := startBot(t, envFor(t, srv))
	waitFor(t, b.Stdout, `wecom: +AI bot \(id from the first callback\): callbacks on PERSONA_HTTP_ADDR`)
	serving(t, b, srv)
	ctx := tctx(t)
	m, err := srv.Push(ctx, wecomtest.Incoming{Chat: channel.Chat{Kind: channel.Group, ID: "wrGroup01"}, From: "bob", Text: "在吗"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, ok := srv.StreamOf(m.ID)
		return ok && strings.Count(v.Content, "\n\n") == 1
	}, botruntest.WaitTimeout, 10*time.Millisecond, "the stream gets both chunks")
	v, _ := srv.StreamOf(m.ID)
	requireEcho(t, strings.Split(v.Content, "\n\n"), "在吗")
	require.NotContains(t, v.Content, "@"+srv.BotName(), "the mention is not echoed as text")
}

// TestAIBotWSEndToEnd runs the bot on the AI bot's long connection: the
// first chunk answers the message, the second is a message of its own.
func TestAIBotWSEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t, wecomtest.ModeAIBotWS)
	b := startBot(t, envFor(t, srv))
	waitFor(t, b.Stdout, `wecom: +AI bot `+srv.BotID()+`: long connection to 127\.0\.0\.1`)
	require.NotContains(t, b.Stdout.String(), "serving callbacks", "no callback URL on the long connection")
	ctx := tctx(t)
	require.NoError(t, srv.WaitSubscribed(ctx))
	m, err := srv.Push(ctx, wecomtest.Incoming{Chat: channel.Chat{Kind: channel.Private, ID: "alice"}, Text: "hello"})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	requireEcho(t, []string{sent[0].Text, sent[1].Text}, "hello")
	require.Equal(t, "aibot_respond_msg", sent[0].Op)
	require.Equal(t, m.ID, sent[0].ReplyTo)
	require.Equal(t, "aibot_send_msg", sent[1].Op)
}

// TestBadConfiguration: every problem is reported at once, naming its
// variable, without secrets, before anything is created.
func TestBadConfiguration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{}, []string{envMode + " is required"}},
		{map[string]string{envMode: "robot"}, []string{envMode + `="robot"`}},
		{map[string]string{envMode: "app", envAESKey: "short-secret-key", envAgentID: "x1"},
			[]string{envToken + " is required", envAESKey + ": want the 43-character", envCorpID + " is required", envAgentID + `="x1"`, envSecret + " is required"}},
		{map[string]string{envMode: "aibot-ws", envWSURL: "http://x"}, []string{envBotID + " is required", envSecret + " is required", envWSURL + `="http://x"`}},
		{map[string]string{envMode: "aibot", envToken: "t", envAESKey: strings.Repeat("a", 43), envWSURL: "wss://x", envOwner: "a b"},
			[]string{envWSURL + " is only used in aibot-ws mode", `"a b" is not a WeCom UserID`}},
	} {
		var stdout bytes.Buffer
		tc.env[envData] = t.TempDir() + "/data"
		err := run(t.Context(), func(k string) string { return tc.env[k] }, &stdout, &bytes.Buffer{})
		require.Error(t, err)
		for _, w := range tc.want {
			require.ErrorContains(t, err, w)
		}
		require.NotContains(t, err.Error(), "short-secret-key")
		require.Empty(t, stdout.String())
		require.NoDirExists(t, tc.env[envData])
	}
}

// TestRefusedCredentials: WeCom refusing the AI bot's secret stops the bot
// with a message naming the variables, never the secret.
func TestRefusedCredentials(t *testing.T) {
	t.Parallel()
	srv := newFake(t, wecomtest.ModeAIBotWS)
	env := envFor(t, srv)
	env[envSecret] = "definitely-not-the-secret"
	var stdout, stderr logbuf.Buffer
	err := run(tctx(t), func(k string) string { return env[k] }, &stdout, &stderr)
	require.Error(t, err)
	require.ErrorContains(t, err, envSecret)
	require.NotContains(t, err.Error(), "definitely-not-the-secret")
	require.NotContains(t, stderr.String(), "definitely-not-the-secret")
}

// TestSetupReadsTheVariables checks the platform's Setup on its own.
func TestSetupReadsTheVariables(t *testing.T) {
	t.Parallel()
	env := botrun.NewEnv(func(k string) string {
		return map[string]string{envMode: "AIBOT", envToken: "t", envAESKey: strings.Repeat("b", 43), envBotName: "@Mira"}[k]
	})
	cfg := readConfig(env)
	require.NoError(t, env.Err())
	require.Equal(t, "aibot", string(cfg.mode))
	require.Equal(t, "Mira", cfg.botName, "a leading @ is dropped")
	require.Contains(t, banner(cfg), "AI bot (id from the first callback)")
}
