package agent

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"io"
	"math/bits"
	"strings"
	"sync"
)

// AliasKind is the kind of a platform id that is aliased in model requests.
type AliasKind byte

// The aliased id kinds; the byte is the alias prefix ("u_…", "g_…", "m_…").
const (
	AliasUser    AliasKind = 'u'
	AliasGroup   AliasKind = 'g'
	AliasMessage AliasKind = 'm'
)

// aliasLen is the number of base32 characters of an alias; aliasLongLen is
// used for the second of two ids whose short aliases collide.
const (
	aliasLen     = 8
	aliasLongLen = 16
)

// MinSecretLen is the minimum session secret length accepted by NewAliaser.
const MinSecretLen = 16

// ErrShortSecret is returned by NewAliaser for a secret shorter than
// MinSecretLen bytes.
var ErrShortSecret = errors.New("agent: alias secret too short")

var aliasEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewAliasSecret returns a fresh random session secret (32 bytes). The
// pipeline creates one per session, stores it with the session, and passes
// it to NewAliaser on every turn so aliases stay stable and the prompt prefix
// keeps hitting the cache.
func NewAliasSecret() ([]byte, error) {
	b := make([]byte, 32)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		return nil, fmt.Errorf("agent: alias secret: %w", err)
	}
	return b, nil
}

type aliasKey struct {
	kind AliasKind
	id   string
}

// Aliaser maps real platform ids (users, groups, messages) to stable
// per-session aliases and back. An alias is the kind letter, an
// underscore and the first 8 base32 characters of HMAC-SHA256(secret,
// kind‖0‖id), e.g. "u_k5x2mbqa". The same secret gives the same aliases on
// every turn, so rendered history is byte-stable.
//
// Every id that is rendered is registered; Restore only maps registered
// aliases back. Known user ids that appear as whole tokens in free text are
// replaced too ([Aliaser.Text]).
//
// One Aliaser is the scope of one turn: the router, classifier, audit and
// agent calls of the turn share it. Methods are safe for concurrent use.
type Aliaser struct {
	secret []byte

	mu    sync.RWMutex
	fwd   map[aliasKey]string
	back  map[string]aliasKey
	users map[string]string // known user id → alias, for free-text replacement
	// minUserID and maxUserID bound the token lengths worth looking up.
	minUserID, maxUserID int
	// userSum fingerprints users (see userMark).
	userSum uint64
	// base, when set, holds earlier registrations below fwd, back and
	// users (see aliasLayer); the fields above are the Aliaser's own.
	base *aliasLayer

	// mac is the keyed hash of sum, made on first use and reset for every
	// id (keying it again per id would cost two hash states).
	macMu sync.Mutex
	mac   hash.Hash

	// sums, when set, keeps the finished aliases across turns (see
	// AliasSums): all, the shared cache; mine, its map for this secret.
	sums *AliasSums
	mine *secretSums
}

// AliasSums keeps finished aliases across Aliasers of the same secrets, so
// that a turn does not hash every id of the history again (every turn
// renders the session's recent messages and each message id has its
// alias). It holds at most the number of aliases given to NewAliasSums and
// starts over when full. Safe for concurrent use; share one among the
// Aliasers of a process (NewAliaserWith).
type AliasSums struct {
	mu      sync.RWMutex
	max, n  int
	secrets map[string]*secretSums
}

// secretSums are the aliases of one secret.
type secretSums struct {
	mu sync.RWMutex
	m  map[aliasKey]aliasPair
}

// aliasPair is an id's alias and the longer one it gets after a collision.
type aliasPair struct{ short, long string }

// DefaultAliasSums is the size NewAliasSums uses for max <= 0.
const DefaultAliasSums = 65536

// NewAliasSums returns an empty cache of at most max aliases (default
// DefaultAliasSums).
func NewAliasSums(max int) *AliasSums {
	if max <= 0 {
		max = DefaultAliasSums
	}
	return &AliasSums{max: max, secrets: make(map[string]*secretSums)}
}

