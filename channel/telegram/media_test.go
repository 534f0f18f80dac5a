package telegram_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
)

const secretToken = "424242:TOPSECRET_media-token"

// fetch calls FetchMedia and reads the whole body.
func fetch(t *testing.T, ch *telegram.Channel, m channel.Media, req channel.MediaRequest) (channel.MediaContent, []byte, error) {
	t.Helper()
	mc, err := ch.FetchMedia(t.Context(), channel.Chat{Kind: channel.Private, ID: "4242"}, m, req)
	if err != nil {
		require.Nil(t, mc.Body)
		return mc, nil, err
	}
	require.NotNil(t, mc.Body)
	require.Empty(t, mc.URL, "a file URL contains the token: the adapter streams the body")
	defer func() { require.NoError(t, mc.Body.Close()) }()
	data, err := io.ReadAll(mc.Body)
	require.NoError(t, err)
	return mc, data, nil
}

// TestMediaEndToEnd pushes a photo with a caption, a sticker and a voice
// note through the fake, checks their normalisation and fetches their
// content by the file ids in the events.
func TestMediaEndToEnd(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{})
	ch := newChannel(t, srv, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)

	photo, sticker, voice := []byte("\xff\xd8\xffJPEG photo"), []byte("RIFF....WEBPVP8 "), []byte("OggS voice note")
	srv.AddFile("photo-big", photo)
	srv.AddFile("sticker-1", sticker)
	srv.AddFile("voice-1", voice)
	pushes := []telegramtest.Incoming{
		{Chat: group, From: alice, Caption: "my cat", MentionBot: true, Photo: []telegramtest.PhotoSize{
			{FileID: "photo-small", FileUniqueID: "ps", Width: 90, Height: 68, FileSize: 1200},
			{FileID: "photo-big", FileUniqueID: "pb", Width: 1280, Height: 960, FileSize: int64(len(photo))},
		}},
		{Chat: group, From: alice, Sticker: &telegramtest.Sticker{FileID: "sticker-1", FileUniqueID: "s1", Width: 512, Height: 512, Emoji: "😸", FileSize: int64(len(sticker))}},
		{Chat: group, From: alice, Voice: &telegramtest.File{FileID: "voice-1", FileUniqueID: "v1", Duration: 7, MimeType: "audio/ogg", FileSize: int64(len(voice))}},
	}
	for _, in := range pushes {
		_, err := srv.Push(t.Context(), in)
		require.NoError(t, err)
	}
	evs := sink.waitEvents(t, 3)

	require.Equal(t, []channel.Segment{
		{Type: channel.SegImage, Media: &channel.Media{FileID: "photo-big", MIME: "image/jpeg", Size: int64(len(photo))}},
		{Type: channel.SegMention, UserID: srv.BotID(), Text: "@" + telegramtest.DefaultBotUsername},
		channel.Text(" my cat"),
	}, evs[0].Segments)
	require.True(t, evs[0].ToMe, "a mention in the caption addresses the bot")
	require.Equal(t, []channel.Segment{{Type: channel.SegSticker, Media: &channel.Media{FileID: "sticker-1", MIME: "image/webp", Size: int64(len(sticker)), Name: "😸"}}}, evs[1].Segments)
	require.Equal(t, []channel.Segment{{Type: channel.SegVoice, Media: &channel.Media{FileID: "voice-1", MIME: "audio/ogg", Size: int64(len(voice)), Duration: 7}}}, evs[2].Segments)

	for i, want := range [][]byte{photo, sticker, voice} {
		m := *evs[i].Segments[0].Media
		mc, data, err := fetch(t, ch, m, channel.MediaRequest{Type: evs[i].Segments[0].Type, MaxBytes: 1 << 20})
		require.NoError(t, err)
		require.Equal(t, want, data)
		require.Equal(t, m.MIME, mc.MIME)
		require.Equal(t, int64(len(want)), mc.Size)
	}
	require.Len(t, srv.Downloads(), 3)
}

