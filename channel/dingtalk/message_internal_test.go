package dingtalk

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

const testBot = "ding*****r3xc0b"

var frameTimeAt = time.UnixMilli(1690362102194)

// docGroupText is the robot message of the Stream protocol document
// (open-dingtalk/developerpedia docs/learn/stream/protocol.md), decoded,
// with the two defects of the document's escaped string fixed ("createA" → "createAt", the stray quoting
// around isInAtList).
const docGroupText = `{"conversationId":"cidAsXSBLnA==","atUsers":[{"dingtalkId":"$:LWCP_v1:$4*****TgHFUDZ8Qi8qr3"}],
 "chatbotCorpId":"ding9f*****cd16741","chatbotUserId":"$:LWCP_v1:$*****x3vTgHFUDZ8Qi8qr3",
 "msgId":"msgLICYe****HgY4JtMQw==","senderNick":"用户","isAdmin":true,"senderStaffId":"16650***698",
 "sessionWebhookExpiredTime":1690367502152,"createAt":1690362101894,"senderCorpId":"ding9*****d16741",
 "conversationType":"2","senderId":"$:LWCP_v1:***jqTgIfhRX9Q==","conversationTitle":"测试群","isInAtList":true,
 "sessionWebhook":"https://oapi.dingtalk.com/robot/sendBySession?session=76da36b4**********8f59e8",
 "text":{"content":" 测试数据"},"robotCode":"ding*****r3xc0b","msgtype":"text"}`

// The message type samples of developerpedia docs/learn/bot/message.md
// (one-to-one chats), body fields only; common is shared.
const docCommon = `"conversationId":"cide****P4g=","chatbotCorpId":"ding****6741","chatbotUserId":"$:LWC****ihY/",
 "senderNick":"张三","isAdmin":true,"senderStaffId":"042***297","sessionWebhookExpiredTime":1695289579622,
 "createAt":1695284179371,"senderCorpId":"ding****6741","conversationType":"1","senderId":"$:LWC****PA==",
 "sessionWebhook":"https://oapi.dingtalk.com/robot/sendBySession?session=79b4****4d4b","robotCode":"ding****c6gk"`

func doc(fields string) string { return "{" + docCommon + "," + fields + "}" }

func parse(t *testing.T, data string) inbound {
	t.Helper()
	in, err := parseBotMessage([]byte(data), testBot, frameTimeAt)
	require.NoError(t, err)
	require.NoError(t, in.ev.Validate())
	return in
}

func TestParseDocGroupText(t *testing.T) {
	t.Parallel()
	in := parse(t, docGroupText)
	ev := in.ev
	require.Equal(t, Platform, ev.Platform)
	require.Equal(t, testBot, ev.BotID)
	require.Equal(t, channel.KindMessage, ev.Kind)
	require.Equal(t, channel.Chat{Kind: channel.Group, ID: "cidAsXSBLnA=="}, ev.Chat)
	require.Equal(t, "msgLICYe****HgY4JtMQw==", ev.MessageID)
	require.Equal(t, channel.Sender{ID: "16650***698", Name: "用户"}, ev.Sender)
	require.Equal(t, time.UnixMilli(1690362101894), ev.Time)
	require.True(t, ev.ToMe)
	require.True(t, ev.Mentions(testBot))
	// The robot's own atUsers entry is the isInAtList mention; the other
	// one is a user.
	require.Equal(t, []channel.Segment{channel.Mention(testBot), channel.Mention("$:LWCP_v1:$4*****TgHFUDZ8Qi8qr3"), channel.Text(" 测试数据")}, ev.Segments)
	require.Equal(t, " 测试数据", ev.Text())
	require.Equal(t, channel.SourceLive, ev.Source)
	require.JSONEq(t, docGroupText, string(ev.Raw))
	require.Equal(t, "https://oapi.dingtalk.com/robot/sendBySession?session=76da36b4**********8f59e8", in.webhook)
	require.Equal(t, time.UnixMilli(1690367502152), in.expires)
}

func TestParseDocTypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fields string
		want   []channel.Segment
	}{
		{"text", `"msgId":"msgY****Pw==","msgtype":"text","text":{"content":"hello DingTalk!"}`,
			[]channel.Segment{channel.Text("hello DingTalk!")}},
		{"picture", `"msgId":"msgg*****fg==","msgtype":"picture","content":{"pictureDownloadCode":"pWjA****ks=","downloadCode":"mIof****JE0E"}`,
			[]channel.Segment{channel.Image(channel.Media{FileID: "mIof****JE0E"})}},
		{"video", `"msgId":"msgu****nw==","msgtype":"video","content":{"duration":"5","videoType":"mp4","downloadCode":"mIof****SaqP"}`,
			[]channel.Segment{{Type: channel.SegVideo, Media: &channel.Media{FileID: "mIof****SaqP", Duration: 5, MIME: "video/mp4"}}}},
		{"audio", `"msgId":"msg8****SA==","msgtype":"audio","content":{"downloadCode":"mIof****7g==","recognition":"钉钉PaaS开放中心，致力为企业……"}`,
			[]channel.Segment{{Type: channel.SegVoice, Media: &channel.Media{FileID: "mIof****7g==", Transcript: "钉钉PaaS开放中心，致力为企业……"}}}},
		{"file", `"msgId":"msg2****kg==","msgtype":"file","content":{"spaceId":"223***573","fileName":"foobar.zip","downloadCode":"LJYY****bw==","fileId":"117***848"}`,
			[]channel.Segment{{Type: channel.SegFile, Media: &channel.Media{FileID: "LJYY****bw==", Name: "foobar.zip"}}}},
		{"richText", `"msgId":"msg4****cg==","msgtype":"richText","content":{"richText":[{"text":"这个问题示例图如下："},
			{"pictureDownloadCode":"pWjA****SjIg","downloadCode":"mIof****7A==","type":"picture"},{"text":"通过以上示意图可以明白完整的交互流程"}]}`,
			[]channel.Segment{channel.Text("这个问题示例图如下："), channel.Image(channel.Media{FileID: "mIof****7A=="}), channel.Text("通过以上示意图可以明白完整的交互流程")}},
		// developerpedia docs/learn/stream/faq.md §8: a picture in a
		// richText with the robot's @name as text.
		{"richTextFAQ", `"msgId":"msgFAQ==","msgtype":"richText","content":{"richText":[{"text":"@SDK示例"},
			{"pictureDownloadCode":"1lOlaJWGsEAMhw******EAO","downloadCode":"mIofN681YE3f*****3madCkipB","type":"picture"}]}`,
			[]channel.Segment{channel.Text("@SDK示例"), channel.Image(channel.Media{FileID: "mIofN681YE3f*****3madCkipB"})}},
		{"pictureOnlyPictureCode", `"msgId":"msgP==","msgtype":"picture","content":{"pictureDownloadCode":"pWjA"}`,
			[]channel.Segment{channel.Image(channel.Media{FileID: "pWjA"})}},
		{"contentAsString", `"msgId":"msgS==","msgtype":"picture","content":"{\"downloadCode\":\"abc\"}"`,
			[]channel.Segment{channel.Image(channel.Media{FileID: "abc"})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := parse(t, doc(tc.fields))
			require.Equal(t, tc.want, in.ev.Segments)
			require.Equal(t, channel.Chat{Kind: channel.Private, ID: "042***297"}, in.ev.Chat, "a one-to-one chat is the peer's staff id")
			require.False(t, in.ev.ToMe)
			require.Equal(t, time.UnixMilli(1695284179371), in.ev.Time)
		})
	}
}

