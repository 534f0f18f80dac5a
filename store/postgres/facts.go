package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/personakit/persona/memory"
)

// The memory ports *DB implements.
var (
	_ memory.FactStore = (*DB)(nil)
	_ memory.JobStore  = (*DB)(nil)
)

// errMemoryInvalid is wrapped by the errors about a malformed fact change,
// job or forget request; nothing is written then.
var errMemoryInvalid = fmt.Errorf("%w: memory", ErrInvalid)

// factCandidateLimit bounds CandidateFacts when the filter sets no limit.
const factCandidateLimit = 200

// factBM25K1 is the term-frequency saturation of MatchFacts' BM25.
const factBM25K1 = 1.2

// factCols are the columns scanFact reads, in its order.
const factCols = `id, scope, subject_user_id, key, kind, content, evidence, source_message_ids, session_key,
    chat_kind, platform, event_time, source_type, confidence, importance, sensitive, expires_at, created_at,
    updated_at, last_verified_at, version, supersedes_id, status`

// scanFact reads one row of factCols.
func scanFact(row pgx.Row) (memory.Fact, error) {
	var (
		f                             memory.Fact
		scope, kind, st, status       string
		et, created, updated          int64
		expires, verified, supersedes *int64
	)
	err := row.Scan(&f.ID, &scope, &f.SubjectUserID, &f.Key, &kind, &f.Content, &f.Evidence, &f.SourceMessageIDs,
		&f.SessionKey, &f.ChatKind, &f.Platform, &et, &st, &f.Confidence, &f.Importance, &f.Sensitive, &expires,
		&created, &updated, &verified, &f.Version, &supersedes, &status)
	if err != nil {
		return f, err
	}
	f.Scope, f.Kind, f.SourceType, f.Status = memory.Scope(scope), memory.Kind(kind), memory.SourceType(st), memory.Status(status)
	f.EventTime, f.CreatedAt, f.UpdatedAt = fromMs(et), fromMs(created), fromMs(updated)
	if expires != nil {
		f.ExpiresAt = fromMs(*expires)
	}
	if verified != nil {
		f.LastVerifiedAt = fromMs(*verified)
	}
	if supersedes != nil {
		f.SupersedesID = *supersedes
	}
	return f, nil
}

// queryFacts runs a query over factCols and scans every row; what names
// the query in errors.
func (d *DB) queryFacts(ctx context.Context, what, q string, args ...any) ([]memory.Fact, error) {
	rows, err := d.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Fact, error) { return scanFact(r) })
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	return out, nil
}

// memNullMs is t in unix milliseconds, or NULL for the zero time.
func memNullMs(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := t.UnixMilli()
	return &v
}

// memTx runs fn in a read-committed transaction like d.tx, running it
// again (up to a few times) when PostgreSQL aborted it for a deadlock or
// a serialization failure: two writers that lock the same facts or jobs
// in different orders. fn must reset what it collects on every run.
func (d *DB) memTx(ctx context.Context, fn func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := d.tx(ctx, "", fn)
		var pe *pgconn.PgError
		if err == nil || attempt == 5 || !errors.As(err, &pe) ||
			(pe.Code != "40P01" && pe.Code != "40001") || ctx.Err() != nil {
			return err
		}
	}
}

// sqlCandidateFacts is the structured filter: the union of the facts
// learned in this session, the global facts and the user facts about the
// participants, each an indexed lookup.
const sqlCandidateFacts = `
SELECT ` + factCols + ` FROM memory_items WHERE id IN (
    SELECT id FROM memory_items
        WHERE status = 'active' AND session_key = $2
    UNION
    SELECT id FROM memory_items
        WHERE status = 'active' AND scope = 'global' AND NOT sensitive AND (platform = $3 OR $5)
    UNION
    SELECT id FROM memory_items
        WHERE status = 'active' AND scope = 'user' AND subject_user_id = ANY ($4::text[])
            AND NOT sensitive AND (platform = $3 OR $5) AND (chat_kind = 'private' OR $6)
)
AND (expires_at IS NULL OR expires_at > $1)
AND (scope <> 'user' OR session_key <> $2 OR subject_user_id = ANY ($4::text[]))
ORDER BY importance DESC, updated_at DESC, id
LIMIT $7`

