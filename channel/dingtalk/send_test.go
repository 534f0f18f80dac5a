package dingtalk_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
	"github.com/personakit/persona/clock"
)

var (
	group   = channel.Chat{Kind: channel.Group, ID: groupID}
	dmAlice = channel.Chat{Kind: channel.Private, ID: alice.StaffID}
)

// converse pushes a message from alice (in the group, or privately) so the
// adapter learns the conversation's session webhook, and returns it.
func (r *rig) converse(t *testing.T, inGroup bool, text string) (dingtalktest.Pushed, channel.Event) {
	t.Helper()
	p, err := r.srv.Push(tctx(t), dingtalktest.Incoming{Group: inGroup, ConversationID: groupID, From: alice, Text: text, MentionBot: inGroup})
	require.NoError(t, err)
	return p, r.sink.waitMessage(t, p.MsgID)
}

func TestSendRoutes(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	r := start(t, dingtalktest.Config{Clock: clk}, func(c *dingtalk.Config) {
		c.Clock = clk
	})
	ctx := tctx(t)

	// No conversation yet: the robot API, with one access token for
	// every call.
	rc1, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "to the group"})
	require.NoError(t, err)
	rc2, err := r.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "to Alice"})
	require.NoError(t, err)
	sent := r.srv.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, dingtalktest.ViaGroup, sent[0].Via)
	require.Equal(t, "sampleText", sent[0].MsgType)
	require.Equal(t, groupID, sent[0].ConversationID)
	require.Equal(t, []string{sent[0].ProcessQueryKey}, rc1.MessageIDs)
	require.Equal(t, dingtalktest.ViaOTO, sent[1].Via)
	require.Equal(t, []string{alice.StaffID}, sent[1].UserIDs)
	require.Equal(t, []string{sent[1].ProcessQueryKey}, rc2.MessageIDs)
	require.Equal(t, 1, r.srv.TokenCalls(), "the token is cached")

	// After a message, the session webhook.
	p, _ := r.converse(t, true, "hi")
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "through the webhook"})
	require.NoError(t, err)
	require.Equal(t, dingtalktest.ViaWebhook, r.srv.Sent()[2].Via)

	// A minute before it expires the webhook is no longer used.
	clk.Set(p.Expires.Add(-dingtalk.DefaultWebhookMargin))
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "near the expiry"})
	require.NoError(t, err)
	require.Equal(t, dingtalktest.ViaGroup, r.srv.Sent()[3].Via)

	// The token is fetched again before it expires, not after.
	require.Equal(t, 1, r.srv.TokenCalls())
	clk.Set(t0.Add(dingtalktest.DefaultTokenTTL - dingtalk.DefaultTokenRefresh))
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "new token"})
	require.NoError(t, err)
	require.Equal(t, 2, r.srv.TokenCalls())

	// A revoked token is replaced once, and the send goes through.
	r.srv.RevokeTokens()
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "after a revocation"})
	require.NoError(t, err)
	require.Equal(t, 3, r.srv.TokenCalls())
	waitLog(t, r.logs, "dingtalk_token_refused", 1)
}

func TestWebhookGoneFallsBackToAPI(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	r.converse(t, false, "hello")
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpWebhook, Status: 404, Body: "not found"})
	rc, err := r.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "still reaches Alice"})
	require.NoError(t, err)
	sent := r.srv.Sent()
	require.Len(t, sent, 1)
	require.Equal(t, dingtalktest.ViaOTO, sent[0].Via)
	require.Equal(t, []string{sent[0].ProcessQueryKey}, rc.MessageIDs)
	// The webhook is forgotten: the next send goes through the API too.
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "again"})
	require.NoError(t, err)
	require.Equal(t, dingtalktest.ViaOTO, r.srv.Sent()[1].Via)
}

// TestReceiptIDs: a webhook answers no id; the receipt's id is derived
// from the idempotency key, the same for every attempt of a chunk.
func TestReceiptIDs(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	r.converse(t, true, "hi")
	send := func(key string) string {
		rc, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "chunk", IdempotencyKey: key})
		require.NoError(t, err)
		require.Len(t, rc.MessageIDs, 1)
		require.False(t, rc.Time.IsZero())
		return rc.MessageIDs[0]
	}
	a1, a2, b := send("fp-a"), send("fp-a"), send("fp-b")
	require.Equal(t, a1, a2)
	require.NotEqual(t, a1, b)
	require.NotEqual(t, send(""), send(""), "without a key the ids are random")
}

