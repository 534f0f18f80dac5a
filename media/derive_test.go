package media_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/media"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	model := &scripted{answer: reply("  A grey cat\n asleep on  a sofa. \n")}
	s := newService(t, media.Config{Vision: model})
	b := put(t, s.Cache(), pngOf("cat"), "")

	for range 2 {
		text, err := s.Describe(context.Background(), b, false)
		if err != nil || text != "A grey cat asleep on a sofa." {
			t.Fatalf("Describe = %q, %v", text, err)
		}
	}
	if n := model.calls(); n != 1 {
		t.Fatalf("%d model calls, want 1 (the second is cached)", n)
	}
	if text, ok := s.Cache().Note(b.SHA256, media.NoteDescription); !ok || text != "A grey cat asleep on a sofa." {
		t.Errorf("note = %q, %v", text, ok)
	}
	req := model.reqs[0]
	if req.Purpose != agent.PurposeVision || req.MaxTokens != 200 || len(req.Messages) != 2 {
		t.Fatalf("request = %+v", req)
	}
	sys, user := req.Messages[0], req.Messages[1]
	if sys.Role != agent.RoleSystem || sys.Content != media.DefaultDescribePrompt {
		t.Errorf("system message = %+v", sys)
	}
	want, err := s.DataURL(b)
	if err != nil {
		t.Fatal(err)
	}
	if user.Role != agent.RoleUser || len(user.Parts) != 1 || user.Parts[0].ImageURL != want ||
		!strings.HasPrefix(want, "data:image/png;base64,") {
		t.Errorf("user message = %+v", user)
	}
}

func TestDescribeSticker(t *testing.T) {
	t.Parallel()
	model := &scripted{answer: func(_ context.Context, req agent.Request) (*agent.Response, error) {
		if req.Messages[0].Content == media.DefaultStickerPrompt {
			return &agent.Response{Text: "cat rolling its eyes, deeply unimpressed by everything happening here"}, nil
		}
		return &agent.Response{Text: strings.Repeat("long description ", 100)}, nil
	}}
	s := newService(t, media.Config{Vision: model})
	b := put(t, s.Cache(), samples["webp"], "")

	sticker, err := s.Describe(context.Background(), b, true)
	if err != nil || utf8.RuneCountInString(sticker) > 40 || !strings.HasPrefix(sticker, "cat rolling its eyes") || !strings.HasSuffix(sticker, "…") {
		t.Fatalf("sticker = %q, %v", sticker, err)
	}
	picture, err := s.Describe(context.Background(), b, false)
	if err != nil || utf8.RuneCountInString(picture) > 400 || !strings.HasPrefix(picture, "long description") {
		t.Fatalf("picture = %q, %v", picture, err)
	}
	if n := model.calls(); n != 2 {
		t.Fatalf("%d model calls, want 2 (sticker and picture notes are separate)", n)
	}
	if model.reqs[0].MaxTokens >= model.reqs[1].MaxTokens {
		t.Errorf("sticker MaxTokens %d not below the picture's %d", model.reqs[0].MaxTokens, model.reqs[1].MaxTokens)
	}
	if again, _ := s.Describe(context.Background(), b, true); again != sticker || model.calls() != 2 {
		t.Errorf("cached sticker = %q after %d calls", again, model.calls())
	}

	custom := &scripted{answer: reply("ok")}
	s = newService(t, media.Config{Vision: custom, DescribePrompt: "P", StickerPrompt: "S"})
	b = put(t, s.Cache(), pngOf("custom"), "")
	_, _ = s.Describe(context.Background(), b, false)
	_, _ = s.Describe(context.Background(), b, true)
	if custom.reqs[0].Messages[0].Content != "P" || custom.reqs[1].Messages[0].Content != "S" {
		t.Errorf("custom prompts not used: %q, %q", custom.reqs[0].Messages[0].Content, custom.reqs[1].Messages[0].Content)
	}
}

