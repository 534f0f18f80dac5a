package persona_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	persona "github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/gate"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outbound"
	"github.com/personakit/persona/outcome"
	"github.com/personakit/persona/route"
)

// lastSent returns the text of the newest message the bot sent.
func (h *harness) lastSent() string {
	h.t.Helper()
	sent := h.ch.Sent()
	require.NotEmpty(h.t, sent)
	return sent[len(sent)-1].Out.Text
}

// chatCalls counts the model requests made for generation.
func chatCalls(m *agenttest.Model) int {
	n := 0
	for _, r := range m.Requests() {
		if r.Purpose == agent.PurposeChat {
			n++
		}
	}
	return n
}

func TestOwnerCommandsAreAnsweredWithoutTheModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(), func(o *persona.Options) { o.Owners = []string{"alice"} })
	ctx := t.Context()
	session := channel.SessionKey("", "chantest", "bot", group1)

	o := h.outcome(h.say(group1, alice, "/send off"))
	require.Equal(t, persona.RepliedCommand, o.Code)
	require.NotNil(t, o.Trail)
	require.Equal(t, "send", o.Trail.Command)
	require.Equal(t, "owner_command", o.Trail.Trigger)
	require.Contains(t, h.lastSent(), "off")
	mode, err := gate.SendMode(ctx, h.db, session, h.clk.Now())
	require.NoError(t, err)
	require.Equal(t, gate.SendOff, mode)

	require.Contains(t, h.replyTo(group1, alice, "/send maybe"), "Usage: /send on|off|inherit")
	require.Contains(t, h.replyTo(group1, alice, "/send inherit"), "policy")
	mode, err = gate.SendMode(ctx, h.db, session, h.clk.Now())
	require.NoError(t, err)
	require.Equal(t, gate.SendInherit, mode)

	// /pause stops everyone; /resume still works.
	require.Contains(t, h.replyTo(group1, alice, "/pause 30"), "30 minute(s)")
	paused := h.outcome(h.say(group1, bob, "hi bot", chantest.MentionBot()))
	require.Equal(t, gate.IgnoredResponseSuppression, paused.Code)
	require.Equal(t, "response_suppression", paused.Trail.StoppedBy)
	require.Contains(t, paused.Trail.Gates, "bot_enabled", "the gates it passed are in the trail")
	require.Contains(t, h.replyTo(group1, alice, "/why"), "ignored_response_suppression")
	require.Contains(t, h.replyTo(group1, alice, "/pause 0"), "Usage")
	require.Contains(t, h.replyTo(group1, alice, "/resume"), "Resumed")

	status := h.replyTo(group1, alice, "/status")
	require.Contains(t, status, "Up ")
	require.Contains(t, status, "Queue:")
	require.Contains(t, status, "replied")
	require.Contains(t, h.replyTo(group1, alice, "/frobnicate"), "/status", "an owner's unknown command gets the help")
	require.Contains(t, h.replyTo(dmAlice, alice, "/send on"), "use it in the group")
	require.Zero(t, chatCalls(h.model), "no command reached the chat model")

	// Anyone's /forget me; a non-owner's /status is an ordinary message.
	require.Contains(t, h.replyTo(group1, bob, "/forget me"), "no long-term memory")
	h.model.Add(agenttest.Reply("status of what?"))
	o = h.outcome(h.say(channel.Chat{Kind: channel.Private, ID: "bob"}, bob, "/status"))
	require.Equal(t, outcome.Replied, o.Code)
	require.Equal(t, 1, chatCalls(h.model))
}

// replyTo sends text and returns the bot's reply to it (the message must
// end replied).
func (h *harness) replyTo(chat channel.Chat, from channel.Sender, text string) string {
	h.t.Helper()
	o := h.outcome(h.say(chat, from, text))
	require.True(h.t, o.Code.Replied(), "%s: %s (%s)", text, o.Code, o.Reason)
	return h.lastSent()
}

