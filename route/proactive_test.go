package route_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/gate/gatetest"
	"github.com/personakit/persona/internal/logbuf"
	"github.com/personakit/persona/route"
)

var now0 = time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC)

const session = "default:onebot:bot1:group:g1"

type fixture struct {
	router *route.ModelRouter
	model  *agenttest.Model
	flags  *gatetest.Flags
	clk    *clock.Fake
	logs   *logbuf.Buffer
}

func newFixture(t *testing.T, model *agenttest.Model, mod func(c *route.Config)) *fixture {
	t.Helper()
	f := &fixture{model: model, flags: gatetest.NewFlags(), clk: clock.NewFake(now0), logs: &logbuf.Buffer{}}
	cfg := route.Config{Model: model, Flags: f.flags, Clock: f.clk, Aliases: []string{"Mira"},
		Logger: slog.New(slog.NewJSONHandler(f.logs, nil))}
	if mod != nil {
		mod(&cfg)
	}
	r, err := route.New(cfg)
	require.NoError(t, err)
	f.router = r
	return f
}

// msg returns a group message of g1 at now0-age.
func msg(id, sender, text string, age time.Duration) channel.Event {
	return channel.Event{Platform: "onebot", BotID: botID, Kind: channel.KindMessage, SessionKey: session,
		Chat: channel.Chat{Kind: channel.Group, ID: "g1"}, MessageID: id, Time: now0.Add(-age),
		Sender: channel.Sender{ID: sender, Name: "name-of-" + sender}, Segments: []channel.Segment{channel.Text(text)}}
}

// botMsg returns one of the bot's own messages.
func botMsg(id, text string, age time.Duration) channel.Event {
	e := msg(id, botID, text, age)
	e.Kind, e.Sender = channel.KindSelf, channel.Sender{ID: botID, IsBot: true}
	return e
}

func input() route.Input {
	return route.Input{
		Event:      msg("m9", "10001", "anyone know a good ramen place near the station?", 2*time.Second),
		SessionKey: session,
		Recent: []channel.Event{
			msg("m1", "10002", "lunch soon?", 5*time.Minute),
			botMsg("b1", "I could eat", 4*time.Minute),
			msg("m2", "10003", "yes please", 3*time.Minute),
		},
	}
}

// rating renders a router answer for candidate c1.
func rating(directed string, score float64) string {
	return fmt.Sprintf(`{"candidates":[{"message_id":"c1","relevance":{"directed":%q,"reason":"why directed"},"chat_in":{"score":%v,"reason":"why score"}}]}`, directed, score)
}