func TestDescribeEmptyAnswerIsNotCached(t *testing.T) {
	t.Parallel()
	answers := []string{" \n\t ", "a dog"}
	var mu sync.Mutex
	model := &scripted{answer: func(context.Context, agent.Request) (*agent.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		a := answers[0]
		answers = answers[1:]
		return &agent.Response{Text: a}, nil
	}}
	s := newService(t, media.Config{Vision: model})
	b := put(t, s.Cache(), pngOf("dog"), "")
	if text, err := s.Describe(context.Background(), b, false); err == nil || media.Definitive(err) {
		t.Fatalf("empty answer: %q, %v; want a transient error", text, err)
	}
	if _, ok := s.Cache().Note(b.SHA256, media.NoteDescription); ok {
		t.Fatal("an empty answer was kept")
	}
	if text, err := s.Describe(context.Background(), b, false); err != nil || text != "a dog" {
		t.Fatalf("retry = %q, %v", text, err)
	}
}

func TestDescribeConcurrentOneCall(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	model := &scripted{answer: func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		select {
		case <-release:
			return &agent.Response{Text: "a crowd"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	s := newService(t, media.Config{Vision: model})
	b := put(t, s.Cache(), pngOf("crowd"), "")
	const n = 8
	var wg sync.WaitGroup
	texts := make([]string, n)
	for i := range n {
		wg.Go(func() { texts[i], _ = s.Describe(context.Background(), b, false) })
	}
	waitFor(t, func() bool { return model.calls() == 1 })
	close(release)
	wg.Wait()
	for i, text := range texts {
		if text != "a crowd" {
			t.Errorf("caller %d got %q", i, text)
		}
	}
	if c := model.calls(); c != 1 {
		t.Errorf("%d model calls, want 1", c)
	}
}

func TestDescribeErrors(t *testing.T) {
	t.Parallel()
	s := newService(t, media.Config{})
	img := put(t, s.Cache(), pngOf("err"), "")
	if _, err := s.Describe(context.Background(), img, false); !errors.Is(err, media.ErrNoVision) || !media.Definitive(err) {
		t.Errorf("no vision: %v", err)
	}

	var kind agent.ErrorKind
	model := &scripted{answer: func(context.Context, agent.Request) (*agent.Response, error) {
		return nil, &agent.Error{Kind: kind, Message: "nope"}
	}}
	s = newService(t, media.Config{Vision: model})
	img = put(t, s.Cache(), pngOf("err"), "")
	for _, tc := range []struct {
		kind       agent.ErrorKind
		definitive bool
	}{
		{agent.KindAuth, true}, {agent.KindContentPolicy, true}, {agent.KindInvalidRequest, true},
		{agent.KindServer, false}, {agent.KindRateLimited, false}, {agent.KindTimeout, false},
	} {
		kind = tc.kind
		_, err := s.Describe(context.Background(), img, false)
		var me *agent.Error
		if !errors.As(err, &me) || media.Definitive(err) != tc.definitive {
			t.Errorf("%s: err = %v, definitive %v", tc.kind, err, media.Definitive(err))
		}
	}
	voice := put(t, s.Cache(), samples["ogg"], "")
	if _, err := s.Describe(context.Background(), voice, false); !errors.Is(err, media.ErrUnsupported) {
		t.Errorf("describing audio: %v", err)
	}
	if _, err := s.DataURL(voice); !errors.Is(err, media.ErrUnsupported) {
		t.Errorf("DataURL of audio: %v", err)
	}
	panicky := &scripted{answer: func(context.Context, agent.Request) (*agent.Response, error) { panic("boom") }}
	s = newService(t, media.Config{Vision: panicky})
	img = put(t, s.Cache(), pngOf("panic"), "")
	if _, err := s.Describe(context.Background(), img, false); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panicking model: %v", err)
	}
}

func TestTranscribe(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []agent.Audio
	tr := agent.TranscriberFunc(func(_ context.Context, a agent.Audio) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, a)
		if a.Name == "voice.wav" {
			return "  ", nil // silence
		}
		return fmt.Sprintf(" said in %s ", a.Name), nil
	})
	s := newService(t, media.Config{Transcriber: tr})
	for _, tc := range []struct{ sample, mime, name, text string }{
		{"mp3", "audio/mpeg", "voice.mp3", "said in voice.mp3"},
		{"ogg", "audio/ogg", "voice.ogg", "said in voice.ogg"},
		{"m4a", "audio/mp4", "voice.m4a", "said in voice.m4a"},
		{"wav", "audio/wav", "voice.wav", ""},
	} {
		b := put(t, s.Cache(), samples[tc.sample], "")
		for range 2 {
			text, err := s.Transcribe(context.Background(), b)
			if err != nil || text != tc.text {
				t.Errorf("%s: Transcribe = %q, %v; want %q", tc.sample, text, err, tc.text)
			}
		}
		mu.Lock()
		last := got[len(got)-1]
		mu.Unlock()
		if last.MIME != tc.mime || last.Name != tc.name || string(last.Data) != string(samples[tc.sample]) {
			t.Errorf("%s: audio = %s %s (%d bytes)", tc.sample, last.MIME, last.Name, len(last.Data))
		}
	}
	if len(got) != 4 {
		t.Errorf("%d transcriber calls, want 4 (one per clip, silence included)", len(got))
	}
	for _, sample := range []string{"silk", "silk-plain", "amr", "png"} {
		b := put(t, s.Cache(), samples[sample], "")
		if _, err := s.Transcribe(context.Background(), b); !errors.Is(err, media.ErrUnsupported) || !media.Definitive(err) {
			t.Errorf("%s: err = %v, want ErrUnsupported", sample, err)
		}
	}
	if len(got) != 4 {
		t.Errorf("the transcriber was called for refused clips")
	}

	none := newService(t, media.Config{})
	b := put(t, none.Cache(), samples["mp3"], "")
	if _, err := none.Transcribe(context.Background(), b); !errors.Is(err, media.ErrNoTranscriber) {
		t.Errorf("no transcriber: %v", err)
	}
	failing := newService(t, media.Config{Transcriber: agent.TranscriberFunc(func(context.Context, agent.Audio) (string, error) {
		return "", &agent.Error{Kind: agent.KindServer}
	})})
	b = put(t, failing.Cache(), samples["mp3"], "")
	if _, err := failing.Transcribe(context.Background(), b); err == nil || media.Definitive(err) {
		t.Errorf("server error: %v, want transient", err)
	}
	if _, ok := failing.Cache().Note(b.SHA256, media.NoteTranscript); ok {
		t.Error("a failed transcription was kept")
	}
}

func TestDefinitive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("connection reset"), false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("x: %w", context.Canceled), false},
		{&media.HTTPError{Status: 404}, true},
		{&media.HTTPError{Status: 408}, false},
		{&media.HTTPError{Status: 503}, false},
		{fmt.Errorf("x: %w", media.ErrTooLarge), true},
		{fmt.Errorf("x: %w", media.ErrNoSource), true},
		{fmt.Errorf("x: %w", media.ErrUnsupported), true},
		{fmt.Errorf("x: %w", media.ErrNoTranscriber), true},
		{&agent.Error{Kind: agent.KindUnknown}, false},
		{&agent.Error{Kind: agent.KindContextOverflow}, true},
		{fmt.Errorf("fetch: %w", &net.DNSError{Err: "no such host", Name: "cdn.invalid", IsNotFound: true}), true},
		{&net.DNSError{Err: "server misbehaving", Name: "cdn.example", IsTemporary: true}, false},
	} {
		if got := media.Definitive(tc.err); got != tc.want {
			t.Errorf("Definitive(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
