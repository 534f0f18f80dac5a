/*
 * One call per write statement for the writer connection.
 *
 * go-sqlite3 binds each argument of a statement with its own cgo call
 * (an 18-argument transcript insert is 20 crossings into C); in the queue
 * benchmark that was 15 % of the writer's time. fx_exec binds a statement's
 * arguments from one buffer, steps it, reads the changes and the last rowid
 * and resets it, in one call. It runs on the writer's own connection, whose
 * handle an automatic extension hands out (fx_handle below) to connections
 * opened with the writer's VFS only.
 *
 * The SQLite functions are SQLite's own (see sqliteapi.h); the prototypes
 * are written from https://sqlite.org/c3ref/funclist.html.
 */
#include <stdint.h>
#include <string.h>
#include "sqliteapi.h"

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef struct sqlite3_context sqlite3_context;
typedef struct sqlite3_value sqlite3_value;

extern int sqlite3_auto_extension(void (*xEntryPoint)(void));
extern int sqlite3_file_control(sqlite3 *, const char *zDbName, int op, void *);
extern int sqlite3_create_function_v2(sqlite3 *, const char *zFunctionName, int nArg, int eTextRep, void *pApp,
	void (*xFunc)(sqlite3_context *, int, sqlite3_value **),
	void (*xStep)(sqlite3_context *, int, sqlite3_value **), void (*xFinal)(sqlite3_context *),
	void (*xDestroy)(void *));
extern void *sqlite3_user_data(sqlite3_context *);
extern void sqlite3_result_int64(sqlite3_context *, long long);
extern int sqlite3_prepare_v3(sqlite3 *, const char *zSql, int nByte, unsigned int prepFlags, sqlite3_stmt **ppStmt,
	const char **pzTail);
extern int sqlite3_bind_null(sqlite3_stmt *, int);
extern int sqlite3_bind_int64(sqlite3_stmt *, int, long long);
extern int sqlite3_bind_double(sqlite3_stmt *, int, double);
extern int sqlite3_bind_text(sqlite3_stmt *, int, const char *, int, void (*)(void *));
extern int sqlite3_bind_blob(sqlite3_stmt *, int, const void *, int, void (*)(void *));
extern int sqlite3_bind_parameter_count(sqlite3_stmt *);
extern int sqlite3_step(sqlite3_stmt *);
extern int sqlite3_reset(sqlite3_stmt *);
extern int sqlite3_clear_bindings(sqlite3_stmt *);
extern int sqlite3_finalize(sqlite3_stmt *);
extern long long sqlite3_changes64(sqlite3 *);
extern long long sqlite3_last_insert_rowid(sqlite3 *);
extern const char *sqlite3_errmsg(sqlite3 *);
extern int sqlite3_extended_errcode(sqlite3 *);

#define FX_SQLITE_OK 0
#define FX_SQLITE_ERROR 1
#define FX_SQLITE_RANGE 25
#define FX_SQLITE_ROW 100
#define FX_SQLITE_DONE 101
#define FX_SQLITE_UTF8 1
#define FX_SQLITE_DIRECTONLY 0x000080000
#define FX_SQLITE_FCNTL_VFS_POINTER 27
#define FX_SQLITE_PREPARE_PERSISTENT 0x01

/* fx_handle() returns the connection's handle as an integer. */
static void fx_handle_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	(void)argc;
	(void)argv;
	sqlite3_result_int64(ctx, (long long)(intptr_t)sqlite3_user_data(ctx));
}

static char fx_vfs_name[64];

/* The automatic extension: on a connection whose main file was opened with
 * the writer's VFS, define fx_handle(). */
