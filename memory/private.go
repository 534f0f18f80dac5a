package memory

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

// Memory's model calls (extraction, summaries) never show a real id: every
// person, the chat, the bot and the messages are rendered through the
// session's agent.Scope (a person as "Name (u_…)"), every text is scrubbed
// with it, the call carries it (agent.WithScope, so an agent.Private model
// scrubs and restores with the same aliases), and aliases in the answer are
// mapped back to real ids before anything is stored: stored data is
// platform-world, recall renders it for other sessions too.

// sessionScope returns the Scope a memory call of the session renders
// through: src's when src is set and gives one, else own, the component's
// own Scope (a random secret: its aliases are stable within the process
// and mean nothing outside it; it knows every id the component has shown,
// so an id typed in text is hidden once any of its prompts showed it).
func sessionScope(ctx context.Context, src agent.ScopeSource, own *agent.Scope, session string) (*agent.Scope, error) {
	if src != nil {
		sc, err := src.Scope(ctx, session)
		if err != nil {
			return nil, fmt.Errorf("memory: scope of %s: %w", session, err)
		}
		if sc != nil {
			return sc, nil
		}
	}
	return own, nil
}

// ownScope returns a Scope with a random secret, for a component used
// without a ScopeSource.
func ownScope() (*agent.Scope, error) {
	secret, err := agent.NewAliasSecret()
	if err != nil {
		return nil, err
	}
	return agent.NewScope("", secret, nil)
}

// renderer renders the people and texts of one memory prompt through a
// Scope. Register everything first (chat, bot, people, message ids), then
// render: Scrub only replaces ids the Scope knows.
type renderer struct {
	sc  *agent.Scope
	bot string // the bot's user id ("" if unknown)
	// people are the user ids the prompt shows as people.
	people map[string]bool
}

// newRenderer registers the session's chat and bot.
func newRenderer(sc *agent.Scope, session string) *renderer {
	r := &renderer{sc: sc, people: map[string]bool{}}
	if p, err := channel.ParseSessionKey(session); err == nil {
		sc.Chat(p.Chat)
		r.bot = p.BotID
		sc.SetBot(p.BotID)
	}
	return r
}

// message registers a history message: its sender (with the display name,
// except for the bot) and its platform message id.
func (r *renderer) message(m *Message) {
	r.sc.Message(messageIDOfKey(m.Key))
	if m.SenderID == "" {
		return
	}
	r.user(m.SenderID)
	if m.Direction != Out && m.SenderID != r.bot {
		r.sc.Name(m.SenderID, m.SenderName)
	}
}

// user registers a person the prompt shows.
func (r *renderer) user(id string) {
	if id == "" {
		return
	}
	r.sc.User(id)
	r.people[id] = true
}

// text renders free text: known ids become aliases, line breaks spaces.
func (r *renderer) text(s string) string { return r.sc.Scrub(s) }

// person renders a user as "Name (u_…)", the bot as "the bot (u_…)".
func (r *renderer) person(id, name string, out bool) string {
	if out || (id != "" && id == r.bot) {
		if a := r.sc.User(cmp.Or(id, r.bot)); a != "" {
			return "the bot (" + a + ")"
		}
		return "the bot"
	}
	name = flatten(r.text(name))
	if name == "" {
		name = r.sc.DisplayName(id)
		name = flatten(r.text(name))
	}
	return personLabel(name, r.sc.User(id))
}

// personLabel is "name (alias)", or whichever of the two is known
// ("someone" for neither).
func personLabel(name, alias string) string {
	switch {
	case name == "" && alias == "":
		return "someone"
	case name == "" || name == alias:
		return alias
	case alias == "":
		return name
	}
	return name + " (" + alias + ")"
}

// subject maps the model's name for the person a memory is about back to
// a user id: an alias of the Scope's users, a real id of a person the
// prompt showed or the Scope knows as a user (an agent.Private model has
// already restored the answer), "Name (u_…)", or a display name exactly
// one participant has. A leading '@' is ignored. It reports false when
// nothing matches.
func (r *renderer) subject(s string) (string, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "@")
	if s == "" {
		return "", false
	}
	if kind, id, ok := r.sc.Lookup(s); ok {
		return id, kind == agent.AliasUser
	}
	if r.people[s] {
		return s, true
	}
	if a, ok := r.sc.Known(s); ok {
		if kind, id, ok := r.sc.Lookup(a); ok && kind == agent.AliasUser && id == s {
			return s, true
		}
	}
	if i := strings.LastIndexByte(s, '('); i > 0 && strings.HasSuffix(s, ")") {
		if id, ok := r.subject(s[i+1 : len(s)-1]); ok {
			return id, true
		}
		s = strings.TrimSpace(s[:i])
	}
	return r.sc.UserByName(s)
}

// restore turns the Scope's aliases in a model's text back into ids.
func (r *renderer) restore(s string) string {
	out, _ := r.sc.Restore(s)
	return out
}

// messageIDOfKey returns the platform message id of a history key
// ("<platform>/<bot>/<chat>/<message id>", percent-escaped; see
// channel.Event.Key), or "" for a key of another shape.
func messageIDOfKey(key string) string {
	i := strings.LastIndexByte(key, '/')
	if i < 0 || strings.Count(key, "/") != 3 {
		return ""
	}
	id := key[i+1:]
	if strings.IndexByte(id, '%') >= 0 {
		id = strings.NewReplacer("%2F", "/", "%25", "%").Replace(id)
	}
	return id
}

// flatten makes s one line: every run of white space containing a line
// break (or a tab) becomes one space; the ends are trimmed.
func flatten(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\n\r\t\v\f\u2028\u2029\u0085") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}
