package feishu_test

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/feishu"
	"github.com/personakit/persona/channel/feishu/feishutest"
)

// A long-connection bot against the fake platform: a group message that
// mentions the bot arrives as an event, and the answer replies to it.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := feishutest.New(feishutest.Config{})
	defer srv.Close()

	ch, err := feishu.New(feishu.Config{AppID: srv.AppID(), AppSecret: srv.AppSecret(), BaseURL: srv.URL(), Mode: feishu.ModeWebSocket})
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

	ann := feishutest.User{OpenID: "ou_ann", Name: "Ann"}
	if _, err := srv.Push(ctx, feishutest.Incoming{ChatID: "oc_friends", From: ann, Text: "在吗？👀", MentionBot: true}); err != nil {
		fmt.Println(err)
		return
	}
	ev := <-events
	fmt.Println(ev.Chat, ev.Sender.ID, ev.ToMe, ev.Mentions(ch.BotID()), ev.Text())

	if _, err := ch.Send(ctx, channel.Outgoing{Chat: ev.Chat, Text: "在的", ReplyTo: ev.MessageID, Mentions: []string{ann.OpenID}}); err != nil {
		fmt.Println(err)
		return
	}
	sent, _ := srv.WaitSent(ctx, 1)
	fmt.Println(sent[0].Op, sent[0].MsgType, sent[0].Text, sent[0].ParentID == ev.MessageID)
	// Output:
	// group:oc_friends ou_ann true true  在吗？👀
	// reply text @Ann 在的 true
}

// Webhook mode behind your own HTTPS server: the Channel is the handler
// of the request URL configured in the developer console.
func Example_webhook() {
	ch, err := feishu.New(feishu.Config{
		AppID:             os.Getenv("PERSONA_FEISHU_APP_ID"),
		AppSecret:         os.Getenv("PERSONA_FEISHU_APP_SECRET"),
		VerificationToken: os.Getenv("PERSONA_FEISHU_VERIFICATION_TOKEN"),
		EncryptKey:        os.Getenv("PERSONA_FEISHU_ENCRYPT_KEY"),
		BaseURL:           feishu.LarkBaseURL, // or feishu.FeishuBaseURL (the default)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	http.Handle("/feishu/events", ch)
	// go ch.Run(ctx, pipeline); http.ListenAndServe(...) behind TLS.
}
