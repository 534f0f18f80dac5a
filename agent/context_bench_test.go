package agent_test

import (
	"testing"

	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/channel"
)

// BenchmarkPromptAssembly builds one turn with 200 history messages and 20
// memory snippets (aliasing on; the Aliaser is the session's, reused across
// turns as the pipeline's cache of it would be).
func BenchmarkPromptAssembly(b *testing.B) {
	g, cur := benchGroup(200, 4)
	mem := g.memory(20)
	al, err := agent.NewAliaser(testSecret)
	if err != nil {
		b.Fatal(err)
	}
	for _, u := range g.users {
		al.User(u.ID)
	}
	builder := agent.NewContextBuilder(agent.ContextConfig{})
	in := benchInput(g, cur)
	in.Memory, in.Aliaser = mem, al
	b.ReportAllocs()
	for b.Loop() {
		asm := builder.Build(in)
		if len(asm.Messages) < 200 {
			b.Fatal("history missing")
		}
	}
}

// BenchmarkPromptAssemblyPerTurn is BenchmarkPromptAssembly as the pipeline
// runs it: every turn a fresh Aliaser over the session's secret, sharing
// the process's AliasSums (so only the maps of the turn are new), with 40
// history messages, which the builder's history cache rendered on an
// earlier turn.
func BenchmarkPromptAssemblyPerTurn(b *testing.B) { benchPerTurn(b, 0) }

// BenchmarkPromptAssemblyPerTurnUncached is BenchmarkPromptAssemblyPerTurn
// without the history cache: every turn renders every history message.
func BenchmarkPromptAssemblyPerTurnUncached(b *testing.B) { benchPerTurn(b, -1) }

func benchPerTurn(b *testing.B, cache int) {
	g, cur := benchGroup(40, 2)
	sums := agent.NewAliasSums(0)
	builder := agent.NewContextBuilder(agent.ContextConfig{HistoryCache: cache})
	in := benchInput(g, cur)
	b.ReportAllocs()
	for b.Loop() {
		al, err := agent.NewAliaserWith(testSecret, sums)
		if err != nil {
			b.Fatal(err)
		}
		in.Aliaser = al
		if asm := builder.Build(in); len(asm.Messages) < 40 {
			b.Fatal("history missing")
		}
	}
}

// benchGroup is a group chat with n history messages, a bot message after
// every botEvery-th, and the current message.
func benchGroup(n, botEvery int) (*groupChat, agent.ChatMessage) {
	g := newGroupChat(1)
	for len(g.history) < n {
		g.history = append(g.history, g.userMessage())
		if len(g.history)%botEvery == 0 {
			g.history = append(g.history, g.botMessage("sounds good, see you at the station"))
		}
	}
	return g, g.userMessage()
}

// benchInput is the turn input of the current message cur in g.
func benchInput(g *groupChat, cur agent.ChatMessage) agent.ContextInput {
	return agent.ContextInput{
		Persona: soul, History: g.history, Chat: channel.Chat{Kind: channel.Group, ID: "555000111"},
		Speaker: agent.Speaker{ID: cur.SenderID, Name: cur.SenderName}, Now: cur.Time, Current: cur,
	}
}