func TestParseSkippedAndMalformed(t *testing.T) {
	t.Parallel()
	skipped := []string{
		// The "unsupported type" sample of docs/learn/bot/message.md.
		doc(`"msgId":"msgN****Uw==","ai_robot_sessionid":"","msgtype":"unknownMsgType","content":{"unknownMsgType":"用户发送了一条消息，机器人暂不支持接收。"}`),
		doc(`"msgId":"m1","msgtype":"interactiveCard","content":{}`),
	}
	for _, s := range skipped {
		_, err := parseBotMessage([]byte(s), testBot, frameTimeAt)
		require.ErrorIs(t, err, errSkipped, s)
	}
	long := strings.Repeat("x", maxID+1)
	malformed := map[string]string{
		"not json":               `{"msgId":`,
		"array":                  `[]`,
		"invalid utf8":           "{\"msgId\":\"m\xff\"}",
		"no msgId":               doc(`"msgtype":"text","text":{"content":"x"}`),
		"long msgId":             doc(`"msgId":"` + long + `","msgtype":"text","text":{"content":"x"}`),
		"control in msgId":       doc(`"msgId":"m\u0001","msgtype":"text","text":{"content":"x"}`),
		"empty text":             doc(`"msgId":"m","msgtype":"text","text":{"content":""}`),
		"no text":                doc(`"msgId":"m","msgtype":"text"`),
		"picture without code":   doc(`"msgId":"m","msgtype":"picture","content":{}`),
		"picture content number": doc(`"msgId":"m","msgtype":"picture","content":5`),
		"richText empty":         doc(`"msgId":"m","msgtype":"richText","content":{"richText":[]}`),
		"bad createAt":           doc(`"msgId":"m","msgtype":"text","text":{"content":"x"},"createAt":{}`),
		"bad isInAtList":         doc(`"msgId":"m","msgtype":"text","text":{"content":"x"},"isInAtList":"maybe"`),
		"atUsers not a list":     doc(`"msgId":"m","msgtype":"text","text":{"content":"x"},"atUsers":{}`),
		"SDK unit test form":     `{"conversationId":"cidxxx","msgId":"msgxxx","senderNick":"Alice","msgtype":"text","robotCode":"ding0f4lethz0fonxvz6","text":{"content":"hello"}}`,
	}
	for name, s := range malformed {
		_, err := parseBotMessage([]byte(s), testBot, frameTimeAt)
		require.ErrorIs(t, err, errMalformed, name)
	}
	for name, s := range map[string]string{
		"conversationType 3": `{"msgId":"m","senderStaffId":"u","conversationType":"3","msgtype":"text","text":{"content":"x"}}`,
		"group without id":   `{"msgId":"m","senderStaffId":"u","conversationType":"2","msgtype":"text","text":{"content":"x"}}`,
		"no sender":          `{"msgId":"m","conversationType":"1","msgtype":"text","text":{"content":"x"}}`,
	} {
		_, err := parseBotMessage([]byte(s), testBot, frameTimeAt)
		require.ErrorIs(t, err, errMalformed, name)
	}
}

