package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/memory"
)

// Summary checkpoints (memory.SummaryStore) live in memory_summaries, one
// row per (session, epoch); the history they fold is read from
// message_events.

var _ memory.SummaryStore = (*DB)(nil)

const summaryCols = `session_key, epoch, text, from_time, from_key, watermark_time, watermark_key, message_count,
    version, input_hash, created_at, updated_at`

// querySummary reads one checkpoint (memory.ErrNotFound when there is
// none).
func (d *DB) querySummary(ctx context.Context, sql string, args ...any) (memory.Summary, error) {
	if err := d.historyClosed(); err != nil {
		return memory.Summary{}, err
	}
	var (
		s                            memory.Summary
		fromT, wmT, created, updated int64
	)
	err := d.pool.QueryRow(ctx, sql, args...).Scan(&s.SessionKey, &s.Epoch, &s.Text, &fromT, &s.From.Key, &wmT,
		&s.Watermark.Key, &s.Messages, &s.Version, &s.InputHash, &created, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return memory.Summary{}, memory.ErrNotFound
	}
	if err != nil {
		return memory.Summary{}, err
	}
	s.From.Time, s.Watermark.Time = fromMs(fromT), fromMs(wmT)
	s.CreatedAt, s.UpdatedAt = fromMs(created), fromMs(updated)
	return s, nil
}

// LatestSummary implements memory.SummaryStore: the session's checkpoint
// with the highest epoch.
func (d *DB) LatestSummary(ctx context.Context, sessionKey string) (memory.Summary, error) {
	s, err := d.querySummary(ctx, `SELECT `+summaryCols+` FROM memory_summaries WHERE session_key = $1
ORDER BY epoch DESC LIMIT 1`, sessionKey)
	if err != nil {
		return s, fmt.Errorf("postgres: latest summary %s: %w", sessionKey, err)
	}
	return s, nil
}

// SummaryAt implements memory.SummaryStore.
func (d *DB) SummaryAt(ctx context.Context, sessionKey string, epoch int) (memory.Summary, error) {
	s, err := d.querySummary(ctx, `SELECT `+summaryCols+` FROM memory_summaries WHERE session_key = $1 AND epoch = $2`,
		sessionKey, epoch)
	if err != nil {
		return s, fmt.Errorf("postgres: summary %s@%d: %w", sessionKey, epoch, err)
	}
	return s, nil
}

// SaveSummary implements memory.SummaryStore: it inserts the checkpoint or
// replaces the one with the same session and epoch, in one statement,
// keeping the replaced row's created_at. The session key must not be empty
// and the epoch must be at least 1.
func (d *DB) SaveSummary(ctx context.Context, s memory.Summary) error {
	if s.SessionKey == "" || s.Epoch <= 0 {
		return fmt.Errorf("postgres: save summary %q@%d: a summary needs a session key and an epoch ≥ 1",
			s.SessionKey, s.Epoch)
	}
	if err := d.historyClosed(); err != nil {
		return err
	}
	var fromT int64
	if !s.From.IsZero() {
		fromT = ms(s.From.Time)
	}
	_, err := d.pool.Exec(ctx, `INSERT INTO memory_summaries (`+summaryCols+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
ON CONFLICT (session_key, epoch) DO UPDATE SET text = EXCLUDED.text, from_time = EXCLUDED.from_time,
    from_key = EXCLUDED.from_key, watermark_time = EXCLUDED.watermark_time, watermark_key = EXCLUDED.watermark_key,
    message_count = EXCLUDED.message_count, version = EXCLUDED.version, input_hash = EXCLUDED.input_hash,
    updated_at = EXCLUDED.updated_at`,
		pgText(s.SessionKey), s.Epoch, pgText(s.Text), fromT, pgText(s.From.Key), ms(s.Watermark.Time),
		pgText(s.Watermark.Key), s.Messages, s.Version, pgText(s.InputHash), d.nowMs())
	if err != nil {
		return fmt.Errorf("postgres: save summary %s@%d: %w", s.SessionKey, s.Epoch, err)
	}
	return nil
}

// afterTime is the event-time bound of a watermark for the "after"
// queries: the zero watermark is before every message.
func afterTime(w memory.Watermark) int64 {
	if w.IsZero() {
		return math.MinInt64
	}
	return ms(w.Time)
}

// sqlMessagesAfter reads the oldest $4 chat messages (notices left out,
// recalled ones in) of session $1 strictly after the watermark ($2, $3)
// in (event time, key) order; keys compare byte-wise, as in Go.
const sqlMessagesAfter = `SELECT ` + historyMessageCols + ` FROM message_events
WHERE session_key = $1 AND direction <> 'notice'
    AND event_time >= $2 AND (event_time > $2 OR id COLLATE "C" > $3)
ORDER BY event_time, id COLLATE "C"
LIMIT $4`

// MessagesAfter implements memory.SummaryStore: up to limit chat messages
// of the session after the watermark, oldest first, recalled ones included
// with Recalled set and notices left out.
func (d *DB) MessagesAfter(ctx context.Context, sessionKey string, after memory.Watermark, limit int) ([]memory.Message, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := d.queryHistoryMessages(ctx, sqlMessagesAfter, sessionKey, afterTime(after), after.Key, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: messages after: %w", err)
	}
	return out, nil
}

// CountAfter implements memory.SummaryStore: the number of messages
// MessagesAfter would return without a limit.
func (d *DB) CountAfter(ctx context.Context, sessionKey string, after memory.Watermark) (int, error) {
	if err := d.historyClosed(); err != nil {
		return 0, err
	}
	var n int
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM message_events
WHERE session_key = $1 AND direction <> 'notice'
    AND event_time >= $2 AND (event_time > $2 OR id COLLATE "C" > $3)`,
		sessionKey, afterTime(after), after.Key).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("postgres: count after: %w", err)
	}
	return n, nil
}
