package wecom_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/wecom"
	"github.com/personakit/persona/channel/wecom/wecomtest"
	"github.com/personakit/persona/clock"
)

// TestAppEndToEnd: a user's text, picture and voice message reach the sink
// as private-chat events; the reply goes out with message/send; the
// picture is fetched with media/get.
func TestAppEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, wecomtest.ModeApp, nil, nil)
	sink := newRecSink()
	run(t, e.ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)

	m, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "你好 <b>&amp; ]]> 😀"})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)[0]
	require.NoError(t, ev.Validate())
	require.Equal(t, m.ID, ev.MessageID)
	require.Equal(t, alice, ev.Chat)
	require.Equal(t, "alice", ev.Sender.ID)
	require.Equal(t, e.srv.BotID(), ev.BotID)
	require.Equal(t, "你好 <b>&amp; ]]> 😀", ev.Text())
	require.True(t, ev.ToMe)

	pic := []byte("\x89PNG\r\n\x1a\nnot really a png")
	mediaID := e.srv.AddMedia(pic, "image/png")
	_, err = e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Image: &wecomtest.Media{MediaID: mediaID, PicURL: "https://wework.qpic.cn/x/0"}})
	require.NoError(t, err)
	_, err = e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Voice: &wecomtest.Voice{MediaID: "voice-1", Format: "amr", Recognition: "明天见"}})
	require.NoError(t, err)
	evs := sink.waitEvents(t, 3)
	img, voice := evs[1], evs[2]
	require.Equal(t, []channel.Segment{channel.Image(channel.Media{URL: "https://wework.qpic.cn/x/0", FileID: mediaID})}, img.Segments)
	require.True(t, img.MediaOnly())
	require.Equal(t, channel.SegVoice, voice.Segments[0].Type)
	require.Equal(t, channel.Media{FileID: "voice-1", MIME: "audio/amr", Transcript: "明天见"}, *voice.Segments[0].Media)
	require.Equal(t, "明天见", voice.TextAndSpeech())

	mc, err := e.ch.FetchMedia(ctx, alice, *img.Segments[0].Media, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 1 << 20})
	require.NoError(t, err)
	got, err := io.ReadAll(mc.Body)
	require.NoError(t, err)
	require.NoError(t, mc.Body.Close())
	require.Equal(t, pic, got)
	require.Equal(t, "image/png", mc.MIME)
	require.Equal(t, int64(len(pic)), mc.Size)
	_, err = e.ch.FetchMedia(ctx, alice, *img.Segments[0].Media, channel.MediaRequest{MaxBytes: 4})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge)
	_, err = e.ch.FetchMedia(ctx, alice, channel.Media{FileID: "gone"}, channel.MediaRequest{})
	require.ErrorIs(t, err, channel.ErrMediaUnavailable)
	mc, err = e.ch.FetchMedia(ctx, alice, channel.Media{URL: "https://wework.qpic.cn/x/0"}, channel.MediaRequest{})
	require.NoError(t, err)
	require.Equal(t, "https://wework.qpic.cn/x/0", mc.URL, "a link without MediaId is for the caller to fetch")

	rc, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "在的，有什么事？", ReplyTo: ev.MessageID, IdempotencyKey: "k1"})
	require.NoError(t, err)
	sent, err := e.srv.WaitSent(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "message/send", sent[0].Op)
	require.Equal(t, alice, sent[0].Chat)
	require.Equal(t, "在的，有什么事？", sent[0].Text)
	require.Equal(t, []string{sent[0].MessageID}, rc.MessageIDs)

	// A repeat of the same chunk returns the first receipt, unsent.
	rc2, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "在的，有什么事？", IdempotencyKey: "k1"})
	require.NoError(t, err)
	require.Equal(t, rc.MessageIDs, rc2.MessageIDs)
	require.Len(t, e.srv.Sent(), 1)

	// A group chat is an app chat: appchat/send.
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: room, Text: "大家好"})
	require.NoError(t, err)
	sent, err = e.srv.WaitSent(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, "appchat/send", sent[1].Op)
	require.Equal(t, room, sent[1].Chat)

	// Media by media_id.
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice, Media: []channel.Media{{FileID: mediaID, MIME: "image/png"}}})
	require.NoError(t, err)
	sent, err = e.srv.WaitSent(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, "image", sent[2].MsgType)
	require.Equal(t, mediaID, sent[2].MediaID)
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice, Media: []channel.Media{{URL: "https://example.com/a.png"}}})
	require.ErrorIs(t, err, channel.ErrMediaInvalid)
}

