package route_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/route"
)

const botID = "bot1"

// groupMsg returns a group message from user u1 with the given segments.
func groupMsg(segs ...channel.Segment) *channel.Event {
	return &channel.Event{
		Platform: "onebot", BotID: botID, Kind: channel.KindMessage,
		Chat: channel.Chat{Kind: channel.Group, ID: "g1"}, MessageID: "m1",
		Sender: channel.Sender{ID: "u1", Name: "Ann"}, Segments: segs,
	}
}

func txt(s string) *channel.Event { return groupMsg(channel.Text(s)) }

func TestClassifyDefaultTriggers(t *testing.T) {
	t.Parallel()
	mira := route.Identity{Aliases: []string{"Mira"}}
	tests := []struct {
		name string
		ev   *channel.Event
		id   route.Identity
		want string
	}{
		// private
		{
			name: "private chat",
			ev:   &channel.Event{BotID: botID, Chat: channel.Chat{Kind: channel.Private, ID: "u1"}, Segments: []channel.Segment{channel.Text("hi")}},
			want: route.TriggerPrivate,
		},
		{name: "unprompted group message", ev: txt("nice weather today"), want: ""},
		{name: "empty group message", ev: groupMsg(), id: mira, want: ""},

		// mention
		{name: "mention of the bot", ev: groupMsg(channel.Mention(botID), channel.Text(" hi")), want: route.TriggerMention},
		{name: "mention of someone else", ev: groupMsg(channel.Mention("u2"), channel.Text(" hi")), want: ""},
		{name: "mention with identity bot id", ev: groupMsg(channel.Mention("other-bot")), id: route.Identity{BotID: "other-bot"}, want: route.TriggerMention},
		{name: "identity bot id overrides the event's", ev: groupMsg(channel.Mention(botID)), id: route.Identity{BotID: "other-bot"}, want: ""},
		{name: "ToMe alone is not a mention", ev: func() *channel.Event { e := txt("hi"); e.ToMe = true; return e }(), want: ""},
		{name: "mention text is not a mention", ev: txt("@" + botID + " hi"), want: ""},

		// voice
		{name: "a voice clip saying the name", ev: groupMsg(channel.Segment{Type: channel.SegVoice,
			Media: &channel.Media{Transcript: "Mira, what time is it"}}), id: mira, want: route.TriggerAlias},
		{name: "a voice clip not yet transcribed", ev: groupMsg(channel.Segment{Type: channel.SegVoice,
			Media: &channel.Media{FileID: "v"}}), id: mira, want: ""},
		{name: "a transcript does not join the text", ev: groupMsg(channel.Text("Mi"), channel.Segment{Type: channel.SegVoice,
			Media: &channel.Media{Transcript: "ra"}}), id: mira, want: ""},

		// quote
		{
			name: "quote of a message flagged from the bot",
			ev: func() *channel.Event {
				e := groupMsg(channel.Quote("b1"), channel.Text("really?"))
				e.Quoted = &channel.Quoted{MessageID: "b1", FromBot: true}
				return e
			}(),
			want: route.TriggerQuote,
		},
		{
			name: "quote whose sender is the bot id",
			ev: func() *channel.Event {
				e := groupMsg(channel.Quote("b1"), channel.Text("really?"))
				e.Quoted = &channel.Quoted{MessageID: "b1", Sender: channel.Sender{ID: botID}}
				return e
			}(),
			want: route.TriggerQuote,
		},
		{
			name: "quote of someone else",
			ev: func() *channel.Event {
				e := groupMsg(channel.Quote("x1"), channel.Text("really?"))
				e.Quoted = &channel.Quoted{MessageID: "x1", Sender: channel.Sender{ID: "u2"}}
				return e
			}(),
			want: "",
		},
		{name: "unresolved quote", ev: groupMsg(channel.Quote("b1"), channel.Text("really?")), want: ""},
		{
			name: "resolved quote with unknown sender",
			ev: func() *channel.Event {
				e := groupMsg(channel.Quote("b1"))
				e.Quoted = &channel.Quoted{MessageID: "b1"}
				return e
			}(),
			want: "",
		},
		{
			name: "quote of the configured bot id",
			ev: func() *channel.Event {
				e := groupMsg(channel.Quote("b1"))
				e.Quoted = &channel.Quoted{MessageID: "b1", Sender: channel.Sender{ID: "bot-x"}}
				return e
			}(),
			id:   route.Identity{BotID: "bot-x"},
			want: route.TriggerQuote,
		},
		{
			name: "empty bot id never matches an empty quoted sender",
			ev: func() *channel.Event {
				e := groupMsg(channel.Quote("b1"))
				e.BotID = ""
				e.Quoted = &channel.Quoted{MessageID: "b1"}
				return e
			}(),
			want: "",
		},

		// alias, English word boundaries
		{name: "alias exact", ev: txt("mira"), id: mira, want: route.TriggerAlias},
		{name: "alias case-insensitive", ev: txt("hey Mira!"), id: mira, want: route.TriggerAlias},
		{name: "alias upper case", ev: txt("MIRA, come here"), id: mira, want: route.TriggerAlias},
		{name: "alias lower-case config", ev: txt("Hi MIRA"), id: route.Identity{Aliases: []string{"mira"}}, want: route.TriggerAlias},
		{name: "alias at start", ev: txt("Mira what's up"), id: mira, want: route.TriggerAlias},
		{name: "alias possessive", ev: txt("is that Mira's idea?"), id: mira, want: route.TriggerAlias},
		{name: "alias inside a word", ev: txt("the admiral arrived"), id: mira, want: ""},
		{name: "alias as prefix", ev: txt("miracle on ice"), id: mira, want: ""},
		{name: "alias as suffix", ev: txt("Palmira is a city"), id: mira, want: ""},
		{name: "alias next to digits", ev: txt("mira2 is a username"), id: mira, want: ""},
		{name: "second occurrence matches", ev: txt("admiral, ask mira"), id: mira, want: route.TriggerAlias},
		{name: "alias with a space", ev: txt("ask Big Mira now"), id: route.Identity{Aliases: []string{"big mira"}}, want: route.TriggerAlias},
		{name: "alias after CJK", ev: txt("你好mira"), id: mira, want: route.TriggerAlias},
		{name: "alias with accents", ev: txt("salut Zoë !"), id: route.Identity{Aliases: []string{"zoë"}}, want: route.TriggerAlias},
		{name: "accented neighbour is a letter", ev: txt("Zoëlle"), id: route.Identity{Aliases: []string{"zoë"}}, want: ""},
		{name: "empty alias ignored", ev: txt("anything"), id: route.Identity{Aliases: []string{""}}, want: ""},
		{name: "one of several aliases", ev: txt("yo bot!"), id: route.Identity{Aliases: []string{"mira", "bot"}}, want: route.TriggerAlias},

		// alias, CJK inside unspaced text
		{name: "CJK alias inside text", ev: txt("我觉得小米说得对"), id: route.Identity{Aliases: []string{"小米"}}, want: route.TriggerAlias},
		{name: "CJK alias at edges", ev: txt("小米"), id: route.Identity{Aliases: []string{"小米"}}, want: route.TriggerAlias},
		{name: "CJK alias absent", ev: txt("我觉得大米说得对"), id: route.Identity{Aliases: []string{"小米"}}, want: ""},
		{name: "kana alias", ev: txt("ミラちゃんおはよう"), id: route.Identity{Aliases: []string{"ミラ"}}, want: route.TriggerAlias},
		{name: "hangul alias", ev: txt("미라야안녕"), id: route.Identity{Aliases: []string{"미라"}}, want: route.TriggerAlias},
		{name: "CJK alias next to latin", ev: txt("ok小米ok"), id: route.Identity{Aliases: []string{"小米"}}, want: route.TriggerAlias},

		// alias only in the message's own text
		{
			name: "alias only in the quoted text",
			ev: func() *channel.Event {
				e := groupMsg(channel.Quote("x1"), channel.Text("agreed"))
				e.Quoted = &channel.Quoted{MessageID: "x1", Sender: channel.Sender{ID: "u2"}, Text: "Mira is wrong", Segments: []channel.Segment{channel.Text("Mira is wrong")}}
				return e
			}(),
			id:   mira,
			want: "",
		},
		{name: "alias only in a forward summary", ev: groupMsg(channel.Segment{Type: channel.SegForward, MessageID: "f", Text: "Mira: hello"}), id: mira, want: ""},
		{name: "alias only in a link title", ev: groupMsg(channel.Segment{Type: channel.SegLink, URL: "https://x", Text: "Mira"}), id: mira, want: ""},
		{name: "alias only in a media name", ev: groupMsg(channel.Image(channel.Media{Name: "mira.png"})), id: mira, want: ""},
		{name: "alias in own text next to a quote", ev: groupMsg(channel.Quote("x1"), channel.Text("mira look")), id: mira, want: route.TriggerAlias},
		{name: "alias after an image", ev: groupMsg(channel.Text("look"), channel.Image(channel.Media{URL: "u"}), channel.Text("Mira what is it")), id: mira, want: route.TriggerAlias},
		{name: "alias split by a mention", ev: groupMsg(channel.Text("mi"), channel.Mention("u2"), channel.Text("ra")), id: mira, want: ""},
		{name: "alias across adjacent text segments", ev: groupMsg(channel.Text("hey mi"), channel.Text("ra!")), id: mira, want: route.TriggerAlias},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := route.Classify(tt.ev, tt.id, route.DefaultTriggers())
			require.Equal(t, tt.want, got)
		})
	}
}

