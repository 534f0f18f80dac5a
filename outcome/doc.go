// Package outcome defines the type of the stable outcome codes that end every
// inbound message's record.
//
// # Overview
//
// Every inbound message ends with exactly one terminal record: a [Code] and a
// human-readable reason. The package that makes a decision owns the constant
// for it (gate codes live in gate, send codes in outbound, queue codes in
// inbound); this package only holds the shared type and a few helpers, so that
// stage packages can name codes without importing each other. The README keeps
// the full catalogue in one table, and a test keeps table and constants in
// step.
package outcome
