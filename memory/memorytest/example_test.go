package memorytest_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/memory/memorytest"
	"github.com/personakit/persona/store"
)

// Running the suites against an implementation from its own tests: here
// the SQLite store, opened on a temporary file with the suite's fake
// clock.
func Example() {
	open := func(t *testing.T, clk *clock.Fake) *store.DB {
		db, err := store.Open(filepath.Join(t.TempDir(), "persona.db"), store.Options{Clock: clk})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		return db
	}
	testMemoryStore := func(t *testing.T) {
		memorytest.RunHistory(t, func(t *testing.T, clk *clock.Fake) memory.History { return open(t, clk) })
		memorytest.RunSearch(t, func(t *testing.T, clk *clock.Fake) memorytest.SearchStore { return open(t, clk) })
		memorytest.RunFacts(t, func(t *testing.T, clk *clock.Fake) memory.FactStore { return open(t, clk) })
		memorytest.RunJobs(t, func(t *testing.T, clk *clock.Fake) memory.JobStore { return open(t, clk) })
		memorytest.RunSummaries(t, func(t *testing.T, clk *clock.Fake) memorytest.SummaryStore { return open(t, clk) })
	}
	_ = testMemoryStore // in a real package: func TestMemoryConformance(t *testing.T) { … }
}
