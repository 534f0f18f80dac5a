package agent

import (
	"unicode"
	"unicode/utf8"
)

// Token budget defaults.
const (
	// DefaultContextWindow is the context window assumed when none is
	// configured.
	DefaultContextWindow = 128_000
	// DefaultMaxOutput is the output reserve assumed when none is configured.
	DefaultMaxOutput = 4_096
	// SafetyTokens is subtracted from every input budget.
	SafetyTokens = 128
	// DefaultMaxInputChars caps the current message's text.
	DefaultMaxInputChars = 2000
	// MessageOverheadTokens is the per-message overhead of the estimate.
	MessageOverheadTokens = 8
	// DefaultTurnGrouping joins same-user messages into one history turn.
	DefaultTurnGrouping = 120 // seconds
)

// Image token estimates by detail.
const (
	imageTokensLow  = 85
	imageTokensHigh = 765
)

// TokenCounter counts the tokens of one message with the provider's
// tokenizer. Implementations must be safe for concurrent use and fast: the
// builder calls it once per rendered message.
type TokenCounter interface {
	CountTokens(m Message) int
}

// TokenCounterFunc adapts a function to a TokenCounter.
type TokenCounterFunc func(m Message) int

// CountTokens calls f.
func (f TokenCounterFunc) CountTokens(m Message) int { return f(m) }

// EstimateTokens estimates the tokens of s with the heuristic used when the
// provider offers no counts: ASCII ≈ 3 characters per token, CJK 2 tokens
// per character, any other character 1 token.
func EstimateTokens(s string) int {
	ascii, other := 0, 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			ascii++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if isCJK(r) {
			other += 2
		} else {
			other++
		}
	}
	return (ascii+2)/3 + other
}

// isCJK reports whether r is a Han, Hiragana, Katakana or Hangul character
// or CJK punctuation.
func isCJK(r rune) bool {
	switch {
	case r >= 0x3000 && r <= 0x30FF, // CJK punctuation, kana
		r >= 0x3400 && r <= 0x4DBF, // ext A
		r >= 0x4E00 && r <= 0x9FFF, // unified ideographs
		r >= 0xAC00 && r <= 0xD7AF, // Hangul syllables
		r >= 0xF900 && r <= 0xFAFF, // compatibility ideographs
		r >= 0xFF00 && r <= 0xFFEF: // full-width forms
		return true
	}
	return r > 0xFFFF && unicode.Is(unicode.Han, r)
}

// EstimateMessage estimates one message: its text, tool calls and images
// plus MessageOverheadTokens.
func EstimateMessage(m Message) int {
	n := MessageOverheadTokens + EstimateTokens(m.Content) + EstimateTokens(m.Name)
	for _, tc := range m.ToolCalls {
		n += EstimateTokens(tc.Name) + EstimateTokens(string(tc.Arguments)) + 4
	}
	for _, p := range m.Parts {
		if p.Detail == "low" {
			n += imageTokensLow
		} else {
			n += imageTokensHigh
		}
	}
	return n
}

// Budget is the token budget of one request.
type Budget struct {
	// Input is what the prompt may use: window − max output − SafetyTokens.
	Input int
	// History is the stable history's share: 55 % of Input, within
	// 512–16,000 tokens.
	History int
	// Memory is the retrieved-memory block's share: 10 % of Input, ≤ 2,400.
	Memory int
	// CoreMemory is the core-facts block's share: 5 % of Input, ≤ 600.
	CoreMemory int
	// Summary is the summary checkpoint's share: 15 % of Input.
	Summary int
}

// NewBudget computes the budget for a context window and output reserve
// (0 means DefaultContextWindow / DefaultMaxOutput).
func NewBudget(window, maxOutput int) Budget {
	if window <= 0 {
		window = DefaultContextWindow
	}
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	in := max(window-maxOutput-SafetyTokens, 0)
	return Budget{
		Input:      in,
		History:    min(max(in*55/100, 512), 16_000),
		Memory:     min(in*10/100, 2_400),
		CoreMemory: min(in*5/100, 600),
		Summary:    in * 15 / 100,
	}
}
