// Package gatetest holds test helpers for package gate: an in-memory
// [Flags] store for embedders' tests and benchmarks, and [RunFlags], a
// conformance suite every gate.Flags implementation should pass.
//
// # Overview
//
//	flags := gatetest.NewFlags()
//	rules, err := gate.Compile(gate.Config{Flags: flags})
//
// [Flags.FailWith] makes every call fail, to test how a gate or stage
// handles a broken store.
//
// # Concurrency
//
// Flags is safe for concurrent use.
package gatetest
