package channel_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// validMessage returns a message event that passes Validate.
func validMessage() channel.Event {
	return channel.Event{
		Platform:  "onebot",
		BotID:     "10001",
		Kind:      channel.KindMessage,
		Chat:      channel.Chat{Kind: channel.Group, ID: "123"},
		MessageID: "-42",
		Time:      t0,
		Sender:    channel.Sender{ID: "42", Name: "Ann"},
		Segments:  []channel.Segment{channel.Text("hello")},
	}
}

func TestChatKindValidAndString(t *testing.T) {
	t.Parallel()
	require.True(t, channel.Group.Valid())
	require.True(t, channel.Private.Valid())
	require.False(t, channel.ChatKind("").Valid())
	require.False(t, channel.ChatKind("channel").Valid())
	require.False(t, channel.ChatKind("Group").Valid())

	require.Equal(t, "group:123", channel.Chat{Kind: channel.Group, ID: "123"}.String())
	require.Equal(t, "private:42", channel.Chat{Kind: channel.Private, ID: "42"}.String())
}

func TestSegmentTypeIsMedia(t *testing.T) {
	t.Parallel()
	media := map[channel.SegmentType]bool{
		channel.SegText: false, channel.SegMention: false, channel.SegQuote: false,
		channel.SegImage: true, channel.SegVoice: true, channel.SegVideo: true, channel.SegFile: true,
		channel.SegLink: false, channel.SegFace: false, channel.SegForward: false,
	}
	for typ, want := range media {
		require.Equal(t, want, typ.IsMedia(), "%s", typ)
	}
}

func TestSegmentConstructors(t *testing.T) {
	t.Parallel()
	require.Equal(t, channel.Segment{Type: channel.SegText, Text: "hi"}, channel.Text("hi"))
	require.Equal(t, channel.Segment{Type: channel.SegMention, UserID: "7"}, channel.Mention("7"))
	require.Equal(t, channel.Segment{Type: channel.SegQuote, MessageID: "m1"}, channel.Quote("m1"))

	m := channel.Media{URL: "https://example.com/a.png", MIME: "image/png"}
	img := channel.Image(m)
	require.Equal(t, channel.SegImage, img.Type)
	require.Equal(t, m, *img.Media)
	m.URL = "changed"
	require.Equal(t, "https://example.com/a.png", img.Media.URL, "Image copies its media")
}

func TestEventValidate(t *testing.T) {
	t.Parallel()
	notice := func(ev *channel.Event) {
		ev.Kind = channel.KindNotice
		ev.MessageID = ""
		ev.Notice = &channel.Notice{Type: channel.NoticePoke, Operator: "42", UserID: "10001"}
	}
	tests := []struct {
		name   string
		mutate func(ev *channel.Event)
		errMsg string // "" = valid
	}{
		{name: "valid message", mutate: func(*channel.Event) {}},
		{name: "valid self echo", mutate: func(ev *channel.Event) { ev.Kind = channel.KindSelf }},
		{name: "valid private", mutate: func(ev *channel.Event) { ev.Chat = channel.Chat{Kind: channel.Private, ID: "42"} }},
		{name: "valid notice without message id", mutate: notice},
		{name: "valid with profile", mutate: func(ev *channel.Event) { ev.Profile = "work" }},
		{name: "chat id may contain colons", mutate: func(ev *channel.Event) { ev.Chat.ID = "a:b:c" }},
		{name: "no platform", mutate: func(ev *channel.Event) { ev.Platform = "" }, errMsg: "no platform"},
		{name: "platform with colon", mutate: func(ev *channel.Event) { ev.Platform = "one:bot" }, errMsg: `platform "one:bot" contains ':'`},
		{name: "no bot id", mutate: func(ev *channel.Event) { ev.BotID = "" }, errMsg: "no bot id"},
		{name: "bot id with colon", mutate: func(ev *channel.Event) { ev.BotID = "1:2" }, errMsg: `bot id "1:2" contains ':'`},
		{name: "profile with colon", mutate: func(ev *channel.Event) { ev.Profile = "a:b" }, errMsg: `profile "a:b" contains ':'`},
		{name: "empty chat kind", mutate: func(ev *channel.Event) { ev.Chat.Kind = "" }, errMsg: "chat kind \"\" is neither group nor private"},
		{name: "unknown chat kind", mutate: func(ev *channel.Event) { ev.Chat.Kind = "channel" }, errMsg: `chat kind "channel"`},
		{name: "no chat id", mutate: func(ev *channel.Event) { ev.Chat.ID = "" }, errMsg: "no chat id"},
		{name: "message without id", mutate: func(ev *channel.Event) { ev.MessageID = "" }, errMsg: "no message id"},
		{name: "self without id", mutate: func(ev *channel.Event) { ev.Kind = channel.KindSelf; ev.MessageID = "" }, errMsg: "no message id"},
		{name: "notice without notice", mutate: func(ev *channel.Event) { notice(ev); ev.Notice = nil }, errMsg: "notice without a type"},
		{name: "notice without type", mutate: func(ev *channel.Event) { notice(ev); ev.Notice.Type = "" }, errMsg: "notice without a type"},
		{name: "empty kind", mutate: func(ev *channel.Event) { ev.Kind = "" }, errMsg: `unknown event kind ""`},
		{name: "unknown kind", mutate: func(ev *channel.Event) { ev.Kind = "edit" }, errMsg: `unknown event kind "edit"`},
		{name: "no time", mutate: func(ev *channel.Event) { ev.Time = time.Time{} }, errMsg: "no time"},
		{name: "notice without time", mutate: func(ev *channel.Event) { notice(ev); ev.Time = time.Time{} }, errMsg: "no time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := validMessage()
			tt.mutate(&ev)
			err := ev.Validate()
			if tt.errMsg == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, channel.ErrInvalidEvent)
			require.ErrorContains(t, err, tt.errMsg)
		})
	}
}