func TestClassifyTriggerOrder(t *testing.T) {
	t.Parallel()
	id := route.Identity{Aliases: []string{"mira"}}
	all := func(kind channel.ChatKind) *channel.Event {
		e := groupMsg(channel.Quote("b1"), channel.Mention(botID), channel.Text("mira?"))
		e.Chat.Kind = kind
		e.Quoted = &channel.Quoted{MessageID: "b1", FromBot: true}
		return e
	}
	require.Equal(t, route.TriggerPrivate, route.Classify(all(channel.Private), id, route.DefaultTriggers()))
	require.Equal(t, route.TriggerMention, route.Classify(all(channel.Group), id, route.DefaultTriggers()))

	noMention := all(channel.Group)
	noMention.Segments = []channel.Segment{channel.Quote("b1"), channel.Text("mira?")}
	require.Equal(t, route.TriggerQuote, route.Classify(noMention, id, route.DefaultTriggers()))

	noMention.Quoted = nil
	require.Equal(t, route.TriggerAlias, route.Classify(noMention, id, route.DefaultTriggers()))

	// The list order decides, not the kind.
	rev := route.DefaultTriggers()
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	require.Equal(t, route.TriggerAlias, route.Classify(all(channel.Private), id, rev))
	require.Len(t, route.DefaultTriggers(), 7)
}