// CandidateFacts implements memory.FactStore (recall's structured
// filter). It returns the active, unexpired facts of this chat (any scope
// learned here, user facts only about the participants), the global facts
// and the user facts about the participants learned in a private chat of
// the platform; f.CrossGroup admits user facts learned in other groups,
// f.CrossChannel facts learned on other platforms. Sensitive facts are
// recalled only in the session they were learned in. Most important
// first, then most recently updated, at most f.Limit (200 when unset).
func (d *DB) CandidateFacts(ctx context.Context, f memory.FactFilter) ([]memory.Fact, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = factCandidateLimit
	}
	now := f.Now
	if now.IsZero() {
		now = d.now()
	}
	participants := f.Participants
	if participants == nil {
		participants = []string{}
	}
	return d.queryFacts(ctx, "candidate facts", sqlCandidateFacts, ms(now), f.SessionKey, f.Platform,
		participants, f.CrossChannel, f.CrossGroup, limit)
}

// MatchFacts implements memory.FactStore: it scores the facts with the
// given ids that contain any of the query tokens by BM25 over their
// stored tokens (content and key), without length normalization. The
// document frequencies are counted among the given facts, the set recall
// ranks, so a token that few of them contain weighs more, and a fact
// containing more of the query's tokens scores higher. Forgotten facts
// keep no tokens and never match.
func (d *DB) MatchFacts(ctx context.Context, ids []int64, tokens []string) ([]memory.FactMatch, error) {
	query := make([]string, 0, len(tokens))
	for _, t := range tokens {
		if t != "" && !slices.Contains(query, t) {
			query = append(query, t)
		}
	}
	if len(ids) == 0 || len(query) == 0 {
		return nil, nil
	}
	rows, err := d.pool.Query(ctx, `
SELECT id, search_tokens,
    (SELECT count(*) FROM memory_items WHERE id = ANY ($1::bigint[]) AND cardinality(search_tokens) > 0)
FROM memory_items WHERE id = ANY ($1::bigint[]) AND search_tokens && $2::text[]`, ids, query)
	if err != nil {
		return nil, fmt.Errorf("postgres: match facts: %w", err)
	}
	type hit struct {
		id int64
		tf map[string]int
	}
	var (
		hits []hit
		n    int64
	)
	df := map[string]int{}
	for rows.Next() {
		var (
			h    hit
			toks []string
		)
		if err := rows.Scan(&h.id, &toks, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: match facts: %w", err)
		}
		h.tf = map[string]int{}
		for _, t := range toks {
			if slices.Contains(query, t) {
				h.tf[t]++
			}
		}
		for t := range h.tf {
			df[t]++
		}
		hits = append(hits, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: match facts: %w", err)
	}
	out := make([]memory.FactMatch, 0, len(hits))
	for _, h := range hits {
		var score float64
		for t, tf := range h.tf {
			nd, dt, ft := float64(n), float64(df[t]), float64(tf)
			idf := math.Log(1 + (nd-dt+0.5)/(dt+0.5))
			score += idf * ft * (factBM25K1 + 1) / (ft + factBM25K1)
		}
		if score > 0 {
			out = append(out, memory.FactMatch{ID: h.id, Score: score})
		}
	}
	return out, nil
}

// TouchFacts implements memory.FactStore: it moves last_verified_at of
// the given active facts forward to at (never back).
func (d *DB) TouchFacts(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	err := d.memTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE memory_items SET last_verified_at = greatest(coalesce(last_verified_at, 0), $2)
WHERE id IN (SELECT id FROM memory_items WHERE id = ANY ($1::bigint[]) AND status = 'active' ORDER BY id FOR UPDATE)
    AND status = 'active'`, ids, ms(at))
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: touch facts: %w", err)
	}
	return nil
}

// Fact returns one fact by id, whatever its status (memory.ErrNotFound if
// there is none).
func (d *DB) Fact(ctx context.Context, id int64) (memory.Fact, error) {
	f, err := scanFact(d.pool.QueryRow(ctx, `SELECT `+factCols+` FROM memory_items WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return memory.Fact{}, fmt.Errorf("postgres: fact %d: %w", id, memory.ErrNotFound)
	}
	if err != nil {
		return memory.Fact{}, fmt.Errorf("postgres: fact %d: %w", id, err)
	}
	return f, nil
}

