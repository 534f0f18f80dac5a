package agent

import "fmt"

// AliaserRegistrations describes everything a has registered (its own
// registrations and its base layers' together), for tests that compare two
// Aliasers.
func AliaserRegistrations(a *Aliaser) string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	all := &aliasLayer{parent: a.base, fwd: a.fwd, back: a.back, users: a.users, ids: len(a.fwd), nUsers: len(a.users)}
	m := all.merged()
	n, minID, maxID := a.userBounds()
	sum := a.userSum
	if a.base != nil {
		sum += a.base.userSum
	}
	return fmt.Sprint(m.fwd, m.back, m.users, n, minID, maxID, sum)
}
