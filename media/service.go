package media

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/internal/netguard"
)

const (
	defaultTimeout       = 30 * time.Second
	defaultMaxImageBytes = 10 << 20
	defaultMaxVoiceBytes = 20 << 20
	defaultVoiceFormat   = "mp3"
)

// Config configures a Service. Cache is required; every other zero field
// means its default.
type Config struct {
	// Cache holds the downloads, the refs and the derived texts.
	Cache *Cache
	// Allow lets these private prefixes through the address guard of URL
	// fetches (tests: 127.0.0.1/32). Leave it empty in production.
	Allow []netip.Prefix
	// HTTPClient fetches URLs (nil = a client of the address guard, which
	// checks every dialled address and redirect). A client set here is
	// vouched for by the caller; each URL is still checked by a guard built
	// from Allow before it is fetched.
	HTTPClient *http.Client
	// Timeout bounds one fetch, redirects and reading included (0 = 30 s).
	Timeout time.Duration
	// MaxImageBytes caps images and stickers (0 = 10 MiB).
	MaxImageBytes int64
	// MaxVoiceBytes caps voice clips (0 = 20 MiB). Videos and files are
	// capped by the cache's MaxFileBytes.
	MaxVoiceBytes int64
	// VoiceFormat is asked of channels that can convert voice clips
	// ("" = "mp3").
	VoiceFormat string
	// Vision writes descriptions (nil = Describe returns ErrNoVision). The
	// pipeline passes a model wrapped by its privacy boundary.
	Vision agent.Model
	// DescribePrompt is the system prompt for pictures
	// ("" = DefaultDescribePrompt).
	DescribePrompt string
	// StickerPrompt is the system prompt for stickers
	// ("" = DefaultStickerPrompt).
	StickerPrompt string
	// Transcriber turns voice into text (nil = Transcribe returns
	// ErrNoTranscriber).
	Transcriber agent.Transcriber
	// Clock times fetches for the logs (nil = the wall clock).
	Clock clock.Clock
	// Logger receives debug logs of fetches (nil = slog.Default()).
	Logger *slog.Logger
}

// Service fetches, caches, describes and transcribes the media of chat
// messages. It is safe for concurrent use.
type Service struct {
	cache       *Cache
	guard       *netguard.Guard
	client      *http.Client
	timeout     time.Duration
	maxImage    int64
	maxVoice    int64
	voiceFormat string
	vision      agent.Model
	prompt      string
	sticker     string
	transcriber agent.Transcriber
	clock       clock.Clock
	log         *slog.Logger

	fetches singleflight.Group // by ref key
	derives singleflight.Group // by note name and blob
}

// New returns a Service for cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Cache == nil {
		return nil, errors.New("media: Config.Cache is required")
	}
	s := &Service{
		cache:       cfg.Cache,
		client:      cfg.HTTPClient,
		timeout:     cmp.Or(cfg.Timeout, defaultTimeout),
		maxImage:    cmp.Or(cfg.MaxImageBytes, defaultMaxImageBytes),
		maxVoice:    cmp.Or(cfg.MaxVoiceBytes, defaultMaxVoiceBytes),
		voiceFormat: cmp.Or(cfg.VoiceFormat, defaultVoiceFormat),
		vision:      cfg.Vision,
		prompt:      cmp.Or(cfg.DescribePrompt, DefaultDescribePrompt),
		sticker:     cmp.Or(cfg.StickerPrompt, DefaultStickerPrompt),
		transcriber: cfg.Transcriber,
		clock:       clock.OrReal(cfg.Clock),
		log:         cmp.Or(cfg.Logger, slog.Default()),
	}
	s.guard = netguard.New(netguard.Config{Allow: cfg.Allow, Timeout: s.timeout})
	if s.client == nil {
		s.client = s.guard.Client()
	}
	return s, nil
}

// Cache returns the Service's cache.
func (s *Service) Cache() *Cache { return s.cache }

// maxBytes is the cap for media of type t.
func (s *Service) maxBytes(t channel.SegmentType) int64 {
	switch t {
	case channel.SegImage, channel.SegSticker:
		return s.cache.limit(s.maxImage)
	case channel.SegVoice:
		return s.cache.limit(s.maxVoice)
	}
	return s.cache.limit(0)
}

