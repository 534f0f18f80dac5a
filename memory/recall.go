package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Recall defaults.
const (
	DefaultCandidates      = 200
	DefaultMaxItems        = 24
	DefaultLambda          = 0.7
	DefaultCoreMax         = 8
	DefaultCoreConfidence  = 0.9
	DefaultCoreImportance  = 0.9
	DefaultDecayDays       = 30
	DefaultEpisodePenalty  = 0.12
	DefaultTokenBudget     = 2400
	DefaultCoreTokenBudget = 600
	DefaultHistoryHits     = 50
	DefaultSnippetRunes    = 160
	DefaultTouchTimeout    = 5 * time.Second
)

// RecallConfig configures a Recaller. The zero value means the defaults
// (in parentheses below); CrossGroup and CrossChannel are off by default.
type RecallConfig struct {
	// Candidates bounds the facts passing the structured filter (200).
	Candidates int
	// MaxItems bounds the selected facts and snippets, core facts
	// excluded (24).
	MaxItems int
	// Lambda is the MMR trade-off between relevance and diversity (0.7).
	Lambda float64
	// CoreMax bounds the core facts always included (8); core facts are
	// facts about the current speaker with CoreConfidence (0.9) and
	// CoreImportance (0.9).
	CoreMax                        int
	CoreConfidence, CoreImportance float64
	// DecayDays is the recency half-point: bonus 1/(1 + age/DecayDays) (30).
	DecayDays float64
	// EpisodePenalty is taken off episodes linearly between 30 and 365
	// days since their last verification (0.12).
	EpisodePenalty float64
	// TokenBudget bounds the estimated tokens of the whole block (2400);
	// CoreTokenBudget the core facts' share (600).
	TokenBudget, CoreTokenBudget int
	// HistoryHits bounds the history messages scored per recall (50);
	// NoHistory turns history search off.
	HistoryHits int
	NoHistory   bool
	// SnippetRunes bounds the text of one history snippet (160).
	SnippetRunes int
	// CrossGroup admits user facts (and history) from other group chats;
	// CrossChannel from other platforms. Both off by default.
	CrossGroup, CrossChannel bool
	// Clock (nil = clock.Real) and Logger (nil = discard).
	Clock  clock.Clock
	Logger *slog.Logger
}

