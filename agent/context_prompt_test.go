package agent_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

var (
	// labelRe finds the message ids a request shows: the "[m_…]" that
	// starts a user message line (history, candidates, the current one).
	labelRe = regexp.MustCompile(`(?m)^(?:\[current\] )?\[(m_[a-z2-7]{8}(?:[a-z2-7]{8})?)\] `)
	// replyRe and markerRe find the references: a user header's
	// "replying to m_…", and the quote marker of an assistant message.
	replyRe  = regexp.MustCompile(`(?m)^(?:\[current\] )?\[m_[a-z2-7]+\] [^\n]*? replying to (m_[a-z2-7]{8}(?:[a-z2-7]{8})?):`)
	markerRe = regexp.MustCompile(`^\[persona-reply:(m_[a-z2-7]{8}(?:[a-z2-7]{8})?)\]`)
)

// requireRefsShown fails unless every reference of the request names a
// message the same request shows, and returns the number of references.
func requireRefsShown(t testing.TB, msgs []agent.Message, msgAndArgs ...any) int {
	t.Helper()
	shown := map[string]bool{}
	for _, m := range msgs {
		if m.Role == agent.RoleUser {
			for _, l := range labelRe.FindAllStringSubmatch(m.Content, -1) {
				shown[l[1]] = true
			}
		}
	}
	n := 0
	for _, m := range msgs {
		var refs [][]string
		switch m.Role {
		case agent.RoleUser:
			refs = replyRe.FindAllStringSubmatch(m.Content, -1)
		case agent.RoleAssistant:
			refs = markerRe.FindAllStringSubmatch(m.Content, -1)
		}
		for _, r := range refs {
			require.True(t, shown[r[1]], append([]any{"reference to %s, which the request does not show, in %q"}, append([]any{r[1], m.Content}, msgAndArgs...)...)...)
			n++
		}
	}
	return n
}

// content returns the content of the first message that contains s.
func content(t *testing.T, asm *agent.Assembled, s string) string {
	t.Helper()
	for _, m := range asm.Messages {
		if strings.Contains(m.Content, s) {
			return m.Content
		}
	}
	require.Failf(t, "no message contains", "%q", s)
	return ""
}

const (
	botID = "2734019856"
	annID = "1928374650"
	bobID = "1499449412"
)

// The system tail says which alias is the bot and which of its names the
// speaker used; it comes after the cache breakpoint.
func TestIdentityLine(t *testing.T) {
	t.Parallel()
	b := agent.NewContextBuilder(agent.ContextConfig{})
	al := newAliaser(t, testSecret)
	in := agent.ContextInput{Persona: "p", BotID: botID, Chat: channel.Chat{Kind: channel.Group, ID: "738291045"},
		History: []agent.ChatMessage{user("1", bobID, "is "+botID+" the bot?", 0)},
		Speaker: agent.Speaker{ID: annID, Name: "Ann", Role: channel.RoleAdmin, Owner: true,
			Aliases: []string{"Mira", " 米拉 ", "Mira", ""}},
		Current: user("2", annID, "Mira?", time.Minute), Aliaser: al}
	asm := b.Build(in)
	tail := content(t, asm, "Speaker:")
	require.Equal(t, "You are "+al.User(botID)+" in this group ("+al.Group("738291045")+").\n"+
		"Speaker: Ann ("+al.User(annID)+"), group admin, your owner. They called you Mira and 米拉.", tail)
	for i, m := range asm.Messages {
		if m.Content == tail {
			require.GreaterOrEqual(t, i, asm.PrefixLen, "the identity line is after the breakpoint")
		}
	}
	all := string(agent.AppendPromptBytes(nil, asm.Messages))
	require.NotContains(t, all, botID)
	require.Contains(t, content(t, asm, "the bot?"), "is "+al.User(botID)+" the bot?", "the bot's id typed in the history")

	for _, tc := range []struct {
		name string
		edit func(*agent.ContextInput)
		want string
	}{
		{"private chat", func(in *agent.ContextInput) {
			in.Chat = channel.Chat{Kind: channel.Private, ID: annID}
			in.Speaker = agent.Speaker{ID: annID, Name: "Ann"}
		}, "You are {bot} in this private chat.\nSpeaker: Ann ({ann})."},
		{"no chat", func(in *agent.ContextInput) {
			in.Chat = channel.Chat{}
			in.Speaker.Role, in.Speaker.Owner = channel.RoleMember, false
		}, "You are {bot} in this chat.\nSpeaker: Ann ({ann}). They called you Mira and 米拉."},
		{"no bot id", func(in *agent.ContextInput) {
			in.BotID = ""
			in.Speaker.Owner, in.Speaker.Aliases = false, nil
		}, "This is a group chat ({group}).\nSpeaker: Ann ({ann}), group admin."},
		{"group owner, three names", func(in *agent.ContextInput) {
			in.Speaker = agent.Speaker{ID: annID, Name: "Ann", Role: channel.RoleOwner, Aliases: []string{"Mira", "米拉", "@" + botID}}
		}, "You are {bot} in this group ({group}).\nSpeaker: Ann ({ann}), group owner. They called you Mira, 米拉 and @{bot}."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			al := newAliaser(t, testSecret)
			x := in
			x.Aliaser = al
			tc.edit(&x)
			want := strings.NewReplacer("{bot}", al.User(botID), "{ann}", al.User(annID), "{group}", al.Group("738291045")).Replace(tc.want)
			require.Equal(t, want, content(t, b.Build(x), "Speaker:"))
		})
	}
}

