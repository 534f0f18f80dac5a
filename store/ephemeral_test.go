package store

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// inList3 matches an IN list of three or more string constants.
var inList3 = regexp.MustCompile(`(?i)\bIN\s*\(\s*'[^']*'\s*,\s*'[^']*'\s*,`)

// requireNoEphemeralTables fails t when a statement the writer of d has
// prepared tests membership in a list of three or more constants, or is
// one of the writes every message makes (a plain INSERT, or a lease
// operation's UPDATE of its queue row) and builds an ephemeral table. SQLite evaluates `x IN (a, b, c, ...)`
// over three or more constants by building an in-memory B-tree of the list
// each time the statement runs; in a CHECK constraint (see migration 0009)
// that once cost the writer a fifth of its time per queue item. A CHECK,
// trigger or index condition hides such a list from the statement's text,
// so those writes are checked by their programs; TestSchemaHasNoLongInLists
// checks the definitions themselves. (Writes of many rows and RETURNING
// clauses build ephemeral tables of their own, once per statement.)
func requireNoEphemeralTables(t testing.TB, d *DB) {
	t.Helper()
	var qs []string
	err := d.write(context.Background(), func(tx wtx) error {
		qs = qs[:0]
		for q := range tx.w.stmts {
			qs = append(qs, q)
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(qs)
	for _, q := range qs {
		require.False(t, inList3.MatchString(q), "the writer's statement tests an IN list of constants:\n%s", q)
		upper := strings.ToUpper(q)
		insert := plainInsert.MatchString(q) && !strings.Contains(upper, "SELECT") && !strings.Contains(upper, "RETURNING")
		if !insert && !leaseWrites[q] {
			continue
		}
		ops, err := explain(d.rdb, q)
		require.NoError(t, err, q)
		require.NotContains(t, ops, "OpenEphemeral", "the writer's statement builds an ephemeral table:\n%s", q)
	}
}

// plainInsert matches the start of an INSERT.
var plainInsert = regexp.MustCompile(`(?i)^\s*INSERT\b`)

// leaseWrites are the UPDATEs of one queue row that lease operations make.
var leaseWrites = map[string]bool{
	sqlComplete: true, sqlCompleteSoft: true, sqlExtend: true, sqlExtendSoft: true, sqlRaisePriority: true,
}

// explain returns the opcodes of q's program, compiled on db with every
// parameter NULL.
func explain(db *sql.DB, q string) ([]string, error) {
	rows, err := db.Query("EXPLAIN " + q)
	if m := wantArgs.FindStringSubmatch(fmt.Sprint(err)); m != nil {
		n, _ := strconv.Atoi(m[1])
		rows, err = db.Query("EXPLAIN "+q, make([]any, n)...)
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var ops []string
	for rows.Next() {
		var addr, p1, p2, p3, p4, p5, comment any
		var op string
		if err := rows.Scan(&addr, &op, &p1, &p2, &p3, &p4, &p5, &comment); err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	return ops, rows.Err()
}

// wantArgs finds the parameter count in the driver's error for a query
// run with too few arguments.
var wantArgs = regexp.MustCompile(`not enough args to execute query: want (\d+)`)

// TestSchemaHasNoLongInLists: no table, index, trigger or view definition
// tests membership in a list of three or more constants (see
// requireNoEphemeralTables).
func TestSchemaHasNoLongInLists(t *testing.T) {
	t.Parallel()
	d := open(t, nil)
	rows, err := d.rdb.Query(`SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL`)
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	n := 0
	for rows.Next() {
		var typ, name, q string
		require.NoError(t, rows.Scan(&typ, &name, &q))
		require.False(t, inList3.MatchString(q), "%s %s tests an IN list of constants:\n%s", typ, name, q)
		n++
	}
	require.NoError(t, rows.Err())
	require.Greater(t, n, 10, "schema rows read")
}
