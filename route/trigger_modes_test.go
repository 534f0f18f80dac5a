package route_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/route"
)

func TestAliasModeValid(t *testing.T) {
	t.Parallel()
	for _, m := range []route.AliasMode{"", route.AliasLoose, route.AliasSmart, route.AliasStrict} {
		require.True(t, m.Valid(), "%q", m)
	}
	require.False(t, route.AliasMode("fuzzy").Valid())
}

func TestAliasModes(t *testing.T) {
	t.Parallel()
	type want struct{ loose, smart, strict bool }
	all := want{true, true, true}
	notStrict := want{true, true, false}
	onlyLoose := want{true, false, false}
	none := want{}
	tests := []struct {
		text  string
		alias string
		want  want
	}{
		// Vocative positions: start, end, before a comma or colon.
		{"Mira, what time is it?", "mira", all},
		{"mira what time is it", "mira", all},
		{"what time is it, Mira?", "mira", all},
		{"what time is it mira", "mira", all},
		{"  @Mira!!  ", "mira", all},
		{"so Mira: what now", "mira", all},
		{"so Mira , what now", "mira", all},
		{"米拉，你好", "米拉", all},
		{"你好，米拉", "米拉", all},
		{"好吧米拉：怎么办", "米拉", all},
		{"米拉你好", "米拉", all},
		{"Mira 😊", "mira", all},

		// Mid-sentence: loose and smart only.
		{"I think Mira is right", "mira", notStrict},
		{"ask Mira about it", "mira", notStrict},
		{"is that Mira's idea?", "mira", notStrict},
		{"我觉得米拉说得对", "米拉", notStrict},
		{"don't tell Mira yet", "mira", notStrict},

		// Inside quotation pairs: loose only.
		{`he said "Mira is a nice name" yesterday`, "mira", onlyLoose},
		{`the word “Mira” means wonder`, "mira", onlyLoose},
		{"the word ‘Mira’ means wonder", "mira", onlyLoose},
		{"the word 'Mira' means wonder", "mira", onlyLoose},
		{"他说「米拉很可爱」", "米拉", onlyLoose},
		{"书名是『米拉』", "米拉", onlyLoose},
		{"the film «Mira» was long", "mira", onlyLoose},
		{`"Mira"`, "mira", onlyLoose},
		{`"Mira, come here" was his line`, "mira", onlyLoose},

		// Quoted once, addressed once: the unquoted one counts.
		{`"Mira" is my name, Mira`, "mira", all},
		{`Mira, is "Mira" your name?`, "mira", all},

		// Unbalanced or non-quote marks are not pairs.
		{`a 5" screen, says Mira`, "mira", all},
		{`“Mira is here`, "mira", all},
		{"it's Mira's turn, isn't it", "mira", notStrict},
		{"rock 'n' roll with Mira today", "mira", notStrict},
		{"Mira's", "mira", all},

		// Never a match.
		{"the admiral", "mira", none},
		{"miracle", "mira", none},
		{"", "mira", none},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			for _, m := range []struct {
				mode route.AliasMode
				want bool
			}{{route.AliasLoose, tt.want.loose}, {route.AliasSmart, tt.want.smart}, {"", tt.want.smart}, {route.AliasStrict, tt.want.strict}} {
				id := route.Identity{Aliases: []string{tt.alias}, AliasMode: m.mode}
				got := route.Classify(txt(tt.text), id, route.DefaultTriggers()) == route.TriggerAlias
				require.Equal(t, m.want, got, "mode %q", m.mode)
			}
		})
	}
}

func TestAliasStrictAcrossSegments(t *testing.T) {
	t.Parallel()
	id := route.Identity{Aliases: []string{"mira"}, AliasMode: route.AliasStrict}
	// The text after a mention starts a new run, so "Mira" opens it.
	ev := groupMsg(channel.Mention("u2"), channel.Text(" Mira look at this"))
	require.Equal(t, route.TriggerAlias, route.Classify(ev, id, route.DefaultTriggers()))
	// Quoted text never counts, even in vocative position.
	ev = groupMsg(channel.Quote("x"), channel.Text("ok"))
	ev.Quoted = &channel.Quoted{MessageID: "x", Sender: channel.Sender{ID: "u2"}, Text: "Mira, hi", Segments: []channel.Segment{channel.Text("Mira, hi")}}
	require.Equal(t, "", route.Classify(ev, id, route.DefaultTriggers()))
}