func TestSendRendering(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	p, ev := r.converse(t, true, "第一行很长很长的问题，需要一个足够长的句子来测试截断是否正常工作\n第二行")

	// A reply quotes the message it answers, as markdown.
	_, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "答案", ReplyTo: ev.MessageID})
	require.NoError(t, err)
	m := r.srv.Sent()[0]
	require.Equal(t, "markdown", m.MsgType)
	require.Equal(t, "> Alice: 第一行很长很长的问题，需要一个足够长的句子来测试截断是否正常…\n\n答案", m.Text)
	require.Equal(t, "答案", m.Title)
	got, err := r.srv.Received(ctx)
	require.NoError(t, err)
	require.Equal(t, p.MsgID, got[0].ReplyTo)
	require.Equal(t, "答案", got[0].Text)

	// A reply to a message the adapter never saw goes out plain.
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "plain", ReplyTo: "msgUnknown=="})
	require.NoError(t, err)
	require.Equal(t, "text", r.srv.Sent()[1].MsgType)
	require.Equal(t, "plain", r.srv.Sent()[1].Text)

	// A reply to the bot's own message quotes it without a name.
	rc, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "bot said this"})
	require.NoError(t, err)
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "and more", ReplyTo: rc.MessageIDs[0]})
	require.NoError(t, err)
	require.Equal(t, "> bot said this\n\nand more", r.srv.Sent()[3].Text)

	// Pictures by link make a markdown message.
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "look", Media: []channel.Media{{URL: "https://img.example/a (1).png", MIME: "image/png"}}})
	require.NoError(t, err)
	m = r.srv.Sent()[4]
	require.Equal(t, "markdown", m.MsgType)
	require.Equal(t, "look\n\n![image](https://img.example/a%20%281%29.png)", m.Text)
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Media: []channel.Media{{URL: "https://img.example/b.png"}}})
	require.NoError(t, err)
	require.Equal(t, "[image]", r.srv.Sent()[5].Title)

	// Mentions: staff ids and dingtalk ids, once each.
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "hi all", Mentions: []string{"u1", "$:LWCP_v1:$x", "u1", "", "bad id"}})
	require.NoError(t, err)
	m = r.srv.Sent()[6]
	require.Equal(t, "@u1 @$:LWCP_v1:$x hi all", m.Text)
	require.Equal(t, []string{"u1"}, m.AtUserIDs)
	require.Equal(t, []string{"$:LWCP_v1:$x"}, m.AtDingtalkIDs)
}

func TestSendMarkdownAndPlainReplies(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.Markdown = true })
	ctx := tctx(t)
	_, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "# Title\n\n- item"})
	require.NoError(t, err)
	m := r.srv.Sent()[0]
	require.Equal(t, "sampleMarkdown", m.MsgType)
	require.Equal(t, "# Title", m.Title)
	require.Equal(t, "# Title\n\n- item", m.Text)

	r2 := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.PlainReplies = true })
	_, ev := r2.converse(t, false, "question")
	_, err = r2.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "answer", ReplyTo: ev.MessageID})
	require.NoError(t, err)
	require.Equal(t, "text", r2.srv.Sent()[0].MsgType)
	require.Equal(t, "answer", r2.srv.Sent()[0].Text)
}

// TestSendMentions: mentions reach DingTalk through the session webhook;
// the robot API cannot mention, so they are left out there.
func TestSendMentions(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	_, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "no webhook yet", Mentions: []string{alice.StaffID}})
	require.NoError(t, err)
	require.Equal(t, "no webhook yet", r.srv.Sent()[0].Text)
	waitLog(t, r.logs, "dingtalk_mentions_dropped", 1)

	r.converse(t, true, "hi")
	rc, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "hello with a mention", Mentions: []string{alice.StaffID}})
	require.NoError(t, err)
	got, err := r.srv.Received(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{alice.StaffID}, got[1].Mentions)
	require.Contains(t, got[1].Text, "hello with a mention")
	require.NotEmpty(t, rc.MessageIDs)
}

func TestSendErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		webhook bool // send to a conversation with a session webhook
		fail    dingtalktest.Failure
		class   channel.ErrorClass
		retry   time.Duration // for rate limits
		kicked  bool
		code    string // RejectedError.Code
	}{
		{name: "webhook send too fast", webhook: true, fail: dingtalktest.Failure{ErrCode: 130101, ErrMsg: "send too fast, exceed 20 times per minute"},
			class: channel.ClassRateLimited, retry: dingtalk.DefaultThrottleRetry},
		{name: "webhook throttled", webhook: true, fail: dingtalktest.Failure{ErrCode: 410100}, class: channel.ClassRateLimited, retry: dingtalk.DefaultThrottleRetry},
		{name: "webhook other errcode", webhook: true, fail: dingtalktest.Failure{ErrCode: 310000, ErrMsg: "keywords not in content"},
			class: channel.ClassRejected, code: "310000"},
		{name: "webhook 500", webhook: true, fail: dingtalktest.Failure{Status: 500}, class: channel.ClassTransient},
		{name: "webhook system busy", webhook: true, fail: dingtalktest.Failure{ErrCode: -1, ErrMsg: "系统繁忙"}, class: channel.ClassTransient},
		{name: "api system busy", fail: dingtalktest.Failure{Status: 200, Body: `{"errcode":-1,"errmsg":"系统繁忙"}`}, class: channel.ClassTransient},
		{name: "webhook 429", webhook: true, fail: dingtalktest.Failure{Status: 429, RetryAfter: 7}, class: channel.ClassRateLimited, retry: 7 * time.Second},
		{name: "webhook gateway punish", webhook: true, fail: dingtalktest.Failure{Status: 200, Body: `{"status":1111,"wait":5,"source":"x5","punish":"deny","uuid":"u"}`},
			class: channel.ClassRateLimited, retry: 5 * time.Second},
		{name: "webhook answer lost", webhook: true, fail: dingtalktest.Failure{Drop: true}, class: channel.ClassTransient},
		{name: "api qps limit", fail: dingtalktest.Failure{Status: 403, Code: "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"},
			class: channel.ClassRateLimited, retry: time.Second},
		{name: "api 429", fail: dingtalktest.Failure{Status: 429}, class: channel.ClassRateLimited, retry: time.Second},
		{name: "api 400", fail: dingtalktest.Failure{Status: 400, Code: "invalidParameter.msgParam.invalid"}, class: channel.ClassRejected,
			code: "invalidParameter.msgParam.invalid"},
		{name: "api 403 permission", fail: dingtalktest.Failure{Status: 403, Code: "Forbidden.AccessDenied.AccessTokenPermissionDenied"}, class: channel.ClassRejected},
		{name: "api bot stopped", fail: dingtalktest.Failure{Status: 400, Code: "bot.stopped"}, class: channel.ClassKicked, kicked: true},
		{name: "api 502 html", fail: dingtalktest.Failure{Status: 502, Body: "<html>bad gateway</html>"}, class: channel.ClassTransient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := start(t, dingtalktest.Config{}, nil)
			ctx := tctx(t)
			if tc.webhook {
				r.converse(t, true, "hi")
			}
			r.srv.FailNext(tc.fail)
			_, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "x"})
			require.Error(t, err)
			require.Equal(t, tc.class, channel.Classify(err), "class of %v", err)
			if tc.retry > 0 {
				var rl *channel.RateLimitedError
				require.ErrorAs(t, err, &rl)
				require.Equal(t, tc.retry, rl.RetryAfter)
			}
			if tc.kicked {
				require.ErrorIs(t, err, channel.ErrRejected, "a kick is definitive")
			}
			if tc.code != "" {
				var rj *channel.RejectedError
				require.ErrorAs(t, err, &rj)
				require.Equal(t, tc.code, rj.Code)
			}
			var ae *dingtalk.APIError
			if tc.class != channel.ClassTransient || tc.fail.Status >= 500 {
				require.ErrorAs(t, err, &ae)
				require.NotContains(t, ae.Error(), "session=")
			}
			// The next send works.
			_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "y"})
			require.NoError(t, err)
		})
	}
}

