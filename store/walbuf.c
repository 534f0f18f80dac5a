/*
 * walbuf: an SQLite VFS that wraps the default one and gathers the writes
 * of a write-ahead log into one write call per commit.
 *
 * SQLite appends a frame to the WAL as two writes, its 24-byte header and
 * then the page, so a commit of n pages costs 2n write system calls. On
 * the store's write path those calls were a fifth of the writer thread's
 * time. This VFS keeps a WAL's appended bytes in a buffer and writes them
 * in one call:
 *
 *   - when the page of a commit frame (a frame header whose "database size
 *     after commit" field is not zero) has been appended: the commit's
 *     frames reach the file, and a failed write fails the commit, before
 *     SQLite publishes the commit in the WAL index;
 *   - before any other operation on the WAL file (read, sync, size,
 *     truncate, file control, close) and before a write that does not
 *     continue the buffered bytes;
 *   - and, as a safety net, when the database file's shared-memory barrier
 *     or locks are used: SQLite publishes a commit to other connections
 *     through the WAL index behind a barrier, so no connection can be told
 *     of a frame that is still in the buffer.
 *
 * Every other file (the database, journals, temporary files) passes
 * straight through. Writes that overwrite bytes still in the buffer (SQLite
 * rewrites a frame of the transaction in progress in place) update the
 * buffer.
 */
#include <stdlib.h>
#include <string.h>

#include "sqliteapi.h"

/* SQLite's constants and functions are declared in sqliteapi.h. */
#define WB_OK SQLAPI_OK
#define WB_ERROR SQLAPI_ERROR
#define WB_NOMEM SQLAPI_NOMEM
#define WB_OPEN_MAIN_DB SQLAPI_OPEN_MAIN_DB
#define WB_OPEN_WAL SQLAPI_OPEN_WAL
#define WB_MUTEX_FAST SQLAPI_MUTEX_FAST
/* The size of a WAL frame header (https://sqlite.org/fileformat.html). */
#define WB_FRAME_HEADER 24

/* WB_CAP bounds the buffered bytes: a larger commit is written in parts.
 * The unix VFS writes at most 128 KiB - 1 bytes per call (it masks the
 * count with 0x1ffff), so a buffer never holds more: 31 frames of 4 KiB
 * pages. */
#define WB_CAP 0x1ffff

typedef struct wb_file wb_file;
struct wb_file {
	sqlapi_file base; /* pMethods: wb_io */
	sqlapi_file *real; /* the wrapped VFS's file, right after this struct */
	const char *name;          /* a main database: the name SQLite opened it by */
	wb_file *wal;              /* a main database: its open WAL, if any */
	wb_file *db;               /* a WAL: its main database file, if found */
	wb_file *next;             /* the list of open main database files */
	int isWal;
	int commitNext; /* the next write completes a commit frame */
	char *buf;
	int n;          /* buffered bytes */
	sqlapi_i64 off; /* file offset of buf[0] */
};

static sqlapi_vfs wb_vfs;
static sqlapi_vfs *wb_real;
static sqlapi_mutex *wb_mu; /* guards wb_mains; SQLite's own mutex, so no thread library is needed */
static wb_file *wb_mains;
static sqlapi_i64 wb_requested, wb_issued;

void walbuf_counts(sqlapi_i64 *requested, sqlapi_i64 *issued) {
	*requested = __atomic_load_n(&wb_requested, __ATOMIC_RELAXED);
	*issued = __atomic_load_n(&wb_issued, __ATOMIC_RELAXED);
}

static const sqlapi_io_methods *real_methods(wb_file *p) { return p->real->pMethods; }

/* wb_flush writes the buffered bytes of a WAL. The buffer is empty
 * afterwards whatever the result: bytes whose write failed belong to a
 * transaction that SQLite is about to fail and roll back. */
static int wb_flush(wb_file *p) {
	int rc;
	if (p->n == 0) {
		return WB_OK;
	}
	rc = real_methods(p)->xWrite(p->real, p->buf, p->n, p->off);
	__atomic_add_fetch(&wb_issued, 1, __ATOMIC_RELAXED);
	p->n = 0;
	return rc;
}

/* wb_flush_wal flushes the WAL of a main database file, if it has one. */
static int wb_flush_wal(wb_file *p) { return p->wal ? wb_flush(p->wal) : WB_OK; }

/* wb_settle flushes a WAL before any operation other than an append. */
static int wb_settle(wb_file *p) { return p->isWal ? wb_flush(p) : WB_OK; }

