package wecom_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/wecom"
	"github.com/personakit/persona/channel/wecom/wecomtest"
	"github.com/personakit/persona/clock"
)

// aibotEnv is an AI bot on callbacks with a fake clock and manual polls.
func aibotEnv(t *testing.T, adapter func(*wecom.Config)) (*env, *clock.Fake, *recSink) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e := newEnv(t, wecomtest.ModeAIBot, func(c *wecomtest.Config) { c.Clock, c.ManualPoll = clk, true }, func(c *wecom.Config) {
		c.Clock = clk
		if adapter != nil {
			adapter(c)
		}
	})
	sink := newRecSink()
	run(t, e.ch, sink)
	sink.waitOnline(t, true)
	return e, clk, sink
}

// TestAIBotCallbackStream: the answer to a message is an empty stream;
// chunks join it and WeCom's polls show them; it finishes after
// StreamIdle without a chunk; a chunk after that goes through the
// response_url once; then there is no way left to answer.
func TestAIBotCallbackStream(t *testing.T) {
	t.Parallel()
	e, clk, sink := aibotEnv(t, nil)
	ctx := tctx(t)
	m, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "讲个笑话"})
	require.NoError(t, err)
	ev := sink.waitEvents(t, 1)[0]
	require.Equal(t, m.ID, ev.MessageID)
	require.Equal(t, alice, ev.Chat)
	require.Equal(t, e.srv.BotID(), ev.BotID)
	require.Equal(t, "讲个笑话", ev.Text())
	require.True(t, ev.ToMe)
	v, ok := e.srv.StreamOf(m.ID)
	require.True(t, ok, "the callback was answered with a stream")
	require.Equal(t, wecom.StreamID(m.ID), v.ID)
	require.False(t, v.Finished)
	require.Empty(t, v.Content)

	rc1, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "从前有座山", IdempotencyKey: "c0"})
	require.NoError(t, err)
	v, err = e.srv.PollStream(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, "从前有座山", v.Content)
	require.False(t, v.Finished)

	clk.Advance(3 * time.Second)
	rc2, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "山里有座庙", IdempotencyKey: "c1"})
	require.NoError(t, err)
	require.Equal(t, []string{v.ID + "#0"}, rc1.MessageIDs)
	require.Equal(t, []string{v.ID + "#1"}, rc2.MessageIDs)
	// The pipeline sending chunk 1 again (after an error it saw) adds
	// nothing.
	again, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "山里有座庙", IdempotencyKey: "c1"})
	require.NoError(t, err)
	require.Equal(t, rc2.MessageIDs, again.MessageIDs)

	clk.Advance(wecom.DefaultStreamIdle - time.Second)
	v, err = e.srv.PollStream(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, "从前有座山\n\n山里有座庙", v.Content)
	require.False(t, v.Finished, "still within StreamIdle of the last chunk")
	clk.Advance(time.Second)
	v, err = e.srv.PollStream(ctx, v.ID)
	require.NoError(t, err)
	require.True(t, v.Finished)
	require.Equal(t, "从前有座山\n\n山里有座庙", v.Content)

	// Finished: the next chunk goes through the response_url, once.
	rc3, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "后来呢？", IdempotencyKey: "c2"})
	require.NoError(t, err)
	require.NotEmpty(t, rc3.MessageIDs)
	sent := e.srv.Sent()
	require.Len(t, sent, 2)
	require.Equal(t, "aibot/response", sent[1].Op)
	require.Equal(t, "后来呢？", sent[1].Text)
	require.Equal(t, m.ID, sent[1].ReplyTo)

	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "no way left"})
	var rj *channel.RejectedError
	require.ErrorAs(t, err, &rj)
	require.Equal(t, "no_reply_path", rj.Code)
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: channel.Chat{Kind: channel.Private, ID: "stranger"}, Text: "hello?"})
	require.ErrorAs(t, err, &rj, "an AI bot on callbacks cannot write first")
}

