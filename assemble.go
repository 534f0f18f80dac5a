package persona

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/memory"
	"github.com/personakit/persona/outcome"
)

// Media-turn assembly (a picture, then its caption): a message of only
// media waits inbound.MediaMergeWindow before its turn may start (see
// handleDurably). A text message of the same sender in the same session
// whose time is within that window of it, and that has no media of its
// own, takes the media in: the text's turn answers with the pictures or
// the voice clip attached, and the media message, when its own turn comes,
// ends as superseded_media_turn pointing at the text. An album (media
// with one channel.Media.Album id, one message per picture, the caption on
// one) is answered once: the captioned message waits albumWait and then
// takes in the album's other pictures.
//
// The pipeline is the only process on its store (the store's lock), so
// which media messages are waiting is known in memory: HandleEvent notes
// every media-only message it queues. What a text turn took in is also
// kept in the session flags, so that after a crash the media message still
// ends superseded and the text turn, retried, takes the same media again.
const (
	// mediaSlack: a text takes the media message nearest to it and every
	// other one within this much of that one (a burst of pictures).
	mediaSlack = 3 * time.Second
	// flagMediaAbsorbed (subject: the media item's id) names the text item
	// that took it in; flagMediaTaken (subject: the text item's id) lists
	// what it took, for a retry.
	flagMediaAbsorbed = "media_absorbed"
	flagMediaTaken    = "media_taken"
	// mediaFlagTTL is how long those flags are kept: far longer than any
	// turn's retries take.
	mediaFlagTTL = 24 * time.Hour
	// albumWait delays the captioned message of an album, so that the
	// album's other pictures (sent at the same moment) are queued first.
	albumWait = 2 * time.Second
)

// heldMedia is a queued media-only message that may still be taken in.
type heldMedia struct {
	ID    string        `json:"id"`
	At    time.Time     `json:"at"`
	Event channel.Event `json:"event"`
}

// mediaHold tracks media-only messages waiting for a caption.
type mediaHold struct {
	mu sync.Mutex
	// waiting is keyed by session and sender, oldest first; entries go
	// when taken, when their own turn starts, or once too old.
	waiting map[string][]heldMedia
	// absorbed maps a media item to the item that took it in; running
	// marks media items whose own turn has started. Both are dated and go
	// with the waiting entries' horizon (the flags keep absorptions for
	// longer).
	absorbed map[string]holdMark
	running  map[string]time.Time
}

// holdMark is an absorption: into which item, noted when.
type holdMark struct {
	into string
	at   time.Time
}

func newMediaHold() *mediaHold {
	return &mediaHold{waiting: map[string][]heldMedia{}, absorbed: map[string]holdMark{}, running: map[string]time.Time{}}
}

func holdKey(session, sender string) string { return session + "\x00" + sender }

// note records a queued media-only message (HandleEvent, a journal
// replay, or a restart's look at the history). A message it knows already
// is not added twice.
func (h *mediaHold) note(it *inbound.Item, now time.Time) {
	k := holdKey(it.SessionKey, it.Event.Sender.ID)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prune(now)
	for _, m := range h.waiting[k] {
		if m.ID == it.ID {
			return
		}
	}
	if _, ok := h.running[it.ID]; ok {
		return
	}
	if _, ok := h.absorbed[it.ID]; ok {
		return
	}
	ev := it.Event.Clone()
	h.waiting[k] = append(h.waiting[k], heldMedia{ID: it.ID, At: ev.Time, Event: ev})
	slices.SortStableFunc(h.waiting[k], func(a, b heldMedia) int { return a.At.Compare(b.At) })
}

// hasAlbum reports whether a picture of the album is waiting.
func (h *mediaHold) hasAlbum(session, sender, album string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.waiting[holdKey(session, sender)] {
		if albumOf(m.Event.Segments) == album {
			return true
		}
	}
	return false
}

// prune drops what no text can take any more (with h.mu held): entries
// older than twice the window and a minute, and marks as old.
func (h *mediaHold) prune(now time.Time) {
	horizon := now.Add(-2*inbound.MediaMergeWindow - time.Minute)
	for k, list := range h.waiting {
		i := 0
		for i < len(list) && list[i].At.Before(horizon) {
			i++
		}
		if i == len(list) {
			delete(h.waiting, k)
		} else if i > 0 {
			h.waiting[k] = slices.Clone(list[i:])
		}
	}
	for id, at := range h.running {
		if at.Before(horizon) {
			delete(h.running, id)
		}
	}
	for id, m := range h.absorbed {
		if m.at.Before(horizon) {
			delete(h.absorbed, id)
		}
	}
}

// mediaSegments returns the media segments of segs.
func mediaSegments(segs []channel.Segment) []channel.Segment {
	var out []channel.Segment
	for _, s := range segs {
		if s.Type.IsMedia() {
			out = append(out, s)
		}
	}
	return out
}

