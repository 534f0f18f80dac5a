package agent

import (
	"strings"
	"time"
)

// DefaultRules are the fixed rules appended to the persona in the system
// head. They hold no time and no per-user data, so the system head is the
// same bytes for every turn of every session.
const DefaultRules = `## How to reply
- You are a member of this chat, not an assistant. Speak as the persona above.
- Answer only the message marked [current]; earlier messages are context.
- To send several separate chat messages, put [persona-msg] between them. Use [persona-line] for a line break inside one message.
- Keep messages short, as people do in chat. No headings, no bullet lists unless asked.
- If nothing should be said, reply with exactly [[SILENT]].`

// Line is one message of the transcript as the prompt shows it.
type Line struct {
	// Speaker is the display name (never a raw platform id).
	Speaker string
	// FromBot marks the bot's own messages (rendered as assistant turns).
	FromBot bool
	Text    string
}

// PromptInput is everything the default prompt is built from.
type PromptInput struct {
	// Persona is the SOUL.md text.
	Persona string
	// Rules are the fixed rules (DefaultRules when empty).
	Rules string
	// History is the stable transcript, oldest first, without the current
	// message.
	History []Line
	// Current is the message being answered.
	Current Line
	// Now is rendered in the clock block after the cache breakpoint; Zone
	// defaults to UTC.
	Now  time.Time
	Zone *time.Location
}

// Prompt assembles the request messages in the fixed order: system head
// (persona and rules), stable history (the cache breakpoint on its last
// message), the clock, then the current message. Everything before the
// breakpoint depends only on the persona and the history, so the next turn's
// prompt extends this one's prefix byte for byte.
func Prompt(in PromptInput) []Message {
	rules := in.Rules
	if rules == "" {
		rules = DefaultRules
	}
	var head strings.Builder
	head.WriteString(strings.TrimSpace(in.Persona))
	if head.Len() > 0 {
		head.WriteString("\n\n")
	}
	head.WriteString(rules)
	msgs := make([]Message, 0, len(in.History)+3)
	msgs = append(msgs, Message{Role: RoleSystem, Content: head.String()})
	for _, l := range in.History {
		if l.FromBot {
			msgs = append(msgs, Message{Role: RoleAssistant, Content: l.Text})
			continue
		}
		msgs = append(msgs, Message{Role: RoleUser, Content: l.Speaker + ": " + l.Text})
	}
	msgs[len(msgs)-1].CacheBreakpoint = true
	if !in.Now.IsZero() {
		zone := in.Zone
		if zone == nil {
			zone = time.UTC
		}
		msgs = append(msgs, Message{Role: RoleSystem, Content: "Current time: " + in.Now.In(zone).Format("2006-01-02 15:04 MST")})
	}
	msgs = append(msgs, Message{Role: RoleUser, Content: "[current] " + in.Current.Speaker + ": " + in.Current.Text})
	return msgs
}
