-- 0008: a session's history is found through message_timeline, written in
-- bulk, instead of an index that SQLite keeps up row by row.
--
-- The (session_key, event_time) index of message_events put every new row's
-- entry into the leaf page of its session: with many chats, one more page
-- of its own per message, written as a WAL frame at the message's commit
-- and copied again by the next checkpoint. message_timeline holds the same
-- entries, but the store writes them in bulk (see timeline.go): every row
-- whose rowid is at most message_timeline_mark.through has its entry; the
-- rows above it (the tail: at most a few thousand, the newest ones) do not
-- yet, and a session query reads them from message_events by rowid. One
-- bulk write sorts the tail's entries, so a session's new entries share a
-- page.
CREATE TABLE message_timeline (
    session_key TEXT    NOT NULL,
    event_time  INTEGER NOT NULL,
    rid         INTEGER NOT NULL, -- message_events.rowid
    PRIMARY KEY (session_key, event_time, rid)
) WITHOUT ROWID;

CREATE TABLE message_timeline_mark (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    through INTEGER NOT NULL -- every message_events row with rowid <= through is in message_timeline
);

INSERT INTO message_timeline (session_key, event_time, rid)
SELECT session_key, event_time, rowid FROM message_events ORDER BY session_key, event_time, rowid;
INSERT INTO message_timeline_mark (one, through) SELECT 1, coalesce(max(rowid), 0) FROM message_events;
DROP INDEX message_events_session_time;

-- A row below the mark keeps its entry in step when its session or time
-- changes, when it goes, and when a new row gets a rowid below the mark
-- (SQLite reuses the largest rowid after a delete).
CREATE TRIGGER message_timeline_au AFTER UPDATE OF session_key, event_time ON message_events
WHEN (old.session_key IS NOT new.session_key OR old.event_time IS NOT new.event_time)
    AND old.rowid <= (SELECT through FROM message_timeline_mark)
BEGIN
    DELETE FROM message_timeline
    WHERE session_key = old.session_key AND event_time = old.event_time AND rid = old.rowid;
    INSERT OR IGNORE INTO message_timeline (session_key, event_time, rid)
    VALUES (new.session_key, new.event_time, new.rowid);
END;

CREATE TRIGGER message_timeline_ad AFTER DELETE ON message_events
WHEN old.rowid <= (SELECT through FROM message_timeline_mark)
BEGIN
    DELETE FROM message_timeline
    WHERE session_key = old.session_key AND event_time = old.event_time AND rid = old.rowid;
END;

CREATE TRIGGER message_timeline_ai AFTER INSERT ON message_events
WHEN new.rowid <= (SELECT through FROM message_timeline_mark)
BEGIN
    INSERT OR IGNORE INTO message_timeline (session_key, event_time, rid)
    VALUES (new.session_key, new.event_time, new.rowid);
END;