// Fetch returns the cached content of a media segment (image, sticker,
// voice, video or file), downloading it the first time.
//
// A channel with channel.MediaFetcher (found through wrappers) is asked
// for the content: a body it returns is read into the cache, a URL it
// returns is fetched through the address guard. Without one (ch may be
// nil) the reference's own http(s) URL is fetched through the guard. The
// reference is remembered per platform, chat and file id (or URL), so the
// next Fetch does not download again; concurrent Fetches of one reference
// share one download, bounded by Config.Timeout. A reference whose
// declared size (channel.Media.Size) is over the cap is refused at once.
//
// The content must fit its kind: images image/*; stickers image/*,
// video/webm or application/x-tgsticker; voice audio/* or video/mp4, webm
// or ogg; videos video/*; files anything. Otherwise Fetch returns
// ErrUnsupported (the bytes stay cached; the reference is not recorded).
func (s *Service) Fetch(ctx context.Context, ch channel.Channel, chat channel.Chat, seg channel.Segment) (Blob, error) {
	m := seg.Media
	if m == nil || !seg.Type.IsMedia() {
		return Blob{}, fmt.Errorf("%w: a %q segment carries no media", ErrNoSource, seg.Type)
	}
	if m.SHA256 != "" {
		if b, ok := s.cache.Stat(m.SHA256); ok {
			return checked(seg.Type, b)
		}
	}
	var fetcher channel.MediaFetcher
	platform, id := "url", m.URL
	if ch != nil {
		if f, ok := channel.As[channel.MediaFetcher](ch); ok {
			fetcher, platform, id = f, ch.Name(), cmp.Or(m.FileID, m.URL)
		}
	}
	if id == "" {
		return Blob{}, fmt.Errorf("%w (%s)", ErrNoSource, seg.Type)
	}
	key := platform + "\x00" + chat.String() + "\x00" + id
	if b, ok := s.cache.Ref(key); ok {
		return checked(seg.Type, b)
	}
	if limit := s.maxBytes(seg.Type); m.Size > limit {
		return Blob{}, fmt.Errorf("%w of %d bytes: the message says %d", ErrTooLarge, limit, m.Size)
	}
	return share(ctx, &s.fetches, key, func() (Blob, error) {
		if b, ok := s.cache.Ref(key); ok {
			return checked(seg.Type, b)
		}
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		start := s.clock.Now()
		b, err := s.download(ctx, fetcher, chat, seg.Type, *m)
		if err != nil {
			s.log.Debug("media: fetch failed", "platform", platform, "type", seg.Type, "err", err)
			return Blob{}, err
		}
		if err := accepts(seg.Type, b); err != nil {
			return Blob{}, err
		}
		if err := s.cache.SetRef(key, b.SHA256); err != nil {
			s.log.Warn("media: cannot record a media reference", "err", err)
		}
		s.log.Debug("media: fetched", "platform", platform, "type", seg.Type, "mime", b.MIME,
			"bytes", b.Size, "took", s.clock.Now().Sub(start))
		return b, nil
	})
}

