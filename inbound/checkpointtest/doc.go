// Package checkpointtest is the conformance suite for inbound.Checkpoints
// implementations.
//
// # Overview
//
// [Run] checks everything the inbound.Checkpoints contract promises: no
// checkpoint (ok=false, no error) for a bot that never saved one; the
// saved time read back as the same instant at millisecond precision,
// whatever its location; a later save replacing the earlier one, also
// when it moves the time backwards; bots kept apart (their ids compared
// exactly, case included); and concurrent saves and loads from many
// goroutines.
//
// # Usage
//
// Call Run from a test of the implementation's package:
//
//	func TestCheckpointsConformance(t *testing.T) {
//		checkpointtest.Run(t, func(t *testing.T) inbound.Checkpoints {
//			db, err := mystore.Open(t.TempDir(), mystore.Options{})
//			require.NoError(t, err)
//			t.Cleanup(func() { db.Close() })
//			return db
//		})
//	}
//
// The suite passes every time explicitly; it never reads a clock and never
// sleeps. Times are compared at millisecond precision; an implementation
// may keep more.
//
// # Concurrency
//
// Subtests call t.Parallel, so open is called from several goroutines at
// once and must return independent, empty checkpoints on every call. One
// subtest saves and loads from many goroutines at once and is meant to run
// under the race detector.
package checkpointtest