// TestAIBotCallbackGroup: a group @-message becomes a mention of the bot;
// the reply quoting it joins its stream even while another stream of the
// chat is in progress; the retried callback of a message gets the same
// stream.
func TestAIBotCallbackGroup(t *testing.T) {
	t.Parallel()
	e, _, sink := aibotEnv(t, nil)
	ctx := tctx(t)
	m1, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: room, From: "bob", Text: "第一个问题"})
	require.NoError(t, err)
	m2, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: room, From: "carol", Text: "第二个问题"})
	require.NoError(t, err)
	evs := sink.waitEvents(t, 2)
	ev := evs[0]
	require.Equal(t, room, ev.Chat)
	require.Equal(t, "bob", ev.Sender.ID)
	require.True(t, ev.Mentions(e.srv.BotID()))
	require.Equal(t, "第一个问题", ev.Text(), "the mention is a segment, not text")
	require.Equal(t, channel.SegMention, ev.Segments[0].Type)
	require.Equal(t, "@"+e.srv.BotName(), ev.Segments[0].Text)

	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: room, Text: "回答二", ReplyTo: m2.ID})
	require.NoError(t, err)
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: room, Text: "回答一", ReplyTo: m1.ID})
	require.NoError(t, err)
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: room, Text: "回答一（续）"})
	require.NoError(t, err)
	for id, want := range map[string]string{m1.ID: "回答一\n\n回答一（续）", m2.ID: "回答二"} {
		v, _ := e.srv.StreamOf(id)
		v, err = e.srv.PollStream(ctx, v.ID)
		require.NoError(t, err)
		require.Equal(t, want, v.Content)
	}

	// WeCom posts m1 again (an answer it did not get): the sink sees it
	// again (the pipeline drops the repeat) and the stream is the same.
	status, body, err := e.srv.PushRaw(ctx, m1.Plain)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	plain, err := e.srv.OpenReply(body)
	require.NoError(t, err)
	var r struct {
		Stream struct {
			ID      string `json:"id"`
			Content string `json:"content"`
		} `json:"stream"`
	}
	require.NoError(t, json.Unmarshal(plain, &r))
	require.Equal(t, wecom.StreamID(m1.ID), r.Stream.ID)
	require.Equal(t, "回答一\n\n回答一（续）", r.Stream.Content)
	require.Len(t, sink.waitEvents(t, 3), 3)
}

// TestAIBotCallbackMessageTypes: mixed, image, voice and file messages,
// quotes resolved against recent messages, pictures decrypted with the
// EncodingAESKey.
func TestAIBotCallbackMessageTypes(t *testing.T) {
	t.Parallel()
	e, _, sink := aibotEnv(t, nil)
	ctx := tctx(t)
	pic := []byte("GIF89a tiny picture")
	link, key := e.srv.AddAIBotMedia(pic)
	require.Empty(t, key, "callback messages carry no aeskey")

	first, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: room, From: "bob", Text: "看这个", Image: &wecomtest.Media{URL: link}})
	require.NoError(t, err)
	_, err = e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Voice: &wecomtest.Voice{Recognition: "语音转成的文字"}})
	require.NoError(t, err)
	_, err = e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, File: &wecomtest.Media{URL: link}})
	require.NoError(t, err)
	quote, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: room, From: "carol", Text: "同意", QuoteID: first.ID})
	require.NoError(t, err)
	evs := sink.waitEvents(t, 4)

	mixed := evs[0]
	require.Equal(t, "看这个", mixed.Text())
	require.True(t, mixed.Has(channel.SegImage))
	img := mixed.Segments[len(mixed.Segments)-1]
	require.Equal(t, channel.SegImage, img.Type)
	require.Equal(t, link, img.Media.URL)
	mc, err := e.ch.FetchMedia(ctx, room, *img.Media, channel.MediaRequest{Type: channel.SegImage, MaxBytes: 1 << 20})
	require.NoError(t, err)
	got, err := io.ReadAll(mc.Body)
	require.NoError(t, err)
	require.NoError(t, mc.Body.Close())
	require.Equal(t, pic, got)
	_, err = e.ch.FetchMedia(ctx, room, *img.Media, channel.MediaRequest{MaxBytes: 4})
	require.ErrorIs(t, err, channel.ErrMediaTooLarge)

	voice := evs[1]
	require.Equal(t, channel.SegVoice, voice.Segments[0].Type)
	require.Equal(t, "语音转成的文字", voice.Segments[0].Media.Transcript)
	require.Equal(t, "语音转成的文字", voice.TextAndSpeech())
	require.Equal(t, channel.SegFile, evs[2].Segments[0].Type)

	q := evs[3]
	require.Equal(t, quote.ID, q.MessageID)
	require.Equal(t, first.ID, q.QuoteID(), "resolved from the quoted text")
	require.NotNil(t, q.Quoted)
	require.Equal(t, "bob", q.Quoted.Sender.ID)
	require.Equal(t, "同意", q.Text())
}

