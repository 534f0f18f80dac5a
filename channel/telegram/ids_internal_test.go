package telegram

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

const (
	two31   = "2147483648"          // 2^31: one past the message id range
	two52   = "4503599627370496"    // 2^52: one past the id range
	two63   = "9223372036854775808" // 2^63: one past int64
	max52   = "4503599627370495"
	superID = "-1001234567890"
)

// updateWith builds a group message update (or, with edited, an
// edited_message) whose field at path (dot-separated) holds raw JSON.
func updateWith(path, raw string, edited bool) string {
	msg := map[string]any{
		"message_id": json.RawMessage("9"),
		"date":       json.RawMessage("1700000000"),
		"chat":       map[string]any{"id": json.RawMessage(superID), "type": "supergroup", "title": "G"},
		"from":       map[string]any{"id": json.RawMessage("4242"), "is_bot": false, "first_name": "A"},
		"text":       "hi @someone",
		"entities":   []any{map[string]any{"type": "text_mention", "offset": 3, "length": 8, "user": map[string]any{"id": json.RawMessage("5353"), "first_name": "B"}}},
		"reply_to_message": map[string]any{
			"message_id": json.RawMessage("8"), "date": 1699999999, "text": "q",
			"chat": map[string]any{"id": json.RawMessage(superID), "type": "supergroup"},
			"from": map[string]any{"id": json.RawMessage("5353"), "is_bot": false, "first_name": "B"},
		},
	}
	if path != "" {
		keys := strings.Split(path, ".")
		node := msg
		for _, k := range keys[:len(keys)-1] {
			node = node[k].(map[string]any)
		}
		node[keys[len(keys)-1]] = json.RawMessage(raw)
	}
	kind := "message"
	if edited {
		kind = "edited_message"
	}
	b, err := json.Marshal(map[string]any{"update_id": json.RawMessage("3"), kind: msg})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestUpdateIDRanges: ids out of the Bot API's range, or of the wrong JSON
// type, make an update invalid: no event, a skip reason naming the field,
// marked invalid (logged as a warning and acknowledged). Ids in range,
// negative group ids included, are kept.
func TestUpdateIDRanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, raw string
		want            string // "" = valid
	}{
		{"message_id 1e30", "message_id", "1e30", "malformed update: "},
		{"message_id -1", "message_id", "-1", "invalid id: message_id -1"},
		{"message_id 2^31", "message_id", two31, "invalid id: message_id " + two31},
		{"message_id 2^63", "message_id", two63, "malformed update: "},
		{"message_id 1.5", "message_id", "1.5", "malformed update: "},
		{"message_id 9.0", "message_id", "9.0", "malformed update: "},
		{"message_id string", "message_id", `"9"`, "malformed update: "},
		{"message_id max", "message_id", "2147483647", ""},
		{"chat id 1e30", "chat.id", "1e30", "malformed update: "},
		{"chat id 0", "chat.id", "0", "invalid id: chat.id 0"},
		{"chat id 2^52", "chat.id", "-" + two52, "invalid id: chat.id -" + two52},
		{"chat id max", "chat.id", "-" + max52, ""},
		{"basic group id", "chat.id", "-4242", ""},
		{"supergroup id positive", "chat.id", "1001234567890", "a supergroup's id is negative"},
		{"chat id string", "chat.id", `"-100"`, "malformed update: "},
		{"from id -1", "from.id", "-1", "invalid id: from.id -1"},
		{"from id 0", "from.id", "0", "invalid id: from.id 0"},
		{"from id 2^52", "from.id", two52, "invalid id: from.id " + two52},
		{"from id max", "from.id", max52, ""},
		{"from id 2^63", "from.id", two63, "malformed update: "},
		{"sender_chat positive", "sender_chat", `{"id":5,"type":"channel","title":"C"}`, "invalid id: sender_chat.id 5"},
		{"sender_chat ok", "sender_chat", `{"id":-1009,"type":"channel","title":"C"}`, ""},
		{"reply message_id -5", "reply_to_message.message_id", "-5", "invalid id: reply_to_message.message_id -5"},
		{"reply message_id 0 (unknown)", "reply_to_message.message_id", "0", ""},
		{"reply from -1", "reply_to_message.from.id", "-1", "invalid id: reply_to_message.from.id -1"},
		{"reply chat 1.5", "reply_to_message.chat.id", "1.5", "malformed update: "},
		{"text_mention user -1", "entities", `[{"type":"text_mention","offset":0,"length":2,"user":{"id":-1,"first_name":"x"}}]`, "invalid id: entities[0].user.id -1"},
		{"new member 0", "new_chat_members", `[{"id":7,"first_name":"x"},{"id":0,"first_name":"y"}]`, "invalid id: new_chat_members[1].id 0"},
	}
	for _, tc := range tests {
		for _, edited := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{true: " (edited)"}[edited], func(t *testing.T) {
				t.Parallel()
				raw := updateWith(tc.path, tc.raw, edited)
				d, err := testBot.decodeUpdate([]byte(raw), now)
				require.NoError(t, err, raw)
				require.Equal(t, int64(3), d.updateID)
				if tc.want == "" {
					require.Empty(t, d.skip, raw)
					require.False(t, d.invalid)
					require.NotEmpty(t, d.events)
					for _, ev := range d.events {
						checkEventIDs(t, ev)
					}
					return
				}
				require.Empty(t, d.events, raw)
				require.True(t, d.invalid, raw)
				require.Contains(t, d.skip, tc.want, raw)
			})
		}
	}
}

