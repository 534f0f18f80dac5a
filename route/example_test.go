package route_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/gate/gatetest"
	"github.com/personakit/persona/route"
)

// An embedder replaces the model-rated router with a few lines: here the
// bot answers unprompted questions in its help group only. Set it as
// persona.Options.Router.
func ExampleRouterFunc() {
	var r route.Router = route.RouterFunc(func(_ context.Context, in route.Input) (route.Decision, error) {
		if in.Event.Chat.ID == "help" && strings.HasSuffix(strings.TrimSpace(in.Event.Text()), "?") {
			return route.Decision{Reply: true, Reason: "a question in the help group"}, nil
		}
		return route.Decision{Code: route.IgnoredChatScore, Reason: "not a question in the help group"}, nil
	})

	for _, m := range []struct{ chat, text string }{
		{"help", "how do I reset my password?"},
		{"help", "thanks, it worked"},
		{"random", "anyone seen my keys?"},
	} {
		ev := channel.Event{Chat: channel.Chat{Kind: channel.Group, ID: m.chat}, Segments: []channel.Segment{channel.Text(m.text)}}
		d, _ := r.Route(context.Background(), route.Input{Event: ev})
		fmt.Printf("%-6s %-30q reply=%v %s (%s)\n", m.chat, m.text, d.Reply, d.Code, d.Reason)
	}
	// Output:
	// help   "how do I reset my password?"  reply=true  (a question in the help group)
	// help   "thanks, it worked"            reply=false ignored_chat_score (not a question in the help group)
	// random "anyone seen my keys?"         reply=false ignored_chat_score (not a question in the help group)
}

// The default router asks a model (here a scripted one) to rate the
// message and decides in the documented order.
func ExampleNew() {
	model := agenttest.New().OnPurpose(agent.PurposeRouter, agenttest.Reply("```json\n"+
		`{"candidates":[{"message_id":"c1","relevance":{"directed":"yes","reason":"It asks Mira for a recommendation."},`+
		`"chat_in":{"score":0.6,"reason":"Food talk the bot can help with."}}]}`+"\n```"))
	r, err := route.New(route.Config{Model: model, Flags: gatetest.NewFlags(), Aliases: []string{"Mira"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ev := channel.Event{Platform: "onebot", BotID: "bot", Kind: channel.KindMessage, MessageID: "42",
		Chat: channel.Chat{Kind: channel.Group, ID: "g1"}, Time: time.Now(), Sender: channel.Sender{ID: "u1"},
		Segments: []channel.Segment{channel.Text("does mira know a ramen place?")}}
	d, err := r.Route(context.Background(), route.Input{Event: ev, SessionKey: "default:onebot:bot:group:g1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Reply, d.Directed, d.ChatIn, d.Calls)
	fmt.Println(d.Reason)
	// Output:
	// true yes 0.6 1
	// addressed to the bot: It asks Mira for a recommendation.
}
