package dingtalk_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
)

// TestFetchMedia: a picture's download code becomes the short-lived link
// the robot file download API answers; the link needs no credentials.
func TestFetchMedia(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	png := []byte("\x89PNG\r\n\x1a\nfake picture")
	code := r.srv.AddFile("", png, "image/png")
	p, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Picture: &dingtalktest.Media{DownloadCode: code, PictureDownloadCode: "pic-" + code}})
	require.NoError(t, err)
	ev := r.sink.waitMessage(t, p.MsgID)
	require.True(t, ev.MediaOnly())
	seg := ev.Segments[0]
	require.Equal(t, channel.SegImage, seg.Type)
	require.Equal(t, code, seg.Media.FileID)

	mf, ok := channel.As[channel.MediaFetcher](r.ch)
	require.True(t, ok)
	mc, err := mf.FetchMedia(ctx, ev.Chat, *seg.Media, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Nil(t, mc.Body)
	require.NotEmpty(t, mc.URL)
	require.Equal(t, []string{code}, r.srv.Downloads())

	resp, err := http.Get(mc.URL)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, png, body)
}

func TestFetchMediaErrors(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	code := r.srv.AddFile("dc-1", []byte("x"), "")
	fetch := func(m channel.Media, max int64) error {
		_, err := r.ch.FetchMedia(ctx, dmAlice, m, channel.MediaRequest{Type: channel.SegImage, MaxBytes: max})
		return err
	}
	require.ErrorIs(t, fetch(channel.Media{}, 0), channel.ErrMediaUnavailable, "no download code")
	require.ErrorIs(t, fetch(channel.Media{FileID: "expired"}, 0), channel.ErrMediaUnavailable, "unknown code")
	require.ErrorIs(t, fetch(channel.Media{FileID: code, Size: 100}, 10), channel.ErrMediaTooLarge)
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpDownload, Status: 403, Code: "Forbidden.AccessDenied.QpsLimitForApi"})
	err := fetch(channel.Media{FileID: code}, 0)
	require.Equal(t, channel.ClassRateLimited, channel.Classify(err), "%v", err)
	require.NotErrorIs(t, err, channel.ErrMediaUnavailable)
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpDownload, Status: 503})
	err = fetch(channel.Media{FileID: code}, 0)
	require.Error(t, err)
	require.NotErrorIs(t, err, channel.ErrMediaUnavailable, "a 503 may be retried")
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpDownload, Status: 200, Body: `{"downloadUrl":"file:///etc/passwd"}`})
	require.ErrorIs(t, fetch(channel.Media{FileID: code}, 0), channel.ErrMediaUnavailable, "not an http(s) link")
	require.NoError(t, fetch(channel.Media{FileID: code}, 0))

	// Unknown credentials: the token cannot be had.
	bad, err := dingtalk.New(dingtalk.Config{ClientID: r.srv.ClientID(), ClientSecret: "not-the-secret", APIBase: r.srv.URL()})
	require.NoError(t, err)
	_, err = bad.FetchMedia(ctx, dmAlice, channel.Media{FileID: code}, channel.MediaRequest{})
	require.ErrorIs(t, err, dingtalk.ErrUnauthorized)
	require.NotContains(t, err.Error(), "not-the-secret")
}

// TestInboundMediaKinds: audio carries DingTalk's recognition as the
// transcript; video and file their details; richText mixes text and
// pictures.
func TestInboundMediaKinds(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	push := func(in dingtalktest.Incoming) channel.Event {
		in.From = alice
		p, err := r.srv.Push(ctx, in)
		require.NoError(t, err)
		ev := r.sink.waitMessage(t, p.MsgID)
		require.NoError(t, ev.Validate())
		return ev
	}
	ev := push(dingtalktest.Incoming{Audio: &dingtalktest.Media{DownloadCode: "a1", Recognition: "你好"}})
	require.Equal(t, channel.SegVoice, ev.Segments[0].Type)
	require.Equal(t, "你好", ev.Segments[0].Media.Transcript)
	require.Equal(t, "你好", ev.TextAndSpeech())
	ev = push(dingtalktest.Incoming{Video: &dingtalktest.Media{DownloadCode: "v1", Duration: 12, VideoType: "mp4"}})
	require.Equal(t, &channel.Media{FileID: "v1", Duration: 12, MIME: "video/mp4"}, ev.Segments[0].Media)
	ev = push(dingtalktest.Incoming{File: &dingtalktest.Media{DownloadCode: "f1", FileName: "报告.pdf", FileID: "117", SpaceID: "223"}})
	require.Equal(t, channel.SegFile, ev.Segments[0].Type)
	require.Equal(t, "报告.pdf", ev.Segments[0].Media.Name)
	ev = push(dingtalktest.Incoming{RichText: []dingtalktest.RichItem{{Text: "看图："}, {Picture: &dingtalktest.Media{DownloadCode: "p1"}}, {Text: "就这样"}}})
	require.Equal(t, "看图：就这样", ev.Text())
	require.True(t, ev.Has(channel.SegImage))
}
