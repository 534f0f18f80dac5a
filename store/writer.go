package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// maxBatch bounds how many write operations share one transaction.
const maxBatch = 256

// writeFunc is one write operation. It runs inside the writer's transaction
// and must not keep anything (rows, statements) open when it returns. It may
// run more than once (see writer.run), so it sets its outputs from scratch.
// An operation that fails without having written anything returns its error
// wrapped with clean, which spares the rest of its batch a replay.
type writeFunc func(tx wtx) error

// writeOp is a write operation handed to the writer goroutine.
type writeOp struct {
	ctx  context.Context
	fn   writeFunc
	done chan error
	// after, when set, runs on the writer's goroutine once the transaction
	// holding the operation committed and the operation succeeded, before
	// its caller returns. The hooks of one batch run in batch order, and
	// batches one after the other, so they see the writes in commit order.
	// after reads the outputs fn set on its last run; it must be quick and
	// must not call back into the writer.
	after func()
}

// commitFence is told when a batch with post-commit hooks (writeOp.after)
// starts to commit and when its hooks have run (failed reports a COMMIT
// that returned an error: the transaction may or may not have committed).
// Between the two, a reader may see the batch's writes in SQL before the
// hooks have applied them; the history cache waits for end before it
// installs what it read (see histCache.install).
type commitFence interface {
	begin()
	end(failed bool)
}

// writer owns the single write connection. In group-commit mode (the
// default) one goroutine collects the operations submitted concurrently and
// runs them in one transaction (see run): each operation stays atomic, one
// that fails gets its own error and leaves no trace, the others commit
// together. Callers wait for the commit before they return.
//
// In direct mode every operation runs in its own transaction on the caller's
// goroutine, serialised by a mutex.
type writer struct {
	conn   *sql.Conn
	log    *slog.Logger
	direct bool
	delay  time.Duration // how long a busy writer waits to fill a small batch
	ckpt   *checkpointer
	fence  commitFence // may be nil

	// dc is conn's driver connection while the writer holds it (inside
	// conn.Raw, see writer_driver.go); stmts caches the statements prepared on it
	// by SQL text. Only the goroutine that owns conn (the loop, or the
	// holder of directMu in direct mode) touches them.
	dc    any
	stmts map[string]driverStmt
	// stmtsClosed: close released the statements; direct writes fail.
	stmtsClosed bool

	// batches and batchedOps count transactions and the operations they
	// carried (the benchmarks report the mean batch size); busy sums the
	// nanoseconds spent running batches (see WriterStats).
	batches, batchedOps, busy atomic.Int64

	// tail counts the transcript rows not yet in the timeline (see
	// timeline.go).
	tail *tailCounter
	// args is the argument buffer of wtx.exec (writer goroutine only).
	args []driver.NamedValue

	ops      chan *writeOp
	quit     chan struct{}
	stopped  chan struct{}
	closeMu  sync.Mutex
	closed   bool
	directMu sync.Mutex
}

