package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Process liveness.
//
// A lease names the process that claimed it (inbound_items.lease_proc).
// Each DB registers itself in queue_processes from a connection of its own
// that it keeps open for as long as it runs, under a fresh process id,
// with that connection's backend pid and start time. When the process
// dies (even by SIGKILL) the server ends that backend; every DB on the
// database looks every presenceEvery for registered processes whose
// backend is gone (ReapDeadProcesses) and frees their leases at once,
// instead of letting them hold their items and their sessions' in-flight
// slots until the leases expire (10 minutes by default). A freed item is
// pending, its attempts as they were, and the next Claim reports it as
// inbound.Lease.Orphaned (until a lease operation ends that attempt): it
// may be the message that killed the process.
//
// The backend start time tells a backend from a later one that reuses its
// pid. A role that may not read another role's backend start time
// (pg_stat_activity shows it as NULL) sees every backend with the pid as
// alive: those leases then wait for their expiry.

// presenceEvery is how often a DB checks its registration and looks for
// dead processes. It is real time: liveness has nothing to do with the
// leases' clock.
const presenceEvery = 2 * time.Second

// freedDeadProcess is the last_error of an item whose lease was freed
// because its process died.
const freedDeadProcess = "lease freed: the process that held it died (its connection to the database closed)"

// presence is one DB's registration as a live process.
type presence struct {
	d  *DB
	id string

	startOnce sync.Once
	stopOnce  sync.Once
	ready     chan struct{} // closed once the first registration was tried
	cancel    context.CancelFunc
	done      chan struct{} // closed when run has ended

	mu         sync.Mutex
	registered bool  // the row names the current connection
	lastErr    error // why it is not
	pid        int   // the connection's backend pid
}

// newPresence returns the presence of a DB being opened.
func newPresence(d *DB) *presence {
	return &presence{d: d, id: uuid.NewString(), ready: make(chan struct{}), done: make(chan struct{})}
}

// presenceOf returns d's presence; nil once d is closed.
func (d *DB) presenceOf() *presence {
	if d.usable() != nil {
		return nil
	}
	return d.pres
}

// startPresence registers this DB as a live process and starts the loop
// that keeps the registration and frees the leases of dead processes. It
// returns at once and does nothing when it already ran or the DB is
// closed. The queue calls it on its first operation; Open should call it.
func (d *DB) startPresence() {
	p := d.presenceOf()
	if p == nil {
		return
	}
	p.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		p.cancel = cancel
		go p.run(ctx)
	})
}

// stopPresence ends the presence loop and closes its connection (the
// process counts as dead from then on: its leases are freed by the next
// reaper). It waits for the loop to end. Close should call it; the loop
// also ends by itself once the DB is closed.
func (d *DB) stopPresence() {
	p := d.pres
	if p == nil {
		return
	}
	p.stopOnce.Do(func() { p.stop() })
}

// stop ends the loop (see stopPresence).
func (p *presence) stop() {
	p.startOnce.Do(func() { // never started
		close(p.ready)
		close(p.done)
	})
	if p.cancel != nil {
		p.cancel()
	}
	<-p.done
}

