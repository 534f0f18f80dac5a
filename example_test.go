package persona_test

import (
	"context"
	"fmt"
	"os"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
)

// ExampleNew embeds a bot: one channel (here the in-memory test channel; a
// platform adapter in production), a persona and a model (here a scripted
// one; agent/openai in production).
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "persona-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	bot := chantest.New(chantest.Config{BotID: "bot"})
	model := agenttest.New(agenttest.Reply("hello there[persona-msg]nice to meet you"))

	p, err := persona.New(persona.Options{
		Channels: []channel.Channel{bot},
		DataDir:  dir, // SQLite database + write-failure journal
		Persona:  "You are Mira, a regular in this chat.",
		Model:    model,
		NoPacing: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	ev, _ := bot.Say(ctx, channel.Chat{Kind: channel.Private, ID: "alice"}, channel.Sender{ID: "alice", Name: "Alice"}, "hi!")
	sent, _ := bot.WaitSent(ctx, 2)
	for _, s := range sent {
		fmt.Println("bot:", s.Out.Text)
	}
	cancel()
	<-done
	rec, _ := p.Lookup(context.Background(), ev.Key())
	fmt.Println("outcome:", rec.Outcome.Code)
	// Output:
	// bot: hello there
	// bot: nice to meet you
	// outcome: replied
}
