package memory

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Extraction defaults.
const (
	DefaultJobWorkers            = 2
	DefaultJobLease              = 3 * time.Minute
	DefaultJobTimeout            = 60 * time.Second
	DefaultJobAttempts           = 8
	DefaultJobRetryBase          = 15 * time.Second
	DefaultJobRetryCap           = 16 * time.Minute
	DefaultJobPoll               = 5 * time.Second
	DefaultContextMessages       = 12
	DefaultExistingFacts         = 40
	DefaultExtractCandidates     = 5
	DefaultMinImportance         = 0.45
	DefaultMinInferredConfidence = 0.90
	DefaultEpisodeTTL            = 90 * 24 * time.Hour
)

// ExtractConfig configures an Extractor; zero fields mean the defaults.
type ExtractConfig struct {
	// Workers is the number of concurrent jobs in Run (2).
	Workers int
	// Lease is the claim lease (3 min); Timeout bounds the model call
	// (60 s) and must be shorter.
	Lease, Timeout time.Duration
	// MaxAttempts is the number of claims before a job fails for good (8).
	MaxAttempts int
	// RetryBase and RetryCap shape the retry delay: base doubling per
	// attempt, capped (15 s → 16 min).
	RetryBase, RetryCap time.Duration
	// Poll is how often an idle worker looks for due jobs besides the
	// wake-up from Enqueue (5 s).
	Poll time.Duration
	// ContextMessages is the recent context shown with the message (12).
	ContextMessages int
	// ExistingFacts bounds the related facts shown to the model (40).
	ExistingFacts int
	// MaxCandidates bounds the candidates taken from one answer (5).
	MaxCandidates int
	// MinImportance drops upserts below it (0.45); MinInferredConfidence
	// drops inferred upserts below it (0.90).
	MinImportance, MinInferredConfidence float64
	// EpisodeTTL is the default lifetime of an episode (90 days).
	EpisodeTTL time.Duration
	// Owner names this process's leases ("" = "memory-" + random).
	Owner string
	// Scopes gives each session's agent.Scope, the model-facing identity
	// the whole pipeline shares: the extraction prompt shows every person
	// as "Name (u_…)" in the session's aliases, scrubs known ids typed in
	// text, and the model call carries the Scope (agent.WithScope), so an
	// agent.Private model needs no session lookup; aliases in the answer
	// are mapped back to ids before anything is stored. Nil (memory used
	// on its own), or a source that gives no Scope, renders through the
	// Extractor's own Scope with a random secret: the model still sees no
	// id, only aliases that mean nothing outside this process, but they
	// are not the session's (with an agent.Private model, set Scopes so
	// that memory's calls use the session's aliases like every other call).
	Scopes agent.ScopeSource
	// Clock (nil = clock.Real) and Logger (nil = discard).
	Clock  clock.Clock
	Logger *slog.Logger
}