func TestEmbedderCommands(t *testing.T) {
	t.Parallel()
	var calls []persona.CommandCall
	h := newHarness(t, agenttest.New(), func(o *persona.Options) {
		o.Owners = []string{"alice"}
		o.Commands = []persona.Command{
			{Name: "roll", Usage: "/roll SIDES – roll a die", Run: func(_ context.Context, c *persona.CommandCall) (string, error) {
				calls = append(calls, *c)
				return "rolled " + c.Args, nil
			}},
			{Name: "quiet", Run: func(context.Context, *persona.CommandCall) (string, error) { return "", nil }},
			{Name: "boom", Run: func(context.Context, *persona.CommandCall) (string, error) { return "", errors.New("kaput") }},
			{Name: "deploy", OwnerOnly: true, Run: func(context.Context, *persona.CommandCall) (string, error) { return "deployed", nil }},
		}
	})
	ev := h.say(group1, bob, "/roll 6")
	o := h.outcome(ev)
	require.Equal(t, persona.RepliedCommand, o.Code)
	require.Equal(t, "plugin_command", o.Trail.Trigger, "the plugin-command trigger fires")
	require.Equal(t, "rolled 6", h.lastSent())
	require.Len(t, calls, 1)
	require.Equal(t, "6", calls[0].Args)
	require.Equal(t, "bob", calls[0].Event.Sender.ID, "the embedder's code sees real ids")
	require.False(t, calls[0].Owner)

	require.Equal(t, persona.HandledCommand, h.outcome(h.say(group1, bob, "/quiet")).Code)
	o = h.outcome(h.say(group1, bob, "/boom"))
	require.Equal(t, outcome.RepliedError, o.Code)
	require.Contains(t, o.Reason, "kaput")
	require.NotContains(t, h.lastSent(), "kaput", "the error stays out of the chat")

	require.Equal(t, "deployed", h.replyTo(group1, alice, "/deploy"))
	// Bob's /deploy is not a command for him: an unprompted group message.
	require.Equal(t, gate.IgnoredProactiveOff, h.outcome(h.say(group1, bob, "/deploy")).Code)
	require.Contains(t, h.replyTo(group1, alice, "/help"), "/roll SIDES")
	require.Zero(t, chatCalls(h.model))
}

func TestCommandValidation(t *testing.T) {
	t.Parallel()
	run := func(context.Context, *persona.CommandCall) (string, error) { return "", nil }
	for name, cmds := range map[string][]persona.Command{
		"built-in":  {{Name: "Status", Run: run}},
		"duplicate": {{Name: "a", Run: run}, {Name: "A", Run: run}},
		"bad name":  {{Name: "a b", Run: run}},
		"empty":     {{Name: "", Run: run}},
		"no run":    {{Name: "x"}},
	} {
		_, err := persona.New(persona.Options{DataDir: t.TempDir(), Model: agenttest.New(), Commands: cmds})
		require.Error(t, err, name)
	}
}

func TestPokeReplyWithCooldown(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("hey, that tickles"), agenttest.Reply("again?"))
	h := newHarness(t, model, nil)
	poke := func(id string) channel.Event {
		ev := channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindNotice, Chat: group1, Time: h.clk.Now(),
			Sender: bob, Notice: &channel.Notice{Type: channel.NoticePoke, Operator: "bob", UserID: "bot", TargetMessageID: id}}
		require.NoError(t, h.ch.Inject(t.Context(), ev))
		return ev
	}
	o := h.outcome(poke("1"))
	require.Equal(t, persona.RepliedNotice, o.Code, o.Reason)
	require.Equal(t, "hey, that tickles", h.lastSent())
	req := model.Requests()
	require.Contains(t, lastUserText(req[len(req)-1]), "pokes you")
	require.Empty(t, h.ch.Sent()[0].Out.ReplyTo, "nothing to quote")

	o = h.outcome(poke("2"))
	require.Equal(t, outcome.NoticePoke, o.Code)
	require.Contains(t, o.Reason, "cooldown")
	h.clk.Advance(61 * time.Second)
	require.Equal(t, persona.RepliedNotice, h.outcome(poke("3")).Code)
	require.Len(t, h.ch.Sent(), 2)

	// Someone else poked: recorded only.
	other := channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindNotice, Chat: group1, Time: h.clk.Now(),
		Sender: bob, Notice: &channel.Notice{Type: channel.NoticePoke, Operator: "bob", UserID: "carol"}}
	require.NoError(t, h.ch.Inject(t.Context(), other))
	o = h.outcome(other)
	require.Equal(t, outcome.NoticePoke, o.Code)
	require.Contains(t, o.Reason, "someone else")
}

