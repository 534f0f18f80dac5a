package persona

import (
	"sync"
	"time"

	"github.com/personakit/persona/clock"
)

// Direct-call registry bounds (SPEC §1.4 step 5).
const (
	directedTTL  = 10 * time.Minute
	directedSize = 256
)

// directedRegistry remembers the newest direct message per (session,
// sender) so that a newer message from the same person can interrupt an
// older reply that is still generating.
type directedRegistry struct {
	clk   clock.Clock
	mu    sync.Mutex
	items map[directedKey]directedCall
}

type directedKey struct{ session, sender string }

type directedCall struct {
	messageID string
	at        time.Time
}

func newDirectedRegistry(clk clock.Clock) *directedRegistry {
	return &directedRegistry{clk: clk, items: map[directedKey]directedCall{}}
}

func (r *directedRegistry) note(session, sender, messageID string) {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items[directedKey{session, sender}] = directedCall{messageID: messageID, at: now}
	if len(r.items) <= directedSize {
		return
	}
	var oldestKey directedKey
	var oldest time.Time
	for k, v := range r.items {
		if now.Sub(v.at) > directedTTL {
			delete(r.items, k)
			continue
		}
		if oldest.IsZero() || v.at.Before(oldest) {
			oldest, oldestKey = v.at, k
		}
	}
	if len(r.items) > directedSize {
		delete(r.items, oldestKey)
	}
}
