package store

import (
	"context"
	"fmt"
	"time"

	"github.com/personakit/persona/memory"
)

// EnqueueJob implements memory.JobStore: it inserts a pending extraction
// job for the message; a job for the same message key is left alone
// (false).
func (d *DB) EnqueueJob(ctx context.Context, j memory.Job) (bool, error) {
	if j.MessageKey == "" || j.SessionKey == "" {
		return false, fmt.Errorf("%w: memory job needs a message key and a session key", ErrInvalid)
	}
	now := d.now()
	avail := now
	if !j.AvailableAt.IsZero() {
		avail = ms(j.AvailableAt)
	}
	var added bool
	err := d.write(ctx, func(tx wtx) error {
		added = false
		r, err := tx.exec(`INSERT INTO memory_jobs (message_key, session_key, platform, subject_user_id, status,
    available_at, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6, ?6) ON CONFLICT (message_key) DO NOTHING`,
			j.MessageKey, j.SessionKey, j.Platform, j.SubjectUserID, avail, now)
		if err != nil {
			return err
		}
		added = affected(r) == 1
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: enqueue memory job %s: %w", j.MessageKey, err)
	}
	return added, nil
}

// sqlClaimJobs leases up to ?4 jobs: pending and available, or leased with
// an expired lease, in order of the time they became claimable.
const sqlClaimJobs = `
UPDATE memory_jobs SET status = 'leased', lease_owner = ?1, lease_until = ?2, attempts = attempts + 1,
    claims = claims + 1, updated_at = ?3
WHERE id IN (
    SELECT id FROM (
        SELECT id, available_at AS t FROM memory_jobs INDEXED BY memory_jobs_pending
            WHERE status = 'pending' AND available_at <= ?3
        UNION ALL
        SELECT id, lease_until AS t FROM memory_jobs INDEXED BY memory_jobs_leased
            WHERE status = 'leased' AND lease_until <= ?3
    ) ORDER BY t, id LIMIT ?4
)
RETURNING id, message_key, session_key, platform, subject_user_id, available_at, attempts, claims`

// ClaimJobs implements memory.JobStore. Every claim counts an attempt and
// increments the claims fencing token, so the previous holder of an
// expired lease gets memory.ErrLeaseLost.
func (d *DB) ClaimJobs(ctx context.Context, owner string, n int, lease time.Duration) ([]memory.JobLease, error) {
	if n <= 0 {
		return nil, nil
	}
	if lease <= 0 {
		lease = memory.DefaultJobLease
	}
	now := d.now()
	until := now + lease.Milliseconds()
	var out []memory.JobLease
	err := d.write(ctx, func(tx wtx) error {
		out = out[:0]
		rows, err := tx.query(sqlClaimJobs, owner, until, now, n)
		if err != nil {
			return err
		}
		defer func() { _ = rows.Close() }()
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
		return nil, fmt.Errorf("store: claim memory jobs: %w", err)
	}
	return out, nil
}

// holds is the lease check shared by the job operations.
const holds = `id = ?1 AND status = 'leased' AND lease_owner = ?2 AND claims = ?3`

// ExtendJob implements memory.JobStore.
func (d *DB) ExtendJob(ctx context.Context, l memory.JobLease, lease time.Duration) (memory.JobLease, error) {
	if lease <= 0 {
		lease = memory.DefaultJobLease
	}
	now := d.now()
	until := now + lease.Milliseconds()
	err := d.write(ctx, func(tx wtx) error {
		r, err := tx.exec(`UPDATE memory_jobs SET lease_until = ?4, updated_at = ?5 WHERE `+holds,
			l.ID, l.Owner, l.Claims, until, now)
		if err != nil {
			return err
		}
		if affected(r) == 0 {
			return clean(memory.ErrLeaseLost)
		}
		return nil
	})
	if err != nil {
		return l, fmt.Errorf("store: extend memory job %d: %w", l.ID, err)
	}
	l.Until = fromMs(until)
	return l, nil
}

// CompleteJob implements memory.JobStore: the lease check, the changes and
// the done mark commit together, so a job that lost its lease (or was
// cancelled by ForgetUser) writes no fact, and a job that completed is
// never applied twice.
func (d *DB) CompleteJob(ctx context.Context, l memory.JobLease, changes []memory.Change) (memory.ApplyResult, error) {
	cs, err := prepareChanges(changes)
	if err != nil {
		return memory.ApplyResult{}, fmt.Errorf("store: complete memory job %d: %w", l.ID, err)
	}
	now := d.now()
	var res memory.ApplyResult
	err = d.write(ctx, func(tx wtx) error {
		res = memory.ApplyResult{}
		r, err := tx.exec(`UPDATE memory_jobs SET status = 'done', lease_owner = NULL, lease_until = NULL,
    last_error = NULL, updated_at = ?4 WHERE `+holds, l.ID, l.Owner, l.Claims, now)
		if err != nil {
			return err
		}
		if affected(r) == 0 {
			return clean(memory.ErrLeaseLost)
		}
		return applyChanges(tx, cs, now, &res)
	})
	if err != nil {
		return memory.ApplyResult{}, fmt.Errorf("store: complete memory job %d: %w", l.ID, err)
	}
	return res, nil
}

// RetryJob implements memory.JobStore.
func (d *DB) RetryJob(ctx context.Context, l memory.JobLease, at time.Time, cause error, dead bool) error {
	now := d.now()
	status := "pending"
	if dead {
		status = "failed"
	}
	msg := ""
	if cause != nil {
		msg = cause.Error()
	}
	err := d.write(ctx, func(tx wtx) error {
		r, err := tx.exec(`UPDATE memory_jobs SET status = ?4, available_at = ?5, lease_owner = NULL,
    lease_until = NULL, last_error = ?6, updated_at = ?7 WHERE `+holds,
			l.ID, l.Owner, l.Claims, status, ms(at), nullStr(msg), now)
		if err != nil {
			return err
		}
		if affected(r) == 0 {
			return clean(memory.ErrLeaseLost)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: retry memory job %d: %w", l.ID, err)
	}
	return nil
}

// JobCounts returns the number of extraction jobs per status.
func (d *DB) JobCounts(ctx context.Context) (map[string]int, error) {
	rows, err := d.rdb.QueryContext(ctx, `SELECT status, count(*) FROM memory_jobs GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("store: job counts: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := map[string]int{}
	for rows.Next() {
		var (
			s string
			n int
		)
		if err := rows.Scan(&s, &n); err != nil {
			return nil, fmt.Errorf("store: job counts: %w", err)
		}
		out[s] = n
	}
	return out, rows.Err()
}