// take picks the waiting media of the text item (id, time at) for it.
// With an album id, every waiting message of that album; otherwise the
// nearest within the window, and every other within mediaSlack of that
// one, oldest first. Items whose own turn has started are left alone.
func (h *mediaHold) take(session, sender, id string, at, now time.Time, album string) []heldMedia {
	k := holdKey(session, sender)
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.waiting[k]
	free := func(m *heldMedia) bool {
		_, run := h.running[m.ID]
		_, abs := h.absorbed[m.ID]
		return !run && !abs && m.ID != id
	}
	var pick func(m *heldMedia) bool
	if album != "" {
		pick = func(m *heldMedia) bool { return free(m) && albumOf(m.Event.Segments) == album }
	} else {
		nearest := -1
		var best time.Duration
		for i := range list {
			d := absDur(list[i].At.Sub(at))
			if d > inbound.MediaMergeWindow || !free(&list[i]) {
				continue
			}
			if nearest < 0 || d < best {
				nearest, best = i, d
			}
		}
		if nearest < 0 {
			return nil
		}
		anchor := list[nearest].At
		pick = func(m *heldMedia) bool {
			return free(m) && absDur(m.At.Sub(anchor)) <= mediaSlack && absDur(m.At.Sub(at)) <= inbound.MediaMergeWindow
		}
	}
	var got []heldMedia
	rest := list[:0:0]
	for i := range list {
		if pick(&list[i]) {
			got = append(got, list[i])
			h.absorbed[list[i].ID] = holdMark{into: id, at: now}
		} else {
			rest = append(rest, list[i])
		}
	}
	if len(rest) == 0 {
		delete(h.waiting, k)
	} else {
		h.waiting[k] = rest
	}
	return got
}

// albumOf returns the album id of the first medium of segs that has one.
func albumOf(segs []channel.Segment) string {
	for _, s := range segs {
		if s.Media != nil && s.Media.Album != "" {
			return s.Media.Album
		}
	}
	return ""
}

// start marks the media item's own turn as started, unless another item
// took it in: then it returns that item's id.
func (h *mediaHold) start(id string, now time.Time) (into string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m, ok := h.absorbed[id]; ok {
		return m.into
	}
	h.running[id] = now
	return ""
}

// release undoes take for items whose absorption could not be stored.
func (h *mediaHold) release(session, sender string, ms []heldMedia) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := holdKey(session, sender)
	for _, m := range ms {
		delete(h.absorbed, m.ID)
	}
	h.waiting[k] = append(ms, h.waiting[k]...)
	slices.SortFunc(h.waiting[k], func(a, b heldMedia) int { return a.At.Compare(b.At) })
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// assemble runs media-turn assembly for a claimed item, before its gates.
// A media-only item that another took in ends here (done); a text item,
// or the first picture of an album without a caption, gets the media it
// took in appended to l.Event's segments (with the mentions and the quote
// that came with them), and where each taken message's segments are.
func (p *Pipeline) assemble(ctx context.Context, l *inbound.Lease) (act action, done bool, took []mediaOwner) {
	ev := &l.Event
	if ev.Kind != channel.KindMessage || l.HistoryOnly {
		return action{}, false, nil
	}
	album := albumOf(ev.Segments)
	if ev.MediaOnly() {
		into := p.hold.start(l.ID, p.clk.Now())
		if into == "" {
			// Not known here (this process may have started after a
			// text took it in): the flags know.
			f, ok, err := p.flags.GetFlag(ctx, l.SessionKey, l.ID, flagMediaAbsorbed)
			if err != nil {
				return action{kind: actRetry, err: fmt.Errorf("read media absorption: %w", err)}, true, nil
			}
			if ok && f.Active(p.clk.Now()) {
				into = f.Value
			}
		}
		if into != "" {
			o := inbound.Outcome{Code: outcome.SupersededMediaTurn, MergedInto: into,
				Reason: "taken into the same sender's message within the media window; that turn answers both"}
			return action{kind: actComplete, outcome: o}, true, nil
		}
		if album == "" {
			return action{}, false, nil
		}
		// An album without a caption: its first picture to run answers
		// for the others.
	} else {
		if ev.Text() == "" {
			return action{}, false, nil
		}
		// A text with media of its own takes only the rest of its album.
		if len(mediaSegments(ev.Segments)) > 0 && album == "" {
			return action{}, false, nil
		}
	}
	ms, act, done := p.takeMedia(ctx, l, album)
	if done {
		return act, true, nil
	}
	segs := slices.Clone(ev.Segments)
	for _, m := range ms {
		from := len(segs)
		segs = append(segs, carried(m.Event.Segments)...)
		took = append(took, mediaOwner{from: from, to: len(segs), id: m.ID, event: m.Event})
		if ev.Quoted == nil && m.Event.Quoted != nil {
			q := m.Event.Clone().Quoted
			ev.Quoted = q
		}
		ev.ToMe = ev.ToMe || m.Event.ToMe
	}
	ev.Segments = segs
	return action{}, false, took
}

