package web_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/clock"
)

func urls(ss []web.Source) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.URL
	}
	return out
}

func TestSourcesNewestFirstAndCap(t *testing.T) {
	c := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := web.NewSources(c, time.Hour, 3)
	for i := range 5 {
		s.Add("chat", web.Source{URL: fmt.Sprintf("https://example.com/%d", i), Title: fmt.Sprint(i)})
		c.Advance(time.Minute)
	}
	got := s.Recent("chat", c.Now())
	require.Equal(t, []string{"https://example.com/4", "https://example.com/3", "https://example.com/2"}, urls(got))
	require.Equal(t, time.Date(2025, 1, 1, 0, 4, 0, 0, time.UTC), got[0].At, "a zero At is the clock's now")
	require.False(t, s.Seen("chat", "https://example.com/0", c.Now()), "pushed out by the cap")
	require.Empty(t, s.Recent("other", c.Now()))
}

func TestSourcesDedupeByCanonicalURL(t *testing.T) {
	c := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := web.NewSources(c, time.Hour, 8)
	s.Add("chat", web.Source{URL: "https://example.com/a?utm_source=x", Title: "old"})
	c.Advance(time.Minute)
	s.Add("chat", web.Source{URL: "https://example.com/b"})
	c.Advance(time.Minute)
	s.Add("chat", web.Source{URL: "HTTPS://EXAMPLE.com:443/a#frag", Title: "new", Excerpt: "fresh"})
	got := s.Recent("chat", c.Now())
	require.Len(t, got, 2)
	require.Equal(t, "HTTPS://EXAMPLE.com:443/a#frag", got[0].URL)
	require.Equal(t, "new", got[0].Title)
	require.Equal(t, "fresh", got[0].Excerpt)
	require.Equal(t, c.Now(), got[0].At, "a repeat refreshes the time")
	require.Equal(t, "https://example.com/b", got[1].URL)
	require.True(t, s.Seen("chat", "https://example.com/a?fbclid=1", c.Now()))
	require.False(t, s.Seen("other", "https://example.com/a", c.Now()), "per session")
}

func TestSourcesTTL(t *testing.T) {
	c := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := web.NewSources(c, 30*time.Minute, 8)
	s.Add("chat", web.Source{URL: "https://example.com/old"})
	c.Advance(20 * time.Minute)
	s.Add("chat", web.Source{URL: "https://example.com/new"})
	now := c.Now()
	require.True(t, s.Seen("chat", "https://example.com/old", now))
	require.Equal(t, []string{"https://example.com/new", "https://example.com/old"}, urls(s.Recent("chat", now)))

	later := now.Add(10 * time.Minute) // old is exactly 30 min old: expired
	require.False(t, s.Seen("chat", "https://example.com/old", later))
	require.True(t, s.Seen("chat", "https://example.com/new", later))
	require.Equal(t, []string{"https://example.com/new"}, urls(s.Recent("chat", later)))
	require.Empty(t, s.Recent("chat", later.Add(30*time.Minute)))

	// Re-adding an expired source makes it fresh again.
	c.Set(later)
	s.Add("chat", web.Source{URL: "https://example.com/old"})
	require.True(t, s.Seen("chat", "https://example.com/old", c.Now()))
}

func TestSourcesEvictsIdleSessions(t *testing.T) {
	c := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := web.NewSources(c, 10*time.Minute, 8)
	s.Add("a", web.Source{URL: "https://example.com/1"})
	s.Add("b", web.Source{URL: "https://example.com/2"})
	require.Equal(t, 2, s.Len())
	c.Advance(11 * time.Minute)
	s.Add("c", web.Source{URL: "https://example.com/3"})
	require.Equal(t, 1, s.Len(), "a and b went idle and were dropped")
	require.Empty(t, s.Recent("a", c.Now()))
	require.Len(t, s.Recent("c", c.Now()), 1)
}

func TestSourcesMaxSessions(t *testing.T) {
	c := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := web.NewSources(c, time.Hour, 8)
	s.SetMaxSessions(3)
	for _, id := range []string{"a", "b", "c"} {
		s.Add(id, web.Source{URL: "https://example.com/" + id})
	}
	s.Add("a", web.Source{URL: "https://example.com/a2"}) // a is now the most recent
	s.Add("d", web.Source{URL: "https://example.com/d"})  // evicts b, the least recently active
	require.Equal(t, 3, s.Len())
	require.Empty(t, s.Recent("b", c.Now()))
	require.Len(t, s.Recent("a", c.Now()), 2)
	require.Len(t, s.Recent("c", c.Now()), 1)
	require.Len(t, s.Recent("d", c.Now()), 1)
}

func TestSourcesDefaultsAndOddInput(t *testing.T) {
	s := web.NewSources(nil, 0, 0)
	now := time.Now()
	s.Add("x", web.Source{URL: ""})
	s.Add("x", web.Source{URL: "   "})
	require.Equal(t, 0, s.Len())
	for i := range web.DefaultSourcesPerSession + 2 {
		s.Add("x", web.Source{URL: fmt.Sprintf("https://example.com/%d", i)})
	}
	require.Len(t, s.Recent("x", now.Add(time.Second)), web.DefaultSourcesPerSession)
	// A URL that is not http(s) is kept under its own text.
	s.Add("y", web.Source{URL: "not a url", At: now})
	require.True(t, s.Seen("y", " not a url ", now))
	require.False(t, s.Seen("y", "", now))
	require.False(t, s.Seen("y", "not a url", now.Add(web.DefaultSourcesTTL)))
}

func TestSourcesConcurrent(t *testing.T) {
	c := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := web.NewSources(c, time.Minute, 4)
	s.SetMaxSessions(5)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				session := fmt.Sprintf("s%d", (g+i)%7)
				s.Add(session, web.Source{URL: fmt.Sprintf("https://example.com/%d", i%6)})
				_ = s.Recent(session, c.Now())
				_ = s.Seen(session, "https://example.com/1", c.Now())
				if i%50 == 0 {
					c.Advance(10 * time.Second)
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, s.Len(), 5)
	for i := range 7 {
		require.LessOrEqual(t, len(s.Recent(fmt.Sprintf("s%d", i), c.Now())), 4)
	}
}