func TestOwnerCommandTrigger(t *testing.T) {
	t.Parallel()
	owner := route.Identity{Owners: []string{"u1"}}
	from := func(sender string, segs ...channel.Segment) *channel.Event {
		e := groupMsg(segs...)
		e.Sender.ID = sender
		return e
	}
	tests := []struct {
		name string
		ev   *channel.Event
		id   route.Identity
		want string
	}{
		{name: "owner command", ev: from("u1", channel.Text("/status")), id: owner, want: route.TriggerOwnerCommand},
		{name: "owner command with args", ev: from("u1", channel.Text("/mute 10m")), id: owner, want: route.TriggerOwnerCommand},
		{name: "owner command after spaces", ev: from("u1", channel.Text("  /status")), id: owner, want: route.TriggerOwnerCommand},
		{name: "owner command after a mention", ev: from("u1", channel.Mention(botID), channel.Text(" /status")), id: owner, want: route.TriggerOwnerCommand},
		{name: "owner command wins over private", ev: func() *channel.Event {
			e := from("u1", channel.Text("/status"))
			e.Chat = channel.Chat{Kind: channel.Private, ID: "u1"}
			return e
		}(), id: owner, want: route.TriggerOwnerCommand},
		{name: "telegram style bot suffix", ev: from("u1", channel.Text("/status@mybot")), id: owner, want: route.TriggerOwnerCommand},
		{name: "stranger's command", ev: from("u2", channel.Text("/status")), id: owner, want: ""},
		{name: "prefix alone", ev: from("u1", channel.Text("/")), id: owner, want: ""},
		{name: "prefix and space", ev: from("u1", channel.Text("/ status")), id: owner, want: ""},
		{name: "a path is not a command", ev: from("u1", channel.Text("/usr/bin is full")), id: owner, want: ""},
		{name: "not at the start", ev: from("u1", channel.Text("try /status")), id: owner, want: ""},
		{name: "custom prefix", ev: from("u1", channel.Text("!status")), id: route.Identity{Owners: []string{"u1"}, CommandPrefix: "!"}, want: route.TriggerOwnerCommand},
		{name: "default prefix off with custom", ev: from("u1", channel.Text("/status")), id: route.Identity{Owners: []string{"u1"}, CommandPrefix: "!"}, want: ""},
		{name: "multi-rune prefix", ev: from("u1", channel.Text("。状态")), id: route.Identity{Owners: []string{"u1"}, CommandPrefix: "。"}, want: route.TriggerOwnerCommand},
		{name: "no owners", ev: from("u1", channel.Text("/status")), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, route.Classify(tt.ev, tt.id, route.DefaultTriggers()))
		})
	}
}

func TestPluginCommandTrigger(t *testing.T) {
	t.Parallel()
	id := route.Identity{Commands: []string{"weather", "/Roll"}, Owners: []string{"o1"}}
	tests := []struct {
		name string
		text string
		id   route.Identity
		want string
	}{
		{name: "registered command", text: "/weather Kyoto", id: id, want: route.TriggerPluginCommand},
		{name: "case-insensitive", text: "/WEATHER", id: id, want: route.TriggerPluginCommand},
		{name: "configured with the prefix", text: "/roll 2d6", id: id, want: route.TriggerPluginCommand},
		{name: "unknown command", text: "/status", id: id, want: ""},
		{name: "longer word", text: "/weatherman", id: id, want: ""},
		{name: "without prefix", text: "weather today", id: id, want: ""},
		{name: "no commands registered", text: "/weather", id: route.Identity{}, want: ""},
		{name: "custom prefix", text: "#weather", id: route.Identity{Commands: []string{"weather"}, CommandPrefix: "#"}, want: route.TriggerPluginCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, route.Classify(txt(tt.text), tt.id, route.DefaultTriggers()))
		})
	}
	// An owner's registered plugin command is an owner command (it comes first).
	ev := txt("/weather")
	ev.Sender.ID = "o1"
	require.Equal(t, route.TriggerOwnerCommand, route.Classify(ev, id, route.DefaultTriggers()))
}

