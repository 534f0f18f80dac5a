package botenv_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

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