// TestAppTokenCachedAndRefreshed: one gettoken for any number of
// concurrent sends, a new token before the old one expires (on the
// clock), and one refetch and retry when WeCom says it expired.
func TestAppTokenCachedAndRefreshed(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	log, buf := newLogger()
	e := newEnv(t, wecomtest.ModeApp, func(c *wecomtest.Config) { c.Clock = clk }, func(c *wecom.Config) { c.Clock, c.Logger = clk, log })
	ctx := tctx(t)

	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			_, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: fmt.Sprintf("concurrent %d", i)})
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.Equal(t, 1, e.srv.TokensIssued(), "concurrent callers share one fetch")

	sink := newRecSink()
	run(t, e.ch, sink)
	sink.waitOnline(t, true)
	require.Equal(t, 1, e.srv.TokensIssued(), "Run reuses the cached token")
	require.Eventually(t, func() bool { return clk.Pending() > 0 }, waitTimeout, time.Millisecond, "the refresh timer")

	// 2 h tokens are replaced 5 minutes before they expire.
	clk.Advance(2*time.Hour - 5*time.Minute - time.Second)
	require.Never(t, func() bool { return e.srv.TokensIssued() > 1 }, 50*time.Millisecond, 5*time.Millisecond)
	clk.Advance(time.Second)
	require.Eventually(t, func() bool { return e.srv.TokensIssued() == 2 }, waitTimeout, time.Millisecond)

	// WeCom expired it early: one refetch, the send retried once.
	e.srv.ExpireTokens()
	_, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "after expiry"})
	require.NoError(t, err)
	require.Equal(t, 3, e.srv.TokensIssued())
	require.Contains(t, buf.String(), "wecom_token_rejected")

	// Rejected again after the refetch: not retried a second time.
	e.srv.FailNext("message/send", wecomtest.Failure{ErrCode: wecomtest.CodeInvalidToken})
	e.srv.FailNext("message/send", wecomtest.Failure{ErrCode: wecomtest.CodeInvalidToken})
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "refused twice"})
	require.ErrorIs(t, err, wecom.ErrUnauthorized)
	require.Equal(t, channel.ClassOffline, channel.Classify(err))
	require.Equal(t, 4, e.srv.TokensIssued())

	for _, tok := range e.srv.IssuedTokens() {
		require.NotContains(t, buf.String(), tok, "a token in the log")
	}
	require.NotContains(t, buf.String(), e.srv.Secret())
}

// TestAppSecretsNeverInErrors: transport failures of calls whose URL
// holds the secret or a token come back without them.
func TestAppSecretsNeverInErrors(t *testing.T) {
	t.Parallel()
	log, buf := newLogger()
	e := newEnv(t, wecomtest.ModeApp, nil, func(c *wecom.Config) { c.Logger = log })
	ctx := tctx(t)
	_, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "warm the token"})
	require.NoError(t, err)
	toks := e.srv.IssuedTokens()
	require.Len(t, toks, 1)

	e.srv.FailNext("message/send", wecomtest.Failure{Drop: true})
	e.srv.FailNext("media/get", wecomtest.Failure{Drop: true})
	_, sendErr := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "dropped"})
	require.Error(t, sendErr)
	_, mediaErr := e.ch.FetchMedia(ctx, alice, channel.Media{FileID: "m"}, channel.MediaRequest{})
	require.Error(t, mediaErr)

	// gettoken against a closed port: the URL carries corpsecret.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	cfg := adapterConfig(e.srv)
	cfg.APIBase, cfg.Logger = dead, log
	ch2, err := wecom.New(cfg)
	require.NoError(t, err)
	_, tokErr := ch2.Send(ctx, channel.Outgoing{Chat: alice, Text: "no server"})
	require.Error(t, tokErr)

	for _, err := range []error{sendErr, mediaErr, tokErr} {
		require.NotContains(t, err.Error(), toks[0])
		require.NotContains(t, err.Error(), e.srv.Secret())
		require.NotContains(t, err.Error(), "access_token=")
		require.NotContains(t, fmt.Sprintf("%+v", err), toks[0])
	}
	require.NotContains(t, buf.String(), toks[0])
	require.NotContains(t, buf.String(), e.srv.Secret())
}

