package agent

import (
	"context"
	"strconv"
	"strings"

	"github.com/personakit/persona/channel"
)

// Audio is one voice clip to turn into text.
type Audio struct {
	// Data is the clip's bytes.
	Data []byte
	// MIME is its type ("audio/mpeg", "audio/ogg", …).
	MIME string
	// Name is a file name with an extension that matches MIME
	// ("voice.mp3"): OpenAI-compatible servers pick the decoder by it.
	Name string
}

// Transcriber turns speech into text. agent/openai implements it over the
// OpenAI-compatible /audio/transcriptions endpoint. Errors follow the
// Model conventions: an *Error whose Kind says whether a retry can help
// (see Transient).
type Transcriber interface {
	Transcribe(ctx context.Context, a Audio) (string, error)
}

// TranscriberFunc adapts a function to Transcriber.
type TranscriberFunc func(ctx context.Context, a Audio) (string, error)

// Transcribe calls f.
func (f TranscriberFunc) Transcribe(ctx context.Context, a Audio) (string, error) { return f(ctx, a) }

// ImageInput is an optional capability of a Model: AcceptsImages reports
// whether requests may carry image parts (the model, or the group a
// request with images is routed to, has vision). Models reports true when
// its Vision group is set.
type ImageInput interface {
	AcceptsImages() bool
}

// AcceptsImages reports whether m declares that it takes image parts
// (ImageInput). A model that does not say is treated as text-only.
func AcceptsImages(m Model) bool {
	v, ok := m.(ImageInput)
	return ok && v.AcceptsImages()
}

// AcceptsImages reports whether a request with images has a vision model
// to go to: Vision is set, or Chat itself declares it takes images.
func (m Models) AcceptsImages() bool {
	return m.Vision != nil || (m.Chat != nil && AcceptsImages(m.Chat))
}

// MediaLabel is how a media segment is shown to a model as text: what it
// is, and what is known of its content, never its URL or file id.
//
//	[image]                      [image: a cat asleep on a keyboard]
//	[sticker]                    [sticker: laughing dog]
//	[voice 4s, not transcribed]  [voice 4s: see you at eight]
//	[video 12s]                  [file: report.pdf, 1.2 MB, application/pdf]
//
// A voice clip without a transcript (none was made, or making one failed)
// says so. Text from a
// description or transcript is returned as is: callers scrub ids from it
// like any message text.
func MediaLabel(s *channel.Segment) string {
	var m channel.Media
	if s.Media != nil {
		m = *s.Media
	}
	kind := string(s.Type)
	if s.Type == channel.SegVoice || s.Type == channel.SegVideo {
		if m.Duration > 0 {
			kind += " " + strconv.Itoa(m.Duration) + "s"
		}
	}
	detail := ""
	switch s.Type {
	case channel.SegImage, channel.SegSticker:
		detail = oneLine(m.Description)
	case channel.SegVoice:
		detail = oneLine(m.Transcript)
		switch {
		case m.Transcript == "":
			return "[" + kind + ", not transcribed]"
		case detail == "": // only blanks: heard nothing
			detail = "(no speech)"
		}
	case channel.SegFile:
		var parts []string
		if n := oneLine(m.Name); n != "" {
			parts = append(parts, n)
		}
		if m.Size > 0 {
			parts = append(parts, humanSize(m.Size))
		}
		if m.MIME != "" {
			parts = append(parts, m.MIME)
		}
		detail = strings.Join(parts, ", ")
	case channel.SegVideo:
		detail = oneLine(m.Name)
	}
	if detail == "" {
		return "[" + kind + "]"
	}
	return "[" + kind + ": " + detail + "]"
}

// oneLine joins s's lines and runs of spaces into single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// humanSize renders a byte count as "512 B", "3.4 KB", "1.2 MB".
func humanSize(n int64) string {
	const k = 1024
	switch {
	case n < k:
		return strconv.FormatInt(n, 10) + " B"
	case n < k*k:
		return strconv.FormatFloat(float64(n)/k, 'f', 1, 64) + " KB"
	case n < k*k*k:
		return strconv.FormatFloat(float64(n)/(k*k), 'f', 1, 64) + " MB"
	}
	return strconv.FormatFloat(float64(n)/(k*k*k), 'f', 1, 64) + " GB"
}
