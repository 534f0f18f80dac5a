package botenv_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/internal/botenv"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	soul := filepath.Join(t.TempDir(), "SOUL.md")
	require.NoError(t, os.WriteFile(soul, []byte("You are Kai."), 0o600))
	env := map[string]string{botenv.EnvSoul: soul, botenv.EnvOwner: "1, 2,,", botenv.EnvAliases: "Kai,kk", botenv.EnvLogLevel: "debug"}
	c, errs := botenv.Load(func(k string) string { return env[k] }, botenv.Defaults{Soul: "built-in", SoulName: "built-in", DataDir: "data/x"})
	require.Empty(t, errs)
	require.Equal(t, "You are Kai.", c.Soul)
	require.Equal(t, soul, c.SoulFrom)
	require.Equal(t, []string{"1", "2"}, c.Owners)
	require.Equal(t, []string{"Kai", "kk"}, c.Aliases)
	require.Equal(t, slog.LevelDebug, c.Level)
	require.Equal(t, filepath.FromSlash("data/x"), c.DataDir)

	env = map[string]string{botenv.EnvSoul: filepath.Join(t.TempDir(), "missing"), botenv.EnvOwner: "x", botenv.EnvLogLevel: "loud"}
	_, errs = botenv.Load(func(k string) string { return env[k] }, botenv.Defaults{Owner: func(id string) error {
		return fmt.Errorf("%q is %w", id, botenv.ErrOwner)
	}})
	require.Len(t, errs, 3)
	require.True(t, errors.Is(errs[1], botenv.ErrOwner))
}

func TestModelOffline(t *testing.T) {
	t.Parallel()
	m, desc, offline, err := botenv.Model(func(string) string { return "" })
	require.NoError(t, err)
	require.True(t, offline)
	require.NotNil(t, m)
	require.Contains(t, desc, "offline demo model")
}

func TestLoadMemoryAgentDefaults(t *testing.T) {
	t.Parallel()
	c, errs := botenv.Load(func(string) string { return "" }, botenv.Defaults{})
	require.Empty(t, errs)
	require.True(t, c.Memory, "memory is on by default")
	require.False(t, c.Agent, "the agent loop is off by default")
}

func TestLoadMemoryAgentValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"1", true}, {"0", false},
		{"true", true}, {"false", false}, {"TRUE", true}, {"False", false},
		{"on", true}, {"off", false}, {"On", true}, {"OFF", false},
		{"yes", true}, {"no", false}, {"YES", true}, {"No", false},
		{" yes ", true}, {"\toff\n", false},
	} {
		for _, name := range []string{botenv.EnvMemory, botenv.EnvAgent} {
			env := map[string]string{name: tc.in}
			c, errs := botenv.Load(func(k string) string { return env[k] }, botenv.Defaults{})
			require.Empty(t, errs, "%s=%q", name, tc.in)
			got := c.Memory
			if name == botenv.EnvAgent {
				got = c.Agent
			}
			require.Equal(t, tc.want, got, "%s=%q", name, tc.in)
		}
	}
}

func TestLoadMemoryAgentInvalid(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"maybe", "2", "-1", "enabled", "tru", "y", "n", "0n", "yes please"} {
		env := map[string]string{botenv.EnvMemory: bad, botenv.EnvAgent: bad}
		_, errs := botenv.Load(func(k string) string { return env[k] }, botenv.Defaults{})
		require.Len(t, errs, 2, "%q", bad)
		require.ErrorContains(t, errs[0], botenv.EnvMemory+"=")
		require.ErrorContains(t, errs[1], botenv.EnvAgent+"=")
		require.ErrorContains(t, errs[0], "want on or off")
	}
	// One bad switch does not hide the other's value.
	env := map[string]string{botenv.EnvMemory: "off", botenv.EnvAgent: "sometimes"}
	c, errs := botenv.Load(func(k string) string { return env[k] }, botenv.Defaults{})
	require.Len(t, errs, 1)
	require.ErrorContains(t, errs[0], botenv.EnvAgent)
	require.False(t, c.Memory)
}

