package qqbot

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

var testWho = identity{BotID: "102000001", UserID: "6158788878435714165"}

var receiveTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The payloads are the docs' examples (bot-docs
// server-inter/message/send-receive/event.md).
func TestNormalizeDocExamples(t *testing.T) {
	t.Parallel()
	at := time.Date(2023, 11, 6, 13, 37, 18, 0, time.FixedZone("", 8*3600))

	d := normalize(testWho, eventC2C, "C2C_MESSAGE_CREATE:x", json.RawMessage(`{"author":{"user_openid":"E4F4AEA33253A2797FB897C50B81D7ED"},"content":"123",
 "id":"ROBOT1.0_.b6nx.CVryAO0nR58RXuU6SC.m92gc19j02qKqdm8ek!","timestamp":"2023-11-06T13:37:18+08:00"}`), receiveTime)
	require.Empty(t, d.skip)
	ev := d.ev
	require.NoError(t, ev.Validate())
	require.Equal(t, channel.Chat{Kind: channel.Private, ID: "E4F4AEA33253A2797FB897C50B81D7ED"}, ev.Chat)
	require.Equal(t, "E4F4AEA33253A2797FB897C50B81D7ED", ev.Sender.ID)
	require.Equal(t, "ROBOT1.0_.b6nx.CVryAO0nR58RXuU6SC.m92gc19j02qKqdm8ek!", ev.MessageID)
	require.Equal(t, "123", ev.Text())
	require.True(t, ev.ToMe)
	require.True(t, ev.Time.Equal(at))
	require.Equal(t, "qq", ev.Platform)
	require.Equal(t, "102000001", ev.BotID)
	require.Equal(t, routeC2C, d.ref.Route)

	d = normalize(testWho, eventGroupAt, "", json.RawMessage(`{"author":{"member_openid":"E4F4AEA33253A2797FB897C50B81D7ED"},"content":" 123",
 "group_openid":"C9F778FE6ADF9D1D1DBE395BF744A33A",
 "id":"ROBOT1.0_eBIyWnxpmSu6uLQ7u7fU0eGloKGYg4eEa737vRyKnMCgyZjKi7JLYkQ9B0VapbiY","timestamp":"2023-11-06T13:37:18+08:00"}`), receiveTime)
	require.Empty(t, d.skip)
	ev = d.ev
	require.Equal(t, channel.Chat{Kind: channel.Group, ID: "C9F778FE6ADF9D1D1DBE395BF744A33A"}, ev.Chat)
	require.Equal(t, "E4F4AEA33253A2797FB897C50B81D7ED", ev.Sender.ID)
	require.Equal(t, "123", ev.Text(), "the space the stripped @ left is trimmed")
	require.True(t, ev.Mentions("102000001"))
	require.True(t, ev.ToMe)
	require.Equal(t, routeGroup, d.ref.Route)
	require.Equal(t, "C9F778FE6ADF9D1D1DBE395BF744A33A", d.ref.Target)

	guild := `{"author":{"avatar":"http://thirdqq.qlogo.cn/0","bot":false,"id":"1234","username":"abc"},"channel_id":"100010",
 "content":"<@!6158788878435714165> ndn&lt;nd <@!42> x","guild_id":"18700000000001","id":"0812345677890abcdef",
 "member":{"joined_at":"2021-04-12T16:34:42+08:00","roles":["1","2"]},"timestamp":"2021-05-20T15:14:58+08:00","seq":101,"seq_in_channel":"77",
 "message_reference":{"message_id":"08aaa"}}`
	d = normalize(testWho, eventChannelAt, "", json.RawMessage(guild), receiveTime)
	require.Empty(t, d.skip)
	ev = d.ev
	require.Equal(t, channel.Chat{Kind: channel.Group, ID: "channel:100010"}, ev.Chat)
	require.Equal(t, channel.Sender{ID: "1234", Name: "abc", Role: channel.RoleAdmin}, ev.Sender)
	require.Equal(t, int64(77), ev.Seq, "seq_in_channel")
	require.Equal(t, "08aaa", ev.QuoteID())
	require.True(t, ev.ToMe)
	require.True(t, ev.Mentions("102000001"))
	require.True(t, ev.Mentions("42"))
	require.Equal(t, "ndn<nd  x", ev.Text())
	require.Equal(t, channel.KindMessage, ev.Kind)

	// The bot's own channel message is KindSelf.
	self := `{"author":{"id":"6158788878435714165","bot":true},"channel_id":"100010","content":"hi","guild_id":"1","id":"08b","timestamp":"2021-05-20T15:14:58+08:00","seq":102}`
	d = normalize(testWho, eventChannelAt, "", json.RawMessage(self), receiveTime)
	require.Equal(t, channel.KindSelf, d.ev.Kind)
	require.Nil(t, d.ref, "the bot's own message is no reply target")
	require.Equal(t, int64(102), d.ev.Seq)

	dm := `{"author":{"id":"1234","username":"abc"},"channel_id":"100010","content":"ndnnd","guild_id":"18700000000001","src_guild_id":"1","id":"09x",
 "member":{"joined_at":"2021-04-12T16:34:42+08:00","roles":["4"]},"timestamp":"2021-05-20T15:14:58+08:00"}`
	d = normalize(testWho, eventDirectMessage, "", json.RawMessage(dm), receiveTime)
	require.Empty(t, d.skip)
	require.Equal(t, channel.Chat{Kind: channel.Private, ID: "1234"}, d.ev.Chat)
	require.Equal(t, channel.Role(""), d.ev.Sender.Role)
	require.Equal(t, routeDM, d.ref.Route)
	require.Equal(t, "18700000000001", d.ref.Target)
}

func TestNormalizeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, t, d string
		invalid    bool
	}{
		{"unknown type", "FRIEND_ADD", `{"openid":"x"}`, false},
		{"empty type", "", `{}`, false},
		{"no d", eventC2C, ``, true},
		{"d not an object", eventC2C, `"text"`, true},
		{"no id", eventC2C, `{"author":{"user_openid":"U"},"content":"x"}`, true},
		{"id with a slash", eventC2C, `{"id":"a/b","author":{"user_openid":"U"}}`, true},
		{"no author", eventC2C, `{"id":"m"}`, true},
		{"group without group_openid", eventGroupAt, `{"id":"m","author":{"member_openid":"M"}}`, true},
		{"channel without channel_id", eventChannelAt, `{"id":"m","author":{"id":"1"}}`, true},
		{"author id of the wrong type", eventC2C, `{"id":"m","author":{"user_openid":{"a":1}}}`, true},
		{"content of the wrong type", eventC2C, `{"id":"m","author":{"user_openid":"U"},"content":5}`, true},
	}
	for _, tc := range tests {
		var raw json.RawMessage
		if tc.d != "" {
			raw = json.RawMessage(tc.d)
		}
		d := normalize(testWho, tc.t, "", raw, receiveTime)
		require.NotEmpty(t, d.skip, tc.name)
		require.Equal(t, tc.invalid, d.invalid, tc.name)
	}
	// The bot's own direct message has no peer: skipped.
	d := normalize(testWho, eventDirectMessage, "", json.RawMessage(`{"id":"m","guild_id":"1","author":{"id":"6158788878435714165"}}`), receiveTime)
	require.NotEmpty(t, d.skip)
}

