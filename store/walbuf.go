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
// page. The name is registered once per process; other connections (and
// other users of SQLite in the process) keep the default VFS.
const walVFS = "persona-walbuf"

var (
	walVFSOnce sync.Once
	walVFSErr  error
)

// registerWALVFS registers walVFS with SQLite (once).
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
	var r, i C.walbuf_i64
	C.walbuf_counts(&r, &i)
	return int64(r), int64(i)
}
