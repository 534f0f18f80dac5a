package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/personakit/persona/channel"
)

// MinScrubLen is the shortest id that Scope.Scrub replaces when it is
// typed in free text. Shorter ids (Telegram message ids count up from 1 in
// every chat) are too easily an ordinary number; they are still aliased
// wherever a prompt renders them as ids.
const MinScrubLen = 5

// MentionAll is the user id adapters put in a mention of everyone in the
// chat (OneBot's "at all", Telegram's nothing). It is never aliased.
const MentionAll = "all"

// maxScopeIDs bounds the ids one Scope keeps; past it the Scope starts
// over (the next turn registers what it renders again).
const maxScopeIDs = 50_000

// Scope is the model-facing identity of one session: every platform id
// the session has shown (participants, the chat itself, the bot, message
// ids) with its stable alias, and the participants' display names. All
// model calls made for a session go through its Scope (see [Private]):
// ids typed in the text of a request are replaced by their aliases, and
// aliases in the response are turned back into ids, so no model ever sees
// a real id and no caller ever sees an alias.
//
// Aliases come from the session secret (HMAC, see [Aliaser]), so they are
// the same in every call of every kind, in this process and after a
// restart. A Scope is safe for concurrent use.
type Scope struct {
	session string

	mu    sync.RWMutex
	al    *Aliaser
	sums  *AliasSums
	key   []byte
	bot   string
	known map[string]string // scrubbable id → alias (the first kind registered wins)
	names map[string]string // user id → display name (the last one seen)
	// byName maps a folded display name to its user id; "" marks a name
	// two participants share.
	byName         map[string]string
	minLen, maxLen int
	// elsewhere, when set, knows ids the session has not shown (another
	// chat's participants): Scrub registers one when it meets it.
	elsewhere func(id string) (AliasKind, bool)
}

// SetElsewhere gives the Scope a lookup of ids known outside its session
// (the participants and chats the bot has seen in its other chats): Scrub
// replaces such an id too when it is typed in text, registering it as the
// kind the lookup reports. It is consulted only for tokens the Scope does
// not know, so it may be shared by many Scopes.
func (s *Scope) SetElsewhere(f func(id string) (AliasKind, bool)) {
	s.mu.Lock()
	s.elsewhere = f
	s.mu.Unlock()
}

// NewScope returns the Scope of a session from the session's alias secret
// (see NewAliasSecret) and an optional shared cache of finished aliases.
func NewScope(sessionKey string, secret []byte, sums *AliasSums) (*Scope, error) {
	al, err := NewAliaserWith(secret, sums)
	if err != nil {
		return nil, err
	}
	return &Scope{session: sessionKey, al: al, sums: sums, key: bytes.Clone(secret),
		known: make(map[string]string), names: make(map[string]string), byName: make(map[string]string)}, nil
}

// Session returns the session key the Scope belongs to.
func (s *Scope) Session() string { return s.session }

// NewAliaser returns a fresh Aliaser with the Scope's secret: its aliases
// are the Scope's. A turn's prompt is rendered through one.
func (s *Scope) NewAliaser() *Aliaser {
	al, _ := NewAliaserWith(s.key, s.sums) // the key was accepted by NewScope
	return al
}

// Alias registers id under kind and returns its alias ("" for an empty id
// and for MentionAll).
func (s *Scope) Alias(kind AliasKind, id string) string {
	if id == "" || (kind == AliasUser && id == MentionAll) {
		return ""
	}
	s.mu.RLock()
	al := s.al
	s.mu.RUnlock()
	a := al.Alias(kind, id)
	s.mu.RLock()
	_, seen := s.known[id]
	s.mu.RUnlock()
	if !seen && scrubbable(id) {
		s.mu.Lock()
		if _, ok := s.known[id]; !ok {
			if len(s.known) >= maxScopeIDs {
				s.resetLocked()
			}
			s.known[id] = a
			n := len(strings.TrimPrefix(id, "-"))
			if s.minLen == 0 || n < s.minLen {
				s.minLen = n
			}
			s.maxLen = max(s.maxLen, n)
		}
		s.mu.Unlock()
	}
	return a
}

