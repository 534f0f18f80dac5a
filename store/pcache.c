/*
 * pcache: a wrapper around SQLite's default page cache that keeps one
 * moment of a B-tree balance from costing a walk of the whole cache.
 *
 * When a balance reorders the pages it splits (so that siblings sit in
 * ascending page order in the file), SQLite swaps two pages' numbers
 * through a temporary number: the pending-byte page, the page holding
 * byte 2^30 of the file (262,145 with 4 KiB pages), which never holds
 * data. The default cache remembers the largest page number it was given;
 * at the end of the transaction SQLite drops the pages past the end of the
 * file, and a largest number that far past the end makes the cache walk
 * every one of its pages and hash slots instead of the few past the end.
 * With the store's writer cache that walk was the largest single cost of
 * the writer thread under load (11 % of it on the replied path).
 *
 * The wrapper gives the default cache another temporary number for the
 * swap: one past the largest page number it has handed to it since the
 * last truncation. No page has that number (the wrapper sees every number
 * that enters the cache), and it lies just past the end of the file, so the
 * truncation stays short. Everything else passes through unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "sqliteapi.h"

#define PC_OK 0
#define PC_CONFIG_PCACHE2 18
#define PC_CONFIG_GETPCACHE2 19
#define PC_PENDING_BYTE 0x40000000u

extern int sqlite3_config(int, ...);

static walbuf_pcache_methods2 pc_real;
static walbuf_i64 pc_parks;

walbuf_i64 pcache_parks(void) { return __atomic_load_n(&pc_parks, __ATOMIC_RELAXED); }

typedef struct pc_cache {
	walbuf_pcache *real;
	unsigned pending; /* the pending-byte page number for this page size */
	unsigned maxKey;  /* no page in the cache has a larger number */
	unsigned parkedAt; /* the number standing for pending while parked */
	int parked;        /* a page is parked under pending */
} pc_cache;

static int pc_init(void *arg) {
	(void)arg;
	return pc_real.xInit ? pc_real.xInit(pc_real.pArg) : PC_OK;
}

static void pc_shutdown(void *arg) {
	(void)arg;
	if (pc_real.xShutdown) {
		pc_real.xShutdown(pc_real.pArg);
	}
}

static walbuf_pcache *pc_create(int szPage, int szExtra, int purgeable) {
	pc_cache *c = calloc(1, sizeof(*c));
	if (!c) {
		return 0;
	}
	c->real = pc_real.xCreate(szPage, szExtra, purgeable);
	if (!c->real) {
		free(c);
		return 0;
	}
	c->pending = szPage > 0 ? PC_PENDING_BYTE / (unsigned)szPage + 1 : 0;
	return (walbuf_pcache *)c;
}

static void pc_cachesize(walbuf_pcache *p, int n) { pc_real.xCachesize(((pc_cache *)p)->real, n); }

static int pc_pagecount(walbuf_pcache *p) { return pc_real.xPagecount(((pc_cache *)p)->real); }

static walbuf_pcache_page *pc_fetch(walbuf_pcache *p, unsigned key, int create) {
	pc_cache *c = (pc_cache *)p;
	walbuf_pcache_page *pg;
	if (c->parked && key == c->pending) {
		key = c->parkedAt;
	}
	pg = pc_real.xFetch(c->real, key, create);
	if (pg && key > c->maxKey) {
		c->maxKey = key;
	}
	return pg;
}

static void pc_unpin(walbuf_pcache *p, walbuf_pcache_page *pg, int discard) {
	pc_real.xUnpin(((pc_cache *)p)->real, pg, discard);
}

static void pc_rekey(walbuf_pcache *p, walbuf_pcache_page *pg, unsigned oldKey, unsigned newKey) {
	pc_cache *c = (pc_cache *)p;
	if (newKey == c->pending && !c->parked) {
		unsigned at = c->maxKey + 1;
		if (at == c->pending) {
			at++;
		}
		pc_real.xRekey(c->real, pg, oldKey, at);
		c->parked = 1;
		c->parkedAt = at;
		c->maxKey = at;
		__atomic_add_fetch(&pc_parks, 1, __ATOMIC_RELAXED);
		return;
	}
	if (oldKey == c->pending && c->parked) {
		oldKey = c->parkedAt;
		c->parked = 0;
	}
	pc_real.xRekey(c->real, pg, oldKey, newKey);
	if (newKey > c->maxKey) {
		c->maxKey = newKey;
	}
}

static void pc_truncate(walbuf_pcache *p, unsigned limit) {
	pc_cache *c = (pc_cache *)p;
	pc_real.xTruncate(c->real, limit);
	/* Every page numbered limit or above is gone. */
	if (limit == 0) {
		c->maxKey = 0;
	} else if (c->maxKey >= limit) {
		c->maxKey = limit - 1;
	}
}

static void pc_destroy(walbuf_pcache *p) {
	pc_cache *c = (pc_cache *)p;
	pc_real.xDestroy(c->real);
	free(c);
}

static void pc_shrink(walbuf_pcache *p) {
	pc_cache *c = (pc_cache *)p;
	if (pc_real.xShrink) {
		pc_real.xShrink(c->real);
	}
}

static walbuf_pcache_methods2 pc_wrap = {
	1,
	0,
	pc_init,
	pc_shutdown,
	pc_create,
	pc_cachesize,
	pc_pagecount,
	pc_fetch,
	pc_unpin,
	pc_rekey,
	pc_truncate,
	pc_destroy,
	pc_shrink,
};

int pcache_install(void) {
	int rc;
	walbuf_pcache_methods2 real;
	memset(&real, 0, sizeof(real));
	rc = sqlite3_config(PC_CONFIG_GETPCACHE2, &real);
	if (rc != PC_OK) {
		return rc;
	}
	if (!real.xCreate || !real.xFetch || !real.xRekey || !real.xTruncate) {
		return 1;
	}
	pc_real = real;
	pc_wrap.iVersion = real.iVersion >= 2 ? 2 : 1;
	return sqlite3_config(PC_CONFIG_PCACHE2, &pc_wrap);
}
