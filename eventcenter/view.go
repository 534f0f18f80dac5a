package eventcenter

import (
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

// ListTextRunes caps a message's text in a listing and in the live feed;
// the trail has it whole.
const ListTextRunes = 300

// Message is one record as GET /api/messages and the live feed show it.
// Text and Reason are masked (see Config.Secrets).
type Message struct {
	// ID is the item id (the message's canonical key).
	ID string `json:"id"`
	// Session is the session key; Chat is its chat part ("group:123").
	Session string `json:"session"`
	Chat    string `json:"chat"`
	// Sender is the sender's platform id; MessageID the platform's id of
	// the message.
	Sender    string `json:"sender"`
	MessageID string `json:"message_id,omitempty"`
	// Text is the message text, cut to ListTextRunes runes in listings
	// (Truncated is then set).
	Text      string `json:"text"`
	Truncated bool   `json:"truncated,omitempty"`
	// Time is the message's event time.
	Time time.Time `json:"time"`
	// Status is the queue state: pending, leased or done.
	Status string `json:"status"`
	// Code, Family and Reason are the outcome ("" while not done).
	Code   outcome.Code `json:"code,omitempty"`
	Family string       `json:"family,omitempty"`
	Reason string       `json:"reason,omitempty"`
	// Kind is the turn kind (chat, proactive, scheduled, notice).
	Kind string `json:"kind,omitempty"`
	// Stage is the delivery stage a reply reached.
	Stage string `json:"stage,omitempty"`
	// Source says how the message arrived (live, backfill, gap, journal).
	Source   string `json:"source,omitempty"`
	Attempts int    `json:"attempts"`
	// CompletedAt is when the record became done.
	CompletedAt *time.Time `json:"completed_at,omitempty"`
}

// Detail is a message's whole trail, the answer of GET
// /api/messages/{id}.
type Detail struct {
	Message
	// Meaning explains Code (see Meaning).
	Meaning     string     `json:"meaning,omitempty"`
	Priority    int        `json:"priority"`
	HistoryOnly bool       `json:"history_only,omitempty"`
	EnqueuedAt  time.Time  `json:"enqueued_at"`
	AvailableAt time.Time  `json:"available_at"`
	FirstClaim  *time.Time `json:"first_claim,omitempty"`
	// LastError is the last failed attempt's error (masked).
	LastError string `json:"last_error,omitempty"`
	// MergedInto is the turn that absorbed this message.
	MergedInto string `json:"merged_into,omitempty"`
	// Trail is the decision path through the stages (texts masked); nil
	// when the item ended before any stage ran.
	Trail *inbound.Trail `json:"trail,omitempty"`
	// Delivery is how far the reply got, chunk by chunk.
	Delivery Delivery `json:"delivery"`
	// Timings are the turn's milestones, as offsets from the enqueue.
	Timings []Timing `json:"timings"`
	// Tokens are the tokens used per model purpose.
	Tokens []Tokens `json:"tokens"`
}

// Delivery is the delivery part of a trail.
type Delivery struct {
	// Stage is the furthest delivery stage reached.
	Stage string `json:"stage,omitempty"`
	// OutboundIDs are the platform ids of the messages sent for the item.
	OutboundIDs []string `json:"outbound_ids,omitempty"`
	// Slots are the delivery ledger's rows, one per chunk (empty without
	// Config.Ledger).
	Slots []Slot `json:"slots"`
	// SlotsError is set when the ledger could not be read.
	SlotsError string `json:"slots_error,omitempty"`
}

// Slot is one chunk's delivery-ledger row.
type Slot struct {
	N          int        `json:"n"`
	State      string     `json:"state"`
	MessageIDs []string   `json:"message_ids,omitempty"`
	SentAt     *time.Time `json:"sent_at,omitempty"`
	IntentAt   *time.Time `json:"intent_at,omitempty"`
}

// Timing is one milestone of a turn.
type Timing struct {
	// Name is enqueued, first_claim, gates_done, generation_start,
	// generation_end, first_send, first_ack or completed.
	Name string    `json:"name"`
	At   time.Time `json:"at"`
	// AfterMs and After are the time since the enqueue.
	AfterMs int64  `json:"after_ms"`
	After   string `json:"after"`
}

// Tokens are the tokens of one model purpose, in a turn or summed.
type Tokens struct {
	Purpose string `json:"purpose"`
	Model   string `json:"model,omitempty"`
	// Calls counts the model calls summed (summaries only).
	Calls       int `json:"calls,omitempty"`
	Input       int `json:"input"`
	CachedInput int `json:"cached_input"`
	Output      int `json:"output"`
	// CachedShare is CachedInput / Input (0 without input).
	CachedShare float64 `json:"cached_share"`
}

// MessagePage is the answer of GET /api/messages.
type MessagePage struct {
	Messages []Message `json:"messages"`
	// Next is the before= cursor of the following (older) page, "" on the
	// last.
	Next string `json:"next"`
}

// CodeCount is one outcome code's count in a summary.
type CodeCount struct {
	Code    outcome.Code `json:"code"`
	Family  string       `json:"family"`
	Meaning string       `json:"meaning,omitempty"`
	Count   int          `json:"count"`
}

// Summary is the answer of GET /api/summary.
type Summary struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Total counts the records completed in the range.
	Total int `json:"total"`
	// Outcomes counts them per code, the most frequent first.
	Outcomes []CodeCount `json:"outcomes"`
	// Tokens sums their token use per purpose.
	Tokens []Tokens `json:"tokens"`
	// Pending counts the items waiting or running now.
	Pending int `json:"pending"`
}

