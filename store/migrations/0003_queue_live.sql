-- 0003: the claim decision moves into the store's in-memory claim index
-- (store/sched.go), rebuilt from this table at open. The queue indexes the
-- claim statement walked are no longer read; every one of them was
-- rewritten on each state change of an item, which made them the largest
-- part of a queue item's write cost. What stays:
--   inbound_items_live: the live rows (pending or leased), read when the
--   index is rebuilt and by ReleaseExpired;
-- The event center's per-session listing finds its rows through the
-- transcript's (session_key, event_time) index instead of one of its own.
DROP INDEX inbound_items_claim;
DROP INDEX inbound_items_lease;
DROP INDEX inbound_items_order;
DROP INDEX inbound_items_session_status;
CREATE INDEX inbound_items_live ON inbound_items (status) WHERE status IN ('pending', 'leased');

-- Nothing reads the transcript by sender through this index (forget-me and
-- memory search filter rows found by session or full-text search), and each
-- message paid a random page write for it.
DROP INDEX message_events_sender_time;
