package web

import (
	"container/list"
	"sync"
	"time"
)

// cache is a small LRU of fetched documents keyed by canonical URL, each
// entry valid for ttl after it was stored.
type cache struct {
	ttl  time.Duration
	size int

	mu    sync.Mutex
	order *list.List // of *cacheEntry, most recently used first
	items map[string]*list.Element
}

type cacheEntry struct {
	key string
	doc Document
	at  time.Time
}

func newCache(ttl time.Duration, size int) *cache {
	return &cache{ttl: ttl, size: size, order: list.New(), items: map[string]*list.Element{}}
}

// get returns a copy of the document stored under key when it is still
// fresh at now.
func (c *cache) get(key string, now time.Time) (Document, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return Document{}, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.at.Add(c.ttl)) {
		c.order.Remove(el)
		delete(c.items, key)
		return Document{}, false
	}
	c.order.MoveToFront(el)
	return e.doc, true
}

// put stores doc under key, evicting the least recently used entries past
// the size.
func (c *cache) put(key string, doc Document, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		el.Value = &cacheEntry{key: key, doc: doc, at: now}
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&cacheEntry{key: key, doc: doc, at: now})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cacheEntry).key)
	}
}

// len reports how many entries the cache holds.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