func TestClassifyCustomTrigger(t *testing.T) {
	t.Parallel()
	var gotID route.Identity
	command := route.TriggerFunc(func(ev *channel.Event, id route.Identity) (string, bool) {
		gotID = id
		return "command", strings.HasPrefix(ev.Text(), "/")
	})
	triggers := append(route.DefaultTriggers(), command)

	require.Equal(t, "command", route.Classify(txt("/status"), route.Identity{}, triggers))
	require.Equal(t, botID, gotID.BotID, "Classify fills the bot id from the event")
	require.Equal(t, "", route.Classify(txt("status"), route.Identity{}, triggers))
	// Built-in triggers still come first.
	require.Equal(t, route.TriggerMention, route.Classify(groupMsg(channel.Mention(botID), channel.Text("/status")), route.Identity{}, triggers))

	// A custom trigger placed first wins over the built-ins.
	first := append([]route.Trigger{command}, route.DefaultTriggers()...)
	require.Equal(t, "command", route.Classify(groupMsg(channel.Mention(botID), channel.Text("/status")), route.Identity{}, first))
}

func TestClassifyNoTriggers(t *testing.T) {
	t.Parallel()
	ev := &channel.Event{BotID: botID, Chat: channel.Chat{Kind: channel.Private, ID: "u1"}}
	require.Equal(t, "", route.Classify(ev, route.Identity{}, nil))
}

func TestClassifyIsPure(t *testing.T) {
	t.Parallel()
	ev := groupMsg(channel.Text("Hey MIRA"))
	id := route.Identity{Aliases: []string{"Mira"}}
	before := *ev
	for range 3 {
		require.Equal(t, route.TriggerAlias, route.Classify(ev, id, route.DefaultTriggers()))
	}
	require.Equal(t, before, *ev)
	require.Equal(t, []string{"Mira"}, id.Aliases)
	require.Equal(t, "Hey MIRA", ev.Segments[0].Text, "the event text is not lower-cased in place")
}

func TestClassifyLongTextWithManyNearMisses(t *testing.T) {
	t.Parallel()
	// Thousands of occurrences inside words must not be slow (the boundary
	// check looks at one rune on each side).
	text := strings.Repeat("admiral ", 5000) + "mira"
	require.Equal(t, route.TriggerAlias, route.Classify(txt(text), route.Identity{Aliases: []string{"mira"}}, route.DefaultTriggers()))
	require.Equal(t, "", route.Classify(txt(strings.Repeat("a", 20000)), route.Identity{Aliases: []string{"aa"}}, route.DefaultTriggers()))
}

func TestIdentityIsOwner(t *testing.T) {
	t.Parallel()
	id := route.Identity{Owners: []string{"o1", "o2"}}
	tests := []struct {
		sender string
		want   bool
	}{{"o1", true}, {"o2", true}, {"u1", false}, {"", false}, {"O1", false}}
	for _, tt := range tests {
		ev := &channel.Event{Sender: channel.Sender{ID: tt.sender}}
		require.Equal(t, tt.want, id.IsOwner(ev), "sender %q", tt.sender)
	}
	require.False(t, route.Identity{}.IsOwner(&channel.Event{Sender: channel.Sender{ID: "o1"}}))
}

func TestMatchedAliases(t *testing.T) {
	t.Parallel()
	id := route.Identity{Aliases: []string{"Mira", "米拉", "bot-chan"}}
	for _, tc := range []struct {
		name string
		ev   *channel.Event
		want []string
	}{
		{"one name", txt("Mira, are you there?"), []string{"Mira"}},
		{"two names, as configured", txt("米拉 and mira both work"), []string{"Mira", "米拉"}},
		{"quoted name does not call the bot", txt(`she said "Mira" yesterday`), nil},
		{"no name", txt("hello everyone"), nil},
		{"a mention is not a name", groupMsg(channel.Mention(botID), channel.Text(" hi")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, route.MatchedAliases(tc.ev, id))
		})
	}
	require.Nil(t, route.MatchedAliases(txt("Mira"), route.Identity{}), "no aliases configured")
}
