package dingtalk_test

import (
	"context"
	"fmt"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/dingtalk"
	"github.com/personakit/persona/channel/dingtalk/dingtalktest"
)

// Example runs the adapter against the in-process fake: a group message
// that @-mentions the robot arrives as an event, and the answer goes back
// through the conversation's session webhook. A real bot sets only
// ClientID and ClientSecret.
func Example() {
	srv := dingtalktest.New(dingtalktest.Config{})
	defer srv.Close()

	ch, err := dingtalk.New(dingtalk.Config{
		ClientID:     srv.ClientID(),
		ClientSecret: srv.ClientSecret(),
		APIBase:      srv.URL(), // default: https://api.dingtalk.com
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := make(chan channel.Event, 1)
	go func() {
		_ = ch.Run(ctx, channel.SinkFunc(func(_ context.Context, ev channel.Event) error {
			events <- ev // a real sink stores the event before it returns
			return nil
		}))
	}()
	if err := srv.WaitAccepted(ctx, 1); err != nil {
		fmt.Println(err)
		return
	}

	_, err = srv.Push(ctx, dingtalktest.Incoming{Group: true, ConversationID: "cidExample==",
		From: dingtalktest.User{StaffID: "manager4242", Nick: "Alice"}, Text: "在吗？", MentionBot: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	ev := <-events
	fmt.Printf("%s from %s (%s): %q, to me: %v\n", ev.Chat, ev.Sender.Name, ev.Sender.ID, ev.Text(), ev.ToMe)

	if _, err := ch.Send(ctx, channel.Outgoing{Chat: ev.Chat, Text: "在的", Mentions: []string{ev.Sender.ID}}); err != nil {
		fmt.Println(err)
		return
	}
	sent := srv.Sent()
	fmt.Printf("sent via %s: %q, at %v\n", sent[0].Via, sent[0].Text, sent[0].AtUserIDs)
	// Output:
	// group:cidExample== from Alice (manager4242): " 在吗？", to me: true
	// sent via webhook: "@manager4242 在的", at [manager4242]
}