func lastUserText(req agent.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == agent.RoleUser {
			return req.Messages[i].Content
		}
	}
	return ""
}

func TestWelcomeIsOffUntilTurnedOn(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("welcome, Dan!"))
	h := newHarness(t, model, func(o *persona.Options) { o.Owners = []string{"alice"} })
	join := func(user string) channel.Event {
		ev := channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindNotice, Chat: group1, Time: h.clk.Now(),
			Sender: channel.Sender{ID: user, Name: "Dan"}, Notice: &channel.Notice{Type: channel.NoticeGroupIncrease, UserID: user}}
		require.NoError(t, h.ch.Inject(t.Context(), ev))
		return ev
	}
	o := h.outcome(join("dan"))
	require.Equal(t, outcome.NoticeGroupIncrease, o.Code)
	require.Contains(t, o.Reason, "welcome messages are off")
	require.Contains(t, h.replyTo(group1, alice, "/welcome on"), "welcomed")
	o = h.outcome(join("dan2"))
	require.Equal(t, persona.RepliedNotice, o.Code, o.Reason)
	require.Equal(t, "welcome, Dan!", h.lastSent())
	o = h.outcome(join("dan3"))
	require.Equal(t, outcome.NoticeGroupIncrease, o.Code, "one welcome per minute and group")
	require.Contains(t, o.Reason, "cooldown")
}

func TestFriendRequestsFollowThePolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(), func(o *persona.Options) {
		o.Owners = []string{"alice"}
		o.Notices.FriendRequests = persona.AcceptOwnerFriends
	})
	request := func(user, flag string) channel.Event {
		ev := channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindNotice,
			Chat: channel.Chat{Kind: channel.Private, ID: user}, Time: h.clk.Now(), Sender: channel.Sender{ID: user},
			Notice: &channel.Notice{Type: channel.NoticeFriendRequest, UserID: user, Operator: user, Flag: flag, Comment: "hi"}}
		require.NoError(t, h.ch.Inject(t.Context(), ev))
		return ev
	}
	o := h.outcome(request("alice", "f1"))
	require.Equal(t, persona.NoticeFriendRequest, o.Code)
	require.Contains(t, o.Reason, "accepted")
	o = h.outcome(request("mallory", "f2"))
	require.Equal(t, persona.NoticeFriendRequest, o.Code)
	require.Contains(t, o.Reason, "refused")
	require.Equal(t, []chantest.FriendAnswer{{Flag: "f1", Accept: true}, {Flag: "f2", Accept: false}}, h.ch.FriendAnswers())
	o = h.outcome(request("eve", ""))
	require.Contains(t, o.Reason, "platform refused", "a definitive refusal is recorded, not retried")

	// Offline: the request waits in the queue and is answered once the
	// channel is back.
	h.ch.SetOnline(t.Context(), false)
	late := request("alice", "f3")
	require.Eventually(t, func() bool {
		r, err := h.p.Lookup(t.Context(), late.Key())
		return err == nil && r.Status == inbound.StatusPending
	}, 10*time.Second, 5*time.Millisecond)
	h.clk.Advance(time.Second)
	require.Len(t, h.ch.FriendAnswers(), 2)
	h.ch.SetOnline(t.Context(), true)
	h.advanceUntil(persona.DefaultOfflineRetry, func() bool { return h.has(late) })
	require.Contains(t, h.outcome(late).Reason, "accepted")
	require.Equal(t, chantest.FriendAnswer{Flag: "f3", Accept: true}, h.ch.FriendAnswers()[2])
	require.Zero(t, h.model.Calls())
}

func TestFriendRequestsWithoutPolicyAreRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(), nil)
	ev := channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindNotice,
		Chat: channel.Chat{Kind: channel.Private, ID: "zed"}, Time: h.clk.Now(), Sender: channel.Sender{ID: "zed"},
		Notice: &channel.Notice{Type: channel.NoticeFriendRequest, UserID: "zed", Flag: "f9"}}
	require.NoError(t, h.ch.Inject(t.Context(), ev))
	o := h.outcome(ev)
	require.Equal(t, persona.NoticeFriendRequest, o.Code)
	require.Contains(t, o.Reason, "left for a person")
	require.Empty(t, h.ch.FriendAnswers())
	r, err := h.p.Lookup(t.Context(), ev.Key())
	require.NoError(t, err)
	require.Equal(t, inbound.StatusDone, r.Status)
	require.True(t, strings.HasPrefix(string(o.Code), "notice_"))
}

