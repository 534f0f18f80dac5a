package inbound

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
)

// Journal is the local write-failure journal. When the durable
// append to the Queue fails, the pipeline appends the item here and reports
// the event as handled; a Replayer later moves the entries into the queue.
type Journal interface {
	// Append stores it durably (fsynced) before returning. An empty it.ID is
	// filled from it.Event.Key(). Appending an id that is still pending
	// replaces its content and keeps its place.
	Append(ctx context.Context, it Item) error
	// Pending returns the entries not yet removed, in append order.
	Pending(ctx context.Context) ([]Item, error)
	// Remove durably drops the entries with the given ids; unknown ids are
	// ignored. After an error the entries may still be pending.
	Remove(ctx context.Context, ids ...string) error
}

// Journal errors.
var (
	// ErrJournalClosed is returned by every method of a closed FileJournal.
	ErrJournalClosed = errors.New("inbound: journal closed")
	// ErrJournalCorrupt is wrapped by OpenJournal when a line in the middle
	// of the file cannot be read (a torn last line is not an error).
	ErrJournalCorrupt = errors.New("inbound: journal corrupt")
)

// DefaultJournalCompactBytes is the file size above which Remove rewrites a
// FileJournal that is at least half dead entries.
const DefaultJournalCompactBytes = 1 << 20

// FileJournal is a Journal in one append-only file of JSON lines: an "add"
// line per Append and a "del" tombstone line per Remove. Every write is
// fsynced before the call returns. Remove compacts the file (rewrite to a
// temporary file, fsync, rename) when nothing is pending any more, or when
// the file has grown past DefaultJournalCompactBytes and is mostly dead
// entries. A line torn by a crash during a write is at the end of the file;
// OpenJournal ignores and truncates it.
//
// A FileJournal is safe for concurrent use by one process; two processes
// must not open the same file.
type FileJournal struct {
	path      string
	compactAt int64

	mu        sync.Mutex
	f         *os.File // nil once closed
	size      int64    // bytes of complete lines in f
	seq       int64    // append order of live entries
	live      map[string]journalEntry
	liveBytes int64
	broken    error // sticky: the file state is unknown after a failed rollback
}

type journalEntry struct {
	seq  int64
	line []byte // the "add" line, newline included
}

// journalRecord is one line of the file.
type journalRecord struct {
	Op   string       `json:"op"` // "add" or "del"
	ID   string       `json:"id,omitempty"`
	IDs  []string     `json:"ids,omitempty"`
	Item *journalItem `json:"item,omitempty"`
}

// journalItem is an Item as stored. The event's Raw payload is kept apart,
// base64 encoded, because it need not be valid JSON.
type journalItem struct {
	SessionKey  string        `json:"session_key,omitempty"`
	Event       channel.Event `json:"event"`
	Raw         []byte        `json:"raw,omitempty"`
	Priority    int           `json:"priority,omitempty"`
	HistoryOnly bool          `json:"history_only,omitempty"`
	AvailableAt time.Time     `json:"available_at,omitzero"`
}

const (
	opAdd = "add"
	opDel = "del"
)

var _ Journal = (*FileJournal)(nil)

// OpenJournal opens (creating it if needed, mode 0600) the journal file at
// path and loads its pending entries. The directory must exist.
func OpenJournal(path string) (*FileJournal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("inbound: open journal: %w", err)
	}
	j := &FileJournal{path: path, compactAt: DefaultJournalCompactBytes, f: f, live: map[string]journalEntry{}}
	if err := j.load(); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("inbound: open journal: %w", err)
	}
	return j, nil
}

// load replays the file into j.live and truncates a torn tail.
func (j *FileJournal) load() error {
	info, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("inbound: open journal: %w", err)
	}
	r := bufio.NewReader(io.NewSectionReader(j.f, 0, info.Size()))
	var off int64
	var badAt int64 = -1 // offset of the first unreadable line
	badLine := 0
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(line) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("inbound: read journal: %w", err)
		}
		complete := err == nil // ends with '\n'
		var rec journalRecord
		ok := complete && decodeRecord(line, &rec)
		switch {
		case ok && badAt >= 0:
			return fmt.Errorf("%w: %s line %d is unreadable but later lines are not", ErrJournalCorrupt, j.path, badLine)
		case ok:
			j.apply(rec, line)
			off += int64(len(line))
		case len(bytes.TrimSpace(line)) == 0 && complete && badAt < 0:
			off += int64(len(line)) // a blank line
		case badAt < 0:
			badAt, badLine = off, n
		}
		if !complete {
			break
		}
	}
	j.size = off
	if off < info.Size() { // drop the torn tail so appends start clean
		if err := j.f.Truncate(off); err != nil {
			return fmt.Errorf("inbound: truncate torn journal tail: %w", err)
		}
		if err := j.f.Sync(); err != nil {
			return fmt.Errorf("inbound: truncate torn journal tail: %w", err)
		}
	}
	return nil
}

func decodeRecord(line []byte, rec *journalRecord) bool {
	if err := json.Unmarshal(line, rec); err != nil {
		return false
	}
	switch rec.Op {
	case opAdd:
		return rec.ID != "" && rec.Item != nil
	case opDel:
		return len(rec.IDs) > 0
	}
	return false
}

// apply updates the live set with one record read from the file.
func (j *FileJournal) apply(rec journalRecord, line []byte) {
	switch rec.Op {
	case opAdd:
		j.put(rec.ID, line)
	case opDel:
		for _, id := range rec.IDs {
			j.drop(id)
		}
	}
}

