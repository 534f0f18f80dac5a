package onebot

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/personakit/persona/channel"
)

// FetchMedia gets the content of a media reference from an event
// (channel.MediaFetcher). It makes at most one API call, on the caller's
// goroutine, with the usual call deadline:
//
//   - image and sticker: an http(s) URL is returned as it is (the caller
//     fetches it through its own address guard); otherwise get_image
//     {file: FileID}.
//   - voice: get_record {file: FileID, out_format: req.Format} (out_format
//     only when req.Format is set, so QQ's silk clips come back converted);
//     without a FileID, the URL.
//   - video and file: the URL when there is one; otherwise NapCat's
//     get_file {file_id, file}.
//
// The answer's base64 (NapCat) becomes Body; else its http(s) url becomes
// URL; else its file: "base64://…" becomes Body, and a local path (plain or
// "file://") is read only from inside Config.MediaRoot. A FileID that is
// itself "base64://…" or "file://…" (the bot's own echoed sends) is used
// without a call. A declared size (the segment's, or the answer's
// file_size or size) over req.MaxBytes is channel.ErrMediaTooLarge before
// anything is read.
//
// Errors wrapping channel.ErrMediaUnavailable are final: no reference, a
// local path without (or outside) MediaRoot, an answer without content,
// and failures with retcode 100 or 102 (file gone) or a definitive retcode
// (1400 bad parameters, 1404 action unsupported, 1401/1403). Timeouts, a
// lost connection, offline and other retcodes are plain errors that may
// be retried.
func (c *Channel) FetchMedia(ctx context.Context, _ channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	if tooLarge(m.Size, req.MaxBytes) {
		return channel.MediaContent{}, errTooLarge(m.Size, req.MaxBytes)
	}
	ref := m.FileID
	if strings.HasPrefix(ref, "base64://") || strings.HasPrefix(ref, "file://") {
		return c.mediaContent(mediaData{File: lenientString(ref)}, m, req)
	}
	viaURL := channel.MediaContent{URL: m.URL, MIME: m.MIME, Size: m.Size}
	var (
		action string
		params map[string]any
	)
	switch req.Type {
	case channel.SegImage, channel.SegSticker:
		if isRemote(m.URL) {
			return viaURL, nil
		}
		action, params = "get_image", map[string]any{"file": ref}
	case channel.SegVoice:
		if ref == "" && isRemote(m.URL) {
			return viaURL, nil
		}
		action, params = "get_record", map[string]any{"file": ref}
		if req.Format != "" {
			params["out_format"] = req.Format
		}
	case channel.SegVideo, channel.SegFile:
		if isRemote(m.URL) {
			return viaURL, nil
		}
		action, params = "get_file", map[string]any{"file_id": ref, "file": ref}
	default:
		return channel.MediaContent{}, unavailable("%q is not a media segment type", req.Type)
	}
	if ref == "" {
		return channel.MediaContent{}, unavailable("the %s reference has neither an http(s) URL nor a file id", req.Type)
	}
	data, err := c.call(ctx, action, params, c.cfg.CallTimeout)
	if err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) && mediaGone(apiErr.Retcode) {
			return channel.MediaContent{}, fmt.Errorf("onebot: %s %q: %w: %w", action, ref, channel.ErrMediaUnavailable, err)
		}
		return channel.MediaContent{}, fmt.Errorf("onebot: %s %q: %w", action, ref, err)
	}
	var d mediaData
	if len(bytes.TrimSpace(data)) > 0 && string(data) != "null" {
		if err := json.Unmarshal(data, &d); err != nil {
			return channel.MediaContent{}, fmt.Errorf("onebot: %s %q: %w: malformed answer: %w", action, ref, channel.ErrMediaUnavailable, err)
		}
	}
	return c.mediaContent(d, m, req)
}

// mediaData is the answer of get_image, get_record and get_file: the
// v11 file (a local path on the implementation's machine), go-cqhttp's
// url and size, NapCat's url, file_size and base64.
type mediaData struct {
	File     lenientString `json:"file"`
	URL      lenientString `json:"url"`
	Base64   lenientString `json:"base64"`
	Size     optInt        `json:"size"`
	FileSize optInt        `json:"file_size"`
}

// mediaGone reports whether a failed media call can never succeed: the
// generic failures go-cqhttp and NapCat answer for an unknown or expired
// file (100, 102) and the definitive retcodes.
func mediaGone(rc int64) bool {
	return rc == 100 || rc == 102 || definitiveRetcode(rc)
}

func unavailable(format string, a ...any) error {
	return fmt.Errorf("onebot: %w: %s", channel.ErrMediaUnavailable, fmt.Sprintf(format, a...))
}

