package web

// SetMaxSessions lets tests bound the sessions a Sources tracks.
func (s *Sources) SetMaxSessions(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxSessions = n
}

// CacheLen reports how many documents r's cache holds.
func (r *Reader) CacheLen() int {
	if r.cache == nil {
		return 0
	}
	return r.cache.len()
}
