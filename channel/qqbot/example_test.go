package qqbot_test

import (
	"context"
	"fmt"
	"time"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/channel/qqbot"
	"github.com/personakit/persona/channel/qqbot/qqbottest"
)

// A bot on the gateway answers a group @-message with a passive reply.
// Against the real platform, leave APIBase and TokenURL at their defaults
// and set AppID and Secret from the QQ bot console (and StateDir, so a
// restart resumes the session).
func ExampleNew() {
	srv := qqbottest.New(qqbottest.Config{})
	defer srv.Close()

	ch, err := qqbot.New(qqbot.Config{
		AppID:    srv.AppID(),
		Secret:   srv.Secret(),
		APIBase:  srv.URL(),
		TokenURL: srv.TokenURL(),
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan channel.Event, 1)
	go func() {
		_ = ch.Run(ctx, channel.SinkFunc(func(_ context.Context, ev channel.Event) error {
			got <- ev
			return nil
		}))
	}()
	if err := srv.WaitConnected(ctx); err != nil {
		panic(err)
	}

	grp := channel.Chat{Kind: channel.Group, ID: "C9F778FE6ADF9D1D1DBE395BF744A33A"}
	alice := channel.Sender{ID: "E4F4AEA33253A2797FB897C50B81D7ED"}
	if _, err := srv.Push(ctx, qqbottest.Incoming{Chat: grp, From: alice, Text: "在吗？"}); err != nil {
		panic(err)
	}
	ev := <-got
	fmt.Println(ev.Chat, ev.Text(), ev.ToMe, ev.Mentions(ch.BotID()))

	if _, err := ch.Send(ctx, channel.Outgoing{Chat: ev.Chat, Text: "在的", ReplyTo: ev.MessageID}); err != nil {
		panic(err)
	}
	sent := srv.Sent()[0]
	fmt.Println(sent.Content, sent.MsgID == ev.MessageID, sent.MsgSeq)
	// Output:
	// group:C9F778FE6ADF9D1D1DBE395BF744A33A 在吗？ true true
	// 在的 true 1
}
