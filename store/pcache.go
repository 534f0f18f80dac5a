package store

/*
#include "sqliteapi.h"
*/
import "C"

// pcacheWrapped tells whether SQLite's page cache runs behind the wrapper
// of pcache.c, which keeps a B-tree balance from making the end of the
// transaction walk the whole cache. SQLite takes a page cache only before
// it initializes, so the wrapper is installed when this package is
// initialized; a program that used SQLite before (in another package's
// init) keeps the default cache, which is correct, only slower.
var pcacheWrapped = C.pcache_install() == 0

// pcacheParks reports how many page swaps the wrapper has handled
// (process-wide, for tests).
func pcacheParks() int64 { return int64(C.pcache_parks()) }
