package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// Deferred tokenizing (migrations/0006_search_deferred.sql).
//
// A DB opened with Options.NoSearchIndexer writes new history rows without
// search tokens: no tokenization on the caller's side and no search-queue
// row in the writer's transaction (a B-tree insert in a page of its own per
// message). The rows it writes lie in a rowid range recorded in
// search_untokenized, open (to_rowid NULL) while such a DB writes. Rows
// that already exist keep being tokenized when they are rewritten, so a
// row that is in the index stays there with its new text.
//
// Nothing is lost for search: SearchHistory first tokenizes the untokenized
// rows of the sessions it searches (tokenizeSessions), which queues them
// for indexing like any new row, and then indexes its sessions' queued rows
// as always. A DB opened with the indexer closes the open range and
// tokenizes the recorded ranges in the background, in rowid order, before
// its first indexing pass (tokenizeBacklog).

// openUntokenized records, at Open, where untokenized rows begin (a DB
// without the indexer) or where they end (a DB with it).
func (d *DB) openUntokenized(ctx context.Context) error {
	q := `UPDATE search_untokenized SET to_rowid = (SELECT coalesce(max(rowid), 0) + 1 FROM message_events)
WHERE to_rowid IS NULL`
	if d.deferTokens {
		q = `INSERT INTO search_untokenized (from_rowid, to_rowid)
SELECT (SELECT coalesce(max(rowid), 0) + 1 FROM message_events), NULL
WHERE NOT EXISTS (SELECT 1 FROM search_untokenized WHERE to_rowid IS NULL)`
	}
	var any bool
	err := d.write(ctx, func(tx wtx) error {
		if _, err := tx.exec(q); err != nil {
			return err
		}
		if _, err := tx.exec(`DELETE FROM search_untokenized WHERE to_rowid <= from_rowid`); err != nil {
			return err
		}
		return tx.queryRow(`SELECT EXISTS (SELECT 1 FROM search_untokenized)`).Scan(&any)
	})
	if err != nil {
		return fmt.Errorf("untokenized history ranges: %w", err)
	}
	d.untokenized.Store(any)
	return nil
}

// untokenizedRow is a history row waiting for its search tokens.
type untokenizedRow struct {
	rowid                 int64
	text, senderName, dir string
}

// tokenize writes the search tokens of rows (which queues them for
// indexing) in one write operation; rows without tokens (no text) stay as
// they are.
func (d *DB) tokenize(ctx context.Context, rows []untokenizedRow, after func(tx wtx) error) error {
	tokens := make([]string, len(rows))
	for i, r := range rows {
		tokens[i] = rowTokens(r.text, r.senderName, r.dir)
	}
	return d.write(ctx, func(tx wtx) error {
		for i, r := range rows {
			if tokens[i] == "" {
				continue
			}
			if _, err := tx.exec(`UPDATE message_events SET search_tokens = ?2 WHERE rowid = ?1 AND search_tokens = ''`,
				r.rowid, tokens[i]); err != nil {
				return err
			}
		}
		if after != nil {
			return after(tx)
		}
		return nil
	})
}

// scanUntokenized reads rows selected as rowid, text, sender_name,
// direction.
func scanUntokenized(rows *sql.Rows) ([]untokenizedRow, error) {
	defer func() { _ = rows.Close() }()
	var out []untokenizedRow
	for rows.Next() {
		var r untokenizedRow
		if err := rows.Scan(&r.rowid, &r.text, &r.senderName, &r.dir); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// tokenizeSessions tokenizes the untokenized rows of the sessions before a
// history search.
func (d *DB) tokenizeSessions(ctx context.Context, sessions []string) error {
	if !d.untokenized.Load() {
		return nil
	}
	js, err := json.Marshal(sessions)
	if err != nil {
		return err
	}
	// The sessions' rows: through their timeline, and in the timeline's
	// tail (see timeline.go).
	rs, err := d.rdb.QueryContext(ctx, `SELECT m.rowid, m.text, m.sender_name, m.direction
FROM message_events m JOIN search_untokenized u
    ON m.rowid >= u.from_rowid AND (u.to_rowid IS NULL OR m.rowid < u.to_rowid)
WHERE m.rowid IN (
        SELECT t.rid FROM json_each(?1) s CROSS JOIN message_timeline t ON t.session_key = s.value
        UNION ALL
        SELECT rowid FROM message_events WHERE `+sqlTailFrom+` AND session_key IN (SELECT value FROM json_each(?1)))
    AND m.search_tokens = '' AND m.direction != 'notice'`,
		string(js))
	if err != nil {
		return err
	}
	rows, err := scanUntokenized(rs)
	if err != nil || len(rows) == 0 {
		return err
	}
	return d.tokenize(ctx, rows, nil)
}

// tokenizeBacklog tokenizes the recorded untokenized ranges, oldest first,
// in batches of searchIndexBatch rows, dropping each range once done (the
// background indexer runs it before indexing). A DB that defers tokenizing
// itself has nothing to do here: it has no background indexer.
func (d *DB) tokenizeBacklog(ctx context.Context) error {
	for d.untokenized.Load() && ctx.Err() == nil {
		var from int64
		var to sql.NullInt64
		err := d.rdb.QueryRowContext(ctx, `SELECT from_rowid, to_rowid FROM search_untokenized
WHERE to_rowid IS NOT NULL ORDER BY from_rowid LIMIT 1`).Scan(&from, &to)
		if errors.Is(err, sql.ErrNoRows) {
			d.untokenized.Store(false)
			return nil
		}
		if err != nil {
			return err
		}
		rs, err := d.rdb.QueryContext(ctx, `SELECT rowid, text, sender_name, direction FROM message_events
WHERE rowid >= ?1 AND rowid < ?2 AND search_tokens = '' AND direction != 'notice' ORDER BY rowid LIMIT ?3`,
			from, to.Int64, searchIndexBatch)
		if err != nil {
			return err
		}
		rows, err := scanUntokenized(rs)
		if err != nil {
			return err
		}
		next := to.Int64 // done with the range
		if len(rows) == searchIndexBatch {
			next = rows[len(rows)-1].rowid + 1
		}
		err = d.tokenize(ctx, rows, func(tx wtx) error {
			if next >= to.Int64 {
				_, err := tx.exec(`DELETE FROM search_untokenized WHERE from_rowid = ?1`, from)
				return err
			}
			_, err := tx.exec(`UPDATE search_untokenized SET from_rowid = ?2 WHERE from_rowid = ?1`, from, next)
			return err
		})
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}
