package eventcenter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona/inbound"
)

// feedWriteTimeout bounds each write of a live feed, so a client that stops
// reading cannot hold its handler forever (real time: it is a network
// deadline, not timing logic).
const feedWriteTimeout = 30 * time.Second

// feedRetryMs is the reconnect delay the feed asks the browser for.
const feedRetryMs = 2000

// feedFilter keeps the records a feed's client asked for (the listing's
// filters: session, sender, code, text, event time range and state).
type feedFilter struct {
	q    inbound.RecordQuery
	text string // q.Text with ASCII letters lower-cased
}

func (f *feedFilter) match(r *inbound.Record) bool {
	switch {
	case f.q.SessionKey != "" && r.SessionKey != f.q.SessionKey,
		f.q.SenderID != "" && r.SenderID != f.q.SenderID,
		f.q.Code != "" && r.Outcome.Code != f.q.Code,
		f.text != "" && !strings.Contains(asciiLower(r.Text), f.text),
		!f.q.Since.IsZero() && r.EventTime.Before(f.q.Since),
		!f.q.Until.IsZero() && !r.EventTime.Before(f.q.Until),
		f.q.Status != "" && r.Status != f.q.Status:
		return false
	}
	return true
}

// asciiLower lower-cases the ASCII letters of s only, as the store's text
// filter does.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}

// head returns the cursor of the newest completed record.
func (c *Center) head(ctx context.Context) (string, error) {
	if h, ok := c.records.(FeedHeader); ok {
		return h.FeedHead(ctx)
	}
	cursor := ""
	for {
		recs, next, err := c.records.CompletedAfter(ctx, cursor, inbound.MaxRecordPage)
		if err != nil {
			return "", err
		}
		if len(recs) == 0 {
			return cursor, nil
		}
		cursor = next
	}
}

// serveEvents serves GET /api/events, the live feed: a text/event-stream
// with one event per record completed after the start cursor (the
// Last-Event-ID header, else the after parameter, else the newest record
// now), each with the cursor after it as its id and the record as a
// Message. It reads one record per CompletedAfter call so that every event
// carries its own resume cursor. It polls every Poll, or at once on Wake,
// sends a heartbeat comment every Heartbeat, and returns when the client
// goes, a write fails, or Close is called.
func (c *Center) serveEvents(w http.ResponseWriter, r *http.Request) {
	if c.closed() {
		writeError(w, http.StatusServiceUnavailable, "the event center is closed")
		return
	}
	ctx := r.Context()
	q := r.URL.Query()
	rq, err := recordQuery(q, false)
	if err != nil {
		c.readFailed(w, r, "feed", err)
		return
	}
	filter := feedFilter{q: rq, text: asciiLower(rq.Text)}
	cursor := r.Header.Get("Last-Event-ID")
	if cursor == "" {
		cursor = q.Get("after")
		if cursor == "" && !q.Has("after") {
			if cursor, err = c.head(ctx); err != nil {
				c.readFailed(w, r, "feed", err)
				return
			}
		}
	}
	if strings.ContainsAny(cursor, "\r\n") {
		writeError(w, http.StatusBadRequest, "feed: malformed cursor")
		return
	}
	// The first read checks the cursor before the stream starts. Every
	// read follows the taking of the wake channel, so a Wake after a read
	// is never missed.
	wake := c.woken()
	recs, next, err := c.records.CompletedAfter(ctx, cursor, 1)
	if err != nil {
		c.readFailed(w, r, "feed", err)
		return
	}

	c.feeds.Add(1)
	defer c.feeds.Add(-1)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The ready event tells the client where the feed starts (its id is
	// the start cursor, so a reconnect resumes there even before the
	// first record).
	var buf bytes.Buffer
	buf.WriteString("retry: " + strconv.Itoa(feedRetryMs) + "\n")
	ready, _ := json.Marshal(struct {
		Cursor string `json:"cursor"`
	}{cursor})
	c.appendRaw(&buf, "ready", cursor, ready)
	if !c.flushFeed(w, rc, &buf) {
		return
	}

	hb := c.clk.NewTimer(c.heartbeat)
	defer func() { hb.Stop() }()
	failing := false
	for {
		// Drain: every record after the cursor, one per read.
		for len(recs) > 0 {
			if ctx.Err() != nil || c.closed() {
				return
			}
			cursor = next
			if filter.match(&recs[0]) {
				c.appendEvent(&buf, cursor, &recs[0])
			}
			recs, next, err = c.records.CompletedAfter(ctx, cursor, 1)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if !failing {
					c.log.Warn("eventcenter: live feed read failed", "err", err)
				}
				failing, recs = true, nil
				break
			}
			failing = false
			if buf.Len() > 32<<10 && !c.flushFeed(w, rc, &buf) {
				return
			}
		}
		if buf.Len() > 0 && !c.flushFeed(w, rc, &buf) {
			return
		}
		poll := c.clk.NewTimer(c.poll)
		select {
		case <-ctx.Done():
			poll.Stop()
			return
		case <-c.done:
			poll.Stop()
			return
		case <-wake:
		case <-poll.C():
		case <-hb.C():
			buf.WriteString(": heartbeat\n\n")
			if !c.flushFeed(w, rc, &buf) {
				poll.Stop()
				return
			}
			hb = c.clk.NewTimer(c.heartbeat)
		}
		poll.Stop()
		wake = c.woken()
		recs, next, err = c.records.CompletedAfter(ctx, cursor, 1)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				c.log.Warn("eventcenter: live feed read failed", "err", err)
			}
			failing, recs = true, nil
		} else {
			failing = false
		}
	}
}

// appendEvent appends the feed event of record r, read at cursor, to buf.
func (c *Center) appendEvent(buf *bytes.Buffer, cursor string, r *inbound.Record) {
	data, err := json.Marshal(c.message(r, false))
	if err != nil {
		c.log.Error("eventcenter: encode feed event", "id", r.ID, "err", err)
		return
	}
	c.appendRaw(buf, "", cursor, data)
}

// appendRaw appends one event (type "" = message) with the id cursor and
// one line of JSON data to buf.
func (c *Center) appendRaw(buf *bytes.Buffer, event, cursor string, data []byte) {
	if event != "" {
		buf.WriteString("event: ")
		buf.WriteString(event)
		buf.WriteByte('\n')
	}
	if !strings.ContainsAny(cursor, "\r\n") {
		buf.WriteString("id: ")
		buf.WriteString(cursor)
		buf.WriteByte('\n')
	}
	buf.WriteString("data: ")
	buf.Write(data)
	buf.WriteString("\n\n")
}

// flushFeed writes buf to the client and flushes it; false when the client
// cannot be written to any more.
func (c *Center) flushFeed(w http.ResponseWriter, rc *http.ResponseController, buf *bytes.Buffer) bool {
	if err := rc.SetWriteDeadline(time.Now().Add(feedWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return false
	}
	_, err := w.Write(buf.Bytes())
	buf.Reset()
	if err != nil {
		return false
	}
	return rc.Flush() == nil
}
