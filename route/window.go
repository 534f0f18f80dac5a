package route

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"strconv"
	"sync"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

// maxSessionState bounds the sessions whose window anchor and fallback
// Scope a ModelRouter keeps; past it the router starts over (a session
// whose anchor was dropped moves its window once more than needed; its
// fallback aliases do not change, see scopeFor).
const maxSessionState = 4096

// sessionState is what a ModelRouter keeps per session, in memory only.
type sessionState struct {
	mu sync.Mutex
	// anchors holds the key of the first transcript line shown to the
	// model in the session's last request (see windowStart).
	anchors map[string]string
	// scopes holds the fallback Scopes of sessions rated without a Scope
	// in the context.
	scopes map[string]*agent.Scope
}

// RecentLimit is the number of recent messages the transcript window can
// show: twice Config.TranscriptMessages (60 by default). Pass that many as
// Input.Recent; with fewer, the window moves with every message and
// consecutive requests share less of their bytes (older messages than
// that are never shown).
func (r *ModelRouter) RecentLimit() int { return 2 * r.transcriptMessages }

// windowStart returns the index of the first of lines (the transcript's
// candidates, oldest first) shown to the model, and remembers it for the
// session.
//
// The window is epoch-anchored so that consecutive requests of a session
// share their transcript as a prefix: it starts where the previous
// request's window started (the anchor) and grows by the new messages
// until it holds twice TranscriptMessages lines; then it jumps forward to
// the newest TranscriptMessages lines, which become the new anchor. So the
// model always sees at least TranscriptMessages lines (when there are
// that many) and at most twice that, and the transcript part of the
// request changes only at an end, except once every TranscriptMessages
// messages. Without an anchor (the first rating of a session, after a
// restart, or when the anchor left Recent) the window is the newest
// TranscriptMessages lines.
func (r *ModelRouter) windowStart(session string, lines []*channel.Event) int {
	n, total := r.transcriptMessages, len(lines)
	if total == 0 {
		return 0
	}
	start := max(0, total-n)
	st := &r.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if a, ok := st.anchors[session]; ok {
		for i := total - 1; i >= 0; i-- {
			if lineKey(lines[i]) != a {
				continue
			}
			if shown := total - i; shown <= 2*n && shown >= min(n, total) {
				start = i
			}
			break
		}
	}
	if st.anchors == nil || len(st.anchors) >= maxSessionState {
		st.anchors = make(map[string]string)
	}
	st.anchors[session] = lineKey(lines[start])
	return start
}

// lineKey identifies a transcript message: its id, else its time and
// sender.
func lineKey(ev *channel.Event) string {
	if ev.MessageID != "" {
		return ev.MessageID
	}
	return strconv.FormatInt(ev.Time.UnixNano(), 36) + "/" + ev.Sender.ID
}

// scopeFor returns the Scope a rating renders ids through: the session's
// Scope from ctx (agent.WithScope; the pipeline sets it for every turn),
// else the router's own fallback Scope for the session. Fallback Scopes
// use a secret derived from the router's random secret and the session
// key, so a session's aliases stay the same for the router's lifetime
// (even when the Scope is dropped and made again), differ between
// sessions, and are new after a restart. Real ids never reach the model
// either way.
func (r *ModelRouter) scopeFor(ctx context.Context, session string) *agent.Scope {
	if sc := agent.ScopeFrom(ctx); sc != nil {
		return sc
	}
	st := &r.state
	st.mu.Lock()
	defer st.mu.Unlock()
	if sc := st.scopes[session]; sc != nil {
		return sc
	}
	mac := hmac.New(sha256.New, r.secret)
	mac.Write([]byte(session))
	sc, err := agent.NewScope(session, mac.Sum(nil), nil)
	if err != nil {
		panic("route: fallback scope: " + err.Error()) // a 32-byte secret is always long enough
	}
	if st.scopes == nil || len(st.scopes) >= maxSessionState {
		st.scopes = make(map[string]*agent.Scope)
	}
	st.scopes[session] = sc
	return sc
}
