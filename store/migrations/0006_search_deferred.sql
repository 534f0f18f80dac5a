-- 0006: a store that never searches history leaves its rows untokenized.
--
-- A store opened without the background search indexer (the pipeline
-- without memory: nothing searches history) used to tokenize every
-- transcript row and queue it in message_search_queue all the same: a
-- B-tree insert in a page of its own (the queue is ordered by session) for
-- every message, and queue rows that nothing would ever drain. Such a store
-- now writes its rows with empty search tokens, which keeps the invariant
-- of migration 0004 (an untokenized row is neither indexed nor queued),
-- and records the rowid range it wrote them in here. A history search
-- tokenizes the rows of its sessions in these ranges first, and a store
-- opened with the indexer closes the open range and tokenizes the ranges
-- in the background, so every row becomes searchable once something
-- searches.
CREATE TABLE search_untokenized (
    from_rowid INTEGER PRIMARY KEY, -- first message_events rowid of the range
    to_rowid   INTEGER              -- end of the range (exclusive); NULL while a store still writes into it
);
