/*
 * The declarations of SQLite's C interface that the probe needs beyond
 * store/sqliteapi.h (whose types it shares), written from SQLite's
 * documentation (https://sqlite.org/c3ref/funclist.html,
 * https://sqlite.org/c3ref/pcache_methods2.html). They are checked against
 * SQLite's header together with sqliteapi.h's (see there): the store's
 * TestSQLiteAPIMatchesSQLite compiles them with SQLAPI_CHECK defined.
 */
#ifndef PERSONA_EMBEDPROBE_H
#define PERSONA_EMBEDPROBE_H

#include "../../sqliteapi.h"

#ifdef SQLAPI_CHECK
typedef sqlite3 sqlapi_db;
typedef sqlite3_pcache sqlapi_pcache;
typedef sqlite3_pcache_page sqlapi_pcache_page;
typedef sqlite3_pcache_methods2 sqlapi_pcache_methods2;
#else
typedef struct sqlapi_db sqlapi_db;                   /* sqlite3, opaque */
typedef struct sqlapi_pcache sqlapi_pcache;           /* sqlite3_pcache, opaque */
typedef struct sqlapi_pcache_page sqlapi_pcache_page; /* sqlite3_pcache_page, not read here */
typedef struct sqlapi_pcache_methods2 sqlapi_pcache_methods2;
#endif

/* sqlite3_pcache_methods2, versions 1 and 2. */
SQLAPI_STRUCT(sqlapi_pcache_methods2) {
	int iVersion;
	void *pArg;
	int (*xInit)(void *);
	void (*xShutdown)(void *);
	sqlapi_pcache *(*xCreate)(int szPage, int szExtra, int bPurgeable);
	void (*xCachesize)(sqlapi_pcache *, int nCachesize);
	int (*xPagecount)(sqlapi_pcache *);
	sqlapi_pcache_page *(*xFetch)(sqlapi_pcache *, unsigned key, int createFlag);
	void (*xUnpin)(sqlapi_pcache *, sqlapi_pcache_page *, int discard);
	void (*xRekey)(sqlapi_pcache *, sqlapi_pcache_page *, unsigned oldKey, unsigned newKey);
	void (*xTruncate)(sqlapi_pcache *, unsigned iLimit);
	void (*xDestroy)(sqlapi_pcache *);
	void (*xShrink)(sqlapi_pcache *);
};

#define SQLAPI_OPEN_READWRITE 0x00000002
#define SQLAPI_OPEN_CREATE 0x00000004
#define SQLAPI_FCNTL_VFS_POINTER 27
#define SQLAPI_CONFIG_PCACHE2 18
#define SQLAPI_CONFIG_GETPCACHE2 19

int sqlite3_initialize(void);
int sqlite3_shutdown(void);
int sqlite3_config(int, ...);
int sqlite3_open_v2(const char *filename, sqlapi_db **ppDb, int flags, const char *zVfs);
int sqlite3_close(sqlapi_db *);
int sqlite3_file_control(sqlapi_db *, const char *zDbName, int op, void *);
sqlapi_i64 sqlite3_memory_used(void);
void sqlite3_reset_auto_extension(void);

#endif /* PERSONA_EMBEDPROBE_H */