func newWriter(conn *sql.Conn, log *slog.Logger, direct bool, delay time.Duration, ckpt *checkpointer,
	fence commitFence) *writer {
	w := &writer{
		fence:   fence,
		delay:   delay,
		conn:    conn,
		ckpt:    ckpt,
		log:     log,
		direct:  direct,
		stmts:   map[string]driverStmt{},
		tail:    newTailCounter(),
		ops:     make(chan *writeOp),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	if direct {
		close(w.stopped)
	} else {
		go w.loop()
	}
	return w
}

// close stops the writer after the batch in progress and releases the
// connection. It reports false when the writer was already closed.
func (w *writer) close() bool {
	w.closeMu.Lock()
	if w.closed {
		w.closeMu.Unlock()
		return false
	}
	w.closed = true
	close(w.quit)
	w.closeMu.Unlock()
	<-w.stopped
	w.ckpt.stop()
	w.directMu.Lock()
	defer w.directMu.Unlock()
	if w.direct {
		_ = w.conn.Raw(func(dc any) error {
			w.dc = dc
			w.closeStmts()
			w.dc = nil
			return nil
		})
	}
	w.stmtsClosed = true
	_ = w.conn.Close()
	return true
}

// write runs fn atomically and returns once its effects are committed (or
// failed). A context that ends before fn starts cancels it; once started, fn
// runs to the end of its transaction regardless of ctx.
func (d *DB) write(ctx context.Context, fn writeFunc) error {
	return d.writeThen(ctx, fn, nil)
}

// writeThen is write with a post-commit hook: after (when not nil) runs on
// the writer's goroutine once fn's transaction committed with fn
// successful, in commit order with every other hook (see writeOp.after).
func (d *DB) writeThen(ctx context.Context, fn writeFunc, after func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := d.w
	if w.direct {
		w.directMu.Lock()
		defer w.directMu.Unlock()
		if w.stmtsClosed {
			return ErrClosed
		}
		op := &writeOp{ctx: ctx, fn: fn, done: make(chan error, 1), after: after}
		if err := w.conn.Raw(func(dc any) error {
			w.dc = dc
			defer func() { w.dc = nil }()
			w.run([]*writeOp{op})
			return nil
		}); err != nil {
			return fmt.Errorf("store: writer connection: %w", err)
		}
		return <-op.done
	}
	op := &writeOp{ctx: ctx, fn: fn, done: make(chan error, 1), after: after}
	select {
	case w.ops <- op:
	case <-w.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-op.done
}

// smallBatch is the batch size below which a busy writer waits up to its
// commit delay for more operations.
const smallBatch = 8

// busyGap: a first operation that arrives within busyGap of the last
// commit finds the writer busy.
const busyGap = time.Millisecond

// loop is the group-commit goroutine.
//
// A commit writes every page its batch changed to the WAL (two write calls
// per page), so under load a batch of one or two operations costs several
// times what it would as part of a larger one. When the writer is busy (an
// operation was already waiting as the previous batch finished, or the
// first one came within busyGap of a batch of several) and the batch is
// small, the loop first yields its thread once (runtime.Gosched), so that
// goroutines ready to run reach their next write and join the batch, and
// then waits up to delay (when set) for more before it commits. An idle
// writer, or one caller writing step after step, commits at once, so
// neither adds latency at low load.
func (w *writer) loop() {
	defer close(w.stopped)
	// The writer holds its connection's driver connection for as long as
	// it runs (see writer_driver.go).
	err := w.conn.Raw(func(dc any) error {
		w.dc = dc
		defer func() {
			w.closeStmts()
			w.dc = nil
		}()
		w.serve()
		return nil
	})
	if err != nil {
		w.log.Error("store: writer connection unusable", "err", err)
		for {
			select {
			case op := <-w.ops:
				op.done <- fmt.Errorf("store: writer connection: %w", err)
			case <-w.quit:
				return
			}
		}
	}
}

// serve collects operations into batches and runs them until quit.
func (w *writer) serve() {
	batch := make([]*writeOp, 0, maxBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	var (
		lastCommit time.Time
		lastSize   int
	)
	for {
		busy := true
		select {
		case op := <-w.ops:
			batch = append(batch[:0], op)
		default:
			select {
			case op := <-w.ops:
				batch = append(batch[:0], op)
			case <-w.quit:
				return
			}
			// Busy too when the first operation came soon after a commit
			// of several: the callers it released are still producing.
			// (One caller writing step after step is not load.)
			busy = lastSize > 1 && time.Since(lastCommit) < busyGap
		}
		waited, yielded := !busy || w.delay <= 0, !busy
	collect:
		for len(batch) < maxBatch {
			select {
			case op := <-w.ops:
				batch = append(batch, op)
				continue
			default:
			}
			if !yielded && len(batch) < smallBatch {
				// Let the goroutines that are ready to run (callers the
				// last commit released, turns between two writes) reach
				// their next write first: it costs no wait when there are
				// none, and under load it takes commits per replied
				// message from 2.3 to 0.9.
				yielded = true
				runtime.Gosched()
				continue
			}
			if waited || len(batch) >= smallBatch {
				break
			}
			waited = true
			linger.Reset(w.delay)
			for len(batch) < smallBatch {
				select {
				case op := <-w.ops:
					batch = append(batch, op)
					continue
				case <-linger.C:
				case <-w.quit:
				}
				break collect
			}
			linger.Stop()
		}
		w.run(batch)
		lastCommit, lastSize = time.Now(), len(batch)
		clear(batch)
	}
}

// run executes ops in one transaction and answers each op's done channel.
//
// The first attempt runs the ops back to back without savepoints. An op
// that fails cleanly (see clean) changed nothing, so it just gets its error.
// An op that fails otherwise may have written part of its work: the
// transaction is rolled back and the batch is run again without that op,
// this time with a SAVEPOINT around each op. Ops are therefore written to be
// re-runnable: they reset their outputs when they start.
func (w *writer) run(ops []*writeOp) {
	t0 := time.Now()
	defer func() { w.busy.Add(int64(time.Since(t0))) }()
	errs := make([]error, len(ops))
	skip := make([]bool, len(ops))
	defer func() {
		for i, op := range ops {
			op.done <- errs[i]
		}
	}()
	if w.attempt(ops, errs, skip, false) {
		w.attempt(ops, errs, skip, true)
	}
}

// attempt runs the ops not marked skip in one transaction. Without guard it
// reports true (replay needed) after rolling back for an op that failed
// dirty, which it marks skip. With guard each op runs in a savepoint.
func (w *writer) attempt(ops []*writeOp, errs []error, skip []bool, guard bool) (replay bool) {
	live := 0
	for i, op := range ops {
		if skip[i] {
			continue
		}
		if err := op.ctx.Err(); err != nil {
			errs[i], skip[i] = err, true
			continue
		}
		errs[i] = nil
		live++
	}
	if live == 0 {
		return false
	}
	w.batches.Add(1)
	w.batchedOps.Add(int64(live))
	tx := wtx{w: w}
	if w.ckpt.tooBig.Load() {
		// The WAL outgrew its limit under sustained writes: copy it back so
		// that this batch starts it over. RESTART, not TRUNCATE: the file
		// keeps its first journal_size_limit bytes (SQLite cuts it to that
		// size on the first commit after the restart), so the next frames
		// overwrite allocated blocks instead of growing an empty file, and
		// the checkpoint does not drop the whole file (measured under the
		// replied-pipeline load: 400–580 ms → 170–260 ms of writer stall
		// per checkpoint). While the background checkpointer happens to be
		// running, SQLite reports busy at once; the next batch tries again.
		var busy, frames, done int64
		err := tx.queryRow("PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &frames, &done)
		switch {
		case err != nil:
			w.log.Warn("store: WAL restart checkpoint failed", "err", err)
		case busy == 0:
			w.ckpt.tooBig.Store(false)
		}
	}
	if _, err := tx.exec("BEGIN IMMEDIATE"); err != nil {
		for i := range ops {
			if !skip[i] {
				errs[i] = fmt.Errorf("store: begin: %w", err)
			}
		}
		return false
	}
	var aborted error
	for i, op := range ops {
		if skip[i] {
			continue
		}
		if aborted != nil {
			errs[i] = aborted
			continue
		}
		if guard {
			if _, err := tx.exec("SAVEPOINT op"); err != nil {
				aborted = fmt.Errorf("store: savepoint: %w", err)
				errs[i] = aborted
				continue
			}
		}
		err := call(op.fn, tx)
		var c *cleanError
		if errors.As(err, &c) {
			err = c.err
		} else if err != nil {
			errs[i] = err
			skip[i] = true
			if !guard {
				w.rollback(tx)
				return live > 1
			}
			if _, rerr := tx.exec("ROLLBACK TO op"); rerr != nil {
				// SQLite rolled the whole transaction back (I/O error, disk
				// full, ...): everything done so far in this batch is lost.
				aborted = fmt.Errorf("store: transaction aborted: %w", errors.Join(err, rerr))
				continue
			}
		}
		errs[i] = err
		if guard {
			if _, rerr := tx.exec("RELEASE op"); rerr != nil {
				aborted = fmt.Errorf("store: release savepoint: %w", rerr)
			}
		}
	}
	if aborted != nil {
		w.rollback(tx)
		for i := range ops {
			if !skip[i] && errs[i] == nil {
				errs[i] = aborted
			}
		}
		return false
	}
	hooked := false
	for i, op := range ops {
		if op.after != nil && !skip[i] && errs[i] == nil {
			hooked = true
			break
		}
	}
	fence := w.fence
	if !hooked {
		fence = nil
	}
	if fence != nil {
		fence.begin()
	}
	_, err := tx.exec("COMMIT")
	w.ckpt.notify()
	if err != nil {
		w.rollback(tx)
		if fence != nil {
			fence.end(true)
		}
		cerr := fmt.Errorf("store: commit: %w", err)
		w.log.Error("store: commit failed", "err", err, "ops", live)
		for i := range ops {
			if !skip[i] && errs[i] == nil {
				errs[i] = cerr
			}
		}
		return false
	}
	if hooked {
		failed := false
		for i, op := range ops {
			if op.after != nil && !skip[i] && errs[i] == nil && !w.callAfter(op.after) {
				failed = true
			}
		}
		if fence != nil {
			fence.end(failed)
		}
	}
	return false
}

// callAfter runs a post-commit hook, reporting false when it panicked (the
// writer goroutine must survive; the fence then treats the batch as
// unknown).
func (w *writer) callAfter(after func()) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("store: post-commit hook panicked", "panic", r)
			ok = false
		}
	}()
	after()
	return true
}

// rollback ends the current transaction, if SQLite has not already.
func (w *writer) rollback(tx wtx) {
	if _, err := tx.exec("ROLLBACK"); err != nil {
		w.log.Debug("store: rollback", "err", err)
	}
}

// cleanError marks an operation's error as clean: the operation changed
// nothing before failing, so the rest of its batch can commit as is.
type cleanError struct{ err error }

func (c *cleanError) Error() string { return c.err.Error() }

// clean wraps err as a failure that wrote nothing.
func clean(err error) error { return &cleanError{err: err} }

// call runs fn, turning a panic into an error so that one bad operation can
// never take the writer goroutine down.
func call(fn writeFunc, tx wtx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("store: write operation panicked: %v", r)
		}
	}()
	return fn(tx)
}

