package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/personakit/persona/memory"
)

const summaryCols = `session_key, epoch, text, from_time, from_key, watermark_time, watermark_key, message_count,
    version, input_hash, created_at, updated_at`

func (d *DB) querySummary(ctx context.Context, q string, args ...any) (memory.Summary, error) {
	var (
		s                            memory.Summary
		fromT, wmT, created, updated int64
	)
	err := d.rdb.QueryRowContext(ctx, q, args...).Scan(&s.SessionKey, &s.Epoch, &s.Text, &fromT, &s.From.Key, &wmT,
		&s.Watermark.Key, &s.Messages, &s.Version, &s.InputHash, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return s, memory.ErrNotFound
	}
	if err != nil {
		return s, err
	}
	if fromT != 0 || s.From.Key != "" {
		s.From.Time = fromMs(fromT)
	}
	s.Watermark.Time, s.CreatedAt, s.UpdatedAt = fromMs(wmT), fromMs(created), fromMs(updated)
	return s, nil
}

// LatestSummary implements memory.SummaryStore.
func (d *DB) LatestSummary(ctx context.Context, sessionKey string) (memory.Summary, error) {
	s, err := d.querySummary(ctx, `SELECT `+summaryCols+` FROM summaries WHERE session_key = ?
ORDER BY epoch DESC LIMIT 1`, sessionKey)
	if err != nil {
		return s, fmt.Errorf("store: latest summary %s: %w", sessionKey, err)
	}
	return s, nil
}

// SummaryAt implements memory.SummaryStore.
func (d *DB) SummaryAt(ctx context.Context, sessionKey string, epoch int) (memory.Summary, error) {
	s, err := d.querySummary(ctx, `SELECT `+summaryCols+` FROM summaries WHERE session_key = ? AND epoch = ?`,
		sessionKey, epoch)
	if err != nil {
		return s, fmt.Errorf("store: summary %s@%d: %w", sessionKey, epoch, err)
	}
	return s, nil
}

// SaveSummary implements memory.SummaryStore: it inserts the checkpoint or
// replaces the one with the same session and epoch (keeping its
// created_at).
func (d *DB) SaveSummary(ctx context.Context, s memory.Summary) error {
	if s.SessionKey == "" || s.Epoch <= 0 {
		return fmt.Errorf("%w: summary needs a session key and an epoch ≥ 1", ErrInvalid)
	}
	now := d.now()
	var fromT int64
	if !s.From.IsZero() {
		fromT = ms(s.From.Time)
	}
	err := d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`INSERT INTO summaries (`+summaryCols+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)
ON CONFLICT (session_key, epoch) DO UPDATE SET text = excluded.text, from_time = excluded.from_time,
    from_key = excluded.from_key, watermark_time = excluded.watermark_time, watermark_key = excluded.watermark_key,
    message_count = excluded.message_count, version = excluded.version, input_hash = excluded.input_hash,
    updated_at = excluded.updated_at`,
			s.SessionKey, s.Epoch, s.Text, fromT, s.From.Key, ms(s.Watermark.Time), s.Watermark.Key, s.Messages,
			s.Version, s.InputHash, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: save summary %s@%d: %w", s.SessionKey, s.Epoch, err)
	}
	return nil
}