func TestRouterOutcomes(t *testing.T) {
	t.Parallel()
	boom := &agent.Error{Kind: agent.KindServer, Status: 502, Message: "bad gateway"}
	tests := []struct {
		name  string
		steps []agenttest.Step
		// settings for the chat (nil = defaults).
		settings *gate.Proactive
		setup    func(t *testing.T, f *fixture)
		in       func(in *route.Input)

		reply    bool
		code     string
		directed string
		chatIn   float64
		chatPass bool
		calls    int
		reason   string
	}{
		{name: "valid, directed", steps: []agenttest.Step{agenttest.Reply(rating("yes", 0.2))},
			reply: true, directed: "yes", chatIn: 0.2, calls: 1, reason: "addressed to the bot: why directed"},
		{name: "fenced", steps: []agenttest.Step{agenttest.Reply("```json\n" + rating("yes", 0.5) + "\n```")},
			reply: true, directed: "yes", chatIn: 0.5, calls: 1},
		{name: "fenced with prose", steps: []agenttest.Step{agenttest.Reply("Sure! Here it is:\n```\n" + rating("no", 0.97) + "\n```\nHope that helps.")},
			reply: true, directed: "no", chatIn: 0.97, chatPass: true, calls: 1, reason: "chat-in score 0.97 (threshold 0.95): why score"},
		{name: "partial twice", steps: []agenttest.Step{
			agenttest.Reply(`{"candidates":[]}`), agenttest.Reply(`{"candidates":[{"message_id":"c7","relevance":{"directed":"yes","reason":"r"},"chat_in":{"score":1,"reason":"r"}}]}`)},
			code: string(route.IgnoredRouterFailed), calls: 2, reason: "router answer unusable twice: no rating for candidate m9"},
		{name: "partial then valid", steps: []agenttest.Step{agenttest.Reply(`{"candidates":[]}`), agenttest.Reply(rating("yes", 0))},
			reply: true, directed: "yes", calls: 2},
		{name: "unparsable then valid", steps: []agenttest.Step{agenttest.Reply("I think yes"), agenttest.Reply(rating("no", 0.3))},
			code: string(route.IgnoredChatScore), directed: "no", chatIn: 0.3, calls: 2, reason: "chat-in score 0.30 is below 0.95: why score"},
		{name: "unparsable twice", steps: []agenttest.Step{agenttest.Reply("yes"), agenttest.Reply(`{"candidates":[{"message_id":"c1","relevance":{"directed":"maybe"}}]}`)},
			code: string(route.IgnoredRouterFailed), calls: 2, reason: "unusable twice"},
		{name: "error", steps: []agenttest.Step{agenttest.Fail(boom)},
			code: string(route.IgnoredRouterFailed), calls: 1, reason: "router model failed: agent: model server (HTTP 502): bad gateway"},
		{name: "error on the retry", steps: []agenttest.Step{agenttest.Reply("?"), agenttest.Fail(errors.New("reset"))},
			code: string(route.IgnoredRouterFailed), calls: 2, reason: "router model failed: reset"},
		{name: "nil response", steps: []agenttest.Step{agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) { return nil, nil })},
			code: string(route.IgnoredRouterFailed), calls: 1, reason: "no response"},

		// Decision order.
		{name: "stop: not directed, score 0", steps: []agenttest.Step{agenttest.Reply(rating("no", 0))},
			code: string(route.IgnoredRouterStop), directed: "no", calls: 1, reason: "not addressed to the bot and chat-in score 0: why score"},
		{name: "stop even at no_limit", settings: &gate.Proactive{ChatIn: gate.ChatNoLimit}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0))},
			code: string(route.IgnoredRouterStop), directed: "no", calls: 1},
		{name: "directed with score 0 passes", steps: []agenttest.Step{agenttest.Reply(rating("yes", 0))},
			reply: true, directed: "yes", calls: 1},
		{name: "directed, answer questions off, low score", settings: &gate.Proactive{AnswerQuestions: gate.ToggleOff},
			steps: []agenttest.Step{agenttest.Reply(rating("yes", 0.5))}, code: string(route.IgnoredChatScore), directed: "yes", chatIn: 0.5, calls: 1},
		{name: "directed, answer questions off, high score", settings: &gate.Proactive{AnswerQuestions: gate.ToggleOff},
			steps: []agenttest.Step{agenttest.Reply(rating("yes", 0.96))}, reply: true, chatPass: true, directed: "yes", chatIn: 0.96, calls: 1},
		{name: "chat-in off", settings: &gate.Proactive{ChatIn: gate.ChatOff}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.99))},
			code: string(route.IgnoredChatScore), directed: "no", chatIn: 0.99, calls: 1, reason: "not addressed to the bot and chat-in is off: why directed"},
		{name: "score at the low threshold", steps: []agenttest.Step{agenttest.Reply(rating("no", 0.95))},
			reply: true, chatPass: true, directed: "no", chatIn: 0.95, calls: 1},
		{name: "score below the low threshold", steps: []agenttest.Step{agenttest.Reply(rating("no", 0.94))},
			code: string(route.IgnoredChatScore), directed: "no", chatIn: 0.94, calls: 1},
		{name: "medium level", settings: &gate.Proactive{ChatIn: gate.ChatMedium}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.88))},
			reply: true, chatPass: true, directed: "no", chatIn: 0.88, calls: 1},
		{name: "high level", settings: &gate.Proactive{ChatIn: gate.ChatHigh}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.79))},
			code: string(route.IgnoredChatScore), directed: "no", chatIn: 0.79, calls: 1, reason: "below 0.80"},
		{name: "no_limit level", settings: &gate.Proactive{ChatIn: gate.ChatNoLimit}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.7))},
			reply: true, chatPass: true, directed: "no", chatIn: 0.7, calls: 1},
		{name: "threshold override", settings: &gate.Proactive{ChatThreshold: 0.5}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.5))},
			reply: true, chatPass: true, directed: "no", chatIn: 0.5, calls: 1},
		{name: "cooldown", setup: func(t *testing.T, f *fixture) {
			require.NoError(t, route.StartChatCooldown(t.Context(), f.flags, session, now0.Add(10*time.Second)))
		}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.99))},
			code: string(route.IgnoredChatCooldown), directed: "no", chatIn: 0.99, calls: 1, reason: "chat-in cooldown until 14:00:10 UTC"},
		{name: "cooldown over", setup: func(t *testing.T, f *fixture) {
			require.NoError(t, route.StartChatCooldown(t.Context(), f.flags, session, now0))
		}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.99))}, reply: true, chatPass: true, directed: "no", chatIn: 0.99, calls: 1},
		{name: "cooldown does not stop a directed answer", setup: func(t *testing.T, f *fixture) {
			require.NoError(t, route.StartChatCooldown(t.Context(), f.flags, session, now0.Add(time.Minute)))
		}, steps: []agenttest.Step{agenttest.Reply(rating("yes", 0.99))}, reply: true, directed: "yes", chatIn: 0.99, calls: 1},
		{name: "score below threshold beats cooldown", setup: func(t *testing.T, f *fixture) {
			require.NoError(t, route.StartChatCooldown(t.Context(), f.flags, session, now0.Add(time.Minute)))
		}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.5))}, code: string(route.IgnoredChatScore), directed: "no", chatIn: 0.5, calls: 1},
		{name: "talk too much", in: talkative, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.99))},
			code: string(route.IgnoredTalkTooMuch), directed: "no", chatIn: 0.99, calls: 1, reason: "the bot sent 4 of the last 8 messages in 10m0s while 3 others talked"},
		{name: "talk too much, no_limit", in: talkative, settings: &gate.Proactive{ChatIn: gate.ChatNoLimit},
			steps: []agenttest.Step{agenttest.Reply(rating("no", 0.99))}, reply: true, chatPass: true, directed: "no", chatIn: 0.99, calls: 1},
		{name: "talk too much does not stop a directed answer", in: talkative,
			steps: []agenttest.Step{agenttest.Reply(rating("yes", 0.1))}, reply: true, directed: "yes", chatIn: 0.1, calls: 1},
		{name: "pre-filter: only chat-in could pass", in: talkative, settings: &gate.Proactive{AnswerQuestions: gate.ToggleOff},
			code: string(route.IgnoredTalkTooMuch), calls: 0, reason: "(not rated)"},
		{name: "pre-filter off at no_limit", in: talkative, settings: &gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatNoLimit},
			steps: []agenttest.Step{agenttest.Reply(rating("no", 0.8))}, reply: true, chatPass: true, directed: "no", chatIn: 0.8, calls: 1},
		{name: "both switches off", settings: &gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatOff},
			code: string(gate.IgnoredProactiveOff), calls: 0},
		{name: "bot share at 25 % is not too much", in: func(in *route.Input) {
			talkative(in)
			// 4 bot messages of 16.
			for i := range 8 {
				in.Recent = append(in.Recent, msg(fmt.Sprintf("x%d", i), "10002", "more", time.Minute))
			}
		}, steps: []agenttest.Step{agenttest.Reply(rating("no", 0.99))}, reply: true, chatPass: true, directed: "no", chatIn: 0.99, calls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			model := agenttest.New()
			model.OnPurpose(agent.PurposeRouter, tt.steps...)
			f := newFixture(t, model, func(c *route.Config) {
				if tt.settings != nil {
					s := *tt.settings
					c.Settings = func(*channel.Event) gate.Proactive { return s }
				}
			})
			if tt.setup != nil {
				tt.setup(t, f)
			}
			in := input()
			if tt.in != nil {
				tt.in(&in)
			}
			d, err := f.router.Route(t.Context(), in)
			require.NoError(t, err)
			require.Equal(t, tt.reply, d.Reply, "reason: %s", d.Reason)
			if tt.reply {
				require.Empty(t, d.Code)
				require.Equal(t, "m9", d.Target)
			} else {
				require.Equal(t, tt.code, string(d.Code))
				require.Empty(t, d.Target)
			}
			require.Equal(t, "m9", d.MessageID)
			require.Equal(t, tt.directed, d.Directed)
			require.InDelta(t, tt.chatIn, d.ChatIn, 1e-9)
			require.Equal(t, tt.chatPass, d.ChatInPass)
			require.Equal(t, tt.calls, d.Calls)
			require.Equal(t, tt.calls, model.Calls())
			require.Zero(t, model.Pending(), "every scripted answer was used")
			require.NotEmpty(t, d.Reason)
			require.Contains(t, d.Reason, tt.reason)
			for _, req := range model.Requests() {
				require.Equal(t, agent.PurposeRouter, req.Purpose)
				require.True(t, req.JSON)
			}
			logs := f.logs.MustRecords(t, "proactive_reply_route")
			require.Len(t, logs, 1, "one record per rating")
			require.Equal(t, "m9", logs[0]["message_id"])
			require.Equal(t, d.Reason, logs[0]["reason"])
			if d.Directed != "" {
				require.Equal(t, "why directed", logs[0]["directed_reason"])
				require.Equal(t, "why score", logs[0]["chat_in_reason"])
			}
		})
	}
}

