package telegram

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/personakit/persona/channel"
)

// MaxDownloadBytes is the Bot API's limit on files a bot can download
// (20 MB). A getFile refused with 400 for media whose declared size is
// above it is reported as channel.ErrMediaTooLarge. A self-hosted Bot API
// server may allow more, so FetchMedia does not refuse larger files
// before asking.
const MaxDownloadBytes = 20 << 20

// FetchMedia gets the content of a media segment by its file_id (chat is
// not needed: file ids are valid across chats). It calls getFile (with the
// CallTimeout deadline) and streams the file from
// <APIBase>/file/bot<token>/<file_path> in MediaContent.Body; waiting for
// the download to start is bounded by CallTimeout too, and ctx governs
// the whole download. MIME is m.MIME, Size the size getFile reported (or
// Content-Length, or m.Size). Telegram cannot convert voice clips, so
// req.Format is ignored.
//
// Errors never contain the token:
//
//   - channel.ErrMediaTooLarge when m.Size or getFile's file_size exceeds
//     req.MaxBytes > 0 (nothing is downloaded);
//   - channel.ErrMediaUnavailable when getFile answers 400 (an invalid or
//     expired file_id, or a file too big for the Bot API, which also
//     matches channel.ErrMediaTooLarge when m.Size is above
//     MaxDownloadBytes), when m has no file_id, or when the download
//     answers 404 or 410;
//   - a *channel.RateLimitedError for 429; channel.ErrOffline while Run
//     reports the channel offline; any other failure (5xx, network,
//     timeout) is a plain transient error.
func (c *Channel) FetchMedia(ctx context.Context, _ channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	if err := ctx.Err(); err != nil {
		return channel.MediaContent{}, err
	}
	if m.FileID == "" {
		return channel.MediaContent{}, fmt.Errorf("telegram: fetch media: no file_id: %w", channel.ErrMediaUnavailable)
	}
	if c.offline.Load() {
		return channel.MediaContent{}, fmt.Errorf("telegram: fetch media: %w", channel.ErrOffline)
	}
	if tooLarge(m.Size, req.MaxBytes) {
		return channel.MediaContent{}, fmt.Errorf("telegram: fetch media: %d bytes, at most %d wanted: %w", m.Size, req.MaxBytes, channel.ErrMediaTooLarge)
	}
	var f tgFileInfo
	if err := c.call(ctx, "getFile", map[string]string{"file_id": m.FileID}, c.cfg.CallTimeout, &f); err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Code == http.StatusBadRequest {
			if m.Size > MaxDownloadBytes {
				return channel.MediaContent{}, fmt.Errorf("telegram: fetch media: %w: %w: %w", channel.ErrMediaTooLarge, channel.ErrMediaUnavailable, err)
			}
			return channel.MediaContent{}, fmt.Errorf("telegram: fetch media: %w: %w", channel.ErrMediaUnavailable, err)
		}
		return channel.MediaContent{}, err
	}
	size := f.FileSize
	if size <= 0 {
		size = m.Size
	}
	if tooLarge(size, req.MaxBytes) {
		return channel.MediaContent{}, fmt.Errorf("telegram: fetch media: %d bytes, at most %d wanted: %w", size, req.MaxBytes, channel.ErrMediaTooLarge)
	}
	rel, ok := filePath(f.FilePath)
	if !ok {
		return channel.MediaContent{}, fmt.Errorf("telegram: fetch media: getFile gave no usable file_path: %w", channel.ErrMediaUnavailable)
	}
	body, n, err := c.download(ctx, rel)
	if err != nil {
		return channel.MediaContent{}, err
	}
	if size <= 0 {
		size = n
	}
	if tooLarge(size, req.MaxBytes) {
		_ = body.Close()
		return channel.MediaContent{}, fmt.Errorf("telegram: fetch media: %d bytes, at most %d wanted: %w", size, req.MaxBytes, channel.ErrMediaTooLarge)
	}
	return channel.MediaContent{Body: body, MIME: m.MIME, Size: max(size, 0)}, nil
}

func tooLarge(size, limit int64) bool { return limit > 0 && size > limit }

// filePath escapes a getFile file_path for the download URL; it refuses
// paths that are empty, absolute or climb out of the file directory.
func filePath(p string) (string, bool) {
	if p == "" || strings.HasPrefix(p, "/") {
		return "", false
	}
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if s == "" || s == "." || s == ".." {
			return "", false
		}
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/"), true
}

// download starts the GET of a file. The wait for the response headers is
// bounded by CallTimeout; after that only ctx (and Close) end it. It
// returns the body and Content-Length (-1 when unknown).
func (c *Channel) download(ctx context.Context, rel string) (io.ReadCloser, int64, error) {
	dctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(c.cfg.CallTimeout, cancel)
	req, err := http.NewRequestWithContext(dctx, http.MethodGet, c.apiBase+"/file/bot"+c.token+"/"+rel, nil)
	if err != nil {
		timer.Stop()
		cancel()
		return nil, 0, fmt.Errorf("telegram: download: %w", c.redact(err))
	}
	resp, err := c.http.Do(req)
	fired := !timer.Stop()
	if err != nil {
		cancel()
		if fired && ctx.Err() == nil {
			return nil, 0, fmt.Errorf("telegram: download: no answer within %s", c.cfg.CallTimeout)
		}
		return nil, 0, fmt.Errorf("telegram: download: %w", c.redact(err))
	}
	if resp.StatusCode/100 != 2 || fired {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		cancel()
		switch code := resp.StatusCode; {
		case fired:
			return nil, 0, fmt.Errorf("telegram: download: no answer within %s", c.cfg.CallTimeout)
		case code == http.StatusNotFound || code == http.StatusGone:
			return nil, 0, fmt.Errorf("telegram: download: HTTP %d: %w", code, channel.ErrMediaUnavailable)
		case code == http.StatusTooManyRequests:
			return nil, 0, fmt.Errorf("telegram: download: %w", &channel.RateLimitedError{RetryAfter: retryAfterHeader(resp.Header)})
		default:
			return nil, 0, fmt.Errorf("telegram: download: HTTP %d", code)
		}
	}
	return &mediaBody{ReadCloser: resp.Body, cancel: cancel, c: c}, resp.ContentLength, nil
}

// retryAfterHeader reads a Retry-After in seconds (default 1 s).
func retryAfterHeader(h http.Header) time.Duration {
	var secs int
	if _, err := fmt.Sscan(h.Get("Retry-After"), &secs); err == nil && secs > 0 {
		return time.Duration(min(secs, 3600)) * time.Second
	}
	return time.Second
}

// mediaBody is a download's body: read errors have the token redacted and
// Close releases the request's context.
type mediaBody struct {
	io.ReadCloser
	cancel context.CancelFunc
	c      *Channel
}

func (b *mediaBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("telegram: download: %w", b.c.redact(err))
	}
	return n, err
}

func (b *mediaBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