// TestAppErrorsClassified: errcodes become the channel's error classes.
func TestAppErrorsClassified(t *testing.T) {
	t.Parallel()
	log, buf := newLogger()
	e := newEnv(t, wecomtest.ModeApp, nil, func(c *wecom.Config) { c.Logger = log })
	ctx := tctx(t)
	send := func(text string) error {
		_, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: text})
		return err
	}
	cases := []struct {
		code  int
		class channel.ErrorClass
	}{
		{wecomtest.CodeFreqLimit, channel.ClassRateLimited},
		{45033, channel.ClassRateLimited},
		{wecomtest.CodeBusy, channel.ClassTransient},
		{wecomtest.CodeInvalidParam, channel.ClassRejected},
		{wecomtest.CodeContentTooLong, channel.ClassRejected},
		{60020, channel.ClassRejected},
	}
	for _, tc := range cases {
		e.srv.FailNext("message/send", wecomtest.Failure{ErrCode: tc.code})
		err := send(fmt.Sprint("code ", tc.code))
		require.Equal(t, tc.class, channel.Classify(err), "errcode %d: %v", tc.code, err)
		var ae *wecom.APIError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, tc.code, ae.Code)
		var rl *channel.RateLimitedError
		if errors.As(err, &rl) {
			require.Positive(t, rl.RetryAfter)
		}
		var rj *channel.RejectedError
		if errors.As(err, &rj) {
			require.Equal(t, fmt.Sprint(tc.code), rj.Code)
		}
	}
	require.Contains(t, buf.String(), "wecom_ip_not_trusted", "60020 explains itself")

	e.srv.FailNext("message/send", wecomtest.Failure{Status: http.StatusBadGateway})
	require.Equal(t, channel.ClassTransient, channel.Classify(send("502")))

	e.srv.KickUser("alice")
	err := send("to a kicked user")
	require.Equal(t, channel.ClassKicked, channel.Classify(err))
	require.ErrorIs(t, err, channel.ErrRejected)

	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: strings.Repeat("长", 683)})
	require.Equal(t, channel.ClassRejected, channel.Classify(err), "2049 bytes")
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: strings.Repeat("长", 682) + "ab"})
	require.Error(t, err, "kicked")
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice})
	require.Equal(t, channel.ClassRejected, channel.Classify(err), "empty")
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "\xff"})
	require.Equal(t, channel.ClassRejected, channel.Classify(err), "invalid UTF-8")
	require.Equal(t, channel.TextLimit{Unit: channel.Bytes, Max: 2048}, channel.LimitOf(e.ch))
}

// TestAppResendAfterLostAnswer: a chunk whose answer was lost (the
// connection broke after WeCom took it) is sent again with the same
// duplicate check and WeCom drops the copy; with the check off it is not
// sent again.
func TestAppResendAfterLostAnswer(t *testing.T) {
	t.Parallel()
	for _, check := range []bool{true, false} {
		t.Run(fmt.Sprint("duplicate check ", check), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, wecomtest.ModeApp, nil, func(c *wecom.Config) {
				if !check {
					c.DuplicateCheck = -1
				}
			})
			ctx := tctx(t)
			out := channel.Outgoing{Chat: alice, Text: "part two of the answer", IdempotencyKey: "fp-0002"}
			e.srv.FailNext("message/send", wecomtest.Failure{Drop: true})
			_, err := e.ch.Send(ctx, out)
			require.Error(t, err)
			require.Equal(t, channel.ClassTransient, channel.Classify(err), "the pipeline may try again")
			require.Len(t, e.srv.Sent(), 1, "WeCom took it")

			rc, err := e.ch.Send(ctx, out)
			require.NoError(t, err)
			require.Len(t, e.srv.Sent(), 1, "shown once")
			if check {
				require.Equal(t, 1, e.srv.Duplicates(), "sent again and dropped by WeCom's check")
				require.Equal(t, []string{e.srv.Sent()[0].MessageID}, rc.MessageIDs)
			} else {
				require.Zero(t, e.srv.Duplicates(), "not sent again")
				require.NotEmpty(t, rc.MessageIDs)
			}
		})
	}
}