// Each of the bot's messages shows the message it answered, as the quote
// marker the model is told to write, when the request shows that message;
// user headers say "replying to you" for a quote of the bot and "an earlier
// message" for one the request does not show.
func TestThreading(t *testing.T) {
	t.Parallel()
	b := agent.NewContextBuilder(agent.ContextConfig{})
	hist := []agent.ChatMessage{
		user("h1", annID, "saturday?", 0),
		bot("h2", "sure", time.Minute),
		bot("h3", "second chunk", time.Minute),
		bot("h4", "answering something older", 2*time.Minute),
		user("h5", bobID, "which trail?", 3*time.Minute),
		bot("h6", "", 4*time.Minute),
		bot("h7", "as I said", 5*time.Minute),
		user("h8", "1357924680", "photos are up", 6*time.Minute),
	}
	hist[1].ReplyTo = "h1"
	hist[3].ReplyTo = "gone"
	hist[4].ReplyTo = "h2"
	hist[5].ReplyTo, hist[5].Segments = "h5", []channel.Segment{channel.Quote("h5"), channel.Mention(bobID), channel.Text(" the ridge")}
	hist[6].ReplyTo = "h2"
	hist[7].ReplyTo = "gone"
	c1, c2 := user("c1", "1122334455", "nice", 7*time.Minute), user("c2", annID, "agreed", 7*time.Minute)
	c1.ReplyTo, c2.ReplyTo = "h8", "c1"
	cur := user("cur", annID, "so, 7:30?", 8*time.Minute)
	cur.ReplyTo = "h6"
	al := newAliaser(t, testSecret)
	asm := b.Build(agent.ContextInput{History: hist, Candidates: []agent.ChatMessage{c1, c2}, Current: cur, Aliaser: al})
	m := func(id string) string { return al.Message(id) }
	u := func(id string) string { return al.User(id) }
	var got []string
	for _, msg := range asm.Messages[1:asm.PrefixLen] {
		got = append(got, string(msg.Role)+": "+msg.Content)
	}
	require.Equal(t, []string{
		"user: [" + m("h1") + "] name" + annID + " (" + u(annID) + "): saturday?",
		"assistant: [persona-reply:" + m("h1") + "]sure",
		"assistant: second chunk",
		"assistant: answering something older",
		"user: [" + m("h5") + "] name" + bobID + " (" + u(bobID) + ") replying to you: which trail?",
		"assistant: [persona-reply:" + m("h5") + "][persona-at:" + u(bobID) + "] the ridge",
		"assistant: as I said",
		"user: [" + m("h8") + "] name1357924680 (" + u("1357924680") + ") replying to an earlier message: photos are up",
	}, got)
	require.Equal(t, "[Same turn]\n["+m("c1")+"] name1122334455 ("+u("1122334455")+") replying to "+m("h8")+": nice\n"+
		"["+m("c2")+"] name"+annID+" ("+u(annID)+") replying to "+m("c1")+": agreed", content(t, asm, "[Same turn]"))
	require.Equal(t, "[current] ["+m("cur")+"] name"+annID+" ("+u(annID)+") replying to you: so, 7:30?", asm.Messages[len(asm.Messages)-1].Content)
	require.Equal(t, 4, requireRefsShown(t, asm.Messages))
	_, _, ok := al.Lookup(newAliaser(t, testSecret).Message("gone"))
	require.False(t, ok, "an id the request does not show is not registered")

	// Without an Aliaser no id is shown, but the threading still reads.
	asm = b.Build(agent.ContextInput{History: hist, Current: cur})
	all := string(agent.AppendPromptBytes(nil, asm.Messages))
	require.NotContains(t, all, "assistant\x00\x00[persona-reply:")
	require.Contains(t, all, "name"+bobID+" replying to you: which trail?")
	require.Contains(t, all, "name1357924680 replying to an earlier message: photos are up")
	require.Contains(t, all, "\x00\x00@someone the ridge\x1e", "the bot's message, without its marker")
}

