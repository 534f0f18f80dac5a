package wecom

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
)

// streamsFile is the name of ModeAIBot's state file in Config.StateDir.
const streamsFile = "wecom-aibot-streams.json"

// maxStreams bounds the streams kept (open ones and finished ones whose
// response_url may still be used).
const maxStreams = 4096

// chunkSeparator joins the chunks of a stream (a Markdown paragraph
// break).
const chunkSeparator = "\n\n"

// StreamID returns the stream id the adapter answers an AI-bot message
// with: derived from the message id, so a retried callback, a restarted
// process and a reply quoting the message all name the same stream.
func StreamID(msgID string) string {
	sum := sha256.Sum256([]byte("wecom-stream\x00" + msgID))
	return "persona-" + hex.EncodeToString(sum[:12])
}

// stream is the passive answer to one AI-bot message in ModeAIBot: the
// chunks the pipeline sent for it, served to WeCom's refresh polls, and
// the message's one-time response_url.
type stream struct {
	ID          string        `json:"id"`
	MsgID       string        `json:"msgid,omitempty"`
	Chat        channel.Chat  `json:"chat"`
	ResponseURL string        `json:"response_url,omitempty"`
	URLUsed     bool          `json:"url_used,omitempty"`
	Created     time.Time     `json:"created"`
	Chunks      []streamChunk `json:"chunks,omitempty"`
	Last        time.Time     `json:"last,omitzero"`
	// Seq orders the streams by their last chunk (times may tie).
	Seq      uint64 `json:"seq,omitempty"`
	Finished bool   `json:"finished,omitempty"`
	// FinishSeen: a poll got the finished stream (informational).
	FinishSeen bool `json:"finish_seen,omitempty"`

	// users counts the callbacks of the message whose sink call is in
	// progress (a retry may arrive while the first is still in it);
	// settled says one was accepted, or that the stream existed before
	// with none in progress (loaded, taken up by a poll, or accepted).
	// A refused callback drops the stream only when it was the last user
	// and none settled it.
	users   int
	settled bool
}

type streamChunk struct {
	Key  string `json:"key,omitempty"`
	Text string `json:"text"`
}

// content is what the stream shows: its chunks joined.
func (s *stream) content() string {
	parts := make([]string, len(s.Chunks))
	for i, ch := range s.Chunks {
		parts[i] = ch.Text
	}
	return strings.Join(parts, chunkSeparator)
}

// chunkID is the message id of chunk i of the stream.
func (s *stream) chunkID(i int) string { return fmt.Sprintf("%s#%d", s.ID, i) }

// streamStore keeps ModeAIBot's streams, in memory and (with a path) in a
// file rewritten after every change (see flush).
type streamStore struct {
	c    *Channel
	path string

	mu   sync.Mutex
	byID map[string]*stream
	seq  uint64
	// ver counts the changes, written is the change the file has (both
	// under mu); writeMu serialises the writes.
	ver, written uint64
	writeMu      sync.Mutex
}

func newStreamStore(c *Channel, dir string) (*streamStore, error) {
	s := &streamStore{c: c, byID: map[string]*stream{}}
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("StateDir: %w", err)
	}
	s.path = filepath.Join(dir, streamsFile)
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("StateDir: %w", err)
	}
	var list []*stream
	if err := json.Unmarshal(b, &list); err != nil {
		c.log.Error("wecom_streams_corrupt", "path", s.path, "err", err, "effect", "starting without the saved streams")
		return s, nil
	}
	for _, st := range list {
		if st != nil && st.ID != "" && st.Chat.Kind.Valid() && st.Chat.ID != "" {
			s.byID[st.ID] = st
			s.seq = max(s.seq, st.Seq)
		}
	}
	s.pruneLocked(c.clk.Now())
	c.log.Info("wecom_streams_loaded", "streams", len(s.byID))
	return s, nil
}

// saveLocked notes a change for the file; the method that made it
// writes the file with flush once it released the lock.
func (s *streamStore) saveLocked() { s.ver++ }

