package wecom

import (
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
)

// Bounds of the in-memory caches.
const (
	maxSent          = 4096
	sentTTL          = 6 * time.Hour
	maxRecentChats   = 1024
	recentPerChat    = 64
	maxMediaKeys     = 1024
	mediaKeyLifetime = 15 * time.Minute
)

// sentMemory remembers, per Outgoing.IdempotencyKey, what became of a
// send: the receipt of a delivered chunk (a repeat returns it), or the
// attempt whose answer was lost (a repeat must not create a second
// message). Bounded by count, oldest first.
type sentMemory struct {
	mu    sync.Mutex
	m     map[string]*sentEntry
	order []string
}

type sentEntry struct {
	receipt channel.Receipt
	done    bool
	// unsure: an attempt may have reached WeCom; how is the attempt's
	// own business (kind, reqID, streamID).
	unsure   bool
	kind     string
	reqID    string
	streamID string
	chat     channel.Chat
	at       time.Time
	// parts are the message ids of the parts of an app message that an
	// earlier attempt delivered; started is when the attempt of the
	// uncertain part after them began (Config.Clock).
	parts   []string
	started time.Time
}

func newSentMemory() *sentMemory { return &sentMemory{m: map[string]*sentEntry{}} }

// done returns the receipt of a chunk already delivered.
func (s *sentMemory) done(key string) (channel.Receipt, bool) {
	if key == "" {
		return channel.Receipt{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok || !e.done {
		return channel.Receipt{}, false
	}
	return e.receipt, true
}

// remember records a delivered chunk.
func (s *sentMemory) remember(key string, rc channel.Receipt) {
	if key == "" {
		return
	}
	s.put(key, &sentEntry{receipt: rc, done: true, at: time.Now()})
}

// unsure records an attempt whose outcome is unknown.
func (s *sentMemory) unsure(key string, e sentEntry) {
	if key == "" {
		return
	}
	e.unsure, e.at = true, time.Now()
	s.put(key, &e)
}

// record records what an unfinished attempt achieved, as e says.
func (s *sentMemory) record(key string, e sentEntry) {
	if key == "" {
		return
	}
	e.at = time.Now()
	s.put(key, &e)
}

// attempt returns the unsure attempt recorded for key.
func (s *sentMemory) attempt(key string) (sentEntry, bool) {
	if key == "" {
		return sentEntry{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok || !e.unsure {
		return sentEntry{}, false
	}
	return *e, true
}

// pending returns what an earlier, unfinished attempt of key achieved
// (an app message's delivered parts, an uncertain attempt).
func (s *sentMemory) pending(key string) (sentEntry, bool) {
	if key == "" {
		return sentEntry{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok || e.done {
		return sentEntry{}, false
	}
	return *e, true
}

func (s *sentMemory) put(key string, e *sentEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; !ok {
		s.order = append(s.order, key)
	}
	s.m[key] = e
	for len(s.order) > maxSent {
		delete(s.m, s.order[0])
		s.order = s.order[1:]
	}
}

// prune forgets entries older than sentTTL (now is wall time: the entries
// carry wall time, the memory only bounds itself).
func (s *sentMemory) prune(time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cut := time.Now().Add(-sentTTL)
	keep := s.order[:0]
	for _, k := range s.order {
		if e := s.m[k]; e != nil && e.at.Before(cut) {
			delete(s.m, k)
			continue
		}
		keep = append(keep, k)
	}
	s.order = keep
}

// recentMessage is one message of a chat the adapter saw or sent, for
// resolving AI-bot quotes (which carry the quoted content, not its id).
type recentMessage struct {
	id      string
	text    string // as the platform shows it
	alt     string // the text without the bot's mention, when different
	sender  channel.Sender
	fromBot bool
}

// recentMessages keeps the last recentPerChat messages of the last
// maxRecentChats chats.
type recentMessages struct {
	mu    sync.Mutex
	chats map[channel.Chat][]recentMessage
	order []channel.Chat
}

func newRecentMessages() *recentMessages {
	return &recentMessages{chats: map[channel.Chat][]recentMessage{}}
}

func (r *recentMessages) add(chat channel.Chat, m recentMessage) {
	if strings.TrimSpace(m.text) == "" && strings.TrimSpace(m.alt) == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	list, ok := r.chats[chat]
	if !ok {
		r.order = append(r.order, chat)
		for len(r.order) > maxRecentChats {
			delete(r.chats, r.order[0])
			r.order = r.order[1:]
		}
	}
	for i := range list {
		if list[i].id == m.id { // a redelivery or a stream growing
			list[i] = m
			r.chats[chat] = list
			return
		}
	}
	list = append(list, m)
	if len(list) > recentPerChat {
		list = list[len(list)-recentPerChat:]
	}
	r.chats[chat] = list
}

// find returns the newest message of chat whose text is text (compared
// without surrounding white space).
func (r *recentMessages) find(chat channel.Chat, text string) (recentMessage, bool) {
	text = strings.TrimSpace(text)
	if text == "" {
		return recentMessage{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	list := r.chats[chat]
	for i := len(list) - 1; i >= 0; i-- {
		m := list[i]
		if strings.TrimSpace(m.text) == text || (m.alt != "" && strings.TrimSpace(m.alt) == text) {
			return m, true
		}
	}
	return recentMessage{}, false
}

// mediaKeys maps AI-bot media links to the aeskey their message carried
// (long connection); links are valid for minutes, so the keys are kept
// in memory only, never stored with the message.
type mediaKeys struct {
	mu    sync.Mutex
	m     map[string]keyEntry
	order []string
}

type keyEntry struct {
	key string
	at  time.Time
}

func newMediaKeys() *mediaKeys { return &mediaKeys{m: map[string]keyEntry{}} }

func (k *mediaKeys) put(url, key string, now time.Time) {
	if url == "" || key == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[url]; !ok {
		k.order = append(k.order, url)
	}
	k.m[url] = keyEntry{key: key, at: now}
	for len(k.order) > maxMediaKeys {
		delete(k.m, k.order[0])
		k.order = k.order[1:]
	}
}

func (k *mediaKeys) get(url string, now time.Time) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[url]
	if !ok || now.Sub(e.at) > mediaKeyLifetime {
		return "", false
	}
	return e.key, true
}
