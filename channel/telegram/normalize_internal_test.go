package telegram

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

var testBot = botInfo{id: 123456789, idStr: "123456789", username: "persona_test_bot"}

var now = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func decodeOne(t *testing.T, raw string) decoded {
	t.Helper()
	d, err := testBot.decodeUpdate([]byte(raw), now)
	require.NoError(t, err)
	return d
}

// The sample updates of the official "Marvin's Marvellous Guide to All
// Things Webhook" (core.telegram.org/bots/webhooks, "Testing your bot with
// updates"), copied verbatim.
const (
	officialText = `{"update_id":10000,"message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","id":1111111,"type":"private","first_name":"Test Firstname","username":"Testusername"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "text":"/start"}}`
	// The first sample of the page has no chat type.
	officialTextNoType = `{"update_id":10000,"message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","id":1111111,"first_name":"Test","username":"Test"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test","username":"Test"},
 "text":"/start"}}`
	officialForwarded = `{"update_id":10000,"message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","id":1111111,"type":"private","first_name":"Test Firstname","username":"Testusername"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "forward_from":{"last_name":"Forward Lastname","id":222222,"first_name":"Forward Firstname"},
 "forward_date":1441645550,
 "text":"/start"}}`
	officialForwardedChannel = `{"update_id":10000,"message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "forward_from":{"id":-10000000000,"type":"channel","title":"Test channel"},
 "forward_date":1441645550,
 "text":"/start"}}`
	officialReply = `{"update_id":10000,"message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "text":"/start",
 "reply_to_message":{"date":1441645000,
   "chat":{"last_name":"Reply Lastname","type":"private","id":1111112,"first_name":"Reply Firstname","username":"Testusername"},
   "message_id":1334,"text":"Original"}}}`
	officialEdited = `{"update_id":10000,"edited_message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "text":"Edited text","edit_date":1441646600}}`
	officialEntities = `{"update_id":10000,"message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "text":"Bold and italics",
 "entities":[{"type":"italic","offset":9,"length":7},{"type":"bold","offset":0,"length":4}]}}`
	officialAudio = `{"update_id":10000,"message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "audio":{"file_id":"AwADBAADbXXXXXXXXXXXGBdhD2l6_XX","duration":243,"mime_type":"audio/mpeg","file_size":3897500,"title":"Test music file"}}}`
	officialVoice = `{"update_id":10000,"message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "voice":{"file_id":"AwADBAADbXXXXXXXXXXXGBdhD2l6_XX","duration":5,"mime_type":"audio/ogg","file_size":23000}}}`
	officialDocument = `{"update_id":10000,"message":{"date":1441645532,
 "chat":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "message_id":1365,
 "from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "document":{"file_id":"AwADBAADbXXXXXXXXXXXGBdhD2l6_XX","file_name":"Testfile.pdf","mime_type":"application/pdf","file_size":536392}}}`
	officialInlineQuery = `{"update_id":10000,"inline_query":{"id":134567890097,
 "from":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "query":"inline query","offset":""}}`
	officialChosenInline = `{"update_id":10000,"chosen_inline_result":{"result_id":"12",
 "from":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "query":"inline query","inline_message_id":"1234csdbsk4839"}}`
	officialCallback = `{"update_id":10000,"callback_query":{"id":"4382bfdwdsb323b2d9",
 "from":{"last_name":"Test Lastname","type":"private","id":1111111,"first_name":"Test Firstname","username":"Testusername"},
 "data":"Data from button callback","inline_message_id":"1234csdbsk4839"}}`
)

var officialSender = channel.Sender{ID: "1111111", Name: "Test Firstname Test Lastname"}