// wtx executes statements on the writer connection inside the current
// transaction. Statements run on a context without cancellation: an
// interrupted statement would roll back the whole shared transaction.
type wtx struct{ w *writer }

func (t wtx) exec(q string, args ...any) (sql.Result, error) {
	// The driver binds (copies) the arguments before ExecContext returns,
	// and only the writer's goroutine runs statements: one buffer serves
	// every statement.
	nv, err := appendNamedArgs(t.w.args, args)
	if err != nil {
		return nil, err
	}
	t.w.args = nv
	defer clear(nv)
	s, err := t.w.prepare(q)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(context.Background(), nv)
}

func (t wtx) query(q string, args ...any) (*wrows, error) {
	s, err := t.w.prepare(q)
	if err != nil {
		return nil, err
	}
	nv, err := namedArgs(args)
	if err != nil {
		return nil, err
	}
	rows, err := s.QueryContext(context.Background(), nv)
	if err != nil {
		return nil, err
	}
	return &wrows{rows: rows, vals: make([]driver.Value, len(rows.Columns()))}, nil
}

func (t wtx) queryRow(q string, args ...any) wrow {
	rows, err := t.query(q, args...)
	return wrow{rows: rows, err: err}
}

// affected returns the rows affected by res, treating an error as zero.
func affected(res sql.Result) int64 {
	n, err := res.RowsAffected()
	if err != nil {
		return 0
	}
	return n
}

// WriterStats describes the work of a DB's single writer since Open.
type WriterStats struct {
	// Batches is the number of transactions the writer ran (in group-commit
	// mode one per batch of operations).
	Batches int64
	// Ops is the number of write operations those transactions carried.
	Ops int64
	// Busy is the time the writer spent running them: statements, commits
	// and post-commit hooks. Busy divided by the elapsed time is the share
	// of its capacity in use; every durable write of a DB goes through it.
	Busy time.Duration
}

// WriterStats reports the work of the DB's writer since Open, for
// monitoring and benchmarks.
func (d *DB) WriterStats() WriterStats {
	return WriterStats{Batches: d.w.batches.Load(), Ops: d.w.batchedOps.Load(), Busy: time.Duration(d.w.busy.Load())}
}