// flush writes the store to its file (write, sync, rename) when it
// changed since the last write. The snapshot is taken under the lock,
// the file is written outside it, so polls and sends are not held up by
// the disk; writes are serialised, and callers waiting for one are
// covered by the newest snapshot at once (coalesced). A caller returns
// once its change is on disk.
func (s *streamStore) flush() {
	if s.path == "" {
		return
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if s.ver == s.written {
		s.mu.Unlock()
		return
	}
	v := s.ver
	list := make([]*stream, 0, len(s.byID))
	for _, st := range s.byID {
		list = append(list, st)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Created.Before(list[j].Created) })
	b, err := json.Marshal(list)
	s.mu.Unlock()
	if err == nil {
		err = writeFileAtomic(s.path, b)
	}
	s.mu.Lock()
	s.written = v
	s.mu.Unlock()
	if err != nil {
		s.c.log.Error("wecom_streams_save_failed", "path", s.path, "err", err,
			"effect", "a restart would lose the open streams")
	}
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".streams-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// open returns the stream answering msgID, creating it, for a callback
// about to call the sink; release must follow with the sink's verdict.
func (s *streamStore) open(msgID string, chat channel.Chat, responseURL string, now time.Time) *stream {
	defer s.flush() // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	id := StreamID(msgID)
	st, ok := s.byID[id]
	switch {
	case !ok:
		st = &stream{ID: id, MsgID: msgID, Chat: chat, Created: now}
		s.byID[id] = st
	case st.users == 0:
		st.settled = true
	}
	st.users++
	if st.ResponseURL == "" && responseURL != "" {
		st.ResponseURL = responseURL
	}
	if st.MsgID == "" {
		st.MsgID = msgID
	}
	s.pruneLocked(now)
	s.saveLocked()
	return st
}

// release ends a callback's use of st: accepted settles the stream; a
// refusal drops it when no other callback of the message is in the sink,
// none was accepted and no chunk reached it (a retry that was answered
// with it keeps it).
func (s *streamStore) release(st *stream, accepted bool) {
	defer s.flush() // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	st.users--
	if accepted {
		st.settled = true
		return
	}
	if st.users == 0 && !st.settled && len(st.Chunks) == 0 && s.byID[st.ID] == st {
		delete(s.byID, st.ID)
		s.saveLocked()
	}
}

// finishedLocked settles whether st is complete at now: it has chunks and
// none came for StreamIdle, or it is StreamMaxAge old, or it is full.
func (s *streamStore) finishedLocked(st *stream, now time.Time) bool {
	if st.Finished {
		return true
	}
	cfg := s.c.cfg
	if len(st.Chunks) > 0 && now.Sub(st.Last) >= cfg.StreamIdle || now.Sub(st.Created) >= cfg.StreamMaxAge {
		st.Finished = true
		s.saveLocked()
	}
	return st.Finished
}

// poll answers a refresh of stream id: its content so far and whether it
// is finished. A stream the store does not know (a restart without
// StateDir) is taken up empty, so that the chunks a resumed turn sends
// still reach it.
func (s *streamStore) poll(id string, chat channel.Chat, now time.Time) (content string, finished bool) {
	defer s.flush() // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.byID[id]
	if !ok || st.Chat != chat {
		if ok { // a stream id of another chat: never shown here
			return "", true
		}
		st = &stream{ID: id, Chat: chat, Created: now}
		s.byID[id] = st
		s.c.log.Warn("wecom_stream_unknown", "stream", id, "chat", chat.String(),
			"effect", "taken up empty; chunks of a resumed reply will fill it")
		s.saveLocked()
	}
	finished = s.finishedLocked(st, now)
	if finished && !st.FinishSeen {
		st.FinishSeen = true
		s.saveLocked()
	}
	return st.content(), finished
}

// route is where a chunk goes in ModeAIBot.
type route struct {
	st  *stream // append to this stream
	url *stream // or send through this stream's response_url
}

// target picks the stream a chunk joins (see the package documentation):
// the stream of the quoted message, else the chat's stream in progress,
// else its oldest empty open stream; a chunk that cannot join a stream
// uses a response_url.
func (s *streamStore) target(out channel.Outgoing, now time.Time) route {
	defer s.flush() // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	fits := func(st *stream) bool {
		n := len(st.content())
		if n > 0 {
			n += len(chunkSeparator)
		}
		return n+len(out.Text) <= MaxStreamBytes
	}
	var replyTo *stream
	if out.ReplyTo != "" {
		if st, ok := s.byID[StreamID(out.ReplyTo)]; ok && st.Chat == out.Chat {
			replyTo = st
		}
	}
	if replyTo != nil && !s.finishedLocked(replyTo, now) && fits(replyTo) {
		return route{st: replyTo}
	}
	var current, empty *stream
	for _, st := range s.byID {
		if st.Chat != out.Chat || s.finishedLocked(st, now) {
			continue
		}
		switch {
		case len(st.Chunks) > 0:
			if current == nil || st.Seq > current.Seq {
				current = st
			}
		case empty == nil || st.Created.Before(empty.Created):
			empty = st
		}
	}
	if replyTo == nil {
		if current != nil && fits(current) {
			return route{st: current}
		}
		if current != nil { // full: it ends here
			current.Finished = true
			s.saveLocked()
		}
		if empty != nil && fits(empty) {
			return route{st: empty}
		}
	}
	// No stream takes it: the response_url of the quoted message, else
	// the newest unused one of the chat.
	usable := func(st *stream) bool {
		return st.ResponseURL != "" && !st.URLUsed && now.Sub(st.Created) < ResponseURLLifetime
	}
	if replyTo != nil && usable(replyTo) {
		return route{url: replyTo}
	}
	var newest *stream
	for _, st := range s.byID {
		if st.Chat == out.Chat && usable(st) && (newest == nil || st.Created.After(newest.Created)) {
			newest = st
		}
	}
	return route{url: newest}
}