// of returns the aliases of secret, made on first use.
func (c *AliasSums) of(secret []byte) *secretSums {
	c.mu.RLock()
	s := c.secrets[string(secret)]
	c.mu.RUnlock()
	if s != nil {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s = c.secrets[string(secret)]; s == nil {
		s = &secretSums{m: make(map[aliasKey]aliasPair)}
		c.secrets[string(secret)] = s
	}
	return s
}

// counted counts one more alias; past max it starts over (an Aliaser
// holding a secret's dropped map keeps using it for the rest of its turn).
func (c *AliasSums) counted() {
	c.mu.Lock()
	if c.n++; c.n > c.max {
		clear(c.secrets)
		c.n = 1
	}
	c.mu.Unlock()
}

func (s *secretSums) get(k aliasKey) (aliasPair, bool) {
	s.mu.RLock()
	p, ok := s.m[k]
	s.mu.RUnlock()
	return p, ok
}

func (s *secretSums) put(k aliasKey, p aliasPair) {
	s.mu.Lock()
	s.m[k] = p
	s.mu.Unlock()
}

// NewAliaserWith is NewAliaser with a shared cache of finished aliases
// (nil: none). The aliases are the same as NewAliaser's.
func NewAliaserWith(secret []byte, sums *AliasSums) (*Aliaser, error) {
	a, err := NewAliaser(secret)
	if err != nil {
		return nil, err
	}
	if sums != nil {
		a.sums, a.mine = sums, sums.of(secret)
	}
	return a, nil
}

// NewAliaser returns an Aliaser for a session secret (at least
// MinSecretLen bytes; see NewAliasSecret).
func NewAliaser(secret []byte) (*Aliaser, error) {
	if len(secret) < MinSecretLen {
		return nil, ErrShortSecret
	}
	return &Aliaser{
		secret: bytes.Clone(secret),
		fwd:    make(map[aliasKey]string),
		back:   make(map[string]aliasKey),
		users:  make(map[string]string),
	}, nil
}

// User registers a user id as a known participant and returns its alias.
// An empty id and MentionAll return "".
func (a *Aliaser) User(id string) string { return a.Alias(AliasUser, id) }

// Group registers a group id and returns its alias.
func (a *Aliaser) Group(id string) string { return a.Alias(AliasGroup, id) }

// Message registers a message id and returns its alias.
func (a *Aliaser) Message(id string) string { return a.Alias(AliasMessage, id) }

// Alias registers id under kind and returns its alias ("" for an empty id
// and for the user id MentionAll, which names no one: registered, the word
// would be replaced wherever Text meets it).
func (a *Aliaser) Alias(kind AliasKind, id string) string {
	if id == "" || kind == AliasUser && id == MentionAll {
		return ""
	}
	k := aliasKey{kind, id}
	a.mu.RLock()
	s, ok := a.getFwd(k)
	a.mu.RUnlock()
	if ok {
		return s
	}
	pair := a.pair(kind, id)
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.getFwd(k); ok {
		return s
	}
	s = pair.short
	if other, taken := a.getBack(s); taken && other != k {
		// A 40-bit collision within one session: the later id gets the
		// longer alias. Both stay restorable.
		s = pair.long
	}
	a.register(k, s)
	return s
}

// register records alias s for k; a.mu must be held for writing.
func (a *Aliaser) register(k aliasKey, s string) {
	a.fwd[k] = s
	a.back[s] = k
	if k.kind == AliasUser {
		a.users[k.id] = s
		if a.minUserID == 0 || len(k.id) < a.minUserID {
			a.minUserID = len(k.id)
		}
		a.maxUserID = max(a.maxUserID, len(k.id))
		a.userSum += userPairSum(k.id, s)
	}
}

// userSeed keys the user fingerprints of this process.
var userSeed = maphash.MakeSeed()

// userPairSum is one known user's share of userSum.
func userPairSum(id, alias string) uint64 {
	h := maphash.String(userSeed, id)
	return h ^ bits.RotateLeft64(maphash.String(userSeed, alias), 29) ^ bits.RotateLeft64(h, 43)*0x9e3779b97f4a7c15
}

// userMark identifies the known users of an Aliaser (ids and aliases): the
// free-text replacement of Text depends on nothing else. Equal marks mean
// equal sets except with negligible probability (a 64-bit sum of keyed
// hashes).
type userMark struct {
	n   int
	sum uint64
}

// userMark returns the mark of the users known now.
func (a *Aliaser) userMark() userMark {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if b := a.base; b != nil {
		return userMark{len(a.users) + b.nUsers, a.userSum + b.userSum}
	}
	return userMark{len(a.users), a.userSum}
}

// replay registers regs (made by an earlier rendering) again, in order, as
// Alias would, and returns how many it registered: it stops before the
// first one whose alias Alias would not return now (its id has another
// alias in this scope, its short alias is taken, or it was a long one,
// which only a collision gives), so that the caller renders from there.
// An Aliaser with nothing registered sizes its maps for hint ids first.
func (a *Aliaser) replay(regs []aliasReg, hint int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.fwd) == 0 && hint > 0 {
		a.fwd, a.back = make(map[aliasKey]string, hint), make(map[string]aliasKey, hint)
	}
	for i, g := range regs {
		k := aliasKey{g.kind, g.id}
		if s, ok := a.getFwd(k); ok {
			if s != g.alias {
				return i
			}
			continue
		}
		if !g.short {
			return i
		}
		if _, taken := a.getBack(g.alias); taken {
			return i
		}
		a.register(k, g.alias)
	}
	return len(regs)
}