// takeMedia finds the media items l takes in (see mediaHold.take), stores
// the absorption before anything uses it, and returns them. A retry takes
// what its first attempt took.
func (p *Pipeline) takeMedia(ctx context.Context, l *inbound.Lease, album string) ([]heldMedia, action, bool) {
	ev := &l.Event
	var ms []heldMedia
	if l.Claims > 1 {
		// The media items end superseded whatever this attempt does.
		f, ok, err := p.flags.GetFlag(ctx, l.SessionKey, l.ID, flagMediaTaken)
		if err != nil {
			return nil, action{kind: actRetry, err: fmt.Errorf("read media taken: %w", err)}, true
		}
		if ok && json.Unmarshal([]byte(f.Value), &ms) != nil {
			ms = nil
		}
		if ms != nil {
			return ms, action{}, false
		}
	}
	now := p.clk.Now()
	ms = p.hold.take(l.SessionKey, ev.Sender.ID, l.ID, ev.Time, now, album)
	if len(ms) == 0 && p.heldAtStart[holdKey(l.SessionKey, ev.Sender.ID)] && now.Sub(p.started) < 2*inbound.MediaMergeWindow+time.Minute {
		// Media messages of this sender were waiting when the pipeline
		// started: they are not in the hold. The history knows them.
		p.recallHeld(ctx, l)
		ms = p.hold.take(l.SessionKey, ev.Sender.ID, l.ID, ev.Time, now, album)
	}
	if len(ms) == 0 {
		return nil, action{}, false
	}
	// Durable before the media are used: a crash now leaves the media
	// items ending superseded and this turn, retried, taking them.
	blob, _ := json.Marshal(ms) // events and times: cannot fail
	fs := []gate.Flag{{SessionKey: l.SessionKey, Subject: l.ID, Name: flagMediaTaken, Until: now.Add(mediaFlagTTL), Value: string(blob)}}
	for _, m := range ms {
		fs = append(fs, gate.Flag{SessionKey: l.SessionKey, Subject: m.ID, Name: flagMediaAbsorbed, Until: now.Add(mediaFlagTTL), Value: l.ID})
	}
	if err := gate.SetFlags(ctx, p.flags, fs); err != nil {
		p.hold.release(l.SessionKey, ev.Sender.ID, ms)
		return nil, action{kind: actRetry, err: fmt.Errorf("store media absorption: %w", err)}, true
	}
	return ms, action{}, false
}

// recallHeld notes the sender's media-only messages of the session that
// are still waiting in the queue, from the history (after a restart the
// hold is empty).
func (p *Pipeline) recallHeld(ctx context.Context, l *inbound.Lease) {
	hist, err := memory.RecentOf(ctx, p.opt.History, l.SessionKey, 50)
	if err != nil {
		p.log.Warn("media assembly: read history", "session", l.SessionKey, "err", err)
		return
	}
	for i := range hist {
		e := &hist[i]
		if e.Key == l.ID || e.Direction != memory.In || e.Event.Sender.ID != l.Event.Sender.ID || !e.Event.MediaOnly() ||
			absDur(e.Event.Time.Sub(l.Event.Time)) > inbound.MediaMergeWindow {
			continue
		}
		rec, err := p.opt.Queue.Lookup(ctx, e.Key)
		if err != nil || rec.Status != inbound.StatusPending || rec.HistoryOnly {
			continue
		}
		p.hold.note(&inbound.Item{ID: e.Key, SessionKey: l.SessionKey, Event: e.Event}, p.clk.Now())
	}
}

// carried returns what a taken message brings into the turn: its media,
// its mentions and its quote (a picture "@bot"-ed and then captioned is
// addressed to the bot); its text is empty by definition.
func carried(segs []channel.Segment) []channel.Segment {
	var out []channel.Segment
	for _, s := range segs {
		switch {
		case s.Type.IsMedia(), s.Type == channel.SegMention, s.Type == channel.SegQuote:
			out = append(out, s)
		}
	}
	return out
}

// heldBefore lists the senders (holdKey) with media-only messages still
// waiting in the queue when the pipeline starts: only their text turns
// look for them in the history (see recallHeld).
func heldBefore(ctx context.Context, db inbound.RecordReader, now time.Time) (map[string]bool, error) {
	out := map[string]bool{}
	q := inbound.RecordQuery{Status: inbound.StatusPending, Limit: inbound.MaxRecordPage}
	for pages := 0; pages < 20; pages++ {
		page, err := db.ListRecords(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Records {
			if r.Text == "" && !r.HistoryOnly && r.AvailableAt.After(now.Add(-inbound.MediaMergeWindow)) {
				out[holdKey(r.SessionKey, r.SenderID)] = true
			}
		}
		if page.Next == "" {
			break
		}
		q.Before = page.Next
	}
	return out, nil
}
