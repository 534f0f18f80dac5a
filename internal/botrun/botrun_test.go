package botrun_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/internal/botrun"
	"github.com/personakit/persona/internal/logbuf"
)

// testPlatform is a platform on the in-memory channel; its Setup reads
// PERSONA_TEST_GREETING (required) and serves a handler when
// PERSONA_TEST_HTTP is on.
func testPlatform(setups *int, closed *int) botrun.Platform {
	return botrun.Platform{Title: "persona test bot", DataDir: "data/test", Soul: "You are Tess.", SoulName: "built-in Tess",
		Owner: func(id string) error {
			if strings.HasPrefix(id, "x") {
				return errors.New(id + " is not an account id")
			}
			return nil
		},
		Setup: func(env *botrun.Env, s *botrun.Start) (*botrun.Setup, error) {
			greeting := env.Require("PERSONA_TEST_GREETING")
			serve := env.Bool("PERSONA_TEST_HTTP", false)
			wait := env.Duration("PERSONA_TEST_WAIT", time.Second)
			if !env.OK() {
				return nil, nil
			}
			*setups++
			st := &botrun.Setup{Channel: chantest.New(chantest.Config{BotID: "tess"}),
				Banner: []string{"  test:     greeting " + greeting + ", wait " + wait.String()},
				Warn:   func(log *slog.Logger) { log.Warn("test_warning") },
				Close:  func() { *closed++ }}
			if serve {
				st.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, greeting) })
			}
			return st, nil
		}}
}

func TestRunBadConfigReportsEverythingAndCreatesNothing(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"PERSONA_DATA": data, "PERSONA_OWNER": "1, x2", "PERSONA_LOG_LEVEL": "loud",
		"PERSONA_TEST_HTTP": "maybe", "PERSONA_TEST_WAIT": "soon", "PERSONA_MODEL_VISION": "perhaps", "PERSONA_MEDIA": "auto"}
	var setups, closed int
	var stdout bytes.Buffer
	err := botrun.Run(t.Context(), func(k string) string { return env[k] }, &stdout, io.Discard, testPlatform(&setups, &closed))
	require.Error(t, err)
	for _, want := range []string{"invalid configuration", "PERSONA_TEST_GREETING is required", `PERSONA_TEST_HTTP="maybe"`,
		`PERSONA_TEST_WAIT="soon"`, "x2 is not an account id", `PERSONA_LOG_LEVEL="loud"`, "PERSONA_MODEL_VISION", `PERSONA_MEDIA="auto"`} {
		require.ErrorContains(t, err, want)
	}
	require.Zero(t, setups, "Setup opened nothing")
	require.NoDirExists(t, data)
	require.Empty(t, stdout.String())
}

func TestRunServesAndPrintsTheBanner(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PERSONA_DATA": t.TempDir(), "PERSONA_TEST_GREETING": "hello", "PERSONA_TEST_HTTP": "on",
		botrun.EnvHTTPAddr: "127.0.0.1:0", "PERSONA_MEMORY": "off", "PERSONA_AGENT": "yes"}
	var setups, closed int
	stdout, stderr := &logbuf.Buffer{}, &logbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- botrun.Run(ctx, func(k string) string { return env[k] }, stdout, stderr, testPlatform(&setups, &closed))
	}()
	var url string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`http: +serving callbacks at (http://127\.0\.0\.1:\d+/)`).FindStringSubmatch(stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 10*time.Second, 5*time.Millisecond, "stdout: %s\nstderr: %s", stdout, stderr)
	out := stdout.String()
	require.Contains(t, out, "persona test bot\n")
	require.Regexp(t, `model: +offline demo model`, out)
	require.Regexp(t, `persona: +built-in Tess`, out)
	require.Regexp(t, `memory: +off \(PERSONA_MEMORY\); agent loop: on \(PERSONA_AGENT\)`, out)
	require.Regexp(t, `media: +pictures on; voice not transcribed`, out)
	require.Contains(t, out, "  test:     greeting hello, wait 1s\n")

	resp, err := http.Get(url)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, "hello", string(body))
	require.Contains(t, stderr.String(), "test_warning")
	require.Contains(t, stderr.String(), "no_owners")

	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 1, setups)
	require.Equal(t, 1, closed, "Setup.Close ran after the pipeline stopped")
	if resp, err = http.Get(url); err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "the callback server is shut down")
}

