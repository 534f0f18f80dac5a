package agent

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// replay registers what an earlier rendering registered, exactly as Alias
// would, and stops where Alias would now answer otherwise.
func TestAliaserReplay(t *testing.T) {
	secret := []byte("a session secret of some length")
	first, err := NewAliaser(secret)
	require.NoError(t, err)
	var regs []aliasReg
	r := renderer{al: first, regs: &regs}
	for _, g := range []struct {
		kind AliasKind
		id   string
	}{{AliasMessage, "m1"}, {AliasUser, "10001"}, {AliasUser, "10002"}, {AliasMessage, "m2"}, {AliasUser, "10001"}} {
		r.alias(g.kind, g.id)
	}
	require.Len(t, regs, 5)
	fresh := func() *Aliaser {
		a, err := NewAliaser(secret)
		require.NoError(t, err)
		return a
	}

	// Nothing in the way: the same registrations, users and fingerprint.
	a := fresh()
	require.Equal(t, 5, a.replay(regs, 8))
	require.Equal(t, AliaserRegistrations(first), AliaserRegistrations(a))
	require.Equal(t, first.userMark(), a.userMark())
	require.Equal(t, first.users["10001"], a.Text("10001"))

	// Another id holds the short alias of 10002 (a collision): replay stops
	// there, and Alias gives 10002 its long alias.
	a = fresh()
	a.Alias(AliasMessage, "m1")
	a.mu.Lock()
	a.register(aliasKey{AliasUser, "other"}, regs[2].alias)
	a.mu.Unlock()
	require.Equal(t, 2, a.replay(regs, 0))
	require.Len(t, a.Alias(AliasUser, "10002"), 2+aliasLongLen)

	// An id registered under another alias already.
	a = fresh()
	a.mu.Lock()
	a.register(aliasKey{AliasUser, "10001"}, "u_something")
	a.mu.Unlock()
	require.Equal(t, 1, a.replay(regs, 0))

	// A long alias was made by a collision that may not exist now.
	long := append([]aliasReg(nil), regs...)
	long[3].short, long[3].alias = false, "m_"+first.fwd[aliasKey{AliasMessage, "m2"}][2:]+"abcdefgh"
	require.Equal(t, 3, fresh().replay(long, 0))
}
