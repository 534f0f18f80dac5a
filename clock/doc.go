// Package clock is the injectable time source used by every lease, cooldown,
// window and backoff in persona.
//
// # Overview
//
// Production code takes a [Clock] and uses [Real] when none is given. Tests
// pass a [*Fake] and move time forward with [Fake.Advance], so no test ever
// sleeps for real: timers created from a Fake fire when the fake time passes
// their deadline.
//
// # Implementing
//
// A Clock has two methods: Now and NewTimer. Any type with those methods can
// be injected, for example a clock that follows a replayed transcript.
//
// # Concurrency
//
// Real and Fake are safe for concurrent use.
package clock
