package onebot

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

const testSelf = "10001000"

func idChannel(t testing.TB) *Channel {
	t.Helper()
	c, err := New(Config{SelfID: testSelf, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	return c
}

// eventJSON renders a payload from ordered key/raw-JSON pairs, replacing
// the value of key with raw (or dropping the key when raw is "-").
func eventJSON(pairs [][2]string, key, raw string) string {
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for _, p := range pairs {
		v := p[1]
		if p[0] == key {
			if raw == "-" {
				continue
			}
			v = raw
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(strconv.Quote(p[0]) + ":" + v)
	}
	b.WriteByte('}')
	return b.String()
}

var (
	groupMsg = [][2]string{
		{"time", "1700000000"}, {"self_id", testSelf}, {"post_type", `"message"`}, {"message_type", `"group"`},
		{"message_id", "12"}, {"message_seq", "7"}, {"group_id", "100200300"}, {"user_id", "4242"},
		{"message", `"hi"`}, {"sender", `{"user_id":4242,"nickname":"alice"}`},
	}
	privateMsg = [][2]string{
		{"time", "1700000000"}, {"self_id", testSelf}, {"post_type", `"message"`}, {"message_type", `"private"`},
		{"message_id", "13"}, {"user_id", "4242"}, {"group_id", "0"}, {"message", `"hi"`},
	}
	selfPrivate = [][2]string{
		{"time", "1700000000"}, {"self_id", testSelf}, {"post_type", `"message_sent"`}, {"message_type", `"private"`},
		{"message_id", "14"}, {"user_id", testSelf}, {"target_id", "4242"}, {"message", `"hi"`},
	}
	groupRecall = [][2]string{
		{"time", "1700000000"}, {"self_id", testSelf}, {"post_type", `"notice"`}, {"notice_type", `"group_recall"`},
		{"group_id", "100200300"}, {"user_id", "4242"}, {"operator_id", "4243"}, {"message_id", "12"},
	}
	poke = [][2]string{
		{"time", "1700000000"}, {"self_id", testSelf}, {"post_type", `"notice"`}, {"notice_type", `"notify"`},
		{"sub_type", `"poke"`}, {"group_id", "100200300"}, {"user_id", "4242"}, {"target_id", testSelf},
	}
	groupBan = [][2]string{
		{"time", "1700000000"}, {"self_id", testSelf}, {"post_type", `"notice"`}, {"notice_type", `"group_ban"`},
		{"sub_type", `"ban"`}, {"group_id", "100200300"}, {"operator_id", "4243"}, {"user_id", "0"}, {"duration", "60"},
	}
	friendRequest = [][2]string{
		{"time", "1700000000"}, {"self_id", testSelf}, {"post_type", `"request"`}, {"request_type", `"friend"`},
		{"user_id", "4242"}, {"comment", `"hi"`}, {"flag", `"flag-1"`},
	}
	heartbeat = [][2]string{
		{"time", "1700000000"}, {"self_id", testSelf}, {"post_type", `"meta_event"`}, {"meta_event_type", `"heartbeat"`},
		{"status", `{"online":true,"good":true}`}, {"interval", "0"},
	}
)

const (
	two31 = "2147483648"          // 2^31: one past the int32 range
	two63 = "9223372036854775808" // 2^63: one past the int64 range
)

// TestEventIDRanges: every id of a pushed event must be in the OneBot v11
// range. Out-of-range, fractional, exponent, string-typed and wrongly
// typed ids make the event invalid (errInvalidID, naming the field), so it
// is never enqueued; ids in range are kept, in canonical decimal form.
func TestEventIDRanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		shape   [][2]string
		key     string
		raw     string
		wantErr string // "" = valid
		check   func(t *testing.T, ev channel.Event)
	}{
		// The reported case and its parts.
		{"issue: message_id 1e30", groupMsg, "message_id", "1e30", "message_id 1e30: not an integer", nil},
		{"issue: group_id -1", groupMsg, "group_id", "-1", "group_id -1: not a positive QQ number", nil},

		// message_id: a nonzero int32, negative allowed.
		{"message_id -1", groupMsg, "message_id", "-1", "", func(t *testing.T, ev channel.Event) { require.Equal(t, "-1", ev.MessageID) }},
		{"message_id min int32", groupMsg, "message_id", "-2147483648", "", func(t *testing.T, ev channel.Event) { require.Equal(t, "-2147483648", ev.MessageID) }},
		{"message_id max int32", groupMsg, "message_id", "2147483647", "", func(t *testing.T, ev channel.Event) { require.Equal(t, "2147483647", ev.MessageID) }},
		{"message_id 0", groupMsg, "message_id", "0", "0 is not a message id", nil},
		{"message_id 2^31", groupMsg, "message_id", two31, "outside the 32-bit range", nil},
		{"message_id -2^31-1", groupMsg, "message_id", "-2147483649", "outside the 32-bit range", nil},
		{"message_id 2^63", groupMsg, "message_id", two63, "out of the 64-bit range", nil},
		{"message_id 1.5", groupMsg, "message_id", "1.5", "not an integer", nil},
		{"message_id 12.0", groupMsg, "message_id", "12.0", "not an integer", nil},
		{"message_id 1E3", groupMsg, "message_id", "1E3", "not an integer", nil},
		{"message_id string", groupMsg, "message_id", `"123"`, "a string, not a number", nil},
		{"message_id bool", groupMsg, "message_id", "true", "a boolean", nil},
		{"message_id object", groupMsg, "message_id", `{"id":1}`, "an object or array", nil},
		{"message_id array", groupMsg, "message_id", `[1]`, "an object or array", nil},
		{"message_id null", groupMsg, "message_id", "null", "message without message_id", nil},
		{"message_id absent", groupMsg, "message_id", "-", "message without message_id", nil},

		// group_id of a group message: a positive int64.
		{"group_id 0", groupMsg, "group_id", "0", "group_id 0: not a positive QQ number", nil},
		{"group_id 1e30", groupMsg, "group_id", "1e30", "group_id 1e30: not an integer", nil},
		{"group_id 2^63", groupMsg, "group_id", two63, "out of the 64-bit range", nil},
		{"group_id 1.5", groupMsg, "group_id", "1.5", "not an integer", nil},
		{"group_id string", groupMsg, "group_id", `"100200300"`, "a string, not a number", nil},
		{"group_id absent", groupMsg, "group_id", "-", "without group_id", nil},
		{"group_id 2^31 (64-bit)", groupMsg, "group_id", two31, "", func(t *testing.T, ev channel.Event) {
			require.Equal(t, channel.Chat{Kind: channel.Group, ID: two31}, ev.Chat)
		}},
		{"group_id max int64", groupMsg, "group_id", strconv.FormatInt(math.MaxInt64, 10), "", nil},

		// user_id: a positive int64; the anonymous sender's 80000000 too.
		{"user_id -1", groupMsg, "user_id", "-1", "user_id -1", nil},
		{"user_id 0", groupMsg, "user_id", "0", "user_id 0", nil},
		{"user_id 2^63", groupMsg, "user_id", two63, "user_id", nil},
		{"user_id string", groupMsg, "user_id", `"4242"`, "user_id \"4242\": a string", nil},
		{"user_id 4.242e3", groupMsg, "user_id", "4.242e3", "not an integer", nil},
		{"user_id anonymous", groupMsg, "user_id", "80000000", "", func(t *testing.T, ev channel.Event) { require.Equal(t, "80000000", ev.Sender.ID) }},
		{"sender.user_id -5", groupMsg, "sender", `{"user_id":-5}`, "sender.user_id -5", nil},

		// self_id: a positive int64.
		{"self_id -1", groupMsg, "self_id", "-1", "self_id -1", nil},
		{"self_id 0", groupMsg, "self_id", "0", "self_id 0", nil},
		{"self_id string", groupMsg, "self_id", `"10001000"`, "self_id", nil},
		{"self_id exponent", groupMsg, "self_id", "1.0001e7", "self_id", nil},

		// message_seq: a non-negative integer.
		{"message_seq -1", groupMsg, "message_seq", "-1", "message_seq -1", nil},
		{"message_seq 1.5", groupMsg, "message_seq", "1.5", "message_seq", nil},
		{"message_seq string", groupMsg, "message_seq", `"7"`, "message_seq", nil},
		{"message_seq 0", groupMsg, "message_seq", "0", "", func(t *testing.T, ev channel.Event) { require.Zero(t, ev.Seq) }},

		// A private message's group_id may be 0 (none), nothing else.
		{"private group_id 0", privateMsg, "group_id", "0", "", func(t *testing.T, ev channel.Event) {
			require.Equal(t, channel.Chat{Kind: channel.Private, ID: "4242"}, ev.Chat)
		}},
		{"private group_id -1", privateMsg, "group_id", "-1", "group_id -1", nil},
		{"private user_id 1e30", privateMsg, "user_id", "1e30", "user_id 1e30", nil},
		{"self private target_id -1", selfPrivate, "target_id", "-1", "target_id -1", nil},
		{"self private target_id 0", selfPrivate, "target_id", "0", "target_id 0", nil},

		// Notices the adapter uses.
		{"recall message_id 1e30", groupRecall, "message_id", "1e30", "message_id 1e30", nil},
		{"recall group_id -1", groupRecall, "group_id", "-1", "group_id -1", nil},
		{"recall operator_id -1", groupRecall, "operator_id", "-1", "operator_id -1", nil},
		{"recall operator_id 0 (none)", groupRecall, "operator_id", "0", "", func(t *testing.T, ev channel.Event) {
			require.Equal(t, "4242", ev.Notice.Operator)
		}},
		{"poke target_id 1.5", poke, "target_id", "1.5", "target_id 1.5", nil},
		{"poke user_id string", poke, "user_id", `"4242"`, "user_id", nil},
		{"ban group_id -1", groupBan, "group_id", "-1", "group_id -1", nil},
		{"ban user_id -1", groupBan, "user_id", "-1", "user_id -1", nil},
		{"friend request user_id -1", friendRequest, "user_id", "-1", "user_id -1", nil},
		{"friend request user_id string", friendRequest, "user_id", `"4242"`, "user_id \"4242\": a string", nil},
		{"friend request user_id 2^63", friendRequest, "user_id", two63, "out of the 64-bit range", nil},
		{"friend request self_id 0", friendRequest, "self_id", "0", "self_id 0", nil},
		{"friend request user_id 2^31 (64-bit)", friendRequest, "user_id", two31, "", func(t *testing.T, ev channel.Event) {
			require.Equal(t, channel.Chat{Kind: channel.Private, ID: two31}, ev.Chat)
			require.Equal(t, two31, ev.Notice.UserID)
		}},
		{"heartbeat self_id 1e30", heartbeat, "self_id", "1e30", "self_id 1e30", nil},
		{"heartbeat self_id -1", heartbeat, "self_id", "-1", "self_id -1", nil},
		{"heartbeat self_id 0 (before login)", heartbeat, "self_id", "0", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := idChannel(t)
			raw := eventJSON(tc.shape, tc.key, tc.raw)
			require.True(t, json.Valid([]byte(raw)), raw)
			ev, err := c.decodeEvent([]byte(raw), channel.SourceLive)
			if tc.wantErr != "" {
				require.Error(t, err, raw)
				require.ErrorIs(t, err, errInvalidID, raw)
				require.NotErrorIs(t, err, errMalformed, "an invalid id is not a malformed body")
				require.ErrorContains(t, err, tc.wantErr, raw)
				return
			}
			if tc.shape[3][1] == `"group_ban"` || tc.shape[2][1] == `"meta_event"` {
				require.ErrorIs(t, err, errIgnored, raw)
				return
			}
			require.NoError(t, err, raw)
			require.NoError(t, ev.Validate())
			if tc.check != nil {
				tc.check(t, ev)
			}
		})
	}
}

