package persona_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/agent/openai"
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

// ExampleMediaOptions turns on pictures and voice: a model that takes
// pictures (agent/openai with Vision) and a speech-to-text model on the
// same server. The media cache lives in DataDir/media.
func ExampleMediaOptions() {
	dir, _ := os.MkdirTemp("", "persona-example")
	defer os.RemoveAll(dir)
	base, key := "http://127.0.0.1:11434/v1", "" // a local OpenAI-compatible server
	bot := chantest.New(chantest.Config{BotID: "bot"})

	model, _ := openai.New(openai.Config{BaseURL: base, APIKey: key, Model: "gpt-4o-mini",
		Vision: true}) // the model takes pictures
	speech, _ := openai.NewTranscriber(openai.TranscriberConfig{BaseURL: base, APIKey: key,
		Model: "whisper-1"})

	p, err := persona.New(persona.Options{
		Channels: []channel.Channel{bot},
		DataDir:  dir, // the media cache lives in DataDir/media
		Persona:  "You are Mira.",
		Model:    model,
		Media:    persona.MediaOptions{Transcriber: speech},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	_, err = os.Stat(filepath.Join(dir, "media"))
	fmt.Println("media cache ready:", err == nil)
	// Output: media cache ready: true
}
