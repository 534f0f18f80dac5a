package main

import (
	"bytes"
	"context"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent/openai"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
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

func baseEnv(t *testing.T) map[string]string {
	return map[string]string{
		envData:     t.TempDir(),
		envToken:    "e2e-token",
		envOwner:    "1000",
		envLogLevel: "debug",
	}
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), botruntest.WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newFake(t *testing.T, secret string) *onebottest.Server {
	fake := onebottest.New(onebottest.Config{AccessToken: "e2e-token", Secret: secret, ReconnectInterval: 50 * time.Millisecond})
	t.Cleanup(fake.Close)
	return fake
}

// TestGroupMentionEndToEnd runs the bot in each transport against the
// OneBot fake on loopback: the fake posts a group @-message of the bot, the
// real pipeline (offline demo model) answers it, and the reply arrives at
// the fake in two chunks, the first quoting the message, the second not.
func TestGroupMentionEndToEnd(t *testing.T) {
	t.Parallel()
	for _, mode := range []onebot.Mode{onebot.ModeReverseWS, onebot.ModeForwardWS, onebot.ModeHTTP} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			env := baseEnv(t)
			var fake *onebottest.Server
			var b *botruntest.Bot
			switch mode {
			case onebot.ModeReverseWS:
				// The default mode: PERSONA_ONEBOT_MODE unset.
				fake = newFake(t, "")
				env[envAddr] = "127.0.0.1:0"
				b = startBot(t, env)
				u := waitFor(t, b.Stdout, `reverse WebSocket: point the implementation's WebSocket client at (ws://127\.0\.0\.1:\d+/)`)[1]
				fake.DialReverse(t.Context(), u)
			case onebot.ModeForwardWS:
				fake = newFake(t, "")
				srv := httptest.NewServer(fake)
				t.Cleanup(srv.Close)
				env[envMode] = "forward-ws"
				env[envURL] = "ws" + strings.TrimPrefix(srv.URL, "http") + "/"
				b = startBot(t, env)
			case onebot.ModeHTTP:
				fake = newFake(t, "e2e-secret")
				api := httptest.NewServer(fake)
				t.Cleanup(api.Close)
				env[envMode] = "HTTP" // case-insensitive
				env[envURL] = api.URL
				env[envAddr] = "127.0.0.1:0"
				env[envSecret] = "e2e-secret"
				b = startBot(t, env)
				u := waitFor(t, b.Stdout, `point the implementation's HTTP POST at (http://127\.0\.0\.1:\d+/) \(signed`)[1]
				fake.SetPostURL(u + "onebot/event")
			}
			waitFor(t, b.Stdout, `model: +offline demo model: no model is configured`)
			waitFor(t, b.Stdout, `persona: +built-in SOUL.md`)
			waitFor(t, b.Stdout, `memory: +on \(PERSONA_MEMORY\); agent loop: off \(PERSONA_AGENT\)`)
			waitFor(t, b.Stderr, `msg=state .*connected=true online=true`)

			ctx := tctx(t)
			rec, err := fake.EmitMessage(ctx, onebottest.Incoming{
				GroupID: 300400500, UserID: 4242, Nickname: "alice",
				Message: onebot.Message{{Type: "at", Data: map[string]string{"qq": fake.BotID()}}, onebot.TextSegment(" hello there")},
			})
			require.NoError(t, err)
			sent, err := fake.WaitSent(ctx, 2)
			require.NoError(t, err)
			require.Len(t, sent, 2)
			for _, s := range sent {
				require.Equal(t, int64(300400500), s.GroupID, "reply goes to the group")
			}
			first, second := sent[0].Message, sent[1].Message
			require.NotEmpty(t, first)
			require.Equal(t, "reply", first[0].Type, "the first chunk quotes the message: %+v", first)
			require.Equal(t, strconv.FormatInt(int64(rec.ID), 10), first[0].Data["id"])
			require.Contains(t, first.PlainText(), "(offline demo) You said")
			require.Contains(t, first.PlainText(), "hello there")
			for _, seg := range second {
				require.NotEqual(t, "reply", seg.Type, "only the first chunk quotes: %+v", second)
			}
			require.Equal(t, "(no model configured)", strings.TrimSpace(second.PlainText()))

			// Nothing else goes out (no duplicate chunk).
			time.Sleep(200 * time.Millisecond)
			require.Len(t, fake.Sent(), 2)
		})
	}
}