// resetLocked starts the Scope over; s.mu must be held for writing.
func (s *Scope) resetLocked() {
	s.al = s.NewAliaser()
	clear(s.known)
	s.minLen, s.maxLen = 0, 0
	if s.bot != "" {
		s.known[s.bot] = s.al.User(s.bot)
	}
}

// scrubbable reports whether id can be found as a whole token in text: at
// least MinScrubLen characters of ASCII letters, digits and '_' (with an
// optional leading '-').
func scrubbable(id string) bool {
	t := strings.TrimPrefix(id, "-")
	if len(t) < MinScrubLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if !isWordByte(t[i]) {
			return false
		}
	}
	return true
}

// User registers a user id and returns its alias.
func (s *Scope) User(id string) string { return s.Alias(AliasUser, id) }

// Group registers a group id and returns its alias.
func (s *Scope) Group(id string) string { return s.Alias(AliasGroup, id) }

// Message registers a message id and returns its alias.
func (s *Scope) Message(id string) string { return s.Alias(AliasMessage, id) }

// SetBot registers the bot's own account id and returns its alias.
func (s *Scope) SetBot(id string) string {
	a := s.User(id)
	s.mu.Lock()
	s.bot = id
	s.mu.Unlock()
	return a
}

// Bot returns the bot's alias ("" before SetBot or Learn saw it).
func (s *Scope) Bot() string {
	s.mu.RLock()
	bot := s.bot
	s.mu.RUnlock()
	if bot == "" {
		return ""
	}
	return s.User(bot)
}

// Chat registers the chat's id (a group, or the peer of a private chat)
// and returns its alias.
func (s *Scope) Chat(c channel.Chat) string {
	if c.Kind == channel.Private {
		return s.User(c.ID)
	}
	return s.Group(c.ID)
}

// Name records a participant's display name.
func (s *Scope) Name(userID, name string) {
	name = strings.TrimSpace(name)
	if userID == "" || name == "" || name == userID {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names[userID] == name {
		return
	}
	if old := s.names[userID]; old != "" && s.byName[fold(old)] == userID {
		delete(s.byName, fold(old))
	}
	s.names[userID] = name
	f := fold(name)
	if other, ok := s.byName[f]; ok && other != userID {
		s.byName[f] = "" // two people share the name: it names neither
		return
	}
	s.byName[f] = userID
}

func fold(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// DisplayName returns the last display name seen for a user ("" if none).
func (s *Scope) DisplayName(userID string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.names[userID]
}

// UserByName returns the participant whose display name is name (case
// folded), when exactly one participant has it.
func (s *Scope) UserByName(name string) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	id, ok := s.byName[fold(name)]
	return id, ok && id != ""
}

// Known reports whether id is registered (as any kind) and its alias.
func (s *Scope) Known(id string) (alias string, ok bool) {
	s.mu.RLock()
	a, ok := s.known[id]
	al := s.al
	s.mu.RUnlock()
	if ok {
		return a, true
	}
	for _, k := range [...]AliasKind{AliasUser, AliasGroup, AliasMessage} {
		al.mu.RLock()
		a, ok = al.getFwd(aliasKey{k, id})
		al.mu.RUnlock()
		if ok {
			return a, true
		}
	}
	return "", false
}

// Learn registers every id an event shows: the chat, the bot, the sender
// (with the display name), mentioned users, the quoted message and its
// sender, the message itself and a notice's users and target.
func (s *Scope) Learn(ev *channel.Event) {
	if ev.BotID != "" {
		s.mu.RLock()
		bot := s.bot
		s.mu.RUnlock()
		if bot != ev.BotID {
			s.SetBot(ev.BotID)
		}
	}
	if ev.Chat.ID != "" {
		s.Chat(ev.Chat)
	}
	if ev.Sender.ID != "" {
		s.User(ev.Sender.ID)
		if ev.Kind != channel.KindSelf && ev.Sender.ID != ev.BotID {
			s.Name(ev.Sender.ID, ev.Sender.Name)
		}
	}
	s.Message(ev.MessageID)
	for i := range ev.Segments {
		switch sg := &ev.Segments[i]; sg.Type {
		case channel.SegMention:
			s.User(sg.UserID)
		case channel.SegQuote, channel.SegForward:
			s.Message(sg.MessageID)
		}
	}
	if q := ev.Quoted; q != nil {
		s.Message(q.MessageID)
		if q.Sender.ID != "" {
			s.User(q.Sender.ID)
			if !q.FromBot && q.Sender.ID != ev.BotID {
				s.Name(q.Sender.ID, q.Sender.Name)
			}
		}
		for i := range q.Segments {
			if q.Segments[i].Type == channel.SegMention {
				s.User(q.Segments[i].UserID)
			}
		}
	}
	if n := ev.Notice; n != nil {
		s.User(n.Operator)
		s.User(n.UserID)
		s.Message(n.TargetMessageID)
	}
}

// Scrub replaces every registered id that appears in text as a whole token
// (a maximal run of ASCII letters, digits and '_', with a leading '-' when
// the id has one) by its alias. Ids shorter than MinScrubLen are left
// alone. Other text is unchanged.
func (s *Scope) Scrub(text string) string {
	out, found := s.scrub(text)
	if len(found) == 0 {
		return out
	}
	// Ids known elsewhere: registered now, replaced in a second pass.
	for _, f := range found {
		s.Alias(f.kind, f.id)
	}
	out, _ = s.scrub(text)
	return out
}

// scrub replaces the ids the Scope knows and returns the ones only its
// elsewhere lookup knows.
func (s *Scope) scrub(text string) (string, []aliasKey) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.known) == 0 && s.elsewhere == nil {
		return text, nil
	}
	minLen, maxLen := s.minLen, s.maxLen
	var found []aliasKey
	out := replaceTokens(text, func(tok string, dash bool) (string, bool, bool) {
		n := len(tok)
		if n < MinScrubLen {
			return "", false, false
		}
		if n >= minLen && n <= maxLen {
			if dash {
				if a, ok := s.known["-"+tok]; ok {
					return a, true, true
				}
			}
			if a, ok := s.known[tok]; ok {
				return a, false, true
			}
		}
		if s.elsewhere != nil {
			if dash {
				if k, ok := s.elsewhere("-" + tok); ok {
					found = append(found, aliasKey{k, "-" + tok})
					return "", false, false
				}
			}
			if k, ok := s.elsewhere(tok); ok {
				found = append(found, aliasKey{k, tok})
			}
		}
		return "", false, false
	})
	return out, found
}

