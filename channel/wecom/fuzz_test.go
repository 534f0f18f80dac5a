package wecom

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
)

// Fuzz credentials (the official sample's key, see crypto_test.go).
const (
	fuzzToken  = "QDG6eK"
	fuzzAESKey = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	fuzzCorpID = "wx5823bf96d3bd56c7"
)

var (
	appSeeds = []string{
		"<xml><ToUserName><![CDATA[wx5823bf96d3bd56c7]]></ToUserName><FromUserName><![CDATA[mycreate]]></FromUserName><CreateTime>1409659813</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA[hello]]></Content><MsgId>4561255354251345929</MsgId><AgentID>218</AgentID></xml>",
		"<xml><ToUserName>wx5823bf96d3bd56c7</ToUserName><FromUserName>u</FromUserName><MsgType>image</MsgType><PicUrl>https://p/x</PicUrl><MediaId>m</MediaId><MsgId>1</MsgId><AgentID>218</AgentID></xml>",
		"<xml><FromUserName>u</FromUserName><MsgType>voice</MsgType><MediaId>v</MediaId><Format>amr</Format><Recognition>你好</Recognition><MsgId>2</MsgId></xml>",
		"<xml><FromUserName>u</FromUserName><MsgType>event</MsgType><Event>enter_agent</Event></xml>",
		"<xml><FromUserName>u</FromUserName><MsgType>location</MsgType><Location_X>1</Location_X><Label>x</Label><MsgId>3</MsgId></xml>",
		"<xml><FromUserName>u</FromUserName><MsgType>text</MsgType><CreateTime>-9</CreateTime><Content>]]&gt;</Content><MsgId>4</MsgId></xml>",
		"<xml><CreateTime>99999999999999999999</CreateTime></xml>",
		"<xml><FromUserName>a&#x1;b</FromUserName></xml>",
		"<!DOCTYPE x [<!ENTITY a \"aaaa\">]><xml><Content>&a;</Content></xml>",
		"\xff<xml/>",
		"",
	}
	aibotSeeds = []string{
		`{"msgid":"CAIQ16HMjQYY/NGagIOAgAMgq4KM0AI=","aibotid":"AIBOTID","chatid":"CHATID","chattype":"group","from":{"userid":"USERID"},"response_url":"RESPONSEURL","msgtype":"text","text":{"content":"@RobotA hello robot"},"quote":{"msgtype":"text","text":{"content":"这是今日的测试情况"}}}`,
		`{"msgid":"m1","aibotid":"b","chattype":"single","from":{"userid":"u"},"msgtype":"image","image":{"url":"https://x/y","aeskey":"k"}}`,
		`{"msgid":"m2","aibotid":"b","chattype":"single","from":{"userid":"u"},"msgtype":"mixed","mixed":{"msg_item":[{"msgtype":"text","text":{"content":"@RobotA 看"}},{"msgtype":"image","image":{"url":"https://x/z"}}]}}`,
		`{"msgid":"m3","chattype":"single","from":{"userid":"u"},"msgtype":"voice","voice":{"content":"语音"}}`,
		`{"msgid":"m4","chattype":"group","chatid":"c","from":{"userid":"u"},"msgtype":"stream","stream":{"id":"s"}}`,
		`{"msgid":"m5","chattype":"group","chatid":"c","from":{"userid":"u"},"msgtype":"event","event":{"eventtype":"enter_chat"}}`,
		`{"msgid":"m6","chattype":"single","from":{"userid":"u"},"msgtype":"text","text":{"content":"@RobotA@RobotA\u2005x"},"create_time":"12"}`,
		`{"msgid":"m7","chattype":"single","from":{"userid":"u"},"msgtype":"file","file":{"url":"ftp://x"},"create_time":1e30}`,
		`{"msgid":"","msgtype":"text","text":null}`,
		`{"msgid":["x"]}`,
		"\"\xff\"",
		"",
	}
)

// FuzzDecrypt: Decrypt never panics on any ciphertext, and what it
// accepts survives an encrypt/decrypt round trip.
func FuzzDecrypt(f *testing.F) {
	c, err := NewCrypter(fuzzToken, fuzzAESKey, fuzzCorpID)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "AAAA", "%%%", "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUpj911L3vg3W/sYYvuJTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+HMZfJYuR+LtwGc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z1ptDAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8R07+qN+E7Q=="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, enc string) {
		msg, err := c.Decrypt(enc)
		if err != nil {
			return
		}
		again, err := c.Encrypt(msg)
		if err != nil {
			t.Fatal(err)
		}
		back, err := c.Decrypt(again)
		if err != nil || !bytes.Equal(back, msg) {
			t.Fatalf("round trip of %q: %q, %v", msg, back, err)
		}
	})
}

// FuzzDecryptMedia: DecryptMedia never panics.
func FuzzDecryptMedia(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef"), fuzzAESKey)
	f.Add([]byte{}, "")
	f.Add([]byte("x"), "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		if out, err := DecryptMedia(data, key); err == nil && len(out) >= len(data) {
			t.Fatalf("decrypted %d bytes into %d", len(data), len(out))
		}
	})
}