// longConversation is a conversation in which users quote messages up to
// 20 back (some of them fall out of the window) and the bot quotes the
// message it answers.
func longConversation(n int) []agent.ChatMessage {
	var hist []agent.ChatMessage
	for i := range n {
		id := strconv.Itoa(i)
		var m agent.ChatMessage
		if i%3 == 2 {
			m = bot(id, "ok "+strings.Repeat("b", 40), time.Duration(i)*5*time.Minute)
			m.ReplyTo = hist[i-1].ID
		} else {
			m = user(id, "u"+strconv.Itoa(i%4), strings.Repeat("w", 60), time.Duration(i)*5*time.Minute)
			if i > 0 && i%2 == 0 {
				m.ReplyTo = strconv.Itoa(max(0, i-1-(i*7)%20))
			}
		}
		hist = append(hist, m)
	}
	return hist
}

// A history message's quote depends only on the window: it is resolved
// among the window's messages before it, so the prefix extends turn after
// turn, references to messages the window left behind read "an earlier
// message", and a build from the anchor renders the same window.
func TestThreadingFollowsTheWindow(t *testing.T) {
	t.Parallel()
	cfg := agent.ContextConfig{ContextWindow: 2_000, MaxOutput: 800}
	b := agent.NewContextBuilder(cfg)
	cfg.HistoryCache = -1
	plain := agent.NewContextBuilder(cfg)
	secret := []byte("threading window secret")
	conv := longConversation(150)
	var prev *agent.Assembled
	anchor := ""
	advances, earlier, refs := 0, 0, 0
	for i := 1; i < len(conv); i++ {
		cur := user("cur"+strconv.Itoa(i), "u9", "and now?", time.Duration(i)*5*time.Minute+time.Second)
		cur.ReplyTo = conv[max(0, i-9)].ID
		in := agent.ContextInput{Persona: "p", History: conv[:i], HistoryAnchor: anchor, Current: cur,
			Aliaser: newAliaser(t, secret)}
		asm := b.Build(in)
		refs += requireRefsShown(t, asm.Messages, "turn %d", i)
		for _, m := range asm.Messages[:asm.PrefixLen] {
			earlier += strings.Count(m.Content, "replying to an earlier message")
		}
		if prev != nil {
			if asm.EpochAdvanced {
				advances++
			} else {
				require.True(t, asm.Extends(prev.State()), "turn %d: the prefix extends the previous one", i)
			}
		}
		// The window renders the same from its anchor.
		from := 0
		for from < i && conv[from].ID != asm.HistoryAnchor {
			from++
		}
		in.History, in.HistoryAnchor, in.Aliaser = conv[from:i], "", newAliaser(t, secret)
		require.Equal(t, asm.Messages[:asm.PrefixLen], plain.Build(in).Messages[:asm.PrefixLen], "turn %d", i)
		prev, anchor = asm, asm.HistoryAnchor
	}
	require.GreaterOrEqual(t, advances, 5)
	require.Positive(t, earlier, "some quoted messages fell out of the window")
	require.Greater(t, refs, 100)
}

