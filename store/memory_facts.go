package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/memory"
)

// The ports of package memory that *DB implements.
var _ memory.Store = (*DB)(nil)

// defaultCandidates bounds CandidateFacts when the filter sets no limit.
const defaultCandidates = 200

const factCols = `id, scope, subject_user_id, key, kind, content, evidence, source_message_ids, session_key,
    chat_kind, platform, event_time, source_type, confidence, importance, sensitive, expires_at, created_at,
    updated_at, last_verified_at, version, supersedes_id, status`

func scanFact(sc interface{ Scan(...any) error }) (memory.Fact, error) {
	var (
		f                               memory.Fact
		scope, kind, st, status, srcIDs string
		et, created, updated            int64
		expires, verified, supersedes   sql.NullInt64
	)
	err := sc.Scan(&f.ID, &scope, &f.SubjectUserID, &f.Key, &kind, &f.Content, &f.Evidence, &srcIDs, &f.SessionKey,
		&f.ChatKind, &f.Platform, &et, &st, &f.Confidence, &f.Importance, &f.Sensitive, &expires, &created,
		&updated, &verified, &f.Version, &supersedes, &status)
	if err != nil {
		return f, err
	}
	f.Scope, f.Kind, f.SourceType, f.Status = memory.Scope(scope), memory.Kind(kind), memory.SourceType(st), memory.Status(status)
	f.EventTime, f.CreatedAt, f.UpdatedAt = fromMs(et), fromMs(created), fromMs(updated)
	f.ExpiresAt, f.LastVerifiedAt = fromNullMs(expires), fromNullMs(verified)
	f.SupersedesID = supersedes.Int64
	if srcIDs != "" {
		if err := json.Unmarshal([]byte(srcIDs), &f.SourceMessageIDs); err != nil {
			return f, fmt.Errorf("fact %d: source ids: %w", f.ID, err)
		}
	}
	return f, nil
}

// sqlCandidateFacts is the structured filter as a union of three indexed
// lookups: the facts learned in this session, the global facts, and the
// user facts about the participants.
const sqlCandidateFacts = `
SELECT ` + factCols + ` FROM memory_items WHERE id IN (
    SELECT id FROM memory_items INDEXED BY memory_items_session
        WHERE status = 'active' AND session_key = ?2
    UNION
    SELECT id FROM memory_items INDEXED BY memory_items_global
        WHERE status = 'active' AND scope = 'global' AND sensitive = 0 AND (platform = ?3 OR ?5)
    UNION
    SELECT id FROM memory_items INDEXED BY memory_items_subject
        WHERE status = 'active' AND scope = 'user' AND subject_user_id IN (SELECT value FROM json_each(?4))
            AND sensitive = 0 AND (platform = ?3 OR ?5) AND (chat_kind = 'private' OR ?6)
)
AND (expires_at IS NULL OR expires_at > ?1)
AND (scope <> 'user' OR session_key <> ?2 OR subject_user_id IN (SELECT value FROM json_each(?4)))
ORDER BY importance DESC, updated_at DESC, id
LIMIT ?7`

// CandidateFacts implements memory.FactStore (recall's structured
// filter): active, unexpired facts of this chat (group and private scope),
// global facts, and
// user-scoped facts about the participants learned in this chat or, within
// the same platform, in a private chat; f.CrossGroup admits user facts
// learned in other groups, f.CrossChannel facts learned on other platforms.
// Sensitive facts never leave the session they were learned in.
func (d *DB) CandidateFacts(ctx context.Context, f memory.FactFilter) ([]memory.Fact, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultCandidates
	}
	participants, err := json.Marshal(nonNil(f.Participants))
	if err != nil {
		return nil, err
	}
	now := f.Now
	if now.IsZero() {
		now = d.clk.Now()
	}
	return selectAll(ctx, d, "candidate facts", scanFact, sqlCandidateFacts, ms(now), f.SessionKey, f.Platform,
		string(participants), f.CrossChannel, f.CrossGroup, limit)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// MatchFacts implements memory.FactStore: BM25 over the facts' FTS4 index,