// Facts returns every fact row about the subject on the platform, all
// versions and states, oldest first: for owner tools and tests.
func (d *DB) Facts(ctx context.Context, platform, subjectUserID string) ([]memory.Fact, error) {
	return d.queryFacts(ctx, "facts", `SELECT `+factCols+` FROM memory_items
WHERE platform = $1 AND subject_user_id = $2 ORDER BY id`, platform, subjectUserID)
}

// ApplyChanges implements memory.FactStore: it writes the changes in one
// transaction (see applyFactChanges), all or none.
func (d *DB) ApplyChanges(ctx context.Context, changes []memory.Change) (memory.ApplyResult, error) {
	cs, err := prepareFactChanges(changes)
	if err != nil {
		return memory.ApplyResult{}, fmt.Errorf("postgres: apply changes: %w", err)
	}
	if len(cs) == 0 {
		return memory.ApplyResult{}, nil
	}
	now := d.nowMs()
	var res memory.ApplyResult
	err = d.memTx(ctx, func(tx pgx.Tx) error {
		res = memory.ApplyResult{}
		return d.applyFactChanges(ctx, tx, cs, now, &res)
	})
	if err != nil {
		return memory.ApplyResult{}, fmt.Errorf("postgres: apply changes: %w", err)
	}
	return res, nil
}

// factChange is a validated change with its derived columns.
type factChange struct {
	memory.Change
	scopeKey string
	tokens   []string
}

// prepareFactChanges validates the changes and completes them: kind fact
// and source explicit by default, the evidence cut to its maximum length,
// the scope owner and the search tokens (memory.Tokenize of the content
// and the key, as package store indexes them).
func prepareFactChanges(changes []memory.Change) ([]factChange, error) {
	out := make([]factChange, 0, len(changes))
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
			return nil, fmt.Errorf("%w: fact scope %q", errMemoryInvalid, f.Scope)
		case strings.TrimSpace(f.Key) == "":
			return nil, fmt.Errorf("%w: fact without a key", errMemoryInvalid)
		case !f.Kind.Valid():
			return nil, fmt.Errorf("%w: fact kind %q", errMemoryInvalid, f.Kind)
		case f.SourceType != memory.Explicit && f.SourceType != memory.Inferred:
			return nil, fmt.Errorf("%w: fact source type %q", errMemoryInvalid, f.SourceType)
		case !c.Forget && strings.TrimSpace(f.Content) == "":
			return nil, fmt.Errorf("%w: fact %q without content", errMemoryInvalid, f.Key)
		case (f.Scope == memory.ScopeGroup || f.Scope == memory.ScopePrivate) && f.SessionKey == "":
			return nil, fmt.Errorf("%w: %s fact %q without a session key", errMemoryInvalid, f.Scope, f.Key)
		}
		if utf8.RuneCountInString(f.Evidence) > memory.MaxEvidenceRunes {
			f.Evidence = string([]rune(f.Evidence)[:memory.MaxEvidenceRunes])
		}
		if f.SourceMessageIDs == nil {
			f.SourceMessageIDs = []string{}
		}
		p := factChange{Change: c, scopeKey: factScopeKey(f)}
		p.tokens = append(memory.Tokenize(f.Content), memory.Tokenize(f.Key)...)
		if p.tokens == nil {
			p.tokens = []string{}
		}
		out = append(out, p)
	}
	return out, nil
}