// procID returns this DB's process id for a claim, waiting for its first
// registration; it fails while the DB is not registered (a claim made
// then would be freed at once as a dead process's).
func (d *DB) procID(ctx context.Context) (string, error) {
	d.startPresence()
	p := d.presenceOf()
	if p == nil {
		return "", ErrClosed
	}
	select {
	case <-p.ready:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-d.closed:
		return "", ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.registered {
		return "", fmt.Errorf("postgres: this process is not registered as live: %w", p.lastErr)
	}
	return p.id, nil
}

// sqlRegister names the current connection's backend as the process's.
const sqlRegister = `
INSERT INTO queue_processes (proc_id, backend_pid, backend_start, registered_at)
VALUES ($1, pg_backend_pid(), (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), $2)
ON CONFLICT (proc_id) DO UPDATE SET backend_pid = excluded.backend_pid, backend_start = excluded.backend_start
RETURNING backend_pid`

// sqlRegistered tells whether the process's row still names the current
// connection's backend (a reaper that judged the process dead, after a
// reconnect, may have removed it).
const sqlRegistered = `SELECT EXISTS (SELECT 1 FROM queue_processes WHERE proc_id = $1 AND backend_pid = pg_backend_pid())`

// run keeps the registration and reaps dead processes every
// presenceEvery until ctx ends or the DB is closed.
func (p *presence) run(ctx context.Context) {
	defer close(p.done)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			cancel()
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.d.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	first := true
	tick := time.NewTicker(presenceEvery)
	defer tick.Stop()
	for {
		var err error
		conn, err = p.keep(ctx, conn)
		p.mu.Lock()
		p.registered, p.lastErr = err == nil, err
		p.mu.Unlock()
		if first {
			close(p.ready)
			first = false
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p.d.log.Warn("postgres: process registration failed; retrying", "err", redact(err))
		} else if _, err := p.d.ReapDeadProcesses(ctx); err != nil && ctx.Err() == nil {
			p.d.log.Warn("postgres: freeing the leases of dead processes failed", "err", redact(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// keep checks the registration on conn, reconnecting and registering
// again when the connection failed or the row no longer names it. It
// returns the connection to use from now on (nil after a failure).
func (p *presence) keep(ctx context.Context, conn *pgx.Conn) (*pgx.Conn, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if conn != nil {
		var ok bool
		err := conn.QueryRow(qctx, sqlRegistered, p.id).Scan(&ok)
		if err == nil && ok {
			return conn, nil
		}
		if err != nil {
			_ = conn.Close(qctx)
			conn = nil
		}
	}
	if conn == nil {
		var err error
		if conn, err = pgx.ConnectConfig(qctx, p.d.cfg.ConnConfig.Copy()); err != nil {
			return nil, err
		}
	}
	var pid int
	if err := conn.QueryRow(qctx, sqlRegister, p.id, p.d.nowMs()).Scan(&pid); err != nil {
		_ = conn.Close(qctx)
		return nil, err
	}
	p.mu.Lock()
	p.pid = pid
	p.mu.Unlock()
	return conn, nil
}

// sqlDeadProcesses selects (and locks) the registered processes whose
// backend is gone. It must be its transaction's first read of
// pg_stat_activity (which a transaction reads once): every row it can see
// was registered by a backend that had started by then.
const sqlDeadProcesses = `
SELECT p.proc_id FROM queue_processes p
WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a
    WHERE a.pid = p.backend_pid AND (a.backend_start IS NULL OR a.backend_start = p.backend_start))
FOR UPDATE OF p SKIP LOCKED`

// sqlFreeDeadLeases returns the items leased by the processes $1 to
// pending, claimable at once ($2 is now), their attempts as they were,
// marked orphaned. Rows another transaction has locked are left for the
// next pass.
const sqlFreeDeadLeases = `
UPDATE inbound_items SET status = 'pending', lease_owner = NULL, lease_until = NULL, lease_proc = NULL,
    orphaned = true, available_at = least(available_at, $2), last_error = $3, updated_at = $2
WHERE id IN (SELECT id FROM inbound_items WHERE status = 'leased' AND lease_proc = ANY($1::text[])
    FOR UPDATE SKIP LOCKED)`

// sqlForgetDeadProcesses removes the dead processes that hold no lease
// any more.
const sqlForgetDeadProcesses = `
DELETE FROM queue_processes p WHERE p.proc_id = ANY($1::text[])
AND NOT EXISTS (SELECT 1 FROM inbound_items i WHERE i.status = 'leased' AND i.lease_proc = p.proc_id)`

// ReapDeadProcesses runs one pass of the liveness check (every DB runs it
// every two seconds once its queue is in use): every item leased by a
// process whose connection is gone becomes pending at once, its attempts
// kept, last_error saying why, and reported by its next claim as
// inbound.Lease.Orphaned; the dead processes are forgotten. It returns how
// many items it freed and wakes the claimers of every process when there
// were any.
func (d *DB) ReapDeadProcesses(ctx context.Context) (int, error) {
	now := d.nowMs()
	var n int64
	err := d.tx(ctx, "", func(tx pgx.Tx) error {
		n = 0
		rows, _ := tx.Query(ctx, sqlDeadProcesses)
		dead, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(dead) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, sqlFreeDeadLeases, dead, now, freedDeadProcess)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if _, err := tx.Exec(ctx, sqlForgetDeadProcesses, dead); err != nil {
			return err
		}
		if n > 0 {
			return d.wakeClaimers(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: reap dead processes: %w", err)
	}
	if n > 0 {
		d.log.Info("postgres: freed the leases of dead processes", "items", n)
	}
	return int(n), nil
}

// presenceBackendPID returns the backend pid of the presence connection
// (0 when not registered).
func (d *DB) presenceBackendPID() int {
	p := d.presenceOf()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.registered {
		return 0
	}
	return p.pid
}
