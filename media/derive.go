package media

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/personakit/persona/agent"
)

// The note names of derived texts. The suffix is the version of the prompt
// or method: changing either means a new name, so old texts are not reused.
const (
	NoteDescription = "description/v1"
	NoteSticker     = "sticker/v1"
	NoteTranscript  = "transcript/v1"
)

// DefaultDescribePrompt is the system prompt Describe uses for pictures.
const DefaultDescribePrompt = "You describe pictures from a group chat for someone who cannot see them. " +
	"In at most 60 words, say what the picture shows and what matters about it: people, setting, mood, the point of a meme or screenshot. " +
	"If the picture contains text, write in the language of that text and quote the important text briefly. " +
	"Reply with the description only: no preamble, no markdown."

// DefaultStickerPrompt is the system prompt Describe uses for stickers.
const DefaultStickerPrompt = "You name chat stickers for someone who cannot see them. " +
	"In at most 8 words, say the emotion or action the sticker expresses (for example: cat rolling its eyes; thumbs up, approving). " +
	"If the sticker carries a caption, use the caption's language. Reply with those words only."

const (
	maxDescriptionRunes = 400
	maxStickerRunes     = 40
)

// errEmptyAnswer: the model answered nothing; a retry may do better.
var errEmptyAnswer = errors.New("media: the vision model returned an empty description")

// Describe returns a short description of an image blob (sticker: a few
// words naming its emotion or action). It is written once by the vision
// model and kept as the note NoteDescription (NoteSticker); concurrent
// calls for one blob share one model call. The model gets a PurposeVision
// request: the prompt as system message and the picture as a data: URL in
// the user message. The answer is trimmed, its whitespace collapsed, and
// clipped to 400 runes (stickers 40). An empty answer is an error and is
// not kept. Model errors are returned wrapped, so agent.Transient and
// Definitive classify them.
func (s *Service) Describe(ctx context.Context, b Blob, sticker bool) (string, error) {
	if s.vision == nil {
		return "", ErrNoVision
	}
	if !strings.HasPrefix(b.MIME, "image/") {
		return "", fmt.Errorf("%w: %s is not an image", ErrUnsupported, b.MIME)
	}
	name, prompt, ask, maxRunes, maxTokens := NoteDescription, s.prompt, "Describe this picture.", maxDescriptionRunes, 200
	if sticker {
		name, prompt, ask, maxRunes, maxTokens = NoteSticker, s.sticker, "Name this sticker.", maxStickerRunes, 60
	}
	if text, ok := s.cache.Note(b.SHA256, name); ok {
		return text, nil
	}
	return share(ctx, &s.derives, name+"\x00"+b.SHA256, func() (string, error) {
		if text, ok := s.cache.Note(b.SHA256, name); ok {
			return text, nil
		}
		img, err := s.DataURL(b)
		if err != nil {
			return "", err
		}
		resp, err := s.vision.Generate(ctx, agent.Request{
			Purpose: agent.PurposeVision,
			Messages: []agent.Message{
				{Role: agent.RoleSystem, Content: prompt},
				{Role: agent.RoleUser, Content: ask, Parts: []agent.Part{{ImageURL: img, Detail: "low"}}},
			},
			MaxTokens: maxTokens,
		})
		if err != nil {
			return "", fmt.Errorf("media: describe: %w", err)
		}
		text := ""
		if resp != nil {
			text = clip(strings.Join(strings.Fields(resp.Text), " "), maxRunes)
		}
		if text == "" {
			return "", errEmptyAnswer
		}
		if err := s.cache.SetNote(b.SHA256, name, text); err != nil {
			s.log.Warn("media: cannot keep a description", "err", err)
		}
		return text, nil
	})
}

// clip shortens s to at most n runes, ending with "…" when it cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n-1 {
			break
		}
		count++
	}
	return strings.TrimSpace(s[:i]) + "…"
}

// audioExt returns the file extension a transcription server expects for
// an audio type; false for types it cannot decode (SILK, AMR: the platform
// should have converted them).
func audioExt(mime string) (string, bool) {
	switch mime {
	case "audio/mpeg", "audio/mp3":
		return ".mp3", true
	case "audio/ogg", "audio/opus", "video/ogg", "application/ogg":
		return ".ogg", true
	case "audio/wav", "audio/wave", "audio/x-wav":
		return ".wav", true
	case "audio/mp4", "audio/m4a", "audio/x-m4a":
		return ".m4a", true
	case "video/mp4":
		return ".mp4", true
	case "audio/webm", "video/webm":
		return ".webm", true
	case "audio/flac", "audio/x-flac":
		return ".flac", true
	case "audio/aac":
		return ".aac", true
	}
	return "", false
}

// Transcribe returns the transcript of a voice blob. It is made once by
// the Transcriber and kept as the note NoteTranscript; concurrent calls
// for one blob share one call. An empty transcript (silence) is a real
// answer: it is kept and returned as "". Types no transcription server
// decodes (audio/silk, audio/amr: the platform should have converted them)
// are ErrUnsupported.
func (s *Service) Transcribe(ctx context.Context, b Blob) (string, error) {
	if s.transcriber == nil {
		return "", ErrNoTranscriber
	}
	if _, ok := audioExt(b.MIME); !ok {
		return "", fmt.Errorf("%w: cannot transcribe %s", ErrUnsupported, b.MIME)
	}
	if text, ok := s.cache.Note(b.SHA256, NoteTranscript); ok {
		return text, nil
	}
	return share(ctx, &s.derives, NoteTranscript+"\x00"+b.SHA256, func() (string, error) {
		if text, ok := s.cache.Note(b.SHA256, NoteTranscript); ok {
			return text, nil
		}
		data, blob, err := s.cache.ReadAll(b.SHA256)
		if err != nil {
			return "", err
		}
		ext, ok := audioExt(blob.MIME)
		if !ok {
			return "", fmt.Errorf("%w: cannot transcribe %s", ErrUnsupported, blob.MIME)
		}
		text, err := s.transcriber.Transcribe(ctx, agent.Audio{Data: data, MIME: blob.MIME, Name: "voice" + ext})
		if err != nil {
			return "", fmt.Errorf("media: transcribe: %w", err)
		}
		text = strings.TrimSpace(text)
		if err := s.cache.SetNote(b.SHA256, NoteTranscript, text); err != nil {
			s.log.Warn("media: cannot keep a transcript", "err", err)
		}
		return text, nil
	})
}
