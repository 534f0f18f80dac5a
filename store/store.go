package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
)

// The ports *DB implements.
var (
	_ inbound.Queue       = (*DB)(nil)
	_ inbound.Checkpoints = (*DB)(nil)
	_ memory.History      = (*DB)(nil)
	_ outbound.Ledger     = (*DB)(nil)
	_ gate.Flags          = (*DB)(nil)
)

// Errors returned by the store. Test for them with errors.Is.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("store: closed")
	// ErrInvalid is wrapped by the errors for malformed input (an item
	// without a session key, an outcome without a code, ...). Nothing is
	// written.
	ErrInvalid = errors.New("store: invalid input")
	// ErrSchemaTooNew is returned by Open when the database was migrated by
	// a newer version of this package than the running one.
	ErrSchemaTooNew = errors.New("store: database schema is newer than this build")
	// ErrFingerprintMismatch is returned by MarkIntent when the slot already
	// exists with a different fingerprint: the turn is about to send
	// something else than what the ledger recorded for that chunk.
	ErrFingerprintMismatch = errors.New("store: ledger slot fingerprint mismatch")
)

// SyncMode is the SQLite synchronous setting of the writer connection.
type SyncMode int

// The synchronous modes. See the package documentation for the trade-off.
const (
	// SyncNormal (the default) fsyncs the WAL only at checkpoints: a power
	// loss may lose the last committed transactions but never corrupts the
	// database. A process crash loses nothing.
	SyncNormal SyncMode = iota
	// SyncFull fsyncs the WAL on every commit: nothing committed is ever
	// lost, at the cost of one fsync per (group) commit.
	SyncFull
)

// String returns the SQLite pragma value of the mode.
func (m SyncMode) String() string {
	if m == SyncFull {
		return "FULL"
	}
	return "NORMAL"
}

// Defaults of Options.
const (
	// DefaultBusyTimeout is how long a connection waits for a lock held by
	// another connection or process before failing with SQLITE_BUSY.
	DefaultBusyTimeout = 5 * time.Second
	// DefaultReadConns is the size of the read connection pool.
	DefaultReadConns = 4
	// MaxCommitDelay caps Options.CommitDelay.
	MaxCommitDelay = 10 * time.Millisecond
)

// Options configure Open. The zero value is valid and means the defaults.
type Options struct {
	// Clock is the source of "now" for leases, availability and the
	// created/updated columns (nil = clock.Real).
	Clock clock.Clock
	// Logger receives migration and writer diagnostics (nil = discard).
	Logger *slog.Logger
	// Synchronous is the durability level of commits (zero = SyncNormal).
	Synchronous SyncMode
	// BusyTimeout bounds the wait for a lock (0 = DefaultBusyTimeout).
	BusyTimeout time.Duration
	// ReadConns is the number of read connections (0 = DefaultReadConns).
	ReadConns int
	// CommitDelay is how long the writer, while busy, waits for more
	// writes before it commits a batch of fewer than 8 (0 or negative =
	// never wait, the default; at most MaxCommitDelay). Every commit writes
	// each page it changed to the WAL, so small batches cost more per write
	// than large ones; waiting trades that for up to this much latency per
	// write. An idle writer never waits. Off by default: the pipeline's
	// callers wait for their commits, so in its benchmarks the wait cost
	// more throughput (replied −20 %, ignored −30 %) than the larger
	// batches saved; it can pay off with many independent writers.
	CommitDelay time.Duration
	// NoSearchIndexer leaves the background search indexer off. History
	// rows are still queued for search, and a history search first indexes
	// every queued row of the sessions it searches, so results stay
	// complete; the indexing work just moves from idle time to the first
	// search of a session.
	NoSearchIndexer bool
	// DeferSearch is for a DB whose history nothing (or hardly anything)
	// searches, such as the pipeline's without Options.Memory. It implies
	// NoSearchIndexer, and new history rows are stored without search
	// tokens (see search_deferred.go): a history search first tokenizes
	// and indexes every such row of the sessions it searches, so results
	// stay complete, and a DB opened later on the same file with the
	// background indexer does it for all of them. A message
	// then costs a tokenization and a search-queue row (a page of its own)
	// less.
	DeferSearch bool

	// noTimelineFlusher leaves the timeline flusher off (tests that flush
	// the timeline themselves, see timeline.go); timelineEvery replaces
	// its period (tests).
	noTimelineFlusher bool
	timelineEvery     time.Duration
	// directWrites disables group commit: every write runs in its own
	// transaction on the caller's goroutine. Only the benchmarks set it, to
	// compare both designs.
	directWrites bool
}

