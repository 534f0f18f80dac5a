// Package scheduletest is the conformance suite for schedule.Store
// implementations, and an in-memory Store for tests.
//
// # Overview
//
// [Run] checks everything the schedule.Store contract promises — put, get,
// list and delete; due schedules earliest first within a limit, disabled
// ones excluded; NextDueAt; the compare-and-set AdvanceSchedule refusing a
// stale expectation; the round trip of every field, the zone and the
// target included, at millisecond precision — and then drives a
// schedule.Runner on the store with a fake clock: on-time firing, catch-up
// after downtime, skipping what is too late, retry after a failed Fire,
// re-firing the same Firing.ID after a crash before the advance, two
// runners racing, and Run's timer and Wake.
//
// [Memory] is a schedule.Store kept in memory, for tests of code that
// uses schedules; it passes Run.
//
// # Usage
//
// Call Run from a test of the implementation's package:
//
//	func TestScheduleStore(t *testing.T) {
//		scheduletest.Run(t, func(t *testing.T) schedule.Store {
//			st, err := mystore.Open(filepath.Join(t.TempDir(), "db"))
//			require.NoError(t, err)
//			t.Cleanup(func() { st.Close() })
//			return st
//		})
//	}
//
// The suite moves time only through its fake clock (starting at [Start])
// and never sleeps; a store's own clock, if it has one, is not consulted.
//
// # Concurrency
//
// Subtests call t.Parallel, so open is called from several goroutines at
// once and must return an independent, empty store every time. Several
// subtests use a store from many goroutines at once and are meant to run
// under the race detector. Memory is safe for concurrent use.
package scheduletest