// When the budget trims the oldest history turns or candidates, the quotes
// of the messages still shown are rendered again: no reference names a
// message the request lost.
func TestThreadingAfterTrim(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300) // 100 tokens
	t.Run("history", func(t *testing.T) {
		t.Parallel()
		hist := []agent.ChatMessage{
			user("1", "u1", long, 0), bot("2", long, time.Minute),
			user("3", "u2", long, 5*time.Minute), user("4", "u3", long, 10*time.Minute), bot("5", "ok", 11*time.Minute),
		}
		hist[1].ReplyTo, hist[2].ReplyTo, hist[3].ReplyTo, hist[4].ReplyTo = "1", "1", "3", "4"
		cur := user("6", "u2", "so?", 12*time.Minute)
		cur.ReplyTo = "1"
		al := newAliaser(t, testSecret)
		// Within the history budget (512), over the input budget (600)
		// with the rules.
		b := agent.NewContextBuilder(agent.ContextConfig{ContextWindow: 1_928, MaxOutput: 1_200})
		asm := b.Build(agent.ContextInput{Persona: "p", History: hist, Current: cur, Aliaser: al})
		require.Zero(t, asm.DroppedTurns-asm.Trimmed[agent.BlockHistory], "no epoch")
		require.Equal(t, 1, asm.Trimmed[agent.BlockHistory], "the turn of 1 and 2 went")
		require.LessOrEqual(t, asm.Tokens, 600)
		var got []string
		for _, m := range asm.Messages[1:asm.PrefixLen] {
			header, _, _ := strings.Cut(m.Content, ": ")
			got = append(got, header)
		}
		require.Equal(t, []string{
			"[" + al.Message("3") + "] nameu2 (" + al.User("u2") + ") replying to an earlier message",
			"[" + al.Message("4") + "] nameu3 (" + al.User("u3") + ") replying to " + al.Message("3"),
			"[persona-reply:" + al.Message("4") + "]ok",
		}, got)
		require.Contains(t, asm.Messages[len(asm.Messages)-1].Content, "replying to an earlier message: so?")
		require.Equal(t, 2, requireRefsShown(t, asm.Messages))
	})
	t.Run("candidates", func(t *testing.T) {
		t.Parallel()
		c1, c2 := user("c1", "u1", long, 0), user("c2", "u2", strings.Repeat(long, 4), 0)
		cur := user("cur", "u3", "right?", time.Minute)
		b := agent.NewContextBuilder(agent.ContextConfig{ContextWindow: 1_928, MaxOutput: 1_200})
		for _, tc := range []struct{ quote, want string }{{"c1", "replying to m_"}, {"c2", "replying to an earlier message"}} {
			cur.ReplyTo = tc.quote
			asm := b.Build(agent.ContextInput{Persona: "p", Candidates: []agent.ChatMessage{c1, c2}, Current: cur, Aliaser: newAliaser(t, testSecret)})
			require.Equal(t, 1, asm.Trimmed[agent.BlockCandidates])
			require.Contains(t, asm.Messages[len(asm.Messages)-1].Content, tc.want)
			requireRefsShown(t, asm.Messages)
		}
	})
	t.Run("edit drops the history", func(t *testing.T) {
		t.Parallel()
		b := agent.NewContextBuilder(agent.ContextConfig{Edit: func(blocks []agent.Block) []agent.Block {
			out := blocks[:0]
			for _, bl := range blocks {
				if bl.Name != agent.BlockHistory {
					out = append(out, bl)
				}
			}
			return out
		}})
		cur := user("cur", "u3", "right?", time.Minute)
		cur.ReplyTo = "1"
		asm := b.Build(agent.ContextInput{History: []agent.ChatMessage{user("1", "u1", "hi", 0)}, Current: cur, Aliaser: newAliaser(t, testSecret)})
		require.Contains(t, asm.Messages[len(asm.Messages)-1].Content, "replying to an earlier message: right?")
	})
}

