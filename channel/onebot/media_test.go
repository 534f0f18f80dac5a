package onebot_test

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/onebot"
	"github.com/personakit/persona/channel/onebot/onebottest"
	"github.com/personakit/persona/clock"
)

// TestMediaSegments: media segments convert to the normalised model;
// stickers (sub_type 1, go-cqhttp's subType 1, mface) become SegSticker.
func TestMediaSegments(t *testing.T) {
	t.Parallel()
	media := func(typ channel.SegmentType, m channel.Media) channel.Segment {
		return channel.Segment{Type: typ, Media: &m}
	}
	mface := onebot.Message{}
	require.NoError(t, json.Unmarshal([]byte(`[{"type":"mface","data":{"emoji_id":"7dd2fd3c","emoji_package_id":235125,
		"key":"a1b2","summary":"[开心]","url":"https://gxh.vip.qq.com/club/item/parcel/item/7d/7dd2fd3c/raw300.gif"}}]`), &mface))
	for _, tc := range []struct {
		name string
		in   onebot.Message
		want channel.Segment
	}{
		{"Image", onebot.Message{seg("image", "file", "A1B2.jpg", "url", "https://multimedia.nt.qq.com.cn/x", "file_size", "1234", "sub_type", "0", "summary", "[图片]")},
			media(channel.SegImage, channel.Media{URL: "https://multimedia.nt.qq.com.cn/x", FileID: "A1B2.jpg", Name: "A1B2.jpg", Size: 1234})},
		{"ImageRemoteFile", onebot.Message{seg("image", "file", "https://img.example/a.png")},
			media(channel.SegImage, channel.Media{URL: "https://img.example/a.png"})},
		{"ImageBase64", onebot.Message{seg("image", "file", "base64://aGk=")},
			media(channel.SegImage, channel.Media{FileID: "base64://aGk="})},
		{"FlashImage", onebot.Message{seg("image", "file", "f.jpg", "type", "flash")},
			media(channel.SegImage, channel.Media{FileID: "f.jpg", Name: "f.jpg"})},
		{"StickerSubType", onebot.Message{seg("image", "file", "S.gif", "url", "https://s.example/s.gif", "sub_type", "1", "summary", "[动画表情]")},
			media(channel.SegSticker, channel.Media{URL: "https://s.example/s.gif", FileID: "S.gif", Name: "S.gif"})},
		{"StickerGoCQHTTP", onebot.Message{seg("image", "file", "S.image", "subType", "1")},
			media(channel.SegSticker, channel.Media{FileID: "S.image", Name: "S.image"})},
		{"StickerCQString", onebot.ParseCQ("[CQ:image,file=S.gif,sub_type=1,url=https://s.example/s.gif?a=1&amp;b=2]"),
			media(channel.SegSticker, channel.Media{URL: "https://s.example/s.gif?a=1&b=2", FileID: "S.gif", Name: "S.gif"})},
		{"MarketFace", mface,
			media(channel.SegSticker, channel.Media{URL: "https://gxh.vip.qq.com/club/item/parcel/item/7d/7dd2fd3c/raw300.gif", Name: "[开心]"})},
		{"Record", onebot.Message{seg("record", "file", "v.amr", "file_size", "900")},
			media(channel.SegVoice, channel.Media{FileID: "v.amr", Name: "v.amr", Size: 900})},
		{"Video", onebot.Message{seg("video", "file", "m.mp4", "url", "https://v.example/m.mp4")},
			media(channel.SegVideo, channel.Media{URL: "https://v.example/m.mp4", FileID: "m.mp4", Name: "m.mp4"})},
		{"FileNapCat", onebot.Message{seg("file", "file", "report.pdf", "file_id", "/f-123", "file_size", "2048")},
			media(channel.SegFile, channel.Media{FileID: "/f-123", Name: "report.pdf", Size: 2048})},
		{"FileName", onebot.Message{seg("file", "file_id", "/f-9", "file_name", "a.txt", "size", "7")},
			media(channel.SegFile, channel.Media{FileID: "/f-9", Name: "a.txt", Size: 7})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := onebot.ToSegments(tc.in, "10001000")
			require.Equal(t, []channel.Segment{tc.want}, got)
			require.True(t, got[0].Type.IsMedia())
		})
	}
}

