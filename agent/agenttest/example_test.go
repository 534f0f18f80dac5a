package agenttest_test

import (
	"context"
	"fmt"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
)

func Example() {
	m := agenttest.New(
		agenttest.ToolCall("web_search", `{"q":"weather in Kyoto"}`),
		agenttest.ReplyWithUsage("Sunny, 24°C.", agent.Usage{InputTokens: 900, CachedInputTokens: 768, OutputTokens: 6}),
	).
		OnPurpose(agent.PurposeRouter, agenttest.Reply(`{"reply":true}`)).
		Otherwise(agenttest.Echo())

	ctx := context.Background()
	ask := func(purpose, text string) {
		resp, err := m.Generate(ctx, agent.Request{
			Purpose:  purpose,
			Messages: []agent.Message{{Role: agent.RoleUser, Content: text}},
		})
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		if len(resp.ToolCalls) > 0 {
			tc := resp.ToolCalls[0]
			fmt.Printf("%s: tool %s %s\n", purpose, tc.Name, tc.Arguments)
			return
		}
		fmt.Printf("%s: %s (cached %d)\n", purpose, resp.Text, resp.Usage.CachedInputTokens)
	}

	ask(agent.PurposeRouter, "what's the weather?")
	ask(agent.PurposeChat, "what's the weather?")
	ask(agent.PurposeChat, "what's the weather?")
	ask(agent.PurposeChat, "thanks")
	fmt.Println("calls:", m.Calls(), "last:", m.Last().Messages[0].Content)
	// Output:
	// proactive_reply_router: {"reply":true} (cached 0)
	// chat: tool web_search {"q":"weather in Kyoto"}
	// chat: Sunny, 24°C. (cached 768)
	// chat: echo: thanks (cached 0)
	// calls: 4 last: thanks
}