// TestAppSameTextDifferentChunks: two chunks (different idempotency keys)
// that say the same thing to the same user are two messages: the
// duplicate check, which compares content, is not set on a first
// attempt.
func TestAppSameTextDifferentChunks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, wecomtest.ModeApp, nil, nil)
	ctx := tctx(t)
	rc1, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "好的", IdempotencyKey: "turn-1#0"})
	require.NoError(t, err)
	rc2, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "好的", IdempotencyKey: "turn-2#0"})
	require.NoError(t, err)
	sent := e.srv.Sent()
	require.Len(t, sent, 2, "both replies delivered")
	require.Zero(t, e.srv.Duplicates())
	require.NotEqual(t, rc1.MessageIDs, rc2.MessageIDs)
	require.Equal(t, []string{sent[0].MessageID}, rc1.MessageIDs)
	require.Equal(t, []string{sent[1].MessageID}, rc2.MessageIDs)
}

// TestAppGroupResendAfterLostAnswer: appchat/send has no duplicate check,
// so a group chunk whose answer was lost counts as delivered on the
// retry instead of being shown twice.
func TestAppGroupResendAfterLostAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, wecomtest.ModeApp, nil, nil)
	ctx := tctx(t)
	out := channel.Outgoing{Chat: room, Text: "大家好", IdempotencyKey: "fp-group"}
	e.srv.FailNext("appchat/send", wecomtest.Failure{Drop: true})
	_, err := e.ch.Send(ctx, out)
	require.Error(t, err)
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
	require.Len(t, e.srv.Sent(), 1, "WeCom took it")
	rc, err := e.ch.Send(ctx, out)
	require.NoError(t, err)
	require.NotEmpty(t, rc.MessageIDs)
	require.Len(t, e.srv.Sent(), 1, "shown once")
}

// TestAppLaterPartLost: a message of text and media is a call per part;
// when a later part fails, the retry does not send the parts delivered
// before it again, and the uncertain part is sent again with the
// duplicate check (private chat) or counts as delivered (group).
func TestAppLaterPartLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		chat channel.Chat
		op   string
		f    wecomtest.Failure
		// after the retry
		sent, duplicates int
	}{
		{"private lost answer", alice, "message/send", wecomtest.Failure{Drop: true}, 2, 1},
		{"private refused", alice, "message/send", wecomtest.Failure{ErrCode: wecomtest.CodeBusy}, 2, 0},
		{"group lost answer", room, "appchat/send", wecomtest.Failure{Drop: true}, 2, 0},
		{"group refused", room, "appchat/send", wecomtest.Failure{ErrCode: wecomtest.CodeBusy}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, wecomtest.ModeApp, nil, nil)
			ctx := tctx(t)
			pic := e.srv.AddMedia([]byte("\x89PNG picture"), "image/png")
			out := channel.Outgoing{Chat: tc.chat, Text: "看图", IdempotencyKey: "fp-media",
				Media: []channel.Media{{FileID: pic, MIME: "image/png"}}}
			e.srv.FailAfter(tc.op, 1, tc.f)
			rc, err := e.ch.Send(ctx, out)
			require.Error(t, err)
			require.Len(t, rc.MessageIDs, 1, "the text was delivered")
			textID := rc.MessageIDs[0]

			rc, err = e.ch.Send(ctx, out)
			require.NoError(t, err)
			sent := e.srv.Sent()
			require.Len(t, sent, tc.sent, "each part shown once")
			require.Equal(t, "text", sent[0].MsgType)
			require.Equal(t, "image", sent[1].MsgType)
			require.Equal(t, tc.duplicates, e.srv.Duplicates())
			require.Len(t, rc.MessageIDs, 2)
			require.Equal(t, textID, rc.MessageIDs[0], "the text's first id")
		})
	}
}