// mediaRig runs an adapter against the fake over forward WebSocket.
func mediaRig(t *testing.T, cfg onebot.Config) (rig, *sink) {
	t.Helper()
	r := forwardRig(t, onebottest.Config{}, cfg)
	return r, r.run(t)
}

// emit posts a group message and returns the event the sink got.
func emit(t *testing.T, r rig, s *sink, m ...onebot.Segment) channel.Event {
	t.Helper()
	rec, err := r.fake.EmitMessage(tctx(t), onebottest.Incoming{GroupID: 100200300, UserID: 4242, Message: m})
	require.NoError(t, err)
	return s.waitMessage(t, itoa(int64(rec.ID)))
}

// fetch fetches the media of an event's first segment.
func fetch(t *testing.T, r rig, ev channel.Event, req channel.MediaRequest) (channel.MediaContent, error) {
	t.Helper()
	require.NotEmpty(t, ev.Segments)
	require.NotNil(t, ev.Segments[0].Media)
	if req.Type == "" {
		req.Type = ev.Segments[0].Type
	}
	return r.ch.FetchMedia(tctx(t), ev.Chat, *ev.Segments[0].Media, req)
}

// body reads and closes a content's Body.
func body(t *testing.T, mc channel.MediaContent) []byte {
	t.Helper()
	require.NotNil(t, mc.Body, "content has a body")
	require.Empty(t, mc.URL)
	defer func() { require.NoError(t, mc.Body.Close()) }()
	b, err := io.ReadAll(mc.Body)
	require.NoError(t, err)
	return b
}

// mediaCalls counts the fake's calls of the media actions.
func mediaCalls(r rig) int {
	n := 0
	for _, c := range r.fake.Calls() {
		switch c.Action {
		case "get_image", "get_record", "get_file":
			n++
		}
	}
	return n
}

// TestFetchMediaBase64: over every transport, an image known only by its
// file is fetched with get_image and NapCat's base64 comes back as Body;
// an image with an http(s) url comes back as URL without a call.
func TestFetchMediaBase64(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			r := tr.build(t, onebottest.Config{}, onebot.Config{})
			s := r.run(t)
			png := []byte("\x89PNG\r\n\x1a\n fake image bytes")
			r.fake.AddMedia("B1.image", onebottest.MediaFile{Bytes: png, Base64: true})

			ev := emit(t, r, s, seg("image", "file", "B1.image"))
			mc, err := fetch(t, r, ev, channel.MediaRequest{MaxBytes: 1 << 20})
			require.NoError(t, err)
			require.Equal(t, int64(len(png)), mc.Size)
			require.Empty(t, mc.MIME, "OneBot declares no MIME type")
			require.Equal(t, png, body(t, mc))
			call, err := r.fake.WaitCall(tctx(t), "get_image")
			require.NoError(t, err)
			require.Equal(t, "B1.image", call.Params["file"])

			ev = emit(t, r, s, seg("image", "file", "U1.image", "url", "https://cdn.example/u1.png"))
			mc, err = fetch(t, r, ev, channel.MediaRequest{})
			require.NoError(t, err)
			require.Equal(t, channel.MediaContent{URL: "https://cdn.example/u1.png"}, mc)
			require.Equal(t, 1, mediaCalls(r), "a URL is handed back without a call")
		})
	}
}