func TestFetchMediaErrors(t *testing.T) {
	t.Parallel()
	srv := newFake(t, telegramtest.Config{Token: secretToken})
	ch := newChannel(t, srv, nil)
	srv.AddFile("doc", []byte("0123456789"))
	noToken := func(t *testing.T, err error) {
		t.Helper()
		require.NotContains(t, err.Error(), "TOPSECRET")
		require.NotContains(t, err.Error(), secretToken)
	}

	t.Run("over MaxBytes by getFile's size: no download", func(t *testing.T) {
		_, _, err := fetch(t, ch, channel.Media{FileID: "doc"}, channel.MediaRequest{MaxBytes: 9})
		require.ErrorIs(t, err, channel.ErrMediaTooLarge)
		require.NotErrorIs(t, err, channel.ErrMediaUnavailable)
		require.Equal(t, 1, srv.CallCount("getFile"))
		require.Empty(t, srv.Downloads())
	})
	t.Run("over MaxBytes by the declared size: no call", func(t *testing.T) {
		_, _, err := fetch(t, ch, channel.Media{FileID: "doc", Size: 10}, channel.MediaRequest{MaxBytes: 5})
		require.ErrorIs(t, err, channel.ErrMediaTooLarge)
		require.Equal(t, 1, srv.CallCount("getFile"))
		require.Empty(t, srv.Downloads())
	})
	t.Run("exactly MaxBytes", func(t *testing.T) {
		_, data, err := fetch(t, ch, channel.Media{FileID: "doc", Size: 10}, channel.MediaRequest{MaxBytes: 10})
		require.NoError(t, err)
		require.Equal(t, "0123456789", string(data))
	})
	t.Run("unknown file id", func(t *testing.T) {
		_, _, err := fetch(t, ch, channel.Media{FileID: "nope"}, channel.MediaRequest{})
		require.ErrorIs(t, err, channel.ErrMediaUnavailable)
		require.NotErrorIs(t, err, channel.ErrMediaTooLarge)
		require.Contains(t, err.Error(), "invalid file_id")
		noToken(t, err)
	})
	t.Run("no file id", func(t *testing.T) {
		_, _, err := fetch(t, ch, channel.Media{URL: "https://example.com/x.png"}, channel.MediaRequest{})
		require.ErrorIs(t, err, channel.ErrMediaUnavailable)
	})
	t.Run("getFile 400 for a file above 20 MB", func(t *testing.T) {
		srv.FailNext("getFile", telegramtest.Failure{Code: 400, Description: "Bad Request: file is too big"})
		_, _, err := fetch(t, ch, channel.Media{FileID: "doc", Size: telegram.MaxDownloadBytes + 1}, channel.MediaRequest{})
		require.ErrorIs(t, err, channel.ErrMediaTooLarge)
		require.ErrorIs(t, err, channel.ErrMediaUnavailable, "the bot can never download it")
	})
	t.Run("getFile 429", func(t *testing.T) {
		srv.FailNext("getFile", telegramtest.Failure{Code: 429, RetryAfter: 3})
		_, _, err := fetch(t, ch, channel.Media{FileID: "doc"}, channel.MediaRequest{})
		var rl *channel.RateLimitedError
		require.ErrorAs(t, err, &rl)
		require.Equal(t, 3*time.Second, rl.RetryAfter)
		require.NotErrorIs(t, err, channel.ErrMediaUnavailable)
	})
	t.Run("getFile 5xx is transient", func(t *testing.T) {
		srv.FailNext("getFile", telegramtest.Failure{Code: 502})
		_, _, err := fetch(t, ch, channel.Media{FileID: "doc"}, channel.MediaRequest{})
		require.Error(t, err)
		require.NotErrorIs(t, err, channel.ErrMediaUnavailable)
		require.Equal(t, channel.ClassTransient, channel.Classify(err))
	})
	t.Run("download 404", func(t *testing.T) {
		srv.FailNextDownload(telegramtest.Failure{Code: 404, Description: "Not Found"})
		_, _, err := fetch(t, ch, channel.Media{FileID: "doc"}, channel.MediaRequest{})
		require.ErrorIs(t, err, channel.ErrMediaUnavailable)
		noToken(t, err)
	})
	t.Run("download 5xx", func(t *testing.T) {
		srv.FailNextDownload(telegramtest.Failure{Code: 503})
		_, _, err := fetch(t, ch, channel.Media{FileID: "doc"}, channel.MediaRequest{})
		require.Error(t, err)
		require.NotErrorIs(t, err, channel.ErrMediaUnavailable)
		noToken(t, err)
	})
	t.Run("download connection dropped: token absent", func(t *testing.T) {
		// Twice: net/http retries a GET once when a reused connection
		// closed without an answer.
		srv.FailNextDownload(telegramtest.Failure{Drop: true})
		srv.FailNextDownload(telegramtest.Failure{Drop: true})
		_, _, err := fetch(t, ch, channel.Media{FileID: "doc"}, channel.MediaRequest{})
		require.Error(t, err)
		require.NotErrorIs(t, err, channel.ErrMediaUnavailable)
		noToken(t, err)
		require.Contains(t, err.Error(), "<redacted>")
	})
}