func (c *RecallConfig) defaults() {
	c.Candidates = cmp.Or(c.Candidates, DefaultCandidates)
	c.MaxItems = cmp.Or(c.MaxItems, DefaultMaxItems)
	c.Lambda = cmp.Or(c.Lambda, DefaultLambda)
	c.CoreMax = cmp.Or(c.CoreMax, DefaultCoreMax)
	c.CoreConfidence = cmp.Or(c.CoreConfidence, DefaultCoreConfidence)
	c.CoreImportance = cmp.Or(c.CoreImportance, DefaultCoreImportance)
	c.DecayDays = cmp.Or(c.DecayDays, DefaultDecayDays)
	c.EpisodePenalty = cmp.Or(c.EpisodePenalty, DefaultEpisodePenalty)
	c.TokenBudget = cmp.Or(c.TokenBudget, DefaultTokenBudget)
	c.CoreTokenBudget = cmp.Or(c.CoreTokenBudget, DefaultCoreTokenBudget)
	c.HistoryHits = cmp.Or(c.HistoryHits, DefaultHistoryHits)
	c.SnippetRunes = cmp.Or(c.SnippetRunes, DefaultSnippetRunes)
	c.Clock = clock.OrReal(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Query is what one recall is about.
type Query struct {
	// SessionKey is the current chat (required).
	SessionKey string
	// Platform is the current platform ("" = parsed from SessionKey).
	Platform string
	// UserID is the current speaker: core facts are facts about them.
	UserID string
	// Participants are the other users whose user-scoped facts may be
	// recalled (the speaker is always included).
	Participants []string
	// Text is what to find memories for: the current message and the
	// recent turn.
	Text string
	// Before excludes history at or after this time: the time of the
	// oldest message the prompt's history shows (zero: no bound).
	Before time.Time
	// Exclude are history keys (Entry.Key) never returned: the messages
	// the prompt's history shows and the current one. Unlike Before it
	// holds when times tie or a message in the window is older than its
	// neighbours. A fact whose every source message is excluded is left
	// out too: the window already says it. See ExcludeHistory.
	Exclude []string
	// OwnMessages admits the bot's own earlier messages as snippets. Off
	// for the turn's recall: the bot's replies restate the topic, so they
	// match the query best and crowd out what people said, and what the
	// bot learned from a conversation is kept as facts. The memory_search
	// tool sets it (a user may ask what the bot said before).
	OwnMessages bool
	// MaxItems overrides RecallConfig.MaxItems for this call (0 = config).
	MaxItems int
	// NoCore leaves the core facts out (the memory_search tool).
	NoCore bool
}

// ExcludeHistory keeps the prompt's history window out of the recall:
// every entry's key joins Exclude, and Before moves back to the oldest
// entry's time (unless it is already earlier). Pass the entries the
// prompt's history shows, and the current message.
func (q *Query) ExcludeHistory(window []Entry) {
	for i := range window {
		e := &window[i]
		q.Exclude = append(q.Exclude, cmp.Or(e.Key, e.Event.Key()))
		if t := e.Event.Time; !t.IsZero() && (q.Before.IsZero() || t.Before(q.Before)) {
			q.Before = t
		}
	}
}

// RecalledFact is a selected fact with its final score.
type RecalledFact struct {
	Fact
	Score float64
	// Core is set for core facts, included regardless of the query.
	Core bool
}

// Snippet is a selected piece of history evidence.
type Snippet struct {
	Message
	Score float64
}

// Recollection is the result of a recall: only the selected evidence.
type Recollection struct {
	Facts    []RecalledFact
	Snippets []Snippet
	// Tokens is the estimated size of the selection.
	Tokens int
}

// Recaller ranks long-term facts and history for a turn, in four steps:
// structured filter, BM25 relevance, time decay, MMR.
type Recaller struct {
	facts   FactStore
	history HistorySearch
	cfg     RecallConfig
	touches sync.WaitGroup
}

// NewRecaller returns a Recaller over the fact store and (optionally, nil
// = facts only) the history search.
func NewRecaller(facts FactStore, history HistorySearch, cfg RecallConfig) (*Recaller, error) {
	if facts == nil {
		return nil, errors.New("memory: NewRecaller needs a FactStore")
	}
	cfg.defaults()
	if cfg.Lambda < 0 || cfg.Lambda > 1 {
		return nil, fmt.Errorf("memory: lambda %v outside [0, 1]", cfg.Lambda)
	}
	if history == nil {
		cfg.NoHistory = true
	}
	return &Recaller{facts: facts, history: history, cfg: cfg}, nil
}

// candidate is one fact or snippet competing for a slot.
type candidate struct {
	fact    *RecalledFact
	snippet *Snippet
	score   float64
	tokens  map[string]bool
	cost    int
}

// Recall selects the memories for q. The ids of the returned facts get
// their last_verified_at touched asynchronously (see Wait).
func (r *Recaller) Recall(ctx context.Context, q Query) (Recollection, error) {
	if q.SessionKey == "" {
		return Recollection{}, errors.New("memory: recall without a session key")
	}
	cfg := &r.cfg
	now := cfg.Clock.Now()
	platform := q.Platform
	if platform == "" {
		if p, err := channel.ParseSessionKey(q.SessionKey); err == nil {
			platform = p.Platform
		}
	}
	participants := q.Participants
	if q.UserID != "" && !slices.Contains(participants, q.UserID) {
		participants = append(slices.Clone(participants), q.UserID)
	}
	facts, err := r.facts.CandidateFacts(ctx, FactFilter{
		SessionKey: q.SessionKey, Platform: platform, Participants: participants,
		CrossGroup: cfg.CrossGroup, CrossChannel: cfg.CrossChannel, Now: now, Limit: cfg.Candidates,
	})
	if err != nil {
		return Recollection{}, err
	}
	tokens := QueryTokens(q.Text)
	rel := map[int64]float64{}
	if len(tokens) > 0 && len(facts) > 0 {
		ids := make([]int64, len(facts))
		for i := range facts {
			ids[i] = facts[i].ID
		}
		ms, err := r.facts.MatchFacts(ctx, ids, tokens)
		if err != nil {
			return Recollection{}, err
		}
		for _, m := range ms {
			rel[m.ID] = m.Score
		}
	}
	maxRel := 0.0
	for _, v := range rel {
		maxRel = max(maxRel, v)
	}

	var excluded map[string]bool
	if len(q.Exclude) > 0 {
		excluded = make(map[string]bool, len(q.Exclude))
		for _, k := range q.Exclude {
			excluded[k] = true
		}
	}

	var out Recollection
	var pool []candidate
	coreBudget, budget := cfg.CoreTokenBudget, cfg.TokenBudget
	// Core facts: about the speaker, confident and important; most
	// important first.
	for i := range facts {
		f := &facts[i]
		if inWindow(f.SourceMessageIDs, excluded) {
			continue
		}
		relNorm := norm(rel[f.ID], maxRel)
		score := 0.55*relNorm + 0.2*f.Importance + 0.1*f.Confidence + 0.15*r.recency(now, f.UpdatedAt) - r.episodePenalty(now, f)
		isCore := !q.NoCore && q.UserID != "" && f.SubjectUserID == q.UserID && f.Core(cfg.CoreConfidence, cfg.CoreImportance)
		rf := &RecalledFact{Fact: *f, Score: score}
		cost := EstimateTokens(f.Content) + 8
		if isCore && len(out.Facts) < cfg.CoreMax && cost <= coreBudget {
			rf.Core = true
			out.Facts = append(out.Facts, *rf)
			coreBudget -= cost
			budget -= cost
			continue
		}
		// A fact competes when it matches the query or (except for a
		// search, NoCore) is about the speaker.
		if relNorm == 0 && (q.NoCore || q.UserID == "" || f.SubjectUserID != q.UserID) {
			continue
		}
		if q.UserID != "" && f.SubjectUserID == q.UserID {
			rf.Score += 0.05
		}
		pool = append(pool, candidate{fact: rf, score: rf.Score, tokens: tokenSet(f.Content), cost: cost})
	}

	if !cfg.NoHistory && len(tokens) > 0 {
		// The excluded messages can take up to len(Exclude) of the hits.
		found, err := r.history.SearchHistory(ctx, HistoryQuery{
			Sessions: []string{q.SessionKey}, Tokens: tokens, Before: q.Before, Limit: cfg.HistoryHits + len(excluded),
		})
		if err != nil {
			return Recollection{}, err
		}
		hits := found[:0]
		for _, h := range found {
			if !excluded[h.Key] && (q.OwnMessages || h.Direction != Out) && len(hits) < cfg.HistoryHits {
				hits = append(hits, h)
			}
		}
		maxH := 0.0
		for _, h := range hits {
			maxH = max(maxH, h.Score)
		}
		for _, h := range hits {
			sn := &Snippet{Message: h.Message, Score: 0.8 * (0.7*norm(h.Score, maxH) + 0.3*r.recency(now, h.Time))}
			sn.Text = snippet(sn.Text, tokens, cfg.SnippetRunes)
			pool = append(pool, candidate{snippet: sn, score: sn.Score, tokens: tokenSet(sn.Text),
				cost: EstimateTokens(sn.SenderName+": "+sn.Text) + 8})
		}
	}

	maxItems := cmp.Or(q.MaxItems, cfg.MaxItems)
	for _, c := range mmr(pool, cfg.Lambda, maxItems, budget) {
		if c.fact != nil {
			out.Facts = append(out.Facts, *c.fact)
		} else {
			out.Snippets = append(out.Snippets, *c.snippet)
		}
	}
	out.Tokens = blockTokens(out)
	r.touch(out.Facts, now)
	return out, nil
}

// inWindow reports whether every source of a fact is excluded (false for
// a fact without sources).
func inWindow(sources []string, excluded map[string]bool) bool {
	if len(excluded) == 0 || len(sources) == 0 {
		return false
	}
	for _, k := range sources {
		if !excluded[k] {
			return false
		}
	}
	return true
}

// blockTokens is the estimated size of the selection.
func blockTokens(rc Recollection) int {
	n := 0
	for _, f := range rc.Facts {
		n += EstimateTokens(f.Content) + 8
	}
	for _, s := range rc.Snippets {
		n += EstimateTokens(s.SenderName+": "+s.Text) + 8
	}
	return n
}

// touch marks the facts verified in the background.
func (r *Recaller) touch(facts []RecalledFact, now time.Time) {
	if len(facts) == 0 {
		return
	}
	ids := make([]int64, len(facts))
	for i, f := range facts {
		ids[i] = f.ID
	}
	r.touches.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultTouchTimeout)
		defer cancel()
		if err := r.facts.TouchFacts(ctx, ids, now); err != nil {
			r.cfg.Logger.Warn("memory: touch recalled facts", "err", err, "facts", len(ids))
		}
	})
}

