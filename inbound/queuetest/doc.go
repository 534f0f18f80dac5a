// Package queuetest is the conformance suite for inbound.Queue
// implementations.
//
// # Overview
//
// [Run] exercises every behaviour the inbound.Queue contract promises:
// idempotent enqueue, terminal records, claim order, per-session in-flight
// limits, delayed availability, lease expiry and fencing (inbound.ErrLeaseLost
// for stale holders), retry/snooze/release attempt accounting, lease
// extension, ReleaseExpired, NextAvailable, Lookup, and concurrent claiming.
// Every test also runs with claims the queue may hold in memory
// (inbound.Limits.HoldBelow), which must behave like stored ones.
//
// # Implementing
//
// Call Run from a test of the implementation's package:
//
//	func TestQueueConformance(t *testing.T) {
//		queuetest.Run(t, func(t *testing.T, clk *clock.Fake) inbound.Queue {
//			q, err := myqueue.Open(t.TempDir(), myqueue.Options{Clock: clk})
//			require.NoError(t, err)
//			t.Cleanup(func() { q.Close() })
//			return q
//		})
//	}
//
// The queue must read "now" from clk; the suite moves time only through it
// and never sleeps. Timestamps are compared at millisecond precision.
//
// # Concurrency
//
// Subtests call t.Parallel, so newQueue is called from several goroutines at
// once and must return an independent, empty queue on every call. One
// subtest claims from several goroutines at once and is meant to run under
// the race detector.
package queuetest
