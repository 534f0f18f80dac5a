-- 0001: the initial schema. Every timestamp is unix milliseconds.

-- The permanent transcript: one row per platform message, inbound, outbound
-- or notice, keyed by the event's canonical key.
CREATE TABLE message_events (
    id          TEXT    NOT NULL PRIMARY KEY,
    session_key TEXT    NOT NULL,
    platform    TEXT    NOT NULL DEFAULT '',
    bot_id      TEXT    NOT NULL DEFAULT '',
    chat_kind   TEXT    NOT NULL DEFAULT '',
    chat_id     TEXT    NOT NULL DEFAULT '',
    message_id  TEXT    NOT NULL DEFAULT '',
    seq         INTEGER NOT NULL DEFAULT 0,
    sender_id   TEXT    NOT NULL DEFAULT '',
    sender_name TEXT    NOT NULL DEFAULT '',
    event_time  INTEGER NOT NULL,
    text        TEXT    NOT NULL DEFAULT '',
    payload     TEXT    NOT NULL,
    direction   TEXT    NOT NULL CHECK (direction IN ('in', 'out', 'notice')),
    recalled_at INTEGER,
    created_at  INTEGER NOT NULL
);
CREATE INDEX message_events_session_time ON message_events (session_key, event_time);
CREATE INDEX message_events_sender_time ON message_events (sender_id, event_time);

-- The work queue and per-message record: one row per inbound message.
CREATE TABLE inbound_items (
    id                  TEXT    NOT NULL PRIMARY KEY,
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
-- The queue indexes cover only the rows in the state they serve, so an item
-- enters and leaves each of them once instead of being rewritten on every
-- state change.
CREATE INDEX inbound_items_claim ON inbound_items (status, available_at, priority DESC, event_time, id)
    WHERE status = 'pending';
CREATE INDEX inbound_items_lease ON inbound_items (status, lease_until)
    WHERE status = 'leased';
CREATE INDEX inbound_items_session_status ON inbound_items (session_key, status);
-- Live rows in claim order, covering the claim filter: Claim walks it from
-- the front and stops after a bounded window, whatever the backlog.
CREATE INDEX inbound_items_order ON inbound_items
    (priority DESC, event_time, id, status, available_at, lease_until, session_key, chat_kind)
    WHERE status IN ('pending', 'leased');

-- The event center's read view: outcome code, reason, attempts and timings
-- per inbound message.
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

-- Exactly one delivery per chunk: intent before the platform call, sent
-- after it.
CREATE TABLE delivery_ledger (
    turn_id              TEXT    NOT NULL,
    slot                 INTEGER NOT NULL,
    fingerprint          TEXT    NOT NULL,
    state                TEXT    NOT NULL CHECK (state IN ('intent', 'sent')),
    platform_message_ids TEXT,
    sent_at              INTEGER,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    PRIMARY KEY (turn_id, slot)
) WITHOUT ROWID;

-- The shaped reply of a turn, saved before its first chunk is sent.
CREATE TABLE turn_drafts (
    turn_id    TEXT    NOT NULL PRIMARY KEY,
    draft      TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);

-- Session flags with a deadline: stop windows, pauses, cooldowns, mutes,
-- lane backoff state.
CREATE TABLE session_flags (
    session_key TEXT    NOT NULL,
    subject     TEXT    NOT NULL,
    flag        TEXT    NOT NULL,
    until       INTEGER,
    value       TEXT    NOT NULL DEFAULT '',
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (session_key, subject, flag)
) WITHOUT ROWID;

-- Per bot: the last time it was seen online.
CREATE TABLE checkpoints (
    bot        TEXT    NOT NULL PRIMARY KEY,
    at         INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
