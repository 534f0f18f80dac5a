package store

/*
#include <stdlib.h>
#include "sqliteapi.h"
*/
import "C"

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/mattn/go-sqlite3"
)

// The writer's write statements (wtx.exec) run through fastexec.c: each
// binds its arguments, steps to its end and resets in one call into C,
// instead of go-sqlite3's one call per argument (see fastexec.c). Queries
// (wtx.query), strings of more than one statement, statements SQLite does
// not prepare, and arguments of other types go through the driver, which
// does with them what it always did.

var (
	fxOnce sync.Once
	fxErr  error
)

// registerFastExec makes connections opened with walVFS from now on offer
// their handle to fastexec (once per process).
func registerFastExec() error {
	fxOnce.Do(func() {
		name := C.CString(walVFS)
		defer C.free(unsafe.Pointer(name))
		if rc := C.fx_register(name); rc != 0 {
			fxErr = fmt.Errorf("store: register the fast writer path: result code %d", int(rc))
		}
	})
	return fxErr
}

// fxStmt is a statement prepared by fastexec.c; h 0 marks one left to the
// driver.
type fxStmt struct {
	h      C.uintptr_t
	params int
}

// fastConn is the writer connection's handle for fastexec.c, with its
// statements and reusable argument buffers. The zero value (no handle)
// sends every statement through the driver.
type fastConn struct {
	db    C.uintptr_t
	stmts map[string]fxStmt
	args  []C.fx_arg
	buf   []byte
	err   [256]C.char
}

// openFastConn asks the driver connection dc for its handle (fx_handle,
// defined only on connections opened with walVFS). ok is false when it has
// none.
func openFastConn(dc any) (fc fastConn, ok bool) {
	q, isQ := dc.(driver.QueryerContext)
	if !isQ {
		return fastConn{}, false
	}
	rows, err := q.QueryContext(context.Background(), "SELECT fx_handle()", nil)
	if err != nil {
		return fastConn{}, false
	}
	defer func() { _ = rows.Close() }()
	vals := make([]driver.Value, 1)
	if err := rows.Next(vals); err != nil {
		return fastConn{}, false
	}
	h, isInt := vals[0].(int64)
	if !isInt || h == 0 {
		return fastConn{}, false
	}
	return fastConn{db: C.uintptr_t(h), stmts: map[string]fxStmt{}}, true
}

// fxResult is the sql.Result of a fast write.
type fxResult struct{ changes, rowid int64 }

func (r fxResult) LastInsertId() (int64, error) { return r.rowid, nil }
func (r fxResult) RowsAffected() (int64, error) { return r.changes, nil }

// errNotFast: the statement or an argument needs the driver's path.
var errNotFast = errors.New("store: not a fast write")

// exec runs q with args (driver values) in one call into C; errNotFast
// when q is for the driver (see above) or an argument is of a type
// fastexec.c does not bind.
func (fc *fastConn) exec(q string, args []driver.NamedValue) (fxResult, error) {
	st, ok := fc.stmts[q]
	if !ok {
		var h C.uintptr_t
		var params C.int
		cq := C.CString(q)
		rc := C.fx_prepare(fc.db, cq, C.int(len(q)), &h, &params)
		C.free(unsafe.Pointer(cq))
		if rc != 0 || h == 0 {
			if h != 0 {
				C.fx_finalize(h)
			}
			h = 0 // the driver prepares it, and reports the error if any
		}
		st = fxStmt{h: h, params: int(params)}
		fc.stmts[q] = st
	}
	if st.h == 0 || len(args) != st.params {
		return fxResult{}, errNotFast // the driver reports the mismatch
	}
	fc.args = fc.args[:0]
	fc.buf = fc.buf[:0]
	for _, a := range args {
		var x C.fx_arg
		switch v := a.Value.(type) {
		case nil:
			x.kind = C.FX_NULL
		case int64:
			x.kind, x.i = C.FX_INT, C.longlong(v)
		case bool:
			x.kind = C.FX_INT
			if v {
				x.i = 1
			}
		case float64:
			x.kind, x.d = C.FX_FLOAT, C.double(v)
		case string:
			if len(v) > math.MaxInt32 {
				return fxResult{}, errNotFast
			}
			x.kind, x.i, x.n = C.FX_TEXT, C.longlong(len(fc.buf)), C.int(len(v))
			fc.buf = append(fc.buf, v...)
		case []byte:
			if v == nil {
				x.kind = C.FX_NULL
				break
			}
			if len(v) > math.MaxInt32 {
				return fxResult{}, errNotFast
			}
			x.kind, x.i, x.n = C.FX_BLOB, C.longlong(len(fc.buf)), C.int(len(v))
			fc.buf = append(fc.buf, v...)
		default:
			return fxResult{}, errNotFast
		}
		fc.args = append(fc.args, x)
	}
	// A text or blob of length 0 still needs a valid pointer.
	fc.buf = append(fc.buf, 0)
	var changes, rowid C.longlong
	var argp *C.fx_arg
	if len(fc.args) > 0 {
		argp = &fc.args[0]
	}
	rc := C.fx_exec(fc.db, st.h, C.int(len(fc.args)), argp, (*C.char)(unsafe.Pointer(&fc.buf[0])), &changes, &rowid,
		&fc.err[0], C.int(len(fc.err)))
	if rc != 0 {
		return fxResult{}, fmt.Errorf("%w: %s", sqlite3.Error{Code: sqlite3.ErrNo(rc & 0xff),
			ExtendedCode: sqlite3.ErrNoExtended(rc)}, C.GoString(&fc.err[0]))
	}
	return fxResult{changes: int64(changes), rowid: int64(rowid)}, nil
}

// close finalizes the statements (before the connection closes).
func (fc *fastConn) close() {
	for _, st := range fc.stmts {
		if st.h != 0 {
			C.fx_finalize(st.h)
		}
	}
	clear(fc.stmts)
	fc.db = 0
}
