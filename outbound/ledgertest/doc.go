// Package ledgertest is the conformance suite for outbound.Ledger and
// outbound.DraftIntentLedger implementations.
//
// # Overview
//
// [Run] checks everything the outbound.Ledger contract promises: the
// round trip of a draft's every field; the first draft saved for a turn
// winning, also when several workers save at once; slots read back in slot
// number order (the forward-card slot outbound.ForwardSlot included),
// with their fingerprint, state, platform ids and times at millisecond
// precision; an intent dated when it was recorded and kept as it was when
// it is repeated; MarkIntent never downgrading a sent slot; MarkSent
// recording a delivery with or without an earlier intent; ClearIntent
// removing only an intent, so a retry can record a new one; turns kept
// apart; and concurrent use by many workers.
//
// [RunDraftIntent] checks the combined write of outbound.DraftIntentLedger:
// the draft and the intent of slot 0 stored together when the stored draft
// is the one given, neither touched when another draft won, and racing
// callers agreeing on one winner.
//
// # Usage
//
// Call the suites from a test of the implementation's package:
//
//	func TestLedgerConformance(t *testing.T) {
//		open := func(t *testing.T, clk *clock.Fake) *mystore.DB {
//			db, err := mystore.Open(t.TempDir(), mystore.Options{Clock: clk})
//			require.NoError(t, err)
//			t.Cleanup(func() { db.Close() })
//			return db
//		}
//		ledgertest.Run(t, func(t *testing.T, clk *clock.Fake) outbound.Ledger { return open(t, clk) })
//		ledgertest.RunDraftIntent(t, func(t *testing.T, clk *clock.Fake) outbound.DraftIntentLedger {
//			return open(t, clk)
//		})
//	}
//
// The ledger must read "now" from clk: the suite checks that an intent is
// dated at the clock's time (Slot.IntentAt). It moves time only through
// clk, starting at [Start], and never sleeps. Times are compared at
// millisecond precision; a ledger may keep more.
//
// # Concurrency
//
// Subtests call t.Parallel, so open is called from several goroutines at
// once and must return an independent, empty ledger on every call. Some
// subtests use one ledger from many goroutines at once and are meant to
// run under the race detector.
package ledgertest