func TestOfficialPayloads(t *testing.T) {
	t.Parallel()
	privateChat := channel.Chat{Kind: channel.Private, ID: "1111111"}
	sent := time.Unix(1441645532, 0)
	media := func(typ channel.SegmentType, m channel.Media) []channel.Segment {
		return []channel.Segment{{Type: typ, Media: &m}}
	}
	tests := []struct {
		name   string
		raw    string
		segs   []channel.Segment
		sender channel.Sender
	}{
		{"text", officialText, []channel.Segment{channel.Text("/start")}, officialSender},
		{"text without chat type", officialTextNoType, []channel.Segment{channel.Text("/start")}, channel.Sender{ID: "1111111", Name: "Test Test Lastname"}},
		{"forwarded", officialForwarded, []channel.Segment{channel.Text("/start")}, officialSender},
		{"forwarded channel message", officialForwardedChannel, []channel.Segment{channel.Text("/start")}, officialSender},
		{"entities", officialEntities, []channel.Segment{channel.Text("Bold and italics")}, officialSender},
		{"audio", officialAudio, media(channel.SegFile, channel.Media{FileID: "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX", MIME: "audio/mpeg", Size: 3897500, Name: "Test music file", Duration: 243}), officialSender},
		{"voice", officialVoice, media(channel.SegVoice, channel.Media{FileID: "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX", MIME: "audio/ogg", Size: 23000, Duration: 5}), officialSender},
		{"document", officialDocument, media(channel.SegFile, channel.Media{FileID: "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX", MIME: "application/pdf", Size: 536392, Name: "Testfile.pdf"}), officialSender},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := decodeOne(t, tc.raw)
			require.Equal(t, int64(10000), d.updateID)
			require.Empty(t, d.skip)
			require.Len(t, d.events, 1)
			ev := d.events[0]
			require.NoError(t, ev.Validate())
			require.Equal(t, "telegram", ev.Platform)
			require.Equal(t, testBot.idStr, ev.BotID)
			require.Equal(t, channel.KindMessage, ev.Kind)
			require.Equal(t, privateChat, ev.Chat)
			require.Equal(t, "1365", ev.MessageID)
			require.Equal(t, sent, ev.Time)
			require.Equal(t, tc.sender, ev.Sender)
			require.Equal(t, tc.segs, ev.Segments)
			require.False(t, ev.ToMe)
			require.Nil(t, ev.Quoted)
			require.JSONEq(t, tc.raw, string(ev.Raw))
			require.Equal(t, "telegram/123456789/private:1111111/1365", ev.Key())
		})
	}

	t.Run("reply", func(t *testing.T) {
		t.Parallel()
		ev := decodeOne(t, officialReply).events[0]
		require.Equal(t, []channel.Segment{channel.Quote("1334"), channel.Text("/start")}, ev.Segments)
		require.Equal(t, "1334", ev.QuoteID())
		require.Equal(t, &channel.Quoted{
			MessageID: "1334",
			Sender:    channel.Sender{ID: "1111112", Name: "Reply Firstname Reply Lastname"},
			Text:      "Original",
			Segments:  []channel.Segment{channel.Text("Original")},
		}, ev.Quoted)
	})

	t.Run("edited", func(t *testing.T) {
		t.Parallel()
		ev := decodeOne(t, officialEdited).events[0]
		require.NoError(t, ev.Validate())
		require.Equal(t, channel.KindNotice, ev.Kind)
		require.Equal(t, &channel.Notice{Type: channel.NoticeMessageEdited, Operator: "1111111", UserID: "1111111", TargetMessageID: "1365"}, ev.Notice)
		require.Equal(t, time.Unix(1441646600, 0), ev.Time)
		require.Equal(t, "Edited text", ev.Text())
		require.Empty(t, ev.MessageID)
		require.True(t, strings.HasPrefix(ev.Key(), "sha256:"))
	})

	for name, raw := range map[string]string{"inline_query": officialInlineQuery, "chosen_inline_result": officialChosenInline, "callback_query": officialCallback} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := decodeOne(t, raw)
			require.Equal(t, int64(10000), d.updateID)
			require.Empty(t, d.events)
			require.Equal(t, "unsupported update type "+name, d.skip)
		})
	}
}

