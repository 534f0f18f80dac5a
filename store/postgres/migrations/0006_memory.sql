-- Long-term memory: the facts and the durable extraction queue. Every
-- timestamp is unix milliseconds (NULL or 0 for none).

-- Long-term facts. scope_key is the owner of the scope: the session for
-- group and private facts, the platform for user facts, '' for global
-- facts. At most one row per (scope, scope_key, subject_user_id, key) is
-- active; a new content for the key supersedes it (version + 1).
-- search_tokens holds the tokens of the content and the key
-- (memory.Tokenize, with repeats), the input of MatchFacts' scoring; a
-- forgotten row keeps none.
CREATE TABLE memory_items (
    id                 bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope              text             NOT NULL CHECK (scope IN ('user', 'group', 'private', 'global')),
    scope_key          text             NOT NULL DEFAULT '',
    subject_user_id    text             NOT NULL DEFAULT '',
    key                text             NOT NULL,
    kind               text             NOT NULL
        CHECK (kind IN ('fact', 'preference', 'relation', 'episode', 'instruction')),
    content            text             NOT NULL,
    evidence           text             NOT NULL DEFAULT '',
    source_message_ids text[]           NOT NULL DEFAULT '{}',
    session_key        text             NOT NULL DEFAULT '',
    chat_kind          text             NOT NULL DEFAULT '',
    platform           text             NOT NULL DEFAULT '',
    event_time         bigint           NOT NULL,
    source_type        text             NOT NULL CHECK (source_type IN ('explicit', 'inferred')),
    confidence         double precision NOT NULL,
    importance         double precision NOT NULL,
    sensitive          boolean          NOT NULL DEFAULT false,
    expires_at         bigint,
    created_at         bigint           NOT NULL,
    updated_at         bigint           NOT NULL,
    last_verified_at   bigint,
    version            integer          NOT NULL DEFAULT 1,
    supersedes_id      bigint           REFERENCES memory_items (id),
    status             text             NOT NULL CHECK (status IN ('active', 'superseded', 'forgotten')),
    search_tokens      text[]           NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX memory_items_active_key ON memory_items (scope, scope_key, subject_user_id, key)
    WHERE status = 'active';
-- The three lookups of CandidateFacts: the facts learned in a session,
-- the global facts, the user facts about the participants. The subject
-- index also serves ForgetUser and Facts, which read every state.
CREATE INDEX memory_items_session ON memory_items (session_key, importance DESC)
    WHERE status = 'active';
CREATE INDEX memory_items_global ON memory_items (platform)
    WHERE status = 'active' AND scope = 'global';
CREATE INDEX memory_items_subject ON memory_items (subject_user_id, platform);

-- The durable extraction queue: one job per message, leased like the
-- inbound queue. claims counts the claims and fences the lease: only the
-- holder of the latest claim may extend, retry or complete the job.
CREATE TABLE memory_jobs (
    id              bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_key     text    NOT NULL UNIQUE,
    session_key     text    NOT NULL,
    platform        text    NOT NULL DEFAULT '',
    subject_user_id text    NOT NULL DEFAULT '',
    status          text    NOT NULL CHECK (status IN ('pending', 'leased', 'done', 'failed', 'cancelled')),
    attempts        integer NOT NULL DEFAULT 0,
    claims          integer NOT NULL DEFAULT 0,
    available_at    bigint  NOT NULL,
    lease_owner     text,
    lease_until     bigint,
    last_error      text,
    created_at      bigint  NOT NULL,
    updated_at      bigint  NOT NULL
);
CREATE INDEX memory_jobs_pending ON memory_jobs (available_at, id) WHERE status = 'pending';
CREATE INDEX memory_jobs_leased ON memory_jobs (lease_until, id) WHERE status = 'leased';
CREATE INDEX memory_jobs_subject ON memory_jobs (platform, subject_user_id)
    WHERE status IN ('pending', 'leased');
