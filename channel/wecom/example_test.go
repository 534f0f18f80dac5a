package wecom_test

import (
	"context"
	"fmt"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/chantest"
	"github.com/personakit/persona/channel/wecom"
	"github.com/personakit/persona/channel/wecom/wecomtest"
)

// An AI bot on the long connection, against the fake: a group @-message
// arrives as a mention of the bot, and the reply quoting it answers the
// message with its stream.
func Example() {
	srv := wecomtest.New(wecomtest.Config{Mode: wecomtest.ModeAIBotWS})
	defer srv.Close()
	ch, err := wecom.New(wecom.Config{Mode: wecom.ModeAIBotWS, BotID: srv.BotID(), Secret: srv.BotSecret(),
		BotName: srv.BotName(), WSURL: srv.WSURL()})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sink := chantest.NewRecorder() // persona.Pipeline in a real bot
	go func() { _ = ch.Run(ctx, sink) }()
	if err := srv.WaitSubscribed(ctx); err != nil {
		panic(err)
	}

	group := channel.Chat{Kind: channel.Group, ID: "wrGroup01"}
	if _, err := srv.Push(ctx, wecomtest.Incoming{Chat: group, From: "bob", Text: "在吗？"}); err != nil {
		panic(err)
	}
	_ = sink.Wait(ctx, func(evs, _ []channel.Event, _ []channel.State) bool { return len(evs) == 1 })
	ev := sink.Events()[0]
	fmt.Println(ev.Chat, ev.Sender.ID, ev.Mentions(srv.BotID()), ev.Text())

	if _, err := ch.Send(ctx, channel.Outgoing{Chat: ev.Chat, Text: "在的", ReplyTo: ev.MessageID}); err != nil {
		panic(err)
	}
	sent, _ := srv.WaitSent(ctx, 1)
	fmt.Println(sent[0].Op, sent[0].Text, sent[0].ReplyTo == ev.MessageID)
	// Output:
	// group:wrGroup01 bob true 在吗？
	// aibot_respond_msg 在的 true
}
