package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outbound/ledgertest"
	"github.com/personakit/persona/store"
)

// openLedgerDB opens an SQLite store in a fresh temporary directory with
// clk as its clock.
func openLedgerDB(t *testing.T, clk clock.Clock) *store.DB {
	t.Helper()
	db, err := store.Open(t.TempDir()+"/persona.db", store.Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// TestLedgerConformance runs the outbound.Ledger and
// outbound.DraftIntentLedger suites against the SQLite store.
func TestLedgerConformance(t *testing.T) {
	t.Parallel()
	t.Run("Ledger", func(t *testing.T) {
		t.Parallel()
		ledgertest.Run(t, func(t *testing.T, clk *clock.Fake) outbound.Ledger { return openLedgerDB(t, clk) })
	})
	t.Run("DraftIntentLedger", func(t *testing.T) {
		t.Parallel()
		ledgertest.RunDraftIntent(t, func(t *testing.T, clk *clock.Fake) outbound.DraftIntentLedger {
			return openLedgerDB(t, clk)
		})
	})
}