// groupMsg builds a supergroup message update with the given text and
// entities JSON.
func groupMsg(text, entities string) string {
	return `{"update_id":7,"message":{"message_id":55,"date":1700000000,
	"chat":{"id":-1001234567890,"type":"supergroup","title":"G"},
	"from":{"id":4242,"is_bot":false,"first_name":"Alice"},
	"text":` + jsonString(text) + `,"entities":` + entities + `}}`
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func TestEntitiesUTF16(t *testing.T) {
	t.Parallel()
	bot := channel.Segment{Type: channel.SegMention, UserID: testBot.idStr, Text: "@persona_test_bot"}
	tests := []struct {
		name     string
		text     string
		entities string
		want     []channel.Segment
		toMe     bool
	}{
		{
			// 😀 is two UTF-16 units: the mention starts at unit 3 (byte 5).
			name: "emoji before mention", text: "😀 @persona_test_bot hi",
			entities: `[{"type":"mention","offset":3,"length":17}]`,
			want:     []channel.Segment{channel.Text("😀 "), bot, channel.Text(" hi")}, toMe: true,
		},
		{
			// 你好 (2) + 👋🏽 (4) + 世界 (2) + space (1) = 9 units; the
			// username compares case-insensitively.
			name: "CJK and emoji mix", text: "你好👋🏽世界 @Persona_Test_Bot 看这个🇯🇵",
			entities: `[{"type":"mention","offset":9,"length":17}]`,
			want: []channel.Segment{channel.Text("你好👋🏽世界 "),
				{Type: channel.SegMention, UserID: testBot.idStr, Text: "@Persona_Test_Bot"}, channel.Text(" 看这个🇯🇵")},
			toMe: true,
		},
		{
			name: "text mention after CJK, other username stays text", text: "嗨 Bob😀 and @someone",
			entities: `[{"type":"mention","offset":12,"length":8},{"type":"text_mention","offset":2,"length":3,"user":{"id":5353,"is_bot":false,"first_name":"Bob"}}]`,
			want: []channel.Segment{channel.Text("嗨 "), {Type: channel.SegMention, UserID: "5353", Text: "Bob"},
				channel.Text("😀 and @someone")},
		},
		{
			name: "text mention of the bot", text: "hey Persona",
			entities: `[{"type":"text_mention","offset":4,"length":7,"user":{"id":123456789,"is_bot":true,"first_name":"Persona"}}]`,
			want:     []channel.Segment{channel.Text("hey "), {Type: channel.SegMention, UserID: testBot.idStr, Text: "Persona"}}, toMe: true,
		},
		{
			name: "command addressed to the bot", text: "/start@persona_test_bot now",
			entities: `[{"type":"bot_command","offset":0,"length":23}]`,
			want:     []channel.Segment{channel.Mention(testBot.idStr), channel.Text("/start@persona_test_bot now")}, toMe: true,
		},
		{
			name: "command for another bot", text: "/start@other_bot",
			entities: `[{"type":"bot_command","offset":0,"length":16}]`,
			want:     []channel.Segment{channel.Text("/start@other_bot")},
		},
		{
			name: "plain command", text: "/help me",
			entities: `[{"type":"bot_command","offset":0,"length":5}]`,
			want:     []channel.Segment{channel.Text("/help me")},
		},
		{
			// A byte offset (as a naive client would compute) runs past the
			// end in UTF-16 units: ignored, the text is kept whole.
			name: "byte offset instead of UTF-16", text: "😀 @persona_test_bot",
			entities: `[{"type":"mention","offset":5,"length":17}]`,
			want:     []channel.Segment{channel.Text("😀 @persona_test_bot")},
		},
		{
			name: "entity cutting a surrogate pair", text: "😀x @persona_test_bot",
			entities: `[{"type":"mention","offset":1,"length":2},{"type":"mention","offset":4,"length":17}]`,
			want:     []channel.Segment{channel.Text("😀x "), bot}, toMe: true,
		},
		{
			name: "overlapping and negative entities", text: "@persona_test_bot!",
			entities: `[{"type":"mention","offset":0,"length":17},{"type":"mention","offset":3,"length":5},{"type":"mention","offset":-1,"length":3},{"type":"mention","offset":2,"length":0}]`,
			want:     []channel.Segment{bot, channel.Text("!")}, toMe: true,
		},
		{
			name: "formatting entities ignored", text: "bold @persona_test_bot",
			entities: `[{"type":"bold","offset":0,"length":4},{"type":"mention","offset":5,"length":17},{"type":"italic","offset":5,"length":17}]`,
			want:     []channel.Segment{channel.Text("bold "), bot}, toMe: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := decodeOne(t, groupMsg(tc.text, tc.entities))
			require.Empty(t, d.skip)
			ev := d.events[0]
			require.Equal(t, tc.want, ev.Segments)
			require.Equal(t, tc.toMe, ev.ToMe)
			require.Equal(t, tc.toMe, ev.Mentions(testBot.idStr))
			require.Equal(t, channel.Chat{Kind: channel.Group, ID: "-1001234567890"}, ev.Chat)
		})
	}
}

