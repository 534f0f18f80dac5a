-- Memory search over the transcript, and summary checkpoints.
--
-- message_events.search_tokens holds a row's search tokens, made in Go by
-- the module's tokenizer (Chinese, Japanese and Korean as character
-- bigrams, other scripts as lower-cased words) and joined by single spaces;
-- every writer fills it when it writes the row. PostgreSQL's text search
-- parser is not used: it does not split Chinese, and its idea of a word
-- depends on the locale. The tokens are indexed as an array instead, so a
-- query token matches exactly the tokens that were stored. Queries must
-- use the same expression to use the index:
--     string_to_array(search_tokens, ' ') && ARRAY[...]
CREATE INDEX message_events_search ON message_events USING gin (string_to_array(search_tokens, ' '));

-- Summary checkpoints: epoch n of a session folds the messages after
-- (from_time, from_key) up to (watermark_time, watermark_key) on top of
-- epoch n-1. Times are unix milliseconds; a zero from_time with an empty
-- from_key is the start of the history.
CREATE TABLE memory_summaries (
    session_key    text    NOT NULL,
    epoch          integer NOT NULL CHECK (epoch >= 1),
    text           text    NOT NULL,
    from_time      bigint  NOT NULL DEFAULT 0,
    from_key       text    NOT NULL DEFAULT '',
    watermark_time bigint  NOT NULL,
    watermark_key  text    NOT NULL,
    message_count  integer NOT NULL,
    version        integer NOT NULL,
    input_hash     text    NOT NULL,
    created_at     bigint  NOT NULL,
    updated_at     bigint  NOT NULL,
    PRIMARY KEY (session_key, epoch)
);
