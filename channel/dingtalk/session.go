package dingtalk

import (
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/personakit/persona/channel"
)

// maxSessions bounds the remembered session webhooks; maxQuotes the
// remembered messages a reply can quote.
const (
	maxSessions = 4096
	maxQuotes   = 2048
)

// webhook is a conversation's session webhook.
type webhook struct {
	url     string
	expires time.Time
}

// sessions keeps the newest session webhook of each conversation.
type sessions struct {
	mu sync.Mutex
	m  map[channel.Chat]webhook
}

// put records a webhook unless an equal or later one is known. now is
// used to evict expired entries when the map is full.
func (s *sessions) put(chat channel.Chat, w webhook, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[channel.Chat]webhook{}
	}
	if old, ok := s.m[chat]; ok && !w.expires.After(old.expires) && old.url != "" {
		return
	}
	if _, ok := s.m[chat]; !ok && len(s.m) >= maxSessions {
		var victim channel.Chat
		var soonest time.Time
		for k, v := range s.m {
			if !v.expires.After(now) {
				delete(s.m, k)
				continue
			}
			if soonest.IsZero() || v.expires.Before(soonest) {
				victim, soonest = k, v.expires
			}
		}
		if len(s.m) >= maxSessions {
			delete(s.m, victim)
		}
	}
	s.m[chat] = w
}

// get returns the chat's webhook when it is valid at least until
// now+margin.
func (s *sessions) get(chat channel.Chat, now time.Time, margin time.Duration) (webhook, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.m[chat]
	if !ok || !w.expires.After(now.Add(margin)) {
		return webhook{}, false
	}
	return w, true
}

// drop forgets a webhook the platform refused.
func (s *sessions) drop(chat channel.Chat, u string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.m[chat]; ok && w.url == u {
		delete(s.m, chat)
	}
}

// sessionURL checks a sessionWebhook against the allowed base (scheme and
// host); it returns the URL, or "" when it is not one to post to.
func sessionURL(raw, base string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.Fragment != "" || u.Host == "" {
		return ""
	}
	if !strings.EqualFold(u.Scheme+"://"+u.Host, base) {
		return ""
	}
	return raw
}

// quote is what a reply shows of the message it answers.
type quote struct {
	chat channel.Chat
	name string
	text string
}

// quotes remembers recent messages (received and sent) by id, for the
// quote of a reply. Oldest entries go first.
type quotes struct {
	mu    sync.Mutex
	m     map[string]quote
	order []string
}

func (q *quotes) put(id string, v quote) {
	if id == "" || v.text == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = map[string]quote{}
	}
	if _, ok := q.m[id]; !ok {
		q.order = append(q.order, id)
	}
	q.m[id] = v
	for len(q.order) > maxQuotes {
		delete(q.m, q.order[0])
		q.order = q.order[1:]
	}
}

func (q *quotes) get(id string) (quote, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	v, ok := q.m[id]
	return v, ok
}