// TestAIBotCallbackStreamBounds: a stream holds at most 20,480 bytes — a
// chunk that would overflow it finishes it and goes through the
// response_url — and a stream without chunks finishes StreamMaxAge after
// the message.
func TestAIBotCallbackStreamBounds(t *testing.T) {
	t.Parallel()
	e, clk, sink := aibotEnv(t, nil)
	ctx := tctx(t)
	m, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "long please"})
	require.NoError(t, err)
	sink.waitEvents(t, 1)
	chunk := strings.Repeat("字", 680) // 2040 bytes
	for range 10 {
		_, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: chunk})
		require.NoError(t, err)
	}
	_, err = e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: chunk})
	require.NoError(t, err)
	v, _ := e.srv.StreamOf(m.ID)
	v, err = e.srv.PollStream(ctx, v.ID)
	require.NoError(t, err)
	require.True(t, v.Finished, "full: finished")
	require.Len(t, v.Content, 10*2040+9*2)
	require.LessOrEqual(t, len(v.Content), wecom.MaxStreamBytes)
	var ops []string
	for _, x := range e.srv.Sent() {
		ops = append(ops, x.Op)
	}
	require.Contains(t, ops, "aibot/response", "the 11th chunk")

	m2, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "never answered"})
	require.NoError(t, err)
	sink.waitEvents(t, 2)
	v2, _ := e.srv.StreamOf(m2.ID)
	clk.Advance(wecom.DefaultStreamMaxAge - time.Second)
	v2, err = e.srv.PollStream(ctx, v2.ID)
	require.NoError(t, err)
	require.False(t, v2.Finished)
	clk.Advance(time.Second)
	v2, err = e.srv.PollStream(ctx, v2.ID)
	require.NoError(t, err)
	require.True(t, v2.Finished)
	require.Empty(t, v2.Content)
}

// TestAIBotCallbackRestart: with StateDir, a new process goes on
// answering the polls of a stream the old one opened, with the chunks it
// sent, and appends the rest of the reply; without StateDir an unknown
// stream is taken up empty and filled by the reply quoting its message.
func TestAIBotCallbackRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := wecomtest.New(wecomtest.Config{Mode: wecomtest.ModeAIBot, Clock: clk, ManualPoll: true})
	t.Cleanup(srv.Close)
	start := func(stateDir string) (*wecom.Channel, *recSink, func() error) {
		cfg := adapterConfig(srv)
		cfg.Clock, cfg.StateDir = clk, stateDir
		ch, err := wecom.New(cfg)
		require.NoError(t, err)
		hook := newHook(t, ch)
		srv.SetCallbackURL(hook)
		sink := newRecSink()
		stop := run(t, ch, sink)
		sink.waitOnline(t, true)
		return ch, sink, stop
	}
	ctx := tctx(t)
	ch1, sink1, stop1 := start(dir)
	m, err := srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "question"})
	require.NoError(t, err)
	sink1.waitEvents(t, 1)
	_, err = ch1.Send(ctx, channel.Outgoing{Chat: alice, Text: "part one", IdempotencyKey: "p0"})
	require.NoError(t, err)
	require.NoError(t, stop1())

	ch2, _, _ := start(dir)
	v, _ := srv.StreamOf(m.ID)
	v, err = srv.PollStream(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, "part one", v.Content, "the new process knows the stream")
	_, err = ch2.Send(ctx, channel.Outgoing{Chat: alice, Text: "part two", IdempotencyKey: "p1"})
	require.NoError(t, err)
	_, err = ch2.Send(ctx, channel.Outgoing{Chat: alice, Text: "part one", IdempotencyKey: "p0"})
	require.NoError(t, err, "a chunk already in the stream is not added twice")
	v, err = srv.PollStream(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, "part one\n\npart two", v.Content)

	// Without StateDir the stream is unknown to a new process: it is
	// taken up empty, and the reply quoting the message fills it.
	ch3, _, _ := start("")
	m2, err := srv.Push(ctx, wecomtest.Incoming{Chat: room, From: "bob", Text: "x"})
	require.NoError(t, err)
	ch4, _, _ := start("")
	v2, _ := srv.StreamOf(m2.ID)
	v2, err = srv.PollStream(ctx, v2.ID)
	require.NoError(t, err)
	require.Empty(t, v2.Content)
	_, err = ch4.Send(ctx, channel.Outgoing{Chat: room, Text: "answer", ReplyTo: m2.ID})
	require.NoError(t, err)
	v2, err = srv.PollStream(ctx, v2.ID)
	require.NoError(t, err)
	require.Equal(t, "answer", v2.Content)
	_ = ch3
}

