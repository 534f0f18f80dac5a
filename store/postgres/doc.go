// Package postgres is a persona store on PostgreSQL (through
// github.com/jackc/pgx/v5), for bots that run as several processes on one
// database. It implements the same storage ports as package store (the
// embedded SQLite default), and passes the same conformance suites.
//
// [Open] connects, applies the embedded migrations (migrations/NNNN_*.sql)
// under a transaction-level advisory lock, so that processes starting
// together apply each one once, and starts a listener that turns
// PostgreSQL notifications into wake-ups ([DB.Subscribe]).
//
// Every timestamp is stored as unix milliseconds in a bigint column and
// "now" comes from Options.Clock, as in package store.
package postgres
