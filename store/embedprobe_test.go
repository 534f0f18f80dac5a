package store

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStoreLeavesEmbedderSQLiteAlone builds internal/embedprobe, a program
// with SQLite connections of its own, twice: without the store and with it
// imported. It runs the first, the second as it is, and the second after
// it opened a store and put it to work; each prints what SQLite shows the
// program (its connection's functions, modules, collations, pragmas and
// settings, the outcome of some work on a small page cache, the default
// VFS and the VFS of a connection opened through SQLite's C interface,
// whether any automatic extension is registered, and whether SQLite runs
// its default page cache). The three outputs must be the same, except that
// the store's run lists one more registered VFS, persona-walbuf, which is
// not the default and which only the store's writer connection names.
func TestStoreLeavesEmbedderSQLiteAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program")
	}
	t.Parallel()
	bin := t.TempDir()
	without, with := filepath.Join(bin, "probe-without-store"), filepath.Join(bin, "probe")
	goOutput(t, "build", "-tags", "persona_nostore", "-o", without, "./internal/embedprobe")
	goOutput(t, "build", "-o", with, "./internal/embedprobe")

	run := func(prog string, args ...string) []string {
		t.Helper()
		out, err := exec.Command(prog, append(args, t.TempDir())...).Output()
		var ee *exec.ExitError
		if err != nil && errors.As(err, &ee) {
			t.Fatalf("%s %v: %v\n%s", prog, args, err, ee.Stderr)
		}
		require.NoError(t, err)
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	notImported := run(without)
	imported := run(with)
	used := run(with, "-store")

	require.Contains(t, notImported, "automatic extensions: none")
	require.Contains(t, notImported, "page cache: SQLite's default")
	require.Greater(t, len(notImported), 100, "the probe saw SQLite's functions and pragmas")
	require.Empty(t, lineDiff(notImported, imported), "importing the store changes nothing")

	const vfsKey = "registered vfs: "
	vfsList := func(lines []string) (rest, names []string) {
		for _, l := range lines {
			if v, ok := strings.CutPrefix(l, vfsKey); ok {
				names = strings.Fields(v)
				continue
			}
			rest = append(rest, l)
		}
		slices.Sort(names)
		return rest, names
	}
	plainRest, plainVFS := vfsList(imported)
	usedRest, usedVFS := vfsList(used)
	require.Empty(t, lineDiff(plainRest, usedRest), "opening and using a store changes nothing the program sees")
	want := slices.Sorted(slices.Values(append(slices.Clone(plainVFS), walVFS)))
	require.Equal(t, want, usedVFS, "the store registers its writer's VFS by name, and nothing else")
}

// lineDiff lists the lines only a has ("- line") and only b has ("+
// line"), counting repeated lines.
func lineDiff(a, b []string) []string {
	n := map[string]int{}
	for _, l := range a {
		n[l]++
	}
	for _, l := range b {
		n[l]--
	}
	var out []string
	for _, l := range a {
		if n[l] > 0 {
			out = append(out, "- "+l)
			n[l]--
		}
	}
	for _, l := range b {
		if n[l] < 0 {
			out = append(out, "+ "+l)
			n[l]++
		}
	}
	return out
}
