package openai_test

import (
	"context"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/openai"
)

// upload is one multipart request the fake transcription endpoint saw.
type upload struct {
	path, auth  string
	fields      map[string]string
	filename    string
	contentType string
	data        []byte
}

// fakeSTT is an in-process /audio/transcriptions endpoint: it parses the
// multipart form, records it and answers with r.
func fakeSTT(t *testing.T, r reply) (*httptest.Server, func() []upload) {
	t.Helper()
	var mu sync.Mutex
	var got []upload
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u := upload{path: req.URL.Path, auth: req.Header.Get("Authorization"), fields: map[string]string{}}
		mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
		if mt == "multipart/form-data" && req.ParseMultipartForm(1<<20) == nil {
			for k, v := range req.MultipartForm.Value {
				u.fields[k] = v[0]
			}
			if fhs := req.MultipartForm.File["file"]; len(fhs) == 1 {
				u.filename, u.contentType = fhs[0].Filename, fhs[0].Header.Get("Content-Type")
				if f, err := fhs[0].Open(); err == nil {
					u.data, _ = io.ReadAll(f)
					_ = f.Close()
				}
			}
		}
		mu.Lock()
		got = append(got, u)
		mu.Unlock()
		if r.block {
			<-req.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		for k, v := range r.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(max(r.status, http.StatusOK))
		_, _ = io.WriteString(w, r.body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []upload {
		mu.Lock()
		defer mu.Unlock()
		return append([]upload(nil), got...)
	}
}

func newTranscriber(t *testing.T, srv *httptest.Server, mutate ...func(*openai.TranscriberConfig)) *openai.Transcriber {
	t.Helper()
	cfg := openai.TranscriberConfig{BaseURL: srv.URL + "/v1", APIKey: "sk-test", HTTPClient: srv.Client()}
	for _, fn := range mutate {
		fn(&cfg)
	}
	tr, err := openai.NewTranscriber(cfg)
	require.NoError(t, err)
	return tr
}

var voiceClip = agent.Audio{Data: []byte("ID3\x04fake mp3 bytes"), MIME: "audio/mpeg", Name: "voice.mp3"}

func TestTranscribe(t *testing.T) {
	t.Parallel()
	srv, uploads := fakeSTT(t, reply{body: `{"text":"  hello from the voice note \n"}`})
	tr := newTranscriber(t, srv, func(c *openai.TranscriberConfig) { c.Language = "en"; c.Prompt = "Mika, Persona" })

	var _ agent.Transcriber = tr
	text, err := tr.Transcribe(t.Context(), voiceClip)
	require.NoError(t, err)
	require.Equal(t, "hello from the voice note", text)

	got := uploads()
	require.Len(t, got, 1)
	require.Equal(t, upload{
		path: "/v1/audio/transcriptions", auth: "Bearer sk-test",
		fields:   map[string]string{"model": openai.DefaultTranscriptionModel, "language": "en", "prompt": "Mika, Persona"},
		filename: "voice.mp3", contentType: "audio/mpeg", data: voiceClip.Data,
	}, got[0])
}

func TestTranscribeFileNaming(t *testing.T) {
	t.Parallel()
	tests := []struct {
		audio        agent.Audio
		wantFilename string
		wantType     string
	}{
		{agent.Audio{Data: []byte("OggS"), MIME: "audio/ogg", Name: "clip.ogg"}, "clip.ogg", "audio/ogg"},
		{agent.Audio{Data: []byte("OggS"), MIME: "audio/ogg; codecs=opus"}, "audio.ogg", "audio/ogg; codecs=opus"},
		{agent.Audio{Data: []byte("RIFF"), MIME: "audio/wav"}, "audio.wav", "audio/wav"},
		{agent.Audio{Data: []byte("????"), MIME: "audio/x-m4a"}, "audio.m4a", "audio/x-m4a"},
		{agent.Audio{Data: []byte("????")}, "audio", "application/octet-stream"},
	}
	for _, tt := range tests {
		t.Run(tt.wantFilename+" "+tt.audio.MIME, func(t *testing.T) {
			t.Parallel()
			srv, uploads := fakeSTT(t, reply{body: `{"text":"ok"}`})
			tr := newTranscriber(t, srv, func(c *openai.TranscriberConfig) { c.Model = "gpt-4o-mini-transcribe"; c.APIKey = "" })
			_, err := tr.Transcribe(t.Context(), tt.audio)
			require.NoError(t, err)
			got := uploads()[0]
			require.Equal(t, tt.wantFilename, got.filename)
			require.Equal(t, tt.wantType, got.contentType)
			require.Equal(t, tt.audio.Data, got.data)
			require.Equal(t, map[string]string{"model": "gpt-4o-mini-transcribe"}, got.fields, "no language or prompt unless configured")
			require.Empty(t, got.auth, "no key, no Authorization header (the environment is not consulted)")
		})
	}
}

func TestTranscribeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		reply         reply
		wantKind      agent.ErrorKind
		wantStatus    int
		wantMessage   string
		wantRetry     time.Duration
		wantTransient bool
	}{
		{"500", reply{status: 500, body: `{"error":{"message":"The server had an error","type":"server_error"}}`},
			agent.KindServer, 500, "server had an error", 0, true},
		{"503 html", reply{status: 503, header: map[string]string{"Content-Type": "text/html"}, body: "<html>unavailable</html>"},
			agent.KindServer, 503, "unavailable", 0, true},
		{"429", reply{status: 429, header: map[string]string{"Retry-After": "4"}, body: `{"error":{"message":"Rate limit reached"}}`},
			agent.KindRateLimited, 429, "Rate limit", 4 * time.Second, true},
		{"400 unsupported format", reply{status: 400, body: `{"error":{"message":"Invalid file format. Supported formats: ['flac', 'm4a', 'mp3']","type":"invalid_request_error","param":"file","code":null}}`},
			agent.KindInvalidRequest, 400, "Invalid file format", 0, false},
		{"401", reply{status: 401, body: `{"error":{"message":"Incorrect API key provided"}}`},
			agent.KindAuth, 401, "Incorrect API key", 0, false},
		{"404 unknown model", reply{status: 404, body: `{"error":{"message":"The model 'nope' does not exist","code":"model_not_found"}}`},
			agent.KindInvalidRequest, 404, "does not exist", 0, false},
		{"200 garbage", reply{body: `{"text": [not json`},
			agent.KindServer, 200, "malformed response", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, uploads := fakeSTT(t, tt.reply)
			text, err := newTranscriber(t, srv).Transcribe(t.Context(), voiceClip)
			require.Empty(t, text)
			var me *agent.Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, tt.wantKind, me.Kind, "error: %v", err)
			require.Equal(t, tt.wantStatus, me.Status)
			require.Contains(t, me.Message, tt.wantMessage)
			require.Equal(t, tt.wantRetry, me.RetryAfter)
			require.Equal(t, tt.wantTransient, agent.Transient(err))
			require.Len(t, uploads(), 1, "the SDK must not retry")
		})
	}
}

