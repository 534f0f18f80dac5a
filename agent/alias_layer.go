package agent

// aliasLayer is a frozen set of registrations under an Aliaser's own: a
// session's rendered history registers the same ids turn after turn, so
// the history cache hands the next turn's Aliaser the registrations of the
// last one as its base instead of making them again (see historyCache).
// A layer never changes once made, so Aliasers of several turns may share
// it; each layer adds to its parent, and ids are unique across a chain
// (Alias looks at every layer before it registers).
type aliasLayer struct {
	parent *aliasLayer
	depth  int // the number of parents
	fwd    map[aliasKey]string
	back   map[string]aliasKey
	users  map[string]string
	// Totals over the layer and its parents.
	ids, nUsers          int
	minUserID, maxUserID int
	userSum              uint64
}

// maxLayerDepth bounds the chain a lookup walks: a layer with this many
// parents is merged into one.
const maxLayerDepth = 8

// chainGet looks k up in own, then in each layer of base's chain (m picks
// a layer's map).
func chainGet[K comparable, V any](own map[K]V, base *aliasLayer, m func(*aliasLayer) map[K]V, k K) (V, bool) {
	if v, ok := own[k]; ok {
		return v, true
	}
	for l := base; l != nil; l = l.parent {
		if v, ok := m(l)[k]; ok {
			return v, true
		}
	}
	var zero V
	return zero, false
}

func layerFwd(l *aliasLayer) map[aliasKey]string  { return l.fwd }
func layerBack(l *aliasLayer) map[string]aliasKey { return l.back }
func layerUsers(l *aliasLayer) map[string]string  { return l.users }

// getFwd returns k's alias. a.mu must be held.
func (a *Aliaser) getFwd(k aliasKey) (string, bool) { return chainGet(a.fwd, a.base, layerFwd, k) }

// getBack returns the key registered under alias s. a.mu must be held.
func (a *Aliaser) getBack(s string) (aliasKey, bool) { return chainGet(a.back, a.base, layerBack, s) }

// getUser returns a known user's alias. a.mu must be held.
func (a *Aliaser) getUser(id string) (string, bool) { return chainGet(a.users, a.base, layerUsers, id) }

// userBounds returns the number of known users and the shortest and
// longest of their ids. a.mu must be held.
func (a *Aliaser) userBounds() (n, minID, maxID int) {
	n, minID, maxID = len(a.users), a.minUserID, a.maxUserID
	if b := a.base; b != nil && b.nUsers > 0 {
		n += b.nUsers
		if minID == 0 || b.minUserID < minID {
			minID = b.minUserID
		}
		maxID = max(maxID, b.maxUserID)
	}
	return n, minID, maxID
}

// empty reports whether nothing is registered.
func (a *Aliaser) empty() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.fwd) == 0 && a.base == nil
}

// setBase makes l the registrations of an Aliaser that has none and
// reports true; otherwise it changes nothing and reports false.
func (a *Aliaser) setBase(l *aliasLayer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.fwd) != 0 || a.base != nil {
		return false
	}
	a.base = l
	return true
}

// freeze turns the registrations made so far into a layer, which it
// returns (nil when there are none), and goes on with empty maps of its
// own on top of it. The Aliaser behaves as before.
func (a *Aliaser) freeze() *aliasLayer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.fwd) == 0 {
		return a.base
	}
	l := &aliasLayer{parent: a.base, fwd: a.fwd, back: a.back, users: a.users,
		ids: len(a.fwd), nUsers: len(a.users), minUserID: a.minUserID, maxUserID: a.maxUserID, userSum: a.userSum}
	if b := a.base; b != nil {
		l.depth = b.depth + 1
		l.ids += b.ids
		n, minID, maxID := a.userBounds()
		l.nUsers, l.minUserID, l.maxUserID = n, minID, maxID
		l.userSum += b.userSum
	}
	if l.depth >= maxLayerDepth {
		l = l.merged()
	}
	a.base = l
	a.fwd, a.back, a.users = make(map[aliasKey]string), make(map[string]aliasKey), make(map[string]string)
	a.minUserID, a.maxUserID, a.userSum = 0, 0, 0
	return l
}

// merged returns l's chain as one layer.
func (l *aliasLayer) merged() *aliasLayer {
	m := &aliasLayer{fwd: make(map[aliasKey]string, l.ids), back: make(map[string]aliasKey, l.ids),
		users: make(map[string]string, l.nUsers), ids: l.ids, nUsers: l.nUsers,
		minUserID: l.minUserID, maxUserID: l.maxUserID, userSum: l.userSum}
	for x := l; x != nil; x = x.parent {
		for k, v := range x.fwd {
			m.fwd[k] = v
		}
		for k, v := range x.back {
			m.back[k] = v
		}
		for k, v := range x.users {
			m.users[k] = v
		}
	}
	return m
}
