package eventcenter

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"
)

// CookieName is the name of the session cookie POST /api/session sets.
const CookieName = "persona_events"

// maxSessions caps the live session cookies; the one closest to expiry
// gives way to a new one.
const maxSessions = 256

// sessions are the live session cookies, by the SHA-256 of their value,
// with their expiry.
type sessions struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]time.Time
}

// bearer returns the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive), ok=false when there is none.
func bearer(r *http.Request) (string, bool) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if strings.EqualFold(h, "Bearer") {
		return "", true // presented, empty
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// tokenOK compares tok with the configured token in constant time: both
// are hashed first, so neither their content nor their length shows in
// the time taken.
func (c *Center) tokenOK(tok string) bool {
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], c.tokenSum[:]) == 1
}

// sessionOK reports whether r carries a live session cookie.
func (c *Center) sessionOK(r *http.Request) bool {
	ck, err := r.Cookie(CookieName)
	if err != nil || ck.Value == "" {
		return false
	}
	key := sha256.Sum256([]byte(ck.Value))
	now := c.clk.Now()
	c.sessions.mu.Lock()
	defer c.sessions.mu.Unlock()
	exp, ok := c.sessions.m[key]
	if ok && !now.Before(exp) {
		delete(c.sessions.m, key)
		return false
	}
	return ok
}

// authed wraps an API handler: the request must carry the bearer token or
// a live session cookie, else it is refused with 401.
func (c *Center) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, hasBearer := bearer(r)
		switch {
		case hasBearer && c.tokenOK(tok):
		case !hasBearer && c.sessionOK(r):
		default:
			unauthorized(w, hasBearer)
			return
		}
		h(w, r)
	}
}

// unauthorized writes the 401 answer; badToken says a token was presented.
func unauthorized(w http.ResponseWriter, badToken bool) {
	challenge := `Bearer realm="persona event center"`
	if badToken {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeError(w, http.StatusUnauthorized, "a valid bearer token or session cookie is required")
}

// sessionAnswer is the body of POST /api/session.
type sessionAnswer struct {
	Expires time.Time `json:"expires"`
}

// createSession exchanges the bearer token for a session cookie (the live
// feed's EventSource cannot send headers). Only the bearer token is
// accepted here, never a cookie, so a session cannot extend itself.
func (c *Center) createSession(w http.ResponseWriter, r *http.Request) {
	tok, ok := bearer(r)
	if !ok || !c.tokenOK(tok) {
		unauthorized(w, ok)
		return
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		c.log.Error("eventcenter: session id", "err", err)
		writeError(w, http.StatusInternalServerError, "could not create a session")
		return
	}
	value := base64.RawURLEncoding.EncodeToString(raw[:])
	now := c.clk.Now()
	exp := now.Add(c.ttl)
	c.sessions.put(sha256.Sum256([]byte(value)), exp, now)
	// No Path: the browser scopes the cookie to the directory of this
	// request's URL, the API's, wherever the center is mounted.
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: value, MaxAge: int(c.ttl / time.Second), HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	writeJSON(w, http.StatusOK, sessionAnswer{Expires: exp.UTC()})
}

// deleteSession ends the request's session cookie, if any.
func (c *Center) deleteSession(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(CookieName); err == nil {
		key := sha256.Sum256([]byte(ck.Value))
		c.sessions.mu.Lock()
		delete(c.sessions.m, key)
		c.sessions.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
}

// put stores a session, dropping the expired ones and, when full, the one
// closest to expiry.
func (s *sessions) put(key [sha256.Size]byte, exp, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.m {
		if !now.Before(e) {
			delete(s.m, k)
		}
	}
	if len(s.m) >= maxSessions {
		var (
			oldest [sha256.Size]byte
			at     time.Time
		)
		for k, e := range s.m {
			if at.IsZero() || e.Before(at) {
				oldest, at = k, e
			}
		}
		delete(s.m, oldest)
	}
	s.m[key] = exp
}