// TestFetchMediaKinds: voice goes through get_record with out_format;
// files through get_file; answers with an url give URL; a FileID that is
// inline base64 needs no call; quoted media is fetchable like any other.
func TestFetchMediaKinds(t *testing.T) {
	t.Parallel()
	r, s := mediaRig(t, onebot.Config{})
	ctx := tctx(t)
	silk, mp3 := []byte("#!SILK_V3 clip"), []byte("ID3 converted clip")
	r.fake.AddMedia("v.amr", onebottest.MediaFile{Bytes: silk, Formats: map[string][]byte{"mp3": mp3}})

	t.Run("VoiceConverted", func(t *testing.T) {
		ev := emit(t, r, s, seg("record", "file", "v.amr"))
		require.Equal(t, channel.SegVoice, ev.Segments[0].Type)
		mc, err := fetch(t, r, ev, channel.MediaRequest{Format: "mp3"})
		require.NoError(t, err)
		require.Equal(t, mp3, body(t, mc))
		call, err := r.fake.WaitCall(ctx, "get_record")
		require.NoError(t, err)
		require.Equal(t, map[string]any{"file": "v.amr", "out_format": "mp3"}, call.Params)

		// No format: the clip as stored, and no out_format.
		mc, err = fetch(t, r, ev, channel.MediaRequest{})
		require.NoError(t, err)
		require.Equal(t, silk, body(t, mc))
		calls := r.fake.Calls()
		require.Equal(t, map[string]any{"file": "v.amr"}, calls[len(calls)-1].Params)
	})
	t.Run("VoiceURLOnly", func(t *testing.T) {
		n := mediaCalls(r)
		mc, err := r.ch.FetchMedia(ctx, testGroup, channel.Media{URL: "https://v.example/a.amr"}, channel.MediaRequest{Type: channel.SegVoice, Format: "mp3"})
		require.NoError(t, err)
		require.Equal(t, "https://v.example/a.amr", mc.URL)
		require.Equal(t, n, mediaCalls(r))
	})
	t.Run("FileViaGetFile", func(t *testing.T) {
		r.fake.AddMedia("/f-1", onebottest.MediaFile{Bytes: []byte("pdf"), URL: "https://cdn.example/doc.pdf"})
		ev := emit(t, r, s, seg("file", "file", "doc.pdf", "file_id", "/f-1"))
		mc, err := fetch(t, r, ev, channel.MediaRequest{})
		require.NoError(t, err)
		require.Equal(t, channel.MediaContent{URL: "https://cdn.example/doc.pdf", Size: 3}, mc)
		call, err := r.fake.WaitCall(ctx, "get_file")
		require.NoError(t, err)
		require.Equal(t, "/f-1", call.Params["file_id"])
	})
	t.Run("VideoURL", func(t *testing.T) {
		n := mediaCalls(r)
		ev := emit(t, r, s, seg("video", "file", "m.mp4", "url", "https://v.example/m.mp4"))
		mc, err := fetch(t, r, ev, channel.MediaRequest{})
		require.NoError(t, err)
		require.Equal(t, "https://v.example/m.mp4", mc.URL)
		require.Equal(t, n, mediaCalls(r))
	})
	t.Run("InlineBase64", func(t *testing.T) {
		n := mediaCalls(r)
		mc, err := r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "base64://aGVsbG8="}, channel.MediaRequest{Type: channel.SegImage})
		require.NoError(t, err)
		require.Equal(t, []byte("hello"), body(t, mc))
		require.Equal(t, n, mediaCalls(r))
	})
	t.Run("Quoted", func(t *testing.T) {
		r.fake.AddMedia("Q.image", onebottest.MediaFile{Bytes: []byte("quoted image"), Base64: true})
		orig := emit(t, r, s, seg("image", "file", "Q.image"), text("look"))
		// The pipeline fills in media of the delivered event; the quote
		// cache keeps its own copy.
		orig.Segments[0].Media.Description = "a cat"
		reply := emit(t, r, s, seg("reply", "id", orig.MessageID), text("nice"))
		require.NotNil(t, reply.Quoted)
		require.Equal(t, channel.SegImage, reply.Quoted.Segments[0].Type)
		require.Empty(t, reply.Quoted.Segments[0].Media.Description)
		mc, err := r.ch.FetchMedia(ctx, reply.Chat, *reply.Quoted.Segments[0].Media, channel.MediaRequest{Type: channel.SegImage})
		require.NoError(t, err)
		require.Equal(t, []byte("quoted image"), body(t, mc))

		// get_msg converts the same way.
		got, err := r.ch.GetMessage(ctx, orig.MessageID)
		require.NoError(t, err)
		require.Equal(t, channel.SegImage, got.Segments[0].Type)
		require.Equal(t, "Q.image", got.Segments[0].Media.FileID)
	})
}