func TestPrivatePokeFollowsTheAdmission(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(), func(o *persona.Options) {
		o.PrivateAdmission = gate.AdmitOwnerOnly
		o.Owners = []string{"alice"}
	})
	ev := channel.Event{Platform: "chantest", BotID: "bot", Kind: channel.KindNotice, Chat: channel.Chat{Kind: channel.Private, ID: "bob"},
		Time: h.clk.Now(), Notice: &channel.Notice{Type: channel.NoticePoke, Operator: "bob", UserID: "bot"}}
	require.NoError(t, h.ch.Inject(t.Context(), ev))
	o := h.outcome(ev)
	require.Equal(t, outcome.NoticePoke, o.Code)
	require.Contains(t, o.Reason, "owner only")
	require.Zero(t, h.model.Calls())
}

// TestTrailRecordsRouterAndReview: the record of an unprompted message
// that was answered holds the router's rating and the review's verdict.
func TestTrailRecordsRouterAndReview(t *testing.T) {
	t.Parallel()
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("sunny, I heard"))
	h := newHarness(t, model, func(o *persona.Options) {
		o.NoRouter = false
		o.Router = route.RouterFunc(func(context.Context, route.Input) (route.Decision, error) {
			return route.Decision{Reply: true, Code: outcome.RepliedProactive, Reason: "a question for everyone",
				Directed: "no", ChatIn: 0.91, ChatInPass: true}, nil
		})
		o.Reviewer = outbound.ReviewerFunc(func(_ context.Context, p outbound.Proposal) (outbound.Verdict, error) {
			return outbound.Verdict{Send: true, Text: p.Text, Code: outcome.RepliedProactive, Reason: "fits", Rewritten: true}, nil
		})
	})
	o := h.outcome(h.say(group1, bob, "anyone know the weather tomorrow?"))
	require.Equal(t, outcome.RepliedProactive, o.Code, o.Reason)
	require.NotNil(t, o.Trail)
	require.Empty(t, o.Trail.Trigger, "unprompted")
	require.Empty(t, o.Trail.StoppedBy)
	require.Contains(t, o.Trail.Gates, gate.NameSampling, "every gate passed")
	require.Equal(t, &inbound.RouterTrail{Directed: "no", ChatIn: 0.91, ChatInPass: true, Reply: true,
		Code: outcome.RepliedProactive, Reason: "a question for everyone"}, o.Trail.Router)
	require.Equal(t, []inbound.ReviewStep{{Generation: 1, Send: true, Code: outcome.RepliedProactive, Reason: "fits", Rewritten: true}},
		o.Trail.Review)
}

// TestSendOnOpensAGroupWhosePolicyIsOff: /send on lets unprompted
// messages past G10 although the policy turned both switches off; /send
// inherit closes it again.
func TestSendOnOpensAGroupWhosePolicyIsOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agenttest.New(), func(o *persona.Options) {
		o.Owners = []string{"alice"}
		o.NoRouter = false
		o.Router = route.RouterFunc(func(context.Context, route.Input) (route.Decision, error) {
			return route.Decision{Code: "acme_ignored_rated", Reason: "rated"}, nil
		})
		o.Policy.Proactive = gate.Proactive{AnswerQuestions: gate.ToggleOff, ChatIn: gate.ChatOff}
	})
	require.Equal(t, gate.IgnoredProactiveOff, h.outcome(h.say(group1, bob, "hello all")).Code)
	h.replyTo(group1, alice, "/send on")
	require.Equal(t, "acme_ignored_rated", string(h.outcome(h.say(group1, bob, "hello again")).Code), "the router rated it")
	h.replyTo(group1, alice, "/send inherit")
	require.Equal(t, gate.IgnoredProactiveOff, h.outcome(h.say(group1, bob, "and again")).Code)
	require.Contains(t, h.replyTo(group1, alice, "/welcome off"), "no longer welcomed")
}
