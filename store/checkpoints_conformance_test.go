package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/inbound/checkpointtest"
	"github.com/personakit/persona/store"
)

// TestCheckpointsConformance runs the inbound.Checkpoints suite against the
// SQLite store.
func TestCheckpointsConformance(t *testing.T) {
	t.Parallel()
	checkpointtest.Run(t, func(t *testing.T) inbound.Checkpoints {
		db, err := store.Open(t.TempDir()+"/persona.db", store.Options{Clock: clock.NewFake(checkpointtest.Start)})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		return db
	})
}
