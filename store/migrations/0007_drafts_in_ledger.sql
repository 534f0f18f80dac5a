-- 0007: a turn's draft is kept in the delivery ledger, next to its slots.
--
-- A reply wrote its draft into turn_drafts (a rowid table plus the index of
-- its TEXT primary key) and its first intent into delivery_ledger, keyed by
-- the same turn id: two B-trees ordered by turn id, so two leaf pages in
-- different places, and a third one appended to, for every reply. The
-- draft is now the ledger row of slot -1 (state 'draft', the body in the
-- draft column), in the same leaf as the turn's slots.
CREATE TABLE delivery_ledger_v7 (
    turn_id              TEXT    NOT NULL,
    slot                 INTEGER NOT NULL, -- -1: the turn's draft; 0, 1, …: its chunks
    fingerprint          TEXT    NOT NULL,
    state                TEXT    NOT NULL CHECK (state IN ('draft', 'intent', 'sent')),
    platform_message_ids TEXT,
    sent_at              INTEGER,
    draft                TEXT,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    PRIMARY KEY (turn_id, slot)
) WITHOUT ROWID;

INSERT INTO delivery_ledger_v7 (turn_id, slot, fingerprint, state, platform_message_ids, sent_at, created_at, updated_at)
SELECT turn_id, slot, fingerprint, state, platform_message_ids, sent_at, created_at, updated_at FROM delivery_ledger;
INSERT INTO delivery_ledger_v7 (turn_id, slot, fingerprint, state, draft, created_at, updated_at)
SELECT turn_id, -1, '', 'draft', draft, created_at, created_at FROM turn_drafts;

DROP TABLE delivery_ledger;
DROP TABLE turn_drafts;
ALTER TABLE delivery_ledger_v7 RENAME TO delivery_ledger;