func (j *FileJournal) put(id string, line []byte) {
	e, ok := j.live[id]
	if ok {
		j.liveBytes -= int64(len(e.line))
	} else {
		j.seq++
		e.seq = j.seq
	}
	e.line = line
	j.live[id] = e
	j.liveBytes += int64(len(line))
}

func (j *FileJournal) drop(id string) {
	if e, ok := j.live[id]; ok {
		j.liveBytes -= int64(len(e.line))
		delete(j.live, id)
	}
}

// Path returns the journal file's path.
func (j *FileJournal) Path() string { return j.path }

func (j *FileJournal) usableLocked() error {
	switch {
	case j.f == nil:
		return ErrJournalClosed
	case j.broken != nil:
		return j.broken
	}
	return nil
}

// Append writes it as one fsynced line. See Journal.
func (j *FileJournal) Append(ctx context.Context, it Item) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	it.ID = cmp.Or(it.ID, it.Event.Key())
	ji := journalItem{
		SessionKey:  it.SessionKey,
		Event:       it.Event,
		Raw:         it.Event.Raw,
		Priority:    it.Priority,
		HistoryOnly: it.HistoryOnly,
		AvailableAt: it.AvailableAt,
	}
	ji.Event.Raw = nil
	line, err := encodeRecord(journalRecord{Op: opAdd, ID: it.ID, Item: &ji})
	if err != nil {
		return fmt.Errorf("inbound: journal append %s: %w", it.ID, err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usableLocked(); err != nil {
		return err
	}
	if err := j.writeLocked(line); err != nil {
		return fmt.Errorf("inbound: journal append %s: %w", it.ID, err)
	}
	j.put(it.ID, line)
	return nil
}

func encodeRecord(rec journalRecord) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// writeLocked appends line and fsyncs. On failure it cuts the file back to
// its previous size, so a half-written line never precedes later appends.
func (j *FileJournal) writeLocked(line []byte) error {
	_, err := j.f.WriteAt(line, j.size)
	if err == nil {
		err = j.f.Sync()
	}
	if err != nil {
		if terr := j.f.Truncate(j.size); terr != nil {
			j.broken = fmt.Errorf("inbound: journal unusable after a failed write: %w", errors.Join(err, terr))
		}
		return err
	}
	j.size += int64(len(line))
	return nil
}

// Pending returns the live entries in append order. See Journal.
func (j *FileJournal) Pending(ctx context.Context) ([]Item, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	j.mu.Lock()
	if err := j.usableLocked(); err != nil {
		j.mu.Unlock()
		return nil, err
	}
	entries := j.entriesLocked()
	j.mu.Unlock()

	items := make([]Item, 0, len(entries))
	for _, e := range entries {
		var rec journalRecord
		if err := json.Unmarshal(e.line, &rec); err != nil {
			return nil, fmt.Errorf("inbound: journal entry: %w", err) // cannot happen: we wrote and read it
		}
		ji := rec.Item
		ev := ji.Event
		if ji.Raw != nil {
			ev.Raw = json.RawMessage(ji.Raw)
		}
		items = append(items, Item{
			ID:          rec.ID,
			SessionKey:  ji.SessionKey,
			Event:       ev,
			Priority:    ji.Priority,
			HistoryOnly: ji.HistoryOnly,
			AvailableAt: ji.AvailableAt,
		})
	}
	return items, nil
}

// entriesLocked returns the live entries in append order.
func (j *FileJournal) entriesLocked() []journalEntry {
	entries := make([]journalEntry, 0, len(j.live))
	for _, e := range j.live {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b journalEntry) int { return cmp.Compare(a.seq, b.seq) })
	return entries
}

// Remove writes one fsynced tombstone line for the live ids among ids, then
// compacts the file when nothing is pending or it is large and mostly dead.
// A failed compaction is not an error (the removal is already durable); it
// is tried again on a later Remove.
func (j *FileJournal) Remove(ctx context.Context, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usableLocked(); err != nil {
		return err
	}
	var del []string
	for _, id := range ids {
		if _, ok := j.live[id]; ok && !slices.Contains(del, id) {
			del = append(del, id)
		}
	}
	if len(del) == 0 {
		return nil
	}
	line, err := encodeRecord(journalRecord{Op: opDel, IDs: del})
	if err != nil {
		return fmt.Errorf("inbound: journal remove: %w", err)
	}
	if err := j.writeLocked(line); err != nil {
		return fmt.Errorf("inbound: journal remove: %w", err)
	}
	for _, id := range del {
		j.drop(id)
	}
	if len(j.live) == 0 || (j.size >= j.compactAt && j.liveBytes*2 <= j.size) {
		_ = j.compactLocked()
	}
	return nil
}

// compactLocked rewrites the file with only the live entries.
func (j *FileJournal) compactLocked() error {
	dir, base := filepath.Split(j.path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, base+".compact-*")
	if err != nil {
		return err
	}
	fail := func(err error) error {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	var size int64
	w := bufio.NewWriter(tmp)
	for _, e := range j.entriesLocked() {
		n, _ := w.Write(e.line)
		size += int64(n)
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil {
		return fail(err)
	}
	// The old and the new file hold the same live entries, so a crash
	// before the directory sync leaves either one, both consistent.
	_ = syncDir(dir)
	_ = j.f.Close() // read-only use since the last Sync: nothing to lose
	j.f, j.size = tmp, size
	return nil
}

// Close closes the file. Later calls fail with ErrJournalClosed.
func (j *FileJournal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// syncDir fsyncs a directory so a created or renamed file survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}