// factScopeKey is the owner of a fact's scope: the session for group and
// private facts, the platform for user facts, nothing for global facts.
func factScopeKey(f *memory.Fact) string {
	switch f.Scope {
	case memory.ScopeGroup, memory.ScopePrivate:
		return f.SessionKey
	case memory.ScopeUser:
		return f.Platform
	}
	return ""
}

// lockFactKeys takes the transaction-level advisory locks of the
// identities (scope, owner, subject, key) the changes write, in a fixed
// order so that two transactions never wait for each other's. Writers of
// the same key, in any process, thus take turns: the second one finds the
// first one's row instead of inserting a second active row.
func (d *DB) lockFactKeys(ctx context.Context, tx pgx.Tx, cs []factChange) error {
	keys := make([]int64, 0, len(cs))
	for _, c := range cs {
		h := fnv.New64a()
		_, _ = h.Write([]byte(d.lockKey("fact")))
		for _, s := range []string{string(c.Fact.Scope), c.scopeKey, c.Fact.SubjectUserID, c.Fact.Key} {
			_, _ = h.Write([]byte{0})
			_, _ = h.Write([]byte(s))
		}
		keys = append(keys, int64(h.Sum64()))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for _, k := range keys {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, k); err != nil {
			return err
		}
	}
	// Then the active rows of those keys, in id order, the order in which
	// TouchFacts and ForgetUser lock rows too.
	scopes, owners, subjects, names := make([]string, len(cs)), make([]string, len(cs)), make([]string, len(cs)),
		make([]string, len(cs))
	for i, c := range cs {
		scopes[i], owners[i], subjects[i], names[i] = string(c.Fact.Scope), c.scopeKey, c.Fact.SubjectUserID, c.Fact.Key
	}
	_, err := tx.Exec(ctx, `SELECT m.id FROM memory_items m
JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS k (scope, scope_key, subject_user_id, key)
    ON m.scope = k.scope AND m.scope_key = k.scope_key AND m.subject_user_id = k.subject_user_id AND m.key = k.key
WHERE m.status = 'active' ORDER BY m.id FOR UPDATE OF m`, scopes, owners, subjects, names)
	return err
}

// sqlInsertFact inserts a new active fact row.
const sqlInsertFact = `
INSERT INTO memory_items (scope, scope_key, subject_user_id, key, kind, content, evidence, source_message_ids,
    session_key, chat_kind, platform, event_time, source_type, confidence, importance, sensitive, expires_at,
    created_at, updated_at, last_verified_at, version, supersedes_id, status, search_tokens)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $18, $18, $19, $20,
    'active', $21)`