func TestEventText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		segs []channel.Segment
		want string
	}{
		{name: "none", want: ""},
		{name: "one", segs: []channel.Segment{channel.Text("hi")}, want: "hi"},
		{
			name: "joined in order, other segments skipped",
			segs: []channel.Segment{
				channel.Quote("9"), channel.Mention("1"), channel.Text("hello "),
				channel.Image(channel.Media{URL: "u"}), channel.Text("world"),
				{Type: channel.SegForward, MessageID: "f", Text: "forwarded summary"},
				{Type: channel.SegLink, URL: "https://x", Text: "title"},
			},
			want: "hello world",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := channel.Event{Segments: tt.segs, Quoted: &channel.Quoted{MessageID: "9", Text: "quoted text"}}
			require.Equal(t, tt.want, ev.Text(), "quoted and forwarded text are not the message's own")
		})
	}
}

func TestEventHasAndMentions(t *testing.T) {
	t.Parallel()
	ev := channel.Event{Segments: []channel.Segment{channel.Mention("1"), channel.Text("x"), channel.Mention("2")}}
	require.True(t, ev.Has(channel.SegMention))
	require.True(t, ev.Has(channel.SegText))
	require.False(t, ev.Has(channel.SegImage))
	require.True(t, ev.Mentions("1"))
	require.True(t, ev.Mentions("2"))
	require.False(t, ev.Mentions("3"))
	require.False(t, ev.Mentions(""))

	// A quote of user 3's message is not a mention of user 3.
	quote := channel.Event{Segments: []channel.Segment{channel.Quote("3")}, Quoted: &channel.Quoted{Sender: channel.Sender{ID: "3"}}}
	require.False(t, quote.Mentions("3"))

	var empty channel.Event
	require.False(t, empty.Has(channel.SegText))
	require.False(t, empty.Mentions("1"))
}

func TestEventQuoteID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ev   channel.Event
		want string
	}{
		{name: "none", ev: channel.Event{Segments: []channel.Segment{channel.Text("x")}}, want: ""},
		{name: "segment", ev: channel.Event{Segments: []channel.Segment{channel.Text("x"), channel.Quote("q1")}}, want: "q1"},
		{name: "first segment wins", ev: channel.Event{Segments: []channel.Segment{channel.Quote("q1"), channel.Quote("q2")}}, want: "q1"},
		{name: "resolved only", ev: channel.Event{Quoted: &channel.Quoted{MessageID: "q3"}}, want: "q3"},
		{
			name: "segment over resolved",
			ev:   channel.Event{Segments: []channel.Segment{channel.Quote("q1")}, Quoted: &channel.Quoted{MessageID: "q3"}},
			want: "q1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.ev.QuoteID())
		})
	}
}

