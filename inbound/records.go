package inbound

import (
	"context"
	"errors"
	"time"

	"github.com/personakit/persona/outcome"
)

// Trail is the decision path of one message through the stages: which
// trigger made it direct, the gates it passed and the one that stopped it,
// the command that answered it, the router's rating and every review
// verdict. The pipeline fills it in as the turn goes and stores it with the
// outcome, so that an operator can see why the bot did or did not reply.
// Ids in it are real platform ids (the model's aliases never reach it).
type Trail struct {
	// Trigger is the direct trigger that fired ("mention", "private",
	// "owner_command", ...; see route), "" for an unprompted message.
	Trigger string `json:"trigger,omitempty"`
	// Gates are the gates the message passed, in order.
	Gates []string `json:"gates,omitempty"`
	// StoppedBy is the gate that stopped it ("" when none did).
	StoppedBy string `json:"stopped_by,omitempty"`
	// Command is the chat command that answered it, without its prefix.
	Command string `json:"command,omitempty"`
	// Schedule is the id of the schedule that produced a scheduled turn.
	Schedule string `json:"schedule,omitempty"`
	// Router is the proactive router's rating of an unprompted message.
	Router *RouterTrail `json:"router,omitempty"`
	// Review holds the review verdict of each generation, in order.
	Review []ReviewStep `json:"review,omitempty"`
	// Notes are other things the turn did that explain its outcome (a
	// voice clip not transcribed, a link already read in this chat).
	Notes []string `json:"notes,omitempty"`
}

// RouterTrail is the proactive router's rating of a message.
type RouterTrail struct {
	// Directed is the model's yes/no answer to "is this addressed to the
	// bot" ("" when the message was not rated).
	Directed string `json:"directed,omitempty"`
	// ChatIn is the chat-in score in [0,1].
	ChatIn float64 `json:"chat_in"`
	// ChatInPass is set when a reply was allowed through the chat-in path.
	ChatInPass bool `json:"chat_in_pass,omitempty"`
	// Reply tells whether the router let the message through.
	Reply bool `json:"reply"`
	// Code and Reason are the router's decision.
	Code   outcome.Code `json:"code,omitempty"`
	Reason string       `json:"reason,omitempty"`
}

// ReviewStep is the review's verdict on one generated draft.
type ReviewStep struct {
	// Generation counts the drafts of the turn from 1.
	Generation int          `json:"generation"`
	Send       bool         `json:"send"`
	Code       outcome.Code `json:"code,omitempty"`
	Reason     string       `json:"reason,omitempty"`
	// Rewritten: semantic dedup rewrote the draft.
	Rewritten bool `json:"rewritten,omitempty"`
	// Regenerate: the review asked for the draft once more from image
	// descriptions.
	Regenerate bool `json:"regenerate,omitempty"`
}

// ErrInvalidQuery is wrapped by a RecordReader's errors for a query it
// cannot run: a malformed cursor, an unknown status, an empty range.
var ErrInvalidQuery = errors.New("inbound: invalid record query")

// RecordQuery selects records for [RecordReader.ListRecords]. Zero fields
// do not filter.
type RecordQuery struct {
	// SessionKey restricts the result to one session.
	SessionKey string
	// SenderID restricts the result to one sender (a real platform id).
	SenderID string
	// Code restricts the result to one outcome code.
	Code outcome.Code
	// Text keeps records whose message text contains it (case-insensitive
	// for ASCII letters).
	Text string
	// Since and Until bound the message's event time: Since ≤ t < Until.
	Since, Until time.Time
	// Status restricts the result to one queue state.
	Status Status
	// Before is the cursor of a previous page ([RecordPage].Next): only
	// records after it in the listing order are returned.
	Before string
	// Limit caps the page (≤ 0: DefaultRecordPage; at most MaxRecordPage).
	Limit int
}

// Page sizes of [RecordReader.ListRecords].
const (
	DefaultRecordPage = 50
	MaxRecordPage     = 500
)

// RecordPage is one page of a listing, newest event first.
type RecordPage struct {
	Records []Record
	// Next is the cursor of the following (older) page, "" on the last.
	Next string
}

// TokenTotal sums the tokens one model purpose used.
type TokenTotal struct {
	Purpose     string `json:"purpose"`
	Calls       int    `json:"calls"`
	Input       int    `json:"input"`
	CachedInput int    `json:"cached_input"`
	Output      int    `json:"output"`
}

// Summary counts the records completed in a time range.
type Summary struct {
	Since, Until time.Time
	// Outcomes counts completed records per outcome code.
	Outcomes map[outcome.Code]int
	// Tokens sums token use per purpose, ordered by purpose.
	Tokens []TokenTotal
	// Pending is the number of items waiting or running now (whatever the
	// range).
	Pending int
}

// RecordReader is the read side of the event log, for operators: the event
// center and the status command. The SQLite store implements it.
type RecordReader interface {
	// Lookup returns one record by item id ([ErrNotFound] when none).
	Lookup(ctx context.Context, id string) (Record, error)
	// ListRecords returns one page of records matching q, newest event
	// first (ties broken by id, descending).
	ListRecords(ctx context.Context, q RecordQuery) (RecordPage, error)
	// CompletedAfter returns up to limit records completed after cursor
	// ("" = from the oldest kept), in completion order, and the cursor of
	// the last one returned (cursor itself when none). It is the live feed:
	// a record completed later always sorts after one completed earlier.
	CompletedAfter(ctx context.Context, cursor string, limit int) ([]Record, string, error)
	// Summarize counts the records completed in [since, until).
	Summarize(ctx context.Context, since, until time.Time) (Summary, error)
}