// A mention of everyone reads "@everyone" and never becomes a user alias.
func TestMentionAll(t *testing.T) {
	t.Parallel()
	al := newAliaser(t, testSecret)
	require.Empty(t, al.User(agent.MentionAll))
	hist := []agent.ChatMessage{bot("1", "", 0)}
	hist[0].Segments = []channel.Segment{channel.Mention(agent.MentionAll), channel.Text(" dinner at 7")}
	cur := user("2", annID, "", time.Minute)
	cur.Segments = []channel.Segment{channel.Text("hey "), channel.Mention(agent.MentionAll), channel.Text(" all of you, look")}
	b := agent.NewContextBuilder(agent.ContextConfig{})
	asm := b.Build(agent.ContextInput{History: hist, Current: cur, Aliaser: al})
	require.Equal(t, "@everyone dinner at 7", asm.Messages[1].Content)
	require.Equal(t, "[current] ["+al.Message("2")+"] name"+annID+" ("+al.User(annID)+"): hey @everyone all of you, look",
		asm.Messages[len(asm.Messages)-1].Content)
	_, _, ok := al.Lookup(newAliaser(t, testSecret).User(agent.MentionAll))
	require.False(t, ok)
	require.Equal(t, "all of you, all", al.Text("all of you, all"))
	asm = b.Build(agent.ContextInput{Current: cur})
	require.Equal(t, "[current] name"+annID+": hey @everyone all of you, look", asm.Messages[len(asm.Messages)-1].Content)
}

// Mentions leave no double or trailing spaces; the text around them reads
// as written.
func TestMentionSpacing(t *testing.T) {
	t.Parallel()
	al := newAliaser(t, testSecret)
	a, c := al.User(annID), al.User(bobID)
	seg := func(s ...channel.Segment) []channel.Segment { return s }
	img := channel.Image(channel.Media{URL: "https://x/y.png"})
	for _, tc := range []struct {
		segs []channel.Segment
		text string
		want string
	}{
		{segs: seg(channel.Mention(annID), channel.Text(" hello")), want: "@A hello"},
		{segs: seg(channel.Mention(annID), channel.Text("  hello")), want: "@A hello"},
		{segs: seg(channel.Text("hi "), channel.Mention(annID)), want: "hi @A"},
		{segs: seg(channel.Text("hi "), channel.Mention(annID), channel.Text(" ")), want: "hi @A"},
		{segs: seg(channel.Text("hi"), channel.Mention(annID), channel.Text("there")), want: "hi @A there"},
		{segs: seg(channel.Mention(annID), channel.Mention(bobID), channel.Text("  look ")), want: "@A @C look"},
		{segs: seg(channel.Mention(annID), channel.Text(" "), channel.Mention(bobID), channel.Text(" look")), want: "@A @C look"},
		{segs: seg(channel.Text("问一下"), channel.Mention(annID), channel.Text("你好")), want: "问一下 @A 你好"},
		{segs: seg(channel.Mention(annID), channel.Text(", look")), want: "@A, look"},
		{segs: seg(channel.Text("(cc "), channel.Mention(annID), channel.Text(")")), want: "(cc @A)"},
		{segs: seg(channel.Text("line one\n"), channel.Mention(annID), channel.Text(" line two")), want: "line one\n@A line two"},
		{segs: seg(channel.Quote("9"), channel.Mention(annID), channel.Text(" "), img), want: "@A [image]"},
		{segs: seg(channel.Mention(annID), img), want: "@A [image]"},
		{segs: seg(channel.Text("look"), img), want: "look[image]"},
		{segs: seg(channel.Text("look "), img, channel.Text(" and  this")), want: "look [image] and  this"},
		{segs: seg(channel.Text("  padded text  ")), want: "padded text"},
		{segs: seg(channel.Text(" "), channel.Text(" ")), want: ""},
		{text: "  hi  there \n", want: "hi  there"},
		{segs: seg(channel.Text("hey "), channel.Mention(""), channel.Text(" you")), want: "hey @someone you"},
	} {
		cur := agent.ChatMessage{ID: "1", SenderID: annID, SenderName: "Ann", Segments: tc.segs, Text: tc.text}
		asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(agent.ContextInput{Current: cur, Aliaser: al})
		want := "[current] [" + al.Message("1") + "] Ann (" + a + "):"
		if tc.want != "" {
			want += " " + strings.NewReplacer("@A", "@"+a, "@C", "@"+c).Replace(tc.want)
		}
		require.Equal(t, want, asm.Messages[len(asm.Messages)-1].Content, "%v %q", tc.segs, tc.text)
	}

	// The bot's own messages: the mention as the model writes it.
	m := bot("1", "", 0)
	m.Segments = seg(channel.Text("ok "), channel.Mention(annID), channel.Text("  see you "))
	asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(agent.ContextInput{History: []agent.ChatMessage{m},
		Current: user("2", annID, "x", time.Minute), Aliaser: al})
	require.Equal(t, "ok [persona-at:"+a+"] see you", asm.Messages[1].Content)
}

