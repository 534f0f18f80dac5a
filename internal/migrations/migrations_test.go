package migrations_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/internal/migrations"
)

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0002_b.sql": {Data: []byte("B")},
		"m/0001_a.sql": {Data: []byte("A")},
	}
	ms, err := migrations.Load(fsys, "m/*.sql")
	require.NoError(t, err)
	require.Equal(t, []migrations.Migration{{1, "0001_a.sql", "A"}, {2, "0002_b.sql", "B"}}, ms)

	for name, bad := range map[string]fstest.MapFS{
		"gap":        {"m/0001_a.sql": {}, "m/0003_c.sql": {}},
		"duplicate":  {"m/0001_a.sql": {}, "m/1_b.sql": {}},
		"unnumbered": {"m/init.sql": {}},
		"zero":       {"m/0000_a.sql": {}},
	} {
		_, err := migrations.Load(bad, "m/*.sql")
		require.Error(t, err, name)
	}
}
