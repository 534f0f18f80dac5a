package web

import (
	"container/list"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/clock"
)

// Defaults for [NewSources].
const (
	// DefaultSourcesTTL is how long a read page counts as recent.
	DefaultSourcesTTL = 30 * time.Minute
	// DefaultSourcesPerSession is how many recent pages a session keeps.
	DefaultSourcesPerSession = 8
	// DefaultMaxSessions bounds how many sessions a Sources tracks; the
	// least recently active are dropped first.
	DefaultMaxSessions = 4096
)

// Source is one page a session read, for the prompt's "recent sources"
// block.
type Source struct {
	// URL is the page's address as it was read (its FinalURL).
	URL string `json:"url"`
	// Title is the page title.
	Title string `json:"title,omitempty"`
	// Excerpt is the start of the page text (see [Excerpt]).
	Excerpt string `json:"excerpt,omitempty"`
	// At is when the page was read; zero means now.
	At time.Time `json:"at"`
}

// Sources remembers the pages each session read recently: at most
// perSession per session, each for ttl after it was (last) added. It is
// safe for concurrent use and its memory is bounded: a session whose
// sources all expired is dropped, and past DefaultMaxSessions the least
// recently active session is dropped.
type Sources struct {
	clock       clock.Clock
	ttl         time.Duration
	perSession  int
	maxSessions int

	mu       sync.Mutex
	sessions map[string]*list.Element // of *sessionSources
	active   *list.List               // most recently added to first
}

type sessionSources struct {
	id      string
	last    time.Time // the newest At
	entries []sourceEntry
}

type sourceEntry struct {
	key string // CanonicalURL, or the trimmed URL when it has none
	src Source
}

// NewSources returns an empty Sources. A nil clock is the wall clock; ttl
// <= 0 is DefaultSourcesTTL and perSession <= 0 DefaultSourcesPerSession.
func NewSources(c clock.Clock, ttl time.Duration, perSession int) *Sources {
	if ttl <= 0 {
		ttl = DefaultSourcesTTL
	}
	if perSession <= 0 {
		perSession = DefaultSourcesPerSession
	}
	return &Sources{
		clock:       clock.OrReal(c),
		ttl:         ttl,
		perSession:  perSession,
		maxSessions: DefaultMaxSessions,
		sessions:    map[string]*list.Element{},
		active:      list.New(),
	}
}

// sourceKey is the de-duplication key of a URL.
func sourceKey(u string) string {
	if k, ok := CanonicalURL(u); ok {
		return k
	}
	return strings.TrimSpace(u)
}

// Add records that session read s, newest first. A zero s.At is the
// clock's now. A URL already listed (by CanonicalURL) moves to the front
// with the new title, excerpt and time. Empty URLs are ignored.
func (s *Sources) Add(session string, src Source) {
	key := sourceKey(src.URL)
	if key == "" {
		return
	}
	now := s.clock.Now()
	if src.At.IsZero() {
		src.At = now
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ss *sessionSources
	if el, ok := s.sessions[session]; ok {
		ss = el.Value.(*sessionSources)
		s.active.MoveToFront(el)
	} else {
		ss = &sessionSources{id: session}
		s.sessions[session] = s.active.PushFront(ss)
	}
	ss.entries = slices.DeleteFunc(ss.entries, func(e sourceEntry) bool { return e.key == key })
	ss.entries = slices.Insert(ss.entries, 0, sourceEntry{key: key, src: src})
	if len(ss.entries) > s.perSession {
		clear(ss.entries[s.perSession:])
		ss.entries = ss.entries[:s.perSession]
	}
	if src.At.After(ss.last) {
		ss.last = src.At
	}
	s.evictLocked(now)
}

// evictLocked drops idle sessions from the back of the activity list:
// those whose newest source expired, and any past maxSessions.
func (s *Sources) evictLocked(now time.Time) {
	for el := s.active.Back(); el != nil; el = s.active.Back() {
		ss := el.Value.(*sessionSources)
		if s.active.Len() <= s.maxSessions && s.fresh(ss.last, now) {
			return
		}
		s.active.Remove(el)
		delete(s.sessions, ss.id)
	}
}

func (s *Sources) fresh(at, now time.Time) bool { return now.Before(at.Add(s.ttl)) }

// Recent returns the session's sources still fresh at now, newest first.
func (s *Sources) Recent(session string, now time.Time) []Source {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.sessions[session]
	if !ok {
		return nil
	}
	var out []Source
	for _, e := range el.Value.(*sessionSources).entries {
		if s.fresh(e.src.At, now) {
			out = append(out, e.src)
		}
	}
	return out
}

// Seen reports whether session read url (by CanonicalURL) within the TTL
// before now; the link trigger uses it to answer a link once per resource.
func (s *Sources) Seen(session, url string, now time.Time) bool {
	key := sourceKey(url)
	if key == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.sessions[session]
	if !ok {
		return false
	}
	for _, e := range el.Value.(*sessionSources).entries {
		if e.key == key {
			return s.fresh(e.src.At, now)
		}
	}
	return false
}

// Len reports how many sessions are tracked.
func (s *Sources) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active.Len()
}
