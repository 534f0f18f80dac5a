package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/personakit/persona/agent"
)

// BlockOptions tune RenderLines and RenderBlock.
type BlockOptions struct {
	// Scope, when set, is the session's model-facing identity: people are
	// rendered as "Name (u_…)" with its aliases (the name of a fact's
	// subject is the display name the Scope last saw), and known ids typed
	// in fact and message text become aliases. Nil: no aliases, and ids
	// typed in text are left for the caller's own aliasing boundary.
	Scope *agent.Scope
	// Alias renders a user id as the alias the prompt uses for that person
	// (e.g. the turn's agent.Aliaser User); it takes precedence over
	// Scope's alias. A person with neither alias nor name is "someone".
	Alias func(userID string) string
	// Now turns dates into relative ones ("earlier today", "yesterday",
	// "3 days ago", up to 59 days; zero: dates are absolute, "on
	// 2026-03-01", UTC).
	Now time.Time
}

// RenderLines renders a recollection as the lines of the prompt's memory
// block, one complete item per line (a fact or an earlier message), with
// no title and no bullet: the caller's block adds the one title and a
// bullet per line (agent.ContextInput.Memory). Line breaks inside an item
// become spaces. The lines belong after the cache breakpoint (they change
// every turn). It returns nil for an empty recollection.
//
// Facts come first, core facts (always recalled for the speaker) tagged
// "(core)": "(core) 阿杰 (u_…): lives in Hangzhou — \"我住在杭州\"". A
// user fact names its subject; a chat or global fact is its content.
// Earlier messages read "阿杰 (u_…) said on 2026-03-01: …", the bot's
// own "you said …". A real user id is never printed as a person's name.
func RenderLines(rc Recollection, opts BlockOptions) []string {
	if len(rc.Facts) == 0 && len(rc.Snippets) == 0 {
		return nil
	}
	text := func(s string) string {
		if opts.Scope != nil {
			s = opts.Scope.Scrub(s)
		}
		return flatten(s)
	}
	person := func(id, name string) string {
		alias := ""
		if id != "" && opts.Alias != nil {
			alias = opts.Alias(id)
		}
		if id != "" && opts.Scope != nil {
			if alias == "" {
				alias = opts.Scope.User(id)
			}
			if name == "" {
				name = opts.Scope.DisplayName(id)
			}
		}
		return personLabel(text(name), alias)
	}
	out := make([]string, 0, len(rc.Facts)+len(rc.Snippets))
	var b strings.Builder
	for _, core := range [...]bool{true, false} {
		for i := range rc.Facts {
			f := &rc.Facts[i]
			if f.Core != core {
				continue
			}
			b.Reset()
			if core {
				b.WriteString("(core) ")
			}
			if f.SubjectUserID != "" && f.Scope != ScopeGlobal {
				b.WriteString(person(f.SubjectUserID, ""))
				b.WriteString(": ")
			}
			b.WriteString(text(f.Content))
			if ev := text(f.Evidence); ev != "" {
				fmt.Fprintf(&b, " — %q", ev)
			}
			out = append(out, b.String())
		}
	}
	for i := range rc.Snippets {
		sn := &rc.Snippets[i]
		who := "you"
		if sn.Direction != Out {
			who = person(sn.SenderID, sn.SenderName)
		}
		out = append(out, who+" said "+when(sn.Time, opts.Now)+": "+text(sn.Text))
	}
	return out
}

// when renders a message time for a memory line: "on 2026-03-01", or
// relative to now when now is set.
func when(t, now time.Time) string {
	if now.IsZero() {
		return "on " + t.UTC().Format(time.DateOnly)
	}
	y1, m1, d1 := t.UTC().Date()
	y2, m2, d2 := now.UTC().Date()
	days := int(time.Date(y2, m2, d2, 0, 0, 0, 0, time.UTC).Sub(time.Date(y1, m1, d1, 0, 0, 0, 0, time.UTC)).Hours() / 24)
	switch {
	case days <= 0:
		return "earlier today"
	case days == 1:
		return "yesterday"
	case days < 60:
		return fmt.Sprintf("%d days ago", days)
	}
	return "on " + t.UTC().Format(time.DateOnly)
}

// RenderBlock is RenderLines joined by line breaks: the memory lines as
// one text, still without title or bullets (split it on "\n" to get the
// lines back). It returns "" for an empty recollection.
func RenderBlock(rc Recollection, opts BlockOptions) string {
	return strings.Join(RenderLines(rc, opts), "\n")
}

// SearchToolName is the name of the memory search tool.
const SearchToolName = "memory_search"

// DefaultSearchLimit and MaxSearchLimit bound the tool's results.
const (
	DefaultSearchLimit = 8
	MaxSearchLimit     = 24
)

var searchToolParams = json.RawMessage(`{"type":"object","properties":{` +
	`"query":{"type":"string","description":"What to look for: words or a phrase, in any language."},` +
	`"limit":{"type":"integer","minimum":1,"maximum":24,"description":"Maximum results (default 8)."}},` +
	`"required":["query"],"additionalProperties":false}`)

// SearchTool returns the memory_search tool for one turn: it recalls facts
// and history evidence for the model's query within the turn's scope (base:
// session, speaker, participants, the history window it excludes;
// base.Text is replaced by the query, core facts are left out, and the
// bot's own earlier messages are included). The observation is one "- "
// line per item (RenderLines), people rendered through the Scope and the
// Aliaser the call's context carries (agent.WithScope, agent.WithAliaser),
// if any.
func SearchTool(r *Recaller, base Query) agent.Tool {
	return agent.ToolFunc{
		ToolSpec: agent.ToolSpec{
			Name: SearchToolName,
			Description: "Search the long-term memory of this chat: remembered facts about the participants " +
				"and earlier messages. Use it when the user refers to something said before.",
			Parameters: searchToolParams,
		},
		F: func(ctx context.Context, args json.RawMessage) (string, error) {
			var a struct {
				Query string `json:"query"`
				Limit int    `json:"limit"`
			}
			if err := json.Unmarshal(args, &a); err != nil {
				return "", fmt.Errorf("memory_search: bad arguments: %w", err)
			}
			if strings.TrimSpace(a.Query) == "" {
				return "", errors.New("memory_search: query is empty")
			}
			q := base
			q.Text, q.NoCore, q.OwnMessages = a.Query, true, true
			q.MaxItems = min(max(cmp.Or(a.Limit, DefaultSearchLimit), 1), MaxSearchLimit)
			rc, err := r.Recall(ctx, q)
			if err != nil {
				return "", err
			}
			if len(rc.Facts) == 0 && len(rc.Snippets) == 0 {
				return "No matching memories.", nil
			}
			opts := BlockOptions{Scope: agent.ScopeFrom(ctx)}
			if al := agent.AliaserFrom(ctx); al != nil {
				opts.Alias = al.User
			}
			lines := RenderLines(rc, opts)
			return "- " + strings.Join(lines, "\n- "), nil
		},
	}
}

// ForgetReply renders the confirmation of a "forget me" (counts, never
// content).
func ForgetReply(res ForgetResult) string {
	s := fmt.Sprintf("Forgotten: %d remembered fact(s); %d pending memory update(s) cancelled.", res.Facts, res.JobsCancelled)
	if res.HistoryHidden {
		s += " Your messages are no longer used for memory search."
	}
	return s
}