func TestRunHTTPAddrInUse(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PERSONA_DATA": t.TempDir(), "PERSONA_TEST_GREETING": "hi", "PERSONA_TEST_HTTP": "on",
		botrun.EnvHTTPAddr: "256.0.0.1:1"}
	var setups, closed int
	err := botrun.Run(t.Context(), func(k string) string { return env[k] }, io.Discard, io.Discard, testPlatform(&setups, &closed))
	require.ErrorContains(t, err, "PERSONA_HTTP_ADDR=256.0.0.1:1")
	require.Equal(t, 1, closed, "what Setup opened is released")
}

func TestRunMapsTheError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	p := botrun.Platform{Title: "t", DataDir: "data/t",
		Setup: func(*botrun.Env, *botrun.Start) (*botrun.Setup, error) { return nil, boom }}
	err := botrun.Run(t.Context(), func(k string) string { return map[string]string{"PERSONA_DATA": t.TempDir()}[k] }, io.Discard, io.Discard, p)
	require.ErrorIs(t, err, boom)

	p.Setup = func(*botrun.Env, *botrun.Start) (*botrun.Setup, error) { return &botrun.Setup{}, nil }
	err = botrun.Run(t.Context(), func(k string) string { return map[string]string{"PERSONA_DATA": t.TempDir()}[k] }, io.Discard, io.Discard, p)
	require.ErrorContains(t, err, "no channel")
}

func TestModelDescription(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PERSONA_DATA": t.TempDir(), "PERSONA_TEST_GREETING": "hi",
		"PERSONA_MODEL_BASE_URL": "http://127.0.0.1:11434/v1", "PERSONA_MODEL": "qwen3", "PERSONA_MODEL_VISION": "1"}
	var setups, closed int
	stdout := &logbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- botrun.Run(ctx, func(k string) string { return env[k] }, stdout, io.Discard, testPlatform(&setups, &closed))
	}()
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "test:") }, 10*time.Second, 5*time.Millisecond)
	require.Regexp(t, `model: +qwen3 at http://127\.0\.0\.1:11434/v1, with vision`, stdout.String())
	cancel()
	require.NoError(t, <-done)
}

func TestRunServesTheEventCenter(t *testing.T) {
	t.Parallel()
	const token = "event-center-token-0123456789"
	env := map[string]string{"PERSONA_DATA": t.TempDir(), "PERSONA_TEST_GREETING": "hello", "PERSONA_TEST_HTTP": "on",
		botrun.EnvHTTPAddr: "127.0.0.1:0", botrun.EnvHTTPToken: token, botrun.EnvWeb: "on"}
	var setups, closed int
	stdout, stderr := &logbuf.Buffer{}, &logbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- botrun.Run(ctx, func(k string) string { return env[k] }, stdout, stderr, testPlatform(&setups, &closed))
	}()
	var url string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`events: +event center at (http://127\.0\.0\.1:\d+/events/)`).FindStringSubmatch(stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 10*time.Second, 5*time.Millisecond, "stdout: %s\nstderr: %s", stdout, stderr)
	get := func(path, auth string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, _ := get(url+"api/messages", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := get(url+"api/messages", token)
	require.Equal(t, http.StatusOK, code, body)
	code, body = get(url, "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<html", "the page itself loads and asks for the token")
	code, body = get(strings.TrimSuffix(url, "events/"), "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "hello", body, "the platform's callbacks are still served")
	cancel()
	require.NoError(t, <-done)
}

func TestRunRefusesAShortEventCenterToken(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PERSONA_DATA": t.TempDir(), "PERSONA_TEST_GREETING": "hi", botrun.EnvHTTPToken: "short"}
	var setups, closed int
	err := botrun.Run(t.Context(), func(k string) string { return env[k] }, io.Discard, io.Discard, testPlatform(&setups, &closed))
	require.ErrorContains(t, err, "PERSONA_HTTP_TOKEN must be at least 16 characters")
}
