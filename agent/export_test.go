package agent

import "fmt"

// AliaserRegistrations describes everything a has registered, for tests
// that compare two Aliasers.
func AliaserRegistrations(a *Aliaser) string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return fmt.Sprint(a.fwd, a.back, a.users, a.minUserID, a.maxUserID, a.userSum)
}
