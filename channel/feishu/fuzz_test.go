package feishu

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/feishu/feishutest"
	"github.com/personakit/persona/clock"
)

// The fuzz targets cover every decoder of untrusted input: the callback
// decryption, the long connection's frames and fragments, the event
// envelope, message content, and the webhook handler as a whole. Each
// has a seed corpus in testdata/fuzz/<name>.

const fuzzBot, fuzzApp = "ou_fuzzbot", "cli_fuzzapp"

// FuzzDecrypt: Decrypt never panics; what the fake encrypts comes back.
func FuzzDecrypt(f *testing.F) {
	f.Add("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=", "test key", []byte("hello world"))
	f.Add("", "", []byte{})
	f.Add("AAAAAAAAAAAAAAAAAAAAAA==", "k", []byte(`{"schema":"2.0"}`))
	f.Fuzz(func(t *testing.T, enc, key string, plain []byte) {
		if out, err := Decrypt(enc, key); err == nil && len(out) > len(enc) {
			t.Fatalf("plaintext longer than its ciphertext")
		}
		iv := make([]byte, 16)
		copy(iv, key)
		got, err := Decrypt(feishutest.EncryptWithIV(key, iv, plain), key)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("round trip of %q: %q, %v", plain, got, err)
		}
	})
}

// FuzzUnmarshalFrame: never panics; a decoded frame encodes and decodes
// to itself.
func FuzzUnmarshalFrame(f *testing.F) {
	f.Add(MarshalFrame(Frame{SeqID: 1, LogID: 2, Service: 3, Method: 0, Headers: []FrameHeader{{HeaderType, TypePing}}}))
	f.Add(feishutest.EncodeFrame(feishutest.Frame{SeqID: 9, LogID: 9, Service: 33554678, Method: 1,
		Headers: []feishutest.FrameHeader{{Key: "type", Value: "event"}, {Key: "sum", Value: "2"}}, Payload: []byte(`{"a":1}`)}))
	f.Add([]byte{0x08, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := UnmarshalFrame(data)
		if err != nil {
			return
		}
		again, err := UnmarshalFrame(MarshalFrame(fr))
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", fr, err)
		}
		if fr.Payload == nil && again.Payload != nil || !bytes.Equal(fr.Payload, again.Payload) ||
			fr.SeqID != again.SeqID || fr.LogID != again.LogID || fr.Service != again.Service || fr.Method != again.Method ||
			len(fr.Headers) != len(again.Headers) || fr.PayloadType != again.PayloadType || fr.LogIDNew != again.LogIDNew {
			t.Fatalf("round trip changed the frame: %+v → %+v", fr, again)
		}
	})
}

