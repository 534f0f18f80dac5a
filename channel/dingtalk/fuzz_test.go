package dingtalk

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// Seeds: the documented payloads, the protocol document's frames, and
// hostile variants (the files under testdata/fuzz add more).
var frameSeeds = []string{
	`{"type":"SYSTEM","headers":{"topic":"ping","messageId":"213d841d_972_1898bb26334_70a7","contentType":"application/json"},"data":"{\"opaque\" : \"123-dsfs\"}"}`,
	`{"type":"SYSTEM","headers":{"topic":"disconnect","contentType":"application/json"},"data":"{\"reason\" : \"connection is expired\"}"}`,
	`{"specVersion":"1.0","type":"EVENT","header":{"topic":"*","messageId":"m","time":"1683533823336","eventType":"user_add_org"},"data":"{\"timeStamp\" : \"1685501863357\"}"}`,
	`{"specVersion":"1.0","type":"CALLBACK","headers":{"appId":"a","contentType":"application/json","messageId":"212ca9d7_974_1898c159aa6_1783b","time":"1690362102194","topic":"/v1.0/im/bot/messages/get"},"data":` + jsonString(docGroupTextSeed) + `}`,
	`{"type":"CALLBACK","headers":{"topic":"/v1.0/im/bot/messages/get","messageId":1},"data":{"msgId":"x"}}`,
	`{"type":"X","headers":null,"data":null}`,
	`{"type":"SYSTEM","headers":{"a":{"b":1}}}`,
	"{\"type\":\"\xff\"}",
	`[]`, ``, `null`, `{"type":""}`,
}

var messageSeeds = []string{
	docGroupTextSeed,
	`{"msgId":"m","senderStaffId":"u","conversationType":"1","msgtype":"picture","content":{"downloadCode":"d","pictureDownloadCode":"p"}}`,
	`{"msgId":"m","senderStaffId":"u","conversationType":"1","msgtype":"richText","content":{"richText":[{"text":"a"},{"type":"picture","downloadCode":"d"},{"text":""}]}}`,
	`{"msgId":"m","senderStaffId":"u","conversationType":"1","msgtype":"audio","content":{"downloadCode":"d","recognition":"r"}}`,
	`{"msgId":"m","senderStaffId":"u","conversationType":"1","msgtype":"video","content":"{\"downloadCode\":\"d\",\"duration\":\"5\",\"videoType\":\"mp4\"}"}`,
	`{"msgId":"m","senderStaffId":"u","conversationType":"2","conversationId":"c","chatbotUserId":"$:b","isInAtList":"true","atUsers":[{"dingtalkId":"$:b"},{"staffId":"s"}],
	  "msgtype":"text","text":{"content":" x","isReplyMsg":true,"repliedMsg":{"msgId":"q","senderId":"$:b","content":{"richText":[{"msgType":"text","content":"c"}]}}}}`,
	`{"msgId":"m","senderId":"$:b","chatbotUserId":"$:b","conversationType":"1","msgtype":"file","content":{"downloadCode":"d","fileName":"f"}}`,
	`{"msgId":"m","senderStaffId":"u","conversationType":"1","msgtype":"text","text":{"content":"x"},"createAt":"1e3","sessionWebhookExpiredTime":-1}`,
	`{"msgId":"m\u0000","senderStaffId":"u","conversationType":"1"}`,
}

const docGroupTextSeed = `{"conversationId":"cidAsXSBLnA==","atUsers":[{"dingtalkId":"$:LWCP_v1:$4*****TgHFUDZ8Qi8qr3"}],"chatbotCorpId":"ding9f*****cd16741","chatbotUserId":"$:LWCP_v1:$*****x3vTgHFUDZ8Qi8qr3","msgId":"msgLICYe****HgY4JtMQw==","senderNick":"用户","isAdmin":true,"senderStaffId":"16650***698","sessionWebhookExpiredTime":1690367502152,"createAt":1690362101894,"senderCorpId":"ding9*****d16741","conversationType":"2","senderId":"$:LWCP_v1:***jqTgIfhRX9Q==","conversationTitle":"测试群","isInAtList":true,"sessionWebhook":"https://oapi.dingtalk.com/robot/sendBySession?session=76da36b4**********8f59e8","text":{"content":" 测试数据"},"robotCode":"ding*****r3xc0b","msgtype":"text"}`

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// FuzzDecodeFrame: DecodeFrame never panics; what it accepts has a type,
// valid UTF-8 everywhere, and re-encodes to a frame that decodes to the
// same thing.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range frameSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrMalformedFrame) {
				t.Fatalf("error %v does not wrap ErrMalformedFrame", err)
			}
			return
		}
		if fr.Type == "" || !utf8.ValidString(fr.Data) || len(fr.Headers) > maxHeaders {
			t.Fatalf("accepted a bad frame: %+v", fr)
		}
		for k, v := range fr.Headers {
			if !utf8.ValidString(k) || !utf8.ValidString(v) || len(v) > maxHeaderValue {
				t.Fatalf("bad header %q=%q", k, v)
			}
		}
		again, err := json.Marshal(map[string]any{"specVersion": fr.SpecVersion, "type": fr.Type, "headers": fr.Headers, "data": fr.Data})
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeFrame(again)
		if err != nil {
			t.Fatalf("re-encoded frame refused: %v (%s)", err, again)
		}
		if back.Type != fr.Type || back.Data != fr.Data || back.MessageID() != fr.MessageID() || back.Topic() != fr.Topic() {
			t.Fatalf("round trip changed the frame: %+v → %+v", fr, back)
		}
		_ = frameTime(&fr)
		_ = EncodeAck(newAck(fr.MessageID(), AckOK, "OK", fr.Data))
	})
}

