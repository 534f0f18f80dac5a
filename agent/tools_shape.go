package agent

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// secretPatterns match token- and key-shaped strings in tool output.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}`),
	regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}`),
	regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`),
	regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`),
	regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{30,}`),
	regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}`),
	regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{12,}=*`),
	regexp.MustCompile(`(?i)\b(api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd)(["']?\s*[:=]\s*["']?)[^\s"',;&]{6,}`),
}

// Redacted replaces a masked secret in tool output.
const Redacted = "[redacted]"

// maskSecrets replaces the configured secret values and token/key-shaped
// strings with [Redacted].
func maskSecrets(s string, values []string) string {
	for _, v := range values {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, Redacted)
		}
	}
	for i, re := range secretPatterns {
		if i == len(secretPatterns)-1 {
			s = re.ReplaceAllString(s, "${1}${2}"+Redacted)
			continue
		}
		s = re.ReplaceAllString(s, Redacted)
	}
	return s
}

// truncateRunes keeps the first max characters of s and appends a marker
// naming how many were cut.
func truncateRunes(s string, max int) string {
	n := utf8.RuneCountInString(s)
	if max <= 0 || n <= max {
		return s
	}
	return cutRunes(s, max) + fmt.Sprintf("\n…[truncated %d chars]", n-max)
}

// cutRunes returns the first max runes of s.
func cutRunes(s string, max int) string {
	i := 0
	for j := range s {
		if i == max {
			return s[:j]
		}
		i++
	}
	return s
}

// short is s on one line, at most max runes, with an ellipsis when cut.
func short(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return cutRunes(s, max-1) + "…"
}