func TestCommandName(t *testing.T) {
	t.Parallel()
	tests := []struct{ text, prefix, want string }{
		{"/Status now", "", "status"},
		{"/status@mybot", "", "status"},
		{"/roll-dice 2", "", "roll-dice"},
		{"/set_name x", "", "set_name"},
		{"/天气 北京", "", "天气"},
		{"/", "", ""},
		{"/?", "", ""},
		{"/a/b", "", ""},
		{"hello", "", ""},
		{"!x", "!", "x"},
		{"/x", "!", ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, route.CommandName(txt(tt.text), tt.prefix), "%q", tt.text)
	}
	require.Equal(t, "", route.CommandName(groupMsg(), ""))
	require.Equal(t, "", route.CommandName(groupMsg(channel.Text("  "), channel.Text("hi /x")), ""), "the first non-blank text decides")
	require.Equal(t, "x", route.CommandName(groupMsg(channel.Text("  "), channel.Text("/x")), ""))
}

func TestCommandArgs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ text, name, args string }{
		{"/roll 2d6", "roll", "2d6"},
		{"/roll@mybot  2d6 fast ", "roll", "2d6 fast"},
		{"/pause\t30", "pause", "30"},
		{"/status", "status", ""},
		{"/status@mybot", "status", ""},
		{"/a/b c", "", ""},
		{"hello /x y", "", ""},
	} {
		name, args := route.Command(txt(tt.text), "")
		require.Equal(t, tt.name, name, "%q", tt.text)
		require.Equal(t, tt.args, args, "%q", tt.text)
	}
}

func TestLinkTrigger(t *testing.T) {
	t.Parallel()
	var seen []string
	resolver := func(u string) bool {
		seen = append(seen, u)
		return strings.Contains(u, "video.example")
	}
	id := route.Identity{ResolveLink: resolver}
	linkSeg := func(u string) channel.Segment { return channel.Segment{Type: channel.SegLink, URL: u} }
	tests := []struct {
		name string
		ev   *channel.Event
		id   route.Identity
		want string
	}{
		{name: "resolvable URL in text", ev: txt("look https://video.example/v/1 lol"), id: id, want: route.TriggerLink},
		{name: "resolvable link segment", ev: groupMsg(linkSeg("https://video.example/v/2")), id: id, want: route.TriggerLink},
		{name: "unresolvable URL", ev: txt("see https://blog.example/post"), id: id, want: ""},
		{name: "resolver off", ev: txt("https://video.example/v/1"), want: ""},
		{name: "URL next to CJK", ev: txt("看这个https://video.example/v/3很好笑"), id: id, want: route.TriggerLink},
		{name: "upper-case scheme", ev: txt("HTTPS://video.example/v/4"), id: id, want: route.TriggerLink},
		{name: "third link is not offered", ev: txt("http://a.example/1 http://b.example/2 https://video.example/3"), id: id, want: ""},
		{name: "no URL", ev: txt("video.example without scheme"), id: id, want: ""},
		{name: "URL only in a quote", ev: func() *channel.Event {
			e := groupMsg(channel.Quote("x"), channel.Text("this"))
			e.Quoted = &channel.Quoted{MessageID: "x", Text: "https://video.example/v/9"}
			return e
		}(), id: id, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: resolver records into seen.
			require.Equal(t, tt.want, route.Classify(tt.ev, tt.id, route.DefaultTriggers()))
		})
	}
	require.Contains(t, seen, "https://video.example/v/3", "the URL ends at the CJK text")
}

func TestLinks(t *testing.T) {
	t.Parallel()
	ev := groupMsg(
		channel.Text("first http://a.example/x, then (https://b.example/y)."),
		channel.Segment{Type: channel.SegLink, URL: "https://c.example"},
		channel.Text(`<https://d.example/z> "http://e.example" http:// nothing`),
	)
	require.Equal(t, []string{"http://a.example/x", "https://b.example/y", "https://c.example", "https://d.example/z", "http://e.example"},
		route.Links(ev, 0))
	require.Equal(t, []string{"http://a.example/x", "https://b.example/y"}, route.Links(ev, 2))
	require.Equal(t, []string{"http://a.example/x", "https://b.example/y", "https://c.example"}, route.Links(ev, 3))
	require.Empty(t, route.Links(txt("no links"), 0))
	require.Equal(t, []string{"http://x"}, route.Links(txt("see http://x."), 0))
}
