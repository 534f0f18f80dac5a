/*
 * The declarations of SQLite's C interface that walbuf.c needs, written
 * from SQLite's documentation (https://sqlite.org/c3ref/vfs.html,
 * https://sqlite.org/c3ref/io_methods.html). The functions are SQLite's own,
 * compiled into the binary by github.com/mattn/go-sqlite3, whose header is
 * not on this package's include path; hence the declarations here.
 *
 * They are checked against SQLite's header: TestSQLiteAPIMatchesSQLite
 * compiles testdata/sqliteapi_check.c, which includes go-sqlite3's
 * sqlite3-binding.h and then this file with SQLAPI_CHECK defined. In that
 * mode the type names below stand for SQLite's own types, so every function
 * declared here is a redeclaration of SQLite's and the compiler rejects any
 * difference; the structs are declared under other tags and compared with
 * SQLite's field by field (offset and type) and in size; and every constant
 * is compared with SQLite's. Whatever is added here must be added to that
 * check.
 */
#ifndef PERSONA_SQLITEAPI_H
#define PERSONA_SQLITEAPI_H

/* sqlite3_int64 (checked to be the same type). */
typedef long long sqlapi_i64;

#ifdef SQLAPI_CHECK
typedef sqlite3_file sqlapi_file;
typedef sqlite3_io_methods sqlapi_io_methods;
typedef sqlite3_vfs sqlapi_vfs;
typedef sqlite3_mutex sqlapi_mutex;
#define SQLAPI_STRUCT(tag) struct tag##_decl
#else
typedef struct sqlapi_file sqlapi_file;
typedef struct sqlapi_io_methods sqlapi_io_methods;
typedef struct sqlapi_vfs sqlapi_vfs;
typedef struct sqlapi_mutex sqlapi_mutex; /* sqlite3_mutex, opaque */
#define SQLAPI_STRUCT(tag) struct tag
#endif

/* sqlite3_file: every open file starts with its method table. */
SQLAPI_STRUCT(sqlapi_file) {
	const sqlapi_io_methods *pMethods;
};

/* sqlite3_io_methods, versions 1 to 3. */
SQLAPI_STRUCT(sqlapi_io_methods) {
	int iVersion;
	int (*xClose)(sqlapi_file *);
	int (*xRead)(sqlapi_file *, void *, int iAmt, sqlapi_i64 iOfst);
	int (*xWrite)(sqlapi_file *, const void *, int iAmt, sqlapi_i64 iOfst);
	int (*xTruncate)(sqlapi_file *, sqlapi_i64 size);
	int (*xSync)(sqlapi_file *, int flags);
	int (*xFileSize)(sqlapi_file *, sqlapi_i64 *pSize);
	int (*xLock)(sqlapi_file *, int);
	int (*xUnlock)(sqlapi_file *, int);
	int (*xCheckReservedLock)(sqlapi_file *, int *pResOut);
	int (*xFileControl)(sqlapi_file *, int op, void *pArg);
	int (*xSectorSize)(sqlapi_file *);
	int (*xDeviceCharacteristics)(sqlapi_file *);
	int (*xShmMap)(sqlapi_file *, int iPg, int pgsz, int, void volatile **);
	int (*xShmLock)(sqlapi_file *, int offset, int n, int flags);
	void (*xShmBarrier)(sqlapi_file *);
	int (*xShmUnmap)(sqlapi_file *, int deleteFlag);
	int (*xFetch)(sqlapi_file *, sqlapi_i64 iOfst, int iAmt, void **pp);
	int (*xUnfetch)(sqlapi_file *, sqlapi_i64 iOfst, void *p);
};

/* sqlite3_vfs, versions 1 and 2: a prefix of SQLite's struct (version 3
 * adds the system-call hooks, which walbuf's VFS does not offer). */
SQLAPI_STRUCT(sqlapi_vfs) {
	int iVersion;
	int szOsFile;
	int mxPathname;
	sqlapi_vfs *pNext;
	const char *zName;
	void *pAppData;
	int (*xOpen)(sqlapi_vfs *, const char *zName, sqlapi_file *, int flags, int *pOutFlags);
	int (*xDelete)(sqlapi_vfs *, const char *zName, int syncDir);
	int (*xAccess)(sqlapi_vfs *, const char *zName, int flags, int *pResOut);
	int (*xFullPathname)(sqlapi_vfs *, const char *zName, int nOut, char *zOut);
	void *(*xDlOpen)(sqlapi_vfs *, const char *zFilename);
	void (*xDlError)(sqlapi_vfs *, int nByte, char *zErrMsg);
	void (*(*xDlSym)(sqlapi_vfs *, void *, const char *zSymbol))(void);
	void (*xDlClose)(sqlapi_vfs *, void *);
	int (*xRandomness)(sqlapi_vfs *, int nByte, char *zOut);
	int (*xSleep)(sqlapi_vfs *, int microseconds);
	int (*xCurrentTime)(sqlapi_vfs *, double *);
	int (*xGetLastError)(sqlapi_vfs *, int, char *);
	int (*xCurrentTimeInt64)(sqlapi_vfs *, sqlapi_i64 *);
};

/* Result codes, open flags and the mutex type used (SQLITE_...). */
#define SQLAPI_OK 0
#define SQLAPI_ERROR 1
#define SQLAPI_NOMEM 7
#define SQLAPI_OPEN_MAIN_DB 0x00000100
#define SQLAPI_OPEN_WAL 0x00080000
#define SQLAPI_MUTEX_FAST 0

/* SQLite's functions (https://sqlite.org/c3ref/funclist.html). */
sqlapi_vfs *sqlite3_vfs_find(const char *zVfsName);
int sqlite3_vfs_register(sqlapi_vfs *, int makeDflt);
const char *sqlite3_filename_database(const char *);
sqlapi_mutex *sqlite3_mutex_alloc(int);
void sqlite3_mutex_enter(sqlapi_mutex *);
void sqlite3_mutex_leave(sqlapi_mutex *);
int sqlite3_threadsafe(void);

/* walbuf.c's own functions. */

/* Registers the VFS under name (never as the default); an SQLite result
 * code. Call it once per process. */
int walbuf_register(const char *name);

/* Counters for tests and benchmarks: WAL writes SQLite asked for, and the
 * write calls they became. */
void walbuf_counts(sqlapi_i64 *requested, sqlapi_i64 *issued);

#endif /* PERSONA_SQLITEAPI_H */
