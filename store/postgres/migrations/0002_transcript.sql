-- The permanent transcript: every message in, out and every notice, one
-- row each, keyed by the canonical event key. The queue (inbound_items)
-- refers to it by id; memory search reads search_tokens.
CREATE TABLE message_events (
    id            text    PRIMARY KEY,
    seq           bigint  GENERATED ALWAYS AS IDENTITY UNIQUE,
    session_key   text    NOT NULL,
    platform      text    NOT NULL DEFAULT '',
    bot_id        text    NOT NULL DEFAULT '',
    chat_kind     text    NOT NULL DEFAULT '',
    chat_id       text    NOT NULL DEFAULT '',
    message_id    text    NOT NULL DEFAULT '',
    sender_id     text    NOT NULL DEFAULT '',
    sender_name   text    NOT NULL DEFAULT '',
    event_time    bigint  NOT NULL,
    text          text    NOT NULL DEFAULT '',
    payload       text    NOT NULL,
    direction     text    NOT NULL CHECK (direction IN ('in', 'out', 'notice')),
    recalled_at   bigint,
    created_at    bigint  NOT NULL,
    -- memory search: the message's tokens (memory.Tokenize), space-joined
    search_tokens text    NOT NULL DEFAULT ''
);
CREATE INDEX message_events_session_time ON message_events (session_key, event_time, seq);

-- Users who asked to be forgotten with their history hidden from memory
-- search (memory.ForgetOptions.ExcludeHistory): written by ForgetUser,
-- read by SearchHistory.
CREATE TABLE memory_hidden_senders (
    platform  text   NOT NULL,
    user_id   text   NOT NULL,
    hidden_at bigint NOT NULL,
    PRIMARY KEY (platform, user_id)
);
