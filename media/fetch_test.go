package media_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/internal/netguard"
	"github.com/personakit/persona/media"
)

func TestFetchURL(t *testing.T) {
	t.Parallel()
	data := pngOf("served")
	srv := serveBytes(t, data, "application/octet-stream")
	s := newService(t, media.Config{})
	ctx := context.Background()

	b, err := s.Fetch(ctx, nil, group, imageSeg(srv.URL+"/a.png"))
	if err != nil {
		t.Fatal(err)
	}
	if b.MIME != "image/png" || b.Size != int64(len(data)) || b.SHA256 != shaOf(data) {
		t.Fatalf("Fetch = %+v", b)
	}
	again, err := s.Fetch(ctx, nil, group, imageSeg(srv.URL+"/a.png"))
	if err != nil || again != b {
		t.Fatalf("second Fetch = %+v, %v", again, err)
	}
	if h := srv.hits.Load(); h != 1 {
		t.Errorf("%d downloads, want 1", h)
	}
	// A segment whose Media names a cached blob needs no download.
	seg := channel.Image(channel.Media{URL: srv.URL + "/other.png", SHA256: b.SHA256})
	if got, err := s.Fetch(ctx, nil, group, seg); err != nil || got != b {
		t.Fatalf("Fetch by SHA256 = %+v, %v", got, err)
	}
	if h := srv.hits.Load(); h != 1 {
		t.Errorf("%d downloads after the SHA256 fetch, want 1", h)
	}
}

func TestFetchHTTPStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status     int
		definitive bool
	}{
		{http.StatusNotFound, true},
		{http.StatusForbidden, true},
		{http.StatusGone, true},
		{http.StatusRequestTimeout, false},
		{http.StatusTooManyRequests, false},
		{http.StatusInternalServerError, false},
		{http.StatusBadGateway, false},
	} {
		srv := serve(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tc.status) })
		s := newService(t, media.Config{})
		_, err := s.Fetch(context.Background(), nil, group, imageSeg(srv.URL))
		var he *media.HTTPError
		if !errors.As(err, &he) || he.Status != tc.status {
			t.Errorf("HTTP %d: err = %v", tc.status, err)
		}
		if media.Definitive(err) != tc.definitive {
			t.Errorf("HTTP %d: Definitive = %v, want %v", tc.status, !tc.definitive, tc.definitive)
		}
	}
}

func TestFetchTooLarge(t *testing.T) {
	t.Parallel()
	for _, declared := range []bool{false, true} {
		srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
			if declared {
				w.Header().Set("Content-Length", fmt.Sprint(1<<20))
			}
			n := 0
			chunk := bytes.Repeat([]byte{0x89}, 4096)
			for n < 1<<20 && r.Context().Err() == nil {
				m, err := w.Write(chunk)
				n += m
				if err != nil {
					break
				}
				w.(http.Flusher).Flush()
			}
		})
		s := newService(t, media.Config{MaxImageBytes: 10_000})
		_, err := s.Fetch(context.Background(), nil, group, imageSeg(srv.URL))
		if !errors.Is(err, media.ErrTooLarge) || !media.Definitive(err) {
			t.Errorf("declared length %v: err = %v, want ErrTooLarge", declared, err)
		}
		if n, _ := s.Cache().Usage(); n != 0 {
			t.Errorf("declared length %v: %d blobs stored", declared, n)
		}
	}
	// A size declared in the message is enough to refuse.
	srv := serveBytes(t, pngOf("small"), "image/png")
	s := newService(t, media.Config{MaxImageBytes: 10_000})
	_, err := s.Fetch(context.Background(), nil, group, channel.Image(channel.Media{URL: srv.URL, Size: 10_001}))
	if !errors.Is(err, media.ErrTooLarge) || srv.hits.Load() != 0 {
		t.Errorf("declared size over the cap: err = %v, %d downloads", err, srv.hits.Load())
	}
}

func TestFetchTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(pngOf("slow")[:4]) // headers and a little, then hang
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	s := newService(t, media.Config{Timeout: 200 * time.Millisecond})
	_, err := s.Fetch(context.Background(), nil, group, imageSeg(srv.URL))
	if err == nil || media.Definitive(err) {
		t.Fatalf("err = %v, want a transient timeout", err)
	}
	hang := serve(t, func(_ http.ResponseWriter, r *http.Request) { // no headers at all
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	_, err = s.Fetch(context.Background(), nil, group, imageSeg(hang.URL))
	if err == nil || media.Definitive(err) {
		t.Fatalf("err = %v, want a transient timeout", err)
	}
}

func TestFetchGuard(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/a.png"} {
		srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target, http.StatusFound)
		})
		s := newService(t, media.Config{})
		_, err := s.Fetch(context.Background(), nil, group, imageSeg(srv.URL))
		if !errors.Is(err, netguard.ErrBlocked) || !media.Definitive(err) {
			t.Errorf("redirect to %s: err = %v, want ErrBlocked", target, err)
		}
		if strings.Contains(fmt.Sprint(err), srv.URL) {
			t.Errorf("the error names the URL: %v", err)
		}
	}

	srv := serveBytes(t, pngOf("private"), "image/png")
	s := newService(t, media.Config{Allow: []netip.Prefix{}})
	_, err := s.Fetch(context.Background(), nil, group, imageSeg(srv.URL))
	if !errors.Is(err, netguard.ErrBlocked) || !media.Definitive(err) {
		t.Errorf("loopback without Allow: err = %v, want ErrBlocked", err)
	}
	// A caller's client is trusted to dial, but the URL is still checked.
	s = newService(t, media.Config{Allow: []netip.Prefix{}, HTTPClient: srv.Client()})
	_, err = s.Fetch(context.Background(), nil, group, imageSeg(srv.URL))
	if !errors.Is(err, netguard.ErrBlocked) {
		t.Errorf("loopback with a custom client: err = %v, want ErrBlocked", err)
	}
	if h := srv.hits.Load(); h != 0 {
		t.Errorf("%d requests reached a refused address", h)
	}
}

func TestFetchRefusesWhatIsNotMedia(t *testing.T) {
	t.Parallel()
	srv := serveBytes(t, samples["html"], "image/png")
	s := newService(t, media.Config{})
	for range 2 {
		_, err := s.Fetch(context.Background(), nil, group, imageSeg(srv.URL))
		if !errors.Is(err, media.ErrUnsupported) || !media.Definitive(err) {
			t.Fatalf("HTML as an image: err = %v, want ErrUnsupported", err)
		}
	}
	if h := srv.hits.Load(); h != 2 {
		t.Errorf("%d downloads, want 2 (a refused reference is not recorded)", h)
	}

	for _, seg := range []channel.Segment{
		imageSeg("file:///etc/passwd"),
		imageSeg("ftp://example.com/a.png"),
		imageSeg(""),
		channel.Text("no media"),
		{Type: channel.SegImage},
	} {
		_, err := s.Fetch(context.Background(), nil, group, seg)
		if !errors.Is(err, media.ErrNoSource) || !media.Definitive(err) {
			t.Errorf("%+v: err = %v, want ErrNoSource", seg, err)
		}
	}
}

func TestFetchTypes(t *testing.T) {
	t.Parallel()
	s := newService(t, media.Config{})
	for _, tc := range []struct {
		typ    channel.SegmentType
		sample string
		ok     bool
	}{
		{channel.SegImage, "png", true},
		{channel.SegImage, "webm", false},
		{channel.SegSticker, "webp", true},
		{channel.SegSticker, "webm", true},
		{channel.SegSticker, "tgs", true},
		{channel.SegSticker, "mp3", false},
		{channel.SegVoice, "ogg", true},
		{channel.SegVoice, "silk", true}, // fetched; Transcribe refuses it
		{channel.SegVoice, "m4a", true},
		{channel.SegVoice, "png", false},
		{channel.SegVideo, "mp4", true},
		{channel.SegVideo, "html", false},
		{channel.SegFile, "html", true},
	} {
		srv := serveBytes(t, samples[tc.sample], "")
		_, err := s.Fetch(context.Background(), nil, group, channel.Segment{Type: tc.typ, Media: &channel.Media{URL: srv.URL}})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, media.ErrUnsupported)) {
			t.Errorf("%s as %s: err = %v, want ok=%v", tc.sample, tc.typ, err, tc.ok)
		}
	}
}