// FuzzParseBotMessage: parseBotMessage never panics; an accepted message
// is a valid event (Validate), with bounded ids, media segments that
// carry a download code, text that is valid UTF-8 and a time; an error is
// either malformed or skipped.
func FuzzParseBotMessage(f *testing.F) {
	for _, s := range messageSeeds {
		f.Add([]byte(s))
	}
	at := time.UnixMilli(1690362102194)
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := parseBotMessage(b, "robotcode", at)
		if err != nil {
			if !errors.Is(err, errMalformed) && !errors.Is(err, errSkipped) {
				t.Fatalf("error %v is neither malformed nor skipped", err)
			}
			return
		}
		checkEvent(t, in.ev)
		if in.webhook != "" && in.expires.IsZero() {
			t.Fatal("a webhook without an expiry")
		}
		if !bytes.Equal(in.ev.Raw, b) {
			t.Fatal("Raw is not the message")
		}
	})
}

func checkEvent(t *testing.T, ev channel.Event) {
	t.Helper()
	if err := ev.Validate(); err != nil {
		t.Fatalf("invalid event: %v (%+v)", err, ev)
	}
	if ev.Platform != Platform || ev.BotID != "robotcode" || len(ev.MessageID) > maxID || len(ev.Chat.ID) > maxID {
		t.Fatalf("bad identity: %+v", ev)
	}
	if strings.ContainsFunc(ev.MessageID+ev.Chat.ID+ev.Sender.ID+ev.Sender.Name, isControl) {
		t.Fatalf("control characters in ids or name: %+v", ev)
	}
	for _, s := range ev.Segments {
		if s.Type.IsMedia() && (s.Media == nil || s.Media.FileID == "") {
			t.Fatalf("media segment without a download code: %+v", s)
		}
		if !utf8.ValidString(s.Text) {
			t.Fatalf("invalid UTF-8 text: %q", s.Text)
		}
		if s.Type == channel.SegMention && s.UserID == "" {
			t.Fatal("mention of nobody")
		}
	}
	if ev.Quoted != nil && ev.QuoteID() == "" {
		t.Fatal("a quoted message without an id")
	}
}

// FuzzFrameToEvent drives the whole inbound path of a frame: decode, then
// (for a robot message callback) parse.
func FuzzFrameToEvent(f *testing.F) {
	for _, s := range frameSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil || fr.Type != FrameCallback || fr.Topic() != BotMessageTopic {
			return
		}
		in, err := parseBotMessage([]byte(fr.Data), "robotcode", time.UnixMilli(1))
		if err == nil {
			checkEvent(t, in.ev)
		}
	})
}

// FuzzClassify: any answer body with any status classifies without a
// panic: 2xx without an errcode or throttling status never does (do does
// not call classify then), 429 is always rate limited with a positive
// RetryAfter, and a rate limit never exceeds an hour.
func FuzzClassify(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
		retry  string
	}{
		{200, `{"errcode":130101,"errmsg":"send too fast, exceed 20 times per minute"}`, ""},
		{200, `{"errcode":"410100"}`, ""},
		{200, `{"status":1111,"wait":5,"source":"x5","punish":"deny","uuid":"u"}`, ""},
		{403, `{"code":"Forbidden.AccessDenied.QpsLimitForApi","message":"m","requestid":"r"}`, "2"},
		{429, ``, "99999999"},
		{400, `{"code":"invalidParameter.robotCode.notExsit"}`, ""},
		{401, `{"code":"InvalidAuthentication"}`, ""},
		{502, `<html></html>`, ""},
		{200, `{"errcode":1e99}`, "-1"},
	} {
		f.Add(s.status, []byte(s.body), s.retry)
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, retry string) {
		h := http.Header{}
		h.Set("Retry-After", retry)
		e := classify("op", status, h, body, time.Minute)
		if e == nil || e.Op != "op" || e.Status != status {
			t.Fatalf("bad error %+v", e)
		}
		_ = e.Error()
		var rl *channel.RateLimitedError
		if errors.As(e, &rl) && (rl.RetryAfter <= 0 || rl.RetryAfter > time.Hour) {
			t.Fatalf("RetryAfter %s", rl.RetryAfter)
		}
		if status == http.StatusTooManyRequests && channel.Classify(e) != channel.ClassRateLimited {
			t.Fatalf("429 classified %s", channel.Classify(e))
		}
		if status >= 500 && status < 600 && channel.Classify(e).Definitive() {
			var b apiBody
			if json.Unmarshal(body, &b) != nil || (b.ErrCode == 0 && b.Status != gatewayThrottled) {
				t.Fatalf("a 5xx without a platform code classified %s", channel.Classify(e))
			}
		}
	})
}
