// Command embedprobe is a program that embeds SQLite beside the persona
// store and prints what SQLite shows its own connections, so that a test
// (the store's TestStoreLeavesEmbedderSQLiteAlone) can require that using
// the store changes none of it. It is not an example: it pokes at SQLite's
// process-wide state through its C interface, shutting SQLite down at the
// end to read the page cache in use.
//
// Usage:
//
//	embedprobe [-store] dir
//
// With -store it opens a store (dir/persona.db) and puts it to work before
// opening its own database (dir/embedder.db), and closes the store at the
// end. Built with the tag persona_nostore it does not import the store at
// all (and -store fails), which shows what importing it changes. Every
// line of output is "key: value".
package main

/*
#include <stdlib.h>
#include <string.h>
#include "probe.h"

// probe_default_vfs names the default VFS.
static const char *probe_default_vfs(void) {
	sqlapi_vfs *v = sqlite3_vfs_find(0);
	return v && v->zName ? v->zName : "";
}

// probe_vfs_names lists the registered VFSes, default first, separated by
// spaces, into buf (size n).
static void probe_vfs_names(char *buf, int n) {
	int used = 0;
	buf[0] = 0;
	for (sqlapi_vfs *v = sqlite3_vfs_find(0); v && used < n - 1; v = v->pNext) {
		const char *name = v->zName ? v->zName : "?";
		int k = (int)strlen(name) + 1;
		if (used + k >= n) {
			break;
		}
		if (used > 0) {
			buf[used - 1] = ' ';
		}
		memcpy(buf + used, name, k);
		used += k;
	}
}

// probe_connection_vfs opens path with SQLite's C interface, as a C
// library of the program would, and copies the name of the VFS its main
// file uses into buf; an SQLite result code.
static int probe_connection_vfs(const char *path, char *buf, int n) {
	sqlapi_db *db = 0;
	sqlapi_vfs *v = 0;
	int rc = sqlite3_open_v2(path, &db, SQLAPI_OPEN_READWRITE | SQLAPI_OPEN_CREATE, 0);
	if (rc == SQLAPI_OK) {
		rc = sqlite3_file_control(db, "main", SQLAPI_FCNTL_VFS_POINTER, &v);
	}
	buf[0] = 0;
	if (rc == SQLAPI_OK && v && v->zName) {
		strncpy(buf, v->zName, n - 1);
		buf[n - 1] = 0;
	}
	sqlite3_close(db);
	return rc;
}

// probe_memory_used is the memory SQLite has allocated: never 0 while a
// connection is open, unless memory statistics are off.
static sqlapi_i64 probe_memory_used(void) { return sqlite3_memory_used(); }

// probe_auto_extensions reports the bytes SQLite frees when it forgets its
// automatic extensions: 0 when none is registered (the list is allocated
// by the first registration). It clears the list, so call it last but
// one, with memory statistics on.
static sqlapi_i64 probe_auto_extensions(void) {
	sqlapi_i64 before = sqlite3_memory_used();
	sqlite3_reset_auto_extension();
	return before - sqlite3_memory_used();
}

// probe_page_cache tells whether SQLite runs its own default page cache:
// 1 yes, 0 another one is installed, negative: a step failed. SQLite takes
// a page cache only while it is shut down, so this shuts it down, reads
// the page cache in use, installs none (which makes the next
// initialization install the default one), initializes, shuts down again
// and compares. Call it last, with every connection closed.
static int probe_page_cache(void) {
	sqlapi_pcache_methods2 cur, dflt, none;
	memset(&cur, 0, sizeof cur);
	memset(&dflt, 0, sizeof dflt);
	memset(&none, 0, sizeof none);
	if (sqlite3_shutdown() != SQLAPI_OK) return -1;
	if (sqlite3_config(SQLAPI_CONFIG_GETPCACHE2, &cur) != SQLAPI_OK) return -2;
	if (sqlite3_config(SQLAPI_CONFIG_PCACHE2, &none) != SQLAPI_OK) return -3;
	if (sqlite3_initialize() != SQLAPI_OK) return -4;
	if (sqlite3_shutdown() != SQLAPI_OK) return -5;
	if (sqlite3_config(SQLAPI_CONFIG_GETPCACHE2, &dflt) != SQLAPI_OK) return -6;
	return cur.iVersion == dflt.iVersion && cur.pArg == dflt.pArg && cur.xInit == dflt.xInit &&
		cur.xShutdown == dflt.xShutdown && cur.xCreate == dflt.xCreate && cur.xCachesize == dflt.xCachesize &&
		cur.xPagecount == dflt.xPagecount && cur.xFetch == dflt.xFetch && cur.xUnpin == dflt.xUnpin &&
		cur.xRekey == dflt.xRekey && cur.xTruncate == dflt.xTruncate && cur.xDestroy == dflt.xDestroy &&
		cur.xShrink == dflt.xShrink;
}
*/
import "C"

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	_ "github.com/mattn/go-sqlite3" // the program's own SQLite driver
)

func main() {
	withStore := flag.Bool("store", false, "open a store and put it to work first")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: embedprobe [-store] dir")
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *withStore); err != nil {
		fmt.Fprintln(os.Stderr, "embedprobe:", err)
		os.Exit(1)
	}
}

// out collects the "key: value" lines.
type out struct{ lines []string }