func TestFetchChannelBody(t *testing.T) {
	t.Parallel()
	data := samples["mp3"]
	var bodies []*body
	var mu sync.Mutex
	ch := &fakeChan{name: "onebot"}
	ch.fetch = func(_ context.Context, chat channel.Chat, m channel.Media, req channel.MediaRequest) (channel.MediaContent, error) {
		if chat != group || m.FileID != "rec-1" || req.Type != channel.SegVoice || req.Format != "mp3" || req.MaxBytes != 1000 {
			return channel.MediaContent{}, fmt.Errorf("unexpected request %v %+v %+v", chat, m, req)
		}
		b := &body{Reader: bytes.NewReader(data)}
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		return channel.MediaContent{Body: b, MIME: "audio/amr"}, nil
	}
	s := newService(t, media.Config{MaxVoiceBytes: 1000})
	seg := channel.Segment{Type: channel.SegVoice, Media: &channel.Media{FileID: "rec-1", URL: "http://203.0.113.9/never"}}
	b, err := s.Fetch(context.Background(), ch, group, seg)
	if err != nil || b.MIME != "audio/mpeg" || b.SHA256 != shaOf(data) {
		t.Fatalf("Fetch = %+v, %v", b, err)
	}
	if _, err := s.Fetch(context.Background(), ch, group, seg); err != nil {
		t.Fatal(err)
	}
	if n := ch.calls.Load(); n != 1 {
		t.Errorf("FetchMedia called %d times, want 1", n)
	}
	// The reference is per platform and chat.
	other := channel.Chat{Kind: channel.Group, ID: "200"}
	if _, err := s.Fetch(context.Background(), ch, other, seg); err == nil {
		t.Error("the fake accepted another chat")
	}
	if n := ch.calls.Load(); n != 2 {
		t.Errorf("FetchMedia called %d times, want 2", n)
	}
	for i, b := range bodies {
		if !b.closed.Load() {
			t.Errorf("body %d was not closed", i)
		}
	}
}

func TestFetchChannelURL(t *testing.T) {
	t.Parallel()
	srv := serveBytes(t, jpegOf("cdn"), "image/jpeg")
	ch := &fakeChan{name: "telegram", fetch: func(context.Context, channel.Chat, channel.Media, channel.MediaRequest) (channel.MediaContent, error) {
		return channel.MediaContent{URL: srv.URL + "/file"}, nil
	}}
	s := newService(t, media.Config{})
	b, err := s.Fetch(context.Background(), ch, group, channel.Image(channel.Media{FileID: "AgAD"}))
	if err != nil || b.MIME != "image/jpeg" {
		t.Fatalf("Fetch = %+v, %v", b, err)
	}
	if h := srv.hits.Load(); h != 1 {
		t.Errorf("%d downloads, want 1", h)
	}
	// A URL handed back by a channel goes through the guard too.
	blocked := &fakeChan{name: "telegram", fetch: func(context.Context, channel.Chat, channel.Media, channel.MediaRequest) (channel.MediaContent, error) {
		return channel.MediaContent{URL: "http://169.254.169.254/"}, nil
	}}
	_, err = s.Fetch(context.Background(), blocked, group, channel.Image(channel.Media{FileID: "other"}))
	if !errors.Is(err, netguard.ErrBlocked) {
		t.Errorf("metadata URL from a channel: err = %v", err)
	}
}