// FuzzDecodeEvent: any payload either fails, is skipped, or yields
// events that pass Validate, carry the bot id and valid UTF-8 text.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"schema":"2.0","header":{"event_id":"e","event_type":"im.message.receive_v1","app_id":"cli_fuzzapp"},"event":{"sender":{"sender_id":{"open_id":"ou_a"},"sender_type":"user"},"message":{"message_id":"om_1","create_time":"1609073151345","chat_id":"oc_1","chat_type":"group","message_type":"text","content":"{\"text\":\"@_user_1 hi\"}","mentions":[{"key":"@_user_1","id":{"open_id":"ou_fuzzbot"},"name":"Bot"}]}}}`))
	f.Add([]byte(`{"schema":"2.0","header":{"event_type":"im.message.receive_v1"},"event":{"sender":{"sender_id":{"open_id":"ou_a"}},"message":{"message_id":"om_2","chat_type":"p2p","message_type":"post","content":"{\"zh_cn\":{\"title\":\"t\",\"content\":[[{\"tag\":\"at\",\"user_id\":\"all\"},{\"tag\":\"img\",\"image_key\":\"img_1\"}]]}}"}}}`))
	f.Add([]byte(`{"type":"event_callback","event":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var cb callbackBody
		if json.Unmarshal(data, &cb) != nil {
			return
		}
		d, err := decodeEvent(&cb, data, fuzzBot, fuzzApp, time.Unix(1700000000, 0))
		if err != nil {
			return
		}
		if d.skip != "" && len(d.events) > 0 {
			t.Fatalf("skipped with events")
		}
		for _, ev := range d.events {
			checkEvent(t, ev)
		}
	})
}

func checkEvent(t *testing.T, ev channel.Event) {
	t.Helper()
	if err := ev.Validate(); err != nil {
		t.Fatalf("invalid event %+v: %v", ev, err)
	}
	if ev.BotID != fuzzBot || ev.Platform != Platform {
		t.Fatalf("bot or platform wrong: %+v", ev)
	}
	if !utf8.ValidString(ev.Text()) {
		t.Fatalf("text not UTF-8: %q", ev.Text())
	}
	for _, s := range ev.Segments {
		if s.Type.IsMedia() && (s.Media == nil || s.Media.FileID == "") {
			t.Fatalf("media segment without a reference: %+v", s)
		}
		if s.Type == channel.SegMention && s.UserID == "" {
			t.Fatalf("mention without a user")
		}
	}
}

// FuzzParseContent: every message type's content either fails or yields
// well-formed segments; mentions of the bot set toMe.
func FuzzParseContent(f *testing.F) {
	f.Add("text", `{"text":"@_user_1 @_user_10 @_all x"}`, `[{"key":"@_user_1","id":{"open_id":"ou_fuzzbot"}},{"key":"@_user_10","id":"ou_ten","name":"Ten"}]`)
	f.Add("post", `{"title":"T","content":[[{"tag":"a","text":"doc","href":"https://x"},{"tag":"at","user_id":"@_user_1"}],[{"tag":"media","file_key":"f","image_key":"i"}],[{"tag":"emotion","emoji_type":"SMILE"},{"tag":"hr"}]]}`, `[{"key":"@_user_1","id":{"open_id":"ou_b"},"name":"B"}]`)
	f.Add("image", `{"image_key":"img_v3"}`, `null`)
	f.Add("audio", `{"file_key":"file_1","duration":1500}`, `[]`)
	f.Fuzz(func(t *testing.T, typ, content, mentionsJSON string) {
		var ms []mention
		_ = json.Unmarshal([]byte(mentionsJSON), &ms)
		p, err := parseContent(typ, content, ms, fuzzBot, "om_fuzz")
		if err != nil {
			return
		}
		mentionsBot := false
		for _, s := range p.segs {
			if s.Type.IsMedia() && (s.Media == nil || s.Media.FileID == "") {
				t.Fatalf("media segment without a reference: %+v", s)
			}
			if s.Type == channel.SegText && (s.Text == "" || !utf8.ValidString(s.Text)) {
				t.Fatalf("bad text segment %q", s.Text)
			}
			if s.Type == channel.SegMention && s.UserID == fuzzBot {
				mentionsBot = true
			}
		}
		if mentionsBot != p.toMe {
			t.Fatalf("toMe %v but a mention of the bot: %v", p.toMe, mentionsBot)
		}
	})
}

// FuzzAssemble: fragments in any order, with any headers, never panic
// and never produce more than MaxBodyBytes; a complete set is the
// concatenation of its parts.
func FuzzAssemble(f *testing.F) {
	f.Add([]byte{2, 0, 1, 'a', 'b', 2, 1, 1, 'c'})
	f.Add([]byte{3, 2, 1, 'z', 3, 0, 1, 'x', 3, 1, 2, 'y', 'y'})
	f.Add([]byte{0, 0, 0, 1, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			data = data[:4096] // a few hundred frames: enough to exercise every path
		}
		c := &Channel{cfg: Config{MaxBodyBytes: 64}, clk: clock.NewFake(time.Unix(1700000000, 0)), log: slog.New(slog.DiscardHandler)}
		s := &wsSession{r: &runner{c: c}, parts: map[string]*partial{}}
		for len(data) >= 3 {
			sum, seq, n := int(data[0]), int(data[1]), int(data[2])
			data = data[3:]
			n = min(n, len(data))
			payload := data[:n]
			data = data[n:]
			fr := Frame{Method: FrameData, Payload: payload, Headers: []FrameHeader{
				{HeaderMessageID, "m" + strconv.Itoa(sum%3)}, {HeaderSum, strconv.Itoa(sum)}, {HeaderSeq, strconv.Itoa(seq)}}}
			out, ok := s.assemble(fr)
			if ok && len(out) > 64 {
				t.Fatalf("%d bytes assembled, over the limit", len(out))
			}
			if len(s.parts) > maxPartials {
				t.Fatalf("%d partial events kept", len(s.parts))
			}
		}
	})
}

// FuzzServeHTTP: the webhook handler, with an Encrypt Key, never panics,
// answers one of its documented statuses, and hands the sink nothing
// unless the request was signed, fresh and decryptable.
func FuzzServeHTTP(f *testing.F) {
	const key, token = "fuzz key", "fuzz token"
	now := time.Unix(1700000000, 0)
	event := []byte(`{"schema":"2.0","header":{"event_type":"im.message.receive_v1","token":"fuzz token","app_id":"cli_fuzzapp"},"event":{"sender":{"sender_id":{"open_id":"ou_a"}},"message":{"message_id":"om_1","chat_type":"p2p","message_type":"text","content":"{\"text\":\"hi\"}"}}}`)
	enc, _ := json.Marshal(map[string]string{"encrypt": feishutest.Encrypt(key, event)})
	f.Add(enc, "1700000000", true)
	f.Add([]byte(`{"encrypt":"AAAA"}`), "1700000000", true)
	f.Add([]byte(`{"challenge":"c","token":"fuzz token","type":"url_verification"}`), "", false)
	f.Fuzz(func(t *testing.T, body []byte, ts string, sign bool) {
		ch, err := New(Config{AppID: fuzzApp, AppSecret: "s", VerificationToken: token, EncryptKey: key, Clock: clock.NewFake(now), MaxBodyBytes: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		ch.active.Store(&activeRun{botID: fuzzBot, sink: channel.SinkFunc(func(_ context.Context, ev channel.Event) error {
			got++
			checkEvent(t, ev)
			return nil
		})})
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set(HeaderRequestTimestamp, ts)
		r.Header.Set(HeaderRequestNonce, "n")
		if sign {
			r.Header.Set(HeaderSignature, Signature(ts, "n", key, body))
		}
		w := httptest.NewRecorder()
		ch.ServeHTTP(w, r)
		switch w.Code {
		case 200, 400, 401, 403, 413:
		default:
			t.Fatalf("status %d", w.Code)
		}
		if got > 0 && (w.Code != 200 || !sign) {
			t.Fatalf("an event reached the sink with status %d, signed %v", w.Code, sign)
		}
		_, _ = io.Copy(io.Discard, w.Body)
	})
}
