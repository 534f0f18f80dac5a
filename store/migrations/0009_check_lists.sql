-- 0009: CHECK constraints compare with each allowed value instead of
-- testing membership in a list.
--
-- SQLite evaluates `x IN (a, b, c)` over three or more constants by
-- building an in-memory B-tree of the list (an ephemeral table) each time
-- the statement runs; over one or two it compares directly. A column CHECK
-- runs on every insert, and on every update that sets its column, so every
-- transcript insert, queue insert, queue completion and ledger write
-- opened, filled and dropped such a tree: about a fifth of the writer's
-- time per queue item. The checks below accept exactly the values the old
-- ones accepted (NULL included), written as comparisons.
--
-- SQLite has no ALTER TABLE for an unnamed CHECK, and copying the
-- transcript into a new table would make this step as slow as the
-- transcript is long. A CHECK constraint is not part of the file format
-- (it is only evaluated when a row is written), so the definitions are
-- edited where SQLite keeps them, the procedure SQLite documents for
-- removing CHECK constraints: with writable_schema on, the text of each
-- constraint is replaced in sqlite_schema; writable_schema=RESET reloads
-- the schema of this connection, and the migration runner increments
-- schema_version so that every other connection reloads it too. As the new
-- checks are equivalent to the old ones, no stored row can violate them. A
-- definition whose text differs (none is written so) keeps its old check.
PRAGMA writable_schema = ON;

UPDATE sqlite_schema SET sql = replace(sql,
    'CHECK (direction IN (''in'', ''out'', ''notice''))',
    'CHECK (direction = ''in'' OR direction = ''out'' OR direction = ''notice'')')
WHERE type = 'table' AND name = 'message_events';

UPDATE sqlite_schema SET sql = replace(sql,
    'CHECK (status IN (''pending'', ''leased'', ''done''))',
    'CHECK (status = ''pending'' OR status = ''leased'' OR status = ''done'')')
WHERE type = 'table' AND name = 'inbound_items';

UPDATE sqlite_schema SET sql = replace(sql,
    'CHECK (state IN (''draft'', ''intent'', ''sent''))',
    'CHECK (state = ''draft'' OR state = ''intent'' OR state = ''sent'')')
WHERE type = 'table' AND name = 'delivery_ledger';

UPDATE sqlite_schema SET sql = replace(replace(replace(sql,
    'CHECK (scope IN (''user'', ''group'', ''private'', ''global''))',
    'CHECK (scope = ''user'' OR scope = ''group'' OR scope = ''private'' OR scope = ''global'')'),
    'CHECK (kind IN (''fact'', ''preference'', ''relation'', ''episode'', ''instruction''))',
    'CHECK (kind = ''fact'' OR kind = ''preference'' OR kind = ''relation'' OR kind = ''episode'' OR kind = ''instruction'')'),
    'CHECK (status IN (''active'', ''superseded'', ''forgotten''))',
    'CHECK (status = ''active'' OR status = ''superseded'' OR status = ''forgotten'')')
WHERE type = 'table' AND name = 'memory_items';

UPDATE sqlite_schema SET sql = replace(sql,
    'CHECK (status IN (''pending'', ''leased'', ''done'', ''failed'', ''cancelled''))',
    'CHECK (status = ''pending'' OR status = ''leased'' OR status = ''done'' OR status = ''failed'' OR status = ''cancelled'')')
WHERE type = 'table' AND name = 'memory_jobs';

PRAGMA writable_schema = RESET;