// TestBadConfig: every invalid or missing variable is a clear error that
// names it, returned before anything is created or started.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-such-SOUL.md")
	empty := filepath.Join(t.TempDir(), "SOUL.md")
	require.NoError(t, os.WriteFile(empty, []byte("  \n"), 0o600))
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"unknown mode", map[string]string{envMode: "websocket"}, []string{`PERSONA_ONEBOT_MODE="websocket": want reverse-ws, forward-ws or http`}},
		{"forward-ws without URL", map[string]string{envMode: "forward-ws"}, []string{"PERSONA_ONEBOT_URL is required in forward-ws mode"}},
		{"forward-ws with an http URL", map[string]string{envMode: "forward-ws", envURL: "http://127.0.0.1:3001/"}, []string{"forward-ws mode needs a ws:// or wss:// URL"}},
		{"forward-ws with ADDR", map[string]string{envMode: "forward-ws", envURL: "ws://127.0.0.1:3001/", envAddr: ":8080"}, []string{"PERSONA_ONEBOT_ADDR is not used in forward-ws mode"}},
		{"forward-ws with SECRET", map[string]string{envMode: "forward-ws", envURL: "ws://127.0.0.1:3001/", envSecret: "s"}, []string{"PERSONA_ONEBOT_SECRET is only used in http mode"}},
		{"http without URL", map[string]string{envMode: "http"}, []string{"PERSONA_ONEBOT_URL is required in http mode"}},
		{"http with a ws URL", map[string]string{envMode: "http", envURL: "ws://127.0.0.1:3000"}, []string{"http mode needs a http:// or https:// URL"}},
		{"reverse-ws with URL", map[string]string{envURL: "ws://127.0.0.1:3001/"}, []string{"PERSONA_ONEBOT_URL is not used in reverse-ws mode"}},
		{"reverse-ws with SECRET", map[string]string{envSecret: "s"}, []string{"PERSONA_ONEBOT_SECRET is only used in http mode"}},
		{"unknown dialect", map[string]string{envDialect: "mirai"}, []string{`PERSONA_ONEBOT_DIALECT="mirai"`}},
		{"owner not a QQ number", map[string]string{envOwner: "123, alice"}, []string{`PERSONA_OWNER: "alice" is not a QQ number`}},
		{"bad log level", map[string]string{envLogLevel: "loud"}, []string{`PERSONA_LOG_LEVEL="loud"`}},
		{"bad memory switch", map[string]string{envMemory: "enabled"}, []string{`PERSONA_MEMORY="enabled": want on or off`}},
		{"bad agent switch", map[string]string{envAgent: "y"}, []string{`PERSONA_AGENT="y": want on or off`}},
		{"missing SOUL", map[string]string{envSoul: missing}, []string{"PERSONA_SOUL:", "no-such-SOUL.md"}},
		{"empty SOUL", map[string]string{envSoul: empty}, []string{"PERSONA_SOUL:", "is empty"}},
		{"bad model URL", map[string]string{openai.EnvBaseURL: "ftp://models.example"}, []string{"model (PERSONA_MODEL_BASE_URL", "must be an http or https URL"}},
		{"all at once", map[string]string{envMode: "forward-ws", envOwner: "x", envLogLevel: "loud"}, []string{"PERSONA_ONEBOT_URL is required", "PERSONA_OWNER", "PERSONA_LOG_LEVEL"}},
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
			require.NoDirExists(t, data, "nothing is created for a bad configuration")
			require.Empty(t, stdout.String())
		})
	}
}

// TestAddrInUse: a listen address that is taken fails at once, naming the
// variable.
func TestAddrInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	env := map[string]string{envData: t.TempDir(), envAddr: ln.Addr().String()}
	err = run(t.Context(), func(k string) string { return env[k] }, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, "PERSONA_ONEBOT_ADDR="+ln.Addr().String())
}

// TestConfigDefaults: with nothing set, the bot is a reverse-WebSocket
// server on 127.0.0.1:8080 (the shared defaults are internal/botrun's).
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	env := botrun.NewEnv(func(string) string { return "" })
	cfg := readConfig(env)
	require.NoError(t, env.Err())
	require.Equal(t, onebot.ModeReverseWS, cfg.mode)
	require.Equal(t, "127.0.0.1:8080", cfg.listen)
	require.Empty(t, cfg.mediaRoot)

	vars := map[string]string{envMode: "http", envURL: "https://qq.example:5700", envDialect: "Lagrange", envMediaRoot: "/srv/napcat"}
	env = botrun.NewEnv(func(k string) string { return vars[k] })
	cfg = readConfig(env)
	require.NoError(t, env.Err())
	require.Equal(t, "127.0.0.1:8080", cfg.listen, "http mode listens for events")
	require.Equal(t, onebot.DialectLagrange, cfg.dialect)
	require.Equal(t, "/srv/napcat", cfg.mediaRoot)

	env = botrun.NewEnv(func(k string) string { return map[string]string{envMediaRoot: "napcat/files"}[k] })
	readConfig(env)
	require.ErrorContains(t, env.Err(), `PERSONA_ONEBOT_MEDIA_ROOT="napcat/files": want an absolute path`)
}