// download gets the content of m into the cache.
func (s *Service) download(ctx context.Context, f channel.MediaFetcher, chat channel.Chat, t channel.SegmentType, m channel.Media) (Blob, error) {
	limit := s.maxBytes(t)
	if f == nil {
		return s.get(ctx, m.URL, m.MIME, limit)
	}
	req := channel.MediaRequest{Type: t, MaxBytes: limit}
	if t == channel.SegVoice {
		req.Format = s.voiceFormat
	}
	mc, err := f.FetchMedia(ctx, chat, m, req)
	if err != nil {
		if mc.Body != nil {
			_ = mc.Body.Close()
		}
		if errors.Is(err, channel.ErrMediaTooLarge) {
			return Blob{}, fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return Blob{}, fmt.Errorf("media: fetch: %w", err)
	}
	declared := cmp.Or(mc.MIME, m.MIME)
	switch {
	case mc.Body != nil:
		body := closeOnce(mc.Body)
		stop := context.AfterFunc(ctx, func() { _ = body.Close() }) // unblock a stuck Read
		defer func() {
			stop()
			_ = body.Close()
		}()
		if mc.Size > limit {
			return Blob{}, fmt.Errorf("%w of %d bytes: the platform says %d", ErrTooLarge, limit, mc.Size)
		}
		b, err := s.cache.Put(ctx, body, declared, limit)
		if err != nil && ctx.Err() != nil && !errors.Is(err, ErrTooLarge) {
			return Blob{}, fmt.Errorf("media: fetch: %w", ctx.Err())
		}
		return b, err
	case mc.URL != "":
		return s.get(ctx, mc.URL, declared, limit)
	}
	return Blob{}, fmt.Errorf("%w: the channel returned neither a body nor a URL", ErrNoSource)
}

// get downloads an http(s) URL through the guard into the cache.
func (s *Service) get(ctx context.Context, raw, declared string, limit int64) (Blob, error) {
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return Blob{}, fmt.Errorf("%w: not an http(s) URL", ErrNoSource)
	}
	u, err := s.guard.CheckURL(ctx, raw)
	if err != nil {
		return Blob{}, fmt.Errorf("media: download: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Blob{}, fmt.Errorf("%w: %w", ErrNoSource, err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// Drop the *url.Error: its text holds the URL, which may carry a
		// token (CDN signatures, bot file links).
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return Blob{}, fmt.Errorf("media: download: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Blob{}, &HTTPError{Status: resp.StatusCode}
	}
	if resp.ContentLength > limit {
		return Blob{}, fmt.Errorf("%w of %d bytes: the server says %d", ErrTooLarge, limit, resp.ContentLength)
	}
	if ct := baseType(resp.Header.Get("Content-Type")); ct != "" && ct != "application/octet-stream" {
		declared = ct
	}
	return s.cache.Put(ctx, resp.Body, declared, limit)
}

// checked returns b when its type fits the segment, else the error.
func checked(t channel.SegmentType, b Blob) (Blob, error) {
	if err := accepts(t, b); err != nil {
		return Blob{}, err
	}
	return b, nil
}

// accepts checks that a blob's type fits the segment it came from.
func accepts(t channel.SegmentType, b Blob) error {
	top, _, _ := strings.Cut(b.MIME, "/")
	ok := false
	switch t {
	case channel.SegImage:
		ok = top == "image"
	case channel.SegSticker:
		ok = top == "image" || b.MIME == "video/webm" || b.MIME == "application/x-tgsticker"
	case channel.SegVoice:
		ok = top == "audio" || b.MIME == "video/mp4" || b.MIME == "video/webm" || b.MIME == "video/ogg"
	case channel.SegVideo:
		ok = top == "video"
	default:
		ok = true
	}
	if !ok {
		return fmt.Errorf("%w: %s is not a %s", ErrUnsupported, b.MIME, t)
	}
	return nil
}

// DataURL returns "data:<mime>;base64,<content>" of a cached image blob,
// for a model's image part. A blob that is not image/* is ErrUnsupported.
func (s *Service) DataURL(b Blob) (string, error) {
	data, b, err := s.cache.ReadAll(b.SHA256)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(b.MIME, "image/") {
		return "", fmt.Errorf("%w: %s is not an image", ErrUnsupported, b.MIME)
	}
	prefix := "data:" + b.MIME + ";base64,"
	var sb strings.Builder
	sb.Grow(len(prefix) + base64.StdEncoding.EncodedLen(len(data)))
	sb.WriteString(prefix)
	enc := base64.NewEncoder(base64.StdEncoding, &sb)
	_, _ = enc.Write(data) // a strings.Builder does not fail
	_ = enc.Close()
	return sb.String(), nil
}

// share runs fn once for concurrent callers with the same key. Each caller
// waits at most until its own ctx ends; fn runs with the first caller's
// context. A panic in fn becomes an error, since it runs on a goroutine no
// caller could recover.
func share[T any](ctx context.Context, g *singleflight.Group, key string, fn func() (T, error)) (T, error) {
	ch := g.DoChan(key, func() (v any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("media: panic: %v", p)
			}
		}()
		return fn()
	})
	var zero T
	select {
	case r := <-ch:
		if r.Err != nil {
			return zero, r.Err
		}
		return r.Val.(T), nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// closeOnce makes Close of a body idempotent, so that the context's
// AfterFunc and the deferred close cannot both reach it.
func closeOnce(rc io.ReadCloser) io.ReadCloser {
	return &onceCloser{ReadCloser: rc}
}

type onceCloser struct {
	io.ReadCloser
	once sync.Once
	err  error
}

func (o *onceCloser) Close() error {
	o.once.Do(func() { o.err = o.ReadCloser.Close() })
	return o.err
}
