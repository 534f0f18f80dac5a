package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// History search indexing runs off the write path (see
// migrations/0004_search_async.sql). A transcript write stores the row with
// its search tokens (tokenized by the caller, outside the writer) and the
// insert trigger queues it in message_search_queue instead of indexing it.
// The search indexer moves queued rows into the FTS4 index in batches
// (indexPending), one write operation per batch; history searches first
// index what is still queued for the sessions they search
// (catchUpSearchIndex), so the lag is never visible to them.
//
// What a batch saves depends on how it spreads over sessions. FTS4 buffers
// the terms of the documents one statement inserts and writes them out as
// one new index segment, but it must write them out at the end of every
// statement and whenever the next document has another language id
// (search_sid, one per session) or a lower docid. indexPending therefore
// inserts a whole batch with one INSERT ... SELECT in (search_sid, docid)
// order, the queue's key order: a batch costs one segment per session
// instead of one per message. The background indexer lets the queue fill
// for searchIndexDelay after a write so that a busy session's messages
// share a segment.

const (
	// searchIndexBatch is the number of rows one indexer pass indexes in
	// one write operation.
	searchIndexBatch = 512
	// searchCatchUpBatches bounds the passes a history search runs before
	// it searches: beyond that it searches what is indexed.
	searchCatchUpBatches = 8
	// searchIndexDelay is how long the background indexer lets the queue
	// fill after a kick before it indexes it. Searches never wait for it:
	// they index their sessions' queued rows themselves.
	searchIndexDelay = time.Second
	// searchIndexPoll is how often the background indexer looks for queued
	// rows without a kick (rows written by another process, a pass that
	// failed).
	searchIndexPoll = 10 * time.Second
)

// searchIndexer is the background goroutine that indexes queued history
// rows.
type searchIndexer struct {
	background
	kick chan struct{}
}

// startSearchIndexer starts the background indexer (unless disabled, for
// tests and benchmarks). A first pass picks up rows left queued by the
// previous run.
func (d *DB) startSearchIndexer(disabled bool) {
	d.ix.kick = make(chan struct{}, 1)
	if !disabled {
		d.ix.kick <- struct{}{}
	}
	d.ix.start(disabled, d.searchIndexLoop)
}

// stopSearchIndexer stops the background indexer and waits for it: a pass
// in progress ends with its write operation committed or not started. Later
// calls do nothing.
func (d *DB) stopSearchIndexer() { d.ix.stop() }

// kickSearchIndex wakes the background indexer after a write that queued a
// row. It never blocks.
func (d *DB) kickSearchIndex() {
	select {
	case d.ix.kick <- struct{}{}:
	default:
	}
}

func (d *DB) searchIndexLoop(ctx context.Context) {
	poll := time.NewTicker(searchIndexPoll)
	defer poll.Stop()
	delay := time.NewTimer(searchIndexDelay)
	delay.Stop()
	for {
		select {
		case <-d.ix.kick:
			delay.Reset(searchIndexDelay)
			select {
			case <-delay.C:
			case <-ctx.Done():
				return
			}
		case <-poll.C:
		case <-ctx.Done():
			return
		}
		// Rows a DB without search left untokenized (search_deferred.go)
		// are tokenized, which queues them, before they are indexed.
		if err := d.tokenizeBacklog(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("store: tokenizing untokenized history failed", "err", err)
		}
		for {
			n, err := d.indexPending(ctx, nil, searchIndexBatch)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Warn("store: search indexing failed", "err", err)
				}
				break
			}
			if n < searchIndexBatch {
				break
			}
		}
	}
}

// A batch is the first ?1 queue entries in key order, of every partition
// or of the partitions in the JSON array ?2. The same subquery selects them
// for both statements of a pass; nothing else writes in between.
const (
	sqlQueueBatch   = `SELECT search_sid, docid FROM message_search_queue ORDER BY search_sid, docid LIMIT ?1`
	sqlQueueBatchIn = `SELECT search_sid, docid FROM message_search_queue
WHERE search_sid IN (SELECT value FROM json_each(?2)) ORDER BY search_sid, docid LIMIT ?1`
)

