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
	TriggerOwnerCommand  = "owner_command"
	TriggerPluginCommand = "plugin_command"
	TriggerPrivate       = "private"
	TriggerMention       = "mention"
	TriggerQuote         = "quote"
	TriggerAlias         = "alias"
	TriggerLink          = "link"
)

// DefaultCommandPrefix starts owner and plugin commands when
// Identity.CommandPrefix is empty.
const DefaultCommandPrefix = "/"

// MaxLinksPerMessage is how many links of one message the link trigger
// offers to the resolver.
const MaxLinksPerMessage = 2

// AliasMode says how strictly an alias must appear in a message to count as
// addressing the bot.
type AliasMode string

// The alias modes; the zero value means AliasSmart. Each mode is stricter
// than the one before.
const (
	// AliasLoose matches an alias anywhere at a word boundary.
	AliasLoose AliasMode = "loose"
	// AliasSmart is AliasLoose, ignoring aliases inside quotation pairs
	// ("…", “…”, ‘…’, '…', 「…」, 『…』, «…»): talk about the bot's name is not
	// talk to the bot.
	AliasSmart AliasMode = "smart"
	// AliasStrict is AliasSmart, counting only the vocative position: the
	// alias opens or closes the text (only punctuation, symbols or spaces
	// around it), or is followed by a comma or colon ("Mira, …", "…, Mira?",
	// "so Mira: …").
	AliasStrict AliasMode = "strict"
)

// Valid reports whether m is a known mode (or empty).
func (m AliasMode) Valid() bool {
	return m == "" || m == AliasLoose || m == AliasSmart || m == AliasStrict
}

// LinkResolver reports whether a URL can be resolved into a card or media
// by the link plugin. It must be pure and fast (a host allowlist, a pattern
// match): it runs inside Classify, with no network I/O.
type LinkResolver func(url string) bool

// Identity is what the triggers know about the bot.
type Identity struct {
	// BotID is the bot's own account id on the event's platform; the
	// event's BotID is used when empty.
	BotID string
	// Aliases are names the bot answers to (case-insensitive).
	Aliases []string
	// AliasMode is how aliases match (default AliasSmart).
	AliasMode AliasMode
	// Owners are the owner account ids.
	Owners []string
	// CommandPrefix starts commands (default "/").
	CommandPrefix string
	// Commands are the plugin command names, without the prefix
	// (case-insensitive). A message starting with prefix+name is a
	// direct plugin command, from anyone.
	Commands []string
	// ResolveLink turns the link trigger on: a message with a URL it
	// accepts is direct. nil = off.
	ResolveLink LinkResolver
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

// DefaultTriggers is the built-in trigger list, in order: owner command,
// plugin command, private chat, mention, quote of the bot, alias, link.
// Commands come first because their kind decides how the message is
// answered (without the chat model); the rest only make it direct.
// Append, insert or drop entries to change the list.
func DefaultTriggers() []Trigger {
	return []Trigger{
		TriggerFunc(ownerCommand), TriggerFunc(pluginCommand),
		TriggerFunc(privateChat), TriggerFunc(mention), TriggerFunc(quoteOfBot), TriggerFunc(alias),
		TriggerFunc(link),
	}
}

// Classify runs the triggers in order and returns the first matching kind,
// or "" when the message is unprompted. It is a pure function of its inputs
// (given a pure Identity.ResolveLink).
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
	mode := id.AliasMode
	if mode == "" {
		mode = AliasSmart
	}
	texts := ownTextRuns(ev)
	for _, a := range id.Aliases {
		a = strings.ToLower(a)
		if a == "" {
			continue
		}
		for _, text := range texts {
			if matchAlias(text, a, mode) {
				return TriggerAlias, true
			}
		}
	}
	return TriggerAlias, false
}

