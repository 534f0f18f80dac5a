package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/memory"
)

// The transcript (memory.History) on message_events. Every process reads
// and writes the table directly: there is no cache, so a message one
// process appends is in every other process's Recent and search at once.

var (
	_ memory.History      = (*DB)(nil)
	_ memory.RecentViewer = (*DB)(nil)
)

// searchTokens is the search_tokens value of a message_events row: the
// space-joined tokens (memory.IndexText) of the message text and the
// sender's name, or "" for a notice, which is never searched. Every writer
// of message_events fills the column with it when it writes the row, so
// that the history index (migrations/0004_search.sql) sees the same tokens
// whoever wrote the row.
func searchTokens(ev *channel.Event, dir memory.Direction) string {
	if dir == memory.Notice {
		return ""
	}
	return memory.IndexText(ev.TextAndSpeech(), ev.Sender.Name)
}

// entryDirection is the direction of a history row for ev when the writer
// names none: "out" for the bot's own messages, "notice" for notices and
// "in" otherwise.
func entryDirection(ev *channel.Event) memory.Direction {
	switch ev.Kind {
	case channel.KindSelf:
		return memory.Out
	case channel.KindNotice:
		return memory.Notice
	}
	return memory.In
}

// pgText makes s storable in a PostgreSQL text column, which accepts
// neither NUL bytes nor invalid UTF-8: it drops the former and replaces
// the latter with U+FFFD. Valid strings come back unchanged.
func pgText(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// sqlUpsertHistory writes one transcript row, or refreshes the row with the
// same key: an existing row keeps its seq (its place among rows of the
// same time), its created_at and, unless a recall time is given, its
// recall time.
const sqlUpsertHistory = `
INSERT INTO message_events (id, session_key, platform, bot_id, chat_kind, chat_id, message_id, sender_id,
    sender_name, event_time, text, payload, direction, recalled_at, created_at, search_tokens)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (id) DO UPDATE SET
    session_key = EXCLUDED.session_key, platform = EXCLUDED.platform, bot_id = EXCLUDED.bot_id,
    chat_kind = EXCLUDED.chat_kind, chat_id = EXCLUDED.chat_id, message_id = EXCLUDED.message_id,
    sender_id = EXCLUDED.sender_id, sender_name = EXCLUDED.sender_name, event_time = EXCLUDED.event_time,
    text = EXCLUDED.text, payload = EXCLUDED.payload, direction = EXCLUDED.direction,
    recalled_at = coalesce(EXCLUDED.recalled_at, message_events.recalled_at),
    search_tokens = EXCLUDED.search_tokens`

// upsertHistory writes the transcript row of e through q (the pool or a
// transaction), as Append documents: e.Key defaults to e.Event.Key(),
// e.SessionKey to e.Event.SessionKey (it must not end up empty) and
// e.Direction to entryDirection; a zero event time is stored as now. The
// search tokens come from searchTokens.
func (d *DB) upsertHistory(ctx context.Context, q execer, e memory.Entry) error {
	if e.Key == "" {
		e.Key = e.Event.Key()
	}
	if e.SessionKey == "" {
		e.SessionKey = e.Event.SessionKey
	}
	if e.Key == "" {
		return errors.New("postgres: append: history entry without a key")
	}
	if e.SessionKey == "" {
		return fmt.Errorf("postgres: append %s: history entry without a session key", e.Key)
	}
	if e.Direction == "" {
		e.Direction = entryDirection(&e.Event)
	}
	switch e.Direction {
	case memory.In, memory.Out, memory.Notice:
	default:
		return fmt.Errorf("postgres: append %s: unknown direction %q", e.Key, e.Direction)
	}
	payload, err := encodeEvent(&e.Event)
	if err != nil {
		return err
	}
	now := d.nowMs()
	et := now
	if !e.Event.Time.IsZero() {
		et = ms(e.Event.Time)
	}
	var recalled *int64
	if !e.RecalledAt.IsZero() {
		v := ms(e.RecalledAt)
		recalled = &v
	}
	ev := &e.Event
	_, err = q.Exec(ctx, sqlUpsertHistory,
		pgText(e.Key), pgText(e.SessionKey), pgText(ev.Platform), pgText(ev.BotID), pgText(string(ev.Chat.Kind)),
		pgText(ev.Chat.ID), pgText(ev.MessageID), pgText(ev.Sender.ID), pgText(ev.Sender.Name), et,
		pgText(ev.TextAndSpeech()), payload, string(e.Direction), recalled, now, searchTokens(ev, e.Direction))
	if err != nil {
		return fmt.Errorf("postgres: append %s: %w", e.Key, err)
	}
	return nil
}

// Append implements memory.History: it writes the message_events row keyed
// by e.Key (e.Event.Key() when empty) in one statement. A second Append
// with the same key replaces the row's payload, text, sender and search
// tokens, and keeps its created_at, its place among messages of the same
// time and, unless e.RecalledAt is set, its recall time. e.SessionKey
// defaults to e.Event.SessionKey and must not end up empty; e.Direction
// defaults to "out" for the bot's own messages, "notice" for notices and
// "in" otherwise.
func (d *DB) Append(ctx context.Context, e memory.Entry) error {
	if err := d.historyClosed(); err != nil {
		return err
	}
	return d.upsertHistory(ctx, d.pool, e)
}

// sqlRecent reads the newest $2 rows of a session, oldest first: by event
// time, then by the order the rows were first written.
const sqlRecent = `
SELECT id, session_key, direction, payload, recalled_at FROM (
    SELECT id, session_key, direction, payload, recalled_at, event_time, seq FROM message_events
    WHERE session_key = $1 ORDER BY event_time DESC, seq DESC LIMIT $2) r
ORDER BY event_time, seq`

// Recent implements memory.History: the newest limit entries of the
// session, oldest first (by event time, then the order they were first
// appended). Every direction is included, and recalled entries too, with
// RecalledAt set. limit ≤ 0 returns nothing.
func (d *DB) Recent(ctx context.Context, sessionKey string, limit int) ([]memory.Entry, error) {
	if limit <= 0 {
		return nil, nil
	}
	if err := d.historyClosed(); err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, sqlRecent, sessionKey, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: recent %s: %w", sessionKey, err)
	}
	out := make([]memory.Entry, 0, min(limit, 64))
	for rows.Next() {
		var (
			e        memory.Entry
			dir      string
			payload  string
			recalled *int64
		)
		if err := rows.Scan(&e.Key, &e.SessionKey, &dir, &payload, &recalled); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: recent %s: %w", sessionKey, err)
		}
		if e.Event, err = decodeEvent(payload); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: recent %s: entry %s: %w", sessionKey, e.Key, err)
		}
		e.Direction = memory.Direction(dir)
		if recalled != nil {
			e.RecalledAt = fromMs(*recalled)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: recent %s: %w", sessionKey, err)
	}
	return out, nil
}

// RecentView implements memory.RecentViewer. The store keeps no copy of
// the history in memory (other processes write it too), so this is Recent
// with the slice's capacity cut to its length.
func (d *DB) RecentView(ctx context.Context, sessionKey string, limit int) ([]memory.Entry, error) {
	es, err := d.Recent(ctx, sessionKey, limit)
	return slices.Clip(es), err
}

// MarkRecalled implements memory.History: it sets the recall time of the
// row with this key (now when at is zero). An unknown key is not an error:
// a recall notice may name a message that was never stored.
func (d *DB) MarkRecalled(ctx context.Context, key string, at time.Time) error {
	if err := d.historyClosed(); err != nil {
		return err
	}
	if at.IsZero() {
		at = d.now()
	}
	if _, err := d.pool.Exec(ctx, `UPDATE message_events SET recalled_at = $2 WHERE id = $1`, key, ms(at)); err != nil {
		return fmt.Errorf("postgres: mark recalled %s: %w", key, err)
	}
	return nil
}

// historyClosed returns ErrClosed once the store is closed, nil before.
func (d *DB) historyClosed() error {
	select {
	case <-d.closed:
		return ErrClosed
	default:
		return nil
	}
}
