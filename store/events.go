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

	// rowid and recalled are the row's rowid and recall time after the
	// upsert (outputs of upsertEvent, for the history cache).
	rowid    int64
	recalled sql.NullInt64
}

// newEventRow encodes ev for the message_events row with the given key.
// A zero event time is replaced by now.
func newEventRow(id, session string, ev *channel.Event, dir memory.Direction, recalled time.Time, now int64) (eventRow, error) {
	payload, err := json.Marshal(ev)
	if err != nil {
		return eventRow{}, fmt.Errorf("%w: encode event %s: %w", ErrInvalid, id, err)
	}
	et := now
	if !ev.Time.IsZero() {
		et = ms(ev.Time)
	}
	return eventRow{
		id: id, session: session, platform: ev.Platform, botID: ev.BotID,
		chatKind: string(ev.Chat.Kind), chatID: ev.Chat.ID, messageID: ev.MessageID, seq: ev.Seq,
		senderID: ev.Sender.ID, senderName: ev.Sender.Name, eventTime: et, text: ev.Text(),
		payload: payload, direction: dir, recalledAt: nullMs(recalled),
		searchTokens: searchTokens(ev, dir), searchSID: searchSID(session),
	}, nil
}

const sqlUpsertEvent = `
INSERT INTO message_events (id, session_key, platform, bot_id, chat_kind, chat_id, message_id, seq,
    sender_id, sender_name, event_time, text, payload, direction, recalled_at, created_at,
    search_tokens, search_sid)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
ON CONFLICT (id) DO UPDATE SET
    session_key = excluded.session_key, platform = excluded.platform, bot_id = excluded.bot_id,
    chat_kind = excluded.chat_kind, chat_id = excluded.chat_id, message_id = excluded.message_id,
    seq = excluded.seq, sender_id = excluded.sender_id, sender_name = excluded.sender_name,
    event_time = excluded.event_time, text = excluded.text, payload = excluded.payload,
    direction = excluded.direction, recalled_at = COALESCE(excluded.recalled_at, recalled_at),
    search_tokens = excluded.search_tokens, search_sid = excluded.search_sid
RETURNING rowid, recalled_at`

// upsertEvent writes the transcript row, keeping created_at (and recalled_at
// unless a new one is given) of an existing row. It does not index the row
// for search: the triggers queue it (see migrations/0004_search_async.sql),
// and the caller kicks the search indexer (DB.kickSearchIndex) once the
// write returned when r.searchTokens is not empty. It sets r.rowid and
// r.recalled to the row's rowid and resulting recall time.
func upsertEvent(tx wtx, r *eventRow, now int64) error {
	r.rowid, r.recalled = 0, sql.NullInt64{}
	return tx.queryRow(sqlUpsertEvent, r.id, r.session, r.platform, r.botID, r.chatKind, r.chatID, r.messageID,
		r.seq, r.senderID, r.senderName, r.eventTime, r.text, r.payload, string(r.direction), r.recalledAt, now,
		r.searchTokens, r.searchSID).Scan(&r.rowid, &r.recalled)
}
