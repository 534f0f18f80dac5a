package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/go-rod/rod/lib/proto"

	"github.com/personakit/persona/internal/netguard"
)

// RenderOptions adjusts one Render call.
type RenderOptions struct {
	// Settle bounds the wait for the page to become quiet (0: the
	// configured Settle); it is capped at Config.MaxSettle.
	Settle time.Duration
	// Screenshot asks for a picture of the viewport.
	Screenshot bool
}

// Page is what one render saw.
type Page struct {
	// URL is the URL asked for.
	URL string
	// FinalURL is where the page ended up after redirects.
	FinalURL string
	// Title is the document title.
	Title string
	// Text is the visible text, cut to Config.MaxText runes with a marker.
	Text string
	// Settled is false when the settle bound ended the wait and the page
	// is the last snapshot taken before it.
	Settled bool
	// Screenshot is the viewport as PNG or JPEG (see ScreenshotType),
	// when asked for and not too big.
	Screenshot []byte
	// ScreenshotType is "image/png" or "image/jpeg".
	ScreenshotType string
	// Note says what happened to a screenshot that was asked for but
	// changed or dropped ("" when none).
	Note string
}

// Render loads rawURL in a fresh incognito context of the warm Chromium,
// waits for it to settle (bounded by the settle time and ctx) and returns
// its visible text and, when asked, a screenshot. It waits up to
// QueueWait for one of the Slots; the render's own timeout starts once it
// has one. If Chromium died, it is started again and the render retried
// once.
func (b *Browser) Render(ctx context.Context, rawURL string, opt RenderOptions) (*Page, error) {
	u, err := b.check(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	release, err := b.slots.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	settle := b.cfg.Settle
	if opt.Settle > 0 {
		settle = opt.Settle
	}
	settle = min(settle, b.cfg.MaxSettle)
	for attempt := 0; ; attempt++ {
		in, err := b.acquire()
		if err != nil {
			return nil, err
		}
		page, err := b.renderOn(ctx, in, u, settle, opt.Screenshot)
		b.release(in)
		if err == nil {
			page.URL = rawURL
			return page, nil
		}
		if attempt == 0 && ctx.Err() == nil && !b.isClosed() && b.died(in, err) {
			b.log.Warn("browser: chromium died during a render; retrying once", "pid", in.pid)
			b.retire(in)
			continue
		}
		return nil, err
	}
}

func (b *Browser) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// check validates a URL the model or caller gave before anything loads
// it.
func (b *Browser) check(ctx context.Context, rawURL string) (*url.URL, error) {
	if rawURL == "" {
		return nil, errors.New("browser: empty URL")
	}
	u, err := b.cfg.Guard.CheckURL(ctx, rawURL)
	if err != nil {
		if errors.Is(err, netguard.ErrBlocked) {
			return nil, &RefusedError{URL: rawURL, Err: err}
		}
		return nil, fmt.Errorf("browser: %s: %w", rawURL, err)
	}
	return u, nil
}

// died reports whether err came from Chromium going away under the call.
func (b *Browser) died(in *instance, err error) bool {
	if !in.alive() {
		return true
	}
	if !connectionLost(err) {
		return false
	}
	// The connection broke; the process follows shortly, or is hung.
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-in.ctx.Done():
	case <-t.C:
	}
	return true
}

func (b *Browser) renderOn(ctx context.Context, in *instance, u *url.URL, settle time.Duration, shot bool) (*Page, error) {
	rctx, cancel := context.WithTimeout(ctx, settle+renderOverhead)
	defer cancel()
	stop := context.AfterFunc(in.ctx, cancel)
	defer stop()
	if !in.alive() {
		return nil, errors.New("browser: chromium is not running")
	}

	s, err := b.openSurface(rctx, rctx, in)
	if err != nil {
		return nil, b.wrapDead(in, err)
	}
	defer s.close()
	n := b.renderPages.Add(1)
	defer b.renderPages.Add(-1)
	for {
		m := b.maxRenderPages.Load()
		if n <= m || b.maxRenderPages.CompareAndSwap(m, n) {
			break
		}
	}

	sctx, scancel := context.WithTimeout(rctx, settle)
	snap, settled, err := s.navigate(sctx, u.String())
	scancel()
	if err != nil {
		return nil, b.wrapDead(in, err)
	}
	if !in.alive() {
		return nil, errors.New("browser: chromium exited during the render")
	}
	// A settled page with neither text nor title (a picture, a canvas)
	// is still a page; anything else that shows nothing is a failure.
	blankOK := settled && snap.URL != "" && snap.URL != "about:blank" && !isErrorPage(snap.URL)
	if !snap.usable() && !blankOK {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("browser: %s showed nothing within %s", u, settle)
	}
	page := &Page{
		FinalURL: snap.URL,
		Title:    snap.Title,
		Text:     cutText(snap.Text, b.cfg.MaxText, snap.Cut),
		Settled:  settled,
	}
	if shot {
		img, typ, note, err := b.screenshot(rctx, s)
		if err != nil {
			if !in.alive() {
				return nil, b.wrapDead(in, err)
			}
			page.Note = "screenshot failed: " + err.Error()
		} else {
			page.Screenshot, page.ScreenshotType, page.Note = img, typ, note
		}
	}
	return page, nil
}

// wrapDead turns an error caused by Chromium dying into a clear one.
func (b *Browser) wrapDead(in *instance, err error) error {
	if !in.alive() && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("browser: chromium exited: %w", err)
	}
	return err
}

// cutMarker ends a text that was cut.
const cutMarker = "\n[… page text cut at %d characters]"

// cutText cuts text to max runes, adding the marker when anything was
// left out (also when the page itself returned a cut text).
func cutText(text string, max int, cut bool) string {
	if utf8.RuneCountInString(text) > max {
		i, n := 0, 0
		for i = range text {
			if n == max {
				break
			}
			n++
		}
		text, cut = text[:i], true
	}
	if cut {
		text += fmt.Sprintf(cutMarker, max)
	}
	return text
}

// screenshot takes the viewport as PNG; when that is bigger than
// MaxScreenshot it takes JPEGs of falling quality, and gives up with a
// note when even the smallest is too big.
func (b *Browser) screenshot(ctx context.Context, s *surface) (img []byte, typ, note string, err error) {
	p := s.at(ctx)
	png, err := proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng}.Call(p)
	if err != nil {
		return nil, "", "", err
	}
	if len(png.Data) <= b.cfg.MaxScreenshot {
		return png.Data, "image/png", "", nil
	}
	for _, q := range []int{80, 60, 40, 20} {
		jpg, err := proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatJpeg, Quality: &q}.Call(p)
		if err != nil {
			return nil, "", "", err
		}
		if len(jpg.Data) <= b.cfg.MaxScreenshot {
			return jpg.Data, "image/jpeg", fmt.Sprintf("screenshot taken as JPEG (quality %d) to stay under %d bytes", q, b.cfg.MaxScreenshot), nil
		}
	}
	return nil, "", fmt.Sprintf("screenshot dropped: bigger than %d bytes even as JPEG", b.cfg.MaxScreenshot), nil
}