func TestFetchChannelErrors(t *testing.T) {
	t.Parallel()
	s := newService(t, media.Config{MaxImageBytes: 100})
	for _, tc := range []struct {
		name       string
		content    channel.MediaContent
		err        error
		want       error
		definitive bool
	}{
		{"unavailable", channel.MediaContent{}, fmt.Errorf("retcode 1404: %w", channel.ErrMediaUnavailable), channel.ErrMediaUnavailable, true},
		{"too large", channel.MediaContent{}, channel.ErrMediaTooLarge, media.ErrTooLarge, true},
		{"declared too large", channel.MediaContent{Body: &body{Reader: strings.NewReader("x")}, Size: 101}, nil, media.ErrTooLarge, true},
		{"body too large", channel.MediaContent{Body: &body{Reader: bytes.NewReader(bytes.Repeat([]byte{1}, 500))}}, nil, media.ErrTooLarge, true},
		{"nothing", channel.MediaContent{}, nil, media.ErrNoSource, true},
		{"offline", channel.MediaContent{}, channel.ErrOffline, channel.ErrOffline, false},
	} {
		ch := &fakeChan{name: "onebot", fetch: func(context.Context, channel.Chat, channel.Media, channel.MediaRequest) (channel.MediaContent, error) {
			return tc.content, tc.err
		}}
		_, err := s.Fetch(context.Background(), ch, group, channel.Image(channel.Media{FileID: tc.name}))
		if !errors.Is(err, tc.want) || media.Definitive(err) != tc.definitive {
			t.Errorf("%s: err = %v (definitive %v), want %v (definitive %v)", tc.name, err, media.Definitive(err), tc.want, tc.definitive)
		}
		if b, ok := tc.content.Body.(*body); ok && !b.closed.Load() {
			t.Errorf("%s: body not closed", tc.name)
		}
	}
	if errors.Is(fmt.Errorf("x: %w", channel.ErrMediaTooLarge), media.ErrTooLarge) {
		t.Fatal("test assumption broken")
	}
}

func TestFetchChannelBodyHonoursTimeout(t *testing.T) {
	t.Parallel()
	stuck := &blockingBody{closed: make(chan struct{})}
	ch := &fakeChan{name: "onebot", fetch: func(context.Context, channel.Chat, channel.Media, channel.MediaRequest) (channel.MediaContent, error) {
		return channel.MediaContent{Body: stuck}, nil
	}}
	s := newService(t, media.Config{Timeout: 200 * time.Millisecond})
	_, err := s.Fetch(context.Background(), ch, group, channel.Image(channel.Media{FileID: "stuck"}))
	if err == nil || media.Definitive(err) {
		t.Fatalf("err = %v, want a transient timeout", err)
	}
}

// blockingBody blocks in Read until closed.
type blockingBody struct {
	closed chan struct{}
	once   sync.Once
}

func (b *blockingBody) Read([]byte) (int, error) {
	<-b.closed
	return 0, errors.New("read on closed body")
}

func (b *blockingBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

func TestFetchConcurrentOneDownload(t *testing.T) {
	t.Parallel()
	data := pngOf("popular")
	first := make(chan struct{})
	var once sync.Once
	srv := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { close(first) })
		time.Sleep(50 * time.Millisecond) // let the others pile up (not asserted)
		_, _ = w.Write(data)
	})
	s := newService(t, media.Config{})
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	blobs := make([]media.Blob, n)
	for i := range n {
		wg.Go(func() {
			if i > 0 {
				<-first
			}
			blobs[i], errs[i] = s.Fetch(context.Background(), nil, group, imageSeg(srv.URL))
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || blobs[i].SHA256 != shaOf(data) {
			t.Errorf("Fetch %d = %+v, %v", i, blobs[i], errs[i])
		}
	}
	if h := srv.hits.Load(); h != 1 {
		t.Errorf("%d downloads, want 1", h)
	}
}

func TestFetchWaiterStopsWithItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan struct{})
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = w.Write(pngOf("late"))
	})
	s := newService(t, media.Config{})
	leader := make(chan error, 1)
	go func() {
		_, err := s.Fetch(context.Background(), nil, group, imageSeg(srv.URL))
		leader <- err
	}()
	<-arrived
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Fetch(ctx, nil, group, imageSeg(srv.URL)); !errors.Is(err, context.Canceled) || media.Definitive(err) {
		t.Errorf("cancelled waiter: err = %v", err)
	}
	close(release)
	if err := <-leader; err != nil {
		t.Errorf("leader: %v", err)
	}
}
