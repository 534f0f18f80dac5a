package ledgertest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outbound/ledgertest"
	"github.com/personakit/persona/store"
)

// The suites run from a test of the implementation's package; here the
// SQLite store, which implements outbound.DraftIntentLedger, so both run.
func Example() {
	testLedger := func(t *testing.T) {
		open := func(t *testing.T, clk *clock.Fake) *store.DB {
			db, err := store.Open(t.TempDir()+"/persona.db", store.Options{Clock: clk})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, db.Close()) })
			return db
		}
		ledgertest.Run(t, func(t *testing.T, clk *clock.Fake) outbound.Ledger { return open(t, clk) })
		ledgertest.RunDraftIntent(t, func(t *testing.T, clk *clock.Fake) outbound.DraftIntentLedger {
			return open(t, clk)
		})
	}
	_ = testLedger // func TestLedgerConformance(t *testing.T) { testLedger(t) }
}
