package dingtalk_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
)

// TestBadFramesAreDropped: frames that cannot be decoded are logged and
// dropped; the connection survives and the next message is delivered.
func TestBadFramesAreDropped(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.MaxFrameBytes = 4096 })
	ctx := tctx(t)
	for _, raw := range []string{
		``,
		`not json`,
		`[1,2]`,
		`{"headers":{"topic":"ping","messageId":"m1"}}`,
		`{"type":"SYSTEM","headers":["topic"],"data":"{}"}`,
		"{\"type\":\"CALLBACK\",\"headers\":{\"topic\":\"/v1.0/im/bot/messages/get\",\"messageId\":\"m2\"},\"data\":\"\xff\xfe\"}",
		`{"type":"CALLBACK","headers":{"topic":"/v1.0/im/bot/messages/get","messageId":"m3"},"data":"{\"msgId\":` + strings.Repeat("1", 5000) + `}"}`,
	} {
		require.NoError(t, r.srv.PushRaw(ctx, []byte(raw)))
	}
	require.NoError(t, r.srv.PushBinary(ctx, []byte(`{"type":"SYSTEM","headers":{"topic":"ping","messageId":"b"},"data":"{}"}`)))
	waitLog(t, r.logs, "dingtalk_frame_malformed", 6)
	waitLog(t, r.logs, "dingtalk_frame_too_large", 1)
	waitLog(t, r.logs, "dingtalk_frame_binary", 1)

	p, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "still here"})
	require.NoError(t, err)
	r.sink.waitMessage(t, p.MsgID)
	require.Len(t, r.sink.Events(), 1)
	require.Equal(t, 1, r.srv.Accepted(), "the connection survived")
	require.Empty(t, r.srv.AcksOf("b"))
}

// TestHugeFrameClosesTheConnection: a frame far over the limit (more than
// 16 × MaxFrameBytes) is not read to its end; the connection is closed and
// opened again.
func TestHugeFrameClosesTheConnection(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, func(c *dingtalk.Config) { c.MaxFrameBytes = 1000 })
	ctx := tctx(t)
	require.NoError(t, r.srv.PushRaw(ctx, []byte(strings.Repeat("x", 20000))))
	waitLog(t, r.logs, "dingtalk_frame_too_large", 1)
	require.NoError(t, r.srv.WaitAccepted(ctx, 2))
	p, err := r.srv.Push(ctx, dingtalktest.Incoming{From: alice, Text: "after the reconnect"})
	require.NoError(t, err)
	r.sink.waitMessage(t, p.MsgID)
}

// TestBadRobotMessages: robot messages that are malformed or of an
// unsupported type are acknowledged (delivering them again cannot help),
// logged, and never reach the sink; a message without a frame messageId
// is delivered but cannot be acknowledged.
func TestBadRobotMessages(t *testing.T) {
	t.Parallel()
	r := start(t, dingtalktest.Config{}, nil)
	ctx := tctx(t)
	bad := []string{
		`{"msgId":"m1"}`,
		`not json`,
		`{"msgId":"m2","senderStaffId":"u","conversationType":"1","msgtype":"text","text":{"content":""}}`,
		`{"msgId":"m3","senderStaffId":"u","conversationType":"9","msgtype":"text","text":{"content":"x"}}`,
		`{"msgId":"m4\u0000","senderStaffId":"u","conversationType":"1","msgtype":"text","text":{"content":"x"}}`,
	}
	for _, data := range bad {
		id, err := r.srv.PushCallback(ctx, data)
		require.NoError(t, err)
		a, err := r.srv.WaitAck(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 200, a.Code, data)
	}
	id, err := r.srv.PushCallback(ctx, `{"msgId":"m5","senderStaffId":"u","conversationType":"1","msgtype":"chatRecord","content":{}}`)
	require.NoError(t, err)
	_, err = r.srv.WaitAck(ctx, id)
	require.NoError(t, err)
	waitLog(t, r.logs, "dingtalk_message_malformed", len(bad))
	waitLog(t, r.logs, "dingtalk_message_skipped", 1)

	require.NoError(t, r.srv.PushRaw(ctx, []byte(`{"type":"CALLBACK","headers":{"topic":"/v1.0/im/bot/messages/get"},"data":"{\"msgId\":\"m6\",\"senderStaffId\":\"u\",\"conversationType\":\"1\",\"msgtype\":\"text\",\"text\":{\"content\":\"no frame id\"}}"}`)))
	ev := r.sink.waitMessage(t, "m6")
	require.Equal(t, "no frame id", ev.Text())
	require.Len(t, r.sink.Events(), 1, "only the good message reached the sink")
	for _, e := range r.sink.Events() {
		require.NoError(t, e.Validate())
	}
	require.Equal(t, channel.Private, ev.Chat.Kind)
}