func (c *ExtractConfig) defaults() {
	c.Workers = cmp.Or(c.Workers, DefaultJobWorkers)
	c.Lease = cmp.Or(c.Lease, DefaultJobLease)
	c.Timeout = cmp.Or(c.Timeout, DefaultJobTimeout)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultJobAttempts)
	c.RetryBase = cmp.Or(c.RetryBase, DefaultJobRetryBase)
	c.RetryCap = cmp.Or(c.RetryCap, DefaultJobRetryCap)
	c.Poll = cmp.Or(c.Poll, DefaultJobPoll)
	c.ContextMessages = cmp.Or(c.ContextMessages, DefaultContextMessages)
	c.ExistingFacts = cmp.Or(c.ExistingFacts, DefaultExistingFacts)
	c.MaxCandidates = cmp.Or(c.MaxCandidates, DefaultExtractCandidates)
	c.MinImportance = cmp.Or(c.MinImportance, DefaultMinImportance)
	c.MinInferredConfidence = cmp.Or(c.MinInferredConfidence, DefaultMinInferredConfidence)
	c.EpisodeTTL = cmp.Or(c.EpisodeTTL, DefaultEpisodeTTL)
	if c.Owner == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Owner = "memory-" + hex.EncodeToString(b)
	}
	c.Clock = clock.OrReal(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// ExtractStore is what an Extractor needs from the store.
type ExtractStore interface {
	JobStore
	HistorySearch
	FactStore
}

// Extractor learns long-term facts from user messages asynchronously and
// durably: Enqueue records a job in the store after a reply;
// Run's workers claim jobs with leases, ask the model (purpose memory) and
// apply its candidates together with the job's completion. Nothing here
// blocks a reply.
type Extractor struct {
	store ExtractStore
	model agent.Model
	cfg   ExtractConfig
	wake  chan struct{}
	own   *agent.Scope // when cfg.Scopes is nil or gives none
}

// NewExtractor returns an Extractor.
func NewExtractor(store ExtractStore, model agent.Model, cfg ExtractConfig) (*Extractor, error) {
	if store == nil || model == nil {
		return nil, errors.New("memory: NewExtractor needs a store and a model")
	}
	cfg.defaults()
	if cfg.Timeout >= cfg.Lease {
		return nil, fmt.Errorf("memory: extraction timeout %v must be shorter than the lease %v", cfg.Timeout, cfg.Lease)
	}
	own, err := ownScope()
	if err != nil {
		return nil, err
	}
	return &Extractor{store: store, model: model, cfg: cfg, wake: make(chan struct{}, 1), own: own}, nil
}

var urlRE = regexp.MustCompile(`(?i)\b(?:https?|ftp)://\S+|\bwww\.\S+`)

// Eligible reports whether a history entry qualifies for extraction: an
// incoming message (not a notice, not the bot's own), not from a bot, whose
// text outside URLs has at least 2 letters or digits.
func Eligible(e *Entry) bool {
	if e.Direction != "" && e.Direction != In {
		return false
	}
	ev := &e.Event
	if ev.Kind != "" && ev.Kind != channel.KindMessage || ev.Sender.IsBot {
		return false
	}
	text := urlRE.ReplaceAllString(ev.TextAndSpeech(), " ")
	n := 0
	for _, r := range text {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if n++; n >= 2 {
				return true
			}
		}
	}
	return false
}

// Enqueue records an extraction job for the entry when it is Eligible and
// wakes a worker; it reports whether a job was added. Call it after the
// entry is in the history (e.g. after a reply), on a detached context: it
// is one small write.
func (x *Extractor) Enqueue(ctx context.Context, e Entry) (bool, error) {
	if !Eligible(&e) {
		return false, nil
	}
	key := cmp.Or(e.Key, e.Event.Key())
	session := cmp.Or(e.SessionKey, e.Event.SessionKey)
	ok, err := x.store.EnqueueJob(ctx, Job{MessageKey: key, SessionKey: session, Platform: e.Event.Platform,
		SubjectUserID: e.Event.Sender.ID})
	if ok {
		select {
		case x.wake <- struct{}{}:
		default:
		}
	}
	return ok, err
}

// Run runs the workers until ctx ends; it returns nil then.
func (x *Extractor) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range x.cfg.Workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				n, err := x.RunOnce(ctx, 1)
				if err != nil && ctx.Err() == nil {
					x.cfg.Logger.Warn("memory: extraction worker", "err", err)
				}
				if n > 0 {
					continue
				}
				t := x.cfg.Clock.NewTimer(x.cfg.Poll)
				select {
				case <-ctx.Done():
				case <-x.wake:
				case <-t.C():
				}
				t.Stop()
			}
		})
	}
	wg.Wait()
	return nil
}

// RunOnce claims up to n due jobs and processes them one after another on
// the caller's goroutine; it returns the number claimed. Tests and
// embedders with their own scheduling use it instead of Run.
func (x *Extractor) RunOnce(ctx context.Context, n int) (int, error) {
	leases, err := x.store.ClaimJobs(ctx, x.cfg.Owner, n, x.cfg.Lease)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, l := range leases {
		if err := x.process(ctx, l); err != nil {
			errs = append(errs, err)
		}
	}
	return len(leases), errors.Join(errs...)
}