// MatchedAliases returns the bot's names (id.Aliases, as configured) that
// the message calls the bot by, in the same way the alias trigger matches
// them; the prompt tells the model which of its names were used.
func MatchedAliases(ev *channel.Event, id Identity) []string {
	mode := id.AliasMode
	if mode == "" {
		mode = AliasSmart
	}
	var out []string
	var texts []string
	for _, a := range id.Aliases {
		w := strings.ToLower(a)
		if w == "" {
			continue
		}
		if texts == nil {
			texts = ownTextRuns(ev)
		}
		for _, text := range texts {
			if matchAlias(text, w, mode) {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// ownTextRuns returns the lower-cased text the sender wrote, one string per
// run of adjacent text segments. A mention, image or other segment between
// two texts separates them, so "look" [image] "Mira" is not "lookmira" and
// "mi" [mention] "ra" is not "mira".
func ownTextRuns(ev *channel.Event) []string {
	var runs []string
	var b strings.Builder
	first, n := "", 0 // the run's first segment text and segment count
	flush := func() {
		switch {
		case n == 1 && first != "":
			runs = append(runs, strings.ToLower(first))
		case n > 1 && b.Len() > 0:
			runs = append(runs, strings.ToLower(b.String()))
		}
		b.Reset()
		first, n = "", 0
	}
	for _, s := range ev.Segments {
		if s.Type == channel.SegVoice && s.Media != nil && strings.TrimSpace(s.Media.Transcript) != "" {
			// What a voice clip said counts as written ("Mira, …" said
			// aloud calls the bot too).
			flush()
			runs = append(runs, strings.ToLower(s.Media.Transcript))
			continue
		}
		if s.Type != channel.SegText {
			flush()
			continue
		}
		switch n++; n {
		case 1:
			first = s.Text
		case 2:
			b.WriteString(first)
			b.WriteString(s.Text)
		default:
			b.WriteString(s.Text)
		}
	}
	flush()
	return runs
}

// matchAlias reports whether word occurs in text at a word boundary, in a
// position the mode accepts. A boundary is the text edge or a rune that is
// neither a letter nor a digit; CJK text has no spaces, so a CJK alias
// matches anywhere. Both strings are lower-case already.
func matchAlias(text, word string, mode AliasMode) bool {
	var quoted [][2]int
	scanned := false
	for start := 0; ; {
		i := strings.Index(text[start:], word)
		if i < 0 {
			return false
		}
		i += start
		end := i + len(word)
		start = i + 1
		if !boundaryBefore(text, i, word) || !boundaryAfter(text, end, word) {
			continue
		}
		if mode == AliasLoose {
			return true
		}
		if !scanned {
			quoted, scanned = quotedSpans(text), true
		}
		if insideSpan(quoted, i) {
			continue
		}
		if mode != AliasStrict || vocative(text, i, end) {
			return true
		}
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

// closingQuote returns the closing mark of an opening quotation mark.
func closingQuote(r rune) (rune, bool) {
	switch r {
	case '"', '\'':
		return r, true
	case '“':
		return '”', true
	case '‘':
		return '’', true
	case '「':
		return '」', true
	case '『':
		return '』', true
	case '«':
		return '»', true
	}
	return 0, false
}

// quotedSpans returns the byte spans [open, close] of the complete
// quotation pairs in text. Pairs do not nest: inside a quotation only its
// own closing mark counts. An ASCII apostrophe opens only at the start of a
// word and closes only at its end, so "Mira's" and "don't" are not quotes.
func quotedSpans(text string) [][2]int {
	var spans [][2]int
	open, closer := -1, rune(0)
	for i, r := range text {
		if open >= 0 {
			if r == closer && (r != '\'' || apostropheCloses(text, i)) {
				spans = append(spans, [2]int{open, i})
				open = -1
			}
			continue
		}
		if c, ok := closingQuote(r); ok && (r != '\'' || apostropheOpens(text, i)) {
			open, closer = i, c
		}
	}
	return spans
}

func insideSpan(spans [][2]int, i int) bool {
	for _, s := range spans {
		if s[0] < i && i < s[1] {
			return true
		}
	}
	return false
}

// isLetterOrDigit counts CJK as letters (unlike isWordRune): used where
// any writing, not only a spaced word, matters.
func isLetterOrDigit(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

func apostropheOpens(text string, i int) bool {
	if i > 0 {
		prev, _ := utf8.DecodeLastRuneInString(text[:i])
		if isLetterOrDigit(prev) {
			return false
		}
	}
	next, n := utf8.DecodeRuneInString(text[i+1:])
	return n > 0 && !unicode.IsSpace(next)
}

func apostropheCloses(text string, i int) bool {
	prev, _ := utf8.DecodeLastRuneInString(text[:i])
	if unicode.IsSpace(prev) {
		return false
	}
	next, n := utf8.DecodeRuneInString(text[i+1:])
	return n == 0 || !isLetterOrDigit(next)
}

// vocative reports whether text[i:end] opens or closes the text (only
// non-letters around it) or is followed by a comma or colon.
func vocative(text string, i, end int) bool {
	if !strings.ContainsFunc(text[:i], isLetterOrDigit) || !strings.ContainsFunc(text[end:], isLetterOrDigit) {
		return true
	}
	rest := strings.TrimLeftFunc(text[end:], unicode.IsSpace)
	r, _ := utf8.DecodeRuneInString(rest)
	switch r {
	case ',', ':', '，', '：':
		return true
	}
	return false
}

func ownerCommand(ev *channel.Event, id Identity) (string, bool) {
	return TriggerOwnerCommand, id.IsOwner(ev) && CommandName(ev, id.CommandPrefix) != ""
}

func pluginCommand(ev *channel.Event, id Identity) (string, bool) {
	if len(id.Commands) == 0 {
		return TriggerPluginCommand, false
	}
	name := CommandName(ev, id.CommandPrefix)
	if name == "" {
		return TriggerPluginCommand, false
	}
	prefix := cmpOr(id.CommandPrefix, DefaultCommandPrefix)
	for _, c := range id.Commands {
		if strings.EqualFold(strings.TrimPrefix(c, prefix), name) {
			return TriggerPluginCommand, true
		}
	}
	return TriggerPluginCommand, false
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// CommandName returns the command a message starts with, without the
// prefix ("" = default "/") and lower-cased, or "" when it starts with
// none. The command is the first word of the first text the sender wrote
// (a leading mention or quote is skipped): "/Status now" → "status",
// "/status@mybot" → "status".
func CommandName(ev *channel.Event, prefix string) string {
	name, _ := Command(ev, prefix)
	return name
}

// Command returns the command a message starts with (as CommandName does)
// and its arguments: the rest of that text, trimmed ("/roll 2d6" → "roll",
// "2d6"). name is "" when the message starts with no command.
func Command(ev *channel.Event, prefix string) (name, args string) {
	prefix = cmpOr(prefix, DefaultCommandPrefix)
	for _, s := range ev.Segments {
		if s.Type != channel.SegText {
			continue
		}
		text := strings.TrimLeftFunc(s.Text, unicode.IsSpace)
		if text == "" {
			continue
		}
		rest, ok := strings.CutPrefix(text, prefix)
		if !ok {
			return "", ""
		}
		n := strings.IndexFunc(rest, func(r rune) bool { return !isLetterOrDigit(r) && r != '_' && r != '-' })
		if n < 0 {
			n = len(rest)
		}
		if n == 0 {
			return "", ""
		}
		if next, _ := utf8.DecodeRuneInString(rest[n:]); n < len(rest) && !unicode.IsSpace(next) && next != '@' {
			return "", ""
		}
		args := rest[n:]
		if i := strings.IndexFunc(args, unicode.IsSpace); i >= 0 {
			args = args[i:] // past an "@botname" suffix
		} else {
			args = ""
		}
		return strings.ToLower(rest[:n]), strings.TrimSpace(args)
	}
	return "", ""
}

func link(ev *channel.Event, id Identity) (string, bool) {
	if id.ResolveLink == nil {
		return TriggerLink, false
	}
	for _, u := range Links(ev, MaxLinksPerMessage) {
		if id.ResolveLink(u) {
			return TriggerLink, true
		}
	}
	return TriggerLink, false
}

// Links returns up to max (<= 0: all) http(s) URLs of a message, in order:
// link segments and URLs written in the sender's own text.
func Links(ev *channel.Event, max int) []string {
	var out []string
	full := func() bool { return max > 0 && len(out) >= max }
	for _, s := range ev.Segments {
		switch s.Type {
		case channel.SegLink:
			if s.URL != "" {
				out = append(out, s.URL)
			}
		case channel.SegText:
			text := s.Text
			for !full() {
				i := indexURL(text)
				if i < 0 {
					break
				}
				text = text[i:]
				n := strings.IndexFunc(text, func(r rune) bool {
					return unicode.IsSpace(r) || r == '"' || r == '<' || r == '>' || r > unicode.MaxASCII
				})
				if n < 0 {
					n = len(text)
				}
				u := strings.TrimRight(text[:n], ".,;:!?)]}'")
				if _, host, _ := strings.Cut(u, "://"); host != "" {
					out = append(out, u)
				}
				text = text[n:]
			}
		}
		if full() {
			return out[:max]
		}
	}
	return out
}

// indexURL returns the index of the first "http://" or "https://" in s
// (case-insensitive), or -1.
func indexURL(s string) int {
	for i := 0; i+len("http://") <= len(s); i++ {
		if (s[i] == 'h' || s[i] == 'H') && (hasFoldPrefix(s[i:], "http://") || hasFoldPrefix(s[i:], "https://")) {
			return i
		}
	}
	return -1
}

func hasFoldPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