// talkative makes the bot the author of 4 of the 8 messages of the last
// 10 minutes (counting the current one), with three other speakers.
func talkative(in *route.Input) {
	in.Recent = []channel.Event{
		msg("old", "10009", "from long ago", time.Hour),
		botMsg("old-b", "old bot message", 11*time.Minute),
		msg("m1", "10002", "hi", 9*time.Minute),
		botMsg("b1", "hello!", 8*time.Minute),
		msg("m2", "10003", "hey", 7*time.Minute),
		botMsg("b2", "how are you", 6*time.Minute),
		msg("m3", "10002", "fine", 5*time.Minute),
		botMsg("b3", "great", 4*time.Minute),
		botMsg("b4", "anything new?", 3*time.Minute),
	}
}

func TestRouterRetryRemindsOfTheSchema(t *testing.T) {
	t.Parallel()
	model := agenttest.New(agenttest.Reply("not json at all"), agenttest.Reply(rating("yes", 0.1)))
	f := newFixture(t, model, nil)
	sc, ctx := testScope(t, session)
	d, err := f.router.Route(ctx, input())
	require.NoError(t, err)
	require.True(t, d.Reply)
	reqs := model.Requests()
	require.Len(t, reqs, 2)
	first, second := reqs[0].Messages, reqs[1].Messages
	require.Len(t, first, 2)
	require.Len(t, second, 4)
	require.Equal(t, first, second[:2], "the retry repeats the conversation")
	require.Equal(t, agent.RoleAssistant, second[2].Role)
	require.Equal(t, "not json at all", second[2].Content)
	require.Equal(t, agent.RoleUser, second[3].Role)
	require.Contains(t, second[3].Content, "could not be used")
	require.Contains(t, second[3].Content, route.OutputSchema)
	require.Contains(t, second[3].Content, "Include every candidate exactly once: "+sc.Message("m9")+".")
}