func TestEventMediaOnly(t *testing.T) {
	t.Parallel()
	img := channel.Image(channel.Media{URL: "u"})
	seg := func(typ channel.SegmentType) channel.Segment {
		return channel.Segment{Type: typ, Media: &channel.Media{FileID: "f"}}
	}
	tests := []struct {
		name string
		segs []channel.Segment
		want bool
	}{
		{name: "empty", want: false},
		{name: "text only", segs: []channel.Segment{channel.Text("hi")}, want: false},
		{name: "image only", segs: []channel.Segment{img}, want: true},
		{name: "voice only", segs: []channel.Segment{seg(channel.SegVoice)}, want: true},
		{name: "video only", segs: []channel.Segment{seg(channel.SegVideo)}, want: true},
		{name: "file only", segs: []channel.Segment{seg(channel.SegFile)}, want: true},
		{name: "image and text", segs: []channel.Segment{img, channel.Text("look")}, want: false},
		{name: "text before image", segs: []channel.Segment{channel.Text("look"), img}, want: false},
		{name: "image and blank text", segs: []channel.Segment{channel.Text("  \n"), img}, want: true},
		{name: "image with mention and quote", segs: []channel.Segment{channel.Quote("1"), channel.Mention("2"), img}, want: true},
		{name: "mention only", segs: []channel.Segment{channel.Mention("2")}, want: false},
		{name: "face only", segs: []channel.Segment{{Type: channel.SegFace, FaceID: "1"}}, want: false},
		{name: "link only", segs: []channel.Segment{{Type: channel.SegLink, URL: "https://x"}}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := channel.Event{Segments: tt.segs}
			require.Equal(t, tt.want, ev.MediaOnly())
		})
	}
}

func TestEventCloneIsDeep(t *testing.T) {
	t.Parallel()
	ev := channel.Event{
		Platform: "p", Chat: channel.Chat{Kind: channel.Group, ID: "g"}, MessageID: "1",
		Segments: []channel.Segment{channel.Text("hi"), channel.Image(channel.Media{URL: "u"})},
		Quoted:   &channel.Quoted{MessageID: "0", Segments: []channel.Segment{channel.Text("q")}},
		Notice:   &channel.Notice{Type: channel.NoticePoke},
		Raw:      json.RawMessage(`{"a":1}`),
	}
	c := ev.Clone()
	require.Equal(t, ev, c)
	c.Segments[0].Text = "changed"
	c.Segments[1].Media.URL = "changed"
	c.Quoted.Segments[0].Text = "changed"
	c.Notice.Type = "changed"
	c.Raw[1] = 'b'
	require.Equal(t, "hi", ev.Segments[0].Text)
	require.Equal(t, "u", ev.Segments[1].Media.URL)
	require.Equal(t, "q", ev.Quoted.Segments[0].Text)
	require.Equal(t, channel.NoticePoke, ev.Notice.Type)
	require.JSONEq(t, `{"a":1}`, string(ev.Raw))
}

func TestEventTextAndSpeech(t *testing.T) {
	t.Parallel()
	voice := func(tr string) channel.Segment {
		return channel.Segment{Type: channel.SegVoice, Media: &channel.Media{FileID: "v", Transcript: tr}}
	}
	tests := []struct {
		name string
		segs []channel.Segment
		want string
	}{
		{name: "text only", segs: []channel.Segment{channel.Text("hi "), channel.Text("there")}, want: "hi there"},
		{name: "voice only", segs: []channel.Segment{voice(" see you at eight ")}, want: "see you at eight"},
		{name: "not transcribed", segs: []channel.Segment{voice("")}, want: ""},
		{name: "no speech", segs: []channel.Segment{voice(" ")}, want: ""},
		{name: "text then voice", segs: []channel.Segment{channel.Text("listen:"), voice("hello")}, want: "listen: hello"},
		{name: "voice then text", segs: []channel.Segment{voice("hello"), channel.Text("(that was me)")}, want: "hello (that was me)"},
		{name: "voice without media", segs: []channel.Segment{{Type: channel.SegVoice}}, want: ""},
	}
	for _, tt := range tests {
		ev := channel.Event{Segments: tt.segs}
		require.Equal(t, tt.want, ev.TextAndSpeech(), tt.name)
	}
}
