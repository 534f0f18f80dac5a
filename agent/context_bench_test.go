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
	g := newGroupChat(1)
	for len(g.history) < 200 {
		g.history = append(g.history, g.userMessage())
		if len(g.history)%4 == 0 {
			g.history = append(g.history, g.botMessage("sounds good, see you at the station"))
		}
	}
	cur := g.userMessage()
	mem := g.memory(20)
	al, err := agent.NewAliaser(testSecret)
	if err != nil {
		b.Fatal(err)
	}
	for _, u := range g.users {
		al.User(u.ID)
	}
	builder := agent.NewContextBuilder(agent.ContextConfig{})
	in := agent.ContextInput{
		Persona: soul, History: g.history, Chat: channel.Chat{Kind: channel.Group, ID: "555000111"},
		Memory: mem, Speaker: agent.Speaker{ID: cur.SenderID, Name: cur.SenderName}, Now: cur.Time, Current: cur, Aliaser: al,
	}
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
// history messages.
func BenchmarkPromptAssemblyPerTurn(b *testing.B) {
	g := newGroupChat(1)
	for len(g.history) < 40 {
		g.history = append(g.history, g.userMessage())
		if len(g.history)%2 == 0 {
			g.history = append(g.history, g.botMessage("sounds good, see you at the station"))
		}
	}
	cur := g.userMessage()
	sums := agent.NewAliasSums(0)
	builder := agent.NewContextBuilder(agent.ContextConfig{})
	in := agent.ContextInput{
		Persona: soul, History: g.history, Chat: channel.Chat{Kind: channel.Group, ID: "555000111"},
		Speaker: agent.Speaker{ID: cur.SenderID, Name: cur.SenderName}, Now: cur.Time, Current: cur,
	}
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