// Wait blocks until the background last_verified_at updates started by
// Recall are done.
func (r *Recaller) Wait() { r.touches.Wait() }

// recency is the time-decay bonus 1/(1 + age_days/DecayDays).
func (r *Recaller) recency(now, t time.Time) float64 {
	days := max(now.Sub(t).Hours()/24, 0)
	return 1 / (1 + days/r.cfg.DecayDays)
}

// episodePenalty takes up to EpisodePenalty off an episode between 30 and
// 365 days since it was last verified (or updated).
func (r *Recaller) episodePenalty(now time.Time, f *Fact) float64 {
	if f.Kind != KindEpisode {
		return 0
	}
	t := f.UpdatedAt
	if f.LastVerifiedAt.After(t) {
		t = f.LastVerifiedAt
	}
	days := now.Sub(t).Hours() / 24
	switch {
	case days <= 30:
		return 0
	case days >= 365:
		return r.cfg.EpisodePenalty
	}
	return r.cfg.EpisodePenalty * (days - 30) / (365 - 30)
}

func norm(v, m float64) float64 {
	if m <= 0 {
		return 0
	}
	return v / m
}

// mmr picks up to n candidates greedily by λ·score − (1−λ)·max similarity
// to those already picked (Jaccard over tokens), skipping any that would
// exceed the budget.
func mmr(pool []candidate, lambda float64, n, budget int) []candidate {
	var picked []candidate
	used := make([]bool, len(pool))
	sim := make([]float64, len(pool)) // max similarity to the picked ones
	for len(picked) < n {
		best, bestVal := -1, math.Inf(-1)
		for i, c := range pool {
			if used[i] || c.cost > budget {
				continue
			}
			if v := lambda*c.score - (1-lambda)*sim[i]; v > bestVal {
				best, bestVal = i, v
			}
		}
		if best < 0 {
			break
		}
		used[best] = true
		budget -= pool[best].cost
		picked = append(picked, pool[best])
		for i := range pool {
			if !used[i] {
				sim[i] = max(sim[i], jaccard(pool[i].tokens, pool[best].tokens))
			}
		}
	}
	return picked
}