// TestAppResendTooLate: a chunk whose answer was lost and that is sent
// again later than Config.DuplicateCheck counts as delivered: no
// duplicate check can cover the earlier attempt any more.
func TestAppResendTooLate(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e := newEnv(t, wecomtest.ModeApp, func(c *wecomtest.Config) { c.Clock = clk }, func(c *wecom.Config) {
		c.Clock, c.DuplicateCheck = clk, time.Minute
	})
	ctx := tctx(t)
	out := channel.Outgoing{Chat: alice, Text: "late", IdempotencyKey: "fp-late"}
	e.srv.FailNext("message/send", wecomtest.Failure{Drop: true})
	_, err := e.ch.Send(ctx, out)
	require.Error(t, err)
	clk.Advance(2 * time.Minute)
	_, err = e.ch.Send(ctx, out)
	require.NoError(t, err)
	require.Len(t, e.srv.Sent(), 1, "not sent again")
	require.Zero(t, e.srv.Duplicates())
}

// TestAppNackRedelivered: a refused callback is answered 503, WeCom posts
// it again, and the second delivery is accepted.
func TestAppNackRedelivered(t *testing.T) {
	t.Parallel()
	log, buf := newLogger()
	e := newEnv(t, wecomtest.ModeApp, nil, func(c *wecom.Config) { c.Logger = log })
	sink := newRecSink()
	run(t, e.ch, sink)
	sink.waitOnline(t, true)
	sink.FailNext(2)
	m, err := e.srv.Push(tctx(t), wecomtest.Incoming{Chat: alice, Text: "twice refused"})
	require.NoError(t, err)
	evs := sink.waitEvents(t, 1)
	require.Equal(t, m.ID, evs[0].MessageID)
	require.Len(t, sink.Refused(), 2)
	var statuses []int
	for _, d := range e.srv.Deliveries() {
		statuses = append(statuses, d.Status)
	}
	require.Equal(t, []int{503, 503, 200}, statuses)
	require.Contains(t, buf.String(), "wecom_event_nacked")
}

