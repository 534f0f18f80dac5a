package route_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/route"
)

// busyRealIDs are the real ids of the busy group: the people, the bot,
// the group and every message.
func busyRealIDs() []string {
	ids := []string{busyBot, busyGroup}
	for _, p := range busyPeople {
		ids = append(ids, p.ID)
	}
	for _, ev := range busyEvents() {
		ids = append(ids, ev.MessageID)
	}
	return ids
}

// everything returns all the text of a request a model would get: the
// messages' contents and names and the URLs of their parts.
func everything(req agent.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		b.WriteString(m.Content + "\n" + m.Name + "\n")
		for _, p := range m.Parts {
			b.WriteString(p.ImageURL + "\n")
		}
	}
	return b.String()
}

func TestRouterReplayShowsNoRealID(t *testing.T) {
	t.Parallel()
	for _, withScope := range []bool{true, false} {
		t.Run(fmt.Sprintf("scope in ctx %v", withScope), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			if withScope {
				_, ctx = testScope(t, busySession)
			}
			model := recordingRouterModel() // not behind agent.Private: the router's own rendering
			replayBusy(t, ctx, model, nil)
			reqs := model.Requests()
			require.NotEmpty(t, reqs)
			ids := busyRealIDs()
			for i, req := range reqs {
				text := everything(req)
				for _, id := range append(ids, "http", "qq.com") {
					require.False(t, strings.Contains(text, id), "request %d shows %s", i, id)
				}
				require.False(t, strings.Contains(text, "  "), "request %d has a double space", i)
			}
			// Typed ids became aliases: the last request still shows the
			// line where someone typed 阿杰's number.
			last := everything(reqs[len(reqs)-1])
			require.Contains(t, last, "btw u_")
		})
	}
}

func TestRouterAliasesStableAcrossCalls(t *testing.T) {
	t.Parallel()
	sc, ctx := testScope(t, session)
	model := agenttest.New().Otherwise(agenttest.Reply(rating("no", 0.3)))
	f := newFixture(t, model, nil)
	in1 := input()
	_, err := f.router.Route(ctx, in1)
	require.NoError(t, err)

	// The next message: the first candidate is now in the transcript.
	in2 := input()
	in2.Recent = append(in2.Recent, in1.Event)
	in2.Event = msg("m10", "10002", "", time.Second)
	in2.Event.Segments = []channel.Segment{channel.Mention("10001"), channel.Text(" ramen?")}
	_, err = f.router.Route(ctx, in2)
	require.NoError(t, err)

	reqs := model.Requests()
	require.Len(t, reqs, 2)
	p1, p2 := parsePayload(t, reqs[0]), parsePayload(t, reqs[1])
	require.Equal(t, sc.User(botID), p1.Bot.Speaker)
	require.Equal(t, p1.Bot.Speaker, p2.Bot.Speaker, "the bot's alias is stable")
	for i, id := range []string{"10002", botID, "10003"} {
		require.Equal(t, sc.User(id), p1.Transcript[i].Speaker)
		require.Equal(t, p1.Transcript[i], p2.Transcript[i], "a transcript line renders the same in both calls")
	}
	require.Equal(t, sc.User("10001"), p1.Candidates[0].Speaker)
	require.Equal(t, p1.Candidates[0].Speaker, p2.Transcript[3].Speaker, "the candidate's sender keeps its alias in the transcript")
	require.Equal(t, []string{sc.User("10001")}, p2.Candidates[0].Mentions)
	require.Equal(t, sc.Message("m9"), p1.Candidates[0].MessageID)
	require.Equal(t, sc.Message("m10"), p2.Candidates[0].MessageID)
	require.True(t, strings.HasPrefix(requestText(reqs[1]), strings.SplitAfter(requestText(reqs[0]), `"yes please"}`)[0]),
		"the second request extends the first one's transcript")

	// Another router with the session's Scope (after a restart, say) uses
	// the same aliases.
	model2 := agenttest.New().Otherwise(agenttest.Reply(rating("no", 0.3)))
	f2 := newFixture(t, model2, nil)
	_, err = f2.router.Route(ctx, in1)
	require.NoError(t, err)
	require.Equal(t, requestText(reqs[0]), requestText(model2.Last()), "the same request, byte for byte")
}