func TestParseDetails(t *testing.T) {
	t.Parallel()
	t.Run("sender without staff id", func(t *testing.T) {
		in := parse(t, `{"msgId":"m","senderId":"$:LWCP_v1:$ext","conversationType":"1","msgtype":"text","text":{"content":"x"}}`)
		require.Equal(t, "$:LWCP_v1:$ext", in.ev.Sender.ID)
		require.Equal(t, channel.Chat{Kind: channel.Private, ID: "$:LWCP_v1:$ext"}, in.ev.Chat)
		require.Equal(t, frameTimeAt, in.ev.Time, "no createAt: the frame's time")
		require.Empty(t, in.webhook)
	})
	t.Run("numbers as strings", func(t *testing.T) {
		in := parse(t, `{"msgId":"m","senderStaffId":"u","conversationType":"1","msgtype":"text","text":{"content":"x"},
			"createAt":"1695284179371","sessionWebhook":"https://oapi.dingtalk.com/robot/sendBySession?session=a","sessionWebhookExpiredTime":"1695289579622","isInAtList":"true"}`)
		require.Equal(t, time.UnixMilli(1695284179371), in.ev.Time)
		require.Equal(t, time.UnixMilli(1695289579622), in.expires)
		require.True(t, in.ev.ToMe)
	})
	t.Run("webhook without expiry is not kept", func(t *testing.T) {
		in := parse(t, `{"msgId":"m","senderStaffId":"u","conversationType":"1","msgtype":"text","text":{"content":"x"},
			"sessionWebhook":"https://oapi.dingtalk.com/robot/sendBySession?session=a"}`)
		require.Empty(t, in.webhook)
	})
	t.Run("mentions", func(t *testing.T) {
		in := parse(t, `{"msgId":"m","senderStaffId":"u","conversationType":"2","conversationId":"c","chatbotUserId":"$:bot",
			"isInAtList":false,"atUsers":[{"dingtalkId":"$:bot"},{"dingtalkId":"$:a","staffId":"alice"},{"dingtalkId":"$:b"},{"dingtalkId":"$:a","staffId":"alice"},{}],
			"msgtype":"text","text":{"content":"@Alice @Bob hi"}}`)
		require.False(t, in.ev.ToMe)
		require.Equal(t, []channel.Segment{channel.Mention("alice"), channel.Mention("$:b"), channel.Text("@Alice @Bob hi")}, in.ev.Segments)
	})
	t.Run("reply", func(t *testing.T) {
		in := parse(t, `{"msgId":"m2","senderStaffId":"u","conversationType":"2","conversationId":"c","chatbotUserId":"$:bot",
			"msgtype":"text","text":{"content":"继续","isReplyMsg":true,"repliedMsg":{"msgId":"m1","msgType":"text","senderId":"$:bot",
			"senderNick":"Robot","content":{"text":"上一条"},"createdAt":1}}}`)
		require.Equal(t, "m1", in.ev.QuoteID())
		require.Equal(t, []channel.Segment{channel.Quote("m1"), channel.Text("继续")}, in.ev.Segments)
		require.NotNil(t, in.ev.Quoted)
		require.True(t, in.ev.Quoted.FromBot)
		require.Equal(t, "上一条", in.ev.Quoted.Text)
		require.Equal(t, "Robot", in.ev.Quoted.Sender.Name)
	})
	t.Run("reply with richText and plain content", func(t *testing.T) {
		in := parse(t, `{"msgId":"m2","senderStaffId":"u","conversationType":"1","msgtype":"text","text":{"content":"x","isReplyMsg":true,
			"repliedMsg":{"msgId":"m1","msgType":"richText","senderId":"s","content":{"richText":[{"msgType":"text","content":"a"},{"type":"text","text":"b"},{"msgType":"picture","downloadCode":"d"}]}}}}`)
		require.Equal(t, "ab", in.ev.Quoted.Text)
		in = parse(t, `{"msgId":"m2","senderStaffId":"u","conversationType":"1","msgtype":"text","text":{"content":"x","isReplyMsg":"true",
			"repliedMsg":{"msgId":"m1","content":"plain words"}}}`)
		require.Equal(t, "plain words", in.ev.Quoted.Text)
		in = parse(t, `{"msgId":"m2","senderStaffId":"u","conversationType":"1","msgtype":"text","text":{"content":"x","isReplyMsg":true,"repliedMsg":{}}}`)
		require.Nil(t, in.ev.Quoted, "no quoted id: no quote")
		require.Equal(t, []channel.Segment{channel.Text("x")}, in.ev.Segments)
	})
	t.Run("self", func(t *testing.T) {
		in := parse(t, `{"msgId":"m","senderId":"$:bot","senderStaffId":"","chatbotUserId":"$:bot","conversationType":"2","conversationId":"c","msgtype":"text","text":{"content":"x"}}`)
		require.Equal(t, channel.KindSelf, in.ev.Kind)
		require.True(t, in.ev.Sender.IsBot)
	})
	t.Run("control characters in names are dropped", func(t *testing.T) {
		in := parse(t, `{"msgId":"m","senderStaffId":"u","senderNick":"A\u0000l\u001bice","conversationType":"1","msgtype":"file","content":{"downloadCode":"d","fileName":"a\nb.txt"}}`)
		require.Equal(t, "Alice", in.ev.Sender.Name)
		require.Equal(t, "ab.txt", in.ev.Segments[0].Media.Name)
	})
	t.Run("bad video type is not a MIME", func(t *testing.T) {
		in := parse(t, `{"msgId":"m","senderStaffId":"u","conversationType":"1","msgtype":"video","content":{"downloadCode":"d","videoType":"mp4; x=<y>","duration":"-3"}}`)
		require.Empty(t, in.ev.Segments[0].Media.MIME)
		require.Zero(t, in.ev.Segments[0].Media.Duration)
	})
	t.Run("raw is a copy", func(t *testing.T) {
		data := []byte(doc(`"msgId":"m","msgtype":"text","text":{"content":"x"}`))
		in, err := parseBotMessage(data, testBot, frameTimeAt)
		require.NoError(t, err)
		data[0] = 'X'
		require.True(t, json.Valid(in.ev.Raw))
	})
}

