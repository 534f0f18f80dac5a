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

// BlockOptions tune RenderBlock.
type BlockOptions struct {
	// Alias renders a user id as the name the prompt uses for that person
	// (nil: the sender name of snippets, "user" for fact subjects).
	Alias func(userID string) string
	// Now is used for relative dates (zero: dates are absolute).
	Now time.Time
}

// RenderBlock renders a recollection as the plain-text memory block of the
// prompt. It belongs after the cache breakpoint (it changes every turn). It
// returns "" for an empty recollection.
func RenderBlock(rc Recollection, opts BlockOptions) string {
	if len(rc.Facts) == 0 && len(rc.Snippets) == 0 {
		return ""
	}
	alias := func(id, fallback string) string {
		if opts.Alias != nil && id != "" {
			if a := opts.Alias(id); a != "" {
				return a
			}
		}
		return cmp.Or(fallback, "user")
	}
	var b strings.Builder
	b.WriteString("[Memory: things remembered from earlier conversations; may be outdated]\n")
	var core, other []RecalledFact
	for _, f := range rc.Facts {
		if f.Core {
			core = append(core, f)
		} else {
			other = append(other, f)
		}
	}
	writeFacts := func(title string, fs []RecalledFact) {
		if len(fs) == 0 {
			return
		}
		b.WriteString(title)
		for _, f := range fs {
			b.WriteString("- ")
			if f.Scope == ScopeUser && f.SubjectUserID != "" {
				fmt.Fprintf(&b, "(%s) ", alias(f.SubjectUserID, ""))
			}
			b.WriteString(strings.TrimSpace(f.Content))
			if f.Evidence != "" {
				fmt.Fprintf(&b, " — %q", f.Evidence)
			}
			b.WriteByte('\n')
		}
	}
	writeFacts("Key facts:\n", core)
	writeFacts("Facts:\n", other)
	if len(rc.Snippets) > 0 {
		b.WriteString("Earlier messages:\n")
		for _, s := range rc.Snippets {
			who := alias(s.SenderID, s.SenderName)
			if s.Direction == Out {
				who = "you"
			}
			fmt.Fprintf(&b, "- [%s] %s: %s\n", s.Time.UTC().Format("2006-01-02"), who, s.Text)
		}
	}
	return strings.TrimRight(b.String(), "\n")
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
// session, speaker, participants; base.Text is replaced by the query). The
// observation lists only the matching evidence snippets.
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
			q.Text, q.NoCore = a.Query, true
			q.MaxItems = min(max(cmp.Or(a.Limit, DefaultSearchLimit), 1), MaxSearchLimit)
			rc, err := r.Recall(ctx, q)
			if err != nil {
				return "", err
			}
			if len(rc.Facts) == 0 && len(rc.Snippets) == 0 {
				return "No matching memories.", nil
			}
			return RenderBlock(rc, BlockOptions{}), nil
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