func TestNormalizeLenient(t *testing.T) {
	t.Parallel()
	// Numbers as strings and strings as numbers, odd timestamps, invalid
	// UTF-8, attachments without a usable URL.
	d := normalize(testWho, eventChannelAt, "", json.RawMessage("{\"id\":\"m1\",\"channel_id\":100010,\"guild_id\":\"1\",\"author\":{\"id\":1234},\"content\":\"a\xffb <@!> <@x> <@!99\",\"timestamp\":\"yesterday\",\"seq\":\"5\",\"seq_in_channel\":true,"+
		"\"attachments\":[{\"content_type\":\"image/png\",\"url\":\"\"},{\"content_type\":\"video/mp4\",\"url\":\"gchat.qpic.cn/v.mp4\",\"size\":\"12\"},{\"content_type\":\"file\",\"url\":\"javascript:alert(1)\"},{\"content_type\":\"file\",\"filename\":\"a.pdf\",\"url\":\"//x.example/a.pdf\"}]}"), receiveTime)
	require.Empty(t, d.skip)
	ev := d.ev
	require.Equal(t, "channel:100010", ev.Chat.ID)
	require.Equal(t, "1234", ev.Sender.ID)
	require.Equal(t, receiveTime, ev.Time)
	require.Equal(t, int64(5), ev.Seq)
	require.Equal(t, "a\uFFFDb <@!> <@x> <@!99", ev.Text())
	require.Len(t, ev.Segments, 3)
	require.Equal(t, channel.SegVideo, ev.Segments[1].Type)
	require.Equal(t, "https://gchat.qpic.cn/v.mp4", ev.Segments[1].Media.URL)
	require.Equal(t, int64(12), ev.Segments[1].Media.Size)
	require.Equal(t, channel.SegFile, ev.Segments[2].Type)
	require.Equal(t, "https://x.example/a.pdf", ev.Segments[2].Media.URL)
	require.Equal(t, "a.pdf", ev.Segments[2].Media.Name)

	// A future timestamp is the receive time.
	d = normalize(testWho, eventC2C, "", json.RawMessage(`{"id":"m","author":{"user_openid":"U"},"content":"x","timestamp":"2099-01-01T00:00:00Z"}`), receiveTime)
	require.Equal(t, receiveTime, d.ev.Time)
}

func TestDecodePayload(t *testing.T) {
	t.Parallel()
	p, err := decodePayload([]byte(`{"id":"e1","op":0,"d":{"a":1},"s":42,"t":"AT_MESSAGE_CREATE"}`))
	require.NoError(t, err)
	require.Equal(t, payload{ID: "e1", Op: 0, D: json.RawMessage(`{"a":1}`), S: 42, T: "AT_MESSAGE_CREATE"}, p)
	p, err = decodePayload([]byte(`{"op":11}`))
	require.NoError(t, err)
	require.Equal(t, payload{Op: 11}, p)
	p, err = decodePayload([]byte(`{"op":10,"d":null,"s":null,"t":null,"id":null}`))
	require.NoError(t, err)
	require.Nil(t, p.D)
	for _, bad := range []string{``, `null`, `[]`, `{}`, `{"op":1.5}`, `{"op":1e2}`, `{"op":"0"}`, `{"op":-1}`, `{"op":300}`,
		`{"op":0,"s":-1}`, `{"op":0,"s":"1"}`, `{"op":0,"t":5}`, `{"op":0,"id":{}}`, `{"op":0} {"op":1}`, `{"op":0,"t":"` + string(make([]byte, 70)) + `"}`} {
		_, err := decodePayload([]byte(bad))
		require.ErrorIs(t, err, errMalformed, "%q", bad)
	}
}

func TestStateDecodeAndPrune(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st, err := decodeState([]byte(`{"session_id":"s","seq":-4,"inbound":[null,
		{"id":"a","chat":{"kind":"group","id":"G"},"route":"group","target":"G","at":"2026-01-01T11:58:00Z","next":2,"keys":{"k":2}},
		{"id":"b","chat":{"kind":"group","id":"G"},"route":"group","target":"G","at":"2026-01-01T11:50:00Z"},
		{"id":"c","chat":{"kind":"private","id":"U"},"route":"c2c","target":"U","at":"2026-01-01T11:10:00Z"},
		{"id":"d","chat":{"kind":"private","id":"U"},"route":"bogus","target":"U","at":"2026-01-01T11:10:00Z"},
		{"id":"","chat":{"kind":"private","id":"U"},"route":"c2c","target":"U","at":"2026-01-01T11:10:00Z"}]}`))
	require.NoError(t, err)
	require.Equal(t, int64(0), st.Seq)
	require.Len(t, st.Inbound, 3)
	c := &Channel{cfg: Config{PrivateReplyWindow: time.Hour, GroupReplyWindow: 5 * time.Minute}}
	st.prune(now, c.window)
	var ids []string
	for _, r := range st.Inbound {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"a", "c"}, ids, "b is past the group window, c within the private one")
	_, err = decodeState([]byte(`{"seq":`))
	require.Error(t, err)
}
