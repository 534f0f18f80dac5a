package outbound

import (
	"context"
	"regexp"
	"slices"
	"strings"

	"github.com/personakit/persona/channel"
)

// SecretMask replaces every masked secret.
const SecretMask = "[redacted]"

// secretPattern is a masking pattern and a cheap pre-check: may reports
// false only for a text the pattern cannot match, so the regular
// expression runs only where it might (ten passes over every reply were 2 %
// of the pipeline's CPU on the reply path). TestMaskSecretsPreChecks and
// FuzzMaskSecrets hold the checks to the expressions.
type secretPattern struct {
	re  *regexp.Regexp
	may func(text string) bool
}

// contains is a pre-check for a case-sensitive literal the pattern needs.
func contains(lits ...string) func(string) bool {
	return func(text string) bool {
		for _, l := range lits {
			if strings.Contains(text, l) {
				return true
			}
		}
		return false
	}
}

// containsFold is a pre-check for (?i) patterns: one of the lower-case
// ASCII words must appear in any case. A text with non-ASCII bytes always
// passes: case folding there has more forms (U+212A folds to k, U+017F to
// s) than an ASCII check sees.
func containsFold(words ...string) func(string) bool {
	return func(text string) bool {
		for i := 0; i < len(text); i++ {
			if text[i] >= 0x80 {
				return true
			}
		}
		lower := strings.ToLower(text)
		for _, w := range words {
			if strings.Contains(lower, w) {
				return true
			}
		}
		return false
	}
}

var secretPatterns = []secretPattern{
	// Private keys (PEM blocks).
	{regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|$)`),
		contains("-----BEGIN ")},
	// Well-known token shapes.
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{16,}`), contains("sk-")},
	{regexp.MustCompile(`\b(ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}`), contains("gh", "github_pat_")},
	{regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9\-]{10,}`), contains("xox")},
	{regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`), contains("AKIA")},
	{regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{35}`), contains("AIza")},
	{regexp.MustCompile(`\b\d{8,10}:[A-Za-z0-9_\-]{35}\b`), contains(":")}, // Telegram bot token
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`), contains("eyJ")},
	// Authorization headers.
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/\-]{16,}=*`), containsFold("bearer", "basic")},
}

// keyValueWords is keyValueSecret's keyword check (made once: the pattern
// runs on every reply).
var keyValueWords = containsFold("key", "token", "secret", "passw", "session", "cookie")

// keyValueSecret matches "api_key=…", "token: …", "password=…" and
// cookie headers; the value is masked, the key kept.
var keyValueSecret = secretPattern{
	regexp.MustCompile(`(?i)\b((?:api[_-]?key|access[_-]?token|refresh[_-]?token|secret|password|passwd|token|session[_-]?id|cookie|set-cookie)["']?\s*[:=]\s*)("[^"\n]*"|'[^'\n]*'|[^\s,;]+(?:;\s*[^\s,;=]+=[^\s,;]+)*)`),
	func(text string) bool {
		return strings.ContainsAny(text, ":=") && keyValueWords(text)
	},
}

// MaskSecrets masks the configured credential values (by value, longest
// first), private keys, well-known token shapes, key=value secrets and
// cookies in text.
func MaskSecrets(text string, secrets []string) string {
	return maskSecrets(text, secrets, true)
}

// maskSecrets is MaskSecrets; without checks it runs every expression.
func maskSecrets(text string, secrets []string, checks bool) string {
	vals := slices.Clone(secrets)
	slices.SortFunc(vals, func(a, b string) int { return len(b) - len(a) })
	for _, v := range vals {
		if len(strings.TrimSpace(v)) >= 4 {
			text = strings.ReplaceAll(text, v, SecretMask)
		}
	}
	for _, p := range secretPatterns {
		if !checks || p.may(text) {
			text = p.re.ReplaceAllString(text, SecretMask)
		}
	}
	if checks && !keyValueSecret.may(text) {
		return text
	}
	return keyValueSecret.re.ReplaceAllString(text, "${1}"+SecretMask)
}

var replyMarker = regexp.MustCompile(`\[persona-reply:([^\]\s]+)\]`)

// ResolveMarkers takes the model-written [persona-reply:<id>] markers out
// of text. The first one whose id is the current message (current) or one
// known reports true for becomes replyTo; the others are dropped.
// [persona-at:<id>] markers stay where they are: the delivery exit turns
// them into mentions or names according to where they stand in the chunk
// that carries them (see ResolveMentions).
func ResolveMarkers(text, current string, known func(id string) bool) (out, replyTo string) {
	for _, m := range replyMarker.FindAllStringSubmatch(text, -1) {
		if replyTo == "" && (m[1] == current && current != "" || known != nil && known(m[1])) {
			replyTo = m[1]
		}
	}
	return replyMarker.ReplaceAllString(text, ""), replyTo
}

// PolicyRule is one send-policy rule. Empty match fields match everything.
type PolicyRule struct {
	// Allow: true allows, false denies.
	Allow bool
	// Platform matches the channel name.
	Platform string
	// Kind matches the chat kind.
	Kind channel.ChatKind
	// SessionPrefix matches session keys with this prefix.
	SessionPrefix string
}

func (r PolicyRule) matches(platform string, kind channel.ChatKind, session string) bool {
	return (r.Platform == "" || r.Platform == platform) &&
		(r.Kind == "" || r.Kind == kind) &&
		strings.HasPrefix(session, r.SessionPrefix)
}

// SendPolicy is an ordered list of allow/deny rules. The first rule that
// matches decides; no match allows. An owner override per session
// (Override) wins over the rules.
type SendPolicy struct {
	Rules []PolicyRule
	// Override returns the owner's per-session setting: +1 on, −1 off, 0
	// inherit the rules. nil means inherit everywhere.
	Override func(sessionKey string) int
}

// Allowed reports whether a message may go to the chat, and the deciding
// rule's index (−1 for the default or an override).
func (p SendPolicy) Allowed(platform string, chat channel.Chat, sessionKey string) (bool, int) {
	if p.Override != nil {
		switch o := p.Override(sessionKey); {
		case o > 0:
			return true, -1
		case o < 0:
			return false, -1
		}
	}
	for i, r := range p.Rules {
		if r.matches(platform, chat.Kind, sessionKey) {
			return r.Allow, i
		}
	}
	return true, -1
}

// Message is an outgoing reply as BeforeSend hooks see it. A hook may
// change Text, ReplyTo and Mentions.
type Message struct {
	TurnID     string
	SessionKey string
	Platform   string
	Chat       channel.Chat
	Text       string
	ReplyTo    string
	Mentions   []string
}

// BeforeSend is a hook run on every outgoing reply before it is shaped and
// sent. It may rewrite m; a non-nil error cancels the reply
// (IgnoredCancelledByHook, with the error text as the reason).
type BeforeSend func(ctx context.Context, m *Message) error