func TestDecodeFrame(t *testing.T) {
	t.Parallel()
	// The ping of the protocol document, without its trailing comma.
	f, err := DecodeFrame([]byte(`{"type":"SYSTEM","headers":{"topic":"ping","messageId":"213d841d_972_1898bb26334_70a7","contentType":"application/json"},"data":"{\"opaque\" : \"123-dsfs\"}"}`))
	require.NoError(t, err)
	require.Equal(t, FrameSystem, f.Type)
	require.Equal(t, TopicPing, f.Topic())
	require.Equal(t, "213d841d_972_1898bb26334_70a7", f.MessageID())
	require.Equal(t, `{"opaque" : "123-dsfs"}`, f.Data)

	// The EVENT example of the document (headers with a number-like time
	// as text) and its variant spelled "header" with a numeric time.
	f, err = DecodeFrame([]byte(`{"specVersion":"1.0","type":"EVENT","header":{"topic":"*","messageId":"x","time":1683533823336,"flag":true,"n":null},"data":{"a":1}}`))
	require.NoError(t, err)
	require.Equal(t, "1683533823336", f.Headers["time"])
	require.Equal(t, "true", f.Headers["flag"])
	require.NotContains(t, f.Headers, "n")
	require.Equal(t, `{"a":1}`, f.Data, "an embedded object is kept as text")
	require.Equal(t, int64(1683533823336), frameTime(&f))

	for name, s := range map[string]string{
		"empty":          ``,
		"not json":       `{`,
		"array":          `[1]`,
		"no type":        `{"headers":{}}`,
		"headers array":  `{"type":"SYSTEM","headers":[]}`,
		"header object":  `{"type":"SYSTEM","headers":{"topic":{}}}`,
		"data bad":       `{"type":"SYSTEM","data":"\ud800x`,
		"invalid utf8":   "{\"type\":\"SYSTEM\xff\"}",
		"too many heads": `{"type":"SYSTEM","headers":{` + manyHeaders() + `}}`,
		"long header":    `{"type":"SYSTEM","headers":{"topic":"` + strings.Repeat("a", maxHeaderValue+1) + `"}}`,
	} {
		_, err := DecodeFrame([]byte(s))
		require.ErrorIs(t, err, ErrMalformedFrame, name)
	}
}

func manyHeaders() string {
	var b strings.Builder
	for i := range maxHeaders + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"h` + strings.Repeat("x", i) + `":"v"`)
	}
	return b.String()
}

func TestEncodeAck(t *testing.T) {
	t.Parallel()
	b := EncodeAck(newAck("212ca9d7_974_1898c159aa6_1783b", AckOK, "OK", ackDataBot))
	// The bot message response of the protocol document.
	require.JSONEq(t, `{"code":200,"headers":{"contentType":"application/json","messageId":"212ca9d7_974_1898c159aa6_1783b"},"message":"OK","data":"{\"response\":null}"}`, string(b))
	b = EncodeAck(newAck("m", AckFailed, "not stored", ackDataLater))
	var a struct {
		Data string `json:"data"`
	}
	require.NoError(t, json.Unmarshal(b, &a))
	var d struct {
		Status string `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.Data), &d))
	require.Equal(t, "LATER", d.Status)
	require.JSONEq(t, `{"code":0,"headers":{},"message":"","data":""}`, string(EncodeAck(Ack{})))
}

func TestFlexInt(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{`5`: 5, `"5"`: 5, `" 7 "`: 7, `""`: 0, `null`: 0, `-3`: -3} {
		var n flexInt
		require.NoError(t, json.Unmarshal([]byte(in), &n), in)
		require.Equal(t, want, int64(n), in)
	}
	for _, in := range []string{`1.5`, `"x"`, `true`, `{}`, `[]`, `1e3`} {
		var n flexInt
		require.Error(t, json.Unmarshal([]byte(in), &n), in)
	}
	require.True(t, errors.Is(errSkipped, errSkipped))
}
