-- The inbound queue and its event log: one row per inbound message (and
-- per notice or refused message recorded as done from the start), keyed
-- by the canonical event key, the same id as its message_events row.
-- Ids and session keys compare byte by byte (COLLATE "C") so that the
-- claim order and the listing order do not depend on the database's
-- locale.
CREATE TABLE inbound_items (
    id                  text    COLLATE "C" PRIMARY KEY,
    session_key         text    COLLATE "C" NOT NULL,
    chat_kind           text    NOT NULL CHECK (chat_kind IN ('group', 'private')),
    sender_id           text    NOT NULL DEFAULT '',
    message_id          text    NOT NULL DEFAULT '',
    event_time          bigint  NOT NULL,
    source              text    NOT NULL DEFAULT 'live',
    history_only        boolean NOT NULL DEFAULT false,
    priority            integer NOT NULL DEFAULT 0,
    status              text    NOT NULL CHECK (status IN ('pending', 'leased', 'done')),
    -- charged attempts; claims counts every claim and fences lease writes
    attempts            integer NOT NULL DEFAULT 0,
    claims              integer NOT NULL DEFAULT 0,
    available_at        bigint  NOT NULL,
    lease_owner         text,
    lease_until         bigint,
    -- the queue_processes row of the process that holds the lease
    lease_proc          text,
    -- the previous lease was freed because its process died; cleared by
    -- the next lease operation that ends an attempt
    orphaned            boolean NOT NULL DEFAULT false,
    merged_into         text,
    outcome             text,
    reason              text,
    delivery_stage      text,
    -- JSON texts, as the outcome had them
    outbound_ids        text,
    enqueued_at         bigint  NOT NULL,
    first_claimed_at    bigint,
    gates_done_at       bigint,
    generation_start_at bigint,
    generation_end_at   bigint,
    first_send_at       bigint,
    first_ack_at        bigint,
    completed_at        bigint,
    tokens              text,
    kind                text,
    trail               text,
    last_error          text,
    -- the live feed's position: the completing transaction's id and a
    -- sequence number (see CompletedAfter)
    completed_xid       bigint,
    completed_seq       bigint,
    created_at          bigint  NOT NULL,
    updated_at          bigint  NOT NULL
);
CREATE SEQUENCE inbound_completed_seq;

-- Claim: the claimable rows are pending and available, or leased with an
-- expired lease.
CREATE INDEX inbound_items_pending ON inbound_items (available_at) WHERE status = 'pending';
CREATE INDEX inbound_items_leased ON inbound_items (lease_until) WHERE status = 'leased';
-- In-flight counts per session, and the live rows of a session.
CREATE INDEX inbound_items_session_live ON inbound_items (session_key, status)
    WHERE status IN ('pending', 'leased');
-- The leases of a process (the liveness reaper).
CREATE INDEX inbound_items_proc ON inbound_items (lease_proc) WHERE status = 'leased';
-- The event center: listings newest first, per session, and the feed.
CREATE INDEX inbound_items_event_time ON inbound_items (event_time DESC, id DESC);
CREATE INDEX inbound_items_session_time ON inbound_items (session_key, event_time DESC, id DESC);
CREATE INDEX inbound_items_completed ON inbound_items (completed_xid, completed_seq)
    WHERE completed_xid IS NOT NULL;
CREATE INDEX inbound_items_completed_at ON inbound_items (completed_at) WHERE status = 'done';

-- One row per session that ever had a queued item: claimers lock the
-- sessions they take items from (FOR UPDATE SKIP LOCKED), so that two
-- processes never both fill a session's last in-flight slot.
CREATE TABLE queue_sessions (
    session_key text COLLATE "C" PRIMARY KEY
);

-- The processes whose leases are live: each holds a dedicated connection,
-- named by its backend's pid and start time. A row whose backend is gone
-- marks a dead process: its leases are freed at once.
CREATE TABLE queue_processes (
    proc_id       text        PRIMARY KEY,
    backend_pid   integer     NOT NULL,
    backend_start timestamptz,
    registered_at bigint      NOT NULL
);

-- Per bot: the last time it was seen online (the replay cutoff).
CREATE TABLE checkpoints (
    bot        text   PRIMARY KEY,
    at         bigint NOT NULL,
    updated_at bigint NOT NULL
);
