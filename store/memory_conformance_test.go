package store

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/memory/memorytest"
)

// openConformance opens a store on a temporary file for the memory
// conformance suites.
func openConformance(t *testing.T, clk *clock.Fake) *DB {
	t.Helper()
	d, err := Open(filepath.Join(t.TempDir(), "persona.db"), Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func TestHistoryConformance(t *testing.T) {
	memorytest.RunHistory(t, func(t *testing.T, clk *clock.Fake) memory.History { return openConformance(t, clk) })
}

func TestHistorySearchConformance(t *testing.T) {
	memorytest.RunSearch(t, func(t *testing.T, clk *clock.Fake) memorytest.SearchStore { return openConformance(t, clk) })
}

func TestFactStoreConformance(t *testing.T) {
	memorytest.RunFacts(t, func(t *testing.T, clk *clock.Fake) memory.FactStore { return openConformance(t, clk) })
}

func TestJobStoreConformance(t *testing.T) {
	memorytest.RunJobs(t, func(t *testing.T, clk *clock.Fake) memory.JobStore { return openConformance(t, clk) })
}

func TestSummaryStoreConformance(t *testing.T) {
	memorytest.RunSummaries(t, func(t *testing.T, clk *clock.Fake) memorytest.SummaryStore { return openConformance(t, clk) })
}