// TestUpdateIDOutOfRange: an update whose update_id is negative, not an
// integer or too large cannot be acknowledged by offset: it is malformed.
func TestUpdateIDOutOfRange(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"-1", "1e30", "1.5", `"3"`, two52, two63, "null"} {
		_, err := testBot.decodeUpdate([]byte(`{"update_id":`+id+`,"message":{"message_id":1}}`), now)
		require.ErrorIs(t, err, errMalformed, id)
	}
	d, err := testBot.decodeUpdate([]byte(`{"update_id":`+max52+`}`), now)
	require.NoError(t, err)
	require.Equal(t, "update without content", d.skip)
	require.False(t, d.invalid, "an update without content is unsupported, not invalid")
}

// checkEventIDs fails unless every id of ev is in the Bot API's range.
func checkEventIDs(t *testing.T, ev channel.Event) {
	t.Helper()
	num := func(what, s string, ok func(int64) bool, optional bool) {
		if s == "" && optional {
			return
		}
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "%s %q in %+v", what, s, ev)
		require.True(t, ok(n), "%s %q out of range in %+v", what, s, ev)
	}
	require.NoError(t, ev.Validate())
	num("bot id", ev.BotID, validUserID, false)
	num("chat id", ev.Chat.ID, validChatID, false)
	if ev.Chat.Kind == channel.Private {
		num("private chat id", ev.Chat.ID, validUserID, false)
	}
	num("sender id", ev.Sender.ID, validChatID, true)
	num("message id", ev.MessageID, validMessageID, ev.Kind == channel.KindNotice)
	if n := ev.Notice; n != nil {
		num("notice operator", n.Operator, validChatID, true)
		num("notice user", n.UserID, validChatID, true)
		num("notice target", n.TargetMessageID, validMessageID, true)
	}
	if ev.Quoted != nil {
		num("quoted id", ev.Quoted.MessageID, validMessageID, false)
	}
	for _, s := range ev.Segments {
		switch s.Type {
		case channel.SegMention:
			num("mention", s.UserID, validUserID, false)
		case channel.SegQuote:
			num("quote", s.MessageID, validMessageID, false)
		}
	}
}

// idFields are the fields FuzzUpdateIDs fills with arbitrary JSON text.
var idFields = []string{
	"message_id", "chat.id", "from.id", "sender_chat", "reply_to_message.message_id", "reply_to_message.from.id",
	"reply_to_message.chat.id", "entities", "new_chat_members", "chat",
}

// FuzzUpdateIDs puts arbitrary JSON text in one id field of an update:
// decoding never panics, and every event it yields has its ids in range.
func FuzzUpdateIDs(f *testing.F) {
	for _, v := range []string{"1e30", "-1", "0", two31, two52, two63, "1.5", `"123"`, "true", "null", "{}", "[]", "-0",
		"1E3", "-" + max52, `{"id":-1}`, `[{"id":-1}]`, `[{"type":"text_mention","offset":0,"length":1,"user":{"id":0}}]`} {
		for field := range idFields {
			f.Add(uint8(field), v, false)
		}
	}
	f.Fuzz(func(t *testing.T, field uint8, v string, edited bool) {
		if !json.Valid([]byte(v)) {
			b, _ := json.Marshal(v) // the template needs a JSON value
			v = string(b)
		}
		raw := updateWith(idFields[int(field)%len(idFields)], v, edited)
		d, err := testBot.decodeUpdate([]byte(raw), now)
		if err != nil {
			return
		}
		for _, ev := range d.events {
			checkEventIDs(t, ev)
		}
	})
}

// FuzzDecodeUpdate feeds arbitrary bytes to the update decoder: it never
// panics, fails only with errMalformed, and every event has its ids in
// range.
func FuzzDecodeUpdate(f *testing.F) {
	f.Add([]byte(updateWith("", "", false)))
	f.Add([]byte(updateWith("", "", true)))
	f.Add([]byte(updateWith("message_id", "1e30", false)))
	f.Add([]byte(updateWith("chat.id", "-"+two52, false)))
	f.Add([]byte(`{"update_id":-1}`))
	f.Add([]byte(`{"update_id":3,"message":{"message_id":5,"chat":{"id":-1},"new_chat_members":[{"id":1}]}}`))
	f.Add([]byte(`{not json`))
	f.Add([]byte(updateWith("photo", `[{"file_id":"p","width":1,"height":1}]`, false)))
	f.Add([]byte(updateWith("sticker", `{"file_id":"s","is_animated":true,"emoji":"😀"}`, true)))
	f.Add([]byte(updateWith("reply_to_message.voice", `{"file_id":"v","duration":3}`, false)))
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := testBot.decodeUpdate(raw, now)
		if err != nil {
			require.ErrorIs(t, err, errMalformed)
			return
		}
		require.True(t, validUpdateID(d.updateID))
		if d.invalid {
			require.Empty(t, d.events)
		}
		for _, ev := range d.events {
			checkEventIDs(t, ev)
			checkMedia(t, ev)
		}
	})
}
