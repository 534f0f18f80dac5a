-- 0011: the operator surface.
--
-- trail keeps the path a message took through the stages (inbound.Trail as
-- JSON) beside its outcome.
--
-- completed_seq numbers the records in the order they became done, so the
-- event center's live feed can resume after a cursor without missing a
-- record completed in the same millisecond as another. A completion takes
-- the next number from the index below (max + 1); the single writer makes
-- that order total.
ALTER TABLE inbound_items ADD COLUMN trail TEXT;
ALTER TABLE inbound_items ADD COLUMN completed_seq INTEGER;

WITH ordered AS (
    SELECT rid, row_number() OVER (ORDER BY completed_at, id) AS n
    FROM inbound_items WHERE status = 'done'
)
UPDATE inbound_items SET completed_seq = ordered.n FROM ordered WHERE ordered.rid = inbound_items.rid;

CREATE INDEX inbound_items_completed ON inbound_items (completed_seq) WHERE completed_seq IS NOT NULL;

-- schedules are the scheduled messages: each fires a scheduled turn in its
-- session at its due times. next_due is the next time it fires; a firing
-- enqueues an item whose id is derived from the schedule and the due time,
-- so a crash between the enqueue and the advance cannot fire it twice.
CREATE TABLE schedules (
    id          TEXT    NOT NULL PRIMARY KEY,
    session_key TEXT    NOT NULL,
    target      TEXT    NOT NULL, -- JSON: platform, bot id and chat the turn speaks in
    spec        TEXT    NOT NULL, -- "every 90m" or a five-field cron line
    zone        TEXT    NOT NULL, -- IANA time zone the spec is read in
    prompt      TEXT    NOT NULL, -- what the turn is asked to say
    next_due    INTEGER NOT NULL, -- unix ms
    last_due    INTEGER,          -- unix ms of the last due time fired
    enabled     INTEGER NOT NULL DEFAULT 1,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE INDEX schedules_due ON schedules (next_due) WHERE enabled = 1;