// Restore replaces every alias of the Scope (or of the extra Aliasers,
// consulted first) that appears in text as a whole token by its id.
// Alias-shaped tokens nobody registered are left and returned in unknown.
func (s *Scope) Restore(text string, extra ...*Aliaser) (restored string, unknown []string) {
	s.mu.RLock()
	al := s.al
	s.mu.RUnlock()
	out := replaceTokens(text, func(tok string, _ bool) (string, bool, bool) {
		if !looksLikeAlias(tok) {
			return "", false, false
		}
		for _, x := range extra {
			if x == nil {
				continue
			}
			if _, id, ok := x.Lookup(tok); ok {
				return id, false, true
			}
		}
		if _, id, ok := al.Lookup(tok); ok {
			return id, false, true
		}
		unknown = append(unknown, tok)
		return "", false, false
	})
	return out, unknown
}

// Lookup returns the id and kind behind one of the Scope's aliases.
func (s *Scope) Lookup(alias string) (AliasKind, string, bool) {
	s.mu.RLock()
	al := s.al
	s.mu.RUnlock()
	return al.Lookup(alias)
}

// ScrubRequest returns a copy of req as a model may see it: the text of
// every message (content, author name, tool-call arguments, including ids
// written as JSON numbers) scrubbed, and image parts that are not inline
// data dropped (a remote media URL can carry ids and credentials; media
// reach a model as bytes). req is not changed.
func (s *Scope) ScrubRequest(req Request) Request {
	msgs := make([]Message, len(req.Messages))
	for i, m := range req.Messages {
		m.Content = s.Scrub(m.Content)
		m.Name = s.Scrub(m.Name)
		if len(m.ToolCalls) > 0 {
			calls := make([]ToolCall, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				tc.Arguments = s.scrubJSON(tc.Arguments)
				calls[j] = tc
			}
			m.ToolCalls = calls
		}
		if len(m.Parts) > 0 {
			var parts []Part
			for _, p := range m.Parts {
				if strings.HasPrefix(p.ImageURL, "data:") {
					parts = append(parts, p)
				}
			}
			m.Parts = parts
		}
		msgs[i] = m
	}
	req.Messages = msgs
	return req
}