// sqlIndexBatch inserts a batch into the index, in (search_sid, docid)
// order: one index segment per partition (see above).
func sqlIndexBatch(batch string) string {
	return `INSERT INTO message_search (docid, search_tokens, search_sid)
SELECT m.rowid, m.search_tokens, m.search_sid FROM (` + batch + `) q
JOIN message_events m ON m.rowid = q.docid
WHERE m.search_tokens != '' ORDER BY q.search_sid, q.docid`
}

// sqlUnqueueBatch removes a batch from the queue.
func sqlUnqueueBatch(batch string) string {
	return `DELETE FROM message_search_queue WHERE (search_sid, docid) IN (` + batch + `)`
}

var (
	sqlIndexAll    = sqlIndexBatch(sqlQueueBatch)
	sqlUnqueueAll  = sqlUnqueueBatch(sqlQueueBatch)
	sqlIndexSome   = sqlIndexBatch(sqlQueueBatchIn)
	sqlUnqueueSome = sqlUnqueueBatch(sqlQueueBatchIn)
	sqlQueuedSome  = `SELECT EXISTS (SELECT 1 FROM message_search_queue WHERE search_sid IN (SELECT value FROM json_each(?1)))`
)

// indexPending moves up to limit queued history rows into the search
// index, of the given partitions (search_sid) or, for nil, of all, in one
// write operation. It returns the number of rows indexed; fewer than limit
// means nothing of those partitions is left queued.
func (d *DB) indexPending(ctx context.Context, sids []int64, limit int) (int, error) {
	index, unqueue := sqlIndexAll, sqlUnqueueAll
	args := []any{limit}
	if sids != nil {
		j, err := json.Marshal(sids)
		if err != nil {
			return 0, fmt.Errorf("store: search index: %w", err)
		}
		index, unqueue = sqlIndexSome, sqlUnqueueSome
		args = append(args, string(j))
	}
	var n int
	err := d.write(ctx, func(tx wtx) error {
		n = 0
		if _, err := tx.exec(index, args...); err != nil {
			return err
		}
		res, err := tx.exec(unqueue, args...)
		if err != nil {
			return err
		}
		n = int(affected(res))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: search index: %w", err)
	}
	return n, nil
}

// catchUpSearchIndex indexes the history rows queued for the sessions'
// partitions before a search, in at most searchCatchUpBatches passes while
// the background indexer runs (a longer backlog is left to it and the
// search sees what is indexed), completely when it is off. When nothing is queued for them it only reads. Only the
// end of ctx is an error: a search still runs when indexing failed.
func (d *DB) catchUpSearchIndex(ctx context.Context, sessions []string) error {
	if err := d.tokenizeSessions(ctx, sessions); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.log.Warn("store: tokenizing untokenized history failed; searching what is indexed", "err", err)
	}
	sids := make([]int64, 0, len(sessions))
	for _, s := range sessions {
		sids = append(sids, searchSID(s))
	}
	slices.Sort(sids)
	sids = slices.Compact(sids)
	j, err := json.Marshal(sids)
	if err != nil {
		return err
	}
	var queued bool
	if err := d.rdb.QueryRowContext(ctx, sqlQueuedSome, string(j)).Scan(&queued); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.log.Warn("store: search catch-up failed; searching what is indexed", "err", err)
		return nil
	}
	if !queued {
		return nil
	}
	// With the background indexer off nothing else indexes these rows:
	// catch up completely.
	batches := searchCatchUpBatches
	if !d.ix.running() {
		batches = math.MaxInt
	}
	for range batches {
		n, err := d.indexPending(ctx, sids, searchIndexBatch)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			d.log.Warn("store: search catch-up failed; searching what is indexed", "err", err)
			return nil
		}
		if n < searchIndexBatch {
			return nil
		}
	}
	d.log.Debug("store: search index backlog left to the background indexer",
		"rows_indexed", searchCatchUpBatches*searchIndexBatch, "sessions", len(sessions))
	return nil
}