// TestWholeGroupMute: a group_ban with user_id 0 (the whole group) is
// still understood after the range checks.
func TestWholeGroupMute(t *testing.T) {
	t.Parallel()
	c := idChannel(t)
	_, err := c.decodeEvent([]byte(eventJSON(groupBan, "", "")), channel.SourceLive)
	require.ErrorIs(t, err, errIgnored)
	c.mu.Lock()
	_, muted := c.muted["100200300"]
	c.mu.Unlock()
	require.True(t, muted)
}

// TestWireIDText: the text forms of ids (segment data, headers, callers'
// arguments) are checked the same way.
func TestWireIDText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		message bool
		ok      bool
	}{
		{"4242", false, true},
		{"9223372036854775807", false, true},
		{"0", false, false},
		{"-1", false, false},
		{"1e30", false, false},
		{"1.5", false, false},
		{"+5", false, false},
		{"007", false, false},
		{two63, false, false},
		{"", false, false},
		{"-1", true, true},
		{"-2147483648", true, true},
		{"0", true, false},
		{two31, true, false},
		{"1e3", true, false},
		{" 1", true, false},
	} {
		got, ok := idText(tc.in, tc.message)
		require.Equal(t, tc.ok, ok, "%q message=%v", tc.in, tc.message)
		if ok {
			require.Equal(t, tc.in, got)
		}
	}
}

