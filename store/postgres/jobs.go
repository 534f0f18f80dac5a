package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/memory"
)

// EnqueueJob implements memory.JobStore: it inserts a pending extraction
// job for the message, available at j.AvailableAt (now when zero). A job
// for the same message key, in whatever state, is left alone (false).
func (d *DB) EnqueueJob(ctx context.Context, j memory.Job) (bool, error) {
	if j.MessageKey == "" || j.SessionKey == "" {
		return false, fmt.Errorf("postgres: enqueue memory job: %w: a job needs a message key and a session key",
			errMemoryInvalid)
	}
	now := d.nowMs()
	avail := now
	if !j.AvailableAt.IsZero() {
		avail = ms(j.AvailableAt)
	}
	var added bool
	err := d.memTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO memory_jobs (message_key, session_key, platform, subject_user_id, status,
    available_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, 'pending', $5, $6, $6) ON CONFLICT (message_key) DO NOTHING`,
			j.MessageKey, j.SessionKey, j.Platform, j.SubjectUserID, avail, now)
		if err != nil {
			return err
		}
		added = tag.RowsAffected() == 1
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("postgres: enqueue memory job %s: %w", j.MessageKey, err)
	}
	return added, nil
}

// sqlClaimJobs leases up to $4 jobs that are pending and available, or
// leased with an expired lease, in the order they became claimable. Rows
// another transaction is claiming, completing or cancelling right now are
// skipped (SKIP LOCKED), and every row locked is checked again against
// the condition on its latest version, so two claimers, in one process or
// several, never take the same job.
const sqlClaimJobs = `
WITH due AS (
    SELECT id FROM memory_jobs
    WHERE (status = 'pending' AND available_at <= $3) OR (status = 'leased' AND lease_until <= $3)
    ORDER BY CASE WHEN status = 'pending' THEN available_at ELSE lease_until END, id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE memory_jobs j SET status = 'leased', lease_owner = $1, lease_until = $2, attempts = j.attempts + 1,
    claims = j.claims + 1, updated_at = $3
FROM due WHERE j.id = due.id
RETURNING j.id, j.message_key, j.session_key, j.platform, j.subject_user_id, j.available_at, j.attempts, j.claims`

// ClaimJobs implements memory.JobStore. Every claim counts an attempt and
// increments the claims counter that fences the lease, so the previous
// holder of an expired lease gets memory.ErrLeaseLost. A lease of zero or
// less means memory.DefaultJobLease.
func (d *DB) ClaimJobs(ctx context.Context, owner string, n int, lease time.Duration) ([]memory.JobLease, error) {
	if n <= 0 {
		return nil, nil
	}
	if lease <= 0 {
		lease = memory.DefaultJobLease
	}
	now := d.nowMs()
	until := now + lease.Milliseconds()
	var out []memory.JobLease
	err := d.memTx(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, sqlClaimJobs, owner, until, now, n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				l     memory.JobLease
				avail int64
			)
			if err := rows.Scan(&l.ID, &l.Job.MessageKey, &l.Job.SessionKey, &l.Job.Platform, &l.Job.SubjectUserID,
				&avail, &l.Attempts, &l.Claims); err != nil {
				return err
			}
			l.Job.AvailableAt, l.Owner, l.Until = fromMs(avail), owner, fromMs(until)
			out = append(out, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: claim memory jobs: %w", err)
	}
	return out, nil
}

// jobHeld is the lease check of the job operations: the job is leased by
// the owner under the lease's claim.
const jobHeld = `id = $1 AND status = 'leased' AND lease_owner = $2 AND claims = $3`

// ExtendJob implements memory.JobStore: it moves the deadline of a lease
// still held to now + lease (memory.DefaultJobLease when zero or less).
func (d *DB) ExtendJob(ctx context.Context, l memory.JobLease, lease time.Duration) (memory.JobLease, error) {
	if lease <= 0 {
		lease = memory.DefaultJobLease
	}
	now := d.nowMs()
	until := now + lease.Milliseconds()
	err := d.memTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE memory_jobs SET lease_until = $4, updated_at = $5 WHERE `+jobHeld,
			l.ID, l.Owner, l.Claims, until, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return memory.ErrLeaseLost
		}
		return nil
	})
	if err != nil {
		return l, fmt.Errorf("postgres: extend memory job %d: %w", l.ID, err)
	}
	l.Until = fromMs(until)
	return l, nil
}

// CompleteJob implements memory.JobStore: the lease check, the done mark
// and the changes commit in one transaction. The job's row stays locked
// until then, so no claimer or "forget me" can come in between: a job
// that lost its lease (claimed again, retried, completed or cancelled)
// gets memory.ErrLeaseLost and writes nothing, and a job is never applied
// twice. Invalid changes fail before anything is written, the lease kept.
func (d *DB) CompleteJob(ctx context.Context, l memory.JobLease, changes []memory.Change) (memory.ApplyResult, error) {
	cs, err := prepareFactChanges(changes)
	if err != nil {
		return memory.ApplyResult{}, fmt.Errorf("postgres: complete memory job %d: %w", l.ID, err)
	}
	now := d.nowMs()
	var res memory.ApplyResult
	err = d.memTx(ctx, func(tx pgx.Tx) error {
		res = memory.ApplyResult{}
		tag, err := tx.Exec(ctx, `UPDATE memory_jobs SET status = 'done', lease_owner = NULL, lease_until = NULL,
    last_error = NULL, updated_at = $4 WHERE `+jobHeld, l.ID, l.Owner, l.Claims, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return memory.ErrLeaseLost
		}
		if len(cs) == 0 {
			return nil
		}
		return d.applyFactChanges(ctx, tx, cs, now, &res)
	})
	if err != nil {
		return memory.ApplyResult{}, fmt.Errorf("postgres: complete memory job %d: %w", l.ID, err)
	}
	return res, nil
}

// RetryJob implements memory.JobStore: it releases a lease still held,
// the job pending again from at (at once for the zero time), or with
// dead set marks it failed for good; the cause is kept as the job's last
// error.
func (d *DB) RetryJob(ctx context.Context, l memory.JobLease, at time.Time, cause error, dead bool) error {
	now := d.nowMs()
	status := "pending"
	if dead {
		status = "failed"
	}
	var msg *string
	if cause != nil {
		s := cause.Error()
		msg = &s
	}
	err := d.memTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE memory_jobs SET status = $4, available_at = $5, lease_owner = NULL,
    lease_until = NULL, last_error = $6, updated_at = $7 WHERE `+jobHeld,
			l.ID, l.Owner, l.Claims, status, ms(at), msg, now)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return memory.ErrLeaseLost
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: retry memory job %d: %w", l.ID, err)
	}
	return nil
}

// JobCounts returns the number of extraction jobs per status ("pending",
// "leased", "done", "failed", "cancelled"; absent statuses are left out).
func (d *DB) JobCounts(ctx context.Context) (map[string]int, error) {
	rows, err := d.pool.Query(ctx, `SELECT status, count(*) FROM memory_jobs GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("postgres: job counts: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			s string
			n int
		)
		if err := rows.Scan(&s, &n); err != nil {
			return nil, fmt.Errorf("postgres: job counts: %w", err)
		}
		out[s] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: job counts: %w", err)
	}
	return out, nil
}