// message converts a record for a listing (full=false: the text is cut).
func (c *Center) message(r *inbound.Record, full bool) Message {
	m := Message{
		ID: r.ID, Session: r.SessionKey, Chat: chatOf(r.SessionKey), Sender: r.SenderID, MessageID: r.MessageID,
		Text: c.mask.Replace(r.Text), Time: r.EventTime, Status: string(r.Status), Code: r.Outcome.Code,
		Family: Family(r.Outcome.Code), Reason: c.mask.Replace(r.Outcome.Reason), Kind: r.Outcome.Kind,
		Stage: string(r.Outcome.Stage), Source: string(r.Source), Attempts: r.Attempts,
		CompletedAt: timePtr(r.CompletedAt),
	}
	if !full && utf8.RuneCountInString(m.Text) > ListTextRunes {
		m.Text, m.Truncated = cutRunes(m.Text, ListTextRunes)+"…", true
	}
	return m
}

// detail converts a record and its ledger rows for the trail view.
func (c *Center) detail(r *inbound.Record, slots []outbound.Slot, slotsErr error) Detail {
	d := Detail{
		Message: c.message(r, true), Meaning: Meaning(r.Outcome.Code), Priority: r.Priority,
		HistoryOnly: r.HistoryOnly, EnqueuedAt: r.EnqueuedAt, AvailableAt: r.AvailableAt,
		FirstClaim: timePtr(r.FirstClaim), LastError: c.mask.Replace(r.LastError), MergedInto: r.Outcome.MergedInto,
		Trail: c.maskTrail(r.Outcome.Trail),
		Delivery: Delivery{Stage: string(r.Outcome.Stage), OutboundIDs: r.Outcome.OutboundIDs,
			Slots: make([]Slot, 0, len(slots))},
		Timings: c.timings(r),
		Tokens:  make([]Tokens, 0, len(r.Outcome.Tokens)),
	}
	for _, s := range slots {
		d.Delivery.Slots = append(d.Delivery.Slots, Slot{N: s.N, State: string(s.State), MessageIDs: s.MessageIDs,
			SentAt: timePtr(s.SentAt), IntentAt: timePtr(s.IntentAt)})
	}
	if slotsErr != nil {
		d.Delivery.SlotsError = "the delivery ledger could not be read"
	}
	for _, t := range r.Outcome.Tokens {
		d.Tokens = append(d.Tokens, tokens(t.Purpose, t.Model, 0, t.Input, t.CachedInput, t.Output))
	}
	return d
}

// tokens builds a Tokens with its cached share.
func tokens(purpose, model string, calls, input, cached, output int) Tokens {
	t := Tokens{Purpose: purpose, Model: model, Calls: calls, Input: input, CachedInput: cached, Output: output}
	if input > 0 {
		t.CachedShare = float64(cached) / float64(input)
	}
	return t
}

// timings lists the record's milestones in time order, as offsets from
// its enqueue.
func (c *Center) timings(r *inbound.Record) []Timing {
	steps := []struct {
		name string
		at   time.Time
	}{
		{"enqueued", r.EnqueuedAt}, {"first_claim", r.FirstClaim}, {"gates_done", r.Outcome.Timings.GatesDone},
		{"generation_start", r.Outcome.Timings.GenerationStart}, {"generation_end", r.Outcome.Timings.GenerationEnd},
		{"first_send", r.Outcome.Timings.FirstSend}, {"first_ack", r.Outcome.Timings.FirstAck},
		{"completed", r.CompletedAt},
	}
	out := make([]Timing, 0, len(steps))
	for _, s := range steps {
		if s.at.IsZero() {
			continue
		}
		after := s.at.Sub(r.EnqueuedAt)
		out = append(out, Timing{Name: s.name, At: s.at, AfterMs: after.Milliseconds(),
			After: after.Round(time.Millisecond).String()})
	}
	return out
}

// maskTrail returns a copy of t with every text masked.
func (c *Center) maskTrail(t *inbound.Trail) *inbound.Trail {
	if t == nil {
		return nil
	}
	m := c.mask.Replace
	out := &inbound.Trail{Trigger: m(t.Trigger), StoppedBy: m(t.StoppedBy), Command: m(t.Command),
		Schedule: m(t.Schedule)}
	for _, g := range t.Gates {
		out.Gates = append(out.Gates, m(g))
	}
	for _, n := range t.Notes {
		out.Notes = append(out.Notes, m(n))
	}
	if t.Router != nil {
		rt := *t.Router
		rt.Directed, rt.Reason = m(rt.Directed), m(rt.Reason)
		out.Router = &rt
	}
	for _, s := range t.Review {
		s.Reason = m(s.Reason)
		out.Review = append(out.Review, s)
	}
	return out
}

// chatOf returns the chat part of a session key ("group:123"), or the key
// itself when it does not parse.
func chatOf(session string) string {
	p, err := channel.ParseSessionKey(session)
	if err != nil {
		return session
	}
	return string(p.Chat.Kind) + ":" + p.Chat.ID
}

// timePtr returns nil for the zero time.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// cutRunes returns the first n runes of s.
func cutRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