func TestRouterFallbackScope(t *testing.T) {
	t.Parallel()
	model := agenttest.New().Otherwise(agenttest.Reply(rating("no", 0.3)))
	f := newFixture(t, model, nil)
	route2 := func(in route.Input) routerPayload {
		_, err := f.router.Route(t.Context(), in)
		require.NoError(t, err)
		return parsePayload(t, model.Last())
	}
	a, b := route2(input()), route2(input())
	require.Equal(t, a, b, "without a Scope in the context, aliases are stable for the router's lifetime")
	require.Regexp(t, `^u_[a-z2-7]{8}$`, a.Bot.Speaker)
	require.Regexp(t, `^m_[a-z2-7]{8}$`, a.Candidates[0].MessageID)
	require.NotEqual(t, a.Transcript[0].Speaker, a.Transcript[2].Speaker)
	for _, id := range []string{"10001", "10002", "10003", botID, "g1"} {
		require.NotContains(t, requestText(model.Last()), `"`+id+`"`)
	}

	other := input()
	other.SessionKey = "default:onebot:bot1:group:g2"
	c := route2(other)
	require.NotEqual(t, a.Candidates[0].Speaker, c.Candidates[0].Speaker, "sessions do not share fallback aliases")

	model2 := agenttest.New().Otherwise(agenttest.Reply(rating("no", 0.3)))
	f2 := newFixture(t, model2, nil)
	_, err := f2.router.Route(t.Context(), input())
	require.NoError(t, err)
	require.NotEqual(t, a.Bot.Speaker, parsePayload(t, model2.Last()).Bot.Speaker, "every router has its own secret")
}

func TestRouterBotAlias(t *testing.T) {
	t.Parallel()
	sc, ctx := testScope(t, session)
	answer := `{"candidates":[
 {"message_id":"` + sc.Message("m9") + `","relevance":{"directed":"yes","reason":"r1"},"chat_in":{"score":0.2,"reason":"s1"}},
 {"message_id":"` + sc.Message("m10") + `","relevance":{"directed":"no","reason":"r2"},"chat_in":{"score":0.1,"reason":"s2"}}]}`
	model := agenttest.New(agenttest.Reply(answer))
	f := newFixture(t, model, nil)
	in := input()
	in.Event.Segments = []channel.Segment{channel.Mention(botID), channel.Text("  what do you think?")}
	in.Others = []channel.Event{msg("m10", "10002", "", time.Second)}
	in.Others[0].Segments = []channel.Segment{channel.Text("hey "), channel.Mention(agent.MentionAll), channel.Text("  dinner at 7")}
	d, err := f.router.Route(ctx, in)
	require.NoError(t, err)
	require.True(t, d.Reply)
	require.Equal(t, "yes", d.Directed, "rated by the alias it was shown with")
	require.Equal(t, route.IgnoredChatScore, d.Others[0].Code)

	req := model.Last()
	require.Contains(t, req.Messages[0].Content, "The bot's own alias is given in bot.speaker")
	p := parsePayload(t, req)
	me := sc.Bot()
	require.Equal(t, sc.User(botID), me)
	require.Equal(t, me, p.Bot.Speaker, "the request says which alias is the bot")
	require.Equal(t, []string{"Mira"}, p.Bot.Names)
	require.Equal(t, me, p.Transcript[1].Speaker)
	require.True(t, p.Transcript[1].IsBot)
	require.False(t, p.Transcript[0].IsBot)

	c := p.Candidates[0]
	require.True(t, c.MentionsMe)
	require.Equal(t, []string{me}, c.Mentions)
	require.Equal(t, "@"+me+" what do you think?", c.Text, "single spaces")
	all := p.Candidates[1]
	require.False(t, all.MentionsMe)
	require.Equal(t, []string{"everyone"}, all.Mentions)
	require.Equal(t, "hey @everyone dinner at 7", all.Text)
}

