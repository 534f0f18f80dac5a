package persona

import (
	"container/list"
	"context"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/memory"
)

// The model boundary. Every model call goes through one agent.Private
// model (the pipeline's only Model: the router, review, compression, burst
// classifier, memory extraction and summaries, and the Runner all get it),
// which scrubs ids out of requests and restores them in responses with the
// session's agent.Scope. (The other boundary, the delivery exit every
// chunk leaves through, is wired in delivery.go.)

// scopeCacheSize bounds the sessions whose Scope the pipeline keeps.
const scopeCacheSize = 4096

// scopeHistory is how many of a session's newest history entries a new
// Scope learns the ids of.
const scopeHistory = historyWindow

// scopes is the pipeline's agent.ScopeSource: one Scope per session, made
// from the session's alias secret (kept in the session flags) and taught
// the ids of the session's recent history, kept for the most recently
// used sessions. While a Scope is kept, every event of its session
// teaches it the new ids as it arrives (HandleEvent).
type scopes struct {
	p    *Pipeline
	sums *agent.AliasSums

	mu   sync.Mutex
	m    map[string]*list.Element // session → element holding *scopeEntry
	lru  *list.List
	bots map[string]*botIDs // by "<platform>/<bot id>"
}

// scopeEntry is a kept Scope; learnt is set once it learnt the session's
// recent history (scopeHistory entries, or all there were).
type scopeEntry struct {
	sc     *agent.Scope
	learnt bool
}

// botIDs are the user and group ids a bot has seen in any of its chats:
// an id of one chat typed in another is a known id there too (a group
// number mentioned in a private chat, a member's number passed on), so
// every Scope of the bot looks them up (agent.Scope.SetElsewhere).
type botIDs struct {
	mu  sync.RWMutex
	ids map[string]agent.AliasKind
}

// maxBotIDs bounds the ids kept per bot.
const maxBotIDs = 200_000

func (b *botIDs) add(kind agent.AliasKind, id string) {
	if len(id) < agent.MinScrubLen || id == agent.MentionAll {
		return // too short to be found in text anyway
	}
	b.mu.RLock()
	_, ok := b.ids[id]
	b.mu.RUnlock()
	if ok {
		return
	}
	b.mu.Lock()
	if _, ok := b.ids[id]; !ok && len(b.ids) < maxBotIDs {
		b.ids[id] = kind
	}
	b.mu.Unlock()
}

// lookup reports whether the bot has seen id, and as what.
func (b *botIDs) lookup(id string) (agent.AliasKind, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	k, ok := b.ids[id]
	return k, ok
}

func newScopes(p *Pipeline) *scopes {
	return &scopes{p: p, sums: agent.NewAliasSums(0), m: map[string]*list.Element{}, lru: list.New(), bots: map[string]*botIDs{}}
}

// botOf returns the id set of the bot a session belongs to.
func (s *scopes) botOf(platform, bot string) *botIDs {
	key := platform + "/" + bot
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bots[key]
	if b == nil {
		b = &botIDs{ids: map[string]agent.AliasKind{}}
		s.bots[key] = b
	}
	return b
}

// cached returns the session's kept entry, if any.
func (s *scopes) cached(session string) *scopeEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[session]; ok {
		s.lru.MoveToFront(e)
		return e.Value.(*scopeEntry)
	}
	return nil
}

// Scope returns the session's Scope, making it on first use and teaching
// it the session's recent history (background work, such as memory
// extraction, asks here).
func (s *scopes) Scope(ctx context.Context, session string) (*agent.Scope, error) {
	e, err := s.entry(ctx, session)
	if err != nil {
		return nil, err
	}
	if !s.isLearnt(e) {
		hist, err := memory.RecentOf(ctx, s.p.opt.History, session, scopeHistory)
		if err != nil {
			return nil, fmt.Errorf("persona: scope history: %w", err)
		}
		s.teach(e, hist, scopeHistory)
	}
	return e.sc, nil
}