func TestRouterTimeout(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	model := agenttest.New(agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	f := newFixture(t, model, nil)
	done := make(chan route.Decision, 1)
	go func() {
		d, err := f.router.Route(t.Context(), input())
		require.NoError(t, err)
		done <- d
	}()
	<-entered
	require.Equal(t, 1, f.clk.Pending(), "the budget timer is armed on the fake clock")
	f.clk.Advance(59 * time.Second)
	select {
	case <-done:
		t.Fatal("returned before the budget ran out")
	default:
	}
	f.clk.Advance(time.Second)
	d := <-done
	require.False(t, d.Reply)
	require.Equal(t, route.IgnoredRouterFailed, d.Code)
	require.Equal(t, "router timed out after 1m0s", d.Reason)
	require.Equal(t, 1, d.Calls)
}

func TestRouterTimeoutCoversTheRetry(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	model := agenttest.New(
		agenttest.Reply("garbage"),
		agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
			close(entered)
			<-ctx.Done()
			return &agent.Response{Text: rating("yes", 1)}, nil // too late: ignored
		}))
	f := newFixture(t, model, func(c *route.Config) { c.Timeout = 5 * time.Second })
	done := make(chan route.Decision, 1)
	go func() {
		d, _ := f.router.Route(t.Context(), input())
		done <- d
	}()
	<-entered
	f.clk.Advance(5 * time.Second)
	d := <-done
	require.Equal(t, route.IgnoredRouterFailed, d.Code)
	require.Equal(t, "router timed out after 5s", d.Reason)
	require.Equal(t, 2, d.Calls)
}

func TestRouterCanceledContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agenttest.New(), nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := f.router.Route(ctx, input())
	require.ErrorIs(t, err, context.Canceled)

	// Cancelled while the model runs: an error, not a router failure.
	ctx, cancel = context.WithCancel(t.Context())
	model := agenttest.New(agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		cancel()
		return nil, ctx.Err()
	}))
	f = newFixture(t, model, nil)
	_, err = f.router.Route(ctx, input())
	require.ErrorIs(t, err, context.Canceled)
}

func TestRouterCooldownReadFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, agenttest.New(agenttest.Reply(rating("no", 0.99))), nil)
	f.flags.FailWith(errors.New("disk on fire"))
	_, err := f.router.Route(t.Context(), input())
	require.ErrorContains(t, err, "disk on fire")
}

func TestRouterChatReplySentStartsCooldown(t *testing.T) {
	t.Parallel()
	model := agenttest.New().Otherwise(agenttest.Reply(rating("no", 0.99)))
	f := newFixture(t, model, func(c *route.Config) {
		c.Settings = func(ev *channel.Event) gate.Proactive {
			if ev.Chat.ID == "g1" {
				return gate.Proactive{ChatCooldown: time.Minute}
			}
			return gate.Proactive{}
		}
	})
	in := input()
	d, err := f.router.Route(t.Context(), in)
	require.NoError(t, err)
	require.True(t, d.ChatInPass)

	// Rated again before the reply went out: no cooldown yet.
	d, err = f.router.Route(t.Context(), in)
	require.NoError(t, err)
	require.True(t, d.Reply, "the cooldown starts only when a chat-in reply is sent")

	f.clk.Advance(5 * time.Second)
	require.NoError(t, f.router.ChatReplySent(t.Context(), session, &in.Event, f.clk.Now()))
	fl, ok, err := f.flags.GetFlag(t.Context(), session, "", gate.FlagChatCooldown)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, now0.Add(65*time.Second), fl.Until, "the group's cooldown, from the send time")

	f.clk.Advance(59 * time.Second)
	d, err = f.router.Route(t.Context(), in)
	require.NoError(t, err)
	require.Equal(t, route.IgnoredChatCooldown, d.Code)
	f.clk.Advance(time.Second)
	d, err = f.router.Route(t.Context(), in)
	require.NoError(t, err)
	require.True(t, d.Reply)

	// Default cooldown is 30 s.
	f2 := newFixture(t, agenttest.New(), nil)
	require.NoError(t, f2.router.ChatReplySent(t.Context(), session, &in.Event, now0))
	fl, _, err = f2.flags.GetFlag(t.Context(), session, "", gate.FlagChatCooldown)
	require.NoError(t, err)
	require.Equal(t, now0.Add(30*time.Second), fl.Until)
}

func TestRouterSeveralCandidates(t *testing.T) {
	t.Parallel()
	answer := `{"candidates":[
 {"message_id":"c1","relevance":{"directed":"no","reason":"r1"},"chat_in":{"score":0.96,"reason":"s1"}},
 {"message_id":"c2","relevance":{"directed":"yes","reason":"r2"},"chat_in":{"score":0.2,"reason":"s2"}},
 {"message_id":"c3","relevance":{"directed":"yes","reason":"r3"},"chat_in":{"score":0.1,"reason":"s3"}},
 {"message_id":"c4","relevance":{"directed":"no","reason":"r4"},"chat_in":{"score":0,"reason":"s4"}}]}`
	model := agenttest.New(agenttest.Reply(answer))
	f := newFixture(t, model, nil)
	in := input()
	in.Others = []channel.Event{
		msg("m10", "10002", "@bot what do you think?", time.Second),
		msg("m8", "10003", "bot, you there?", 20*time.Second),
		msg("m11", "10004", "stop talking bot", 0),
	}
	in.Recent = append(in.Recent, in.Others[1]) // already in history: not repeated in the transcript
	d, err := f.router.Route(t.Context(), in)
	require.NoError(t, err)
	require.True(t, d.Reply)
	require.True(t, d.ChatInPass)
	require.Len(t, d.Others, 3)
	require.Equal(t, "m10", d.Others[0].MessageID)
	require.True(t, d.Others[0].Reply)
	require.Equal(t, "yes", d.Others[0].Directed)
	require.True(t, d.Others[1].Reply)
	require.Equal(t, route.IgnoredRouterStop, d.Others[2].Code)
	require.Equal(t, "m10", d.Target, "the most recent directed candidate")
	require.Len(t, f.logs.MustRecords(t, "proactive_reply_route"), 4)

	var p struct {
		Transcript []map[string]any `json:"transcript"`
		Candidates []map[string]any `json:"candidates"`
	}
	body := model.Last().Messages[1].Content
	require.NoError(t, json.Unmarshal([]byte(body[strings.Index(body, "{"):]), &p))
	require.Len(t, p.Candidates, 4)
	require.Len(t, p.Transcript, 3, "candidates are not repeated in the transcript")
}

