-- Connections that only one process may hold at a time (package cluster).
-- The hold itself is a session-level advisory lock, not a row: these
-- tables keep what the other processes need to know about it.

-- The state the holder of each connection published (channel.State),
-- read by the processes that follow it. holder is the token of the hold
-- that wrote it.
CREATE TABLE cluster_states (
    name       text    PRIMARY KEY,
    platform   text    NOT NULL DEFAULT '',
    bot_id     text    NOT NULL DEFAULT '',
    connected  boolean NOT NULL DEFAULT false,
    online     boolean NOT NULL DEFAULT false,
    reason     text    NOT NULL DEFAULT '',
    holder     text    NOT NULL DEFAULT '',
    updated_at bigint  NOT NULL
);

-- Requests relayed to the holder by the processes that follow it: sends
-- (kind 'send') and calls of the channel's other capabilities (kind
-- 'history', 'chats', 'member', 'media', 'typing', 'recall',
-- 'answer_request', 'forward': see cluster.RequestKind). pending →
-- claimed (by the hold claimed_by) → done | failed | unconfirmed, or
-- pending → cancelled. A send with an idempotency key has one row per
-- (name, key); a call never has a key. payload is the JSON of the
-- request (channel.Outgoing for a send, the call's arguments for a
-- call); a done send keeps its receipt (channel.Receipt), a done call
-- its answer (JSON) and, for a media fetch, the content it read (body);
-- error is a cluster.ErrorRecord.
CREATE TABLE cluster_relay (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text   NOT NULL,
    kind          text   NOT NULL DEFAULT 'send' CHECK (kind <> ''),
    idem_key      text   CHECK (idem_key IS NULL OR kind = 'send'),
    payload       text   NOT NULL,
    status        text   NOT NULL
                  CHECK (status IN ('pending', 'claimed', 'done', 'failed', 'unconfirmed', 'cancelled')),
    requested_at  bigint NOT NULL,
    -- the holder does not take the request after this (0: no limit)
    pending_until bigint NOT NULL DEFAULT 0,
    -- the follower's deadline for the request (0: none)
    deadline      bigint NOT NULL DEFAULT 0,
    claimed_by    text   NOT NULL DEFAULT '',
    claimed_at    bigint NOT NULL DEFAULT 0,
    finished_at   bigint NOT NULL DEFAULT 0,
    receipt       text,
    answer        bytea,
    body          bytea,
    error_class   text   NOT NULL DEFAULT '',
    error         text
);
CREATE UNIQUE INDEX cluster_relay_key ON cluster_relay (name, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX cluster_relay_open ON cluster_relay (name, id) WHERE status IN ('pending', 'claimed');
CREATE INDEX cluster_relay_finished ON cluster_relay (name, finished_at) WHERE status NOT IN ('pending', 'claimed');