static int fx_entry(sqlite3 *db, const char **pzErrMsg, const void *pApi) {
	(void)pzErrMsg;
	(void)pApi;
	walbuf_vfs *vfs = 0;
	if (sqlite3_file_control(db, "main", FX_SQLITE_FCNTL_VFS_POINTER, &vfs) != FX_SQLITE_OK || vfs == 0 ||
	    vfs->zName == 0 || strcmp(vfs->zName, fx_vfs_name) != 0) {
		return FX_SQLITE_OK;
	}
	return sqlite3_create_function_v2(db, "fx_handle", 0, FX_SQLITE_UTF8 | FX_SQLITE_DIRECTONLY, db, fx_handle_func,
		0, 0, 0);
}

int fx_register(const char *vfs) {
	if (strlen(vfs) >= sizeof fx_vfs_name) {
		return FX_SQLITE_ERROR;
	}
	strcpy(fx_vfs_name, vfs);
	return sqlite3_auto_extension((void (*)(void))fx_entry);
}

/* fx_prepare prepares the one statement of sql (n bytes); SQLITE_ERROR,
 * and no statement, when more than white space and semicolons follow it. */
int fx_prepare(uintptr_t db, const char *sql, int n, uintptr_t *stmt, int *params) {
	sqlite3_stmt *s = 0;
	const char *tail = 0;
	int rc = sqlite3_prepare_v3((sqlite3 *)db, sql, n, FX_SQLITE_PREPARE_PERSISTENT, &s, &tail);
	if (rc == FX_SQLITE_OK && s != 0 && tail != 0) {
		for (const char *p = tail; p < sql + n; p++) {
			if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != ';') {
				sqlite3_finalize(s);
				s = 0;
				rc = FX_SQLITE_ERROR;
				break;
			}
		}
	}
	*stmt = (uintptr_t)s;
	*params = s ? sqlite3_bind_parameter_count(s) : 0;
	return rc;
}

void fx_finalize(uintptr_t stmt) { sqlite3_finalize((sqlite3_stmt *)stmt); }

/* fx_exec binds args (texts and blobs are bytes of buf, valid for the
 * call), steps the statement to its end, reports the changes and the last
 * rowid, and resets it with its bindings cleared. On failure the message
 * is copied to err (size errn). */
int fx_exec(uintptr_t dbh, uintptr_t stmt, int nargs, const fx_arg *args, const char *buf, long long *changes,
	long long *rowid, char *err, int errn) {
	sqlite3 *db = (sqlite3 *)dbh;
	sqlite3_stmt *s = (sqlite3_stmt *)stmt;
	int rc = FX_SQLITE_OK;
	for (int i = 0; i < nargs && rc == FX_SQLITE_OK; i++) {
		const fx_arg *a = &args[i];
		switch (a->kind) {
		case FX_NULL:
			rc = sqlite3_bind_null(s, i + 1);
			break;
		case FX_INT:
			rc = sqlite3_bind_int64(s, i + 1, a->i);
			break;
		case FX_FLOAT:
			rc = sqlite3_bind_double(s, i + 1, a->d);
			break;
		case FX_TEXT:
			rc = sqlite3_bind_text(s, i + 1, buf + a->i, a->n, 0 /* SQLITE_STATIC */);
			break;
		case FX_BLOB:
			rc = sqlite3_bind_blob(s, i + 1, buf + a->i, a->n, 0 /* SQLITE_STATIC */);
			break;
		default:
			rc = FX_SQLITE_RANGE;
		}
	}
	if (rc == FX_SQLITE_OK) {
		do {
			rc = sqlite3_step(s);
		} while (rc == FX_SQLITE_ROW);
	}
	if (rc == FX_SQLITE_DONE) {
		*changes = sqlite3_changes64(db);
		*rowid = sqlite3_last_insert_rowid(db);
		rc = FX_SQLITE_OK;
	} else {
		int ec = sqlite3_extended_errcode(db);
		if (ec != FX_SQLITE_OK) {
			rc = ec;
		}
		if (errn > 0) {
			const char *m = sqlite3_errmsg(db);
			strncpy(err, m ? m : "", errn - 1);
			err[errn - 1] = 0;
		}
	}
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return rc;
}