static int wb_close(sqlapi_file *f) {
	wb_file *p = (wb_file *)f;
	int rc = WB_OK, rc2;
	if (p->isWal) {
		rc = wb_flush(p);
		sqlite3_mutex_enter(wb_mu);
		if (p->db) {
			p->db->wal = 0;
		}
		sqlite3_mutex_leave(wb_mu);
		free(p->buf);
		p->buf = 0;
	} else if (p->name) {
		wb_file **pp;
		sqlite3_mutex_enter(wb_mu);
		for (pp = &wb_mains; *pp; pp = &(*pp)->next) {
			if (*pp == p) {
				*pp = p->next;
				break;
			}
		}
		if (p->wal) {
			p->wal->db = 0;
		}
		sqlite3_mutex_leave(wb_mu);
	}
	rc2 = real_methods(p)->xClose(p->real);
	return rc != WB_OK ? rc : rc2;
}

static int wb_read(sqlapi_file *f, void *out, int amt, sqlapi_i64 off) {
	wb_file *p = (wb_file *)f;
	int rc = wb_settle(p);
	if (rc != WB_OK) {
		return rc;
	}
	return real_methods(p)->xRead(p->real, out, amt, off);
}

/* is_commit_header tells whether a write is a WAL frame header of a commit
 * frame: 24 bytes whose bytes 4..7 (the database size in pages after the
 * commit, big-endian) are not zero. A write that only looks like one costs
 * an early flush, nothing else. */
static int is_commit_header(const void *data, int amt) {
	const unsigned char *b = data;
	return amt == WB_FRAME_HEADER && (b[4] | b[5] | b[6] | b[7]) != 0;
}

static int wb_write(sqlapi_file *f, const void *data, int amt, sqlapi_i64 off) {
	wb_file *p = (wb_file *)f;
	int rc, commit;
	if (!p->isWal) {
		return real_methods(p)->xWrite(p->real, data, amt, off);
	}
	__atomic_add_fetch(&wb_requested, 1, __ATOMIC_RELAXED);
	/* Whether this write completes a commit frame is decided by the write
	 * before it, whatever path this one takes. */
	commit = p->commitNext;
	p->commitNext = is_commit_header(data, amt);
	if (p->n > 0 && off >= p->off && off + amt <= p->off + p->n) {
		memcpy(p->buf + (off - p->off), data, amt); /* rewrite of buffered bytes */
	} else if (p->n > 0 && off == p->off + p->n && p->n + amt <= WB_CAP) {
		memcpy(p->buf + p->n, data, amt);
		p->n += amt;
	} else {
		rc = wb_flush(p);
		if (rc != WB_OK) {
			return rc;
		}
		if (!p->buf && amt <= WB_CAP) {
			p->buf = malloc(WB_CAP);
		}
		if (!p->buf || amt > WB_CAP) {
			__atomic_add_fetch(&wb_issued, 1, __ATOMIC_RELAXED);
			return real_methods(p)->xWrite(p->real, data, amt, off);
		}
		memcpy(p->buf, data, amt);
		p->off = off;
		p->n = amt;
	}
	if (commit) {
		return wb_flush(p); /* the commit frame's page: the commit is complete */
	}
	return WB_OK;
}

static int wb_truncate(sqlapi_file *f, sqlapi_i64 size) {
	wb_file *p = (wb_file *)f;
	int rc = wb_settle(p);
	if (rc != WB_OK) {
		return rc;
	}
	return real_methods(p)->xTruncate(p->real, size);
}

static int wb_sync(sqlapi_file *f, int flags) {
	wb_file *p = (wb_file *)f;
	int rc = wb_settle(p);
	if (rc != WB_OK) {
		return rc;
	}
	return real_methods(p)->xSync(p->real, flags);
}

static int wb_file_size(sqlapi_file *f, sqlapi_i64 *size) {
	wb_file *p = (wb_file *)f;
	int rc = wb_settle(p);
	if (rc != WB_OK) {
		return rc;
	}
	return real_methods(p)->xFileSize(p->real, size);
}

static int wb_lock(sqlapi_file *f, int level) {
	wb_file *p = (wb_file *)f;
	return real_methods(p)->xLock(p->real, level);
}

static int wb_unlock(sqlapi_file *f, int level) {
	wb_file *p = (wb_file *)f;
	int rc = p->isWal ? wb_flush(p) : wb_flush_wal(p);
	int rc2 = real_methods(p)->xUnlock(p->real, level);
	return rc != WB_OK ? rc : rc2;
}

