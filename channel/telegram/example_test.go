package telegram_test

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/telegram"
	"github.com/personakit/persona/channel/telegram/telegramtest"
)

// A polling bot against the fake Bot API: a group message that mentions
// the bot arrives as an event, and the answer quotes it.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := telegramtest.New(telegramtest.Config{})
	defer srv.Close()

	ch, err := telegram.New(telegram.Config{Token: srv.Token(), APIBase: srv.URL()})
	if err != nil {
		fmt.Println(err)
		return
	}
	events := make(chan channel.Event, 1)
	go func() {
		_ = ch.Run(ctx, channel.SinkFunc(func(_ context.Context, ev channel.Event) error {
			events <- ev // a real Sink (persona.Pipeline) stores it durably first
			return nil
		}))
	}()

	friends := telegramtest.Chat{ID: -1001234, Type: telegramtest.ChatSupergroup, Title: "Friends"}
	ann := telegramtest.User{ID: 7, FirstName: "Ann"}
	if _, err := srv.Push(ctx, telegramtest.Incoming{Chat: friends, From: ann, Text: "are you there? 👀", MentionBot: true}); err != nil {
		fmt.Println(err)
		return
	}
	ev := <-events
	fmt.Println(ev.Chat, ev.Sender.Name, ev.ToMe, ev.Mentions(ch.BotID()), ev.Text())

	if _, err := ch.Send(ctx, channel.Outgoing{Chat: ev.Chat, Text: "yes!", ReplyTo: ev.MessageID}); err != nil {
		fmt.Println(err)
		return
	}
	sent, _ := srv.WaitSent(ctx, 1)
	fmt.Println(sent[0].Method, sent[0].Text, sent[0].ReplyTo)
	// Output:
	// group:-1001234 Ann true true  are you there? 👀
	// sendMessage yes! 1
}

// Webhook mode behind your own HTTPS server: Run registers the webhook
// with the secret token, the Channel is the handler.
func Example_webhook() {
	ch, err := telegram.New(telegram.Config{
		Token:    os.Getenv("PERSONA_TELEGRAM_TOKEN"),
		StateDir: os.Getenv("PERSONA_DATA"),
		Mode:     telegram.ModeWebhook,
		Webhook: telegram.WebhookConfig{
			URL:         "https://bot.example.com/telegram",
			SecretToken: os.Getenv("PERSONA_TELEGRAM_WEBHOOK_SECRET"),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	http.Handle("/telegram", ch)
	// go ch.Run(ctx, pipeline); http.ListenAndServe(...) behind TLS.
}