func TestBool(t *testing.T) {
	t.Parallel()
	v, ok := botenv.Bool("Yes")
	require.True(t, ok)
	require.True(t, v)
	v, ok = botenv.Bool("0")
	require.True(t, ok)
	require.False(t, v)
	_, ok = botenv.Bool("")
	require.False(t, ok)
	require.Equal(t, "on", botenv.OnOff(true))
	require.Equal(t, "off", botenv.OnOff(false))
}

func TestOfflineReplyMemory(t *testing.T) {
	t.Parallel()
	resp, err := botenv.OfflineReply(t.Context(), agent.Request{Purpose: agent.PurposeMemory,
		Messages: []agent.Message{{Role: agent.RoleUser, Content: "[current] alice: I like tea"}}})
	require.NoError(t, err)
	require.JSONEq(t, `{"candidates":[]}`, resp.Text)

	resp, err = botenv.OfflineReply(t.Context(), agent.Request{Purpose: agent.PurposeChat,
		Messages: []agent.Message{{Role: agent.RoleUser, Content: "[current] alice: I like tea"}}})
	require.NoError(t, err)
	require.Contains(t, resp.Text, `You said "I like tea"`)
}

func TestMedia(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	opts, desc, err := botenv.Media(env())
	require.NoError(t, err)
	require.False(t, opts.Off)
	require.Nil(t, opts.Transcriber)
	require.Contains(t, desc, "voice not transcribed (set PERSONA_TRANSCRIBE_MODEL)")

	opts, desc, err = botenv.Media(env(botenv.EnvMedia, "off"))
	require.NoError(t, err)
	require.True(t, opts.Off)
	require.Contains(t, desc, "off")

	_, _, err = botenv.Media(env(botenv.EnvMedia, "maybe"))
	require.ErrorContains(t, err, `PERSONA_MEDIA="maybe"`)

	_, _, err = botenv.Media(env(botenv.EnvTranscribeModel, "whisper-1"))
	require.ErrorContains(t, err, "needs the model server")

	opts, desc, err = botenv.Media(env(botenv.EnvTranscribeModel, "whisper-1", "PERSONA_MODEL_BASE_URL", "http://127.0.0.1:1/v1"))
	require.NoError(t, err)
	require.NotNil(t, opts.Transcriber)
	require.Contains(t, desc, "voice transcribed by whisper-1")
}

func TestModelVision(t *testing.T) {
	t.Parallel()
	get := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	m, desc, _, err := botenv.Model(get(map[string]string{"PERSONA_MODEL_BASE_URL": "http://127.0.0.1:1/v1", botenv.EnvVision: "on"}))
	require.NoError(t, err)
	require.True(t, agent.AcceptsImages(m))
	require.Contains(t, desc, "with vision")
	m, _, _, err = botenv.Model(get(map[string]string{"PERSONA_MODEL_BASE_URL": "http://127.0.0.1:1/v1"}))
	require.NoError(t, err)
	require.False(t, agent.AcceptsImages(m))
	_, _, _, err = botenv.Model(get(map[string]string{botenv.EnvVision: "sometimes"}))
	require.ErrorContains(t, err, "PERSONA_MODEL_VISION")
}

func TestLoadDatabaseURL(t *testing.T) {
	t.Parallel()
	env := map[string]string{botenv.EnvDatabaseURL: "postgres://bot:s3cret-pass@db.internal:5432/persona?sslmode=require"}
	c, errs := botenv.Load(func(k string) string { return env[k] }, botenv.Defaults{DataDir: "data/x"})
	require.Empty(t, errs)
	require.Equal(t, env[botenv.EnvDatabaseURL], c.DatabaseURL)
	desc := c.StorageDesc()
	require.Contains(t, desc, "PostgreSQL at db.internal:5432/persona")
	require.NotContains(t, desc, "s3cret-pass", "the banner never shows the password")

	env[botenv.EnvDatabaseURL] = "mysql://bot@db/persona"
	_, errs = botenv.Load(func(k string) string { return env[k] }, botenv.Defaults{})
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), botenv.EnvDatabaseURL)

	c, errs = botenv.Load(func(string) string { return "" }, botenv.Defaults{DataDir: "data/x"})
	require.Empty(t, errs)
	require.Equal(t, filepath.FromSlash("data/x"), c.StorageDesc(), "without a URL the state is in the data directory")
}