static int wb_check_reserved(sqlapi_file *f, int *out) {
	wb_file *p = (wb_file *)f;
	return real_methods(p)->xCheckReservedLock(p->real, out);
}

static int wb_file_control(sqlapi_file *f, int op, void *arg) {
	wb_file *p = (wb_file *)f;
	int rc = wb_settle(p);
	if (rc != WB_OK) {
		return rc;
	}
	return real_methods(p)->xFileControl(p->real, op, arg);
}

static int wb_sector_size(sqlapi_file *f) {
	wb_file *p = (wb_file *)f;
	return real_methods(p)->xSectorSize(p->real);
}

static int wb_device(sqlapi_file *f) {
	wb_file *p = (wb_file *)f;
	return real_methods(p)->xDeviceCharacteristics(p->real);
}

static int wb_shm_map(sqlapi_file *f, int pg, int pgsz, int extend, void volatile **pp) {
	wb_file *p = (wb_file *)f;
	if (real_methods(p)->iVersion < 2 || !real_methods(p)->xShmMap) {
		return WB_ERROR;
	}
	return real_methods(p)->xShmMap(p->real, pg, pgsz, extend, pp);
}

static int wb_shm_lock(sqlapi_file *f, int offset, int n, int flags) {
	wb_file *p = (wb_file *)f;
	int rc;
	if (real_methods(p)->iVersion < 2 || !real_methods(p)->xShmLock) {
		return WB_ERROR;
	}
	rc = wb_flush_wal(p);
	if (rc != WB_OK) {
		return rc;
	}
	return real_methods(p)->xShmLock(p->real, offset, n, flags);
}

static void wb_shm_barrier(sqlapi_file *f) {
	wb_file *p = (wb_file *)f;
	/* A failure here cannot be reported; the commit path above has already
	 * written (and reported) every commit frame. */
	(void)wb_flush_wal(p);
	if (real_methods(p)->iVersion >= 2 && real_methods(p)->xShmBarrier) {
		real_methods(p)->xShmBarrier(p->real);
	}
}

static int wb_shm_unmap(sqlapi_file *f, int deleteFlag) {
	wb_file *p = (wb_file *)f;
	(void)wb_flush_wal(p);
	if (real_methods(p)->iVersion < 2 || !real_methods(p)->xShmUnmap) {
		return WB_OK;
	}
	return real_methods(p)->xShmUnmap(p->real, deleteFlag);
}

static int wb_fetch(sqlapi_file *f, sqlapi_i64 off, int amt, void **pp) {
	wb_file *p = (wb_file *)f;
	if (real_methods(p)->iVersion < 3 || !real_methods(p)->xFetch) {
		*pp = 0;
		return WB_OK;
	}
	return real_methods(p)->xFetch(p->real, off, amt, pp);
}

static int wb_unfetch(sqlapi_file *f, sqlapi_i64 off, void *ptr) {
	wb_file *p = (wb_file *)f;
	if (real_methods(p)->iVersion < 3 || !real_methods(p)->xUnfetch) {
		return WB_OK;
	}
	return real_methods(p)->xUnfetch(p->real, off, ptr);
}

static const sqlapi_io_methods wb_io = {
	3,
	wb_close,
	wb_read,
	wb_write,
	wb_truncate,
	wb_sync,
	wb_file_size,
	wb_lock,
	wb_unlock,
	wb_check_reserved,
	wb_file_control,
	wb_sector_size,
	wb_device,
	wb_shm_map,
	wb_shm_lock,
	wb_shm_barrier,
	wb_shm_unmap,
	wb_fetch,
	wb_unfetch,
};

