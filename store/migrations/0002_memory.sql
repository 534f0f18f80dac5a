-- 0002: memory: full-text search over history, summary
-- checkpoints, long-term facts and the extraction queue. Every timestamp is
-- unix milliseconds.
--
-- Search uses FTS4 (built into the driver; FTS5 is not). The text is
-- tokenized in Go (memory.IndexText: CJK runs as overlapping bigrams, other
-- words lower-cased) and stored space-joined in a search_tokens column;
-- FTS4's "simple" tokenizer reads it back unchanged. The FTS tables are
-- external-content tables over those columns, kept in step by triggers, so
-- the tokens are stored once.

-- History search. search_sid partitions the index per session (FTS4
-- languageid): a search within a chat reads only that chat's doclists,
-- whatever the size of the whole transcript. It is a hash of the session
-- key, so two sessions may share a partition; searches filter on
-- session_key as well.
ALTER TABLE message_events ADD COLUMN search_tokens TEXT NOT NULL DEFAULT '';
ALTER TABLE message_events ADD COLUMN search_sid INTEGER NOT NULL DEFAULT 0;

CREATE VIRTUAL TABLE message_search USING fts4(
    search_tokens, content="message_events", languageid="search_sid"
);

-- The rowid of message_events is not an alias of its key, so a VACUUM may
-- renumber it: rebuild the index afterwards (store.DB.RebuildSearchIndex).
-- Only a change of search_tokens touches the index; recall marks and other
-- updates do not.
CREATE TRIGGER message_search_bu BEFORE UPDATE OF search_tokens, search_sid ON message_events
WHEN old.search_tokens IS NOT new.search_tokens OR old.search_sid IS NOT new.search_sid BEGIN
    DELETE FROM message_search WHERE docid = old.rowid;
END;
CREATE TRIGGER message_search_bd BEFORE DELETE ON message_events BEGIN
    DELETE FROM message_search WHERE docid = old.rowid;
END;
CREATE TRIGGER message_search_au AFTER UPDATE OF search_tokens, search_sid ON message_events
WHEN old.search_tokens IS NOT new.search_tokens OR old.search_sid IS NOT new.search_sid BEGIN
    INSERT INTO message_search (docid, search_tokens, search_sid) VALUES (new.rowid, new.search_tokens, new.search_sid);
END;
CREATE TRIGGER message_search_ai AFTER INSERT ON message_events BEGIN
    INSERT INTO message_search (docid, search_tokens, search_sid) VALUES (new.rowid, new.search_tokens, new.search_sid);
END;

-- Users who asked to be forgotten with their history hidden from memory
-- search.
CREATE TABLE memory_hidden_senders (
    platform   TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    hidden_at  INTEGER NOT NULL,
    PRIMARY KEY (platform, user_id)
) WITHOUT ROWID;

-- Summary checkpoints: epoch n of a session folds the messages in
-- (from, watermark] on top of epoch n-1. The newest epoch is the current
-- checkpoint.
CREATE TABLE summaries (
    session_key    TEXT    NOT NULL,
    epoch          INTEGER NOT NULL,
    text           TEXT    NOT NULL,
    from_time      INTEGER NOT NULL,
    from_key       TEXT    NOT NULL,
    watermark_time INTEGER NOT NULL,
    watermark_key  TEXT    NOT NULL,
    message_count  INTEGER NOT NULL,
    version        INTEGER NOT NULL,
    input_hash     TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (session_key, epoch)
) WITHOUT ROWID;

-- Long-term facts. scope_key is the owner of the scope:
-- the session for group and private facts, the platform for user facts, ''
-- for global facts. One active row per (scope, scope_key, subject, key).
CREATE TABLE memory_items (
    id                 INTEGER PRIMARY KEY,
    scope              TEXT    NOT NULL CHECK (scope IN ('user', 'group', 'private', 'global')),
    scope_key          TEXT    NOT NULL DEFAULT '',
    subject_user_id    TEXT    NOT NULL DEFAULT '',
    key                TEXT    NOT NULL,
    kind               TEXT    NOT NULL CHECK (kind IN ('fact', 'preference', 'relation', 'episode', 'instruction')),
    content            TEXT    NOT NULL,
    evidence           TEXT    NOT NULL DEFAULT '',
    source_message_ids TEXT    NOT NULL DEFAULT '[]',
    session_key        TEXT    NOT NULL DEFAULT '',
    chat_kind          TEXT    NOT NULL DEFAULT '',
    platform           TEXT    NOT NULL DEFAULT '',
    event_time         INTEGER NOT NULL,
    source_type        TEXT    NOT NULL CHECK (source_type IN ('explicit', 'inferred')),
    confidence         REAL    NOT NULL,
    importance         REAL    NOT NULL,
    sensitive          INTEGER NOT NULL DEFAULT 0,
    expires_at         INTEGER,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    last_verified_at   INTEGER,
    version            INTEGER NOT NULL DEFAULT 1,
    supersedes_id      INTEGER REFERENCES memory_items (id),
    status             TEXT    NOT NULL CHECK (status IN ('active', 'superseded', 'forgotten')),
    search_tokens      TEXT    NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX memory_items_active_key ON memory_items (scope, scope_key, subject_user_id, key)
    WHERE status = 'active';
CREATE INDEX memory_items_session ON memory_items (session_key, importance DESC)
    WHERE status = 'active';
CREATE INDEX memory_items_subject ON memory_items (subject_user_id, platform)
    WHERE status = 'active';
CREATE INDEX memory_items_global ON memory_items (scope)
    WHERE status = 'active' AND scope = 'global';

CREATE VIRTUAL TABLE memory_item_search USING fts4(search_tokens, content="memory_items");
CREATE TRIGGER memory_item_search_bu BEFORE UPDATE OF search_tokens ON memory_items
WHEN old.search_tokens IS NOT new.search_tokens BEGIN
    DELETE FROM memory_item_search WHERE docid = old.id;
END;
CREATE TRIGGER memory_item_search_bd BEFORE DELETE ON memory_items BEGIN
    DELETE FROM memory_item_search WHERE docid = old.id;
END;
CREATE TRIGGER memory_item_search_au AFTER UPDATE OF search_tokens ON memory_items
WHEN old.search_tokens IS NOT new.search_tokens BEGIN
    INSERT INTO memory_item_search (docid, search_tokens) VALUES (new.id, new.search_tokens);
END;
CREATE TRIGGER memory_item_search_ai AFTER INSERT ON memory_items BEGIN
    INSERT INTO memory_item_search (docid, search_tokens) VALUES (new.id, new.search_tokens);
END;

-- The durable extraction queue: one job per message, leased
-- like inbound_items; claims fences the lease.
CREATE TABLE memory_jobs (
    id              INTEGER PRIMARY KEY,
    message_key     TEXT    NOT NULL UNIQUE,
    session_key     TEXT    NOT NULL,
    platform        TEXT    NOT NULL DEFAULT '',
    subject_user_id TEXT    NOT NULL DEFAULT '',
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'leased', 'done', 'failed', 'cancelled')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    claims          INTEGER NOT NULL DEFAULT 0,
    available_at    INTEGER NOT NULL,
    lease_owner     TEXT,
    lease_until     INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX memory_jobs_pending ON memory_jobs (available_at, id) WHERE status = 'pending';
CREATE INDEX memory_jobs_leased ON memory_jobs (lease_until, id) WHERE status = 'leased';
CREATE INDEX memory_jobs_subject ON memory_jobs (platform, subject_user_id)
    WHERE status IN ('pending', 'leased');
