package store

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
)

// The writer's statements run through fastexec.c, and store exactly what
// the driver's path stores for every argument type the store uses.
func TestFastExecStoresWhatTheDriverStores(t *testing.T) {
	d := open(t, clock.Real)
	ctx := t.Context()
	require.NoError(t, d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`CREATE TABLE fx (id INTEGER PRIMARY KEY, path TEXT, v ANY)`)
		return err
	}))
	values := []any{nil, int64(-7), int64(1) << 62, true, false, 2.5, "", "text with \x00 inside", "日本語",
		[]byte(nil), []byte{}, []byte{0, 1, 2, 255}, 42, uint32(7)}
	for i, v := range values {
		// The same value once through each path: the driver's by turning
		// the fast one off for the statement.
		require.NoError(t, d.write(ctx, func(tx wtx) error {
			res, err := tx.exec(`INSERT INTO fx (path, v) VALUES ('fast', ?1)`, v)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			id, _ := res.LastInsertId()
			require.EqualValues(t, 1, n, "value %d", i)
			require.EqualValues(t, 2*i+1, id, "value %d", i)
			fast := tx.w.fast
			tx.w.fast = fastConn{}
			defer func() { tx.w.fast = fast }()
			_, err = tx.exec(`INSERT INTO fx (path, v) VALUES ('driver', ?1)`, v)
			return err
		}))
	}
	require.NoError(t, d.write(ctx, func(tx wtx) error { // on the writer's goroutine
		require.NotZero(t, tx.w.fast.db, "the writer has a handle")
		require.Contains(t, tx.w.fast.stmts, `INSERT INTO fx (path, v) VALUES ('fast', ?1)`, "the insert ran through fastexec")
		return nil
	}))
	row := `SELECT typeof(v) || ' ' || quote(v) FROM fx WHERE path = ?1 ORDER BY id`
	fast, drv := queryStrings(t, d, row, "fast"), queryStrings(t, d, row, "driver")
	require.Len(t, fast, len(values))
	require.Equal(t, drv, fast)
	require.Equal(t, "null NULL", fast[0])
	require.Equal(t, "blob X'000102FF'", fast[11])
}

// A failing write reports SQLite's code and message, and leaves the
// statement usable.
func TestFastExecErrors(t *testing.T) {
	d := open(t, clock.Real)
	ctx := t.Context()
	require.NoError(t, d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`CREATE TABLE fxc (k TEXT PRIMARY KEY, n INTEGER CHECK (n >= 0))`)
		return err
	}))
	ins := `INSERT INTO fxc (k, n) VALUES (?1, ?2)`
	err := d.write(ctx, func(tx wtx) error { _, err := tx.exec(ins, "a", int64(-1)); return err })
	var se sqlite3.Error
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, sqlite3.ErrConstraint, se.Code)
	require.Equal(t, sqlite3.ErrConstraintCheck, se.ExtendedCode)
	require.ErrorContains(t, err, "CHECK constraint failed")
	require.NoError(t, d.write(ctx, func(tx wtx) error { _, err := tx.exec(ins, "a", int64(1)); return err }))
	err = d.write(ctx, func(tx wtx) error { _, err := tx.exec(ins, "a", int64(2)); return err })
	require.ErrorContains(t, err, "UNIQUE constraint failed: fxc.k")
	require.True(t, errors.As(err, &se))
	require.Equal(t, sqlite3.ErrConstraintPrimaryKey, se.ExtendedCode)
	require.Equal(t, []string{"a 1"}, queryStrings(t, d, `SELECT k || ' ' || n FROM fxc`))

	// A string of two statements is not run here: the driver's path
	// decides what to do with it.
	require.NoError(t, d.write(ctx, func(tx wtx) error {
		two := `INSERT INTO fxc (k, n) VALUES ('c', 1); INSERT INTO fxc (k, n) VALUES ('d', 1)`
		_, err := tx.w.fast.exec(two, nil)
		require.ErrorIs(t, err, errNotFast)
		// Remembered as the driver's: not prepared again.
		require.Contains(t, tx.w.fast.stmts, two)
		require.Zero(t, tx.w.fast.stmts[two].h)
		_, err = tx.w.fast.exec(two, nil)
		require.ErrorIs(t, err, errNotFast)
		_, err = tx.w.fast.exec(`INSERT INTO fxc (k, n) VALUES ('e', 1);  `, nil)
		return err
	}))
	require.Equal(t, []string{"a", "e"}, queryStrings(t, d, `SELECT k FROM fxc ORDER BY k`))
}

// Only the writer's connection offers its handle.
func TestFastExecHandleOnlyOnTheWriter(t *testing.T) {
	d := open(t, clock.Real)
	var h int64
	err := d.rdb.QueryRowContext(t.Context(), `SELECT fx_handle()`).Scan(&h)
	require.ErrorContains(t, err, "no such function")
	db, err := sql.Open("sqlite3", d.Path())
	require.NoError(t, err)
	defer func() { _ = db.Close() }()
	err = db.QueryRowContext(t.Context(), `SELECT fx_handle()`).Scan(&h)
	require.ErrorContains(t, err, "no such function")
}
