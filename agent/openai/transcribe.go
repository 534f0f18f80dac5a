package openai

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/personakit/persona/agent"
)

// DefaultTranscriptionModel is the model a [Transcriber] uses when
// TranscriberConfig.Model is empty.
const DefaultTranscriptionModel = "whisper-1"

// TranscriberConfig configures a [Transcriber]. Zero fields take the
// defaults.
type TranscriberConfig struct {
	// BaseURL is the OpenAI-compatible endpoint including its version
	// path; requests go to BaseURL + "/audio/transcriptions". Empty means
	// [DefaultBaseURL].
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none. The process
	// environment is never consulted.
	APIKey string
	// Model is the speech-to-text model (default
	// [DefaultTranscriptionModel]).
	Model string
	// Language is the ISO-639-1 code of the speech ("en", "zh"), a hint
	// that improves accuracy and latency; empty lets the model detect it.
	Language string
	// Prompt is optional text that guides the model's style or spelling
	// (names, jargon); empty sends none.
	Prompt string
	// Timeout bounds one call (0 = [DefaultTimeout]). A shorter deadline on
	// the caller's context wins.
	Timeout time.Duration
	// HTTPClient sends the requests (nil = [http.DefaultClient]).
	HTTPClient *http.Client
}

// Transcriber is an [agent.Transcriber] over the OpenAI-compatible
// POST /audio/transcriptions endpoint (OpenAI Whisper and gpt-4o
// transcribe models, whisper.cpp and faster-whisper servers, LocalAI, …).
// Create it with [NewTranscriber]; it is safe for concurrent use.
type Transcriber struct {
	svc      oai.AudioTranscriptionService
	model    string
	language string
	prompt   string
	timeout  time.Duration
}

var _ agent.Transcriber = (*Transcriber)(nil)

// NewTranscriber validates cfg and returns a Transcriber. Like [New] it
// never reads the process environment and disables the SDK's retries.
func NewTranscriber(cfg TranscriberConfig) (*Transcriber, error) {
	base, err := baseURL("TranscriberConfig", cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("openai: TranscriberConfig.Timeout must not be negative, got %s", cfg.Timeout)
	}
	return &Transcriber{
		svc:      oai.NewAudioTranscriptionService(clientOptions(base, cfg.APIKey, cfg.HTTPClient)...),
		model:    cmp.Or(strings.TrimSpace(cfg.Model), DefaultTranscriptionModel),
		language: strings.TrimSpace(cfg.Language),
		prompt:   cfg.Prompt,
		timeout:  cmp.Or(cfg.Timeout, DefaultTimeout),
	}, nil
}

// Transcribe sends the clip as one multipart upload (the file part named
// a.Name with content type a.MIME, the model, and the language and prompt
// when configured) and returns the transcript's text, trimmed; silence
// may give "". Without a.Name the file is named "audio" plus an extension
// for a.MIME, since servers pick the decoder by it.
//
// Errors are [*agent.Error] values classified like [Model.Generate]'s:
// 429 [agent.KindRateLimited], 5xx and broken connections or bodies
// [agent.KindServer], expired deadlines [agent.KindTimeout] (all
// transient); 401/403 [agent.KindAuth] and other 4xx (400 for an
// unsupported format, 404 for an unknown model) and empty audio
// [agent.KindInvalidRequest] (definitive).
func (t *Transcriber) Transcribe(ctx context.Context, a agent.Audio) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", contextError(err, err)
	}
	if len(a.Data) == 0 {
		err := errors.New("openai: no audio to transcribe")
		return "", &agent.Error{Kind: agent.KindInvalidRequest, Message: err.Error(), Err: err}
	}
	contentType := cmp.Or(strings.TrimSpace(a.MIME), "application/octet-stream")
	name := strings.TrimSpace(a.Name)
	if name == "" {
		name = "audio" + audioExt(contentType)
	}
	p := oai.AudioTranscriptionNewParams{
		File:  oai.File(bytes.NewReader(a.Data), name, contentType),
		Model: t.model,
	}
	if t.language != "" {
		p.Language = param.NewOpt(t.language)
	}
	if t.prompt != "" {
		p.Prompt = param.NewOpt(t.prompt)
	}

	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var httpResp *http.Response
	res, err := t.svc.New(ctx, p, option.WithResponseInto(&httpResp))
	if err != nil {
		return "", classify(ctx, err, httpResp)
	}
	return strings.TrimSpace(res.Text), nil
}

// audioExt is a file extension for an audio MIME type that the
// transcription endpoints recognise ("" when unknown).
func audioExt(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return ""
	}
	switch mt {
	case "audio/mpeg", "audio/mp3", "audio/mpga":
		return ".mp3"
	case "audio/ogg", "audio/opus", "audio/oga":
		return ".ogg"
	case "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave":
		return ".wav"
	case "audio/mp4", "audio/m4a", "audio/x-m4a":
		return ".m4a"
	case "audio/webm", "video/webm":
		return ".webm"
	case "audio/flac", "audio/x-flac":
		return ".flac"
	case "video/mp4":
		return ".mp4"
	}
	return ""
}
