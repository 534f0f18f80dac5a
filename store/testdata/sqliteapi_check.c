/*
 * Checks the hand-written declarations of store/sqliteapi.h and
 * store/internal/embedprobe/probe.h against SQLite's own header, the one
 * go-sqlite3 compiles SQLite with (TestSQLiteAPIMatchesSQLite compiles this
 * file with -I <go-sqlite3's directory> -I <store>; it is never linked).
 *
 * With SQLAPI_CHECK defined the headers' type names stand for SQLite's
 * types, so:
 *   - every function they declare redeclares SQLite's, and a different
 *     return or parameter type is a compile error (conflicting types);
 *   - their structs, declared under tags ending in _decl, are compared
 *     below with SQLite's: each field's offset and type, and the size;
 *   - their constants are compared with SQLite's.
 */
#include <stddef.h>

#include "sqlite3-binding.h"

#define SQLAPI_CHECK 1
#include "sqliteapi.h"
#include "internal/embedprobe/probe.h"

#define SAME_TYPE(a, b) __builtin_types_compatible_p(__typeof__(a), __typeof__(b))

/* FIELD: our field f sits where SQLite's does and has its type. */
#define FIELD(ours, theirs, f)                                                                   \
	_Static_assert(offsetof(struct ours, f) == offsetof(theirs, f), #theirs "." #f ": offset"); \
	_Static_assert(SAME_TYPE(((struct ours *)0)->f, ((theirs *)0)->f), #theirs "." #f ": type")

#define SAME_SIZE(ours, theirs) _Static_assert(sizeof(struct ours) == sizeof(theirs), #theirs ": size")

#define SAME_VALUE(ours, theirs) _Static_assert((ours) == (theirs), #ours " == " #theirs)

_Static_assert(SAME_TYPE(sqlapi_i64, sqlite3_int64), "sqlapi_i64 is sqlite3_int64");

FIELD(sqlapi_file_decl, sqlite3_file, pMethods);
SAME_SIZE(sqlapi_file_decl, sqlite3_file);

FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, iVersion);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xClose);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xRead);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xWrite);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xTruncate);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xSync);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xFileSize);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xLock);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xUnlock);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xCheckReservedLock);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xFileControl);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xSectorSize);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xDeviceCharacteristics);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xShmMap);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xShmLock);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xShmBarrier);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xShmUnmap);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xFetch);
FIELD(sqlapi_io_methods_decl, sqlite3_io_methods, xUnfetch);
SAME_SIZE(sqlapi_io_methods_decl, sqlite3_io_methods);

FIELD(sqlapi_vfs_decl, sqlite3_vfs, iVersion);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, szOsFile);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, mxPathname);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, pNext);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, zName);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, pAppData);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xOpen);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xDelete);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xAccess);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xFullPathname);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xDlOpen);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xDlError);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xDlSym);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xDlClose);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xRandomness);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xSleep);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xCurrentTime);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xGetLastError);
FIELD(sqlapi_vfs_decl, sqlite3_vfs, xCurrentTimeInt64);
/* Versions 1 and 2 only: everything before the version 3 fields. */
_Static_assert(sizeof(struct sqlapi_vfs_decl) == offsetof(sqlite3_vfs, xSetSystemCall), "sqlite3_vfs: size of v2");

FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, iVersion);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, pArg);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xInit);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xShutdown);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xCreate);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xCachesize);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xPagecount);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xFetch);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xUnpin);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xRekey);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xTruncate);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xDestroy);
FIELD(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2, xShrink);
SAME_SIZE(sqlapi_pcache_methods2_decl, sqlite3_pcache_methods2);

SAME_VALUE(SQLAPI_OK, SQLITE_OK);
SAME_VALUE(SQLAPI_ERROR, SQLITE_ERROR);
SAME_VALUE(SQLAPI_NOMEM, SQLITE_NOMEM);
SAME_VALUE(SQLAPI_OPEN_MAIN_DB, SQLITE_OPEN_MAIN_DB);
SAME_VALUE(SQLAPI_OPEN_WAL, SQLITE_OPEN_WAL);
SAME_VALUE(SQLAPI_MUTEX_FAST, SQLITE_MUTEX_FAST);
SAME_VALUE(SQLAPI_OPEN_READWRITE, SQLITE_OPEN_READWRITE);
SAME_VALUE(SQLAPI_OPEN_CREATE, SQLITE_OPEN_CREATE);
SAME_VALUE(SQLAPI_FCNTL_VFS_POINTER, SQLITE_FCNTL_VFS_POINTER);
SAME_VALUE(SQLAPI_CONFIG_PCACHE2, SQLITE_CONFIG_PCACHE2);
SAME_VALUE(SQLAPI_CONFIG_GETPCACHE2, SQLITE_CONFIG_GETPCACHE2);
