package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// The writer talks to its connection through the driver, not database/sql.
//
// Every durable write goes through the one writer goroutine, so its
// per-statement overhead bounds the store's throughput. database/sql adds
// a lock round, a conversion of every argument through reflection and a
// slice of converted arguments per statement: in the pipeline benchmarks
// about a tenth of the writer's CPU time and the largest single source of
// garbage (≈ 2 KB per message). The writer therefore runs inside
// (*sql.Conn).Raw for as long as it lives (see writer.loop) and prepares and
// runs its statements on the driver connection directly, converting the
// few argument and result types the store uses itself.

// driverStmt is what the writer needs of a prepared driver statement.
type driverStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// prepare returns the cached driver statement for q, preparing it on first
// use.
func (w *writer) prepare(q string) (driverStmt, error) {
	if s, ok := w.stmts[q]; ok {
		return s, nil
	}
	if w.dc == nil {
		return nil, ErrClosed
	}
	p, ok := w.dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("store: the driver connection cannot prepare with a context")
	}
	st, err := p.PrepareContext(context.Background(), q)
	if err != nil {
		return nil, err
	}
	ds, ok := st.(driverStmt)
	if !ok {
		_ = st.Close()
		return nil, errors.New("store: the driver statement cannot execute with a context")
	}
	w.stmts[q] = ds
	return ds, nil
}

// closeStmts closes the cached statements (inside the connection's Raw).
func (w *writer) closeStmts() {
	for _, s := range w.stmts {
		_ = s.Close()
	}
	clear(w.stmts)
}

// namedArgs converts statement arguments to driver values, numbered from
// 1 like ?NNN parameters.
func namedArgs(args []any) ([]driver.NamedValue, error) {
	return appendNamedArgs(make([]driver.NamedValue, 0, len(args)), args)
}

// appendNamedArgs is namedArgs into buf's storage (from its start).
func appendNamedArgs(buf []driver.NamedValue, args []any) ([]driver.NamedValue, error) {
	out := slices.Grow(buf[:0], len(args))[:len(args)]
	for i, a := range args {
		v, err := driverValue(a)
		if err != nil {
			return nil, fmt.Errorf("store: argument %d: %w", i+1, err)
		}
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return out, nil
}

// driverValue converts one argument: the driver's own value types pass as
// they are, the common Go ones are converted here, anything else the way
// database/sql would.
func driverValue(a any) (driver.Value, error) {
	switch v := a.(type) {
	case nil, int64, float64, bool, []byte, string, time.Time:
		return v, nil
	case int:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case uint32:
		return int64(v), nil
	case driver.Valuer:
		return v.Value()
	}
	return driver.DefaultParameterConverter.ConvertValue(a)
}

// wrows is a result set read on the driver connection, with the part of
// the *sql.Rows API the store's writes use.
type wrows struct {
	rows driver.Rows
	vals []driver.Value
	err  error
	done bool
}

// Next advances to the next row; false at the end or on error (see Err).
func (r *wrows) Next() bool {
	if r.done {
		return false
	}
	if err := r.rows.Next(r.vals); err != nil {
		r.done = true
		if !errors.Is(err, io.EOF) {
			r.err = err
		}
		return false
	}
	return true
}

// Scan copies the current row into dest.
func (r *wrows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("store: scan: %d destinations for %d columns", len(dest), len(r.vals))
	}
	for i, d := range dest {
		if err := assign(d, r.vals[i]); err != nil {
			return fmt.Errorf("store: scan column %d: %w", i, err)
		}
	}
	return nil
}

// Err is the error that ended the iteration, if any.
func (r *wrows) Err() error { return r.err }

// Close releases the statement's result set.
func (r *wrows) Close() error {
	r.done = true
	return r.rows.Close()
}

// wrow is the first row of a query, like *sql.Row.
type wrow struct {
	rows *wrows
	err  error
}

// Scan copies the row into dest; sql.ErrNoRows when there is none.
func (r wrow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer func() { _ = r.rows.Close() }()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	return r.rows.Scan(dest...)
}

// assign stores a driver value in a scan destination. It covers the types
// the store scans into; anything else is an error, never a silent zero.
func assign(dest any, src driver.Value) error {
	if s, ok := dest.(sql.Scanner); ok {
		return s.Scan(src)
	}
	switch d := dest.(type) {
	case *any:
		*d = src
		return nil
	case *string:
		switch v := src.(type) {
		case string:
			*d = v
			return nil
		case []byte:
			*d = string(v)
			return nil
		case int64:
			*d = strconv.FormatInt(v, 10)
			return nil
		}
	case *[]byte:
		switch v := src.(type) {
		case nil:
			*d = nil
			return nil
		case string:
			*d = []byte(v)
			return nil
		case []byte:
			*d = append([]byte(nil), v...)
			return nil
		}
	case *int64:
		if v, ok := src.(int64); ok {
			*d = v
			return nil
		}
	case *int:
		if v, ok := src.(int64); ok {
			*d = int(v)
			return nil
		}
	case *bool:
		switch v := src.(type) {
		case int64:
			*d = v != 0
			return nil
		case bool:
			*d = v
			return nil
		}
	case *float64:
		switch v := src.(type) {
		case float64:
			*d = v
			return nil
		case int64:
			*d = float64(v)
			return nil
		}
	}
	return fmt.Errorf("cannot store %T in %T", src, dest)
}