func TestRouterPartialWithSeveralCandidates(t *testing.T) {
	t.Parallel()
	only1 := rating("yes", 0.3)
	model := agenttest.New(agenttest.Reply(only1), agenttest.Reply(only1))
	f := newFixture(t, model, nil)
	in := input()
	in.Others = []channel.Event{msg("m10", "10002", "and you?", time.Second)}
	d, err := f.router.Route(t.Context(), in)
	require.NoError(t, err)
	require.True(t, d.Reply, "the rated candidate is decided")
	require.Equal(t, 2, d.Calls)
	require.Len(t, d.Others, 1)
	require.Equal(t, route.IgnoredRouterFailed, d.Others[0].Code)
	require.Contains(t, d.Others[0].Reason, "no rating for candidate m10", "the record names the real message id")
}

func TestRouterTarget(t *testing.T) {
	t.Parallel()
	answer := `{"candidates":[
 {"message_id":"c1","relevance":{"directed":"no","reason":""},"chat_in":{"score":0.96,"reason":""}},
 {"message_id":"c2","relevance":{"directed":"no","reason":""},"chat_in":{"score":0.99,"reason":""}}]}`
	f := newFixture(t, agenttest.New(agenttest.Reply(answer)), nil)
	in := input()
	in.Others = []channel.Event{msg("m10", "10002", "ramen is life", time.Second)}
	d, err := f.router.Route(t.Context(), in)
	require.NoError(t, err)
	require.Equal(t, "m10", d.Target, "no directed candidate: the highest score")
	require.Equal(t, "chat-in score 0.96 (threshold 0.95)", d.Reason, "no model reason: the decision alone")
}

// testScope returns a session Scope with a fixed secret and a context
// carrying it.
func testScope(t *testing.T, session string) (*agent.Scope, context.Context) {
	t.Helper()
	sc, err := agent.NewScope(session, []byte("route-test-secret-0123456789abcd"), nil)
	require.NoError(t, err)
	return sc, agent.WithScope(t.Context(), sc)
}

// routerPayload is the data of a router request.
type routerPayload struct {
	Bot struct {
		Speaker string   `json:"speaker"`
		Names   []string `json:"names"`
	} `json:"bot"`
	Criteria   string `json:"criteria"`
	Transcript []struct {
		At      string `json:"at"`
		Speaker string `json:"speaker"`
		Name    string `json:"name"`
		IsBot   bool   `json:"is_bot"`
		ReplyTo string `json:"reply_to"`
		Text    string `json:"text"`
	} `json:"transcript"`
	BotLast *struct {
		At            string   `json:"at"`
		Addressed     []string `json:"addressed"`
		MessagesSince int      `json:"messages_since"`
	} `json:"bot_last_message"`
	Candidates []struct {
		MessageID string   `json:"message_id"`
		At        string   `json:"at"`
		Speaker   string   `json:"speaker"`
		Name      string   `json:"name"`
		IsBot     bool     `json:"is_bot"`
		Text      string   `json:"text"`
		Mentions  []string `json:"mentions"`
		QuotesBot bool     `json:"quotes_bot"`
		AfterBot  bool     `json:"bot_last_addressed_speaker"`
		Quote     struct {
			Speaker string `json:"speaker"`
			IsBot   bool   `json:"is_bot"`
			Text    string `json:"text"`
		} `json:"quote"`
		MentionsMe bool `json:"mentions_bot"`
	} `json:"candidates"`
	Now string `json:"now"`
}

// parsePayload decodes the data of a router request (its user message,
// after the intro line).
func parsePayload(t *testing.T, req agent.Request) routerPayload {
	t.Helper()
	body := req.Messages[1].Content
	var p routerPayload
	dec := json.NewDecoder(strings.NewReader(body[strings.Index(body, "{"):]))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&p))
	return p
}

