package wecom

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"

	"github.com/personakit/persona/channel"
)

// mediaTimeoutFactor: a media download may take this many CallTimeouts.
const mediaTimeoutFactor = 6

// FetchMedia gets the content of a media reference of an event
// (channel.MediaFetcher).
//
// ModeApp: a MediaId (Media.FileID) is downloaded with /cgi-bin/media/get
// and the app's access token, and handed over as MediaContent.Body
// (MIME and Size from the answer's headers); WeCom keeps media for three
// days, after which (errcode 40007) the result is channel.ErrMediaUnavailable.
// A reference with only a URL (an image's PicUrl) is returned as
// MediaContent.URL for the caller to fetch through its guard.
//
// AI-bot modes: image and file links are encrypted and valid for five
// minutes. The link is downloaded through a public-address guard
// (Config.MediaAllow for tests), decrypted with the message's aeskey (long
// connection) or the bot's EncodingAESKey (callbacks), and handed over as
// MediaContent.Body. An expired link (403, 404, 410), a link whose key is
// gone (a restarted process) or content that does not decrypt is
// channel.ErrMediaUnavailable.
//
// Content over MediaRequest.MaxBytes is channel.ErrMediaTooLarge, refused
// from Content-Length before reading when the server declares it.
func (c *Channel) FetchMedia(ctx context.Context, chat channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	if c.cfg.Mode == ModeApp {
		if m.FileID != "" {
			return c.fetchAppMedia(ctx, m.FileID, req)
		}
		if isHTTPURL(m.URL) {
			return channel.MediaContent{URL: m.URL, MIME: m.MIME, Size: m.Size}, nil
		}
		return channel.MediaContent{}, fmt.Errorf("wecom: media without MediaId or URL: %w", channel.ErrMediaUnavailable)
	}
	if !isHTTPURL(m.URL) {
		return channel.MediaContent{}, fmt.Errorf("wecom: media without a link: %w", channel.ErrMediaUnavailable)
	}
	return c.fetchAIBotMedia(ctx, m.URL, req)
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// cancelBody cancels the download's context when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// fetchAppMedia downloads a MediaId with media/get.
func (c *Channel) fetchAppMedia(ctx context.Context, mediaID string, req channel.MediaRequest) (channel.MediaContent, error) {
	for attempt := 0; ; attempt++ {
		tok, err := c.tokens.get(ctx)
		if err != nil {
			return channel.MediaContent{}, err
		}
		mc, code, err := c.getAppMedia(ctx, tok, mediaID, req)
		if attempt == 0 && tokenRefreshed(code) {
			c.tokens.invalidate(tok)
			continue
		}
		return mc, err
	}
}

// getAppMedia makes one media/get call; code is the errcode of an error
// answer.
func (c *Channel) getAppMedia(ctx context.Context, tok, mediaID string, req channel.MediaRequest) (channel.MediaContent, int, error) {
	dctx, cancel := context.WithTimeout(ctx, mediaTimeoutFactor*c.cfg.CallTimeout)
	q := url.Values{"access_token": {tok}, "media_id": {mediaID}}
	hr, err := http.NewRequestWithContext(dctx, http.MethodGet, c.cfg.APIBase+"/cgi-bin/media/get?"+q.Encode(), nil)
	if err != nil {
		cancel()
		return channel.MediaContent{}, 0, fmt.Errorf("wecom: media/get: %w", c.redact(err))
	}
	resp, err := c.cfg.HTTPClient.Do(hr)
	if err != nil {
		cancel()
		return channel.MediaContent{}, 0, fmt.Errorf("wecom: media/get: %w", c.redact(err))
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || mt == "application/json" || mt == "text/plain" {
		defer cancel()
		defer func() { _ = resp.Body.Close() }()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var env apiEnvelope
		if json.Unmarshal(data, &env) == nil && env.ErrCode != nil && *env.ErrCode != 0 {
			ae := newAPIError("media/get", *env.ErrCode, env.ErrMsg, true)
			if ae.Code == codeInvalidMediaID {
				return channel.MediaContent{}, ae.Code, fmt.Errorf("%w: %w", channel.ErrMediaUnavailable, ae)
			}
			return channel.MediaContent{}, ae.Code, ae
		}
		return channel.MediaContent{}, 0, fmt.Errorf("wecom: media/get: HTTP %d (%s) without media", resp.StatusCode, mt)
	}
	if req.MaxBytes > 0 && resp.ContentLength > req.MaxBytes {
		_ = resp.Body.Close()
		cancel()
		return channel.MediaContent{}, 0, fmt.Errorf("wecom: media/get: %d bytes over the limit of %d: %w", resp.ContentLength, req.MaxBytes, channel.ErrMediaTooLarge)
	}
	size := max(resp.ContentLength, 0)
	return channel.MediaContent{Body: cancelBody{ReadCloser: resp.Body, cancel: cancel}, MIME: mt, Size: size}, 0, nil
}

// fetchAIBotMedia downloads and decrypts an AI-bot media link.
func (c *Channel) fetchAIBotMedia(ctx context.Context, link string, req channel.MediaRequest) (channel.MediaContent, error) {
	key, ok := c.keys.get(link, c.clk.Now())
	if !ok {
		if c.cfg.Mode != ModeAIBot {
			return channel.MediaContent{}, fmt.Errorf("wecom: no key for this media link (it came before a restart, or expired): %w", channel.ErrMediaUnavailable)
		}
		key = c.cfg.EncodingAESKey
	}
	limit := req.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxMediaBytes
	}
	dctx, cancel := context.WithTimeout(ctx, mediaTimeoutFactor*c.cfg.CallTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(dctx, http.MethodGet, link, nil)
	if err != nil {
		return channel.MediaContent{}, fmt.Errorf("wecom: media link: %w", c.redact(err))
	}
	resp, err := c.media.Do(hr)
	if err != nil {
		return channel.MediaContent{}, fmt.Errorf("wecom: media download: %w", c.redact(err))
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return channel.MediaContent{}, fmt.Errorf("wecom: media download: HTTP %d (the link expires after 5 minutes): %w", resp.StatusCode, channel.ErrMediaUnavailable)
	case resp.StatusCode != http.StatusOK:
		return channel.MediaContent{}, fmt.Errorf("wecom: media download: HTTP %d", resp.StatusCode)
	case resp.ContentLength > limit+padBlock:
		return channel.MediaContent{}, fmt.Errorf("wecom: media download: %d bytes over the limit of %d: %w", resp.ContentLength, limit, channel.ErrMediaTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+padBlock+1))
	if err != nil {
		return channel.MediaContent{}, fmt.Errorf("wecom: media download: %w", c.redact(err))
	}
	if int64(len(data)) > limit+padBlock {
		return channel.MediaContent{}, fmt.Errorf("wecom: media download: over the limit of %d bytes: %w", limit, channel.ErrMediaTooLarge)
	}
	plain, err := DecryptMedia(data, key)
	if err != nil {
		return channel.MediaContent{}, fmt.Errorf("wecom: media does not decrypt (%w): %w", err, channel.ErrMediaUnavailable)
	}
	if int64(len(plain)) > limit {
		return channel.MediaContent{}, fmt.Errorf("wecom: media of %d bytes over the limit of %d: %w", len(plain), limit, channel.ErrMediaTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return channel.MediaContent{}, err
	}
	return channel.MediaContent{Body: io.NopCloser(bytes.NewReader(plain)), Size: int64(len(plain))}, nil
}
