-- 0004: history search indexing leaves the write path.
--
-- Until now an AFTER INSERT trigger added every transcript row to
-- message_search inside the writer's transaction: FTS4 writes the terms of
-- each statement out as a new index segment, so every message cost one
-- segment write (and its share of segment merges), about 65 µs of the
-- single writer. From this version a transcript write only queues the row
-- in message_search_queue; the store's background indexer
-- (store/search_index.go) moves queued rows into message_search in batches,
-- one INSERT ... SELECT per batch in (search_sid, docid) order, so that a
-- session's queued messages share one segment. The index therefore lags the
-- transcript by at most one indexer pass; every history search first
-- indexes what is still queued for its sessions, so a search sees every
-- write that returned before it.
--
-- search_tokens keeps its meaning (the Go-tokenized text, computed by the
-- writer's caller, outside the writer). The invariant from here on: a
-- message_events row is in message_search exactly when its search_tokens is
-- not empty and it is not queued; a queued row has tokens, and its queue
-- entry carries its current search_sid. The triggers below keep it. They
-- never delete a docid that is not in the index: deleting from an
-- external-content FTS4 table reads the row's tokens and removes them and
-- one document from the counts whether or not they were ever indexed.
--
-- Rows written before this version are indexed and stay so: nothing is
-- queued or re-indexed.

CREATE TABLE message_search_queue (
    search_sid INTEGER NOT NULL,
    docid      INTEGER NOT NULL, -- message_events.rowid
    PRIMARY KEY (search_sid, docid)
) WITHOUT ROWID;

DROP TRIGGER message_search_ai;
DROP TRIGGER message_search_bu;
DROP TRIGGER message_search_au;
DROP TRIGGER message_search_bd;

-- 0002's insert trigger indexed every row, also those without tokens
-- (notices, messages without text): they leave the index so that the
-- invariant holds. They have no terms; only their document entries go.
DELETE FROM message_search WHERE docid IN (SELECT rowid FROM message_events WHERE search_tokens = '');

-- A new row with tokens is queued.
CREATE TRIGGER message_search_ai AFTER INSERT ON message_events
WHEN new.search_tokens != '' BEGIN
    INSERT OR IGNORE INTO message_search_queue (search_sid, docid) VALUES (new.search_sid, new.rowid);
END;
-- A change of tokens or partition takes an indexed row out of the index at
-- once (FTS4 reads the old tokens from the row to remove them, so this
-- cannot wait) and queues it again when it still has tokens; a queued row
-- only has its queue entry follow it.
CREATE TRIGGER message_search_bu BEFORE UPDATE OF search_tokens, search_sid ON message_events
WHEN old.search_tokens != ''
    AND (old.search_tokens IS NOT new.search_tokens OR old.search_sid IS NOT new.search_sid)
    AND NOT EXISTS (SELECT 1 FROM message_search_queue q WHERE q.search_sid = old.search_sid AND q.docid = old.rowid) BEGIN
    DELETE FROM message_search WHERE docid = old.rowid;
END;
CREATE TRIGGER message_search_au AFTER UPDATE OF search_tokens, search_sid ON message_events
WHEN old.search_tokens IS NOT new.search_tokens OR old.search_sid IS NOT new.search_sid BEGIN
    DELETE FROM message_search_queue WHERE search_sid = old.search_sid AND docid = old.rowid;
    INSERT OR IGNORE INTO message_search_queue (search_sid, docid)
        SELECT new.search_sid, new.rowid WHERE new.search_tokens != '';
END;
CREATE TRIGGER message_search_bd BEFORE DELETE ON message_events
WHEN old.search_tokens != ''
    AND NOT EXISTS (SELECT 1 FROM message_search_queue q WHERE q.search_sid = old.search_sid AND q.docid = old.rowid) BEGIN
    DELETE FROM message_search WHERE docid = old.rowid;
END;
CREATE TRIGGER message_search_ad AFTER DELETE ON message_events
WHEN old.search_tokens != '' BEGIN
    DELETE FROM message_search_queue WHERE search_sid = old.search_sid AND docid = old.rowid;
END;