// scrubJSON scrubs the strings (and object keys) of a JSON value and turns
// numbers that are registered ids into their aliases (as strings). Text
// that is not JSON is scrubbed as text.
func (s *Scope) scrubJSON(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return json.RawMessage(s.Scrub(string(raw)))
	}
	changed := false
	v = s.scrubValue(v, &changed)
	if !changed {
		return raw
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return json.RawMessage(s.Scrub(string(raw)))
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n"))
}

func (s *Scope) scrubValue(v any, changed *bool) any {
	switch x := v.(type) {
	case string:
		y := s.Scrub(x)
		if y != x {
			*changed = true
		}
		return y
	case json.Number:
		if y := s.Scrub(string(x)); y != string(x) {
			*changed = true
			return y // a string now: the alias
		}
		return x
	case []any:
		for i := range x {
			x[i] = s.scrubValue(x[i], changed)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			nk := s.Scrub(k)
			if nk != k {
				*changed = true
			}
			out[nk] = s.scrubValue(val, changed)
		}
		return out
	}
	return v
}

// RestoreResponse returns a copy of resp with aliases turned back into ids
// in its text and tool-call arguments (the extra Aliasers are consulted
// first, see Restore). It returns the alias-shaped tokens nobody
// registered.
func (s *Scope) RestoreResponse(resp *Response, extra ...*Aliaser) (*Response, []string) {
	if resp == nil {
		return nil, nil
	}
	out := *resp
	var unknown []string
	out.Text, unknown = s.Restore(resp.Text, extra...)
	if len(resp.ToolCalls) > 0 {
		out.ToolCalls = make([]ToolCall, len(resp.ToolCalls))
		for i, tc := range resp.ToolCalls {
			args, u := s.restoreJSON(tc.Arguments, extra)
			tc.Arguments = args
			unknown = append(unknown, u...)
			out.ToolCalls[i] = tc
		}
	}
	return &out, unknown
}

// restoreJSON restores aliases in the strings of a JSON value; text that
// is not JSON is restored as text.
func (s *Scope) restoreJSON(raw json.RawMessage, extra []*Aliaser) (json.RawMessage, []string) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return raw, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		t, u := s.Restore(string(raw), extra...)
		return json.RawMessage(t), u
	}
	var unknown []string
	changed := false
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			y, u := s.Restore(x, extra...)
			unknown = append(unknown, u...)
			if y != x {
				changed = true
			}
			return y
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
			return x
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, val := range x {
				nk, u := s.Restore(k, extra...)
				unknown = append(unknown, u...)
				if nk != k {
					changed = true
				}
				out[nk] = walk(val)
			}
			return out
		}
		return v
	}
	v = walk(v)
	if !changed {
		return raw, unknown
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return raw, unknown
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n")), unknown
}

// ScopeSource gives the Scope of a session (the pipeline keeps one alias
// secret per session and one Scope per active session).
type ScopeSource interface {
	Scope(ctx context.Context, sessionKey string) (*Scope, error)
}

// ScopeSourceFunc adapts a function to a ScopeSource.
type ScopeSourceFunc func(ctx context.Context, sessionKey string) (*Scope, error)

// Scope calls f.
func (f ScopeSourceFunc) Scope(ctx context.Context, sessionKey string) (*Scope, error) {
	return f(ctx, sessionKey)
}

type (
	scopeCtxKey   struct{}
	aliaserCtxKey struct{}
	sessionCtxKey struct{}
)

// WithScope returns a context carrying a session's Scope: model calls made
// with it through [Private] are scrubbed and restored with that Scope.
func WithScope(ctx context.Context, s *Scope) context.Context {
	return context.WithValue(ctx, scopeCtxKey{}, s)
}

// ScopeFrom returns the Scope ctx carries (nil if none).
func ScopeFrom(ctx context.Context) *Scope {
	s, _ := ctx.Value(scopeCtxKey{}).(*Scope)
	return s
}

// WithAliaser returns a context carrying the Aliaser a prompt was rendered
// with, so that [Private] restores the aliases it registered (the same as
// the Scope's except after a collision, which it resolves its own way).
func WithAliaser(ctx context.Context, al *Aliaser) context.Context {
	return context.WithValue(ctx, aliaserCtxKey{}, al)
}