// TestAppSkipsWhatIsNoMessage: events, unknown types and broken messages
// are acknowledged (200) without an event, and logged.
func TestAppSkipsWhatIsNoMessage(t *testing.T) {
	t.Parallel()
	log, buf := newLogger()
	e := newEnv(t, wecomtest.ModeApp, nil, func(c *wecom.Config) { c.Logger = log })
	sink := newRecSink()
	run(t, e.ch, sink)
	sink.waitOnline(t, true)
	agent := itoa(e.srv.AgentID())
	head := "<xml><ToUserName><![CDATA[" + e.srv.CorpID() + "]]></ToUserName><FromUserName><![CDATA[alice]]></FromUserName><CreateTime>1700000000</CreateTime>"
	for name, plain := range map[string]string{
		"event":            head + "<MsgType><![CDATA[event]]></MsgType><Event><![CDATA[enter_agent]]></Event><AgentID>" + agent + "</AgentID></xml>",
		"unknown type":     head + "<MsgType><![CDATA[hologram]]></MsgType><MsgId>1</MsgId><AgentID>" + agent + "</AgentID></xml>",
		"no MsgId":         head + "<MsgType><![CDATA[text]]></MsgType><Content>hi</Content><AgentID>" + agent + "</AgentID></xml>",
		"another agent":    head + "<MsgType><![CDATA[text]]></MsgType><Content>hi</Content><MsgId>2</MsgId><AgentID>99</AgentID></xml>",
		"empty text":       head + "<MsgType><![CDATA[text]]></MsgType><Content></Content><MsgId>3</MsgId><AgentID>" + agent + "</AgentID></xml>",
		"padded user id":   "<xml><FromUserName> alice</FromUserName><MsgType>text</MsgType><Content>x</Content><MsgId>4</MsgId></xml>",
		"image without id": head + "<MsgType><![CDATA[image]]></MsgType><MsgId>5</MsgId><AgentID>" + agent + "</AgentID></xml>",
	} {
		status, _, err := e.srv.PushRaw(tctx(t), []byte(plain))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, name)
	}
	// A control character is not XML at all.
	status, _, err := e.srv.PushRaw(tctx(t), []byte("<xml><FromUserName>a&#x1;b</FromUserName><MsgType>text</MsgType><MsgId>4</MsgId></xml>"))
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, status)
	require.Empty(t, sink.Received())
	require.Contains(t, buf.String(), "wecom_callback_skipped")
	require.Contains(t, buf.String(), "wecom_message_invalid")

	// Location and link messages become text and a link.
	for _, plain := range []string{
		head + "<MsgType>location</MsgType><Location_X>39.9</Location_X><Location_Y>116.4</Location_Y><Scale>15</Scale><Label><![CDATA[北京]]></Label><MsgId>6</MsgId><AgentID>" + agent + "</AgentID></xml>",
		head + "<MsgType>link</MsgType><Title><![CDATA[标题]]></Title><Url><![CDATA[https://example.com/a]]></Url><MsgId>7</MsgId><AgentID>" + agent + "</AgentID></xml>",
		head + "<MsgType>video</MsgType><MediaId>vid-1</MediaId><ThumbMediaId>th</ThumbMediaId><MsgId>8</MsgId><AgentID>" + agent + "</AgentID></xml>",
	} {
		status, _, err := e.srv.PushRaw(tctx(t), []byte(plain))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
	}
	evs := sink.waitEvents(t, 3)
	require.Equal(t, "[location] 北京", evs[0].Text())
	require.Equal(t, []channel.Segment{{Type: channel.SegLink, URL: "https://example.com/a", Text: "标题"}}, evs[1].Segments)
	require.Equal(t, channel.SegVideo, evs[2].Segments[0].Type)
	require.Equal(t, "vid-1", evs[2].Segments[0].Media.FileID)
}

// TestAppRun: refused credentials end Run with ErrUnauthorized; failed
// token fetches back off on the clock (no retry before the delay) and
// report offline after OfflineAfter of them, online again on success.
func TestAppRun(t *testing.T) {
	t.Parallel()
	t.Run("unauthorized", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, wecomtest.ModeApp, nil, func(c *wecom.Config) { c.Secret = "wrong" })
		err := e.ch.Run(tctx(t), newRecSink())
		require.ErrorIs(t, err, wecom.ErrUnauthorized)
		require.NotContains(t, err.Error(), "wrong")
	})
	t.Run("backoff", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		e := newEnv(t, wecomtest.ModeApp, func(c *wecomtest.Config) { c.Clock = clk }, func(c *wecom.Config) {
			c.Clock, c.RetryMin, c.RetryMax = clk, time.Second, 60*time.Second
		})
		for range 3 {
			e.srv.FailNext("gettoken", wecomtest.Failure{ErrCode: wecomtest.CodeBusy})
		}
		sink := newRecSink()
		run(t, e.ch, sink)
		calls := func() int { return len(e.srv.IssuedTokens()) }
		for i, d := range []time.Duration{time.Second, 2 * time.Second} {
			require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond, "backoff %d", i)
			clk.Advance(d*8/10 - time.Millisecond)
			require.Equal(t, 1, clk.Pending(), "retried before the backoff")
			clk.Advance(d*4/10 + time.Millisecond)
		}
		sink.waitOnline(t, false)
		require.Eventually(t, func() bool { return clk.Pending() == 1 }, waitTimeout, time.Millisecond)
		clk.Advance(5 * time.Second)
		sink.waitOnline(t, true)
		require.Equal(t, 1, calls())
		_, err := e.ch.Send(tctx(t), channel.Outgoing{Chat: alice, Text: "online"})
		require.NoError(t, err)
	})
}