// forTurn returns the session's Scope for a turn without reading the
// history: the turn teaches it what it reads (teach).
func (s *scopes) forTurn(ctx context.Context, session string) (*scopeEntry, error) {
	return s.entry(ctx, session)
}

func (s *scopes) isLearnt(e *scopeEntry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.learnt
}

// teach makes a Scope that has not learnt its session's history yet learn
// the ids of hist, the session's newest entries as read with a limit of
// asked; once it has learnt a full window (or the whole history) later
// calls do nothing: new events reach it through HandleEvent.
func (s *scopes) teach(e *scopeEntry, hist []memory.Entry, asked int) {
	if e == nil || s.isLearnt(e) {
		return
	}
	for i := range hist {
		e.sc.Learn(&hist[i].Event)
	}
	if asked >= scopeHistory || len(hist) < asked {
		s.mu.Lock()
		e.learnt = true
		s.mu.Unlock()
	}
}

// entry returns the session's kept entry, making one on first use (the
// alias secret read, or created and stored).
func (s *scopes) entry(ctx context.Context, session string) (*scopeEntry, error) {
	if e := s.cached(session); e != nil {
		return e, nil
	}
	secret, err := s.p.sessionValue(ctx, session, flagAliasSecret, func() (string, error) {
		b, err := agent.NewAliasSecret()
		return hex.EncodeToString(b), err
	})
	if err != nil {
		return nil, fmt.Errorf("persona: alias secret: %w", err)
	}
	key, err := hex.DecodeString(secret)
	if err != nil {
		return nil, fmt.Errorf("persona: alias secret: %w", err)
	}
	sc, err := agent.NewScope(session, key, s.sums)
	if err != nil {
		return nil, err
	}
	if sp, err := channel.ParseSessionKey(session); err == nil {
		sc.SetBot(sp.BotID)
		sc.Chat(sp.Chat)
		sc.SetElsewhere(s.botOf(sp.Platform, sp.BotID).lookup)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[session]; ok { // made meanwhile by another turn
		s.lru.MoveToFront(e)
		return e.Value.(*scopeEntry), nil
	}
	e := &scopeEntry{sc: sc}
	s.m[session] = s.lru.PushFront(e)
	for s.lru.Len() > scopeCacheSize {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.m, old.Value.(*scopeEntry).sc.Session())
	}
	return e, nil
}

// learn records the user and group ids of an event that just arrived
// with its bot (every Scope of the bot registers them before its next
// turn), and teaches the session's kept Scope the event's ids at once (a
// Scope made later learns them from the history).
func (s *scopes) learn(ev *channel.Event) {
	b := s.botOf(ev.Platform, ev.BotID)
	if ev.Chat.Kind == channel.Group {
		b.add(agent.AliasGroup, ev.Chat.ID)
	} else {
		b.add(agent.AliasUser, ev.Chat.ID)
	}
	if ev.Sender.ID != ev.BotID {
		b.add(agent.AliasUser, ev.Sender.ID)
	}
	for i := range ev.Segments {
		if ev.Segments[i].Type == channel.SegMention {
			b.add(agent.AliasUser, ev.Segments[i].UserID)
		}
	}
	if q := ev.Quoted; q != nil && q.Sender.ID != ev.BotID {
		b.add(agent.AliasUser, q.Sender.ID)
	}
	if n := ev.Notice; n != nil {
		b.add(agent.AliasUser, n.Operator)
		b.add(agent.AliasUser, n.UserID)
	}
	if e := s.cached(ev.SessionKey); e != nil {
		e.sc.Learn(ev)
	}
}

// purposeModel is the pipeline's Model: the boundary, except for purposes
// a test lets bypass it.
type purposeModel struct {
	p       *Pipeline
	private *agent.PrivateModel
}

func (m purposeModel) Generate(ctx context.Context, req agent.Request) (*agent.Response, error) {
	if m.p.bypass[req.Purpose] {
		return m.private.Unwrap().Generate(ctx, req)
	}
	return m.private.Generate(ctx, req)
}
