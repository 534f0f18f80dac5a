package eventcenter

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
)

// DefaultSummaryRange is the range GET /api/summary covers without since.
const DefaultSummaryRange = 24 * time.Hour

// maxFilterLen bounds each filter parameter.
const maxFilterLen = 512

// errorBody is the JSON of every error answer.
type errorBody struct {
	Error string `json:"error"`
}

// writeJSON writes v as the JSON answer with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"could not encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError writes a JSON error answer.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

// badParam is an invalid query parameter (400).
type badParam struct{ msg string }

func (e *badParam) Error() string { return e.msg }

func paramErr(format string, args ...any) error { return &badParam{fmt.Sprintf(format, args...)} }

// readFailed answers a failed read: 400 for the reader's invalid-input
// errors (a malformed cursor), 404 for an unknown record, nothing for a
// client that went away, else 500 (logged; the error itself is not shown,
// it may name internals).
func (c *Center) readFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	var bp *badParam
	switch {
	case errors.As(err, &bp):
		writeError(w, http.StatusBadRequest, bp.msg)
	case errors.Is(err, inbound.ErrInvalidQuery):
		writeError(w, http.StatusBadRequest, what+": invalid request (a malformed cursor?)")
	case errors.Is(err, inbound.ErrNotFound):
		writeError(w, http.StatusNotFound, "no such message")
	case r.Context().Err() != nil:
		// The client is gone; nobody reads an answer.
	default:
		c.log.Error("eventcenter: read failed", "what", what, "err", err)
		writeError(w, http.StatusInternalServerError, what+" failed")
	}
}

// recordQuery reads the listing filters (and, with paging, before and
// limit) from q.
func recordQuery(q url.Values, paging bool) (inbound.RecordQuery, error) {
	var rq inbound.RecordQuery
	for _, p := range []struct {
		name string
		dst  *string
	}{{"session", &rq.SessionKey}, {"sender", &rq.SenderID}, {"text", &rq.Text}} {
		v := q.Get(p.name)
		if len(v) > maxFilterLen {
			return rq, paramErr("%s: at most %d bytes", p.name, maxFilterLen)
		}
		*p.dst = v
	}
	if v := q.Get("code"); v != "" {
		rq.Code = outcome.Code(v)
		if !rq.Code.Valid() {
			return rq, paramErr("code: %q is not an outcome code (lower-case letters, digits and _)", v)
		}
	}
	var err error
	if rq.Since, err = parseTime(q, "since"); err != nil {
		return rq, err
	}
	if rq.Until, err = parseTime(q, "until"); err != nil {
		return rq, err
	}
	if !rq.Since.IsZero() && !rq.Until.IsZero() && rq.Until.Before(rq.Since) {
		return rq, paramErr("until is before since")
	}
	if v := q.Get("status"); v != "" {
		switch st := inbound.Status(v); st {
		case inbound.StatusPending, inbound.StatusLeased, inbound.StatusDone:
			rq.Status = st
		default:
			return rq, paramErr("status: want pending, leased or done, got %q", v)
		}
	}
	if !paging {
		return rq, nil
	}
	rq.Before = q.Get("before")
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > inbound.MaxRecordPage {
			return rq, paramErr("limit: want a number from 1 to %d, got %q", inbound.MaxRecordPage, v)
		}
		rq.Limit = n
	}
	return rq, nil
}

// parseTime reads a time parameter: RFC 3339 or unix milliseconds; zero
// when absent.
func parseTime(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(n).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, paramErr("%s: want an RFC 3339 time or unix milliseconds, got %q", name, v)
	}
	return t, nil
}

// listMessages serves GET /api/messages.
func (c *Center) listMessages(w http.ResponseWriter, r *http.Request) {
	q, err := recordQuery(r.URL.Query(), true)
	if err != nil {
		c.readFailed(w, r, "list", err)
		return
	}
	page, err := c.records.ListRecords(r.Context(), q)
	if err != nil {
		c.readFailed(w, r, "list", err)
		return
	}
	out := MessagePage{Messages: make([]Message, 0, len(page.Records)), Next: page.Next}
	for i := range page.Records {
		out.Messages = append(out.Messages, c.message(&page.Records[i], false))
	}
	writeJSON(w, http.StatusOK, out)
}

// getMessage serves GET /api/messages/{id}: the whole trail.
func (c *Center) getMessage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" {
		writeError(w, http.StatusNotFound, "no such message")
		return
	}
	rec, err := c.records.Lookup(r.Context(), id)
	if err != nil {
		c.readFailed(w, r, "lookup", err)
		return
	}
	var (
		slots    []outbound.Slot
		slotsErr error
	)
	if c.ledger != nil {
		if slots, slotsErr = c.ledger.Slots(r.Context(), rec.ID); slotsErr != nil {
			if r.Context().Err() != nil {
				return
			}
			c.log.Warn("eventcenter: ledger read failed", "id", rec.ID, "err", slotsErr)
		}
	}
	writeJSON(w, http.StatusOK, c.detail(&rec, slots, slotsErr))
}

// summary serves GET /api/summary (default range: the last 24 hours).
func (c *Center) summary(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := parseTime(q, "since")
	if err != nil {
		c.readFailed(w, r, "summary", err)
		return
	}
	until, err := parseTime(q, "until")
	if err != nil {
		c.readFailed(w, r, "summary", err)
		return
	}
	if until.IsZero() {
		until = c.clk.Now().UTC()
	}
	if since.IsZero() {
		since = until.Add(-DefaultSummaryRange)
	}
	if until.Before(since) {
		writeError(w, http.StatusBadRequest, "until is before since")
		return
	}
	s, err := c.records.Summarize(r.Context(), since, until)
	if err != nil {
		c.readFailed(w, r, "summary", err)
		return
	}
	writeJSON(w, http.StatusOK, summaryView(since, until, &s))
}

// summaryView converts a summary: codes by count, then by code.
func summaryView(since, until time.Time, s *inbound.Summary) Summary {
	out := Summary{Since: since, Until: until, Pending: s.Pending, Outcomes: make([]CodeCount, 0, len(s.Outcomes)),
		Tokens: make([]Tokens, 0, len(s.Tokens))}
	for code, n := range s.Outcomes {
		out.Total += n
		out.Outcomes = append(out.Outcomes, CodeCount{Code: code, Family: Family(code), Meaning: Meaning(code), Count: n})
	}
	slices.SortFunc(out.Outcomes, func(a, b CodeCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(string(a.Code), string(b.Code)))
	})
	for _, t := range s.Tokens {
		out.Tokens = append(out.Tokens, tokens(t.Purpose, "", t.Calls, t.Input, t.CachedInput, t.Output))
	}
	return out
}

// codesAnswer is the body of GET /api/codes.
type codesAnswer struct {
	Codes []CodeInfo `json:"codes"`
}

// codes serves GET /api/codes: the outcome catalogue.
func (c *Center) codes(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, codesAnswer{Codes: Codes()})
}

// apiNotFound answers an authorised request for an unknown API path, or a
// known one with the wrong method.
func (c *Center) apiNotFound(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/api/session":
		w.Header().Set("Allow", "POST, DELETE")
	case p == "/api/messages" || p == "/api/summary" || p == "/api/codes" || p == "/api/events" ||
		strings.HasPrefix(p, "/api/messages/"):
		w.Header().Set("Allow", "GET, HEAD")
	default:
		writeError(w, http.StatusNotFound, "no such API path")
		return
	}
	writeError(w, http.StatusMethodNotAllowed, "method not allowed")
}

// notFound answers a path outside the page and the API.
func notFound(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	writeError(w, http.StatusNotFound, "not found")
}