// pair returns id's alias and its longer form, from the shared cache when
// there is one.
func (a *Aliaser) pair(kind AliasKind, id string) aliasPair {
	k := aliasKey{kind, id}
	if a.mine != nil {
		if p, ok := a.mine.get(k); ok {
			return p
		}
	}
	sum := a.hash(kind, id)
	p := aliasPair{short: string(kind) + "_" + sum[:aliasLen], long: string(kind) + "_" + sum[:aliasLongLen]}
	if a.mine != nil {
		a.sums.counted()
		a.mine.put(k, p)
	}
	return p
}

// hash returns the first aliasLongLen base32 characters of
// HMAC-SHA256(secret, kind‖0‖id).
func (a *Aliaser) hash(kind AliasKind, id string) string {
	var sum [sha256.Size]byte
	a.macMu.Lock()
	if a.mac == nil {
		a.mac = hmac.New(sha256.New, a.secret)
	} else {
		a.mac.Reset()
	}
	a.mac.Write([]byte{byte(kind), 0})
	_, _ = io.WriteString(a.mac, id)
	a.mac.Sum(sum[:0])
	a.macMu.Unlock()
	// Only the first aliasLongLen characters are ever used.
	var enc [(sha256.Size*8 + 4) / 5]byte
	aliasEncoding.Encode(enc[:], sum[:])
	return string(enc[:aliasLongLen])
}

// Lookup returns the real id and kind behind a registered alias.
func (a *Aliaser) Lookup(alias string) (kind AliasKind, id string, ok bool) {
	a.mu.RLock()
	k, ok := a.getBack(alias)
	a.mu.RUnlock()
	return k.kind, k.id, ok
}

// isWordByte reports whether c belongs to a token: ASCII letters, digits
// and '_'. Bytes ≥ 0x80 (non-ASCII text) are separators, so ids next to CJK
// text are still found.
func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Text replaces every known user id that appears in s as a whole token (a
// maximal run of ASCII letters, digits and '_', optionally with a leading
// '-' when the id has one) by its alias. Other text is unchanged.
func (a *Aliaser) Text(s string) string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	n, minID, maxID := a.userBounds()
	if n == 0 {
		return s
	}
	return replaceTokens(s, func(tok string, dash bool) (string, bool, bool) {
		if n := len(tok); n+1 < minID || n > maxID {
			return "", false, false
		}
		if dash {
			if al, ok := a.getUser("-" + tok); ok {
				return al, true, true
			}
		}
		al, ok := a.getUser(tok)
		return al, false, ok
	})
}

