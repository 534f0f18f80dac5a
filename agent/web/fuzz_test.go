package web_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/personakit/persona/agent/web"
)

// FuzzReadable checks that any input gives no panic, valid UTF-8 and at
// most maxText runes. Seeds live in testdata/fuzz/FuzzReadable.
func FuzzReadable(f *testing.F) {
	f.Add([]byte(articlePage), 50)
	f.Add([]byte("<ul><li>a<ol><li>b</ol></ul><pre>x\n  y</pre>"), 5)
	f.Fuzz(func(t *testing.T, page []byte, maxText int) {
		maxText %= 10000
		title, text, err := web.Readable(strings.NewReader(string(page)), maxText)
		if err != nil {
			t.Fatalf("Readable of an in-memory reader failed: %v", err)
		}
		limit := maxText
		if limit <= 0 {
			limit = web.DefaultMaxText
		}
		if n := utf8.RuneCountInString(text); n > limit {
			t.Fatalf("text has %d runes, max %d", n, limit)
		}
		if !utf8.ValidString(title) || !utf8.ValidString(text) {
			t.Fatalf("invalid UTF-8: %q %q", title, text)
		}
		if utf8.RuneCountInString(title) > 300 {
			t.Fatalf("title too long: %d runes", utf8.RuneCountInString(title))
		}
	})
}
