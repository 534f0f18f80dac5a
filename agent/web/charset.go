package web

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"unicode/utf8"

	"golang.org/x/net/html/charset"
)

// sniffLen is how much of a document is looked at to decide its encoding.
const sniffLen = 64 << 10

// decodeCharset returns a reader that yields r's content as UTF-8. The
// encoding comes from a byte-order mark, then the charset parameter of
// contentType, then a <meta charset> or <meta http-equiv> declaration in
// the first 1024 bytes. A declared single-byte encoding is overridden when
// the first 64 KiB hold non-ASCII bytes that are valid UTF-8 (a common
// mislabel); without any declaration the document is read as UTF-8 when
// the first 64 KiB are valid UTF-8 and as windows-1252 otherwise.
func decodeCharset(r io.Reader, contentType string) (io.Reader, error) {
	br := bufio.NewReaderSize(r, sniffLen)
	preview, err := br.Peek(sniffLen)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	enc, name, certain := charset.DetermineEncoding(preview, contentType)
	if !certain {
		high, valid := utf8Evidence(preview)
		declared := declaresCharset(preview)
		switch {
		case high && valid:
			name = "utf-8"
		case !declared && valid:
			name = "utf-8"
		}
	}
	if name == "utf-8" || enc == nil {
		return br, nil
	}
	return enc.NewDecoder().Reader(br), nil
}

// utf8Evidence reports whether b holds bytes above 0x7F and whether it is
// valid UTF-8, ignoring a rune cut at the end.
func utf8Evidence(b []byte) (high, valid bool) {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if b[i] < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	for _, c := range b {
		if c >= utf8.RuneSelf {
			high = true
			break
		}
	}
	return high, utf8.Valid(b)
}

// declaresCharset reports whether the first 1024 bytes mention a charset,
// the window the meta prescan looks at.
func declaresCharset(b []byte) bool {
	if len(b) > 1024 {
		b = b[:1024]
	}
	return bytes.Contains(bytes.ToLower(b), []byte("charset"))
}