static int wb_open(sqlapi_vfs *vfs, const char *name, sqlapi_file *f, int flags, int *outFlags) {
	wb_file *p = (wb_file *)f;
	int rc;
	(void)vfs;
	memset(p, 0, sizeof(*p));
	p->real = (sqlapi_file *)&p[1];
	rc = wb_real->xOpen(wb_real, name, p->real, flags, outFlags);
	if (rc != WB_OK) {
		p->base.pMethods = 0;
		return rc;
	}
	if ((flags & WB_OPEN_MAIN_DB) && name) {
		p->name = name;
		sqlite3_mutex_enter(wb_mu);
		p->next = wb_mains;
		wb_mains = p;
		sqlite3_mutex_leave(wb_mu);
	} else if ((flags & WB_OPEN_WAL) && name) {
		/* SQLite names a WAL inside its database's name block, so the
		 * database's name pointer identifies the connection's main file.
		 * A WAL whose main file is not found (not opened through this VFS)
		 * is not buffered: its commits would miss the barrier's flush. */
		const char *db = sqlite3_filename_database(name);
		wb_file *m;
		sqlite3_mutex_enter(wb_mu);
		for (m = wb_mains; m; m = m->next) {
			if (m->name == db) {
				m->wal = p;
				p->db = m;
				p->isWal = 1;
				break;
			}
		}
		sqlite3_mutex_leave(wb_mu);
	}
	p->base.pMethods = &wb_io;
	return WB_OK;
}

static int wb_delete(sqlapi_vfs *v, const char *name, int syncDir) {
	(void)v;
	return wb_real->xDelete(wb_real, name, syncDir);
}
static int wb_access(sqlapi_vfs *v, const char *name, int flags, int *out) {
	(void)v;
	return wb_real->xAccess(wb_real, name, flags, out);
}
static int wb_full_pathname(sqlapi_vfs *v, const char *name, int n, char *out) {
	(void)v;
	return wb_real->xFullPathname(wb_real, name, n, out);
}
static void *wb_dl_open(sqlapi_vfs *v, const char *name) {
	(void)v;
	return wb_real->xDlOpen(wb_real, name);
}
static void wb_dl_error(sqlapi_vfs *v, int n, char *msg) {
	(void)v;
	wb_real->xDlError(wb_real, n, msg);
}
static void (*wb_dl_sym(sqlapi_vfs *v, void *h, const char *sym))(void) {
	(void)v;
	return wb_real->xDlSym(wb_real, h, sym);
}
static void wb_dl_close(sqlapi_vfs *v, void *h) {
	(void)v;
	wb_real->xDlClose(wb_real, h);
}
static int wb_randomness(sqlapi_vfs *v, int n, char *out) {
	(void)v;
	return wb_real->xRandomness(wb_real, n, out);
}
static int wb_sleep(sqlapi_vfs *v, int us) {
	(void)v;
	return wb_real->xSleep(wb_real, us);
}
static int wb_current_time(sqlapi_vfs *v, double *t) {
	(void)v;
	return wb_real->xCurrentTime(wb_real, t);
}
static int wb_last_error(sqlapi_vfs *v, int n, char *msg) {
	(void)v;
	return wb_real->xGetLastError(wb_real, n, msg);
}
static int wb_current_time64(sqlapi_vfs *v, sqlapi_i64 *t) {
	(void)v;
	return wb_real->xCurrentTimeInt64(wb_real, t);
}

/* walbuf_register is called once per process, by the first Open (the Go
 * side guarantees it). It registers the VFS under name without making it
 * the default (makeDflt 0): only connections that name it use it. */
int walbuf_register(const char *name) {
	sqlapi_vfs *real = sqlite3_vfs_find(0); /* this initializes SQLite */
	if (!real || real->iVersion < 2 || !real->xCurrentTimeInt64) {
		return WB_ERROR;
	}
	wb_mu = sqlite3_mutex_alloc(WB_MUTEX_FAST);
	if (!wb_mu && sqlite3_threadsafe()) {
		return WB_NOMEM;
	}
	wb_real = real;
	memset(&wb_vfs, 0, sizeof(wb_vfs));
	wb_vfs.iVersion = 2;
	wb_vfs.szOsFile = (int)sizeof(wb_file) + real->szOsFile;
	wb_vfs.mxPathname = real->mxPathname;
	wb_vfs.zName = name;
	wb_vfs.xOpen = wb_open;
	wb_vfs.xDelete = wb_delete;
	wb_vfs.xAccess = wb_access;
	wb_vfs.xFullPathname = wb_full_pathname;
	wb_vfs.xDlOpen = wb_dl_open;
	wb_vfs.xDlError = wb_dl_error;
	wb_vfs.xDlSym = wb_dl_sym;
	wb_vfs.xDlClose = wb_dl_close;
	wb_vfs.xRandomness = wb_randomness;
	wb_vfs.xSleep = wb_sleep;
	wb_vfs.xCurrentTime = wb_current_time;
	wb_vfs.xGetLastError = wb_last_error;
	wb_vfs.xCurrentTimeInt64 = wb_current_time64;
	return sqlite3_vfs_register(&wb_vfs, 0);
}