// DB is a persona store on one SQLite file. It implements inbound.Queue,
// inbound.Checkpoints, inbound.RecordReader, memory.History,
// outbound.Ledger, gate.Flags and schedule.Store.
// A DB is safe for concurrent use; create it with Open and release it with
// Close.
type DB struct {
	path string
	clk  clock.Clock
	log  *slog.Logger
	wdb  *sql.DB // the single writer connection
	rdb  *sql.DB // the read pool
	cdb  *sql.DB // the checkpoint connection
	w    *writer
	// events caches decoded transcript payloads for Recent.
	events *eventCache
	// hist caches the sessions' recent transcript for Recent (see
	// histcache.go).
	hist *histCache
	// sched is the claim index of the live queue items (see sched.go).
	sched *sched
	// ix indexes history rows for search in the background.
	ix searchIndexer
	// tl moves new transcript rows into the session timeline (see
	// timeline.go).
	tl background
	// deferTokens: new history rows are stored untokenized (no search
	// indexer, see search_deferred.go); untokenized: some rows may be.
	deferTokens bool
	untokenized atomic.Bool
	// owner is the DB's hold on the file's lock file, released by Close.
	owner *ownerLock
	// orphans are the items whose lease Open freed (their holder died
	// while it ran them) and that have not had a lease operation since:
	// Claim reports them as inbound.Lease.Orphaned.
	orphanMu sync.Mutex
	orphans  map[string]struct{}
}

// writerCacheKiB is the writer connection's page cache size (see Open).
const writerCacheKiB = 8 << 10

// Open opens (creating if needed) the SQLite database file at path, applies
// the embedded migrations and starts the writer. path must name a file; an
// in-memory database is refused because the read pool and the writer would
// each see a different one.
//
// The returned DB owns the file until Close: Open takes an exclusive lock
// on the lock file beside it (path + "-lock", created if needed and left in
// place), and fails with ErrLocked while another DB, in this process or
// another, holds it. Once it holds the lock, Open frees every lease the
// file still records (a previous owner's, whose holders are gone): each
// such item is pending and claimable at once, its attempts as they were.
// See "Ownership and crash recovery" in the package documentation.
func Open(path string, opts Options) (*DB, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("%w: store.Open needs a file path, got %q", ErrInvalid, path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = DefaultReadConns
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The file has one owner: this DB, until Close (see "Ownership and
	// crash recovery" in the package documentation).
	owner, err := acquireOwner(abs)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	d := &DB{path: abs, clk: clock.OrReal(opts.Clock), log: log, events: newEventCache(), hist: newHistCache(),
		sched: newSched(), owner: owner}
	opened := false
	defer func() {
		if !opened {
			_ = owner.release()
		}
	}()

	busy := strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)
	wq := url.Values{}
	wq.Set("_journal_mode", "WAL")
	wq.Set("_synchronous", opts.Synchronous.String())
	wq.Set("_busy_timeout", busy)
	wq.Set("_txlock", "immediate")
	wq.Set("_foreign_keys", "1")
	// Every connection is used by one goroutine at a time (database/sql
	// hands a connection to one caller; the writer's is the writer
	// goroutine's alone), so SQLite's per-connection mutex only costs a
	// lock round per API call: SQLITE_OPEN_NOMUTEX. (The queue benchmark's
	// writer time per item fell by 2–15 % in three alternating rounds.)
	wq.Set("_mutex", "no")
	// The writer's page cache is kept small on purpose: when a B-tree
	// balance reorders pages, SQLite parks a page under the pending-byte
	// page number (past the end of any smaller file) for a moment, and the
	// next commit then walks the whole page cache to drop pages past the
	// end of the file. With a 64 MiB cache that walk was 11–13 % of the
	// writer's time once the cache had filled; 8 MiB holds the inner pages
	// of a database of millions of rows.
	wq.Set("_cache_size", strconv.Itoa(-writerCacheKiB))
	// The writer's VFS writes a commit's WAL frames in one call (walbuf.c).
	// It is registered with SQLite by the first Open, never as the
	// default; only this connection names it.
	if err := registerWALVFS(); err != nil {
		return nil, err
	}
	wq.Set("vfs", walVFS)
	d.wdb, err = sql.Open("sqlite3", dsn(abs, wq))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	d.wdb.SetMaxOpenConns(1)
	d.wdb.SetMaxIdleConns(1)
	d.wdb.SetConnMaxLifetime(0)
	d.wdb.SetConnMaxIdleTime(0)

	ctx := context.Background()
	conn, err := d.wdb.Conn(ctx)
	if err != nil {
		_ = d.wdb.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	fail := func(err error) (*DB, error) {
		_ = conn.Close()
		_ = d.wdb.Close()
		if d.rdb != nil {
			_ = d.rdb.Close()
		}
		if d.cdb != nil {
			_ = d.cdb.Close()
		}
		return nil, err
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}
	if mode != "wal" {
		return fail(fmt.Errorf("store: open %s: journal mode is %q, want wal", path, mode))
	}
	// Checkpoints run on their own connection (see checkpointer); savepoint
	// journals and claim sorts stay in memory. Automatic indexes are off: the
	// planner builds one for the claim's few-row self-join on every run,
	// which costs more than the nested loop it replaces.
	if _, err := conn.ExecContext(ctx, `PRAGMA wal_autocheckpoint = 0;
PRAGMA journal_size_limit = `+strconv.Itoa(walSoftLimit)+`;
PRAGMA temp_store = MEMORY;
PRAGMA automatic_index = OFF`); err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}
	var pageSize int64
	if err := conn.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}
	if err := migrate(ctx, conn, log); err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}

	rq := url.Values{}
	rq.Set("_busy_timeout", busy)
	rq.Set("_foreign_keys", "1")
	rq.Set("_query_only", "1")
	rq.Set("_txlock", "deferred")
	rq.Set("_mutex", "no") // see wq
	d.rdb, err = sql.Open("sqlite3", dsn(abs, rq))
	if err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}
	d.rdb.SetMaxOpenConns(opts.ReadConns)
	d.rdb.SetMaxIdleConns(opts.ReadConns)
	if err := d.rdb.PingContext(ctx); err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}

	cq := url.Values{}
	cq.Set("_busy_timeout", busy)
	cq.Set("_mutex", "no") // see wq
	d.cdb, err = sql.Open("sqlite3", dsn(abs, cq))
	if err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}
	d.cdb.SetMaxOpenConns(1)
	d.cdb.SetMaxIdleConns(1)
	d.cdb.SetConnMaxIdleTime(0)
	if err := d.cdb.PingContext(ctx); err != nil {
		return fail(fmt.Errorf("store: open %s: %w", path, err))
	}

	opts.CommitDelay = min(opts.CommitDelay, MaxCommitDelay)
	d.w = newWriter(conn, log, opts.directWrites, opts.CommitDelay, newCheckpointer(d.cdb, log, pageSize),
		d.hist)
	d.deferTokens = opts.DeferSearch
	if opts.DeferSearch {
		opts.NoSearchIndexer = true
	}
	if err := d.openUntokenized(ctx); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := d.startTimelineFlusher(ctx, opts.noTimelineFlusher, opts.timelineEvery); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	d.startSearchIndexer(opts.NoSearchIndexer)
	// Every lease in the file is a previous owner's, whose holders are
	// gone: free them all before the claim index is built.
	if err := d.freeLeases(ctx); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := d.reload(ctx); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	opened = true
	return d, nil
}

