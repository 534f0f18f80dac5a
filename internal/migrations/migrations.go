// Package migrations reads the numbered SQL migrations a store embeds
// ("NNNN_description.sql"), for both the SQLite and the PostgreSQL store.
package migrations

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one embedded schema step.
type Migration struct {
	// Version is the file's number: versions start at 1 and have no gaps.
	Version int
	// Name is the file name.
	Name string
	// SQL is the file's text.
	SQL string
}

// Load reads the files matching pattern (such as "migrations/*.sql") in
// fsys, in version order. A name that does not start with a positive
// number and "_", a gap or a duplicate version is an error.
func Load(fsys fs.FS, pattern string) ([]Migration, error) {
	names, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number and '_'", base)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: base, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: version %d, want %d (no gaps or duplicates)", m.Name, m.Version, i+1)
		}
	}
	return out, nil
}
