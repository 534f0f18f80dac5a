package store

/*
#include <stdlib.h>
#include "sqliteapi.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// walVFS is the name of the SQLite VFS the writer connection opens its
// file with (walbuf.c): the default VFS, except that a write-ahead log's
// frames reach the file in one write call per commit instead of two per
// page. The first Open registers it (registerWALVFS), never as the default
// VFS; a connection uses it only when it names it, as the writer's does.
// Nothing else of SQLite is changed for the process (see the package
// documentation, "SQLite in the process").
const walVFS = "persona-walbuf"

var (
	walVFSOnce sync.Once
	walVFSErr  error
)

// registerWALVFS registers walVFS with SQLite, once per process, when the
// first DB is opened (not when the package is initialized).
func registerWALVFS() error {
	walVFSOnce.Do(func() {
		name := C.CString(walVFS) // kept for the life of the process, as SQLite requires
		if rc := C.walbuf_register(name); rc != 0 {
			C.free(unsafe.Pointer(name))
			walVFSErr = fmt.Errorf("store: register the %s SQLite VFS: result code %d", walVFS, int(rc))
		}
	})
	return walVFSErr
}

// walWrites reports the WAL writes SQLite asked the writer's VFS for and
// the write calls they became, process-wide (for tests and benchmarks).
func walWrites() (requested, issued int64) {
	var r, i C.sqlapi_i64
	C.walbuf_counts(&r, &i)
	return int64(r), int64(i)
}
