package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
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

func newFake(t *testing.T) *dingtalktest.Server {
	t.Helper()
	srv := dingtalktest.New(dingtalktest.Config{})
	t.Cleanup(srv.Close)
	return srv
}

func envFor(t *testing.T, srv *dingtalktest.Server) map[string]string {
	return map[string]string{
		envClientID:     srv.ClientID(),
		envClientSecret: srv.ClientSecret(),
		envAPI:          srv.URL(),
		envData:         t.TempDir(),
		envOwner:        "manager4242",
		envLogLevel:     "debug",
	}
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), botruntest.WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

var alice = dingtalktest.User{StaffID: "manager4242", Nick: "Alice"}

// TestPrivateMessageEndToEnd runs the bot against the DingTalk fake: a
// private message is answered by the real pipeline (offline demo model)
// in two chunks through the conversation's session webhook, and the
// secret never reaches the output.
func TestPrivateMessageEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	b := startBot(t, envFor(t, srv))
	waitFor(t, b.Stdout, `persona DingTalk bot`)
	waitFor(t, b.Stdout, `model: +offline demo model: no model is configured`)
	waitFor(t, b.Stdout, `persona: +built-in SOUL.md`)
	waitFor(t, b.Stdout, `dingtalk: Stream mode through http://127\.0\.0\.1:\d+, app `+regexp.QuoteMeta(srv.ClientID())+`, robot `+regexp.QuoteMeta(srv.BotID()))
	waitFor(t, b.Stderr, `msg=dingtalk_state .*online=true`)
	waitFor(t, b.Stderr, `msg=dingtalk_api_not_https`)

	ctx := tctx(t)
	require.NoError(t, srv.WaitAccepted(ctx, 1))
	p, err := srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "hello there"})
	require.NoError(t, err)
	sent, err := srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	require.Len(t, sent, 2)
	for _, m := range sent {
		require.Equal(t, dingtalktest.ViaWebhook, m.Via)
		require.Equal(t, alice.StaffID, m.Peer)
	}
	require.Contains(t, sent[0].Text, "(offline demo) You said")
	require.Contains(t, sent[0].Text, "hello there")
	require.Equal(t, "(no model configured)", sent[1].Text)
	a, err := srv.WaitAck(ctx, p.FrameID)
	require.NoError(t, err)
	require.Equal(t, 200, a.Code)

	// Nothing else goes out (no duplicate chunk).
	time.Sleep(200 * time.Millisecond)
	require.Len(t, srv.Sent(), 2)
	require.NotContains(t, b.Stdout.String()+b.Stderr.String(), srv.ClientSecret())
}

// TestGroupMentionEndToEnd: an @-message in a group is answered there; the
// first chunk quotes the message (a markdown blockquote, since DingTalk
// robots cannot reference one), the second does not.
func TestGroupMentionEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	b := startBot(t, envFor(t, srv))
	waitFor(t, b.Stderr, `msg=dingtalk_state .*online=true`)
	ctx := tctx(t)
	require.NoError(t, srv.WaitAccepted(ctx, 1))
	p, err := srv.Push(ctx, dingtalktest.Incoming{Group: true, ConversationID: "cidTeam==", Title: "Team", From: alice, Text: "hello there", MentionBot: true})
	require.NoError(t, err)
	_, err = srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	got, err := srv.Received(ctx)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "cidTeam==", got[0].Chat.ID)
	require.Equal(t, p.MsgID, got[0].ReplyTo, "the first chunk quotes the message: %q", srv.Sent()[0].Text)
	require.Contains(t, got[0].Text, "(offline demo) You said")
	require.Empty(t, got[1].ReplyTo, "only the first chunk quotes")
	require.Equal(t, "(no model configured)", got[1].Text)
}

// TestRefusedCredentials: a wrong secret stops the bot with an error that
// names the variables and never shows the secret.
func TestRefusedCredentials(t *testing.T) {
	t.Parallel()
	srv := newFake(t)
	env := envFor(t, srv)
	env[envClientSecret] = "not-the-right-secret-42"
	var stdout, stderr bytes.Buffer
	err := run(tctx(t), func(k string) string { return env[k] }, &stdout, &stderr)
	require.ErrorIs(t, err, dingtalk.ErrUnauthorized)
	require.ErrorContains(t, err, envClientID)
	require.ErrorContains(t, err, envClientSecret)
	for _, out := range []string{err.Error(), stdout.String(), stderr.String()} {
		require.NotContains(t, out, "not-the-right-secret-42")
	}
}

// TestBadConfig: every invalid or missing variable is a clear error that
// names it, returned before anything is created or started; the secret is
// never part of it.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	const secret = "the-secret-value"
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"nothing set", map[string]string{}, []string{envClientID + " is required", envClientSecret + " is required"}},
		{"bad client id", map[string]string{envClientID: "ding abc", envClientSecret: secret}, []string{envClientID + `="ding abc"`}},
		{"secret with a space", map[string]string{envClientID: "dingabc", envClientSecret: secret + " x"}, []string{envClientSecret + " contains white space"}},
		{"robot code", map[string]string{envClientID: "dingabc", envClientSecret: secret, envRobotCode: "$:LWCP"}, []string{envRobotCode}},
		{"bad API", map[string]string{envClientID: "dingabc", envClientSecret: secret, envAPI: "api.dingtalk.com"}, []string{envAPI + `="api.dingtalk.com"`}},
		{"bad markdown switch", map[string]string{envClientID: "dingabc", envClientSecret: secret, envMarkdown: "sometimes"}, []string{envMarkdown}},
		{"bad owner", map[string]string{envClientID: "dingabc", envClientSecret: secret, envOwner: `a"b`}, []string{envOwner}},
		{"all at once", map[string]string{envAPI: "ftp://x", envLogLevel: "loud", envMemory: "enabled"}, []string{envClientID, envAPI, envLogLevel, envMemory}},
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
			require.NotContains(t, err.Error(), secret)
			require.NoDirExists(t, data, "nothing is created for a bad configuration")
			require.Empty(t, stdout.String())
		})
	}
}

// TestConfigDefaults: the official API, plain text, quoted replies.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	vars := map[string]string{envClientID: "dingabc", envClientSecret: "s"}
	env := botrun.NewEnv(func(k string) string { return vars[k] })
	cfg := readConfig(env)
	require.NoError(t, env.Err())
	require.Equal(t, dingtalk.DefaultAPIBase, cfg.api)
	require.False(t, cfg.markdown)
	require.True(t, cfg.quote)
	require.Empty(t, cfg.robotCode)
	lines := banner(cfg, mustChannel(t, cfg))
	require.Contains(t, strings.Join(lines, "\n"), "the DingTalk OpenAPI (https://api.dingtalk.com)")
	require.Contains(t, strings.Join(lines, "\n"), "robot dingabc")

	vars = map[string]string{envClientID: "dingabc", envClientSecret: "s", envMarkdown: "on", envQuote: "off", envRobotCode: "robot9"}
	env = botrun.NewEnv(func(k string) string { return vars[k] })
	cfg = readConfig(env)
	require.NoError(t, env.Err())
	require.True(t, cfg.markdown)
	require.False(t, cfg.quote)
	require.Equal(t, "robot9", mustChannel(t, cfg).BotID())
}

func mustChannel(t *testing.T, cfg config) *dingtalk.Channel {
	t.Helper()
	ch, err := dingtalk.New(dingtalk.Config{ClientID: cfg.clientID, ClientSecret: cfg.secret, RobotCode: cfg.robotCode, APIBase: cfg.api})
	require.NoError(t, err)
	return ch
}