// process runs one claimed job to completion, retry or failure.
func (x *Extractor) process(ctx context.Context, l JobLease) error {
	log := x.cfg.Logger.With("job", l.ID, "message", l.Job.MessageKey, "attempt", l.Attempts)
	changes, err := x.extract(ctx, l)
	// Bookkeeping survives the caller's cancellation.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err == nil {
		res, cerr := x.store.CompleteJob(bctx, l, changes)
		if cerr == nil {
			log.Debug("memory: extraction done", "inserted", res.Inserted, "superseded", res.Superseded,
				"refreshed", res.Refreshed, "forgotten", res.Forgotten)
			return nil
		}
		if errors.Is(cerr, ErrLeaseLost) {
			log.Info("memory: extraction lease lost; result dropped")
			return nil
		}
		err = cerr
	}
	dead := l.Attempts >= x.cfg.MaxAttempts || !agent.Transient(err)
	delay := x.cfg.RetryBase << min(max(l.Attempts-1, 0), 20)
	if delay > x.cfg.RetryCap || delay <= 0 {
		delay = x.cfg.RetryCap
	}
	if rerr := x.store.RetryJob(bctx, l, x.cfg.Clock.Now().Add(delay), err, dead); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
		return errors.Join(err, rerr)
	}
	if dead {
		log.Warn("memory: extraction failed for good", "err", err)
	} else {
		log.Info("memory: extraction will be retried", "err", err, "in", delay)
	}
	return nil
}

// candidateJSON is one candidate in the model's answer.
type candidateJSON struct {
	Op    string `json:"op"`
	Scope string `json:"scope"`
	// Subject is the alias the prompt showed for the person the memory is
	// about; SubjectUserID is the field's former name, still accepted.
	Subject       looseString `json:"subject"`
	SubjectUserID looseString `json:"subject_user_id"`
	Key           string      `json:"key"`
	Kind          string      `json:"kind"`
	Content       string      `json:"content"`
	Evidence      string      `json:"evidence"`
	SourceType    string      `json:"source_type"`
	Confidence    float64     `json:"confidence"`
	Importance    float64     `json:"importance"`
	Sensitive     bool        `json:"sensitive"`
}

// looseString decodes a JSON string, or a number as its text.
type looseString string

// UnmarshalJSON implements json.Unmarshaler.
func (l *looseString) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*l = looseString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*l = looseString(n)
	return nil
}

const extractSystem = `You maintain the long-term memory of a chat bot. From the NEW MESSAGE (with its context) extract at most 5 durable memories: stable facts, preferences, relationships, notable episodes or standing instructions. Ignore small talk and anything only true for the moment.
People are shown as Name (u_…): u_… is the person's alias. Refer to people by name or alias only.
Answer with one JSON object: {"candidates":[{"op":"upsert"|"forget","scope":"user"|"group"|"private"|"global","subject":"<alias (u_…) of the person the memory is about, as shown>","key":"<short stable snake_case key, e.g. home_city>","kind":"fact"|"preference"|"relation"|"episode"|"instruction","content":"<one sentence>","evidence":"<quote from the message, at most 60 characters>","source_type":"explicit"|"inferred","confidence":0..1,"importance":0..1,"sensitive":true|false}]}
Scope user is about one person (subject), group or private about this chat, global about the bot itself. Reuse the scope, subject and key of an EXISTING fact when the message updates or contradicts it; use "forget" when the user retracts it. Mark health, finances, precise locations, credentials and similar as sensitive. Answer {"candidates":[]} when there is nothing worth remembering.`

