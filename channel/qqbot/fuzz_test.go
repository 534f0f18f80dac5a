package qqbot

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/personakit/persona/channel"
)

// FuzzDecodePayload: any frame either decodes to a payload with a valid op
// and a non-negative s, or is refused; never a panic.
func FuzzDecodePayload(f *testing.F) {
	f.Add([]byte(`{"op":10,"d":{"heartbeat_interval":45000}}`))
	f.Add([]byte(`{"op":0,"s":1,"t":"READY","d":{"version":1,"session_id":"082ee18c-0be3-491b-9d8b-fbd95c51673a","user":{"id":"6158788878435714165","username":"bot","bot":true},"shard":[0,0]}}`))
	f.Add([]byte(`{"op":0,"s":2002,"t":"RESUMED","d":""}`))
	f.Add([]byte(`{"op":1.0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := decodePayload(data)
		if err != nil {
			return
		}
		if p.Op < 0 || p.Op > 255 || p.S < 0 || len(p.T) > maxEventTypeBytes {
			t.Fatalf("accepted %+v", p)
		}
	})
}

// FuzzNormalize: any event type and d yields a valid event with a reply
// target, or a reason to skip it; never a half event.
func FuzzNormalize(f *testing.F) {
	f.Add(eventGroupAt, []byte(`{"author":{"member_openid":"E4F4AEA33253A2797FB897C50B81D7ED"},"content":" 123","group_openid":"C9F778FE6ADF9D1D1DBE395BF744A33A","id":"ROBOT1.0_e","timestamp":"2023-11-06T13:37:18+08:00"}`))
	f.Add(eventC2C, []byte(`{"author":{"user_openid":"U"},"content":"hi","id":"m","attachments":[{"content_type":"image/png","url":"gchat.qpic.cn/a"}]}`))
	f.Add(eventChannelAt, []byte(`{"author":{"id":"1234","username":"abc"},"channel_id":"100010","content":"<@!6158788878435714165> a &amp; b","guild_id":"1","id":"08","seq_in_channel":"7","message_reference":{"message_id":"07"}}`))
	f.Add(eventDirectMessage, []byte(`{"author":{"id":"1234"},"guild_id":"1","id":"09","content":"x"}`))
	f.Fuzz(func(t *testing.T, typ string, d []byte) {
		out := normalize(testWho, typ, "e", d, receiveTime)
		if out.skip != "" {
			return
		}
		if err := out.ev.Validate(); err != nil {
			t.Fatalf("invalid event %+v: %v", out.ev, err)
		}
		if out.ev.Kind == channel.KindMessage && (out.ref == nil || !validID(out.ref.ID) || !validID(out.ref.Target) || out.ref.Chat != out.ev.Chat) {
			t.Fatalf("message without a usable reply target: %+v", out.ref)
		}
		for _, s := range out.ev.Segments {
			if !utf8.ValidString(s.Text) {
				t.Fatalf("invalid UTF-8 in %q", s.Text)
			}
			if s.Media != nil {
				if u, ok := attachmentURL(s.Media.URL); !ok || u != s.Media.URL {
					t.Fatalf("unusable media URL %q", s.Media.URL)
				}
			}
		}
	})
}

// FuzzGuildContent: mention parsing keeps every byte of text that is not
// a mention and never invents mentions of the bot.
func FuzzGuildContent(f *testing.F) {
	f.Add("<@!6158788878435714165> hello &lt;3")
	f.Add("<@42><@!x> <@ <@!> &amp;amp;")
	f.Add("\xff<@!1>\xfe")
	f.Fuzz(func(t *testing.T, content string) {
		segs, toMe := guildSegments(content, testWho)
		bot := false
		for _, s := range segs {
			switch s.Type {
			case channel.SegMention:
				if !digits(s.UserID) && s.UserID != testWho.BotID {
					t.Fatalf("mention of %q", s.UserID)
				}
				bot = bot || s.UserID == testWho.BotID
			case channel.SegText:
				if s.Text == "" || !utf8.ValidString(s.Text) {
					t.Fatalf("bad text segment %q", s.Text)
				}
			default:
				t.Fatalf("segment %v", s.Type)
			}
		}
		if bot != toMe {
			t.Fatalf("toMe %v with a bot mention %v", toMe, bot)
		}
	})
}

// FuzzWebhook: signed bodies of any shape get a well-formed answer: 200
// with an acknowledgement or validation, 400, or 503; never a panic, and
// an event reaches the sink only valid.
func FuzzWebhook(f *testing.F) {
	f.Add([]byte(`{"op":13,"d":{"plain_token":"Arq0D5A61EgUu4OxUvOp","event_ts":"1725442341"}}`), "1725442341")
	f.Add([]byte(`{"op":0,"id":"GROUP_AT_MESSAGE_CREATE:x","s":3,"t":"GROUP_AT_MESSAGE_CREATE","d":{"author":{"member_openid":"M"},"content":" hi","group_openid":"G","id":"ROBOT1.0_x","timestamp":"2023-11-06T13:37:18+08:00"}}`), "1")
	f.Add([]byte(`{"op":1,"d":7}`), "2")
	f.Add([]byte(`{"op":0,"t":"C2C_MESSAGE_CREATE","d":{"id":"m","author":{}}}`), "")
	ch, err := New(Config{AppID: "102000001", Secret: "fuzz-secret", Mode: ModeWebhook, MaxBodyBytes: 1 << 16})
	if err != nil {
		f.Fatal(err)
	}
	var sink channel.Sink = channel.SinkFunc(func(_ context.Context, ev channel.Event) error {
		if err := ev.Validate(); err != nil {
			panic(err)
		}
		if len(ev.MessageID)%3 == 0 {
			return context.DeadlineExceeded // a refusal now and then
		}
		return nil
	})
	ch.active.Store(&sink)
	f.Fuzz(func(t *testing.T, body []byte, ts string) {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.Header.Set(HeaderTimestamp, ts)
		req.Header.Set(HeaderSignature, validationSignature(ch.key, "", ts+string(body)))
		rec := httptest.NewRecorder()
		ch.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusServiceUnavailable:
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("answer %q is not JSON", rec.Body.String())
			}
		case http.StatusBadRequest, http.StatusUnauthorized, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d", rec.Code)
		}
		if ts != "" && rec.Code == http.StatusUnauthorized {
			t.Fatalf("a correctly signed body was refused")
		}
	})
}

// FuzzDecodeState: a state file of any content loads as a usable state or
// an error.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"session_id":"s","seq":12,"inbound":[{"id":"a","chat":{"kind":"group","id":"G"},"route":"group","target":"G","at":"2026-01-01T11:58:00Z","next":2}],"parts":{"group:G k":{"chat":{"kind":"group","id":"G"},"route":"group","target":"G","msg_id":"a","seq":2,"ref_at":"2026-01-01T11:58:00Z","at":"2026-01-01T11:58:30Z","id":"x"},"bad":null}}`))
	f.Add([]byte(`{"seq":-1,"inbound":[null,{"route":"dm"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeState(data)
		if err != nil {
			return
		}
		if st.Seq < 0 {
			t.Fatal("negative seq")
		}
		for _, r := range st.Inbound {
			if r == nil || r.ID == "" || r.Target == "" || !r.Chat.Kind.Valid() || r.Next < 0 {
				t.Fatalf("unusable entry %+v", r)
			}
		}
		for k, p := range st.Parts {
			if k == "" || p == nil || p.Target == "" || p.Seq < 0 || p.At.IsZero() {
				t.Fatalf("unusable part %q %+v", k, p)
			}
		}
		c := &Channel{cfg: Config{PrivateReplyWindow: 1, GroupReplyWindow: 1}}
		st.prune(receiveTime, c.window)
	})
}

// FuzzExpiresIn: the token answer's expires_in, a string or a number.
func FuzzExpiresIn(f *testing.F) {
	f.Add([]byte(`"7200"`))
	f.Add([]byte(`7200`))
	f.Add([]byte(`"-1"`))
	f.Add([]byte(`7.2e3`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, ok := expiresIn(raw)
		if ok && (n <= 0 || n > 10*24*3600) {
			t.Fatalf("accepted %d from %q", n, raw)
		}
		if ok && strconv.FormatInt(n, 10) == "" {
			t.Fatal("unreachable")
		}
	})
}