func TestSendRefusedLocally(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	for name, tc := range map[string]struct {
		out   channel.Outgoing
		class channel.ErrorClass
	}{
		"empty":         {channel.Outgoing{Chat: group, Text: " \n"}, channel.ClassRejected},
		"bad chat":      {channel.Outgoing{Chat: channel.Chat{Kind: "channel", ID: "x"}, Text: "x"}, channel.ClassRejected},
		"no chat id":    {channel.Outgoing{Chat: channel.Chat{Kind: channel.Group}, Text: "x"}, channel.ClassRejected},
		"too long":      {channel.Outgoing{Chat: group, Text: strings.Repeat("字", dingtalk.MaxMessageBytes/3+1)}, channel.ClassRejected},
		"invalid utf8":  {channel.Outgoing{Chat: group, Text: "a\xffb"}, channel.ClassRejected},
		"file id media": {channel.Outgoing{Chat: group, Media: []channel.Media{{FileID: "mIof"}}}, channel.ClassMediaInvalid},
		"not a picture": {channel.Outgoing{Chat: group, Media: []channel.Media{{URL: "https://x.example/a.mp4", MIME: "video/mp4"}}}, channel.ClassMediaInvalid},
		"ftp picture":   {channel.Outgoing{Chat: group, Media: []channel.Media{{URL: "ftp://x.example/a.png"}}}, channel.ClassMediaInvalid},
		"no route":      {channel.Outgoing{Chat: channel.Chat{Kind: channel.Private, ID: "$:LWCP_v1:$ext"}, Text: "x"}, channel.ClassRejected},
		"api too long":  {channel.Outgoing{Chat: group, Text: strings.Repeat("😀", dingtalk.MaxTextRunes)}, channel.ClassRejected},
	} {
		_, err := r.ch.Send(ctx, tc.out)
		require.Error(t, err, name)
		require.Equal(t, tc.class, channel.Classify(err), "%s: %v", name, err)
	}
	require.Empty(t, r.srv.Sent())
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := r.ch.Send(cctx, channel.Outgoing{Chat: group, Text: "x"})
	require.ErrorIs(t, err, context.Canceled)
}

func TestSendPlatformRefusals(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	r.srv.KickBot(groupID)
	_, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "x"})
	require.ErrorIs(t, err, channel.ErrKicked)
	require.True(t, channel.Classify(err).Definitive())

	r.srv.SetInvalidUser("ghost")
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Private, ID: "ghost"}, Text: "x"})
	require.Equal(t, channel.ClassRejected, channel.Classify(err), "%v", err)
}

func TestSendThrottledRobot(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	r := start(t, dingtalktest.Config{Clock: clk, SendsPerMinute: dingtalk.SendsPerMinute}, func(c *dingtalk.Config) {
		c.Clock = clk
	})
	ctx := tctx(t)
	r.converse(t, true, "hi")
	for i := range dingtalk.SendsPerMinute {
		_, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "n" + string(rune('a'+i))})
		require.NoError(t, err)
	}
	_, err := r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "one too many"})
	require.Equal(t, channel.ClassRateLimited, channel.Classify(err), "%v", err)
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "one too many"})
	require.Equal(t, channel.ClassRateLimited, channel.Classify(err), "%v (flow-controlled user)", err)
	clk.Advance(time.Minute)
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: group, Text: "a minute later"})
	require.NoError(t, err)
}

// TestMalformedSuccess: a 2xx answer whose body cannot be read means the
// message went out; it is not reported as an error (a retry would send it
// twice).
func TestMalformedSuccess(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpGroup, Status: 200, Body: "not json"})
	rc, err := r.ch.Send(tctx(t), channel.Outgoing{Chat: group, Text: "x", IdempotencyKey: "fp"})
	require.NoError(t, err)
	require.Regexp(t, `^dt-`, rc.MessageIDs[0])
	waitLog(t, r.logs, "dingtalk_answer_malformed", 1)
}

// TestCallDeadline: a call that hangs fails at CallTimeout.
func TestCallDeadline(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.CallTimeout = 50 * time.Millisecond })
	r.srv.FailNext(dingtalktest.Failure{Op: dingtalktest.OpGroup, Hang: true})
	_, err := r.ch.Send(tctx(t), channel.Outgoing{Chat: group, Text: "x"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, channel.ClassTransient, channel.Classify(err))
}

// TestWebhookFromElsewhereIsIgnored: a sessionWebhook on a host other than
// Config.WebhookBase is never posted to.
func TestWebhookFromElsewhereIsIgnored(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	data := `{"msgId":"msgX==","senderStaffId":"` + alice.StaffID + `","senderNick":"Alice","conversationType":"1","msgtype":"text","text":{"content":"x"},
		"sessionWebhook":"http://169.254.169.254/latest?session=a","sessionWebhookExpiredTime":` + strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10) + `}`
	_, err := r.srv.PushCallback(ctx, data)
	require.NoError(t, err)
	r.sink.waitMessage(t, "msgX==")
	waitLog(t, r.logs, "dingtalk_webhook_refused", 1)
	_, err = r.ch.Send(ctx, channel.Outgoing{Chat: dmAlice, Text: "answer"})
	require.NoError(t, err)
	require.Equal(t, dingtalktest.ViaOTO, r.srv.Sent()[0].Via)
}
