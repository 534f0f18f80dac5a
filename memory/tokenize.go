package memory

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxTokenRunes bounds one word token; longer runs of letters are cut.
const maxTokenRunes = 48

// isCJK reports whether r belongs to a script written without spaces between
// words (Han, Hiragana, Katakana, Hangul, Bopomofo). Runs of such characters
// are indexed as overlapping bigrams.
func isCJK(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r) ||
		unicode.Is(unicode.Bopomofo, r) || r == 'ー' // prolonged sound mark
}

// Tokenize splits s into search tokens, in order and with repeats, the same
// way for indexing and for queries:
//
//   - a run of CJK characters (Han, kana, Hangul) becomes its overlapping
//     character bigrams ("北京天气" → "北京", "京天", "天气"); a single CJK
//     character stays a unigram;
//   - any other run of letters and digits is one word, lower-cased (words
//     longer than 48 runes are cut);
//   - everything else (spaces, punctuation, symbols, emoji) separates tokens.
//
// The tokens contain no ASCII punctuation or spaces, so SQLite's FTS4
// "simple" tokenizer reads a space-joined token string back unchanged.
func Tokenize(s string) []string {
	var out []string
	TokenizeFunc(s, func(tok string) { out = append(out, tok) })
	return out
}

// TokenizeFunc calls emit for every token of s (see Tokenize) without
// collecting them.
func TokenizeFunc(s string, emit func(tok string)) {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case isCJK(r):
			j := i
			var prev string
			count := 0
			for j < len(s) {
				r2, n2 := utf8.DecodeRuneInString(s[j:])
				if !isCJK(r2) {
					break
				}
				cur := s[j : j+n2]
				if count > 0 {
					emit(prev + cur)
				}
				prev = cur
				count++
				j += n2
			}
			if count == 1 {
				emit(prev)
			}
			i = j
		case isWordRune(r):
			j := i
			runes := 0
			for j < len(s) {
				r2, n2 := utf8.DecodeRuneInString(s[j:])
				if isCJK(r2) || !isWordRune(r2) {
					break
				}
				runes++
				j += n2
			}
			w := s[i:j]
			if runes > maxTokenRunes {
				cut := 0
				for range maxTokenRunes {
					_, n3 := utf8.DecodeRuneInString(w[cut:])
					cut += n3
				}
				w = w[:cut]
			}
			emit(lowerWord(w))
			i = j
		default:
			i += n
		}
	}
}

// isWordRune reports whether r belongs to a word of a space-separated
// script: a letter, a digit or a combining mark.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)
}

// lowerWord lower-cases w, without allocating for words that are already
// lower-case ASCII.
func lowerWord(w string) string {
	for i := 0; i < len(w); i++ {
		c := w[i]
		if c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return strings.ToLower(w)
		}
	}
	return w
}

// IndexText returns the space-joined tokens of the given texts: the form
// stored in the search columns and fed to SQLite's FTS4 "simple" tokenizer.
func IndexText(texts ...string) string {
	var b strings.Builder
	for _, s := range texts {
		TokenizeFunc(s, func(tok string) {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(tok)
		})
	}
	return b.String()
}

// maxQueryTokens bounds the distinct tokens of one search query.
const maxQueryTokens = 32

// stopWords are frequent English function words dropped from queries (not
// from the index): they match nearly every document and add nothing to the
// ranking but cost.
var stopWords = map[string]bool{
	"a": true, "an": true, "the": true, "and": true, "or": true, "of": true, "to": true, "in": true,
	"on": true, "at": true, "is": true, "are": true, "was": true, "were": true, "be": true, "it": true,
	"i": true, "you": true, "me": true, "my": true, "we": true, "do": true, "does": true, "for": true,
	"with": true, "this": true, "that": true, "what": true, "s": true, "t": true,
}

// QueryTokens returns the distinct tokens of a search query in first-seen
// order, without English stop words (unless nothing else is left), at most
// 32.
func QueryTokens(s string) []string {
	seen := map[string]bool{}
	var out, stops []string
	TokenizeFunc(s, func(tok string) {
		if seen[tok] {
			return
		}
		seen[tok] = true
		if stopWords[tok] {
			stops = append(stops, tok)
			return
		}
		out = append(out, tok)
	})
	if len(out) == 0 {
		out = stops
	}
	if len(out) > maxQueryTokens {
		out = out[:maxQueryTokens]
	}
	return out
}

// MatchExpr renders query tokens as an FTS4 MATCH expression that matches a
// document containing any of them ("t1" OR "t2" ...). It returns "" for no
// tokens.
func MatchExpr(tokens []string) string {
	var b strings.Builder
	for i, t := range tokens {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteByte('"')
		b.WriteString(strings.ReplaceAll(t, `"`, ""))
		b.WriteByte('"')
	}
	return b.String()
}
