package agent

import "context"

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