// dsn builds a go-sqlite3 URI for the absolute file path with the given
// connection parameters.
func dsn(abs string, q url.Values) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: q.Encode()}
	return u.String()
}

// Path returns the absolute path of the database file.
func (d *DB) Path() string { return d.path }

// Close stops the background search indexer, writes the leases still held
// in memory (see Claim), stops the writer, waiting for the batch in
// progress to commit, closes every connection and then releases the file's
// lock (see Open). Calls after the first return nil; every other method
// returns ErrClosed afterwards.
func (d *DB) Close() error {
	d.stopSearchIndexer()
	d.stopTimelineFlusher()
	// Leases granted in memory only reach the file, so that the next handle
	// honours them (see Claim).
	softErr := d.writeSoftLeases(context.Background())
	if !d.w.close() {
		return nil
	}
	d.hist.close()
	if softErr != nil {
		softErr = fmt.Errorf("store: close: write leases: %w", softErr)
	}
	err := errors.Join(softErr, d.rdb.Close(), d.cdb.Close(), d.wdb.Close())
	// Last: the file is free for the next owner once nothing of this DB
	// touches it.
	if uerr := d.owner.release(); uerr != nil {
		err = errors.Join(err, fmt.Errorf("store: close: release the lock file: %w", uerr))
	}
	return err
}

// now is the store's clock reading, truncated to the millisecond unit every
// column uses.
func (d *DB) now() int64 { return d.clk.Now().UnixMilli() }

// ms converts a time to unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

// nullMs converts a time to unix milliseconds, or NULL for the zero time.
func nullMs(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// fromMs converts unix milliseconds to a UTC time.
func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

// fromNullMs converts a nullable column to a time; NULL is the zero time.
func fromNullMs(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMs(v.Int64)
}

// nullStr returns NULL for "" and s otherwise.
func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}