// restricted to ids.
func (d *DB) MatchFacts(ctx context.Context, ids []int64, tokens []string) ([]memory.FactMatch, error) {
	expr := memory.MatchExpr(tokens)
	if expr == "" || len(ids) == 0 {
		return nil, nil
	}
	idj, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := d.rdb.QueryContext(ctx, `SELECT docid, matchinfo(memory_item_search, 'pcnx') FROM memory_item_search
WHERE memory_item_search MATCH ?1 AND docid IN (SELECT value FROM json_each(?2))`, expr, string(idj))
	if err != nil {
		return nil, fmt.Errorf("store: match facts: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []memory.FactMatch
	for rows.Next() {
		var (
			m  memory.FactMatch
			mi sql.RawBytes
		)
		if err := rows.Scan(&m.ID, &mi); err != nil {
			return nil, fmt.Errorf("store: match facts: %w", err)
		}
		m.Score = bm25(mi)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: match facts: %w", err)
	}
	return out, nil
}

// TouchFacts implements memory.FactStore.
func (d *DB) TouchFacts(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	idj, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	err = d.write(ctx, func(tx wtx) error {
		_, err := tx.exec(`UPDATE memory_items SET last_verified_at = max(coalesce(last_verified_at, 0), ?2)
WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'active'`, string(idj), ms(at))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: touch facts: %w", err)
	}
	return nil
}

// Fact returns one fact by id (memory.ErrNotFound if absent), whatever its
// status.
func (d *DB) Fact(ctx context.Context, id int64) (memory.Fact, error) {
	f, err := scanFact(d.rdb.QueryRowContext(ctx, `SELECT `+factCols+` FROM memory_items WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return f, fmt.Errorf("store: fact %d: %w", id, memory.ErrNotFound)
	}
	if err != nil {
		return f, fmt.Errorf("store: fact %d: %w", id, err)
	}
	return f, nil
}

// Facts returns every fact row about the subject on the platform (all
// versions and states), oldest first: for owner tools and tests.
func (d *DB) Facts(ctx context.Context, platform, subjectUserID string) ([]memory.Fact, error) {
	return selectAll(ctx, d, "facts", scanFact, `SELECT `+factCols+` FROM memory_items
WHERE platform = ? AND subject_user_id = ? ORDER BY id`, platform, subjectUserID)
}

// ApplyChanges implements memory.FactStore.
func (d *DB) ApplyChanges(ctx context.Context, changes []memory.Change) (memory.ApplyResult, error) {
	cs, err := prepareChanges(changes)
	if err != nil {
		return memory.ApplyResult{}, err
	}
	now := d.now()
	var res memory.ApplyResult
	err = d.write(ctx, func(tx wtx) error {
		res = memory.ApplyResult{}
		return applyChanges(tx, cs, now, &res)
	})
	if err != nil {
		return memory.ApplyResult{}, fmt.Errorf("store: apply changes: %w", err)
	}
	return res, nil
}

// preparedChange is a validated change with its encoded columns.
type preparedChange struct {
	memory.Change
	scopeKey, sources, tokens string
}

// prepareChanges validates and completes the changes on the caller's
// goroutine: defaults (kind fact, explicit, event time now is left to the
// write), the evidence cut to 60 runes, the search tokens.
func prepareChanges(changes []memory.Change) ([]preparedChange, error) {
	out := make([]preparedChange, 0, len(changes))
	for _, c := range changes {
		f := &c.Fact
		if f.Kind == "" {
			f.Kind = memory.KindFact
		}
		if f.SourceType == "" {
			f.SourceType = memory.Explicit
		}
		switch {
		case !f.Scope.Valid():
			return nil, fmt.Errorf("%w: fact scope %q", ErrInvalid, f.Scope)
		case strings.TrimSpace(f.Key) == "":
			return nil, fmt.Errorf("%w: fact without a key", ErrInvalid)
		case !f.Kind.Valid():
			return nil, fmt.Errorf("%w: fact kind %q", ErrInvalid, f.Kind)
		case f.SourceType != memory.Explicit && f.SourceType != memory.Inferred:
			return nil, fmt.Errorf("%w: fact source type %q", ErrInvalid, f.SourceType)
		case !c.Forget && strings.TrimSpace(f.Content) == "":
			return nil, fmt.Errorf("%w: fact %q without content", ErrInvalid, f.Key)
		case (f.Scope == memory.ScopeGroup || f.Scope == memory.ScopePrivate) && f.SessionKey == "":
			return nil, fmt.Errorf("%w: %s fact %q without a session key", ErrInvalid, f.Scope, f.Key)
		}
		f.Evidence = cutRunes(f.Evidence, memory.MaxEvidenceRunes)
		p := preparedChange{Change: c, scopeKey: scopeKey(f)}
		b, err := json.Marshal(nonNil(f.SourceMessageIDs))
		if err != nil {
			return nil, err
		}
		p.sources = string(b)
		p.tokens = memory.IndexText(f.Content, f.Key)
		out = append(out, p)
	}
	return out, nil
}

// scopeKey is the owner of a fact's scope (see the memory_items table).
func scopeKey(f *memory.Fact) string {
	switch f.Scope {
	case memory.ScopeGroup, memory.ScopePrivate:
		return f.SessionKey
	case memory.ScopeUser:
		return f.Platform
	}
	return ""
}

func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}

const sqlInsertFact = `
INSERT INTO memory_items (scope, scope_key, subject_user_id, key, kind, content, evidence, source_message_ids,
    session_key, chat_kind, platform, event_time, source_type, confidence, importance, sensitive, expires_at,
    created_at, updated_at, last_verified_at, version, supersedes_id, status, search_tokens)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?18, ?18, ?19, ?20,
    'active', ?21)`

// applyChanges writes the changes inside tx. An upsert whose content equals
// the active row's (ignoring case and surrounding space) refreshes it:
// sources merged, confidence and importance raised, times and expiry
// updated. A different content supersedes it with version + 1. A forget
// erases the active row's content.
func applyChanges(tx wtx, cs []preparedChange, now int64, res *memory.ApplyResult) error {
	for _, c := range cs {
		f := &c.Fact
		var (
			id, version     int64
			content, srcIDs string
		)
		err := tx.queryRow(`SELECT id, version, content, source_message_ids FROM memory_items
WHERE status = 'active' AND scope = ?1 AND scope_key = ?2 AND subject_user_id = ?3 AND key = ?4`,
			string(f.Scope), c.scopeKey, f.SubjectUserID, f.Key).Scan(&id, &version, &content, &srcIDs)
		found := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if c.Forget {
			if found {
				if _, err := tx.exec(`UPDATE memory_items SET status = 'forgotten', content = '', evidence = '',
    search_tokens = '', updated_at = ?2 WHERE id = ?1`, id, now); err != nil {
					return err
				}
				res.Forgotten++
			}
			continue
		}
		et := now
		if !f.EventTime.IsZero() {
			et = ms(f.EventTime)
		}
		if found && strings.EqualFold(strings.TrimSpace(content), strings.TrimSpace(f.Content)) {
			var old []string
			_ = json.Unmarshal([]byte(srcIDs), &old)
			merged := old
			for _, s := range f.SourceMessageIDs {
				if !slices.Contains(merged, s) {
					merged = append(merged, s)
				}
			}
			b, err := json.Marshal(nonNil(merged))
			if err != nil {
				return err
			}
			if _, err := tx.exec(`UPDATE memory_items SET source_message_ids = ?2, confidence = max(confidence, ?3),
    importance = max(importance, ?4), expires_at = ?5, updated_at = ?6, last_verified_at = ?6,
    event_time = max(event_time, ?7), evidence = CASE WHEN ?8 = '' THEN evidence ELSE ?8 END
WHERE id = ?1`, id, string(b), f.Confidence, f.Importance, nullMs(f.ExpiresAt), now, et, f.Evidence); err != nil {
				return err
			}
			res.Refreshed++
			continue
		}
		var supersedes any
		newVersion := int64(1)
		if found {
			if _, err := tx.exec(`UPDATE memory_items SET status = 'superseded', updated_at = ?2 WHERE id = ?1`, id, now); err != nil {
				return err
			}
			supersedes, newVersion = id, version+1
		}
		if _, err := tx.exec(sqlInsertFact, string(f.Scope), c.scopeKey, f.SubjectUserID, f.Key, string(f.Kind),
			f.Content, f.Evidence, c.sources, f.SessionKey, f.ChatKind, f.Platform, et, string(f.SourceType),
			f.Confidence, f.Importance, f.Sensitive, nullMs(f.ExpiresAt), now, newVersion, supersedes, c.tokens); err != nil {
			return err
		}
		if found {
			res.Superseded++
		} else {
			res.Inserted++
		}
	}
	return nil
}

// ForgetUser implements memory.FactStore ("forget me"): in one
// transaction every fact row whose subject is the user on the platform
// (active or superseded) becomes forgotten with its content, evidence and
// sources erased and its index entry removed, the user's pending and
// running extraction jobs are cancelled (a running job then fails to
// complete with memory.ErrLeaseLost and writes nothing), and with
// opts.ExcludeHistory the user's messages are hidden from memory search.
func (d *DB) ForgetUser(ctx context.Context, platform, userID string, opts memory.ForgetOptions) (memory.ForgetResult, error) {
	if userID == "" {
		return memory.ForgetResult{}, fmt.Errorf("%w: forget without a user id", ErrInvalid)
	}
	now := d.now()
	var res memory.ForgetResult
	err := d.write(ctx, func(tx wtx) error {
		res = memory.ForgetResult{}
		r, err := tx.exec(`UPDATE memory_items SET status = 'forgotten', content = '', evidence = '',
    source_message_ids = '[]', search_tokens = '', updated_at = ?3
WHERE platform = ?1 AND subject_user_id = ?2 AND status IN ('active', 'superseded')`, platform, userID, now)
		if err != nil {
			return err
		}
		res.Facts = int(affected(r))
		r, err = tx.exec(`UPDATE memory_jobs SET status = 'cancelled', lease_owner = NULL, lease_until = NULL,
    last_error = 'forgotten', updated_at = ?3
WHERE platform = ?1 AND subject_user_id = ?2 AND status IN ('pending', 'leased')`, platform, userID, now)
		if err != nil {
			return err
		}
		res.JobsCancelled = int(affected(r))
		if opts.ExcludeHistory {
			if _, err := tx.exec(`INSERT INTO memory_hidden_senders (platform, user_id, hidden_at) VALUES (?1, ?2, ?3)
ON CONFLICT DO NOTHING`, platform, userID, now); err != nil {
				return err
			}
			res.HistoryHidden = true
		}
		return nil
	})
	if err != nil {
		return memory.ForgetResult{}, fmt.Errorf("store: forget user: %w", err)
	}
	return res, nil
}
