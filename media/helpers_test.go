package media_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/media"
)

// Samples: the leading bytes of each format, then a tag that makes
// samples of one format distinct.
func pngOf(tag string) []byte  { return append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), tag...) }
func jpegOf(tag string) []byte { return append([]byte("\xff\xd8\xff\xe0\x00\x10JFIF\x00"), tag...) }

var samples = map[string][]byte{
	"png":        pngOf("a"),
	"jpeg":       jpegOf("a"),
	"gif":        []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00"),
	"webp":       []byte("RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00\x00"),
	"bmp":        []byte("BM\x3a\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00"),
	"silk":       []byte("\x02#!SILK_V3\x0c\x00\xa7\x1c"),
	"silk-plain": []byte("#!SILK_V3\x0c\x00\xa7\x1c"),
	"amr":        []byte("#!AMR\n\x3c\x48\xf5"),
	"ogg":        []byte("OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00OpusHead"),
	"mp3":        []byte("ID3\x04\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x64"),
	"mp3-frame":  []byte("\xff\xfb\x90\x64\x00\x00\x00\x00\x00"),
	"wav":        []byte("RIFF\x24\x08\x00\x00WAVEfmt \x10\x00\x00\x00"),
	"mp4":        []byte("\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"),
	"m4a":        []byte("\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00M4A mp42isom"),
	"webm":       []byte("\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01B\x82\x84webm"),
	"tgs":        gzipped(`{"tgs":1,"v":"5.5.2","fr":60,"ip":0,"op":180,"w":512,"h":512,"layers":[]}`),
	"html":       []byte("<!DOCTYPE html><html><body>not a picture</body></html>"),
}

func gzipped(s string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return buf.Bytes()
}

func openCache(t testing.TB, cfg media.CacheConfig) *media.Cache {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	c, err := media.OpenCache(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func put(t testing.TB, c *media.Cache, data []byte, declared string) media.Blob {
	t.Helper()
	b, err := c.Put(context.Background(), bytes.NewReader(data), declared, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// newService returns a Service on a fresh cache; Allow defaults to
// loopback.
func newService(t testing.TB, cfg media.Config) *media.Service {
	t.Helper()
	if cfg.Cache == nil {
		cfg.Cache = openCache(t, media.CacheConfig{})
	}
	if cfg.Allow == nil {
		cfg.Allow = loopback
	}
	s, err := media.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// server serves body (with the header contentType) and counts requests.
type server struct {
	*httptest.Server
	hits atomic.Int32
}

func serve(t testing.TB, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func serveBytes(t testing.TB, body []byte, contentType string) *server {
	return serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(body)
	})
}

func imageSeg(url string) channel.Segment {
	return channel.Image(channel.Media{URL: url})
}

var group = channel.Chat{Kind: channel.Group, ID: "100"}

// fakeChan is a channel whose FetchMedia runs fetch.
type fakeChan struct {
	name  string
	fetch func(ctx context.Context, chat channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error)
	calls atomic.Int32
}

func (f *fakeChan) Name() string                                  { return f.name }
func (f *fakeChan) Run(ctx context.Context, _ channel.Sink) error { <-ctx.Done(); return nil }
func (f *fakeChan) Send(context.Context, channel.Outgoing) (channel.Receipt, error) {
	return channel.Receipt{}, nil
}

func (f *fakeChan) FetchMedia(ctx context.Context, chat channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	f.calls.Add(1)
	return f.fetch(ctx, chat, m, req)
}

// body is a media body that records being closed.
type body struct {
	io.Reader
	closed atomic.Bool
}

func (b *body) Close() error { b.closed.Store(true); return nil }

// scripted is an agent.Model that runs answer and records requests.
type scripted struct {
	answer func(ctx context.Context, req agent.Request) (*agent.Response, error)
	mu     sync.Mutex
	reqs   []agent.Request
}

func (m *scripted) Generate(ctx context.Context, req agent.Request) (*agent.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()
	return m.answer(ctx, req)
}

func (m *scripted) calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.reqs)
}

func reply(text string) func(context.Context, agent.Request) (*agent.Response, error) {
	return func(context.Context, agent.Request) (*agent.Response, error) {
		return &agent.Response{Text: text}, nil
	}
}