func TestRouterBehindPrivate(t *testing.T) {
	t.Parallel()
	sc, ctx := testScope(t, session)
	// Short message ids: too short for the boundary's text scrub.
	in := input()
	in.Event.MessageID = "4242"
	in.Others = []channel.Event{msg("77", "10002", "and you?", time.Second)}
	a1, a2 := sc.Message("4242"), sc.Message("77")
	rate := func(id, directed string) string {
		return fmt.Sprintf(`{"message_id":%q,"relevance":{"directed":%q,"reason":"r"},"chat_in":{"score":0.2,"reason":"s"}}`, id, directed)
	}
	inner := agenttest.New(
		agenttest.Reply(`{"candidates":[`+rate(a1, "yes")+`,`+rate(a1, "no")+`]}`), // a1 twice: unusable
		agenttest.Reply(`{"candidates":[`+rate(a1, "yes")+`,`+rate(a2, "no")+`]}`),
	)
	f := newFixture(t, inner, func(c *route.Config) { c.Model = agent.Private(inner, nil) })
	d, err := f.router.Route(ctx, in)
	require.NoError(t, err)
	require.Equal(t, 2, d.Calls)
	require.True(t, d.Reply, d.Reason)
	require.Equal(t, "4242", d.MessageID)
	require.Equal(t, "yes", d.Directed, "the boundary restored the alias; the router knows the real id")
	require.Equal(t, "no", d.Others[0].Directed)
	require.Equal(t, "4242", d.Target)

	reqs := inner.Requests()
	require.Len(t, reqs, 2)
	retry := reqs[1].Messages
	require.Len(t, retry, 4)
	require.Contains(t, retry[2].Content, `"message_id":"`+a1+`"`, "the echo of the answer names the candidate by its alias again")
	require.Contains(t, retry[3].Content, `candidate "`+a1+`" appears twice`)
	for _, req := range reqs {
		for _, id := range []string{"4242", `"77"`} {
			require.NotContains(t, everything(req), id)
		}
	}
}

func TestRouterWindowMovesByEpochs(t *testing.T) {
	t.Parallel()
	const n = 5
	model := agenttest.New().Otherwise(agenttest.Reply(rating("no", 0.3)))
	f := newFixture(t, model, func(c *route.Config) { c.TranscriptMessages = n })
	require.Equal(t, 2*n, f.router.RecentLimit())
	var evs []channel.Event
	for i := range 40 {
		evs = append(evs, msg(fmt.Sprintf("w%d", i), fmt.Sprintf("1000%d", i%4), fmt.Sprintf("message %d", i), time.Duration(40-i)*time.Minute))
	}
	var prev routerPayload
	epochs := 0
	for k := 1; k < len(evs); k++ {
		in := route.Input{Event: evs[k], SessionKey: session, Recent: evs[max(0, k-f.router.RecentLimit()):k]}
		_, err := f.router.Route(t.Context(), in)
		require.NoError(t, err)
		p := parsePayload(t, model.Last())
		shown := len(p.Transcript)
		require.GreaterOrEqual(t, shown, min(n, k), "at least TranscriptMessages lines")
		require.LessOrEqual(t, shown, 2*n, "at most twice that")
		require.Equal(t, fmt.Sprintf("message %d", k-1), p.Transcript[shown-1].Text, "the newest line is the message before")
		if k > 1 && p.Transcript[0].Text != prev.Transcript[0].Text {
			epochs++
			require.Equal(t, n, shown, "a new epoch starts with TranscriptMessages lines")
			require.Equal(t, 2*n, len(prev.Transcript), "after the window was full")
		} else if k > 1 {
			require.Equal(t, len(prev.Transcript)+1, shown, "within an epoch the window grows")
			require.Equal(t, prev.Transcript[1:], p.Transcript[1:shown-1], "and keeps its lines")
		}
		prev = p
	}
	require.Equal(t, 5, epochs, "39 ratings: up to 10 lines, then a new epoch every 6th rating (k = 11, 17, 23, 29, 35)")

	// A router that knows no anchor (after a restart) shows the newest
	// TranscriptMessages lines.
	model2 := agenttest.New().Otherwise(agenttest.Reply(rating("no", 0.3)))
	f2 := newFixture(t, model2, func(c *route.Config) { c.TranscriptMessages = n })
	_, err := f2.router.Route(t.Context(), route.Input{Event: evs[39], SessionKey: session, Recent: evs[29:39]})
	require.NoError(t, err)
	require.Len(t, parsePayload(t, model2.Last()).Transcript, n)
}

func BenchmarkRouterReplay(b *testing.B) {
	scope, err := agent.NewScope(busySession, []byte("0123456789abcdef0123456789abcdef"), nil)
	require.NoError(b, err)
	ctx := agent.WithScope(context.Background(), scope)
	var model *agenttest.Model
	for b.Loop() {
		model = recordingRouterModel()
		replayBusy(b, ctx, model, nil)
	}
	shared, meanBytes, meanUncached := costSummary(requestCosts(model.Requests()))
	b.ReportMetric(float64(len(model.Requests())), "requests/replay")
	b.ReportMetric(float64(meanBytes), "bytes/request")
	b.ReportMetric(float64(meanUncached), "uncached-bytes/request")
	b.ReportMetric(100*shared, "%shared")
}
