package route

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// Trigger kinds returned by Classify.
const (
	TriggerPrivate = "private"
	TriggerMention = "mention"
	TriggerQuote   = "quote"
	TriggerAlias   = "alias"
)

// Identity is what the triggers know about the bot.
type Identity struct {
	// BotID is the bot's own account id on the event's platform; the
	// event's BotID is used when empty.
	BotID string
	// Aliases are names the bot answers to (case-insensitive).
	Aliases []string
	// Owners are the owner account ids.
	Owners []string
}

// Trigger is one direct trigger: it returns its kind and true when the event
// is addressed to the bot.
type Trigger interface {
	Match(ev *channel.Event, id Identity) (kind string, ok bool)
}

// TriggerFunc adapts a function to a Trigger.
type TriggerFunc func(ev *channel.Event, id Identity) (string, bool)

// Match calls f.
func (f TriggerFunc) Match(ev *channel.Event, id Identity) (string, bool) { return f(ev, id) }

// DefaultTriggers is the built-in trigger list, in order.
func DefaultTriggers() []Trigger {
	return []Trigger{TriggerFunc(privateChat), TriggerFunc(mention), TriggerFunc(quoteOfBot), TriggerFunc(alias)}
}

// Classify runs the triggers in order and returns the first matching kind,
// or "" when the message is unprompted. It is a pure function of its inputs.
func Classify(ev *channel.Event, id Identity, triggers []Trigger) string {
	if id.BotID == "" {
		id.BotID = ev.BotID
	}
	for _, t := range triggers {
		if kind, ok := t.Match(ev, id); ok {
			return kind
		}
	}
	return ""
}

// IsOwner reports whether the event's sender is one of the owners.
func (id Identity) IsOwner(ev *channel.Event) bool { return slices.Contains(id.Owners, ev.Sender.ID) }

func privateChat(ev *channel.Event, _ Identity) (string, bool) {
	return TriggerPrivate, ev.Chat.Kind == channel.Private
}

func mention(ev *channel.Event, id Identity) (string, bool) {
	return TriggerMention, ev.Mentions(id.BotID)
}

func quoteOfBot(ev *channel.Event, id Identity) (string, bool) {
	q := ev.Quoted
	return TriggerQuote, q != nil && (q.FromBot || (q.Sender.ID != "" && q.Sender.ID == id.BotID))
}

func alias(ev *channel.Event, id Identity) (string, bool) {
	if len(id.Aliases) == 0 {
		return TriggerAlias, false
	}
	texts := ownTextRuns(ev)
	for _, a := range id.Aliases {
		a = strings.ToLower(a)
		if a == "" {
			continue
		}
		for _, text := range texts {
			if containsWord(text, a) {
				return TriggerAlias, true
			}
		}
	}
	return TriggerAlias, false
}

// ownTextRuns returns the lower-cased text the sender wrote, one string per
// run of adjacent text segments. A mention, image or other segment between
// two texts separates them, so "look" [image] "Mira" is not "lookmira" and
// "mi" [mention] "ra" is not "mira".
func ownTextRuns(ev *channel.Event) []string {
	var runs []string
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			runs = append(runs, strings.ToLower(b.String()))
			b.Reset()
		}
	}
	for _, s := range ev.Segments {
		if s.Type != channel.SegText {
			flush()
			continue
		}
		b.WriteString(s.Text)
	}
	flush()
	return runs
}

// containsWord reports whether word occurs in text at a word boundary. A
// boundary is the text edge or a rune that is neither a letter nor a digit;
// CJK text has no spaces, so a CJK alias matches anywhere.
func containsWord(text, word string) bool {
	for start := 0; ; {
		i := strings.Index(text[start:], word)
		if i < 0 {
			return false
		}
		i += start
		end := i + len(word)
		if boundaryBefore(text, i, word) && boundaryAfter(text, end, word) {
			return true
		}
		start = i + 1
	}
}

func isWordRune(r rune) bool {
	return (unicode.IsLetter(r) || unicode.IsDigit(r)) && !isCJK(r)
}

func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

func boundaryBefore(text string, i int, word string) bool {
	if i == 0 {
		return true
	}
	first, _ := utf8.DecodeRuneInString(word)
	if !isWordRune(first) {
		return true
	}
	prev, _ := utf8.DecodeLastRuneInString(text[:i])
	return !isWordRune(prev)
}

func boundaryAfter(text string, end int, word string) bool {
	if end >= len(text) {
		return true
	}
	last, _ := utf8.DecodeLastRuneInString(word)
	if !isWordRune(last) {
		return true
	}
	next, _ := utf8.DecodeRuneInString(text[end:])
	return !isWordRune(next)
}