func TestMessageShapes(t *testing.T) {
	t.Parallel()
	const chat = `"chat":{"id":-100777,"type":"supergroup","title":"G"}`
	tests := []struct {
		name  string
		raw   string
		check func(t *testing.T, d decoded)
	}{
		{"largest photo with caption mention", `{"update_id":1,"message":{"message_id":9,"date":1700000000,` + chat + `,
			"from":{"id":1,"is_bot":false,"first_name":"A"},
			"photo":[{"file_id":"small","file_unique_id":"s","width":90,"height":51,"file_size":1000},
			         {"file_id":"big","file_unique_id":"b","width":1280,"height":720,"file_size":90000},
			         {"file_id":"mid","file_unique_id":"m","width":320,"height":180,"file_size":9000}],
			"caption":"look @persona_test_bot","caption_entities":[{"type":"mention","offset":5,"length":17}]}}`,
			func(t *testing.T, d decoded) {
				ev := d.events[0]
				require.Equal(t, channel.SegImage, ev.Segments[0].Type)
				require.Equal(t, &channel.Media{FileID: "big", MIME: "image/jpeg", Size: 90000}, ev.Segments[0].Media)
				require.Equal(t, "look ", ev.Text())
				require.True(t, ev.ToMe)
				require.False(t, ev.MediaOnly())
			}},
		{"video, sticker, animation", `{"update_id":1,"message":{"message_id":9,"date":1700000000,` + chat + `,
			"from":{"id":1,"is_bot":false,"first_name":"A"},
			"animation":{"file_id":"gif","mime_type":"video/mp4"},"document":{"file_id":"gif","mime_type":"video/mp4"},
			"sticker":{"file_id":"st","is_animated":false,"is_video":true}}}`,
			func(t *testing.T, d decoded) {
				segs := d.events[0].Segments
				require.Len(t, segs, 2, "the document twin of an animation is not repeated")
				require.Equal(t, channel.SegVideo, segs[0].Type)
				require.Equal(t, channel.SegSticker, segs[1].Type)
				require.Equal(t, "video/webm", segs[1].Media.MIME)
				require.True(t, d.events[0].MediaOnly())
			}},
		{"reply to the bot", `{"update_id":1,"message":{"message_id":9,"date":1700000000,` + chat + `,
			"from":{"id":1,"is_bot":false,"first_name":"A"},"text":"ok",
			"reply_to_message":{"message_id":8,"date":1699999999,` + chat + `,"from":{"id":123456789,"is_bot":true,"first_name":"Persona","username":"persona_test_bot"},"text":"question?"}}}`,
			func(t *testing.T, d decoded) {
				ev := d.events[0]
				require.True(t, ev.Quoted.FromBot)
				require.Equal(t, "8", ev.QuoteID())
				require.Equal(t, channel.Sender{ID: "123456789", Name: "Persona", IsBot: true}, ev.Quoted.Sender)
				require.False(t, ev.ToMe)
				require.Len(t, d.users, 2, "both users are remembered for mentions")
			}},
		{"forum topic message is not a quote", `{"update_id":1,"message":{"message_id":9,"date":1700000000,` + chat + `,
			"from":{"id":1,"is_bot":false,"first_name":"A"},"text":"in a topic","is_topic_message":true,"message_thread_id":3,
			"reply_to_message":{"message_id":3,"date":1699999999,` + chat + `,"from":{"id":1,"is_bot":false,"first_name":"A"},"forum_topic_created":{"name":"T","icon_color":1}}}}`,
			func(t *testing.T, d decoded) {
				require.Empty(t, d.events[0].QuoteID())
				require.Nil(t, d.events[0].Quoted)
			}},
		{"anonymous admin", `{"update_id":1,"message":{"message_id":9,"date":1700000000,` + chat + `,
			"from":{"id":1087968824,"is_bot":true,"first_name":"Group","username":"GroupAnonymousBot"},
			"sender_chat":{"id":-100777,"type":"supergroup","title":"G"},"text":"hi"}}`,
			func(t *testing.T, d decoded) {
				require.Equal(t, channel.Sender{ID: "-100777", Name: "G", Role: channel.RoleAdmin}, d.events[0].Sender)
			}},
		{"new members", `{"update_id":1,"message":{"message_id":9,"date":1700000000,` + chat + `,
			"from":{"id":1,"is_bot":false,"first_name":"A"},
			"new_chat_members":[{"id":2,"is_bot":false,"first_name":"B"},{"id":3,"is_bot":false,"first_name":"C"}]}}`,
			func(t *testing.T, d decoded) {
				require.Len(t, d.events, 2)
				for i, ev := range d.events {
					require.NoError(t, ev.Validate())
					require.Equal(t, channel.KindNotice, ev.Kind)
					require.Equal(t, channel.NoticeGroupIncrease, ev.Notice.Type)
					require.Equal(t, "1", ev.Notice.Operator)
					require.Equal(t, []string{"2", "3"}[i], ev.Notice.UserID)
				}
				require.NotEqual(t, d.events[0].Key(), d.events[1].Key())
			}},
		{"own message", `{"update_id":1,"message":{"message_id":9,"date":1700000000,` + chat + `,
			"from":{"id":123456789,"is_bot":true,"first_name":"Persona"},"text":"me"}}`,
			func(t *testing.T, d decoded) {
				require.Equal(t, channel.KindSelf, d.events[0].Kind)
			}},
		{"negative basic group id", `{"update_id":1,"message":{"message_id":9,"date":1700000000,
			"chat":{"id":-4242,"type":"group","title":"Basic"},"from":{"id":1,"is_bot":false,"first_name":"A"},"text":"x"}}`,
			func(t *testing.T, d decoded) {
				require.Equal(t, channel.Chat{Kind: channel.Group, ID: "-4242"}, d.events[0].Chat)
			}},
		{"no date uses the clock", `{"update_id":1,"message":{"message_id":9,` + chat + `,"from":{"id":1,"is_bot":false,"first_name":"A"},"text":"x"}}`,
			func(t *testing.T, d decoded) {
				require.Equal(t, now, d.events[0].Time)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := decodeOne(t, tc.raw)
			require.Empty(t, d.skip)
			require.NotEmpty(t, d.events)
			for _, ev := range d.events {
				require.NoError(t, ev.Validate())
			}
			tc.check(t, d)
		})
	}
}

