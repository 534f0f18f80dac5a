package persona

import (
	"io"

	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/schedule"
	"github.com/personakit/persona/store"
	"github.com/personakit/persona/store/postgres"
)

// Storage is every storage port the pipeline keeps its state behind: the
// queue and its records, the per-bot checkpoints, the transcript, long-term
// memory, the delivery ledger, session flags and scheduled messages.
// Package store implements it on one SQLite file (one process, the
// default); package store/postgres implements it on PostgreSQL, which
// several processes can share (see Options.DatabaseURL).
type Storage interface {
	inbound.Queue
	inbound.Checkpoints
	inbound.RecordReader
	memory.History
	memory.Store
	outbound.Ledger
	gate.Flags
	schedule.Store
	io.Closer
}

// Both stores implement every port.
var (
	_ Storage = (*store.DB)(nil)
	_ Storage = (*postgres.DB)(nil)
)

// closerFunc adapts a stop function to io.Closer.
type closerFunc func()

// Close calls f.
func (f closerFunc) Close() error { f(); return nil }
