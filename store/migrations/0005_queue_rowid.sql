-- 0005: a queue row is keyed by the rowid of its transcript row.
--
-- Every inbound_items row has its message_events row under the same id,
-- written in the same transaction. Until now the queue row had its own
-- TEXT primary key, so each enqueue also inserted the id into a second
-- B-tree ordered by message key, whose leaf pages are spread over every
-- chat the bot is in: one more random page written (as a WAL frame) per
-- message. From this version the queue row's key is rid, the rowid of its
-- transcript row; the id column stays (the record listing and the
-- inbound_events view show it) but is not indexed. A lookup by id goes
-- through the transcript's id index:
--     rid = (SELECT rowid FROM message_events WHERE id = ?)
-- Transcript rows are never deleted and re-inserted under a new rowid (they
-- are upserted in place), so rid stays valid for the life of the row.
--
-- Rows whose transcript row is missing (none are written so, but a file
-- edited by hand could have them) get their transcript row's place taken by
-- a fresh negative rid so that nothing is lost.
CREATE TABLE inbound_items_v5 (
    rid                 INTEGER PRIMARY KEY, -- message_events.rowid of the item's transcript row
    id                  TEXT    NOT NULL,
    session_key         TEXT    NOT NULL,
    chat_kind           TEXT    NOT NULL CHECK (chat_kind IN ('group', 'private')),
    sender_id           TEXT    NOT NULL DEFAULT '',
    message_id          TEXT    NOT NULL DEFAULT '',
    event_time          INTEGER NOT NULL,
    seq                 INTEGER NOT NULL DEFAULT 0,
    source              TEXT    NOT NULL DEFAULT 'live',
    history_only        INTEGER NOT NULL DEFAULT 0,
    priority            INTEGER NOT NULL DEFAULT 0,
    status              TEXT    NOT NULL CHECK (status IN ('pending', 'leased', 'done')),
    attempts            INTEGER NOT NULL DEFAULT 0,
    claims              INTEGER NOT NULL DEFAULT 0, -- every claim, charged or not: the lease fencing token
    available_at        INTEGER NOT NULL,
    lease_owner         TEXT,
    lease_until         INTEGER,
    merged_into         TEXT,
    outcome             TEXT,
    reason              TEXT,
    delivery_stage      TEXT,
    outbound_ids        TEXT,
    enqueued_at         INTEGER NOT NULL,
    first_claimed_at    INTEGER,
    gates_done_at       INTEGER,
    generation_start_at INTEGER,
    generation_end_at   INTEGER,
    first_send_at       INTEGER,
    first_ack_at        INTEGER,
    completed_at        INTEGER,
    tokens              TEXT,
    kind                TEXT,
    last_error          TEXT,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);

INSERT INTO inbound_items_v5
SELECT coalesce((SELECT m.rowid FROM message_events m WHERE m.id = i.id), -i.rowid), i.id, i.session_key,
    i.chat_kind, i.sender_id, i.message_id, i.event_time, i.seq, i.source, i.history_only, i.priority, i.status,
    i.attempts, i.claims, i.available_at, i.lease_owner, i.lease_until, i.merged_into, i.outcome, i.reason,
    i.delivery_stage, i.outbound_ids, i.enqueued_at, i.first_claimed_at, i.gates_done_at, i.generation_start_at,
    i.generation_end_at, i.first_send_at, i.first_ack_at, i.completed_at, i.tokens, i.kind, i.last_error,
    i.created_at, i.updated_at
FROM inbound_items i;

DROP VIEW inbound_events;
DROP TABLE inbound_items;
ALTER TABLE inbound_items_v5 RENAME TO inbound_items;
CREATE INDEX inbound_items_live ON inbound_items (status) WHERE status IN ('pending', 'leased');

CREATE VIEW inbound_events AS
SELECT
    id,
    session_key,
    sender_id,
    message_id,
    source,
    status,
    outcome        AS code,
    reason,
    delivery_stage,
    kind,
    merged_into,
    attempts,
    last_error,
    event_time,
    enqueued_at,
    first_claimed_at,
    gates_done_at,
    generation_start_at,
    generation_end_at,
    first_send_at,
    first_ack_at,
    completed_at,
    completed_at - enqueued_at AS total_ms
FROM inbound_items;