// AliaserFrom returns the Aliaser ctx carries (nil if none).
func AliaserFrom(ctx context.Context) *Aliaser {
	al, _ := ctx.Value(aliaserCtxKey{}).(*Aliaser)
	return al
}

// WithSession returns a context naming the session a model call is made
// for, for work that has no Scope at hand (background jobs): [Private]
// asks its ScopeSource for the session's Scope.
func WithSession(ctx context.Context, sessionKey string) context.Context {
	return context.WithValue(ctx, sessionCtxKey{}, sessionKey)
}

// SessionFrom returns the session key ctx names: its Scope's, else the one
// WithSession set ("" if none).
func SessionFrom(ctx context.Context) string {
	if s := ScopeFrom(ctx); s != nil {
		return s.session
	}
	k, _ := ctx.Value(sessionCtxKey{}).(string)
	return k
}

// ErrNoScope is wrapped by the error a [Private] model returns for a call
// made outside any session: it would not know which ids to hide.
var ErrNoScope = errors.New("agent: model call outside a session scope")

// Private returns the aliasing boundary around m: every request is
// scrubbed with the session's Scope before m sees it (ids typed in text
// become aliases, remote image URLs are dropped), and every response comes
// back with the aliases turned into ids again. The Scope is the one ctx
// carries (WithScope), else src's Scope for the session ctx names
// (WithSession). A call with neither fails with an *Error of kind
// KindInvalidRequest wrapping ErrNoScope, so a forgotten scope is an error,
// never a leak.
func Private(m Model, src ScopeSource) *PrivateModel {
	return &PrivateModel{m: m, src: src}
}

// PrivateModel is the Model Private returns.
type PrivateModel struct {
	m   Model
	src ScopeSource
}

// Unwrap returns the model behind the boundary.
func (p *PrivateModel) Unwrap() Model { return p.m }

// Generate scrubs req, calls the model and restores the response.
func (p *PrivateModel) Generate(ctx context.Context, req Request) (*Response, error) {
	sc := ScopeFrom(ctx)
	if sc == nil {
		key := SessionFrom(ctx)
		if key == "" || p.src == nil {
			return nil, &Error{Kind: KindInvalidRequest, Message: "no session scope for a " + req.Purpose + " call", Err: ErrNoScope}
		}
		var err error
		if sc, err = p.src.Scope(ctx, key); err != nil {
			return nil, err
		}
		if sc == nil {
			return nil, &Error{Kind: KindInvalidRequest, Message: "no session scope for " + key, Err: ErrNoScope}
		}
	}
	resp, err := p.m.Generate(ctx, sc.ScrubRequest(req))
	if resp == nil {
		return nil, err
	}
	out, _ := sc.RestoreResponse(resp, AliaserFrom(ctx))
	return out, err
}

// MatchName finds the participant whose display name starts text (case
// folded; the longest name that only one participant has wins). It
// returns the user id and the length in bytes of the name in text.
func (s *Scope) MatchName(text string) (userID string, n int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	lower := strings.ToLower(text)
	for f, id := range s.byName {
		if id == "" || len(f) <= n || !strings.HasPrefix(lower, f) {
			continue
		}
		// ToLower may change byte lengths only outside ASCII; map the
		// folded length back onto text.
		m := len(f)
		if len(lower) != len(text) {
			m = foldedPrefixLen(text, f)
			if m < 0 {
				continue
			}
		}
		userID, n = id, m
	}
	return userID, n
}

// foldedPrefixLen returns the length of the prefix of text whose lower
// case is f (-1 if none).
func foldedPrefixLen(text, f string) int {
	for i := range text {
		if strings.ToLower(text[:i]) == f {
			return i
		}
	}
	if strings.ToLower(text) == f {
		return len(text)
	}
	return -1
}

// IsUser reports whether id is registered as a user (a participant or
// the bot).
func (s *Scope) IsUser(id string) bool {
	s.mu.RLock()
	al := s.al
	s.mu.RUnlock()
	al.mu.RLock()
	defer al.mu.RUnlock()
	_, ok := al.getFwd(aliasKey{AliasUser, id})
	return ok
}