// TestAIBotCallbackSkips: events, unknown types, broken messages, another
// bot's callbacks and response_urls off the API host.
func TestAIBotCallbackSkips(t *testing.T) {
	t.Parallel()
	log, buf := newLogger()
	e, _, sink := aibotEnv(t, func(c *wecom.Config) { c.BotID, c.Logger = wecomtest.DefaultBotID, log })
	ctx := tctx(t)
	for name, plain := range map[string]string{
		"enter_chat":    `{"msgid":"e1","aibotid":"` + wecomtest.DefaultBotID + `","chattype":"single","from":{"userid":"alice"},"msgtype":"event","event":{"eventtype":"enter_chat"}}`,
		"unknown type":  `{"msgid":"e2","aibotid":"` + wecomtest.DefaultBotID + `","chattype":"single","from":{"userid":"alice"},"msgtype":"hologram"}`,
		"no msgid":      `{"aibotid":"` + wecomtest.DefaultBotID + `","chattype":"single","from":{"userid":"alice"},"msgtype":"text","text":{"content":"x"}}`,
		"another bot":   `{"msgid":"e3","aibotid":"someone-else","chattype":"single","from":{"userid":"alice"},"msgtype":"text","text":{"content":"x"}}`,
		"group no chat": `{"msgid":"e4","chattype":"group","from":{"userid":"alice"},"msgtype":"text","text":{"content":"x"}}`,
		"bad chattype":  `{"msgid":"e5","chattype":"channel","from":{"userid":"alice"},"msgtype":"text","text":{"content":"x"}}`,
		"empty text":    `{"msgid":"e6","chattype":"single","from":{"userid":"alice"},"msgtype":"text","text":{"content":""}}`,
		"stream no id":  `{"msgid":"e7","chattype":"single","from":{"userid":"alice"},"msgtype":"stream","stream":{}}`,
	} {
		status, _, err := e.srv.PushRaw(ctx, []byte(plain))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, name)
	}
	require.Empty(t, sink.Received())
	require.Contains(t, buf.String(), "wecom_message_invalid")

	evil := `{"msgid":"e8","aibotid":"` + wecomtest.DefaultBotID + `","chattype":"single","from":{"userid":"alice"},` +
		`"response_url":"https://evil.example/steal","msgtype":"text","text":{"content":"hi"},"create_time":"1700000000"}`
	status, _, err := e.srv.PushRaw(ctx, []byte(evil))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	ev := sink.waitEvents(t, 1)[0]
	require.Equal(t, time.Unix(1_700_000_000, 0), ev.Time, "create_time as a string")
	require.Contains(t, buf.String(), "wecom_response_url_ignored")
}

// newHook serves ch on a loopback server and returns its callback URL.
func newHook(t *testing.T, ch *wecom.Channel) string {
	t.Helper()
	hs := httptestServer(t, ch)
	return hs + "/wecom"
}

// gateSink refuses the first event after holding it until released; it
// accepts the others.
type gateSink struct {
	*recSink
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (g *gateSink) HandleEvent(ctx context.Context, ev channel.Event) error {
	if g.calls.Add(1) == 1 {
		close(g.entered)
		<-g.release
		return errors.New("refused late")
	}
	return g.recSink.HandleEvent(ctx, ev)
}

// TestAIBotCallbackLateRefusal: WeCom's retry of a callback arrives while
// the first delivery is still in the sink; the retry is accepted and
// answered with the stream; then the first delivery is refused. The
// stream stays: a reply to the message joins it.
func TestAIBotCallbackLateRefusal(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	e := newEnv(t, wecomtest.ModeAIBot, func(c *wecomtest.Config) { c.Clock, c.ManualPoll = clk, true },
		func(c *wecom.Config) { c.Clock = clk })
	sink := &gateSink{recSink: newRecSink(), entered: make(chan struct{}), release: make(chan struct{})}
	run(t, e.ch, sink)
	sink.waitOnline(t, true)
	ctx := tctx(t)

	// The message, built by the fake without reaching the adapter.
	e.srv.SetCallbackURL(httptestServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	m, err := e.srv.Push(ctx, wecomtest.Incoming{Chat: alice, Text: "在吗"})
	require.NoError(t, err)
	e.srv.SetCallbackURL(e.hook.URL + "/wecom")

	first := make(chan int, 1)
	go func() {
		status, _, err := e.srv.PushRaw(ctx, m.Plain)
		if err != nil {
			status = -1
		}
		first <- status
	}()
	select {
	case <-sink.entered:
	case <-ctx.Done():
		t.Fatal("the first delivery never reached the sink")
	}
	status, body, err := e.srv.PushRaw(ctx, m.Plain) // the retry
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	plain, err := e.srv.OpenReply(body)
	require.NoError(t, err)
	require.Contains(t, string(plain), wecom.StreamID(m.ID))
	close(sink.release)
	require.Equal(t, http.StatusServiceUnavailable, <-first)

	rc, err := e.ch.Send(ctx, channel.Outgoing{Chat: alice, Text: "在的", ReplyTo: m.ID, IdempotencyKey: "k0"})
	require.NoError(t, err, "the stream the retry answered with is still there")
	require.Equal(t, []string{wecom.StreamID(m.ID) + "#0"}, rc.MessageIDs)
}