func tooLarge(size, limit int64) bool { return limit > 0 && size > limit }

func errTooLarge(size, limit int64) error {
	return fmt.Errorf("onebot: %w: %d bytes, at most %d wanted", channel.ErrMediaTooLarge, size, limit)
}

// mediaContent turns an answer (or a FileID used directly) into content.
func (c *Channel) mediaContent(d mediaData, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
	size := m.Size
	switch {
	case d.FileSize.OK && d.FileSize.V > 0:
		size = d.FileSize.V
	case d.Size.OK && d.Size.V > 0:
		size = d.Size.V
	}
	if tooLarge(size, req.MaxBytes) {
		return channel.MediaContent{}, errTooLarge(size, req.MaxBytes)
	}
	file := string(d.File)
	switch {
	case d.Base64 != "":
		return decodeBase64(strings.TrimPrefix(string(d.Base64), "base64://"), m.MIME, req.MaxBytes)
	case isRemote(string(d.URL)):
		return channel.MediaContent{URL: string(d.URL), MIME: m.MIME, Size: size}, nil
	case strings.HasPrefix(file, "base64://"):
		return decodeBase64(strings.TrimPrefix(file, "base64://"), m.MIME, req.MaxBytes)
	case isRemote(file):
		return channel.MediaContent{URL: file, MIME: m.MIME, Size: size}, nil
	case file == "":
		return channel.MediaContent{}, unavailable("the implementation answered with no base64, url or file")
	}
	return c.readLocal(file, m.MIME, req.MaxBytes)
}

// decodeBase64 decodes inline content. The text is already in memory (it
// came in one frame), so it is decoded at once: a corrupt payload is a
// final error rather than a failure halfway through the caller's read.
func decodeBase64(s, mime string, limit int64) (channel.MediaContent, error) {
	s = strings.NewReplacer("\r", "", "\n", "").Replace(strings.TrimSpace(s))
	if n := int64(len(strings.TrimRight(s, "="))) * 6 / 8; tooLarge(n, limit) {
		return channel.MediaContent{}, errTooLarge(n, limit)
	}
	enc := base64.StdEncoding
	if !strings.HasSuffix(s, "=") && len(s)%4 != 0 {
		enc = base64.RawStdEncoding
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		return channel.MediaContent{}, unavailable("the base64 content is corrupt: %v", err)
	}
	return channel.MediaContent{Body: io.NopCloser(bytes.NewReader(b)), MIME: mime, Size: int64(len(b))}, nil
}

// readLocal opens a file the implementation named by its local path
// (plain or file://), only when its real path lies inside Config.MediaRoot.
// The file is opened through an os.Root, so a symlink swapped in after the
// check cannot lead outside either.
func (c *Channel) readLocal(path, mime string, limit int64) (channel.MediaContent, error) {
	if c.cfg.MediaRoot == "" {
		return channel.MediaContent{}, unavailable("the implementation returned a local path and Config.MediaRoot is not set")
	}
	if strings.HasPrefix(path, "file://") {
		u, err := url.Parse(path)
		if err != nil || (u.Host != "" && u.Host != "localhost") {
			return channel.MediaContent{}, unavailable("the implementation returned a file URL this machine cannot read")
		}
		path = filepath.FromSlash(u.Path)
	}
	if !filepath.IsAbs(path) {
		return channel.MediaContent{}, unavailable("the implementation returned a relative local path")
	}
	root, err := filepath.EvalSymlinks(c.cfg.MediaRoot)
	if err != nil {
		return channel.MediaContent{}, unavailable("Config.MediaRoot: %v", err)
	}
	resolved, err := filepath.EvalSymlinks(filepath.Clean(path))
	if err != nil {
		return channel.MediaContent{}, unavailable("the local file cannot be resolved: %v", err)
	}
	rel, err := filepath.Rel(root, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return channel.MediaContent{}, unavailable("the local path is outside Config.MediaRoot")
	}
	dir, err := os.OpenRoot(root)
	if err != nil {
		return channel.MediaContent{}, unavailable("Config.MediaRoot: %v", err)
	}
	defer func() { _ = dir.Close() }()
	f, err := dir.Open(rel)
	if err != nil {
		return channel.MediaContent{}, unavailable("the local file cannot be opened: %v", err)
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		_ = f.Close()
		return channel.MediaContent{}, unavailable("the local file cannot be read: %v", err)
	case !st.Mode().IsRegular():
		_ = f.Close()
		return channel.MediaContent{}, unavailable("the local path is not a regular file")
	case tooLarge(st.Size(), limit):
		_ = f.Close()
		return channel.MediaContent{}, errTooLarge(st.Size(), limit)
	}
	return channel.MediaContent{Body: f, MIME: mime, Size: st.Size()}, nil
}
