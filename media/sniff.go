package media

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
)

// sniffLen is how many leading bytes sniff looks at (as much as
// http.DetectContentType considers).
const sniffLen = 512

// sniff returns the MIME type of content that starts with head: the
// signatures below first, then http.DetectContentType. The declared type is
// used only when the bytes say nothing more than application/octet-stream.
func sniff(head []byte, declared string) string {
	if m := sniffExtra(head, declared); m != "" {
		return m
	}
	m := baseType(http.DetectContentType(head))
	if d := baseType(declared); m == "application/octet-stream" && d != "" {
		return d
	}
	return m
}

// baseType lowercases a MIME type and drops its parameters.
func baseType(s string) string {
	if i := strings.IndexByte(s, ';'); i >= 0 {
		s = s[:i]
	}
	return strings.ToLower(strings.TrimSpace(s))
}

// sniffExtra knows the audio, video and sticker formats chat platforms use
// that http.DetectContentType does not (or names differently).
func sniffExtra(b []byte, declared string) string {
	has := func(off int, sig string) bool {
		return len(b) >= off+len(sig) && string(b[off:off+len(sig)]) == sig
	}
	switch {
	case has(0, "#!SILK_V3"), has(0, "\x02#!SILK_V3"):
		return "audio/silk"
	case has(0, "#!AMR-WB\n"):
		return "audio/amr-wb"
	case has(0, "#!AMR"):
		return "audio/amr"
	case has(0, "OggS"):
		return "audio/ogg"
	case has(0, "fLaC"):
		return "audio/flac"
	case has(0, "ID3"):
		return "audio/mpeg"
	case has(0, "RIFF") && has(8, "WAVE"):
		return "audio/wav"
	case has(0, "RIFF") && has(8, "WEBP"):
		return "image/webp"
	case has(4, "ftyp") && len(b) >= 12:
		return ftypBrand(string(b[8:12]))
	case has(0, "\x1a\x45\xdf\xa3"): // EBML: WebM or Matroska
		return "video/webm"
	case has(0, "\x1f\x8b") && isLottie(b, declared):
		return "application/x-tgsticker"
	}
	return mpegFrame(b)
}

// ftypBrand maps the major brand of an ISO media file to its type.
func ftypBrand(brand string) string {
	switch brand {
	case "M4A ", "M4B ", "M4P ":
		return "audio/mp4"
	case "qt  ":
		return "video/quicktime"
	case "avif", "avis":
		return "image/avif"
	case "heic", "heix", "heim", "heis", "mif1", "msf1":
		return "image/heic"
	}
	return "video/mp4"
}

// isLottie reports whether gzip data is a Telegram animated sticker: the
// platform says so, or the data inflates to a Lottie JSON object.
func isLottie(b []byte, declared string) bool {
	if baseType(declared) == "application/x-tgsticker" {
		return true
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return false
	}
	var out [64]byte
	n, _ := io.ReadFull(zr, out[:]) // the head is truncated: use what inflates
	j := bytes.TrimSpace(out[:n])
	return len(j) > 0 && j[0] == '{' && (bytes.Contains(j, []byte(`"tgs"`)) || bytes.Contains(j, []byte(`"v"`)))
}

// mpegFrame recognises a raw MPEG audio frame header (MP3 without an ID3
// tag) or an ADTS AAC header.
func mpegFrame(b []byte) string {
	if len(b) < 3 || b[0] != 0xFF || b[1]&0xE0 != 0xE0 {
		return ""
	}
	if b[1]&0xF6 == 0xF0 { // MPEG-2/4 sync with layer 0: ADTS
		return "audio/aac"
	}
	version, layer := (b[1]>>3)&3, (b[1]>>1)&3
	bitrate, rate := b[2]>>4, (b[2]>>2)&3
	if version == 1 || layer == 0 || bitrate == 15 || rate == 3 {
		return ""
	}
	return "audio/mpeg"
}