// The memory block (and every other per-turn block) has one title and one
// "- " line per item, whatever the items look like.
func TestOneMemoryBlock(t *testing.T) {
	t.Parallel()
	items := []string{"Ann is vegetarian", "- Bob forgets his rain jacket", "  ", "a snippet\nover two lines\n",
		"• bullet", "* star", "-5 °C on the ridge last time", ""}
	want := "\n- Ann is vegetarian\n- Bob forgets his rain jacket\n- a snippet over two lines\n- bullet\n- star\n- -5 °C on the ridge last time"
	in := agent.ContextInput{Current: user("1", "u", "hi", 0), Memory: items, CoreMemory: items, Notebook: items,
		WorldBook: items, SelfNotes: items, SessionState: items, PluginContext: items, MediaIndex: items, RecentSources: items}
	asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(in)
	for _, title := range []string{"[Memory, may be outdated]", "[Key facts]", "[Notebook]", "[World book]", "[Your notes to self]",
		"[Session state]", "[Plugin context]", "[Media in this chat]", "[Recent sources]"} {
		require.Equal(t, title+want, content(t, asm, title))
	}
	all := string(agent.AppendPromptBytes(nil, asm.Messages))
	require.Equal(t, 1, strings.Count(all, "[Memory"))
	require.NotContains(t, all, "- - ")
	require.NotContains(t, all, "- • ")

	in.Memory, in.Notebook = []string{" ", "- "}, nil
	asm = agent.NewContextBuilder(agent.ContextConfig{}).Build(in)
	require.NotContains(t, string(agent.AppendPromptBytes(nil, asm.Messages)), "[Memory", "no title without items")
}

// Known user ids typed in any text field are aliased, whichever block
// first registers the participant: the summary (rendered after the
// history), memory lines (after the speaker and the current message),
// names, the speaker's words for the bot, candidates, transcripts and tool
// calls.
func TestTextFieldsAliased(t *testing.T) {
	t.Parallel()
	const carol = "1357924680" // only the current message's speaker
	al := newAliaser(t, testSecret)
	named := func(id, sender, name, text string) agent.ChatMessage {
		return agent.ChatMessage{ID: id, SenderID: sender, SenderName: name, Text: text}
	}
	cur := named("9", carol, "Carol", "hi "+bobID)
	cur.Transcript = "voice for " + annID
	cand := named("8", "1122334455", "Dan", "cc "+carol)
	in := agent.ContextInput{
		Persona: "p", BotID: botID, Summary: bobID + " planned the trip",
		History:         []agent.ChatMessage{named("1", bobID, "Bob", "hello"), named("2", annID, "Ann", "hi")},
		Chat:            channel.Chat{Kind: channel.Group, ID: "738291045"},
		Memory:          []string{carol + " likes tea", "said by " + annID},
		CoreMemory:      []string{carol + " is new here"},
		RecentToolCalls: []agent.ToolExchange{{Name: "lookup", Arguments: `{"user":"` + carol + `"}`, Result: "found " + carol}},
		Candidates:      []agent.ChatMessage{cand},
		Speaker:         agent.Speaker{ID: carol, Name: "Carol aka " + bobID, Aliases: []string{"mira", botID}},
		Current:         cur, Aliaser: al,
	}
	asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(in)
	all := string(agent.AppendPromptBytes(nil, asm.Messages))
	for _, id := range []string{botID, annID, bobID, carol, "1122334455", "738291045"} {
		require.NotContains(t, all, id)
	}
	c, b := al.User(carol), al.User(bobID)
	for _, s := range []string{b + " planned the trip", "- " + c + " likes tea", "- " + c + " is new here",
		"cc " + c, "Carol aka " + b + " (" + c + ")", "They called you mira and " + al.User(botID) + ".",
		"[voice transcript] voice for " + al.User(annID), `- lookup {"user":"` + c + `"} → found ` + c} {
		require.Contains(t, all, s)
	}
}

