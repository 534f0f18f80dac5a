package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/personakit/persona/clock"
)

// Errors of the package.
var (
	// ErrSchemaTooNew is returned by Open when the database was migrated
	// by a newer build of this package than the running one.
	ErrSchemaTooNew = errors.New("postgres: database schema is newer than this build")
	// ErrClosed is returned by operations on a closed DB.
	ErrClosed = errors.New("postgres: store is closed")
	// ErrInvalid is wrapped by the errors for input a port refuses (an
	// item without a key, a slot below zero, a flag without a name, ...).
	ErrInvalid = errors.New("postgres: invalid input")
)

// Options configures Open. Every zero field means the documented default.
type Options struct {
	// Clock is the source of "now" for leases, availability and the
	// stored timestamps (nil = clock.Real). Every process sharing a
	// database should read the same wall clock (NTP): leases are compared
	// against it.
	Clock clock.Clock
	// Logger receives background errors (nil = slog.Default()).
	Logger *slog.Logger
	// MaxConns caps the connection pool (0 = 16). The notification
	// listener uses one connection of its own, outside the pool.
	MaxConns int32
}

// DB is a persona store on one PostgreSQL database (one schema of it: the
// first of the connection's search_path). Several processes may open the
// same database at once; every operation is safe across them. It is safe
// for concurrent use.
type DB struct {
	pool   *pgxpool.Pool
	cfg    *pgxpool.Config
	clk    clock.Clock
	log    *slog.Logger
	schema string

	lis  *listener
	pres *presence // this process's registration as live (presence.go)

	closeOnce sync.Once
	closed    chan struct{}
}

// Open connects to the database at url (a postgres:// URL or a key=value
// connection string), applies the embedded migrations under an advisory
// lock (so that processes starting together migrate once) and starts the
// notification listener. The schema is the first one of the connection's
// search_path (normally "public"); give "search_path=NAME" in the URL to
// keep several bots, or test runs, apart in one database.
func Open(ctx context.Context, url string, opt Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse url: %w", redact(err))
	}
	cfg.MaxConns = 16
	if opt.MaxConns > 0 {
		cfg.MaxConns = opt.MaxConns
	}
	d := &DB{
		cfg:    cfg,
		clk:    clock.OrReal(opt.Clock),
		log:    opt.Logger,
		closed: make(chan struct{}),
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", redact(err))
	}
	if err := d.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&d.schema); err != nil {
		d.pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", redact(err))
	}
	if d.schema == "" {
		d.pool.Close()
		return nil, errors.New("postgres: the connection's search_path names no existing schema")
	}
	if err := d.migrate(ctx); err != nil {
		d.pool.Close()
		return nil, err
	}
	d.lis = newListener(d)
	d.pres = newPresence(d)
	d.startPresence()
	return d, nil
}

// Close stops the listener and closes the pool. It is idempotent.
func (d *DB) Close() error {
	d.closeOnce.Do(func() {
		close(d.closed)
		d.stopPresence()
		d.lis.stop()
		d.pool.Close()
	})
	return nil
}

// usable fails with ErrClosed once the DB is closed.
func (d *DB) usable() error {
	select {
	case <-d.closed:
		return ErrClosed
	default:
		return nil
	}
}

// Schema returns the schema the store keeps its tables in.
func (d *DB) Schema() string { return d.schema }

// now returns the clock's time.
func (d *DB) now() time.Time { return d.clk.Now() }

// nowMs returns the clock's time in unix milliseconds, the unit of every
// stored timestamp.
func (d *DB) nowMs() int64 { return d.clk.Now().UnixMilli() }

// ms converts t to unix milliseconds (0 for the zero time).
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMs converts unix milliseconds to a UTC time (the zero time for 0).
func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// tx runs fn in a transaction at the given isolation level (read
// committed when iso is ""), committing when fn returns nil.
func (d *DB) tx(ctx context.Context, iso pgx.TxIsoLevel, fn func(pgx.Tx) error) error {
	select {
	case <-d.closed:
		return ErrClosed
	default:
	}
	return pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{IsoLevel: iso}, fn)
}