// applyFactChanges writes the changes inside tx, in order, under the
// advisory locks of their keys. An upsert whose content equals the active
// row's (ignoring case and surrounding space) refreshes that row: sources
// merged, confidence and importance raised, event time moved forward,
// expiry and evidence replaced (an empty evidence keeps the old one). A
// different content supersedes the row with a new one, version + 1. A
// forget marks the active row forgotten and erases its content, evidence
// and tokens.
func (d *DB) applyFactChanges(ctx context.Context, tx pgx.Tx, cs []factChange, now int64, res *memory.ApplyResult) error {
	if err := d.lockFactKeys(ctx, tx, cs); err != nil {
		return err
	}
	for _, c := range cs {
		f := &c.Fact
		var (
			id      int64
			version int
			content string
			sources []string
		)
		err := tx.QueryRow(ctx, `SELECT id, version, content, source_message_ids FROM memory_items
WHERE status = 'active' AND scope = $1 AND scope_key = $2 AND subject_user_id = $3 AND key = $4 FOR UPDATE`,
			string(f.Scope), c.scopeKey, f.SubjectUserID, f.Key).Scan(&id, &version, &content, &sources)
		found := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if c.Forget {
			if found {
				if _, err := tx.Exec(ctx, `UPDATE memory_items SET status = 'forgotten', content = '', evidence = '',
    search_tokens = '{}', updated_at = $2 WHERE id = $1`, id, now); err != nil {
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
			merged := sources
			for _, s := range f.SourceMessageIDs {
				if !slices.Contains(merged, s) {
					merged = append(merged, s)
				}
			}
			if merged == nil {
				merged = []string{}
			}
			if _, err := tx.Exec(ctx, `UPDATE memory_items SET source_message_ids = $2,
    confidence = greatest(confidence, $3), importance = greatest(importance, $4), expires_at = $5,
    updated_at = $6, last_verified_at = $6, event_time = greatest(event_time, $7),
    evidence = CASE WHEN $8::text = '' THEN evidence ELSE $8::text END
WHERE id = $1`, id, merged, f.Confidence, f.Importance, memNullMs(f.ExpiresAt), now, et, f.Evidence); err != nil {
				return err
			}
			res.Refreshed++
			continue
		}
		var supersedes *int64
		newVersion := 1
		if found {
			if _, err := tx.Exec(ctx, `UPDATE memory_items SET status = 'superseded', updated_at = $2 WHERE id = $1`,
				id, now); err != nil {
				return err
			}
			supersedes, newVersion = &id, version+1
		}
		if _, err := tx.Exec(ctx, sqlInsertFact, string(f.Scope), c.scopeKey, f.SubjectUserID, f.Key, string(f.Kind),
			f.Content, f.Evidence, f.SourceMessageIDs, f.SessionKey, f.ChatKind, f.Platform, et, string(f.SourceType),
			f.Confidence, f.Importance, f.Sensitive, memNullMs(f.ExpiresAt), now, newVersion, supersedes,
			c.tokens); err != nil {
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

// ForgetUser implements memory.FactStore ("forget me"). In one
// transaction it cancels the user's pending and leased extraction jobs on
// the platform (a running job then fails to complete with
// memory.ErrLeaseLost and writes nothing), marks every active or
// superseded fact about the user on the platform forgotten with its
// content, evidence, sources and tokens erased, and with
// opts.ExcludeHistory records the user in memory_hidden_senders, which
// hides their messages from memory search.
func (d *DB) ForgetUser(ctx context.Context, platform, userID string, opts memory.ForgetOptions) (memory.ForgetResult, error) {
	if userID == "" {
		return memory.ForgetResult{}, fmt.Errorf("postgres: forget user: %w: no user id", errMemoryInvalid)
	}
	now := d.nowMs()
	var res memory.ForgetResult
	err := d.memTx(ctx, func(tx pgx.Tx) error {
		res = memory.ForgetResult{}
		// The jobs first, as CompleteJob locks its job before the facts it
		// writes; rows in id order, as every writer of facts locks them.
		tag, err := tx.Exec(ctx, `UPDATE memory_jobs SET status = 'cancelled', lease_owner = NULL, lease_until = NULL,
    last_error = 'forgotten', updated_at = $3
WHERE id IN (SELECT id FROM memory_jobs WHERE platform = $1 AND subject_user_id = $2 AND status IN ('pending', 'leased')
    ORDER BY id FOR UPDATE) AND status IN ('pending', 'leased')`, platform, userID, now)
		if err != nil {
			return err
		}
		res.JobsCancelled = int(tag.RowsAffected())
		tag, err = tx.Exec(ctx, `UPDATE memory_items SET status = 'forgotten', content = '', evidence = '',
    source_message_ids = '{}', search_tokens = '{}', updated_at = $3
WHERE id IN (SELECT id FROM memory_items WHERE platform = $1 AND subject_user_id = $2
    AND status IN ('active', 'superseded') ORDER BY id FOR UPDATE) AND status IN ('active', 'superseded')`,
			platform, userID, now)
		if err != nil {
			return err
		}
		res.Facts = int(tag.RowsAffected())
		if opts.ExcludeHistory {
			if _, err := tx.Exec(ctx, `INSERT INTO memory_hidden_senders (platform, user_id, hidden_at)
VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, platform, userID, now); err != nil {
				return err
			}
			res.HistoryHidden = true
		}
		return nil
	})
	if err != nil {
		return memory.ForgetResult{}, fmt.Errorf("postgres: forget user: %w", err)
	}
	return res, nil
}
