// Package gate holds the deterministic checks that decide, without calling a
// model, whether an inbound message may be answered at all.
//
// # Overview
//
// A [Gate] looks at a [Turn] and returns a [Verdict]: pass, or stop with an
// outcome code and a reason. A [Chain] runs gates in order and stops at the
// first stop, naming the gate that stopped. Session flags with deadlines
// (stop windows, pauses, mutes) live behind the [Flags] port so a restart
// keeps them; package store implements it.
//
// # Implementing
//
// Implement Gate, or wrap a function in [Func]. Insert, remove or replace
// gates in a Chain in code.
//
// # Concurrency
//
// Gates are called from many workers at once and must be safe for
// concurrent use.
package gate