// appendChunk adds a chunk to st and returns its index; a chunk with the
// same key as one already in the stream is not added again.
func (s *streamStore) appendChunk(st *stream, key, text string, now time.Time) (int, error) {
	defer s.flush() // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	if key != "" {
		for i, ch := range st.Chunks {
			if ch.Key == key {
				return i, nil
			}
		}
	}
	if s.finishedLocked(st, now) {
		return 0, errStreamFinished
	}
	st.Chunks = append(st.Chunks, streamChunk{Key: key, Text: text})
	st.Last = now
	s.seq++
	st.Seq = s.seq
	s.saveLocked()
	return len(st.Chunks) - 1, nil
}

// errStreamFinished: the stream finished between routing and appending.
var errStreamFinished = errors.New("wecom: the stream finished")

// takeURL marks st's response_url used and returns it.
func (s *streamStore) takeURL(st *stream) (string, bool) {
	defer s.flush() // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.URLUsed || st.ResponseURL == "" {
		return "", false
	}
	st.URLUsed = true
	s.saveLocked()
	return st.ResponseURL, true
}

// prune drops streams whose response_url expired, and the oldest beyond
// maxStreams.
func (s *streamStore) prune(now time.Time) {
	defer s.flush() // after the unlock
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.byID)
	s.pruneLocked(now)
	if len(s.byID) != n {
		s.saveLocked()
	}
}

func (s *streamStore) pruneLocked(now time.Time) {
	for id, st := range s.byID {
		if now.Sub(st.Created) > ResponseURLLifetime+time.Minute {
			delete(s.byID, id)
		}
	}
	if len(s.byID) <= maxStreams {
		return
	}
	list := make([]*stream, 0, len(s.byID))
	for _, st := range s.byID {
		list = append(list, st)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Created.Before(list[j].Created) })
	for _, st := range list[:len(list)-maxStreams] {
		delete(s.byID, st.ID)
	}
}