// extract builds the prompt, calls the model and turns its answer into
// changes. The prompt is rendered through the session's Scope and the
// call carries it; the answer's aliases are mapped back in parse.
func (x *Extractor) extract(ctx context.Context, l JobLease) ([]Change, error) {
	msg, err := x.store.Message(ctx, l.Job.MessageKey)
	if errors.Is(err, ErrNotFound) {
		return nil, nil // nothing to learn from
	}
	if err != nil {
		return nil, err
	}
	if msg.Recalled {
		return nil, nil
	}
	before, err := x.store.MessagesBefore(ctx, msg.SessionKey, Watermark{Time: msg.Time, Key: msg.Key}, x.cfg.ContextMessages)
	if err != nil {
		return nil, err
	}
	existing, err := x.relatedFacts(ctx, &msg, before)
	if err != nil {
		return nil, err
	}
	sc, err := sessionScope(ctx, x.cfg.Scopes, x.own, msg.SessionKey)
	if err != nil {
		return nil, err
	}
	// Register every id the prompt shows before any text is scrubbed.
	r := newRenderer(sc, msg.SessionKey)
	for i := range before {
		r.message(&before[i])
	}
	r.message(&msg)
	for i := range existing {
		r.user(existing[i].SubjectUserID)
	}

	var b strings.Builder
	b.WriteString("EXISTING FACTS:\n")
	if len(existing) == 0 {
		b.WriteString("(none)\n")
	}
	for i := range existing {
		f := &existing[i]
		fmt.Fprintf(&b, "- [scope %s, ", f.Scope)
		if f.SubjectUserID != "" {
			fmt.Fprintf(&b, "subject %s, ", r.person(f.SubjectUserID, "", false))
		}
		fmt.Fprintf(&b, "key %s] %s\n", f.Key, flatten(r.text(f.Content)))
	}
	b.WriteString("\nCONTEXT:\n")
	for i := range before {
		r.writeLine(&b, &before[i])
	}
	b.WriteString("\nNEW MESSAGE:\n")
	r.writeLine(&b, &msg)
	chat := "group"
	if p, err := channel.ParseSessionKey(msg.SessionKey); err == nil {
		chat = string(p.Chat.Kind)
	}
	fmt.Fprintf(&b, "\nThis is a %s chat.", chat)

	cctx, cancel := context.WithTimeout(agent.WithScope(ctx, sc), x.cfg.Timeout)
	defer cancel()
	resp, err := x.model.Generate(cctx, agent.Request{
		Purpose: agent.PurposeMemory,
		JSON:    true,
		Messages: []agent.Message{
			{Role: agent.RoleSystem, Content: extractSystem},
			{Role: agent.RoleUser, Content: b.String()},
		},
	})
	if err != nil {
		return nil, err
	}
	return x.parse(resp.Text, &msg, chat, r)
}

// writeLine writes one history message of a memory prompt:
// "[time] Name (u_…): text".
func (r *renderer) writeLine(b *strings.Builder, m *Message) {
	fmt.Fprintf(b, "[%s] %s: %s\n", m.Time.UTC().Format("2006-01-02 15:04"), r.person(m.SenderID, m.SenderName, m.Direction == Out),
		flatten(r.text(m.Text)))
}

// relatedFacts returns the existing facts shown to the model: those of the
// chat and about the people in the context (the sender first), matching
// ones first.
func (x *Extractor) relatedFacts(ctx context.Context, msg *Message, recent []Message) ([]Fact, error) {
	people := []string{msg.SenderID}
	for i := range recent {
		if m := &recent[i]; m.Direction != Out && m.SenderID != "" && !slices.Contains(people, m.SenderID) {
			people = append(people, m.SenderID)
		}
	}
	facts, err := x.store.CandidateFacts(ctx, FactFilter{SessionKey: msg.SessionKey, Platform: msg.Platform,
		Participants: people, Now: x.cfg.Clock.Now()})
	if err != nil {
		return nil, err
	}
	if len(facts) > x.cfg.ExistingFacts {
		score := map[int64]float64{}
		ids := make([]int64, len(facts))
		for i := range facts {
			ids[i] = facts[i].ID
		}
		ms, err := x.store.MatchFacts(ctx, ids, QueryTokens(msg.Text))
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			score[m.ID] = m.Score
		}
		slices.SortStableFunc(facts, func(a, b Fact) int { return cmp.Compare(score[b.ID], score[a.ID]) })
		facts = facts[:x.cfg.ExistingFacts]
	}
	return facts, nil
}

// ErrBadAnswer wraps an unparsable extraction answer; the job is retried.
var ErrBadAnswer = errors.New("memory: unparsable extraction answer")

