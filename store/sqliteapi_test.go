package store

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goTool returns the go command that runs the tests (go test puts its
// GOROOT/bin first in PATH).
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to locate go-sqlite3 and to build the probe")
	return p
}

// goOutput runs the go command with args in the package directory.
func goOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(goTool(t), args...).CombinedOutput()
	require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// sqliteHeaderCheck compiles testdata/sqliteapi_check.c against
// go-sqlite3's SQLite header with the C compiler cgo uses, taking
// sqliteapi.h and internal/embedprobe/probe.h from the tree at root, and
// returns the compiler's error (nil when the declarations match SQLite's).
func sqliteHeaderCheck(t *testing.T, root string) ([]byte, error) {
	t.Helper()
	sqliteDir := goOutput(t, "list", "-m", "-f", "{{.Dir}}", "github.com/mattn/go-sqlite3")
	cc := strings.Fields(goOutput(t, "env", "CC"))
	require.NotEmpty(t, cc, "go env CC")
	check, err := filepath.Abs(filepath.Join("testdata", "sqliteapi_check.c"))
	require.NoError(t, err)
	args := append(cc[1:], "-std=gnu11", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
		"-I", sqliteDir, "-I", root, check)
	return exec.Command(cc[0], args...).CombinedOutput()
}

// The C declarations written by hand (sqliteapi.h, and the probe's
// probe.h) are SQLite's: testdata/sqliteapi_check.c compiles them against
// the header of the SQLite that go-sqlite3 compiles in, comparing every
// function's type, every struct's field offsets, field types and size, and
// every constant. walbuf.c compiles against SQLite's own types too. Each
// kind of mistake makes the check fail.
func TestSQLiteAPIMatchesSQLite(t *testing.T) {
	t.Parallel()
	out, err := sqliteHeaderCheck(t, ".")
	require.NoError(t, err, "the declarations differ from SQLite's:\n%s", out)

	sqliteDir := goOutput(t, "list", "-m", "-f", "{{.Dir}}", "github.com/mattn/go-sqlite3")
	cc := strings.Fields(goOutput(t, "env", "CC"))
	args := append(cc[1:], "-std=gnu11", "-fsyntax-only", "-Wall", "-Werror", "-I", sqliteDir,
		"-DSQLAPI_CHECK", "-include", "sqlite3-binding.h", "walbuf.c")
	out, err = exec.Command(cc[0], args...).CombinedOutput()
	require.NoError(t, err, "walbuf.c against SQLite's types:\n%s", out)

	api, err := os.ReadFile("sqliteapi.h")
	require.NoError(t, err)
	probe, err := os.ReadFile(filepath.Join("internal", "embedprobe", "probe.h"))
	require.NoError(t, err)
	for _, m := range []struct {
		name, file, old, new string
		want                 string // in the compiler's output
	}{
		{"a function's return type", "api", "int sqlite3_threadsafe(void);", "long sqlite3_threadsafe(void);",
			"sqlite3_threadsafe"},
		{"a parameter type", "probe", "int sqlite3_close(sqlapi_db *);", "int sqlite3_close(void *);",
			"sqlite3_close"},
		{"two fields of one type swapped", "api",
			"\tint (*xLock)(sqlapi_file *, int);\n\tint (*xUnlock)(sqlapi_file *, int);\n",
			"\tint (*xUnlock)(sqlapi_file *, int);\n\tint (*xLock)(sqlapi_file *, int);\n", "xLock: offset"},
		{"a field's type", "api", "int (*xSync)(sqlapi_file *, int flags);", "int (*xSync)(sqlapi_file *, long flags);",
			"xSync: type"},
		{"a missing field", "api", "\tint (*xCurrentTimeInt64)(sqlapi_vfs *, sqlapi_i64 *);\n", "",
			"xCurrentTimeInt64"},
		{"an extra field", "probe", "\tvoid (*xShrink)(sqlapi_pcache *);\n",
			"\tvoid (*xShrink)(sqlapi_pcache *);\n\tvoid *pSpare;\n", "sqlite3_pcache_methods2: size"},
		{"a constant", "api", "#define SQLAPI_OPEN_WAL 0x00080000", "#define SQLAPI_OPEN_WAL 0x00040000",
			"SQLAPI_OPEN_WAL == SQLITE_OPEN_WAL"},
		{"the 64-bit integer", "api", "typedef long long sqlapi_i64;", "typedef long sqlapi_i64;", "sqlapi_i64"},
	} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			a, p := string(api), string(probe)
			target := &a
			if m.file == "probe" {
				target = &p
			}
			require.Contains(t, *target, m.old, "the mutation applies")
			*target = strings.Replace(*target, m.old, m.new, 1)
			require.NoError(t, os.MkdirAll(filepath.Join(root, "internal", "embedprobe"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, "sqliteapi.h"), []byte(a), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(root, "internal", "embedprobe", "probe.h"), []byte(p), 0o644))
			out, err := sqliteHeaderCheck(t, root)
			require.Error(t, err, "the check must reject %s", m.name)
			require.Contains(t, string(out), m.want)
		})
	}
}
