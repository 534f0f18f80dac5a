package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// sqlNewestSessionTime is the newest event time of session ?1 before ?2,
// in its timeline or in the timeline's tail (see timeline.go).
const sqlNewestSessionTime = `SELECT max(t) FROM (
    SELECT max(event_time) AS t FROM message_timeline WHERE session_key = ?1 AND event_time < ?2
    UNION ALL
    SELECT max(event_time) FROM message_events WHERE ` + sqlTailFrom + ` AND session_key = ?1 AND event_time < ?2)`

// NewestSessionEventTime returns the newest event time of a session's
// transcript strictly before before, ok=false when there is none. The
// inbound coordinator uses it as a session's backfill watermark; before (the
// reconnect time) keeps messages that arrived live after the reconnect from
// hiding the outage.
func (d *DB) NewestSessionEventTime(ctx context.Context, sessionKey string, before time.Time) (time.Time, bool, error) {
	var t sql.NullInt64
	err := d.rdb.QueryRowContext(ctx,
		sqlNewestSessionTime,
		sessionKey, before.UnixMilli()).Scan(&t)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: newest session event time: %w", err)
	}
	if !t.Valid {
		return time.Time{}, false, nil
	}
	return fromMs(t.Int64), true, nil
}