// parse decodes the answer and applies the extraction rules. Aliases in
// the answer are mapped back through r (see resolveSubject); content and
// evidence are stored with real ids.
func (x *Extractor) parse(text string, msg *Message, chat string, r *renderer) ([]Change, error) {
	text = strings.TrimSpace(text)
	text = strings.TrimPrefix(strings.TrimSuffix(text, "```"), "```json")
	if i, j := strings.IndexByte(text, '{'), strings.LastIndexByte(text, '}'); i >= 0 && j > i {
		text = text[i : j+1]
	}
	var ans struct {
		Candidates []candidateJSON `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(text), &ans); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadAnswer, err)
	}
	now := x.cfg.Clock.Now()
	var out []Change
	for i, c := range ans.Candidates {
		if i >= x.cfg.MaxCandidates {
			break
		}
		f := Fact{
			Scope: Scope(c.Scope), Key: normKey(c.Key), Kind: Kind(c.Kind),
			Content: strings.TrimSpace(r.restore(c.Content)), Evidence: r.restore(c.Evidence), SourceType: SourceType(c.SourceType),
			Confidence: clamp01(c.Confidence), Importance: clamp01(c.Importance), Sensitive: c.Sensitive,
			SourceMessageIDs: []string{msg.Key}, SessionKey: msg.SessionKey, ChatKind: chat,
			Platform: msg.Platform, EventTime: msg.Time,
		}
		if f.Scope == "" {
			f.Scope = ScopeUser
		}
		if f.Scope == ScopeGroup && chat == "private" {
			f.Scope = ScopePrivate
		}
		if f.Scope == ScopePrivate && chat == "group" {
			f.Scope = ScopeGroup
		}
		subject, ok := r.resolveSubject(f.Scope, string(cmp.Or(c.Subject, c.SubjectUserID)), msg.SenderID)
		if !ok {
			continue
		}
		f.SubjectUserID = subject
		if f.Kind == "" {
			f.Kind = KindFact
		}
		if f.SourceType == "" {
			f.SourceType = Explicit
		}
		if !f.Scope.Valid() || !f.Kind.Valid() || f.Key == "" ||
			(f.SourceType != Explicit && f.SourceType != Inferred) {
			continue
		}
		switch c.Op {
		case "forget":
			out = append(out, Change{Forget: true, Fact: f})
			continue
		case "upsert", "":
		default:
			continue
		}
		if f.Content == "" || f.Importance < x.cfg.MinImportance ||
			(f.SourceType == Inferred && f.Confidence < x.cfg.MinInferredConfidence) {
			continue
		}
		if f.Kind == KindEpisode {
			f.ExpiresAt = now.Add(x.cfg.EpisodeTTL)
		}
		out = append(out, Change{Fact: f})
	}
	return out, nil
}

// resolveSubject maps the subject the model gave to the user id stored
// with the fact. For a user fact: no subject means the sender (as the
// prompt asks for the person a memory is about, an omission is the
// speaker); a subject that r.subject maps to a user is that user; anything
// else (an alias of no user, a made-up id, an unknown name) and the bot
// itself (the bot's own memories are global) drop the candidate, since a
// fact stored under the wrong person is worse than one not learned. For
// group and private facts an unresolvable subject or the bot becomes no
// subject; global facts have none.
func (r *renderer) resolveSubject(scope Scope, subject, sender string) (string, bool) {
	if scope == ScopeGlobal {
		return "", true
	}
	if strings.TrimSpace(subject) == "" {
		if scope == ScopeUser {
			return sender, sender != ""
		}
		return "", true
	}
	id, ok := r.subject(subject)
	if ok && id != "" && (r.bot == "" || id != r.bot) {
		return id, true
	}
	return "", scope != ScopeUser
}

func normKey(k string) string {
	k = strings.ToLower(strings.TrimSpace(k))
	return strings.Join(strings.FieldsFunc(k, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '.'
	}), "_")
}

func clamp01(v float64) float64 { return min(max(v, 0), 1) }
