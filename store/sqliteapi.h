/*
 * The few declarations of SQLite's public C interface that walbuf.c and
 * pcache.c need, written from SQLite's documentation
 * (https://sqlite.org/c3ref/vfs.html, https://sqlite.org/c3ref/io_methods.html,
 * https://sqlite.org/c3ref/pcache_methods2.html). The functions are SQLite's
 * own, compiled into the binary by github.com/mattn/go-sqlite3; its header is
 * not on the include path of this package, so the declarations are here.
 */
#ifndef PERSONA_SQLITEAPI_H
#define PERSONA_SQLITEAPI_H

typedef long long walbuf_i64;

typedef struct walbuf_sqlite3_file walbuf_sqlite3_file;
typedef struct walbuf_io_methods walbuf_io_methods;
typedef struct walbuf_vfs walbuf_vfs;
typedef struct walbuf_mutex walbuf_mutex; /* sqlite3_mutex, opaque */

/* sqlite3_file: every open file starts with its method table. */
struct walbuf_sqlite3_file {
	const walbuf_io_methods *pMethods;
};

/* sqlite3_io_methods, versions 1 to 3 (fields in documented order). */
struct walbuf_io_methods {
	int iVersion;
	int (*xClose)(walbuf_sqlite3_file *);
	int (*xRead)(walbuf_sqlite3_file *, void *, int iAmt, walbuf_i64 iOfst);
	int (*xWrite)(walbuf_sqlite3_file *, const void *, int iAmt, walbuf_i64 iOfst);
	int (*xTruncate)(walbuf_sqlite3_file *, walbuf_i64 size);
	int (*xSync)(walbuf_sqlite3_file *, int flags);
	int (*xFileSize)(walbuf_sqlite3_file *, walbuf_i64 *pSize);
	int (*xLock)(walbuf_sqlite3_file *, int);
	int (*xUnlock)(walbuf_sqlite3_file *, int);
	int (*xCheckReservedLock)(walbuf_sqlite3_file *, int *pResOut);
	int (*xFileControl)(walbuf_sqlite3_file *, int op, void *pArg);
	int (*xSectorSize)(walbuf_sqlite3_file *);
	int (*xDeviceCharacteristics)(walbuf_sqlite3_file *);
	int (*xShmMap)(walbuf_sqlite3_file *, int iPg, int pgsz, int, void volatile **);
	int (*xShmLock)(walbuf_sqlite3_file *, int offset, int n, int flags);
	void (*xShmBarrier)(walbuf_sqlite3_file *);
	int (*xShmUnmap)(walbuf_sqlite3_file *, int deleteFlag);
	int (*xFetch)(walbuf_sqlite3_file *, walbuf_i64 iOfst, int iAmt, void **pp);
	int (*xUnfetch)(walbuf_sqlite3_file *, walbuf_i64 iOfst, void *p);
};

/* sqlite3_vfs, versions 1 and 2 (fields in documented order; version 3
 * adds the system-call hooks, which this VFS does not offer). */
struct walbuf_vfs {
	int iVersion;
	int szOsFile;
	int mxPathname;
	walbuf_vfs *pNext;
	const char *zName;
	void *pAppData;
	int (*xOpen)(walbuf_vfs *, const char *zName, walbuf_sqlite3_file *, int flags, int *pOutFlags);
	int (*xDelete)(walbuf_vfs *, const char *zName, int syncDir);
	int (*xAccess)(walbuf_vfs *, const char *zName, int flags, int *pResOut);
	int (*xFullPathname)(walbuf_vfs *, const char *zName, int nOut, char *zOut);
	void *(*xDlOpen)(walbuf_vfs *, const char *zFilename);
	void (*xDlError)(walbuf_vfs *, int nByte, char *zErrMsg);
	void (*(*xDlSym)(walbuf_vfs *, void *, const char *zSymbol))(void);
	void (*xDlClose)(walbuf_vfs *, void *);
	int (*xRandomness)(walbuf_vfs *, int nByte, char *zOut);
	int (*xSleep)(walbuf_vfs *, int microseconds);
	int (*xCurrentTime)(walbuf_vfs *, double *);
	int (*xGetLastError)(walbuf_vfs *, int, char *);
	int (*xCurrentTimeInt64)(walbuf_vfs *, walbuf_i64 *);
};

/* sqlite3_pcache_page and sqlite3_pcache_methods2 (version 1 and 2 fields
 * in documented order). A cache is opaque. */
typedef struct walbuf_pcache walbuf_pcache;
typedef struct walbuf_pcache_page {
	void *pBuf;
	void *pExtra;
} walbuf_pcache_page;
typedef struct walbuf_pcache_methods2 {
	int iVersion;
	void *pArg;
	int (*xInit)(void *);
	void (*xShutdown)(void *);
	walbuf_pcache *(*xCreate)(int szPage, int szExtra, int bPurgeable);
	void (*xCachesize)(walbuf_pcache *, int nCachesize);
	int (*xPagecount)(walbuf_pcache *);
	walbuf_pcache_page *(*xFetch)(walbuf_pcache *, unsigned key, int createFlag);
	void (*xUnpin)(walbuf_pcache *, walbuf_pcache_page *, int discard);
	void (*xRekey)(walbuf_pcache *, walbuf_pcache_page *, unsigned oldKey, unsigned newKey);
	void (*xTruncate)(walbuf_pcache *, unsigned iLimit);
	void (*xDestroy)(walbuf_pcache *);
	void (*xShrink)(walbuf_pcache *);
} walbuf_pcache_methods2;

/* Installs the page cache wrapper of pcache.c; an SQLite result code
 * (SQLITE_MISUSE when SQLite was already initialized). */
int pcache_install(void);

/* How many balance swaps the wrapper parked under its own number (tests). */
walbuf_i64 pcache_parks(void);

/* Registers the VFS under name; an SQLite result code. Call it once per
 * process. */
int walbuf_register(const char *name);

/* Counters for tests and benchmarks: WAL writes SQLite asked for, and the
 * write calls they became. */
void walbuf_counts(walbuf_i64 *requested, walbuf_i64 *issued);

/* fastexec.c: one call per write statement on the writer's connection. */
#include <stdint.h>
enum { FX_NULL, FX_INT, FX_FLOAT, FX_TEXT, FX_BLOB };
typedef struct fx_arg {
	int kind; /* FX_* */
	int n;    /* text or blob length */
	long long i; /* the integer, or the text's or blob's offset in buf */
	double d;
} fx_arg;

/* Defines fx_handle() on the connections opened with VFS vfs from now on;
 * an SQLite result code. Call it once per process. */
int fx_register(const char *vfs);
int fx_prepare(uintptr_t db, const char *sql, int n, uintptr_t *stmt, int *params);
void fx_finalize(uintptr_t stmt);
int fx_exec(uintptr_t db, uintptr_t stmt, int nargs, const fx_arg *args, const char *buf, long long *changes,
	long long *rowid, char *err, int errn);

#endif /* PERSONA_SQLITEAPI_H */