func TestTranscribeTimeout(t *testing.T) {
	t.Parallel()
	srv, _ := fakeSTT(t, reply{block: true})
	const short = 50 * time.Millisecond
	tests := []struct {
		name     string
		cfg      time.Duration // TranscriberConfig.Timeout
		deadline time.Duration // on the caller's context; 0 = none
	}{
		{"config timeout", short, 0},
		{"caller deadline", 0, short},
	}
	for _, tt := range tests {
		tr := newTranscriber(t, srv, func(c *openai.TranscriberConfig) { c.Timeout = tt.cfg })
		ctx, cancel := t.Context(), context.CancelFunc(func() {})
		if tt.deadline > 0 {
			ctx, cancel = context.WithTimeout(t.Context(), tt.deadline)
		}
		_, err := tr.Transcribe(ctx, voiceClip)
		cancel()
		var me *agent.Error
		require.ErrorAs(t, err, &me, tt.name)
		require.Equal(t, agent.KindTimeout, me.Kind, "%s: %v", tt.name, err)
		require.True(t, agent.Transient(err), tt.name)
	}
}

func TestTranscribeRefusesBadInput(t *testing.T) {
	t.Parallel()
	srv, uploads := fakeSTT(t, reply{body: `{"text":"x"}`})
	tr := newTranscriber(t, srv)

	_, err := tr.Transcribe(t.Context(), agent.Audio{MIME: "audio/ogg"})
	var me *agent.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, agent.KindInvalidRequest, me.Kind)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = tr.Transcribe(ctx, voiceClip)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, uploads())

	for _, cfg := range []openai.TranscriberConfig{{BaseURL: "ftp://x"}, {BaseURL: "http://"}, {Timeout: -time.Second}} {
		_, err := openai.NewTranscriber(cfg)
		require.Error(t, err, "%+v", cfg)
	}
	tr, err = openai.NewTranscriber(openai.TranscriberConfig{})
	require.NoError(t, err, "every field has a default")
	require.NotNil(t, tr)
}

func TestVisionParts(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, reply{body: okBody})
	require.False(t, agent.AcceptsImages(api.model(t)), "text-only unless Config.Vision")
	m := api.model(t, func(c *openai.Config) { c.Vision = true })
	require.True(t, m.AcceptsImages())
	require.True(t, agent.AcceptsImages(m))

	req := agent.Request{Purpose: agent.PurposeVision, Messages: []agent.Message{
		{Role: agent.RoleUser, Content: "what is on this sticker?", Parts: []agent.Part{{ImageURL: "data:image/webp;base64,UklGRg==", Detail: "low"}}},
		{Role: agent.RoleUser, Parts: []agent.Part{{ImageURL: "https://example.com/a.jpg"}, {ImageURL: "https://example.com/b.jpg", Detail: "auto"}}},
	}}
	_, err := m.Generate(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, []any{
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "what is on this sticker?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/webp;base64,UklGRg==", "detail": "low"}},
		}},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/a.jpg"}},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/b.jpg", "detail": "auto"}},
		}},
	}, api.last(t).body["messages"])
}
