package checkpointtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/inbound/checkpointtest"
	"github.com/personakit/persona/store"
)

// The suite runs from a test of the implementation's package; here the
// SQLite store.
func Example() {
	testCheckpoints := func(t *testing.T) {
		checkpointtest.Run(t, func(t *testing.T) inbound.Checkpoints {
			db, err := store.Open(t.TempDir()+"/persona.db", store.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, db.Close()) })
			return db
		})
	}
	_ = testCheckpoints // func TestCheckpointsConformance(t *testing.T) { testCheckpoints(t) }
}