// TestFetchMediaStickers: mface and sub_type 1 images arrive as stickers
// and are fetched like images.
func TestFetchMediaStickers(t *testing.T) {
	t.Parallel()
	r, s := mediaRig(t, onebot.Config{})
	r.fake.AddMedia("S.gif", onebottest.MediaFile{Bytes: []byte("GIF89a"), Base64: true})
	ev := emit(t, r, s,
		onebot.Segment{Type: "mface", Data: map[string]string{"emoji_id": "7dd2", "emoji_package_id": "235125", "key": "k", "summary": "[开心]", "url": "https://gxh.example/raw300.gif"}},
		seg("image", "file", "S.gif", "sub_type", "1", "summary", "[动画表情]"))
	require.Len(t, ev.Segments, 2)
	require.Equal(t, channel.SegSticker, ev.Segments[0].Type)
	require.Equal(t, "[开心]", ev.Segments[0].Media.Name)
	require.Equal(t, channel.SegSticker, ev.Segments[1].Type)
	require.True(t, ev.MediaOnly())

	mc, err := fetch(t, r, ev, channel.MediaRequest{})
	require.NoError(t, err)
	require.Equal(t, "https://gxh.example/raw300.gif", mc.URL)
	mc, err = r.ch.FetchMedia(tctx(t), ev.Chat, *ev.Segments[1].Media, channel.MediaRequest{Type: channel.SegSticker})
	require.NoError(t, err)
	require.Equal(t, []byte("GIF89a"), body(t, mc))
}

// TestFetchMediaLocalPath: a local path in the answer is read only from
// inside Config.MediaRoot; escapes by "..", by a symlinked file or
// directory, relative paths and directories are refused for good.
func TestFetchMediaLocalPath(t *testing.T) {
	t.Parallel()
	root, other := t.TempDir(), t.TempDir()
	content := []byte("local image")
	write := func(p string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, content, 0o600))
	}
	inside := filepath.Join(root, "cache", "a.png")
	outside := filepath.Join(other, "secret.png")
	write(inside)
	write(outside)
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "link.png")))
	require.NoError(t, os.Symlink(other, filepath.Join(root, "dir")))
	require.NoError(t, os.Symlink(inside, filepath.Join(root, "alias.png")))

	r, s := mediaRig(t, onebot.Config{MediaRoot: root})
	for _, tc := range []struct {
		name, path string
		ok         bool
	}{
		{"Inside", inside, true},
		{"FileURL", "file://" + filepath.ToSlash(inside), true},
		{"SymlinkInside", filepath.Join(root, "alias.png"), true},
		{"Outside", outside, false},
		{"DotDot", root + "/../" + filepath.Base(other) + "/secret.png", false},
		{"SymlinkFile", filepath.Join(root, "link.png"), false},
		{"SymlinkDir", filepath.Join(root, "dir", "secret.png"), false},
		{"FileURLOutside", "file://" + filepath.ToSlash(outside), false},
		{"Relative", "cache/a.png", false},
		{"Directory", filepath.Join(root, "cache"), false},
		{"Missing", filepath.Join(root, "cache", "gone.png"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.fake.AddMedia(tc.name+".image", onebottest.MediaFile{Bytes: content, LocalPath: tc.path})
			ev := emit(t, r, s, seg("image", "file", tc.name+".image"))
			mc, err := fetch(t, r, ev, channel.MediaRequest{})
			if !tc.ok {
				require.ErrorIs(t, err, channel.ErrMediaUnavailable)
				require.Nil(t, mc.Body)
				return
			}
			require.NoError(t, err)
			require.Equal(t, int64(len(content)), mc.Size)
			require.Equal(t, content, body(t, mc))
		})
	}
	t.Run("TooLarge", func(t *testing.T) {
		r.fake.AddMedia("big.image", onebottest.MediaFile{LocalPath: inside, Size: -1})
		_, err := r.ch.FetchMedia(tctx(t), testGroup, channel.Media{FileID: "big.image"}, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 4})
		require.ErrorIs(t, err, channel.ErrMediaTooLarge)
	})

	// Without MediaRoot no local path is read.
	r2, _ := mediaRig(t, onebot.Config{})
	r2.fake.AddMedia("a.image", onebottest.MediaFile{LocalPath: inside})
	_, err := r2.ch.FetchMedia(tctx(t), testGroup, channel.Media{FileID: "a.image"}, channel.MediaRequest{Type: channel.SegImage})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable)
	require.ErrorContains(t, err, "the implementation returned a local path and Config.MediaRoot is not set")
}

