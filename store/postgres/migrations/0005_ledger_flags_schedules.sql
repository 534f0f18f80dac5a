-- The delivery ledger: the shaped reply of a turn (its draft), saved once
-- before the first chunk goes out, and one row per chunk slot recording
-- the intent to send it and, once the platform acknowledged it, its
-- message ids. A slot's state only moves from 'intent' to 'sent'; an
-- intent whose send failed is deleted, a sent slot never is.
CREATE TABLE turn_drafts (
    turn_id    text   COLLATE "C" PRIMARY KEY,
    draft      text   NOT NULL, -- JSON of outbound.Draft, kept byte for byte
    created_at bigint NOT NULL
);

CREATE TABLE delivery_ledger (
    turn_id     text    COLLATE "C" NOT NULL,
    slot        integer NOT NULL CHECK (slot >= 0),
    fingerprint text    NOT NULL, -- '' for a slot marked sent without an intent
    state       text    NOT NULL CHECK (state IN ('intent', 'sent')),
    message_ids text[]  NOT NULL DEFAULT '{}',
    intent_at   bigint, -- when the intent was first recorded (NULL: never)
    sent_at     bigint, -- when the platform acknowledged the chunk
    created_at  bigint  NOT NULL,
    updated_at  bigint  NOT NULL,
    PRIMARY KEY (turn_id, slot)
);

-- Session flags: deadlines and small values per (session, subject, name),
-- such as stop windows, pauses, mutes and quota counters. until is NULL
-- for a flag without a deadline.
CREATE TABLE session_flags (
    session_key text   COLLATE "C" NOT NULL,
    subject     text   COLLATE "C" NOT NULL,
    flag        text   COLLATE "C" NOT NULL,
    until       bigint,
    value       text   NOT NULL DEFAULT '',
    updated_at  bigint NOT NULL,
    PRIMARY KEY (session_key, subject, flag)
);
-- HasSubjectFlags: does a session have any per-subject flag of a name.
CREATE INDEX session_flags_subjects ON session_flags (session_key, flag) WHERE subject <> '';

-- Scheduled messages: each asks the bot to speak in a session at the due
-- times of its spec. next_due is the next time it fires; runners advance
-- it with a compare-and-set on its old value, so exactly one of several
-- processes moves a due time on.
CREATE TABLE schedules (
    id          text    COLLATE "C" PRIMARY KEY,
    session_key text    COLLATE "C" NOT NULL,
    target      text    NOT NULL, -- JSON of schedule.Target
    spec        text    NOT NULL,
    zone        text    NOT NULL,
    prompt      text    NOT NULL,
    next_due    bigint  NOT NULL,
    last_due    bigint, -- NULL: never fired
    enabled     boolean NOT NULL,
    created_at  bigint  NOT NULL,
    updated_at  bigint  NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_due, id) WHERE enabled;
CREATE INDEX schedules_session ON schedules (session_key, id);
