package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/memory"
)

// eventRow holds the message_events columns of one event, computed on the
// caller's goroutine before the write is submitted.
type eventRow struct {
	id, session, platform, botID, chatKind, chatID, messageID string
	seq                                                       int64
	senderID, senderName                                      string
	eventTime                                                 int64
	text                                                      string
	payload                                                   []byte
	direction                                                 memory.Direction
	recalledAt                                                any
	// searchTokens is the indexed text (see memory_search.go), computed
	// here, outside the writer; the row is queued for the search indexer
	// when it is not empty. searchSID is its index partition.
	searchTokens string
	searchSID    int64
	// deferTokens: a new row is stored untokenized (a store without
	// search, see search_deferred.go); searchTokens is computed only if the
	// row turns out to exist already.
	deferTokens bool

	// rowid and recalled are the row's rowid and recall time after the
	// upsert (outputs of upsertEvent, for the history cache).
	rowid    int64
	recalled sql.NullInt64
}

// eventRow is newEventRow for this DB: a store that defers tokenizing
// (see search_deferred.go) leaves the search tokens of a new row empty.
func (d *DB) eventRow(id, session string, ev *channel.Event, dir memory.Direction, recalled time.Time, now int64) (eventRow, error) {
	if !d.deferTokens {
		return newEventRow(id, session, ev, dir, recalled, now)
	}
	r, err := encodeEventRow(id, session, ev, dir, recalled, now)
	r.deferTokens = true
	return r, err
}

// newEventRow encodes ev for the message_events row with the given key.
// A zero event time is replaced by now.
func newEventRow(id, session string, ev *channel.Event, dir memory.Direction, recalled time.Time, now int64) (eventRow, error) {
	r, err := encodeEventRow(id, session, ev, dir, recalled, now)
	if err == nil {
		r.searchTokens = searchTokens(ev, dir)
	}
	return r, err
}

// encodeEventRow is newEventRow without the search tokens.
func encodeEventRow(id, session string, ev *channel.Event, dir memory.Direction, recalled time.Time, now int64) (eventRow, error) {
	payload, ok := appendEventJSON(make([]byte, 0, 256+len(ev.Raw)), ev)
	if !ok {
		var err error
		if payload, err = json.Marshal(ev); err != nil {
			return eventRow{}, fmt.Errorf("%w: encode event %s: %w", ErrInvalid, id, err)
		}
	}
	et := now
	if !ev.Time.IsZero() {
		et = ms(ev.Time)
	}
	return eventRow{
		id: id, session: session, platform: ev.Platform, botID: ev.BotID,
		chatKind: string(ev.Chat.Kind), chatID: ev.Chat.ID, messageID: ev.MessageID, seq: ev.Seq,
		senderID: ev.Sender.ID, senderName: ev.Sender.Name, eventTime: et, text: ev.TextAndSpeech(),
		payload: payload, direction: dir, recalledAt: nullMs(recalled), searchSID: searchSID(session),
	}, nil
}

// sqlInsertEvent is upsertEvent's fast path: a new row, no RETURNING. A
// RETURNING clause makes SQLite collect the returned row in an ephemeral
// table; for this one-row insert that cost about as much as the insert
// itself (≈ 20 µs of the single writer per message), so a new row's rowid
// comes from last_insert_rowid instead. OR IGNORE rather than ON CONFLICT
// DO NOTHING: a statement that fires a trigger (the search queue's) and
// may abort on a constraint makes SQLite copy every page it changes into a
// statement journal first, so that it can undo the statement alone; with
// IGNORE it cannot abort. The row is built here, so NOT NULL cannot fail,
// and a direction the CHECK refuses still fails, on the update path.
const sqlInsertEvent = `
INSERT OR IGNORE INTO message_events (id, session_key, platform, bot_id, chat_kind, chat_id, message_id, seq,
    sender_id, sender_name, event_time, text, payload, direction, recalled_at, created_at,
    search_tokens, search_sid)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)`

// sqlUpdateEvent is upsertEvent's path for an existing row.
const sqlUpdateEvent = `
UPDATE message_events SET
    session_key = ?2, platform = ?3, bot_id = ?4, chat_kind = ?5, chat_id = ?6, message_id = ?7,
    seq = ?8, sender_id = ?9, sender_name = ?10, event_time = ?11, text = ?12, payload = ?13,
    direction = ?14, recalled_at = COALESCE(?15, recalled_at), search_tokens = ?16, search_sid = ?17
WHERE id = ?1
RETURNING rowid, recalled_at`

// upsertEvent writes the transcript row, keeping created_at (and recalled_at
// unless a new one is given) of an existing row. It does not index the row
// for search: the triggers queue it (see migrations/0004_search_async.sql),
// and the caller kicks the search indexer (DB.kickSearchIndex) once the
// write returned when r.searchTokens is not empty. It sets r.rowid and
// r.recalled to the row's rowid and resulting recall time.
func upsertEvent(tx wtx, r *eventRow, now int64) error {
	r.rowid, r.recalled = 0, sql.NullInt64{}
	if r.deferTokens {
		r.searchTokens = ""
	}
	res, err := tx.exec(sqlInsertEvent, r.id, r.session, r.platform, r.botID, r.chatKind, r.chatID, r.messageID,
		r.seq, r.senderID, r.senderName, r.eventTime, r.text, r.payload, string(r.direction), r.recalledAt, now,
		r.searchTokens, r.searchSID)
	if err != nil {
		return err
	}
	if affected(res) == 1 {
		if r.rowid, err = res.LastInsertId(); err != nil {
			return err
		}
		tx.w.tail.added(r.session, r.rowid)
		if at, ok := r.recalledAt.(int64); ok {
			r.recalled = sql.NullInt64{Int64: at, Valid: true}
		}
		return nil
	}
	if r.deferTokens {
		// An existing row may be in the index: keep it there, with the new
		// text (see search_deferred.go).
		r.searchTokens = rowTokens(r.text, r.senderName, string(r.direction))
	}
	if err := tx.queryRow(sqlUpdateEvent, r.id, r.session, r.platform, r.botID, r.chatKind, r.chatID, r.messageID,
		r.seq, r.senderID, r.senderName, r.eventTime, r.text, r.payload, string(r.direction), r.recalledAt,
		r.searchTokens, r.searchSID).Scan(&r.rowid, &r.recalled); err != nil {
		return err
	}
	// The row may be in the tail, and may have moved to r.session.
	tx.w.tail.list(r.session, r.rowid)
	return nil
}