// failPaths fails every request under prefix with a transport error
// naming the URL (net/http wraps it in a *url.Error naming the URL too):
// the token must be cut out of both.
type failPaths struct {
	prefix string
	next   http.RoundTripper
}

func (f failPaths) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.Path, f.prefix) {
		return nil, fmt.Errorf("dial failed for %s: %w", r.URL, context.DeadlineExceeded)
	}
	return f.next.RoundTrip(r)
}

func TestFetchMediaTokenNotInTransportErrors(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"/file/", "/bot"} {
		srv := newFake(t, telegramtest.Config{Token: secretToken})
		ch := newChannel(t, srv, func(c *telegram.Config) {
			c.HTTPClient = &http.Client{Transport: failPaths{prefix, http.DefaultTransport}}
		})
		srv.AddFile("doc", []byte("x"))
		_, err := ch.FetchMedia(t.Context(), channel.Chat{Kind: channel.Private, ID: "1"}, channel.Media{FileID: "doc"}, channel.MediaRequest{})
		require.Error(t, err)
		require.NotContains(t, err.Error(), "TOPSECRET", prefix)
		require.Contains(t, err.Error(), "<redacted>", prefix)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the redacted error still matches its cause")
	}
}

// slowFiles is a Bot API whose getFile always succeeds and whose file
// server sends the first bytes, then stalls until the client goes away;
// with stall set it stalls before the headers.
func slowFiles(t *testing.T, stall bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/getFile") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true,"result":{"file_id":"f","file_unique_id":"u","file_size":1000,"file_path":"videos/file_1.mp4"}}`)
			return
		}
		if !stall {
			w.Header().Set("Content-Length", "1000")
			_, _ = io.WriteString(w, "first part")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestFetchMediaCancel(t *testing.T) {
	t.Parallel()
	api := slowFiles(t, false)
	ch, err := telegram.New(telegram.Config{Token: secretToken, APIBase: api.URL})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	mc, err := ch.FetchMedia(ctx, channel.Chat{Kind: channel.Private, ID: "1"}, channel.Media{FileID: "f", MIME: "video/mp4"}, channel.MediaRequest{})
	require.NoError(t, err)
	defer func() { _ = mc.Body.Close() }()
	require.Equal(t, int64(1000), mc.Size)
	require.Equal(t, "video/mp4", mc.MIME)
	buf := make([]byte, 10)
	_, err = io.ReadFull(mc.Body, buf)
	require.NoError(t, err)
	require.Equal(t, "first part", string(buf))

	cancel()
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(mc.Body); done <- err }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
		require.NotContains(t, err.Error(), "TOPSECRET")
	case <-time.After(waitTimeout):
		t.Fatal("canceling the context did not abort the download")
	}
}

func TestFetchMediaStalledDownloadTimesOut(t *testing.T) {
	t.Parallel()
	api := slowFiles(t, true)
	ch, err := telegram.New(telegram.Config{Token: secretToken, APIBase: api.URL, CallTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	_, err = ch.FetchMedia(t.Context(), channel.Chat{Kind: channel.Private, ID: "1"}, channel.Media{FileID: "f"}, channel.MediaRequest{})
	require.ErrorContains(t, err, "no answer within")
	require.NotErrorIs(t, err, channel.ErrMediaUnavailable)
	require.NoError(t, t.Context().Err())
}
