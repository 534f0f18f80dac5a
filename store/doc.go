// Package store is persona's embedded persistence: one SQLite file (through
// github.com/mattn/go-sqlite3) that holds everything deciding what the bot
// does next.
//
// # Overview
//
// [Open] returns a [*DB], which owns the file until Close (see "Ownership
// and crash recovery"), and implements the storage ports of the other
// stages:
//
//   - inbound.Queue and inbound.Checkpoints: the durable inbound queue
//     (table inbound_items, read through the view inbound_events; a queue
//     row is keyed by the rowid of the item's transcript row, written in
//     the same transaction, and found by item id through the transcript's
//     id index) and the per-bot online checkpoints (checkpoints);
//   - memory.History: the permanent transcript (message_events);
//   - outbound.Ledger: turn drafts and the delivery ledger (delivery_ledger:
//     a turn's chunk slots, and its draft as slot -1);
//   - gate.Flags: session flags with deadlines (session_flags);
//   - inbound.RecordReader: the records listed with filters and cursors,
//     the completion feed and summaries (for the event center);
//   - schedule.Store: the scheduled messages (schedules).
//
// Besides the ports, [DB.Records], [DB.NewestEventTime] and
// [DB.CountOutcomes] serve tests and the coordinator.
//
// Every timestamp is stored as unix milliseconds in an INTEGER column; times
// read back are in UTC. "Now" comes from Options.Clock, so tests drive
// leases and availability with a clock.Fake.
//
// The schema is created and upgraded by numbered SQL migrations embedded in
// the binary (migrations/NNNN_name.sql), applied in order in one transaction
// when the file is opened; PRAGMA user_version records the version. Opening
// an up-to-date file changes nothing; a file written by a newer build is
// refused with [ErrSchemaTooNew]. Migration 0009 edits table definitions
// in sqlite_schema directly (the procedure SQLite documents for changing
// CHECK constraints, which no stored row depends on, without copying the
// table): its column checks test each allowed value in turn, because
// SQLite evaluates `x IN (a, b, c)` over three or more constants by
// building an in-memory B-tree of the list every time a statement runs,
// which had cost the writer about a fifth of its time. After applying
// migrations the runner increments schema_version, so that every other
// connection reloads the schema.
//
// # Durability
//
// The database runs in WAL mode. With Options.Synchronous = [SyncNormal]
// (the default) a commit is written to the WAL but not fsynced: a process
// crash loses nothing, a power loss or kernel crash may lose the last
// transactions committed before it, and the database is never corrupted.
// [SyncFull] fsyncs the WAL on every commit, so nothing acknowledged is ever
// lost, at the price of one fsync per (group) commit. Checkpoints, which copy
// the WAL back into the database file, run on a connection of their own in
// the background, so a commit never waits for one; under sustained writes the
// writer checkpoints and restarts the WAL itself once it passes 64 MiB, and
// the WAL file is cut back to 64 MiB.
//
// # Ownership and crash recovery
//
// A DB owns its file: Open takes an exclusive lock on a lock file beside it
// (path + "-lock", created if needed, left in place, holding the owner's
// process id) and keeps it until Close. While it is held, an Open of the
// same file, by another process or by this one, under any name (symbolic
// links are resolved), fails with [ErrLocked], naming the holder. The lock
// is flock(2) on Linux, macOS, the BSDs and illumos, and a handle shared
// for reading only on Windows; either way the operating system releases it
// when the owner's process ends, however it ends (a kill, a crash, a power
// loss), so a restarted process opens the file at once. On the platforms
// whose Go syscall package has neither (Solaris, AIX, ...) it holds within
// one process only: run one process per file there.
//
// So when Open has the lock, every lease the file records was granted by a
// DB that is gone, and none of its holders can end it. Open frees them all
// before it builds the claim index: each such queue item is pending and
// claimable at once (its chat's in-flight limit no longer counts it), its
// attempts and claims as they were (a stored claim counted its attempt,
// and the next claim moves the claims count on, so the old lease stays
// dead), with last_error saying that it was freed at Open; the memory
// extraction jobs' leases likewise. Claims held in memory only (see "The
// claim index") never reached the file: their rows are as before the
// claim. A restarted process therefore starts its first turn as soon as it
// has opened its store, instead of waiting for the dead process's leases
// (10 minutes by default) to expire. Until a lease operation settles them,
// Claim reports such items as inbound.Lease.Orphaned: one of them may be
// the message that killed the process, and the pipeline runs them alone. ReleaseExpired remains for the leases
// of a running DB whose holders stopped without ending them.
//
// A plain SQLite connection can read a file that a DB owns (it is an
// ordinary WAL database). Writes from outside the store are not seen by
// the DB's in-memory state (claim index, history cache); the rows' claims
// counts still keep such a write and a lease of the DB from both taking
// effect.
//
// # SQLite in the process
//
// The store uses the SQLite that go-sqlite3 compiles into the binary and
// changes nothing of it for the rest of the process. Importing the package
// runs no code that touches SQLite. The first Open registers one VFS with
// SQLite by name, persona-walbuf (once per process, never as the default);
// the DB's writer connection names it when it opens the file, and no other
// connection uses it unless it names it too. Everything else a DB does to
// SQLite is on its own connections (their pragmas and open flags); opening
// them initializes SQLite, as any program's first connection does. No page
// cache, automatic extension, function, module, collation or default VFS of
// the process is changed or added. TestStoreLeavesEmbedderSQLiteAlone
// builds a program with SQLite connections of its own (internal/embedprobe)
// without the store, with the store imported, and with a store open and at
// work, and requires that its connections see the same SQLite each time,
// but for the one VFS name.
//
// persona-walbuf is the default VFS except that the frames a commit
// appends to the WAL, which SQLite writes as two calls per page, reach the
// file in one call once the commit frame is complete: before SQLite
// publishes the commit to readers, and with a failed write failing the
// commit, so durability and what readers see are unchanged. It is written
// in C (walbuf.c) against declarations of SQLite's interface in
// sqliteapi.h, which TestSQLiteAPIMatchesSQLite compiles against SQLite's
// own header. The package needs cgo: a build without it fails with a
// message that says so.
//
// # Implementing
//
// Use [*DB] as the default for every port, or implement a port yourself and
// prove it with its conformance suite (inbound/queuetest for inbound.Queue).
//
// # The claim index
//
// Claim decides in memory: a DB keeps its live queue items (pending or
// leased) in a claim index (per session a heap in claim order and the
// count of unexpired leases, a heap of sessions by their best item, time
// heaps for delayed items and lease expiries), rebuilt from inbound_items
// at Open and kept in step by the DB's own writes, each applied by its
// write's post-commit hook in commit order. Claim picks there, so its cost
// does not depend on the backlog. No index finds the live rows (keeping
// one cost every item two or three index changes for a read made once per
// start): Open reads them from the queue floor up, a rowid below which no
// row is live (table queue_floor, migration 0010). A new live row below
// it lowers it (a trigger); the timeline flush and Open raise it to the
// lowest live row. It stores the claims of items with a
// priority of at least Limits.HoldBelow in one write; the others are held
// by the index only (inbound.Lease.Held; Lookup and Records show them) and
// reach the row with the lease's first operation, which writes the claim
// (attempts, claims, owner, first claim time) and its own change in one
// statement guarded by the row's claims count. A held claim whose first
// operation ends it (a turn the gates stop, say) thus costs one queue
// write, its completion. ReleaseExpired writes back expired held leases
// and Close the ones still held; a process that dies
// holding one leaves the row as it was before the claim, so the item is
// claimable at once when the file is opened again and that attempt is not
// counted. The pipeline asks for no held claims: it has every claim stored
// before any stage runs, so an attempt that kills the process is counted.
// A lease operation pins its item in the index until its write lands, so
// no claim takes an item whose lease is being written. The table stays the
// truth for everything else: a row that a write finds changed is re-read,
// and ReleaseExpired rebuilds the index (keeping the soft leases). No
// other DB writes the file while this one has it open (see "Ownership and
// crash recovery"); a lease written from outside the store makes the DB's
// own lease operation on that item fail (inbound.ErrLeaseLost), so no
// lease takes effect twice. Enqueue keeps
// the event it stored (in the form decoding its row gives back), so a
// claim hands it out without reading or decoding the row.
//
// # History search
//
// The transcript is indexed for full-text search (FTS4, see
// [DB.SearchHistory]) off the write path: Enqueue, Record and Append store
// the row with its search tokens (tokenized by the caller, outside the
// writer) and only queue it for indexing. A background indexer started by
// Open moves queued rows into the index in batches of up to 512, about a
// second after the writes that queued them, one index segment per chat per
// batch instead of one per message. The index therefore lags the
// transcript by at most one indexer pass, which no reader sees: a history
// search first indexes what is still queued for the sessions it searches
// (while the background indexer runs, a backlog beyond 4,096 rows is left
// partly to it). SQLite's PRAGMA integrity_check compares the FTS4 index
// with the transcript, so while rows wait in that queue it reports
// "malformed inverted index for FTS4 table main.message_search" (so does
// quick_check); that is the lag, not damage, and the check passes once the
// queue is indexed.
// Close stops the indexer first; rows still queued are indexed after the
// next Open. With Options.NoSearchIndexer there is no background indexer
// and a search indexes all its sessions' queued rows itself. With
// Options.DeferSearch (how the pipeline opens its store unless memory is
// on, since nothing else searches) new rows are not even tokenized or
// queued: their rowid range is recorded, a search tokenizes its sessions'
// rows in it first, and a DB opened later with the indexer tokenizes the
// whole range in the background.
//
// # Session history
//
// A session's history is found through a timeline table (session, time,
// rowid) that the store writes in bulk, not through an index SQLite keeps
// up row by row, which wrote one page of its own per message when messages
// spread over many chats. The newest transcript rows (the tail: up to
// 1,024, or 2 s old) are not in it yet; a background flusher moves the
// whole tail in with one sorted write. Every session read covers both in
// one statement, so it sees the same rows as before: [DB.Recent] finds its
// session's tail rows by the rowids the writer listed for it, the other
// reads scan the tail. The tail an earlier DB on the file left is listed
// at Open.
//
// # Concurrency
//
// A DB is safe for concurrent use. All writes go through a single writer
// connection (a *sql.DB limited to one connection, transactions begun
// IMMEDIATE, its statements run on the driver connection directly rather
// than through database/sql) owned by one goroutine that practises group
// commit: operations submitted concurrently share one transaction, each
// still atomic: one that
// fails returns its own error and leaves no trace, and every caller returns
// only after the transaction holding its operation committed. A writer
// that is busy (an operation was waiting, or came within a millisecond of
// a commit of several) with a batch of fewer than 8 first yields its
// thread once (runtime.Gosched), so that goroutines ready to run reach
// their next write and join the batch; it costs nothing when none are, and
// under load it takes the commits per replied message from 2.3 to 0.9.
// With Options.CommitDelay set it then also waits up to that long for more
// (off by default, see the option). Reads use a separate pool of read-only
// connections (Options.ReadConns) and see every write that returned before
// them. An SQLite lock held by a connection from outside the store is
// waited for up to Options.BusyTimeout. Close waits for the batch in progress;
// afterwards every method returns [ErrClosed].
//
// Besides the claim index, a DB keeps in memory the newest transcript
// entries of the sessions [DB.Recent] read lately (up to 512 per session,
// 131,072 in all, ≈ 50–60 MB when full, the least recently read sessions
// dropped first), so that the history read of every turn seldom reaches
// SQL. The cache is filled by Recent's own SQL reads and kept exact by this
// DB's writes, applied after they commit. [DB.RecentView] lends a cached
// window itself (memory.RecentViewer; the pipeline reads its turns'
// history so): a window's arrays are only ever appended to beyond every
// slice lent, or replaced, so a lent window never changes. Like the claim
// index, the cache does not see rows written to the file from outside the
// store, nor rowids renumbered by a VACUUM run from outside: reopen the DB
// after either.
package store