// TestMediaNormalised checks every media kind: segment type, file id,
// MIME (with its default), size, duration and name.
func TestMediaNormalised(t *testing.T) {
	t.Parallel()
	const head = `{"update_id":1,"message":{"message_id":9,"date":1700000000,"chat":{"id":42,"type":"private","first_name":"A"},"from":{"id":42,"is_bot":false,"first_name":"A"},`
	tests := []struct {
		name, body string
		want       channel.Segment
	}{
		{"static sticker", `"sticker":{"file_id":"st1","file_unique_id":"u","type":"regular","width":512,"height":512,"is_animated":false,"is_video":false,"emoji":"😂","file_size":3100}`,
			channel.Segment{Type: channel.SegSticker, Media: &channel.Media{FileID: "st1", MIME: "image/webp", Size: 3100, Name: "😂"}}},
		{"animated sticker", `"sticker":{"file_id":"st2","is_animated":true,"is_video":false,"emoji":"🐱"}`,
			channel.Segment{Type: channel.SegSticker, Media: &channel.Media{FileID: "st2", MIME: "application/x-tgsticker", Name: "🐱"}}},
		{"video sticker", `"sticker":{"file_id":"st3","is_animated":false,"is_video":true}`,
			channel.Segment{Type: channel.SegSticker, Media: &channel.Media{FileID: "st3", MIME: "video/webm"}}},
		{"voice without mime type", `"voice":{"file_id":"v1","file_unique_id":"u","duration":12}`,
			channel.Segment{Type: channel.SegVoice, Media: &channel.Media{FileID: "v1", MIME: "audio/ogg", Duration: 12}}},
		{"voice with mime type", `"voice":{"file_id":"v2","duration":3,"mime_type":"audio/mpeg","file_size":4000}`,
			channel.Segment{Type: channel.SegVoice, Media: &channel.Media{FileID: "v2", MIME: "audio/mpeg", Size: 4000, Duration: 3}}},
		{"audio with file name", `"audio":{"file_id":"a1","duration":200,"file_name":"song.flac","title":"Song","mime_type":"audio/flac","file_size":9000000}`,
			channel.Segment{Type: channel.SegFile, Media: &channel.Media{FileID: "a1", MIME: "audio/flac", Size: 9000000, Duration: 200, Name: "song.flac"}}},
		{"video", `"video":{"file_id":"vid","width":640,"height":360,"duration":31,"mime_type":"video/quicktime","file_size":700000,"file_name":"clip.mov"}`,
			channel.Segment{Type: channel.SegVideo, Media: &channel.Media{FileID: "vid", MIME: "video/quicktime", Size: 700000, Duration: 31}}},
		{"video note", `"video_note":{"file_id":"vn","length":240,"duration":9}`,
			channel.Segment{Type: channel.SegVideo, Media: &channel.Media{FileID: "vn", MIME: "video/mp4", Duration: 9}}},
		{"animation", `"animation":{"file_id":"gif","duration":2,"width":1,"height":1},"document":{"file_id":"gif","file_name":"x.mp4"}`,
			channel.Segment{Type: channel.SegVideo, Media: &channel.Media{FileID: "gif", MIME: "video/mp4", Duration: 2}}},
		{"document", `"document":{"file_id":"doc","file_name":"report.pdf","mime_type":"application/pdf","file_size":1234}`,
			channel.Segment{Type: channel.SegFile, Media: &channel.Media{FileID: "doc", MIME: "application/pdf", Size: 1234, Name: "report.pdf"}}},
		{"document without type", `"document":{"file_id":"doc2"}`,
			channel.Segment{Type: channel.SegFile, Media: &channel.Media{FileID: "doc2", MIME: "application/octet-stream"}}},
		{"negative duration", `"voice":{"file_id":"v3","duration":-4}`,
			channel.Segment{Type: channel.SegVoice, Media: &channel.Media{FileID: "v3", MIME: "audio/ogg"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := decodeOne(t, head+tc.body+`}}`)
			require.Empty(t, d.skip)
			ev := d.events[0]
			require.NoError(t, ev.Validate())
			require.Equal(t, []channel.Segment{tc.want}, ev.Segments)
			require.True(t, ev.MediaOnly())
		})
	}

	t.Run("photo with caption", func(t *testing.T) {
		t.Parallel()
		d := decodeOne(t, head+`"photo":[{"file_id":"p-s","file_unique_id":"a","width":90,"height":90,"file_size":900},
			{"file_id":"p-l","file_unique_id":"b","width":800,"height":800,"file_size":64000}],"caption":"my cat"}}`)
		require.Equal(t, []channel.Segment{
			{Type: channel.SegImage, Media: &channel.Media{FileID: "p-l", MIME: "image/jpeg", Size: 64000}},
			channel.Text("my cat"),
		}, d.events[0].Segments)
		require.True(t, d.events[0].Segments[0].Type.IsVisual())
	})

	t.Run("quoted media", func(t *testing.T) {
		t.Parallel()
		d := decodeOne(t, head+`"text":"what is this?","reply_to_message":{"message_id":8,"date":1699999999,
			"chat":{"id":42,"type":"private","first_name":"A"},"from":{"id":42,"is_bot":false,"first_name":"A"},
			"photo":[{"file_id":"q-photo","file_unique_id":"q","width":10,"height":10,"file_size":100}],"caption":"look",
			"sticker":{"file_id":"q-st","emoji":"👍"},"voice":{"file_id":"q-v","duration":4}}}}`)
		ev := d.events[0]
		require.Equal(t, []channel.Segment{channel.Quote("8"), channel.Text("what is this?")}, ev.Segments)
		require.Equal(t, "look", ev.Quoted.Text)
		require.Equal(t, []channel.Segment{
			{Type: channel.SegImage, Media: &channel.Media{FileID: "q-photo", MIME: "image/jpeg", Size: 100}},
			{Type: channel.SegVoice, Media: &channel.Media{FileID: "q-v", MIME: "audio/ogg", Duration: 4}},
			{Type: channel.SegSticker, Media: &channel.Media{FileID: "q-st", MIME: "image/webp", Name: "👍"}},
			channel.Text("look"),
		}, ev.Quoted.Segments)
	})

	t.Run("edited caption keeps the media", func(t *testing.T) {
		t.Parallel()
		d := decodeOne(t, `{"update_id":1,"edited_message":{"message_id":9,"date":1700000000,"edit_date":1700000100,
			"chat":{"id":42,"type":"private","first_name":"A"},"from":{"id":42,"is_bot":false,"first_name":"A"},
			"document":{"file_id":"doc","file_name":"a.txt"},"caption":"v2"}}`)
		ev := d.events[0]
		require.Equal(t, channel.NoticeMessageEdited, ev.Notice.Type)
		require.Equal(t, []channel.Segment{
			{Type: channel.SegFile, Media: &channel.Media{FileID: "doc", MIME: "application/octet-stream", Name: "a.txt"}},
			channel.Text("v2"),
		}, ev.Segments)
	})
}

func TestSkippedAndMalformed(t *testing.T) {
	t.Parallel()
	skips := map[string]string{
		`{"update_id":3,"channel_post":{"message_id":1,"date":1,"chat":{"id":-1001,"type":"channel","title":"c"},"text":"x"}}`:   "unsupported update type channel_post",
		`{"update_id":3,"message":{"message_id":1,"date":1,"chat":{"id":-1001,"type":"channel","title":"c"},"text":"x"}}`:        `unsupported chat type "channel"`,
		`{"update_id":3,"message":{"message_id":0,"date":1,"chat":{"id":5,"type":"private"},"text":"x"}}`:                        "message_id 0 (scheduled message)",
		`{"update_id":3,"message":{"message_id":1,"date":1,"text":"x"}}`:                                                         "message without chat",
		`{"update_id":3,"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"private"},"pinned_message":{"message_id":2}}}`: "message without supported content",
		`{"update_id":3,"message":"not an object"}`:                                                                              "malformed update: ",
		`{"update_id":3,"message":{"message_id":"1","chat":{"id":5,"type":"private"}}}`:                                          "malformed update: ",
		`{"update_id":3}`: "update without content",
		`{"update_id":3,"my_chat_member":{},"message_reaction":{}}`:                                                                        "unsupported update type message_reaction,my_chat_member",
		`{"update_id":3,"edited_message":{"message_id":1,"date":1,"chat":{"id":-1001,"type":"channel","title":"c"},"text":"x"}}`:           `unsupported chat type "channel"`,
		`{"update_id":3,"message":{"message_id":1,"date":1,"chat":{"id":0,"type":"private"},"from":{"id":1,"first_name":"a"},"text":"x"}}`: "invalid id: chat.id 0",
	}
	for raw, want := range skips {
		d := decodeOne(t, raw)
		require.Equal(t, int64(3), d.updateID, raw)
		require.Empty(t, d.events, raw)
		require.True(t, strings.HasPrefix(d.skip, want), "%s: skip %q, want prefix %q", raw, d.skip, want)
	}
	for _, raw := range []string{``, `[]`, `{`, `null`, `{"message":{}}`, `{"update_id":"3"}`, `{"update_id":1.5}`} {
		_, err := testBot.decodeUpdate([]byte(raw), now)
		require.ErrorIs(t, err, errMalformed, "%q", raw)
	}
}

// FuzzTextSegments: no entity list makes normalisation panic, and the
// segments always spell the original text.
func FuzzTextSegments(f *testing.F) {
	f.Add("😀 @persona_test_bot hi", 3, 17, 0, 0, byte(0))
	f.Add("你好👋🏽世界 @Persona_Test_Bot", 9, 17, 0, 2, byte(1))
	f.Add("/start@persona_test_bot", 0, 23, 1, 5, byte(2))
	f.Add("😀x", 1, 2, -1, 3, byte(0))
	f.Add("", 0, 0, 0, 0, byte(0))
	f.Fuzz(func(t *testing.T, text string, off1, len1, off2, len2 int, kinds byte) {
		if !utf8.ValidString(text) {
			t.Skip("JSON-decoded text is always valid UTF-8")
		}
		types := []string{"mention", "text_mention", "bot_command", "bold"}
		ents := []tgEntity{
			{Type: types[kinds%4], Offset: off1, Length: len1, User: &tgUser{ID: 5}},
			{Type: types[(kinds/4)%4], Offset: off2, Length: len2},
		}
		segs, _ := testBot.textSegments(text, ents)
		var b strings.Builder
		for _, s := range segs {
			switch s.Type {
			case channel.SegText, channel.SegMention:
				b.WriteString(s.Text)
			default:
				t.Fatalf("unexpected segment %+v", s)
			}
		}
		require.Equal(t, text, b.String())
	})
}

// checkMedia fails unless every media segment of ev (and of its quoted
// message) is well formed: a Media with a file id and no URL, a known MIME
// for stickers and no negative duration; and only media types carry Media.
func checkMedia(t *testing.T, ev channel.Event) {
	t.Helper()
	segs := ev.Segments
	if ev.Quoted != nil {
		segs = append(slices.Clone(segs), ev.Quoted.Segments...)
	}
	for _, s := range segs {
		require.Equal(t, s.Type.IsMedia(), s.Media != nil, "%+v", s)
		if s.Media == nil {
			continue
		}
		require.NotEmpty(t, s.Media.FileID, "%+v", s)
		require.Empty(t, s.Media.URL, "a URL would contain the token")
		require.NotEmpty(t, s.Media.MIME)
		require.GreaterOrEqual(t, s.Media.Duration, 0)
		if s.Type == channel.SegSticker {
			require.Contains(t, []string{"image/webp", "application/x-tgsticker", "video/webm"}, s.Media.MIME)
		}
	}
}

// mediaFields are the fields FuzzMediaFields fills with arbitrary JSON.
var mediaFields = []string{
	"photo", "sticker", "voice", "audio", "video", "video_note", "animation", "document",
	"reply_to_message.photo", "reply_to_message.sticker", "reply_to_message.voice",
}

// FuzzMediaFields puts arbitrary JSON in one media field of a message:
// decoding never panics and every media segment is well formed.
func FuzzMediaFields(f *testing.F) {
	for _, v := range []string{
		`[{"file_id":"p","width":10,"height":10,"file_size":100},{"file_id":"q","width":20,"height":20}]`,
		`{"file_id":"s","is_animated":true,"emoji":"😀"}`, `{"file_id":"s","is_video":true,"is_animated":true}`,
		`{"file_id":"v","duration":-1,"mime_type":""}`, `{"file_id":"","duration":5}`, `{"file_id":"d","file_size":1e30}`,
		`{"file_id":7}`, `[{"file_id":""}]`, `null`, `[]`, `{}`, `"x"`,
	} {
		for field := range mediaFields {
			f.Add(uint8(field), v, false)
		}
	}
	f.Fuzz(func(t *testing.T, field uint8, v string, edited bool) {
		if !json.Valid([]byte(v)) {
			b, _ := json.Marshal(v)
			v = string(b)
		}
		d, err := testBot.decodeUpdate([]byte(updateWith(mediaFields[int(field)%len(mediaFields)], v, edited)), now)
		require.NoError(t, err)
		for _, ev := range d.events {
			checkEventIDs(t, ev)
			checkMedia(t, ev)
		}
	})
}