func TestRouterRequest(t *testing.T) {
	t.Parallel()
	model := agenttest.New(agenttest.Reply(rating("yes", 0.5)))
	f := newFixture(t, model, func(c *route.Config) {
		c.Settings = func(*channel.Event) gate.Proactive { return gate.Proactive{Criteria: "Only food questions."} }
	})
	sc, ctx := testScope(t, session)
	in := input()
	long := strings.Repeat("ラーメン", 100)
	in.Recent = nil
	for i := range 40 {
		in.Recent = append(in.Recent, msg(fmt.Sprintf("h%d", i), fmt.Sprintf("2000%d", i%3), fmt.Sprintf("line %d %s", i, long), time.Duration(40-i)*time.Minute))
	}
	bot := botMsg("b9", "try the place @ 5th street", 30*time.Second)
	bot.Segments = append(bot.Segments, channel.Mention("10001"))
	in.Recent = append(in.Recent, bot, msg("h99", "20000", "ok", 10*time.Second))
	const inline = "data:image/png;base64,iVBORw0KGgo="
	in.Event.Segments = []channel.Segment{
		channel.Quote("b9"), channel.Mention("20001"), channel.Text(" is it open now?"),
		channel.Image(channel.Media{URL: "https://img.example/10001/1.jpg"}), channel.Image(channel.Media{URL: "file:///etc/passwd"}),
		channel.Image(channel.Media{URL: inline}),
	}
	in.Event.Quoted = &channel.Quoted{MessageID: "b9", FromBot: true, Text: "try the place @ 5th street"}
	_, err := f.router.Route(ctx, in)
	require.NoError(t, err)

	req := model.Last()
	require.Equal(t, agent.PurposeRouter, req.Purpose)
	require.Len(t, req.Messages, 2)
	require.Equal(t, agent.RoleSystem, req.Messages[0].Role)
	require.Contains(t, req.Messages[0].Content, route.OutputSchema)
	user := req.Messages[1]
	require.Equal(t, []agent.Part{{ImageURL: inline, Detail: "low"}}, user.Parts, "only the current message's inline images")
	for _, id := range []string{"10001", "10002", "10003", "20000", "20001", "20002", "img.example", "passwd"} {
		require.NotContains(t, user.Content, id, "real ids and media URLs never reach the model")
	}
	for _, id := range []string{botID, "m9", "h1", "b9", "g1"} {
		require.NotContains(t, user.Content, `"`+id+`"`, "real ids never reach the model")
		require.NotContains(t, req.Messages[0].Content, id)
	}
	p := parsePayload(t, req)

	me := sc.User(botID)
	require.Equal(t, me, p.Bot.Speaker)
	require.Equal(t, []string{"Mira"}, p.Bot.Names)
	require.Equal(t, "Only food questions.", p.Criteria)
	require.Len(t, p.Transcript, 30, "the last 30 messages (no earlier window)")
	require.Contains(t, p.Transcript[0].Text, "line 12 ", "oldest first")
	require.Equal(t, "2026-03-02 13:32:00", p.Transcript[0].At, "the first line is dated")
	require.Equal(t, "13:33:00", p.Transcript[1].At, "a line on the same day is not")
	require.Equal(t, "ok", p.Transcript[29].Text)
	require.Equal(t, "13:59:50", p.Transcript[29].At)
	for _, l := range p.Transcript {
		require.LessOrEqual(t, len([]rune(l.Text)), 180)
		require.Regexp(t, `^u_[a-z2-7]{8}$`, l.Speaker)
	}
	require.True(t, strings.HasSuffix(p.Transcript[0].Text, "…"))
	self := p.Transcript[28]
	require.Equal(t, me, self.Speaker)
	require.True(t, self.IsBot)
	require.Empty(t, self.Name)
	require.False(t, p.Transcript[0].IsBot)
	require.Equal(t, "name-of-"+sc.User("20000"), p.Transcript[0].Name, "an id in a name is scrubbed")
	require.Empty(t, p.Transcript[3].Name, "a name is given once per speaker")

	// Stable aliases: the Scope's, for the same sender everywhere.
	for i, l := range p.Transcript[:27] {
		require.Equal(t, sc.User(fmt.Sprintf("2000%d", (i+12)%3)), l.Speaker)
	}

	require.Equal(t, "try the place @ 5th street @"+sc.User("10001"), self.Text)
	require.NotNil(t, p.BotLast)
	require.Equal(t, "13:59:30", p.BotLast.At)
	require.Equal(t, 1, p.BotLast.MessagesSince)
	require.Equal(t, []string{sc.User("10001")}, p.BotLast.Addressed)
	require.Len(t, p.Candidates, 1)
	c := p.Candidates[0]
	require.Equal(t, sc.Message("m9"), c.MessageID)
	require.Equal(t, sc.User("10001"), c.Speaker)
	require.Equal(t, "name-of-"+sc.User("10001"), c.Name)
	require.True(t, c.AfterBot, "the bot's last message addressed this speaker")
	require.Equal(t, "13:59:58", c.At)
	require.Equal(t, []string{sc.User("20001")}, c.Mentions)
	require.Equal(t, "@"+sc.User("20001")+" is it open now? [image] [image] [image]", c.Text)
	require.True(t, c.QuotesBot)
	require.False(t, c.MentionsMe)
	require.Equal(t, me, c.Quote.Speaker)
	require.True(t, c.Quote.IsBot)
	require.Equal(t, "try the place @ 5th street", c.Quote.Text)
	require.Equal(t, "2026-03-02 14:00:00 UTC", p.Now)
	require.True(t, strings.HasSuffix(user.Content, `"now":"2026-03-02 14:00:00 UTC"}`), "the time of the call comes last")
}

