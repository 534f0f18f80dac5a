package persona_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/personakit/persona"
	"github.com/personakit/persona/agent"
	"github.com/personakit/persona/agent/agenttest"
	"github.com/personakit/persona/agent/browser"
	"github.com/personakit/persona/agent/openai"
	"github.com/personakit/persona/agent/web"
	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/clock"
	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/schedule"
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

// ExampleCommand registers a chat command answered in code, without the
// chat model. Anyone may use it; OwnerOnly would keep it for the owners.
func ExampleCommand() {
	dir, _ := os.MkdirTemp("", "persona-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bot := chantest.New(chantest.Config{BotID: "bot"})

	roll := persona.Command{
		Name:  "roll",
		Usage: "/roll SIDES – roll a die",
		Run: func(_ context.Context, c *persona.CommandCall) (string, error) {
			sides, err := strconv.Atoi(c.Args)
			if err != nil || sides < 2 {
				return "Usage: /roll SIDES", nil
			}
			return fmt.Sprintf("%s rolled a %d-sided die: %d", c.Event.Sender.Name, sides, sides), nil // a loaded die
		},
	}
	p, err := persona.New(persona.Options{
		Channels: []channel.Channel{bot},
		DataDir:  dir,
		Persona:  "You are Mira.",
		Model:    agenttest.New(), // never called: commands skip the model
		Commands: []persona.Command{roll},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	ev, _ := bot.Say(ctx, channel.Chat{Kind: channel.Group, ID: "g1"}, channel.Sender{ID: "u1", Name: "Ann"}, "/roll 6")
	sent, _ := bot.WaitSent(ctx, 1)
	fmt.Println("bot:", sent[0].Out.Text)
	cancel()
	<-done
	rec, _ := p.Lookup(context.Background(), ev.Key())
	fmt.Println("outcome:", rec.Outcome.Code)
	// Output:
	// bot: Ann rolled a 6-sided die: 6
	// outcome: replied_command
}

// ExamplePipeline_EventCenter serves the event center beside your own
// routes. Everything under it needs the bearer token (the page asks for
// it and keeps a session cookie).
func ExamplePipeline_EventCenter() {
	dir, _ := os.MkdirTemp("", "persona-example")
	defer os.RemoveAll(dir)
	p, err := persona.New(persona.Options{DataDir: dir, Persona: "You are Mira.", Model: agenttest.New()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	center, err := p.EventCenter(eventcenter.Config{Token: "a-long-random-operator-token"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer center.Close()
	mux := http.NewServeMux()
	mux.Handle("/events/", http.StripPrefix("/events", center))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	srv.RegisterOnShutdown(center.Close) // ends the live feeds on shutdown

	req := httptest.NewRequest(http.MethodGet, "/events/api/messages", nil)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, req)
	fmt.Println("without the token:", w.Code)
	req.Header.Set("Authorization", "Bearer a-long-random-operator-token")
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, req)
	fmt.Println("with it:", w.Code)
	// Output:
	// without the token: 401
	// with it: 200
}

// ExamplePipeline_AddSchedule posts a message every morning at 8 in
// Berlin. The clock here is a fake one, moved by hand to the due time.
func ExamplePipeline_AddSchedule() {
	dir, _ := os.MkdirTemp("", "persona-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clock.NewFake(time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)) // 07:00 in Berlin
	bot := chantest.New(chantest.Config{BotID: "bot", Clock: clk})
	model := agenttest.New()
	model.OnPurpose(agent.PurposeChat, agenttest.Reply("Good morning, everyone!"))
	p, err := persona.New(persona.Options{Channels: []channel.Channel{bot}, DataDir: dir, Persona: "You are Mira.",
		Model: model, Clock: clk, NoPacing: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	s, err := p.AddSchedule(ctx, schedule.Schedule{
		ID: "morning", Spec: "0 8 * * *", Zone: "Europe/Berlin", Enabled: true,
		Prompt: "wish the group a good morning",
		Target: schedule.Target{Platform: "chantest", BotID: "bot", Chat: channel.Chat{Kind: channel.Group, ID: "g1"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("next due:", s.NextDue.UTC().Format(time.DateTime))
	clk.Advance(time.Hour)
	sent, _ := bot.WaitSent(ctx, 1)
	fmt.Println("bot:", sent[0].Out.Text)
	cancel()
	<-done
	// Output:
	// next due: 2026-12-04 07:00:00
	// bot: Good morning, everyone!
}

// Example_tools gives the agent a browser: browser_render for everyone and
// the interactive tools for the owners (the tool servers of agent/mcptool
// register the same way). Options.Web adds web_fetch to the same registry.
func Example_tools() {
	dir, _ := os.MkdirTemp("", "persona-example")
	defer os.RemoveAll(dir)

	reg := agent.NewRegistry()
	b, err := browser.New(browser.Config{Bin: "/usr/bin/chromium", Dir: filepath.Join(dir, "browser")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	if err := b.Register(reg); err != nil {
		fmt.Println(err)
		return
	}
	p, err := persona.New(persona.Options{DataDir: dir, Persona: "You are Mira.", Model: agenttest.New(),
		Agent: true, Tools: reg, Web: web.New(web.Config{})})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	fmt.Println(strings.Join(reg.Names(), " "))
	// Output:
	// browser_render browser_open browser_click browser_type browser_scroll browser_screenshot browser_read browser_close web_fetch
}

// ExampleOptions_databaseURL runs one bot as several processes: each
// process starts the same program with the same DatabaseURL (PostgreSQL)
// and a DataDir of its own for its write-failure journal. Any process runs
// any turn; a connection only one process can hold is held by one of them
// at a time, and the others send through it. (Not run here: it needs a
// PostgreSQL server.)
func ExampleOptions_databaseURL() {
	ctx, cancel := signalContext()
	defer cancel()
	adapter := chantest.New(chantest.Config{BotID: "bot"}) // a platform adapter in production
	soul, _ := os.ReadFile("SOUL.md")
	model, _ := openai.New(openai.Config{BaseURL: "http://127.0.0.1:8000/v1", Model: "my-model"})

	p, err := persona.New(persona.Options{
		Channels:    []channel.Channel{adapter},
		DatabaseURL: os.Getenv("PERSONA_DATABASE_URL"), // postgres://bot:secret@db.internal:5432/persona
		DataDir:     "/var/lib/persona",                // this process's write-failure journal
		Persona:     string(soul),
		Model:       model,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	if err := p.Run(ctx); err != nil {
		fmt.Println(err)
	}
}

// signalContext is a context that ends on SIGINT.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}