// TestSegmentIDs: an at segment of something that is not a QQ number and
// a reply segment of something that is not a message id are dropped.
func TestSegmentIDs(t *testing.T) {
	t.Parallel()
	m := Message{
		{Type: "reply", Data: map[string]string{"id": "1e30"}},
		{Type: "reply", Data: map[string]string{"id": "-7"}},
		{Type: "at", Data: map[string]string{"qq": "-1"}},
		{Type: "at", Data: map[string]string{"qq": "all"}},
		{Type: "at", Data: map[string]string{"qq": testSelf}},
		{Type: "at", Data: map[string]string{"qq": "1.5"}},
		TextSegment(" hi"),
	}
	segs, toMe := toSegments(m, testSelf)
	require.True(t, toMe)
	require.Equal(t, []channel.Segment{channel.Quote("-7"), channel.Mention("all"), channel.Mention(testSelf), channel.Text(" hi")}, segs)

	for _, out := range []channel.Outgoing{
		{Chat: channel.Chat{Kind: channel.Group, ID: "1"}, Text: "x", ReplyTo: "1e30"},
		{Chat: channel.Chat{Kind: channel.Group, ID: "1"}, Text: "x", ReplyTo: two31},
		{Chat: channel.Chat{Kind: channel.Group, ID: "1"}, Text: "x", Mentions: []string{"-1"}},
	} {
		_, err := OutgoingMessage(out)
		require.Error(t, err, "%+v", out)
	}
	m, err := OutgoingMessage(channel.Outgoing{Text: "x", ReplyTo: "-7", Mentions: []string{"all", "4242"}})
	require.NoError(t, err)
	require.Len(t, m, 4)
}