func tokenSet(s string) map[string]bool {
	m := map[string]bool{}
	TokenizeFunc(s, func(t string) { m[t] = true })
	return m
}

func jaccard(a, b map[string]bool) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	inter := 0
	for t := range a {
		if b[t] {
			inter++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// snippet cuts text to n runes around the first query token it contains.
func snippet(text string, tokens []string, n int) string {
	text = strings.TrimSpace(text)
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	lower := strings.ToLower(text)
	at := -1
	for _, t := range tokens {
		if i := strings.Index(lower, t); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	runes := []rune(text)
	start := 0
	if at > 0 {
		start = max(utf8.RuneCountInString(lower[:at])-n/4, 0)
	}
	end := min(start+n, len(runes))
	start = max(end-n, 0)
	s := string(runes[start:end])
	if start > 0 {
		s = "…" + s
	}
	if end < len(runes) {
		s += "…"
	}
	return s
}

// EstimateTokens estimates the tokens of s when the provider gives no
// counts: ASCII 3 characters per token, other characters (CJK)
// 2 tokens each.
func EstimateTokens(s string) int {
	ascii, other := 0, 0
	for _, r := range s {
		if r < utf8.RuneSelf {
			ascii++
		} else if !unicode.IsSpace(r) {
			other++
		}
	}
	return (ascii+2)/3 + 2*other
}