// FuzzEnvelope: any callback body is parsed without a panic.
func FuzzEnvelope(f *testing.F) {
	for _, s := range []string{"", "<xml><Encrypt><![CDATA[abc]]></Encrypt></xml>", `{"encrypt":"abc"}`, "<xml>", "{", "  \n<xml><Encrypt/></xml>", `{"encrypt":7}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		enc, err := envelopeCiphertext(body)
		if err == nil && enc == "" {
			t.Fatal("an empty ciphertext was accepted")
		}
	})
}

func fuzzChannel(t testing.TB, mode Mode) *Channel {
	cfg := Config{Mode: mode, Token: fuzzToken, EncodingAESKey: fuzzAESKey, APIBase: "http://127.0.0.1:1",
		Clock: clock.NewFake(time.Unix(1_700_000_000, 0))}
	switch mode {
	case ModeApp:
		cfg.CorpID, cfg.AgentID, cfg.Secret = fuzzCorpID, 218, "s"
	case ModeAIBotWS:
		cfg.BotID, cfg.Secret, cfg.WSURL = "b", "s", "ws://127.0.0.1:1"
	}
	cfg.BotName = "RobotA"
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkEvent fails unless ev is whole: valid, serialisable, and with
// valid UTF-8 text where the input was valid UTF-8.
func checkEvent(t *testing.T, ev channel.Event, input []byte) {
	t.Helper()
	if err := ev.Validate(); err != nil {
		t.Fatalf("invalid event from %q: %v", input, err)
	}
	if _, err := json.Marshal(ev); err != nil {
		t.Fatalf("event from %q does not serialise: %v", input, err)
	}
	if utf8.Valid(input) && !utf8.ValidString(ev.Text()) {
		t.Fatalf("invalid UTF-8 text %q from %q", ev.Text(), input)
	}
	for _, s := range ev.Segments {
		if s.Type.IsMedia() && s.Media == nil {
			t.Fatalf("media segment without media from %q", input)
		}
		if s.Type == channel.SegMention && s.UserID == "" {
			t.Fatalf("mention without a user from %q", input)
		}
	}
}

// FuzzAppMessage: any decrypted app payload yields a whole event or
// none, never a panic.
func FuzzAppMessage(f *testing.F) {
	for _, s := range appSeeds {
		f.Add([]byte(s))
	}
	c := fuzzChannel(f, ModeApp)
	f.Fuzz(func(t *testing.T, plain []byte) {
		d, err := c.decodeAppMessage(plain)
		if err != nil || d.event == nil {
			return
		}
		checkEvent(t, *d.event, plain)
		if d.event.Chat.Kind != channel.Private {
			t.Fatalf("an app event in a %s chat", d.event.Chat.Kind)
		}
	})
}

// FuzzAIBotMessage: any decrypted AI-bot payload yields a whole event or
// a reason, never a panic.
func FuzzAIBotMessage(f *testing.F) {
	for _, s := range aibotSeeds {
		f.Add([]byte(s))
	}
	c := fuzzChannel(f, ModeAIBot)
	f.Fuzz(func(t *testing.T, plain []byte) {
		m, err := decodeAIBotMessage(plain)
		if err != nil {
			return
		}
		ev, skip := c.aibotEvent(m, plain)
		if skip != "" {
			if ev.MessageID != "" {
				t.Fatalf("an event and a skip reason from %q", plain)
			}
			return
		}
		checkEvent(t, ev, plain)
		if !ev.ToMe {
			t.Fatalf("an AI-bot event not to the bot from %q", plain)
		}
	})
}

// FuzzFrame: any long-connection frame is decoded and handled without a
// panic; callbacks that pass become whole events.
func FuzzFrame(f *testing.F) {
	for _, s := range aibotSeeds {
		f.Add([]byte(`{"cmd":"aibot_msg_callback","headers":{"req_id":"r"},"body":` + s + `}`))
	}
	for _, s := range []string{`{"headers":{"req_id":"x"},"errcode":0,"errmsg":"ok"}`, `{"cmd":"aibot_event_callback","headers":{"req_id":"e"},"body":{"msgtype":"event","event":{"eventtype":"disconnected_event"}}}`, `{"cmd":1}`, `[]`, ``} {
		f.Add([]byte(s))
	}
	c := fuzzChannel(f, ModeAIBotWS)
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := decodeFrame(data)
		if err != nil {
			return
		}
		queue := make(chan wsInbound, 1)
		switch fr.Cmd {
		case cmdCallback:
			c.wsCallback(fr, queue)
		case cmdEvent:
			_ = c.wsEvent(fr)
		}
		select {
		case in := <-queue:
			checkEvent(t, in.ev, fr.Body)
		default:
		}
	})
}

// FuzzServeCallback: any plaintext, correctly encrypted and signed, is
// answered with one of the documented statuses and, when it becomes an
// event, a whole one — for both callback modes.
func FuzzServeCallback(f *testing.F) {
	for _, s := range appSeeds {
		f.Add(true, []byte(s))
	}
	for _, s := range aibotSeeds {
		f.Add(false, []byte(s))
	}
	app, bot := fuzzChannel(f, ModeApp), fuzzChannel(f, ModeAIBot)
	var got []channel.Event
	sink := channel.SinkFunc(func(_ context.Context, ev channel.Event) error {
		got = append(got, ev)
		return nil
	})
	app.sink.Store(&sinkRef{sink: sink})
	bot.sink.Store(&sinkRef{sink: sink})
	f.Fuzz(func(t *testing.T, isApp bool, plain []byte) {
		c := bot
		if isApp {
			c = app
		}
		got = got[:0]
		enc, err := c.crypt.Encrypt(plain)
		if err != nil {
			t.Fatal(err)
		}
		ts := strconv.FormatInt(c.clk.Now().Unix(), 10)
		q := url.Values{"msg_signature": {c.crypt.Signature(ts, "7", enc)}, "timestamp": {ts}, "nonce": {"7"}}
		body, _ := json.Marshal(map[string]string{"encrypt": enc})
		req := httptest.NewRequest(http.MethodPost, "/?"+q.Encode(), bytes.NewReader(body))
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %q", rec.Code, plain)
		}
		if rec.Code != http.StatusOK && len(got) > 0 {
			t.Fatalf("an event reached the sink and the callback was refused (%d)", rec.Code)
		}
		for _, ev := range got {
			checkEvent(t, ev, plain)
		}
	})
}
