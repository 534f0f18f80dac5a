// Package memorytest is the conformance suite for the storage ports of
// package memory.
//
// # Overview
//
// Each Run function checks what one port's contract promises, one subtest
// per behaviour, on a fresh store per subtest:
//
//   - [RunHistory]: memory.History — the round trip of every entry field,
//     Recent's newest-limit window returned oldest first, Append by an
//     existing key replacing the payload, MarkRecalled at millisecond
//     precision, memory.RecentViewer (when implemented) agreeing with
//     Recent, and concurrent appends and reads.
//   - [RunSearch]: memory.HistorySearch over what a memory.History wrote —
//     English and Chinese full-text recall, relevance order, the session,
//     time, sender and limit filters, recalled and edited messages, users
//     hidden by memory.FactStore.ForgetUser (when implemented), Message
//     and MessagesBefore.
//   - [RunFacts]: memory.FactStore — insert, refresh, supersede and forget
//     through ApplyChanges with their counts, the structured filter of
//     CandidateFacts (scope, participants, expiry, sensitivity, platform,
//     order, limit), MatchFacts, TouchFacts and ForgetUser.
//   - [RunJobs]: memory.JobStore — idempotent enqueue, claim order and
//     availability, lease expiry and fencing with memory.ErrLeaseLost,
//     retry and dead jobs, CompleteJob applying its changes atomically,
//     and concurrent claiming.
//   - [RunSummaries]: memory.SummaryStore — checkpoint round trip, replace
//     and not-found errors, and MessagesAfter / CountAfter against
//     watermarks.
//
// # Implementing
//
// Call the Run functions from a test of the implementation's package. The
// store must read "now" from the fake clock it is given; the suites move
// time only through it and never sleep:
//
//	func TestMemoryConformance(t *testing.T) {
//		open := func(t *testing.T, clk *clock.Fake) *mystore.DB {
//			db, err := mystore.Open(t.TempDir(), mystore.Options{Clock: clk})
//			require.NoError(t, err)
//			t.Cleanup(func() { db.Close() })
//			return db
//		}
//		memorytest.RunHistory(t, func(t *testing.T, clk *clock.Fake) memory.History { return open(t, clk) })
//		memorytest.RunSearch(t, func(t *testing.T, clk *clock.Fake) memorytest.SearchStore { return open(t, clk) })
//		// … RunFacts, RunJobs, RunSummaries alike.
//	}
//
// Timestamps are compared at millisecond precision, the unit of stored
// times. Optional capabilities are found by type assertion on the value
// open returns: the cases that need them are skipped otherwise.
//
// # Concurrency
//
// Subtests call t.Parallel, so open is called from several goroutines at
// once and must return an independent, empty store each time. The
// concurrency cases use one store from many goroutines at once and are
// meant to run under the race detector.
package memorytest