// TestFetchMediaErrors: gone files, unsupported actions and references
// without anything to fetch are ErrMediaUnavailable; declared sizes over
// MaxBytes are ErrMediaTooLarge before any read; timeouts and other
// failures stay retryable.
func TestFetchMediaErrors(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	r, _ := mediaRig(t, onebot.Config{Clock: clk})
	ctx := tctx(t)
	img := channel.MediaRequest{Type: channel.SegImage}

	_, err := r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "unknown.image"}, img)
	require.ErrorIs(t, err, channel.ErrMediaUnavailable, "retcode 100")
	var apiErr *onebot.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, onebottest.RetcodeFailed, apiErr.Retcode)

	r.fake.FailNext("get_file", 1404)
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "/f-2"}, channel.MediaRequest{Type: channel.SegFile})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable, "get_file unsupported")

	r.fake.FailNext("get_record", 102)
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "v.amr"}, channel.MediaRequest{Type: channel.SegVoice})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable, "retcode 102")

	n := mediaCalls(r)
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{Name: "x.jpg"}, img)
	require.ErrorIs(t, err, channel.ErrMediaUnavailable, "no reference")
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{URL: "ftp://x.example/a.png"}, img)
	require.ErrorIs(t, err, channel.ErrMediaUnavailable, "no http(s) URL, no file id")
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "a"}, channel.MediaRequest{Type: channel.SegText})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable, "not a media type")
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "base64://!!!"}, img)
	require.ErrorIs(t, err, channel.ErrMediaUnavailable, "corrupt base64")

	// Declared sizes: the segment's, before any call.
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "big.image", Size: 5000}, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 1000})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge)
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{URL: "https://cdn.example/big.png", Size: 5000}, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 1000})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge)
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "base64://aGVsbG8gd29ybGQ="}, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 5})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge, "inline content over MaxBytes")
	require.Equal(t, n, mediaCalls(r), "none of these made a call")

	// The answer's declared size.
	r.fake.AddMedia("big.image", onebottest.MediaFile{Bytes: []byte("small"), Base64: true, Size: 5000})
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "big.image"}, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 1000})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge)
	require.NotErrorIs(t, err, channel.ErrMediaUnavailable)

	// Other retcodes and timeouts may be retried.
	r.fake.FailNext("get_image", 200)
	_, err = r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "big.image"}, img)
	require.ErrorAs(t, err, &apiErr)
	require.NotErrorIs(t, err, channel.ErrMediaUnavailable)

	r.fake.Stall("get_image", true)
	errc := make(chan error, 1)
	go func() {
		_, err := r.ch.FetchMedia(ctx, testGroup, channel.Media{FileID: "slow.image"}, img)
		errc <- err
	}()
	require.Eventually(t, func() bool { return r.ch.PendingCalls() == 1 }, waitTimeout, time.Millisecond)
	clk.Advance(10 * time.Second)
	err = <-errc
	require.ErrorIs(t, err, onebot.ErrTimeout)
	require.NotErrorIs(t, err, channel.ErrMediaUnavailable)
}