func TestRouterOneCallPerSession(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	model := agenttest.New().Otherwise(agenttest.Func(func(ctx context.Context, _ agent.Request) (*agent.Response, error) {
		entered <- struct{}{}
		<-release
		return &agent.Response{Text: rating("yes", 1)}, nil
	}))
	f := newFixture(t, model, nil)
	first := make(chan error, 1)
	go func() {
		_, err := f.router.Route(t.Context(), input())
		first <- err
	}()
	<-entered

	// A second rating of the same session waits for the first; cancelled
	// while waiting, it returns without calling the model.
	ctx, cancel := context.WithCancel(t.Context())
	second := make(chan error, 1)
	go func() {
		_, err := f.router.Route(ctx, input())
		second <- err
	}()
	cancel()
	require.ErrorIs(t, <-second, context.Canceled)
	require.Equal(t, 1, model.Calls())

	// Another session is not held up.
	other := input()
	other.SessionKey = "default:onebot:bot1:group:g2"
	third := make(chan error, 1)
	go func() {
		_, err := f.router.Route(t.Context(), other)
		third <- err
	}()
	<-entered
	close(release)
	require.NoError(t, <-first)
	require.NoError(t, <-third)
}

func TestRouterConcurrencyLimit(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	model := agenttest.New().Otherwise(agenttest.Func(func(context.Context, agent.Request) (*agent.Response, error) {
		entered <- struct{}{}
		<-release
		return &agent.Response{Text: rating("yes", 1)}, nil
	}))
	f := newFixture(t, model, func(c *route.Config) { c.Concurrency = 1 })
	in := func(s string) route.Input { i := input(); i.SessionKey = s; return i }
	errs := make(chan error, 2)
	go func() { _, err := f.router.Route(t.Context(), in("s1")); errs <- err }()
	<-entered
	ctx, cancel := context.WithCancel(t.Context())
	go func() { _, err := f.router.Route(ctx, in("s2")); errs <- err }()
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled, "no free slot")
	close(release)
	require.NoError(t, <-errs)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	m, fl := agenttest.New(), gatetest.NewFlags()
	tests := []struct {
		name string
		cfg  route.Config
		err  string
	}{
		{name: "no model", cfg: route.Config{Flags: fl}, err: "Model is required"},
		{name: "no flags", cfg: route.Config{Model: m}, err: "Flags is required"},
		{name: "negative timeout", cfg: route.Config{Model: m, Flags: fl, Timeout: -1}, err: "negative duration"},
		{name: "negative window", cfg: route.Config{Model: m, Flags: fl, TalkWindow: -1}, err: "negative duration"},
		{name: "negative count", cfg: route.Config{Model: m, Flags: fl, TranscriptMessages: -1}, err: "negative count"},
		{name: "tiny chars", cfg: route.Config{Model: m, Flags: fl, TranscriptChars: 1}, err: "too small"},
		{name: "share", cfg: route.Config{Model: m, Flags: fl, TalkShare: 1}, err: "TalkShare"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := route.New(tt.cfg)
			require.ErrorIs(t, err, route.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.err)
		})
	}
	r, err := route.New(route.Config{Model: m, Flags: fl})
	require.NoError(t, err)
	var _ route.Router = r
}