// replaceTokens calls f for every token of s (a maximal run of ASCII
// letters, digits and '_') with whether a lone '-' precedes it. When f
// reports ok the token, and the '-' too when f says withDash, is replaced by
// rep. It allocates only when something changes.
func replaceTokens(s string, f func(tok string, dash bool) (rep string, withDash, ok bool)) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !isWordByte(s[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && isWordByte(s[j]) {
			j++
		}
		dash := i > 0 && s[i-1] == '-' && (i == 1 || !isWordByte(s[i-2]))
		if rep, withDash, ok := f(s[i:j], dash); ok {
			start := i
			if withDash {
				start = i - 1
			}
			if last == 0 {
				b.Grow(len(s) + 16)
			}
			b.WriteString(s[last:start])
			b.WriteString(rep)
			last = j
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// looksLikeAlias reports whether tok has the shape of an alias: a kind
// letter, '_' and 8 or 16 base32 characters.
func looksLikeAlias(tok string) bool {
	if len(tok) != 2+aliasLen && len(tok) != 2+aliasLongLen {
		return false
	}
	switch AliasKind(tok[0]) {
	case AliasUser, AliasGroup, AliasMessage:
	default:
		return false
	}
	if tok[1] != '_' {
		return false
	}
	for i := 2; i < len(tok); i++ {
		c := tok[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// Restore replaces every registered alias in s (as a whole token) by its
// real id. Tokens that look like aliases but are not registered in this
// scope are left as they are and returned in unknown, for the caller to log.
func (a *Aliaser) Restore(s string) (restored string, unknown []string) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := replaceTokens(s, func(tok string, _ bool) (string, bool, bool) {
		if !looksLikeAlias(tok) {
			return "", false, false
		}
		if k, ok := a.getBack(tok); ok {
			return k.id, false, true
		}
		unknown = append(unknown, tok)
		return "", false, false
	})
	return out, unknown
}

// RestoreJSON restores aliases in every string (object keys included) of a
// JSON value, recursively, and re-encodes it. Numbers keep their text.
// Invalid JSON is returned unchanged with an error.
func (a *Aliaser) RestoreJSON(raw json.RawMessage) (json.RawMessage, []string, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return raw, nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw, nil, fmt.Errorf("agent: restore aliases: %w", err)
	}
	if dec.More() {
		return raw, nil, errors.New("agent: restore aliases: trailing data after JSON value")
	}
	var unknown []string
	changed := false
	v = a.restoreValue(v, &unknown, &changed)
	if !changed {
		return raw, unknown, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return raw, unknown, fmt.Errorf("agent: restore aliases: %w", err)
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n")), unknown, nil
}

func (a *Aliaser) restoreValue(v any, unknown *[]string, changed *bool) any {
	switch x := v.(type) {
	case string:
		s, u := a.Restore(x)
		*unknown = append(*unknown, u...)
		if s != x {
			*changed = true
		}
		return s
	case []any:
		for i := range x {
			x[i] = a.restoreValue(x[i], unknown, changed)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			nk, u := a.Restore(k)
			*unknown = append(*unknown, u...)
			if nk != k {
				*changed = true
			}
			out[nk] = a.restoreValue(val, unknown, changed)
		}
		return out
	default:
		return v
	}
}

// RestoreToolCalls returns copies of calls with aliases restored in their
// arguments (through the JSON values, see RestoreJSON). A call whose
// arguments are not valid JSON keeps them unchanged (the loop's repair
// handles it); that error is not returned.
func (a *Aliaser) RestoreToolCalls(calls []ToolCall) ([]ToolCall, []string) {
	if calls == nil {
		return nil, nil
	}
	out := make([]ToolCall, len(calls))
	var unknown []string
	for i, tc := range calls {
		args, u, err := a.RestoreJSON(tc.Arguments)
		if err == nil {
			tc.Arguments = args
		}
		unknown = append(unknown, u...)
		out[i] = tc
	}
	return out, unknown
}

// RestoreResponse restores aliases in a response's text and tool-call
// arguments in place, and returns the unknown aliases it met.
func (a *Aliaser) RestoreResponse(r *Response) []string {
	if r == nil {
		return nil
	}
	var unknown []string
	r.Text, unknown = a.Restore(r.Text)
	var u []string
	r.ToolCalls, u = a.RestoreToolCalls(r.ToolCalls)
	return append(unknown, u...)
}