// eventShapes are the templates FuzzEventIDs fills in.
var eventShapes = [][][2]string{groupMsg, privateMsg, selfPrivate, groupRecall, poke, groupBan, heartbeat, friendRequest}

// FuzzEventIDs puts arbitrary JSON text in one field of each event shape:
// decoding never panics, and an event it yields has every id in range.
func FuzzEventIDs(f *testing.F) {
	for _, v := range []string{"1e30", "-1", "0", two31, two63, "1.5", `"123"`, "true", "null", "{}", "[]", "-0", "1E3", "12.0",
		"-2147483648", "9223372036854775807", "-9223372036854775809", `"1e30"`, "  7 ", "", "[1,2", "\"\\u0000\""} {
		for shape := range eventShapes {
			for key := range 10 {
				f.Add(uint8(shape), uint8(key), v)
			}
		}
	}
	f.Fuzz(func(t *testing.T, shape, key uint8, v string) {
		pairs := eventShapes[int(shape)%len(eventShapes)]
		k := pairs[int(key)%len(pairs)][0]
		c := idChannel(t)
		ev, err := c.decodeEvent([]byte(eventJSON(pairs, k, v)), channel.SourceLive)
		if err != nil {
			return
		}
		checkEventIDs(t, ev)
	})
}

// FuzzDecodeEvent feeds arbitrary bytes to the event decoder and the
// history decoder: neither panics, and every event has its ids in range.
func FuzzDecodeEvent(f *testing.F) {
	for _, shape := range eventShapes {
		f.Add([]byte(eventJSON(shape, "", "")))
	}
	f.Add([]byte(`{"post_type":"message","message_type":"group","message_id":1e30,"group_id":-1,"user_id":1,"self_id":10001000,"time":1,"message":"x"}`))
	f.Add([]byte(`{"post_type":"message","message_id":"5","user_id":"6","message":[{"type":"reply","data":{"id":"1e30"}}]}`))
	f.Add([]byte(`{"messages":[{"message_id":5,"user_id":6,"message_seq":-1},{"message_id":2147483648,"user_id":6}]}`))
	f.Add([]byte(`{not json`))
	// Requests: a group join request and invitation (ignored), friend
	// requests with a flag or comment of the wrong type, or without a flag.
	f.Add([]byte(`{"time":1,"self_id":10001000,"post_type":"request","request_type":"group","sub_type":"add","group_id":1,"user_id":2,"comment":"c","flag":"g"}`))
	f.Add([]byte(`{"time":1,"self_id":10001000,"post_type":"request","request_type":"group","sub_type":"invite","group_id":-1,"user_id":2,"flag":"g"}`))
	f.Add([]byte(`{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"flag":7,"comment":null}`))
	f.Add([]byte(`{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"flag":"f","comment":["x"]}`))
	f.Add([]byte(`{"time":1,"self_id":10001000,"post_type":"request","request_type":"friend","user_id":4242,"flag":""}`))
	f.Add([]byte(`{"post_type":"request","request_type":"friend","flag":"\u0000"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := idChannel(t)
		if ev, err := c.decodeEvent(raw, channel.SourceLive); err == nil {
			checkEventIDs(t, ev)
		}
		for _, chat := range []channel.Chat{{Kind: channel.Group, ID: "100200300"}, {Kind: channel.Private, ID: "4242"}} {
			items, err := c.historyItems(raw, chat)
			if err != nil {
				continue
			}
			for _, it := range items {
				checkEventIDs(t, it.ev)
				require.GreaterOrEqual(t, it.seq, int64(0))
			}
		}
	})
}

// checkEventIDs fails unless every id of ev is in the OneBot range.
func checkEventIDs(t *testing.T, ev channel.Event) {
	t.Helper()
	qq := func(what, s string, optional bool) {
		if s == "" && optional {
			return
		}
		if s == "all" && what == "mention" {
			return
		}
		_, ok := idText(s, false)
		require.True(t, ok, "%s %q is not a QQ number in %+v", what, s, ev)
	}
	msg := func(what, s string, optional bool) {
		if s == "" && optional {
			return
		}
		_, ok := idText(s, true)
		require.True(t, ok, "%s %q is not a message id in %+v", what, s, ev)
	}
	require.NoError(t, ev.Validate())
	qq("bot id", ev.BotID, false)
	qq("chat id", ev.Chat.ID, false)
	qq("sender id", ev.Sender.ID, true)
	msg("message id", ev.MessageID, ev.Kind == channel.KindNotice)
	require.GreaterOrEqual(t, ev.Seq, int64(0))
	if n := ev.Notice; n != nil {
		qq("notice operator", n.Operator, true)
		qq("notice user", n.UserID, true)
		msg("notice target message", n.TargetMessageID, true)
		if n.Type == channel.NoticeFriendRequest {
			require.NotEmpty(t, n.Flag, "a friend request without a flag: %+v", ev)
			require.Equal(t, channel.Chat{Kind: channel.Private, ID: n.UserID}, ev.Chat)
			require.Equal(t, n.UserID, ev.Sender.ID)
		}
	}
	for _, s := range ev.Segments {
		switch s.Type {
		case channel.SegMention:
			qq("mention", s.UserID, false)
		case channel.SegQuote:
			msg("quote", s.MessageID, false)
		}
	}
}