// TestExampleRequest is a whole small request, as the model reads it.
func TestExampleRequest(t *testing.T) {
	t.Parallel()
	al := newAliaser(t, []byte("demo secret of enough length"))
	const chen = "1357924680"
	at := func(m int) time.Time { return time.Date(2026, 7, 8, 9, m, 0, 0, time.UTC) }
	in := agent.ContextInput{
		Persona: "You are Mira.", Chat: channel.Chat{Kind: channel.Group, ID: "738291045"}, BotID: botID,
		History: []agent.ChatMessage{
			{ID: "101", SenderID: annID, SenderName: "Ann", Time: at(0), Segments: []channel.Segment{channel.Mention(botID), channel.Text(" are you coming on saturday?")}},
			{ID: "102", SenderID: botID, SenderName: "Mira", FromBot: true, Time: at(1), ReplyTo: "101", Segments: []channel.Segment{channel.Mention(annID), channel.Text(" sure! which trail?")}},
			{ID: "103", SenderID: bobID, SenderName: "Bob", Time: at(4), ReplyTo: "102", Segments: []channel.Segment{channel.Quote("102"), channel.Mention(botID), channel.Text("  the ridge, "), channel.Mention(annID), channel.Text(" booked the bus ")}},
			{ID: "104", SenderID: chen, SenderName: "Chen", Time: at(6), ReplyTo: "99", Segments: []channel.Segment{channel.Quote("99"), channel.Mention(agent.MentionAll), channel.Text(" photos from last week are up")}},
		},
		Memory:  []string{"Ann is vegetarian", "Bob always forgets his rain jacket"},
		Speaker: agent.Speaker{ID: annID, Name: "Ann", Role: channel.RoleAdmin, Aliases: []string{"Mira"}},
		Now:     at(8),
		Current: agent.ChatMessage{ID: "105", SenderID: annID, SenderName: "Ann", Time: at(8), ReplyTo: "103",
			Segments: []channel.Segment{channel.Quote("103"), channel.Text("Mira, can you remind "), channel.Mention(agent.MentionAll), channel.Text(" to bring snacks? ")}},
		Aliaser: al,
	}
	asm := agent.NewContextBuilder(agent.ContextConfig{}).Build(in)
	var got strings.Builder
	for _, m := range asm.Messages[1:] {
		got.WriteString("--- " + string(m.Role))
		if m.CacheBreakpoint {
			got.WriteString(" (cache breakpoint)")
		}
		got.WriteString("\n" + m.Content + "\n")
	}
	want := `--- user
[m_xn2tksg3] Ann (u_ej3qnize): @u_bgyrevvp are you coming on saturday?
--- assistant
[persona-reply:m_xn2tksg3][persona-at:u_ej3qnize] sure! which trail?
--- user
[m_au4u6yaj] Bob (u_lmmahs5z) replying to you: @u_bgyrevvp the ridge, @u_ej3qnize booked the bus
--- user (cache breakpoint)
[m_ytfywq7g] Chen (u_bre267bz) replying to an earlier message: @everyone photos from last week are up
--- system
[Memory, may be outdated]
- Ann is vegetarian
- Bob always forgets his rain jacket
--- system
You are u_bgyrevvp in this group (g_ldof63sk).
Speaker: Ann (u_ej3qnize), group admin. They called you Mira.
--- system
Now: Wed 2026-07-08 09:08 UTC
--- system
` + agent.DefaultDecorationRules + `
--- user
[current] [m_h4liiavn] Ann (u_ej3qnize) replying to m_au4u6yaj: Mira, can you remind @everyone to bring snacks?
`
	require.Equal(t, want, got.String())
}
