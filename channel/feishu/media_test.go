package feishu_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
)

var pngBytes = []byte("\x89PNG\r\n\x1a\n fake picture bytes")

// TestImageMessageAndFetchMedia: an image message becomes an image
// segment whose Media.FileID is the MediaRef; FetchMedia streams the
// bytes from the resource API with the tenant token.
func TestImageMessageAndFetchMedia(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	p, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice,
		Image: &feishutest.Resource{Key: "img_v3_02ab_5ce6d572", Data: pngBytes, MIME: "image/png"}})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)[0]
	require.Equal(t, []channel.Segment{channel.Image(channel.Media{FileID: p.MessageID + "/img_v3_02ab_5ce6d572"})}, ev.Segments)
	require.True(t, ev.MediaOnly())
	msgID, key, ok := feishu.ParseMediaRef(ev.Segments[0].Media.FileID)
	require.True(t, ok)
	require.Equal(t, p.MessageID, msgID)
	require.Equal(t, "img_v3_02ab_5ce6d572", key)

	mc, err := ch.FetchMedia(ctx, ev.Chat, *ev.Segments[0].Media, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 1 << 20})
	require.NoError(t, err)
	body, err := io.ReadAll(mc.Body)
	require.NoError(t, err)
	require.NoError(t, mc.Body.Close())
	require.Equal(t, pngBytes, body)
	require.Equal(t, "image/png", mc.MIME)
	require.Equal(t, int64(len(pngBytes)), mc.Size)
	calls := callsOf(srv, "resource")
	require.Len(t, calls, 1)
	require.Equal(t, "image", calls[0].Query.Get("type"))
	require.NotEmpty(t, calls[0].Auth)

	// Too large for the caller: refused before reading.
	_, err = ch.FetchMedia(ctx, ev.Chat, *ev.Segments[0].Media, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 4})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge)

	// References the platform will not serve.
	for name, tc := range map[string]struct {
		m   channel.Media
		typ channel.SegmentType
	}{
		"not a MediaRef":        {channel.Media{FileID: "img_v3_uploaded"}, channel.SegImage},
		"a URL":                 {channel.Media{URL: "https://example.com/a.png"}, channel.SegImage},
		"sticker":               {channel.Media{FileID: p.MessageID + "/file_sticker"}, channel.SegSticker},
		"key not in message":    {channel.Media{FileID: p.MessageID + "/img_other"}, channel.SegImage},
		"unknown message":       {channel.Media{FileID: "om_unknown/img_v3_02ab_5ce6d572"}, channel.SegImage},
		"slash in the key":      {channel.Media{FileID: p.MessageID + "/img/x"}, channel.SegImage},
		"empty message id part": {channel.Media{FileID: "/img_x"}, channel.SegImage},
	} {
		_, err := ch.FetchMedia(ctx, ev.Chat, tc.m, channel.MediaRequest{Type: tc.typ})
		require.ErrorIs(t, err, channel.ErrMediaUnavailable, name)
	}

	// Transient failures stay retryable.
	for _, f := range []feishutest.Failure{{Status: 502}, {Status: 429, Code: 99991400}, {Status: 400, Code: 234019}} {
		srv.FailNext("resource", f)
		_, err = ch.FetchMedia(ctx, ev.Chat, *ev.Segments[0].Media, channel.MediaRequest{Type: channel.SegImage})
		require.Error(t, err, "%+v", f)
		require.NotErrorIs(t, err, channel.ErrMediaUnavailable, "%+v", f)
	}
	srv.FailNext("resource", feishutest.Failure{Status: 400, Code: 234037})
	_, err = ch.FetchMedia(ctx, ev.Chat, *ev.Segments[0].Media, channel.MediaRequest{Type: channel.SegImage})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge, "the platform's 100 MB limit")
	srv.Recall(p.MessageID)
	_, err = ch.FetchMedia(ctx, ev.Chat, *ev.Segments[0].Media, channel.MediaRequest{Type: channel.SegImage})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable, "a deleted message")
}

// TestFetchMediaFile: a file is fetched with type=file.
func TestFetchMediaFile(t *testing.T) {
	t.Parallel()
	srv := newFake(t, feishutest.Config{})
	ch := newChannel(t, srv, feishu.ModeWebSocket, nil)
	sink := newRecSink()
	run(t, ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)
	p, err := srv.Push(ctx, feishutest.Incoming{ChatID: group, From: alice, MessageType: "file",
		Content: `{"file_key":"file_v3_00ab","file_name":"report.pdf"}`})
	require.NoError(t, err)
	srv.AddResource(p.MessageID, "file_v3_00ab", []byte("%PDF-1.7"), "application/pdf")
	ev := sink.waitEvents(t, 1)[0]
	require.Equal(t, channel.SegFile, ev.Segments[0].Type)
	require.Equal(t, "report.pdf", ev.Segments[0].Media.Name)
	mc, err := ch.FetchMedia(ctx, ev.Chat, *ev.Segments[0].Media, channel.MediaRequest{Type: channel.SegFile})
	require.NoError(t, err)
	defer func() { _ = mc.Body.Close() }()
	b, _ := io.ReadAll(mc.Body)
	require.True(t, bytes.HasPrefix(b, []byte("%PDF")))
	require.Equal(t, "file", callsOf(srv, "resource")[0].Query.Get("type"))
}
