-- The store's own bookkeeping beyond persona_migrations (created by the
-- runner): nothing yet. Later migrations each add one area's tables.
SELECT 1;