func (o *out) add(key string, v any) { o.lines = append(o.lines, fmt.Sprintf("%s: %v", key, v)) }

func run(w *os.File, dir string, withStore bool) error {
	ctx := context.Background()
	o := &out{}
	closeStore := func() error { return nil }
	if withStore {
		var err error
		if closeStore, err = useStore(ctx, filepath.Join(dir, "persona.db")); err != nil {
			return err
		}
	}

	db, err := sql.Open("sqlite3", filepath.Join(dir, "embedder.db"))
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	if err := probeConnection(ctx, db, o); err != nil {
		_ = db.Close()
		return err
	}
	// The connection is open: SQLite holds memory, unless it does not count.
	memoryStats := C.probe_memory_used() > 0
	if err := db.Close(); err != nil {
		return err
	}

	// SQLite's process-wide state.
	o.add("default vfs", C.GoString(C.probe_default_vfs()))
	var names [1024]C.char
	C.probe_vfs_names(&names[0], C.int(len(names)))
	o.add("registered vfs", C.GoString(&names[0]))
	path := C.CString(filepath.Join(dir, "embedder-c.db"))
	defer C.free(unsafe.Pointer(path))
	var vfs [256]C.char
	if rc := C.probe_connection_vfs(path, &vfs[0], C.int(len(vfs))); rc != 0 {
		return fmt.Errorf("open a connection through the C interface: result code %d", int(rc))
	}
	o.add("vfs of a connection opened through the C interface", C.GoString(&vfs[0]))

	if err := closeStore(); err != nil {
		return err
	}
	switch n := C.probe_auto_extensions(); {
	case !memoryStats:
		o.add("automatic extensions", "cannot tell (memory statistics are off)")
	case n == 0:
		o.add("automatic extensions", "none")
	default:
		o.add("automatic extensions", "registered")
	}
	switch rc := C.probe_page_cache(); rc {
	case 1:
		o.add("page cache", "SQLite's default")
	case 0:
		o.add("page cache", "replaced")
	default:
		return fmt.Errorf("read the page cache in use: step %d failed", -int(rc))
	}
	_, err = fmt.Fprintln(w, strings.Join(o.lines, "\n"))
	return err
}

// probeConnection records what the program's own connection shows: SQLite's
// identity and options, every function, module, collation and pragma it
// knows, its settings, and the outcome of some work on a small page cache.
func probeConnection(ctx context.Context, db *sql.DB, o *out) error {
	var version, source string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version(), sqlite_source_id()").Scan(&version, &source); err != nil {
		return err
	}
	o.add("sqlite", version+" "+source)
	o.add("drivers", strings.Join(sql.Drivers(), " "))
	for _, q := range []struct{ key, sql string }{
		{"compile option", "PRAGMA compile_options"},
		{"function", "SELECT name || ' ' || builtin || ' ' || type || ' ' || enc || ' ' || narg || ' ' || flags FROM pragma_function_list"},
		{"module", "SELECT name FROM pragma_module_list"},
		{"collation", "SELECT name FROM pragma_collation_list"},
		{"pragma", "SELECT name FROM pragma_pragma_list"},
	} {
		rows, err := strings0(ctx, db, q.sql)
		if err != nil {
			return fmt.Errorf("%s: %w", q.sql, err)
		}
		slices.Sort(rows)
		for _, r := range rows {
			o.add(q.key, r)
		}
	}
	for _, p := range []string{"journal_mode", "synchronous", "cache_size", "page_size", "cache_spill", "mmap_size",
		"temp_store", "automatic_index", "foreign_keys", "busy_timeout", "locking_mode", "soft_heap_limit",
		"hard_heap_limit", "threads", "wal_autocheckpoint", "journal_size_limit", "recursive_triggers",
		"secure_delete", "cell_size_check", "trusted_schema", "query_only", "read_uncommitted", "encoding",
		"auto_vacuum", "analysis_limit"} {
		var v string
		if err := db.QueryRowContext(ctx, "PRAGMA "+p).Scan(&v); err != nil {
			return fmt.Errorf("PRAGMA %s: %w", p, err)
		}
		o.add("pragma "+p, v)
	}

	// Work through a page cache far smaller than the data, in WAL mode,
	// and what SQLite counts of it.
	for _, s := range []string{
		"PRAGMA journal_mode = WAL", "PRAGMA cache_size = 16",
		"CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT UNIQUE, v BLOB)",
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4000) " +
			"INSERT INTO t (k, v) SELECT printf('key-%06d', (i * 7919) % 4000), zeroblob(200 + i % 300) FROM n",
		"DELETE FROM t WHERE id % 3 = 0",
		"UPDATE t SET v = zeroblob(100) WHERE id % 5 = 0",
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	for _, q := range []string{"SELECT count(*) || ' ' || sum(length(v)) FROM t", "PRAGMA page_count",
		"PRAGMA freelist_count", "PRAGMA integrity_check", "PRAGMA wal_checkpoint(TRUNCATE)"} {
		rows, err := strings0(ctx, db, q)
		if err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		o.add(q, strings.Join(rows, " | "))
	}
	return nil
}

// strings0 runs q and returns the first column of every row as text.
func strings0(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = v.String
		}
		out = append(out, strings.Join(parts, " "))
	}
	return out, rows.Err()
}
